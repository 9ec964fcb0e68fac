// ExecutionOptions::passes: the executor runs the pipeline on a copy of the
// program when it builds a plan. Programs run with and without it give the
// same bits — the seed model's and an MLP's training steps, control flow,
// random programs — the caller's program is never changed, and fetched
// values that passes merge or fold are still fetched.
#include <cmath>
#include <cstring>

#include "cf_lowering_util.h"
#include "exec/random_program.h"
#include "passes/passes_test_util.h"
#include "kiln/exec/executor.h"
#include "kiln/frontend/frontend.h"
#include "kiln/kernel/random.h"

using namespace kiln;
using kiln_test::same_bits;
using namespace kiln_passes_test;

namespace {

constexpr const char* kPipeline = "dce,cse,fold,simplify";

ExecutionOptions options(const std::string& passes) {
  ExecutionOptions o;
  o.num_threads = 1;
  o.passes = passes;
  return o;
}

Tensor iota(std::vector<std::int64_t> dims, float scale, float shift) {
  Tensor t = Tensor::empty(Dims(dims), DataType::Float32);
  float* p = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = std::sin(float(i) * scale) + shift;
  return t;
}

// Trains (startup, main) for `steps` steps in a fresh executor with
// `passes`; returns every step's fetches, then the final parameters.
std::vector<Tensor> train(const Program& startup, const Program& main_prog, const FeedMap& feed,
                          const std::vector<FetchTarget>& fetch, int steps, const std::string& passes) {
  set_random_seed(1234);
  Executor exe(Place::cpu(), options(passes));
  exe.run(startup);
  std::vector<Tensor> out;
  for (int s = 0; s < steps; ++s)
    for (Tensor& t : exe.run(main_prog, feed, fetch)) out.push_back(std::move(t));
  for (const auto& [name, p] : main_prog.parameters())
    out.push_back(exe.run(main_prog, feed, {FetchTarget(name)})[0]);
  return out;
}

void check_same(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  REQUIRE(a.size() == b.size());
  for (std::size_t k = 0; k < a.size(); ++k) {
    INFO("fetch #" << k << ": " << a[k].to_string() << " vs " << b[k].to_string());
    CHECK(same_bits(a[k], b[k]));
  }
}

}  // namespace

TEST_CASE("the seed model trains to the same bits with and without the pass pipeline",
          "[passes][pipeline]") {
  Program main_prog, startup;
  Value loss;
  {
    UniqueNameGuard names;
    ProgramGuard guard(main_prog, startup);
    auto x = data("x", {16, 16});
    auto label = data("label", {16, 1});
    auto out = nn::Linear(16, 1)(x);
    loss = nn::MSELoss()(out, label);
    optim::Adam(0.01).minimize(loss);
  }
  const std::string before = main_prog.to_string();
  FeedMap feed{{"x", iota({16, 16}, 0.37f, 0.f)}, {"label", iota({16, 1}, 1.3f, 0.5f)}};
  auto plain = train(startup, main_prog, feed, {loss}, 5, "");
  auto passed = train(startup, main_prog, feed, {loss}, 5, kPipeline);
  check_same(plain, passed);
  CHECK(main_prog.to_string() == before);  // the executor optimised a copy
}

TEST_CASE("an MLP with duplicated subexpressions and constants trains to the same bits with the "
          "pipeline, in fewer instructions",
          "[passes][pipeline]") {
  Program main_prog, startup;
  Value loss, dup;
  {
    UniqueNameGuard names;
    ProgramGuard guard(main_prog, startup);
    auto x = data("x", {8, 12});
    auto label = data("label", {8, 4});
    Builder b = main_builder();
    // Constants to fold, identities to simplify, a duplicate to merge.
    Value scale = b.create<MulOp>(full({12}, 0.5), full({12}, 2.0)).result();  // folds to ones
    Value xs = b.create<MulOp>(x, scale).result();                             // then x * 1 → x
    Value h = nn::functional::relu(nn::Linear(12, 16)(xs));
    dup = b.create<TanhOp>(h).result();
    Value h2 = b.create<AddOp>(b.create<TanhOp>(h).result(), dup).result();  // tanh(h) twice
    Value out = nn::Linear(16, 4)(h2);
    loss = nn::MSELoss()(out, label);
    optim::Adam(0.01).minimize(loss);
  }
  FeedMap feed{{"x", iota({8, 12}, 0.21f, 0.1f)}, {"label", iota({8, 4}, 0.7f, 0.f)}};
  auto plain = train(startup, main_prog, feed, {loss, dup}, 4, "");
  auto passed = train(startup, main_prog, feed, {loss, dup}, 4, kPipeline);
  check_same(plain, passed);

  Executor a(Place::cpu(), options("")), b(Place::cpu(), options(kPipeline));
  set_random_seed(1);
  a.run(startup);
  set_random_seed(1);
  b.run(startup);
  a.run(main_prog, feed, {loss});
  b.run(main_prog, feed, {loss});
  CHECK(b.last_core()->num_instructions() < a.last_core()->num_instructions());
}

TEST_CASE("a control-flow program gives the same bits with the pipeline", "[passes][pipeline]") {
  Program main_prog, startup;
  std::vector<Value> out;
  {
    ProgramGuard guard(main_prog, startup);
    Value x = data("x", {4});
    Value i = full({1}, 0.0, DataType::Int64);
    out = while_loop([](const std::vector<Value>& v) { return less_than(v[0], 5); },
                     [](const std::vector<Value>& v) -> std::vector<Value> {
                       Builder b = main_builder();
                       Value one = full({4}, 1.0);
                       Value t = b.create<TanhOp>(b.create<MulOp>(v[1], one).result()).result();
                       Value t2 = b.create<TanhOp>(v[1]).result();  // merged with t's tanh
                       b.create<ExpOp>(v[1]);                       // dead
                       return {increment(v[0]), b.create<AddOp>(t, t2).result()};
                     },
                     {i, x});
    Value sum = main_builder().create<SumOp>(out[1], std::vector<std::int64_t>{0}, true).result();
    Value pred = greater_than(sum, 0.0);
    out.push_back(cond(pred, [&]() -> Value { return main_builder().create<ExpOp>(out[1]).result(); },
                       [&]() -> Value { return main_builder().create<AbsOp>(out[1]).result(); }));
  }
  FeedMap feed{{"x", Tensor::from_vector<float>(Dims({4}), {0.5f, -1.f, 2.f, 0.f})}};
  std::vector<FetchTarget> fetch{out[0], out[1], out[2]};
  // Each also lowered to dataflow ops (the lowering, then the pipeline),
  // bit-identical to its structured run.
  kiln_test::BothWays plain(Place::cpu(), options("")), passed(Place::cpu(), options(kPipeline));
  check_same(plain.run(main_prog, feed, fetch), passed.run(main_prog, feed, fetch));
  CHECK(plain.lowered_runs() == 1);
  CHECK(passed.lowered_runs() == 1);
}

TEST_CASE("200 random programs (in-place updates, random draws, fetched feeds) give the same "
          "bits with the pipeline",
          "[passes][pipeline]") {
  for (std::uint32_t seed = 1; seed <= 200; ++seed) {
    kiln_exec_test::RandomProgram rp;
    kiln_exec_test::make_program(rp, seed);
    INFO("seed " << seed << "\n" << rp.text);
    FeedMap feed;
    for (std::size_t k = 0; k < rp.feed_names.size(); ++k) feed[rp.feed_names[k]] = rp.feeds[k];
    set_random_seed(99);
    Executor plain(Place::cpu(), options(""));
    auto a = plain.run(rp.program, feed, rp.fetch);
    set_random_seed(99);
    Executor passed(Place::cpu(), options(kPipeline));
    auto b = passed.run(rp.program, feed, rp.fetch);
    check_same(a, b);
    CHECK(rp.program.to_string() == rp.text);
  }
}

TEST_CASE("fetched values that CSE merges or folding replaces are still fetched",
          "[passes][pipeline]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{3}).result();
  Value e1 = b.create<ExpOp>(x).result();
  Value e2 = b.create<ExpOp>(x).result();  // merged into e1
  Value c = b.create<AddOp>(b.create<FullOp>(std::vector<std::int64_t>{3}, 1.0).result(),
                            b.create<FullOp>(std::vector<std::int64_t>{3}, 2.0).result())
                .result();  // folded
  Value s = b.create<AddOp>(e2, c).result();
  Executor exe(Place::cpu(), options(kPipeline));
  FeedMap feed{{"x", Tensor::from_vector<float>(Dims({3}), {0.f, 1.f, 2.f})}};
  auto got = exe.run(p, feed, {e1, e2, c, s, "x"});
  Executor plain(Place::cpu(), options(""));
  check_same(got, plain.run(p, feed, {e1, e2, c, s, "x"}));
  CHECK(got[2].to_vector<float>() == std::vector<float>(3, 3.f));
  // The core maps the caller's values onto the optimised copy.
  InterpreterCore* core = exe.last_core();
  CHECK(core->slot_of(e1) == core->slot_of(e2));
  CHECK(core->slot_of(c) != ~0u);
}

TEST_CASE("a bad pipeline in ExecutionOptions is an error at the run naming the pass",
          "[passes][pipeline]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{3}).result();
  Value e = b.create<ExpOp>(x).result();
  Executor exe(Place::cpu(), options("dce,cse,nonsense"));
  FeedMap feed{{"x", Tensor::from_vector<float>(Dims({3}), {0.f, 1.f, 2.f})}};
  KILN_CHECK_ERROR(exe.run(p, feed, {e}), NotFound, {"'nonsense'", "known passes"});
}

TEST_CASE("the executor runs the default pipeline unless told to run none", "[passes][pipeline]") {
  CHECK(ExecutionOptions{}.passes == std::string(kDefaultPasses));
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{3}).result();
  Value e1 = b.create<ExpOp>(x).result();
  Value e2 = b.create<ExpOp>(x).result();
  FeedMap feed{{"x", Tensor::from_vector<float>(Dims({3}), {0.f, 1.f, 2.f})}};
  Executor by_default;
  auto merged = by_default.run(p, feed, {e1, e2});
  CHECK(by_default.last_core()->slot_of(e1) == by_default.last_core()->slot_of(e2));  // cse
  Executor as_written(Place::cpu(), {.passes = ""});
  auto apart = as_written.run(p, feed, {e1, e2});
  CHECK(as_written.last_core()->slot_of(e1) != as_written.last_core()->slot_of(e2));
  for (int k = 0; k < 2; ++k) CHECK(merged[k].to_vector<float>() == apart[k].to_vector<float>());
}

TEST_CASE("values fetched by kiln.fetch name and fed data survive the pipeline",
          "[passes][pipeline]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{3}).result();
  Value one = b.create<FullOp>(std::vector<std::int64_t>{3}, 1.0).result();
  Value y = b.create<MulOp>(x, one).result();  // simplified to x
  Value t1 = b.create<TanhOp>(y).result();
  Value t2 = b.create<TanhOp>(x).result();  // fetched: kept apart from t1
  b.create<FetchOp>(t1, "t1");
  b.create<FetchOp>(t2, "t2", 1);
  b.create<ExpOp>(x);  // dead
  FeedMap feed{{"x", Tensor::from_vector<float>(Dims({3}), {0.5f, -1.f, 2.f})}};
  Executor plain(Place::cpu(), options("")), passed(Place::cpu(), options(kPipeline));
  auto want = plain.run(p, feed, {"t1", "t2", "x"});
  auto got = passed.run(p, feed, {"t1", "t2", "x"});
  check_same(want, got);
  CHECK(passed.last_core()->num_instructions() < plain.last_core()->num_instructions());
}

TEST_CASE("a parameter fetched by name under the pipeline gives its value, though no op reads it",
          "[passes][pipeline]") {
  Program startup, main_prog;
  {
    Builder b(startup);
    b.create<SetParameterOp>(b.create<FullOp>(std::vector<std::int64_t>{2}, 0.5).result(), "w");
  }
  {
    Builder b(main_prog);
    auto w = b.create<ParameterOp>("w", TensorType::get(DataType::Float32, {2}));
    auto x = b.create<DataOp>("x", std::vector<std::int64_t>{2});
    b.create<MulOp>(w.result(), x.result());
  }
  ExecutionOptions o;
  o.passes = "dce,cse,fold,simplify,fuse";
  Executor exe(Place::cpu(), o);
  exe.run(startup);
  const FeedMap feed{{"x", Tensor::from_vector<float>({2}, {4.f, 4.f})}};
  CHECK(exe.run(main_prog, feed, {"w"})[0].to_vector<float>() == std::vector<float>{0.5f, 0.5f});
  CHECK(exe.run(main_prog, feed, {"x"})[0].to_vector<float>() == std::vector<float>{4.f, 4.f});
}

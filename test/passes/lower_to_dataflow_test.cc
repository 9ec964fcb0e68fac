// The "lower_to_dataflow" pass (kiln/passes/lower_to_dataflow.h): programs
// with kiln.if / kiln.while, built with the control-flow frontend, give the
// same results lowered to dataflow ops (run by the frame propagator) as run
// structured; what keeps a program structured.
#include <cstdint>
#include <functional>
#include <vector>

#include "frontend/frontend_test_util.h"
#include <sstream>

#include "cf_lowering_util.h"
#include "kiln/dialect/dataflow_ops.h"
#include "kiln/dialect/debug_ops.h"
#include "kiln/kernel/kernel_registry.h"
#include "kiln/passes/lower_to_dataflow.h"
#include "passes/passes_test_util.h"

using namespace kiln;
using namespace kiln_frontend_test;
namespace F = kiln::nn::functional;

namespace {

Value i64_scalar(double v) { return full({1}, v, DataType::Int64); }
Tensor i64(std::int64_t v) { return Tensor::from_vector<std::int64_t>(Dims({1}), {v}); }

// ticks: i64[1], how many times its kernel ran (1 on its first run). No
// traits: its effects are unknown to the passes.
std::int64_t g_ticks = 0;
struct TicksOp : Op<TicksOp, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "lower_to_dataflow_test.ticks";
  static constexpr int num_operands = 0, num_results = 1;
  static void build(Builder&, OperationArgument&) {}
  static std::vector<Type> infer_meta(const std::vector<Type>&, DictionaryAttribute) {
    return {TensorType::get(DataType::Int64, {1})};
  }
};
KILN_REGISTER_OP(TicksOp);
void ticks_kernel(KernelContext& ctx) {
  ctx.alloc_output(0, Dims({1}), DataType::Int64).data<std::int64_t>()[0] = ++g_ticks;
}
KILN_REGISTER_KERNEL(TicksOp, Cpu, Undefined, ticks_kernel);

// Runs `p` structured and lowered (1 and 2 threads) with each feed set;
// every fetched tensor must be equal.
void check_same(const Program& p, const std::vector<FeedMap>& feeds, const std::vector<FetchTarget>& fetch) {
  REQUIRE(can_lower_to_dataflow(p));
  ExecutionOptions structured;
  structured.num_threads = 1;
  Executor plain(Place::cpu(), structured);
  for (unsigned t : {1u, 2u}) {
    ExecutionOptions o;
    o.num_threads = t;
    o.passes = "lower_to_dataflow";
    Executor lowered(Place::cpu(), o);
    for (const FeedMap& f : feeds) {
      auto want = plain.run(p, f, fetch);
      auto got = lowered.run(p, f, fetch);
      REQUIRE(got.size() == want.size());
      for (std::size_t k = 0; k < want.size(); ++k) {
        INFO("fetch #" << k << ", " << t << " thread(s)");
        CHECK(got[k].dtype() == want[k].dtype());
        CHECK(got[k].dims() == want[k].dims());
        CHECK(got[k].to_string() == want[k].to_string());
      }
    }
  }
}

}  // namespace

TEST_CASE("lowering a while_loop gives the structured results, for zero iterations too",
          "[passes][frames]") {
  GuardedPrograms b;
  Value n = data("n", {1}, DataType::Int64);
  auto outs = while_loop([&](const std::vector<Value>& v) { return less_than(v[0], n); },
                         [&](const std::vector<Value>& v) {
                           return std::vector<Value>{increment(v[0]), add(v[1], full({2}, 0.5))};
                         },
                         {i64_scalar(0), full({2}, 1.0)});
  check_same(b.main, {{{"n", i64(0)}}, {{"n", i64(3)}}, {{"n", i64(10)}}}, {outs[0], outs[1]});
  // The lowered program holds no region, and one frame per loop.
  std::vector<Value> live;
  for (Value v : outs) live.push_back(v);
  kiln_passes_test::run_pipeline(b.main, "lower_to_dataflow", live);
  CHECK(kiln_passes_test::count_ops(b.main, "kiln.while") == 0);
  CHECK(kiln_passes_test::count_ops(b.main, "kiln.next_iteration") == 3);
  CHECK(kiln_passes_test::count_ops(b.main, "kiln.exit") == 2);
  CHECK_NOTHROW(b.main.verify());
}

TEST_CASE("lowering a cond gives the structured results on both branches", "[passes][frames]") {
  GuardedPrograms b;
  Value x = data("x", {1}, DataType::Int64);
  Value y = cond(greater_than(x, 0), [&] { return multiply(x, i64_scalar(2)); },
                 [&] { return add(x, i64_scalar(-1)); });
  // A branch that yields a constant: the constant is live in both branches.
  Value z = cond(greater_than(x, 0), [&] { return i64_scalar(7); }, [&] { return x; });
  check_same(b.main, {{{"x", i64(5)}}, {{"x", i64(-5)}}}, {y, z});
}

TEST_CASE("lowering nested loops and a cond in a loop body gives the structured results",
          "[passes][frames]") {
  GuardedPrograms b;
  Value n = data("n", {1}, DataType::Int64);
  // acc = sum over i < n, j < i of (i == 1 ? i : j)
  auto outs = while_loop(
      [&](const std::vector<Value>& v) { return less_than(v[0], n); },
      [&](const std::vector<Value>& v) {
        Value i = v[0];
        auto inner = while_loop(
            [&](const std::vector<Value>& w) { return less_than(w[0], i); },
            [&](const std::vector<Value>& w) {
              Value odd = equal(i, full({1}, 1, DataType::Int64));
              Value term = cond(odd, [&] { return i; }, [&] { return w[0]; });
              return std::vector<Value>{increment(w[0]), add(w[1], term)};
            },
            {i64_scalar(0), v[1]});
        return std::vector<Value>{increment(i), inner[1]};
      },
      {i64_scalar(0), i64_scalar(0)});
  check_same(b.main, {{{"n", i64(0)}}, {{"n", i64(1)}}, {{"n", i64(5)}}}, {outs[0], outs[1]});
}

TEST_CASE("lowering switch_case gives the structured results for every key", "[passes][frames]") {
  GuardedPrograms b;
  Value k = data("k", {1}, DataType::Int64);
  auto out = switch_case(k,
                         {{1, [&] { return std::vector<Value>{i64_scalar(10)}; }},
                          {2, [&] { return std::vector<Value>{add(k, i64_scalar(20))}; }}},
                         [&] { return std::vector<Value>{i64_scalar(-1)}; });
  check_same(b.main, {{{"k", i64(1)}}, {{"k", i64(2)}}, {{"k", i64(3)}}}, {out[0]});
}

TEST_CASE("a loop with a parameter in its body reads it once, entered as a constant",
          "[passes][frames]") {
  GuardedPrograms b;
  Value n = data("n", {1}, DataType::Int64);
  auto outs = while_loop(
      [&](const std::vector<Value>& v) { return less_than(v[0], n); },
      [&](const std::vector<Value>& v) {
        Value w = create_parameter("w", {2}, DataType::Float32, init::Constant(0.25));
        return std::vector<Value>{increment(v[0]), add(v[1], w)};
      },
      {i64_scalar(0), full({2}, 0.0)});
  ExecutionOptions o;
  o.passes = "lower_to_dataflow";
  Executor plain, lowered(Place::cpu(), o);
  plain.run(b.startup);
  lowered.run(b.startup);
  for (std::int64_t iters : {0, 4}) {
    auto want = plain.run(b.main, {{"n", i64(iters)}}, {outs[1]});
    auto got = lowered.run(b.main, {{"n", i64(iters)}}, {outs[1]});
    CHECK(got[0].to_vector<float>() == want[0].to_vector<float>());
  }
}

TEST_CASE("a program the pass cannot lower as a whole stays structured", "[passes][frames]") {
  GuardedPrograms b;
  auto outs = while_loop([&](const std::vector<Value>& v) { return less_than(v[0], 5); },
                         [&](const std::vector<Value>& v) { return std::vector<Value>{increment(v[0])}; },
                         {i64_scalar(0)}, /*max_iterations=*/3);
  CHECK_FALSE(can_lower_to_dataflow(b.main));
  kiln_passes_test::run_pipeline(b.main, "lower_to_dataflow", {outs[0]});
  CHECK(kiln_passes_test::count_ops(b.main, "kiln.while") == 1);
  ExecutionOptions o;
  o.passes = "lower_to_dataflow";
  Executor exe(Place::cpu(), o);
  KILN_CHECK_ERROR(exe.run(b.main, {}, {outs[0]}), OutOfRange, {"max_iterations"});
}

TEST_CASE("a body op of unknown effects that reads nothing of the loop runs each iteration; the loop "
          "stays structured instead of hoisting it",
          "[passes][frames]") {
  // ticks declares no traits (not ReadOnly): like DCE, the pass must assume
  // it does something each time it runs. Hoisted, it would tick once.
  GuardedPrograms b;
  Value n = data("n", {1}, DataType::Int64);
  auto outs = while_loop([&](const std::vector<Value>& v) { return less_than(v[0], n); },
                         [&](const std::vector<Value>& v) {
                           Value t = main_builder().create<TicksOp>().result();
                           return std::vector<Value>{increment(v[0]), add(v[1], t)};
                         },
                         {i64_scalar(0), i64_scalar(0)});
  CHECK_FALSE(can_lower_to_dataflow(b.main));
  for (const char* passes : {"", "lower_to_dataflow"}) {
    INFO("passes '" << passes << "'");
    g_ticks = 0;
    ExecutionOptions o;
    o.passes = passes;
    Executor exe(Place::cpu(), o);
    auto got = exe.run(b.main, {{"n", i64(3)}}, {outs[1]});
    CHECK(got[0].to_vector<std::int64_t>() == std::vector<std::int64_t>{1 + 2 + 3});
    CHECK(g_ticks == 3);
  }
}

TEST_CASE("lowering a SimpleRNN's loop over tensor arrays gives the structured outputs and state",
          "[passes][frames]") {
  GuardedPrograms b;
  Value x = data("x", {4, 2, 3});
  nn::SimpleRNN rnn(3, 5);
  auto [outputs, last] = rnn(x);
  std::vector<float> xs(24);
  for (std::size_t k = 0; k < xs.size(); ++k) xs[k] = 0.1f * float(k % 7) - 0.3f;
  ExecutionOptions o;
  o.passes = "lower_to_dataflow";
  Executor plain, lowered(Place::cpu(), o);
  plain.run(b.startup);
  // The same weights in both scopes.
  for (const std::string& name : plain.scope().local_var_names())
    if (plain.scope().find_var(name)->is<Tensor>())
      lowered.scope().var(name).set(plain.scope().find_var(name)->get<Tensor>().clone());
  REQUIRE(can_lower_to_dataflow(b.main));
  FeedMap feed{{"x", Tensor::from_vector<float>(Dims({4, 2, 3}), xs)}};
  auto want = plain.run(b.main, feed, {outputs, last});
  auto got = lowered.run(b.main, feed, {outputs, last});
  REQUIRE(got.size() == 2);
  CHECK(got[0].dims() == want[0].dims());
  CHECK(got[0].to_string() == want[0].to_string());
  CHECK(got[1].to_string() == want[1].to_string());
}

TEST_CASE("a body op reading only the loop's captures runs once per iteration lowered too, not "
          "in the iteration that takes the exit",
          "[passes][frames]") {
  // while (i < n) { acc = acc + print(x); i = i + 1 }: the print reads only
  // a capture (a constant of the frame).
  GuardedPrograms b;
  Value n = data("n", {1}, DataType::Int64);
  Value x = data("x", {1}, DataType::Int64);
  auto outs = while_loop([&](const std::vector<Value>& v) { return less_than(v[0], n); },
                         [&](const std::vector<Value>& v) {
                           Value px = main_builder().create<PrintOp>(x, "x", 0).result();
                           return std::vector<Value>{increment(v[0]), add(v[1], px)};
                         },
                         {i64_scalar(0), i64_scalar(0)});
  REQUIRE(can_lower_to_dataflow(b.main));
  for (const char* passes : {"", "lower_to_dataflow"}) {
    INFO("passes '" << passes << "'");
    std::ostringstream os;
    std::ostream* old = set_print_stream(&os);
    ExecutionOptions o;
    o.passes = passes;
    Executor exe(Place::cpu(), o);
    auto got = exe.run(b.main, {{"n", i64(3)}, {"x", i64(5)}}, {outs[1]});
    set_print_stream(old);
    CHECK(got[0].to_vector<std::int64_t>() == std::vector<std::int64_t>{15});
    std::size_t lines = 0;
    for (char c : os.str()) lines += c == '\n';
    CHECK(lines == 3);
  }
}

TEST_CASE("programs the pass leaves structured run the same with it asked for", "[passes][frames]") {
  // A random draw in a loop body that reads nothing of the loop cannot move
  // before it: the program stays structured.
  GuardedPrograms b;
  Value n = data("n", {1}, DataType::Int64);
  auto outs = while_loop(
      [&](const std::vector<Value>& v) { return less_than(v[0], n); },
      [&](const std::vector<Value>& v) {
        Value r = main_builder().create<UniformRandomOp>(std::vector<std::int64_t>{2}, 0.0, 1.0,
                                                         std::int64_t{7}).result();
        return std::vector<Value>{increment(v[0]), add(v[1], r)};
      },
      {i64_scalar(0), full({2}, 0.0)});
  CHECK_FALSE(can_lower_to_dataflow(b.main));
  kiln_test::BothWays exe;
  for (std::int64_t iters : {0, 3}) exe.run(b.main, {{"n", i64(iters)}}, {outs[0]});
  CHECK(exe.kept_structured_runs() == 2);
  CHECK(exe.lowered_runs() == 0);
}

// ---- the automatic choice (auto_lower_to_dataflow, first in the default pipeline) ----

namespace {

// Runs `p` with the default pipeline at `threads` and without automatic
// lowering at 1 thread; the fetches must be bit-identical. Returns whether
// the default pipeline lowered the program (its plan has frames).
bool runs_lowered_by_default(const Program& p, const FeedMap& feed, const std::vector<FetchTarget>& fetch,
                             unsigned threads) {
  ExecutionOptions d;
  d.num_threads = threads;
  Executor automatic(Place::cpu(), d);
  ExecutionOptions s = kiln_test::structured_options(d);
  s.num_threads = 1;
  Executor structured(Place::cpu(), s);
  auto got = automatic.run(p, feed, fetch);
  auto want = structured.run(p, feed, fetch);
  REQUIRE(got.size() == want.size());
  for (std::size_t k = 0; k < want.size(); ++k) CHECK(kiln_test::bit_identical(got[k], want[k]));
  REQUIRE(structured.last_core());
  CHECK(structured.last_core()->plan().frames == nullptr);
  return automatic.last_core()->plan().frames != nullptr;
}

}  // namespace

TEST_CASE("a loop whose iterations each run an expensive op nothing later waits on is lowered "
          "automatically with two threads, not with one",
          "[passes][frames]") {
  // while (i < n) { acc = acc + exp(x); i = i + 1 }: exp(x) (64x256) reads
  // no carried value; the condition needs only i.
  GuardedPrograms b;
  Value n = data("n", {1}, DataType::Int64);
  Value x = data("x", {64, 256});
  auto outs = while_loop([&](const std::vector<Value>& v) { return less_than(v[0], n); },
                         [&](const std::vector<Value>& v) {
                           return std::vector<Value>{increment(v[0]), add(v[1], main_builder().create<ExpOp>(x).result())};
                         },
                         {i64_scalar(0), full({64, 256}, 0.0)});
  CHECK(loops_with_overlapping_iterations(b.main).size() == 1);
  CHECK(auto_lowers_to_dataflow(b.main, 2));
  CHECK_FALSE(auto_lowers_to_dataflow(b.main, 1));
  std::vector<float> xs(64 * 256);
  for (std::size_t k = 0; k < xs.size(); ++k) xs[k] = 0.001f * float(k % 97);
  FeedMap feed{{"n", i64(5)}, {"x", Tensor::from_vector<float>(Dims({64, 256}), xs)}};
  CHECK(runs_lowered_by_default(b.main, feed, {outs[0], outs[1]}, 2));
  CHECK_FALSE(runs_lowered_by_default(b.main, feed, {outs[0], outs[1]}, 1));
  feed["n"] = i64(0);
  CHECK(runs_lowered_by_default(b.main, feed, {outs[0], outs[1]}, 2));
}

TEST_CASE("loops whose iterations cannot overlap stay structured with the default pipeline",
          "[passes][frames]") {
  std::vector<float> hs(32 * 64), ws(64 * 64);
  for (std::size_t k = 0; k < hs.size(); ++k) hs[k] = 0.01f * float(k % 13) - 0.05f;
  for (std::size_t k = 0; k < ws.size(); ++k) ws[k] = 0.002f * float(k % 17) - 0.015f;
  SECTION("a tight counter") {
    GuardedPrograms b;
    Value n = data("n", {1}, DataType::Int64);
    auto outs = while_loop([&](const std::vector<Value>& v) { return less_than(v[0], n); },
                           [&](const std::vector<Value>& v) { return std::vector<Value>{increment(v[0])}; },
                           {i64_scalar(0)});
    CHECK(loops_with_overlapping_iterations(b.main).empty());
    CHECK_FALSE(runs_lowered_by_default(b.main, {{"n", i64(100)}}, {outs[0]}, 2));
  }
  SECTION("an expensive recurrence: h = tanh(h W)") {
    GuardedPrograms b;
    Value n = data("n", {1}, DataType::Int64);
    Value w = data("w", {64, 64});
    auto outs = while_loop([&](const std::vector<Value>& v) { return less_than(v[0], n); },
                           [&](const std::vector<Value>& v) {
                             Value hw = main_builder().create<MatmulOp>(v[1], w).result();
                             return std::vector<Value>{increment(v[0]), F::tanh(hw)};
                           },
                           {i64_scalar(0), data("h0", {32, 64})});
    CHECK(loops_with_overlapping_iterations(b.main).empty());
    FeedMap feed{{"n", i64(4)},
                 {"w", Tensor::from_vector<float>(Dims({64, 64}), ws)},
                 {"h0", Tensor::from_vector<float>(Dims({32, 64}), hs)}};
    CHECK_FALSE(runs_lowered_by_default(b.main, feed, {outs[1]}, 2));
  }
  SECTION("an expensive op the condition waits on") {
    // while (sum(exp(x) * i) < limit) i = i + 1
    GuardedPrograms b;
    Value x = data("x", {64, 256});
    Value limit = data("limit", {1});
    auto outs = while_loop(
        [&](const std::vector<Value>& v) {
          Value e = multiply(main_builder().create<ExpOp>(x).result(), main_builder().create<CastOp>(v[0], DataType::Float32).result());
          Value s = main_builder().create<SumOp>(e, std::vector<std::int64_t>{0, 1}, false).result();
          return less_than(main_builder().create<ReshapeOp>(s, std::vector<std::int64_t>{1}).result(), limit);
        },
        [&](const std::vector<Value>& v) { return std::vector<Value>{increment(v[0])}; },
        {i64_scalar(0)});
    CHECK(loops_with_overlapping_iterations(b.main).empty());
    std::vector<float> xs(64 * 256, 0.0f);
    FeedMap feed{{"x", Tensor::from_vector<float>(Dims({64, 256}), xs)},
                 {"limit", Tensor::from_vector<float>(Dims({1}), {3.0f * 64 * 256})}};
    CHECK_FALSE(runs_lowered_by_default(b.main, feed, {outs[0]}, 2));
  }
}

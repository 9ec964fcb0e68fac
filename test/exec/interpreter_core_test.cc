// InterpreterCore pre-analysis (seed 001 §三): value → variable slots
// (in-place outputs share their input's variable, protected feeds/fetches get
// a copy, views get their own slot), the instruction DAG of the seed's RAW /
// WAR / WAW cases over real ops, the random-op chain, successor kinds, and
// runs of the core built directly.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "exec/exec_test_util.h"

using namespace kiln;
using namespace kiln_exec_test;

namespace {

constexpr std::uint32_t kNone = ~0u;

std::vector<std::uint32_t> succ(const InterpreterCore& core, std::uint32_t i) {
  return core.instruction(i).successors;
}

bool has_edge(const InterpreterCore& core, std::uint32_t a, std::uint32_t b) {
  auto s = succ(core, a);
  return std::find(s.begin(), s.end(), b) != s.end();
}

bool reaches(const InterpreterCore& core, std::uint32_t a, std::uint32_t b) {
  if (a == b) return true;
  for (auto s : succ(core, a))
    if (s <= b && reaches(core, s, b)) return true;
  return false;
}

ExecutionOptions seq_config() {
  ExecutionOptions c;
  c.num_threads = 1;
  c.passes = "";  // the ops as written: the cases look at particular ops' instructions
  return c;
}

}  // namespace

TEST_CASE("each value gets a slot; an in-place sqrt_ shares its input's variable", "[exec]") {
  Program p;
  Builder b(p);
  auto a = b.create<FullOp>(std::vector<std::int64_t>{2, 2}, 16.0);  // op 0
  auto s = b.create<Sqrt_Op>(a.result());                          // op 1
  auto r = b.create<ReluOp>(s.result());                           // op 2
  Scope scope;
  InterpreterCore core(p, scope, {}, {r.result()}, seq_config());
  const auto sa = core.slot_of(a.result()), ss = core.slot_of(s.result()), sr = core.slot_of(r.result());
  REQUIRE(sa != kNone);
  CHECK(sa == ss);
  CHECK(core.variable(sa) == core.variable(ss));
  CHECK(sr != sa);
  auto in = core.instruction(instr_of(core, 1));
  CHECK(in.op_name == "kiln.sqrt_");
  CHECK(in.reads == std::vector<std::uint32_t>{sa});
  CHECK(in.writes == std::vector<std::uint32_t>{sa});

  // The buffer full wrote is the one sqrt_ updated: skip GC to look at it.
  ExecutionOptions cfg = seq_config();
  cfg.skip_gc = {a.result()};
  InterpreterCore core2(p, scope, {}, {r.result()}, cfg);
  auto out = core2.run();
  REQUIRE(out.size() == 1);
  CHECK(out[0].to_vector<float>() == std::vector<float>(4, 4.0f));
  const Tensor& held = core2.variable(core2.slot_of(a.result()))->get<Tensor>();
  CHECK(held.to_vector<float>() == std::vector<float>(4, 4.0f));  // sqrt_ wrote full's buffer
}

TEST_CASE("an in-place op on a fed value works on a copy: the user's tensor is unchanged",
          "[exec]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{3});
  auto s = b.create<Sqrt_Op>(x.result());
  Scope scope;
  InterpreterCore core(p, scope, {"x"}, {s.result()}, seq_config());
  CHECK(core.slot_of(s.result()) != core.slot_of(x.result()));
  Tensor feed = Tensor::from_vector<float>(Dims({3}), {4.f, 9.f, 16.f});
  const void* before = feed.raw_data();
  std::vector<Tensor> feeds{feed};
  auto out = core.run(feeds);
  CHECK(out[0].to_vector<float>() == std::vector<float>{2.f, 3.f, 4.f});
  CHECK(feed.to_vector<float>() == std::vector<float>{4.f, 9.f, 16.f});
  CHECK(feed.raw_data() == before);
  CHECK_FALSE(out[0].shares_buffer_with(feed));
}

TEST_CASE("a fetch observes an in-place op that writes the fetched value after it is made", "[exec]") {
  // x = full(4); sqrt_(x); fetch x: 2, as Paddle's fetch at the end of the
  // program gives (the in-place op writes x's variable).
  Program p;
  Builder b(p);
  auto x = b.create<FullOp>(std::vector<std::int64_t>{2}, 4.0);
  auto z = b.create<Sqrt_Op>(x.result());
  for (unsigned threads : {1u, 2u}) {
    INFO("threads " << threads);
    Executor exe(Place::cpu(), {.num_threads = threads});
    for (int run = 0; run < 3; ++run) {
      auto out = exe.run(p, {}, {x.result()});
      CHECK(out[0].to_vector<float>() == std::vector<float>{2.f, 2.f});
      out = exe.run(p, {}, {x.result(), z.result()});
      CHECK(out[0].to_vector<float>() == std::vector<float>{2.f, 2.f});
      CHECK(out[1].to_vector<float>() == std::vector<float>{2.f, 2.f});
    }
  }
}

TEST_CASE("a kiln.fetch op sees its value as of its place in the program, before a later in-place op",
          "[exec]") {
  Program p;
  Builder b(p);
  auto x = b.create<FullOp>(std::vector<std::int64_t>{2}, 4.0);
  b.create<FetchOp>(x.result(), "before");
  b.create<Sqrt_Op>(x.result());
  for (unsigned threads : {1u, 2u}) {
    INFO("threads " << threads);
    Executor exe(Place::cpu(), {.num_threads = threads});
    auto out = exe.run(p, {}, {"before", x.result()});
    CHECK(out[0].to_vector<float>() == std::vector<float>{4.f, 4.f});
    CHECK(out[1].to_vector<float>() == std::vector<float>{4.f, 4.f});  // sqrt_ wrote a copy
  }
}

TEST_CASE("an in-place op on a parameter updates the parameter", "[exec]") {
  Scope scope;
  scope.var("w").set(Tensor::from_vector<float>(Dims({2}), {9.f, 25.f}));
  Program p;
  Builder b(p);
  auto w = b.create<ParameterOp>("w", TensorType::get(DataType::Float32, {2}));
  auto s = b.create<Sqrt_Op>(w.result());
  InterpreterCore core(p, scope, {}, {s.result()}, seq_config());
  CHECK(core.slot_of(s.result()) == core.slot_of(w.result()));
  CHECK(core.variable(core.slot_of(w.result())) == scope.find_var("w"));
  auto out = core.run();
  CHECK(out[0].to_vector<float>() == std::vector<float>{3.f, 5.f});
  CHECK(scope.find_var("w")->get<Tensor>().to_vector<float>() == std::vector<float>{3.f, 5.f});
  // The fetched value is the caller's own copy: a second run does not change it.
  core.run();
  CHECK(out[0].to_vector<float>() == std::vector<float>{3.f, 5.f});
  CHECK(scope.find_var("w")->get<Tensor>().to_vector<float>()[1] == Approx(std::sqrt(5.f)));
}

TEST_CASE("a view (reshape) gets its own slot and keeps its source buffer alive", "[exec]") {
  Program p;
  Builder b(p);
  auto a = b.create<FullOp>(std::vector<std::int64_t>{2, 3}, 1.5);
  auto v = b.create<ReshapeOp>(a.result(), std::vector<std::int64_t>{6});
  auto r = b.create<ReluOp>(v.result());
  Scope scope;
  ExecutionOptions o = seq_config();
  o.recycle_bytes = 0;  // a is freed after its last user
  InterpreterCore core(p, scope, {}, {r.result(), v.result()}, o);
  CHECK(core.slot_of(v.result()) != core.slot_of(a.result()));
  auto out = core.run();
  CHECK(out[0].to_vector<float>() == std::vector<float>(6, 1.5f));
  CHECK(out[1].to_vector<float>() == std::vector<float>(6, 1.5f));
  // a's variable was freed after its last user; the view still holds the buffer.
  CHECK_FALSE(core.variable(core.slot_of(a.result()))->is_initialized());
  CHECK(out[1].dims().to_vector() == std::vector<std::int64_t>{6});
}

TEST_CASE("an in-place op through a view orders after the view's source readers", "[exec]") {
  // a = full; v = reshape(a); r = relu(a) (reads a); w = relu_(v) writes a's buffer.
  Program p;
  Builder b(p);
  auto a = b.create<FullOp>(std::vector<std::int64_t>{4}, -2.0);        // op 0
  auto v = b.create<ReshapeOp>(a.result(), std::vector<std::int64_t>{2, 2});  // op 1
  auto r = b.create<AbsOp>(a.result());                                    // op 2
  auto w = b.create<Relu_Op>(v.result());                                  // op 3
  Scope scope;
  for (unsigned threads : {1u, 2u}) {
    ExecutionOptions cfg;
    cfg.num_threads = threads;
    auto q = threads > 1 ? std::make_shared<WorkQueue>(threads - 1) : nullptr;
    InterpreterCore core(p, scope, {}, {r.result(), w.result()}, cfg, q);
    CHECK(reaches(core, instr_of(core, 2), instr_of(core, 3)));  // WAR through the alias
    for (int run = 0; run < 50; ++run) {
      auto out = core.run();
      REQUIRE(out[0].to_vector<float>() == std::vector<float>(4, 2.f));
      REQUIRE(out[1].to_vector<float>() == std::vector<float>(4, 0.f));
    }
  }
}

TEST_CASE("the seed's WAR case over real ops: a parameter's reader precedes its writer", "[exec]") {
  // p = parameter w; A: y = relu(p); z = full; B: set_parameter w(z).
  Scope scope;
  scope.var("w").set(Tensor::from_vector<float>(Dims({2}), {-1.f, 1.f}));
  Program p;
  Builder b(p);
  auto w = b.create<ParameterOp>("w", TensorType::get(DataType::Float32, {2}));  // op 0
  auto y = b.create<ReluOp>(w.result());                                         // op 1
  auto z = b.create<FullOp>(std::vector<std::int64_t>{2}, 7.0);                  // op 2
  b.create<SetParameterOp>(z.result(), "w");                                     // op 3
  InterpreterCore core(p, scope, {}, {y.result()}, seq_config());
  const auto A = instr_of(core, 1), Z = instr_of(core, 2), B = instr_of(core, 3);
  CHECK(has_edge(core, A, B));
  CHECK(has_edge(core, Z, B));
  auto out = core.run();
  CHECK(out[0].to_vector<float>() == std::vector<float>{0.f, 1.f});  // A saw the old value
  CHECK(scope.find_var("w")->get<Tensor>().to_vector<float>() == std::vector<float>{7.f, 7.f});
}

TEST_CASE("the seed's WAR case with an in-place writer: W→A, A→B, no W→B", "[exec]") {
  // W: X = full; A: y = relu(X); B: X = sqrt_(X).
  Program p;
  Builder b(p);
  auto X = b.create<FullOp>(std::vector<std::int64_t>{2}, 4.0);  // op 0
  auto y = b.create<NegOp>(X.result());                          // op 1
  auto s = b.create<Sqrt_Op>(X.result());                        // op 2
  Scope scope;
  InterpreterCore core(p, scope, {}, {y.result(), s.result()}, seq_config());
  const auto W = instr_of(core, 0), A = instr_of(core, 1), B = instr_of(core, 2);
  CHECK(has_edge(core, W, A));
  CHECK(has_edge(core, A, B));
  CHECK_FALSE(has_edge(core, W, B));
  CHECK(core.instruction(B).num_predecessors >= 1);
  auto out = core.run();
  CHECK(out[0].to_vector<float>() == std::vector<float>{-4.f, -4.f});
  CHECK(out[1].to_vector<float>() == std::vector<float>{2.f, 2.f});
}

TEST_CASE("the seed's WAW case: set_parameter, two readers, set_parameter", "[exec]") {
  Scope scope;
  Program p;
  Builder b(p);
  auto a = b.create<FullOp>(std::vector<std::int64_t>{2}, 3.0);                  // op 0
  b.create<SetParameterOp>(a.result(), "w");                                      // op 1  B1
  auto w = b.create<ParameterOp>("w", TensorType::get(DataType::Float32, {2}));  // op 2
  auto r1 = b.create<NegOp>(w.result());                                          // op 3  R1
  auto r2 = b.create<AbsOp>(w.result());                                          // op 4  R2
  auto c = b.create<FullOp>(std::vector<std::int64_t>{2}, 5.0);                   // op 5
  b.create<SetParameterOp>(c.result(), "w");                                      // op 6  B2
  InterpreterCore core(p, scope, {}, {r1.result(), r2.result()}, seq_config());
  const auto B1 = instr_of(core, 1), R1 = instr_of(core, 3), R2 = instr_of(core, 4),
             B2 = instr_of(core, 6);
  CHECK(has_edge(core, B1, R1));
  CHECK(has_edge(core, B1, R2));
  CHECK(has_edge(core, R1, B2));
  CHECK(has_edge(core, R2, B2));
  CHECK_FALSE(has_edge(core, B1, B2));
  CHECK(reaches(core, B1, B2));
  for (int run = 0; run < 3; ++run) {
    auto out = core.run();
    CHECK(out[0].to_vector<float>() == std::vector<float>{-3.f, -3.f});
    CHECK(out[1].to_vector<float>() == std::vector<float>{3.f, 3.f});
    CHECK(scope.find_var("w")->get<Tensor>().to_vector<float>() == std::vector<float>{5.f, 5.f});
  }

  // With no reader in between the two writes are ordered directly.
  Program q;
  Builder bq(q);
  auto qa = bq.create<FullOp>(std::vector<std::int64_t>{2}, 3.0);  // op 0
  bq.create<SetParameterOp>(qa.result(), "v");                     // op 1
  auto qc = bq.create<FullOp>(std::vector<std::int64_t>{2}, 5.0);  // op 2
  bq.create<SetParameterOp>(qc.result(), "v");                     // op 3
  InterpreterCore core2(q, scope, {}, {}, seq_config());
  CHECK(has_edge(core2, instr_of(core2, 1), instr_of(core2, 3)));
  core2.run();
  CHECK(scope.find_var("v")->get<Tensor>().to_vector<float>() == std::vector<float>{5.f, 5.f});
}

TEST_CASE("three uniform_random ops with no data relation are chained in program order",
          "[exec]") {
  Program p;
  Builder b(p);
  auto r1 = b.create<UniformRandomOp>(std::vector<std::int64_t>{3}, 0.0, 1.0, 11);  // op 0
  b.create<FullOp>(std::vector<std::int64_t>{3}, 1.0);                               // op 1
  auto r2 = b.create<UniformRandomOp>(std::vector<std::int64_t>{3}, 0.0, 1.0, 12);  // op 2
  auto r3 = b.create<UniformRandomOp>(std::vector<std::int64_t>{3}, 0.0, 1.0, 13);  // op 3
  Scope scope;
  InterpreterCore core(p, scope, {}, {r1.result(), r2.result(), r3.result()}, seq_config());
  const auto i1 = instr_of(core, 0), f = instr_of(core, 1), i2 = instr_of(core, 2), i3 = instr_of(core, 3);
  CHECK(has_edge(core, i1, i2));
  CHECK(has_edge(core, i2, i3));
  CHECK_FALSE(has_edge(core, i1, i3));
  CHECK(core.instruction(f).num_predecessors == 0);
  CHECK_FALSE(reaches(core, f, i2));
}

TEST_CASE("kiln.fetch and set_parameter ops keep program order as side effects", "[exec]") {
  Program p;
  Builder b(p);
  auto a = b.create<FullOp>(std::vector<std::int64_t>{1}, 1.0);  // op 0
  b.create<FetchOp>(a.result(), "a");                             // op 1
  auto c = b.create<FullOp>(std::vector<std::int64_t>{1}, 2.0);  // op 2
  b.create<SetParameterOp>(c.result(), "pc");                     // op 3
  b.create<FetchOp>(c.result(), "c");                             // op 4
  Scope scope;
  InterpreterCore core(p, scope, {}, {"a", "c"}, seq_config());
  CHECK(reaches(core, instr_of(core, 1), instr_of(core, 3)));
  CHECK(reaches(core, instr_of(core, 3), instr_of(core, 4)));
  auto out = core.run();
  CHECK(out[0].to_vector<float>() == std::vector<float>{1.f});
  CHECK(out[1].to_vector<float>() == std::vector<float>{2.f});
}

TEST_CASE("on the CPU every successor is direct and successors come after their instruction",
          "[exec]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{-1, 3});
  auto a = b.create<FullOp>(std::vector<std::int64_t>{2, 3}, 2.0);
  auto s = b.create<AddOp>(a.result(), x.result());
  auto m = b.create<MulOp>(s.result(), a.result());
  auto r = b.create<Relu_Op>(m.result());
  Scope scope;
  InterpreterCore core(p, scope, {"x"}, {r.result()}, seq_config());
  std::size_t edges = 0;
  for (std::uint32_t i = 0; i < core.num_instructions(); ++i) {
    auto in = core.instruction(i);
    REQUIRE(in.successors.size() == in.successor_kinds.size());
    for (std::size_t k = 0; k < in.successors.size(); ++k) {
      CHECK(in.successors[k] > i);
      CHECK(in.successor_kinds[k] == SuccessorKind::Direct);
      ++edges;
    }
  }
  CHECK(edges >= 3);
  std::uint32_t preds_total = 0;
  for (std::uint32_t i = 0; i < core.num_instructions(); ++i) preds_total += core.instruction(i).num_predecessors;
  CHECK(preds_total == edges);
}

TEST_CASE("successor kinds follow the lane table", "[exec]") {
  constexpr Lane h = Lane::host(), s0 = Lane::on_stream(0), s1 = Lane::on_stream(1);
  STATIC_REQUIRE(successor_kind(h, h) == SuccessorKind::Direct);
  STATIC_REQUIRE(successor_kind(h, s0) == SuccessorKind::Direct);
  STATIC_REQUIRE(successor_kind(s0, s0) == SuccessorKind::Direct);
  STATIC_REQUIRE(successor_kind(s0, s1) == SuccessorKind::Event);
  STATIC_REQUIRE(successor_kind(s1, h) == SuccessorKind::Sync);
  CHECK(Lane::of(Place::cpu()) == h);
  CHECK(to_string(SuccessorKind::Sync) == "sync");
}

TEST_CASE("a core runs many times with the same results, sequential or not", "[exec]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{-1, 3});
  auto a = b.create<FullOp>(std::vector<std::int64_t>{2, 3}, 2.0);
  auto s = b.create<AddOp>(a.result(), x.result());
  auto m = b.create<MulOp>(s.result(), s.result());
  Scope scope;
  for (bool sequential : {true, false}) {
    ExecutionOptions cfg;
    if (sequential) cfg.thread_plan = ThreadPlan::Sequential;
    cfg.num_threads = sequential ? 1 : 2;
    auto q = sequential ? nullptr : std::make_shared<WorkQueue>(1);
    InterpreterCore core(p, scope, {"x"}, {m.result()}, cfg, q);
    for (int run = 0; run < 20; ++run) {
      std::vector<Tensor> feeds{filled_f32({2, 3}, float(run))};
      auto out = core.run(feeds);
      const float want = (2.f + float(run)) * (2.f + float(run));
      REQUIRE(out[0].to_vector<float>() == std::vector<float>(6, want));
    }
  }
}

TEST_CASE("a core's feeds are checked: count, shape, dtype", "[exec]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{-1, 3});
  auto r = b.create<ReluOp>(x.result());
  Scope scope;
  InterpreterCore core(p, scope, {"x"}, {r.result()}, seq_config());
  KILN_CHECK_ERROR(core.run(), InvalidArgument, {"expected 1 feeds, got 0"});
  std::vector<Tensor> empty{Tensor()};
  KILN_CHECK_ERROR(core.run(empty), InvalidArgument, {"'x'"});
  std::vector<Tensor> ok{filled_f32({5, 3}, -1.f)};
  CHECK(core.run(ok)[0].to_vector<float>() == std::vector<float>(15, 0.f));
}

TEST_CASE("building a core for a name that matches no data op fails, naming it", "[exec]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{3});
  Scope scope;
  KILN_CHECK_ERROR(InterpreterCore(p, scope, {"x", "nope"}, {x.result()}, seq_config()), NotFound,
                   {"'nope'"});
}

TEST_CASE("a core run with feeds handed over gives the same results and leaves bad feeds untouched",
          "[exec]") {
  using namespace kiln;
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{-1, 2});
  auto y = b.create<ScaleOp>(x.result(), 2.0, 1.0);
  Scope scope;
  ExecutionOptions c;
  c.num_threads = 1;
  InterpreterCore core(p, scope, {"x"}, {y.result()}, c);
  const Tensor in = Tensor::from_vector<float>({1, 2}, {1, 2});
  auto copied = core.run(std::vector<Tensor>{in});  // a temporary: taken over
  std::vector<Tensor> mine{in};
  auto taken = core.run(std::move(mine));
  CHECK(copied[0].to_vector<float>() == std::vector<float>{3, 5});
  CHECK(taken[0].to_vector<float>() == std::vector<float>{3, 5});
  CHECK(in.to_vector<float>() == std::vector<float>{1, 2});  // the caller's own tensor
  // A feed of the wrong dtype is an error before anything is taken.
  std::vector<Tensor> bad{Tensor::from_vector<double>({1, 2}, {1, 2})};
  KILN_CHECK_ERROR(core.run(std::move(bad)), InvalidArgument, {"'x'"});
  REQUIRE(bad.size() == 1);
  CHECK(bad[0].is_initialized());
}

TEST_CASE("an in-place op on a parameter a kiln.fetch op read earlier still updates the parameter",
          "[exec]") {
  Scope scope;
  scope.var("w").set(Tensor::from_vector<float>(Dims({2}), {9.f, 25.f}));
  Program p;
  Builder b(p);
  auto w = b.create<ParameterOp>("w", TensorType::get(DataType::Float32, {2}));
  b.create<FetchOp>(w.result(), "w_before");
  b.create<Sqrt_Op>(w.result());
  InterpreterCore core(p, scope, {}, {"w_before"}, seq_config());
  auto out = core.run();
  CHECK(out[0].to_vector<float>() == std::vector<float>{9.f, 25.f});  // as of the fetch op
  CHECK(scope.find_var("w")->get<Tensor>().to_vector<float>() == std::vector<float>{3.f, 5.f});
}

TEST_CASE("an in-place op through a view of a feed leaves the caller's tensor as it was", "[exec]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{2, 2});
  auto v = b.create<ReshapeOp>(x.result(), std::vector<std::int64_t>{4});
  auto s = b.create<Sqrt_Op>(v.result());
  Scope scope;
  InterpreterCore core(p, scope, {"x"}, {s.result()}, seq_config());
  Tensor feed = Tensor::from_vector<float>(Dims({2, 2}), {4.f, 9.f, 16.f, 25.f});
  auto out = core.run(std::vector<Tensor>{feed});
  CHECK(out[0].to_vector<float>() == std::vector<float>{2.f, 3.f, 4.f, 5.f});
  CHECK(feed.to_vector<float>() == std::vector<float>{4.f, 9.f, 16.f, 25.f});
}

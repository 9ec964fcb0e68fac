// The executor runs programs built from the dataflow ops (kiln.switch,
// kiln.merge, kiln.enter, kiln.exit, kiln.next_iteration) with frames and
// iterations (kiln/exec/frame_propagator.h): loops, nested loops, dead
// values, parallel_iterations, per-iteration memory, and the errors of
// ill-formed programs.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "exec/exec_test_util.h"
#include "exec/run_test_util.h"
#include "kiln/dialect/dataflow_ops.h"
#include "kiln/exec/step_stats.h"
#include "kiln/runtime/allocator.h"
#include "kiln/runtime/cancellation.h"
#include "kiln/runtime/cpu_allocator.h"

using namespace kiln;
using namespace kiln_exec_test;

namespace {

using Dims0 = std::vector<std::int64_t>;

// Identity that counts the kernels of its kind running at once (the most
// seen: g_busy_peak) and stays until another one runs beside it, or for
// `micros` at most: where two may overlap they do, however loaded the
// machine.
std::atomic<int> g_busy{0}, g_busy_peak{0};
struct BusyOp : Op<BusyOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "frames_test.busy";
  static constexpr int num_operands = 1, num_results = 1;
  KILN_ATTRIBUTES((std::int64_t, micros));
  static void build(Builder&, OperationArgument& arg, Value x, std::int64_t micros) {
    arg.add_operand(x);
    arg.attributes = to_named_attributes(Attributes{micros});
  }
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute) { return {in.at(0)}; }
};
KILN_REGISTER_OP(BusyOp);
void busy_kernel(KernelContext& ctx) {
  // acq_rel / acquire / relaxed: the counters only count; the peak is read
  // after the run, which the run's end orders after every kernel.
  const int now = g_busy.fetch_add(1, std::memory_order_acq_rel) + 1;
  int peak = g_busy_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_busy_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(ctx.attrs<BusyOp>().micros);
  while (g_busy.load(std::memory_order_acquire) < 2 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  int seen = g_busy.load(std::memory_order_acquire);
  peak = g_busy_peak.load(std::memory_order_relaxed);
  while (seen > peak && !g_busy_peak.compare_exchange_weak(peak, seen, std::memory_order_relaxed)) {
  }
  ctx.output(0) = ctx.input(0);
  g_busy.fetch_sub(1, std::memory_order_acq_rel);
}
KILN_REGISTER_KERNEL(BusyOp, Cpu, Undefined, busy_kernel);

Value constant(Builder& b, double v, DataType dt, Dims0 shape = {}) {
  return b.create<FullOp>(shape, v, dt).result();
}

Tensor i64(std::int64_t v) { return Tensor::from_vector<std::int64_t>(Dims(), {v}); }

// A loop over carried values in frame `name`, built from the five ops:
//   carried = enter(inits); while (cond(carried)) carried = body(carried)
// `constants` enter as is_constant values. Returns the exits' values.
struct DataflowLoop {
  using CondFn = std::function<Value(Builder&, const std::vector<Value>& carried,
                                     const std::vector<Value>& constants)>;
  using BodyFn = std::function<std::vector<Value>(Builder&, const std::vector<Value>& carried,
                                                  const std::vector<Value>& constants)>;
  static std::vector<Value> build(Builder& b, const std::string& name, std::int64_t parallel,
                                  const std::vector<Value>& inits, const std::vector<Value>& constants,
                                  const CondFn& cond, const BodyFn& body) {
    std::vector<Value> merged, consts, exits, taken;
    for (Value c : constants) consts.push_back(b.create<EnterOp>(c, name, true, parallel).result());
    for (Value v : inits) {
      Value in = b.create<EnterOp>(v, name, false, parallel).result();
      merged.push_back(b.create<MergeOp>(std::vector<Value>{in}).output());
    }
    Value pred = cond(b, merged, consts);
    for (Value m : merged) {
      auto sw = b.create<SwitchOp>(m, pred);
      exits.push_back(b.create<ExitOp>(sw.output_false()).result());
      taken.push_back(sw.output_true());
    }
    std::vector<Value> next = body(b, taken, consts);
    for (std::size_t k = 0; k < next.size(); ++k) b.create<NextIterationOp>(next[k], merged[k]);
    return exits;
  }
  // The condition of a counted loop: carried[0] < constants[0].
  static Value counter_below_bound(Builder& bb, const std::vector<Value>& c, const std::vector<Value>& k) {
    return bb.create<LessThanOp>(c[0], k[0]).result();
  }
};

// i = 0; while (i < n) i = i + 1, with n fed.
struct Counter {
  Program p;
  Value result;
  explicit Counter(std::int64_t parallel = 10) {
    Builder b(p);
    Value n = b.create<DataOp>("n", Dims0{}, DataType::Int64).result();
    Value one = constant(b, 1, DataType::Int64);
    result = DataflowLoop::build(
        b, "count", parallel, {constant(b, 0, DataType::Int64)}, {n, one},
        DataflowLoop::counter_below_bound,
        [](Builder& bb, const std::vector<Value>& c, const std::vector<Value>& k) {
          return std::vector<Value>{bb.create<AddOp>(c[0], k[1]).result()};
        })[0];
  }
};

ExecutionOptions frame_threads(unsigned n) {
  ExecutionOptions o;
  o.num_threads = n;
  o.thread_plan = n == 1 ? ThreadPlan::Sequential : ThreadPlan::Graph;
  return o;
}

std::int64_t scalar(const Tensor& t) { return t.to_vector<std::int64_t>().at(0); }

}  // namespace

TEST_CASE("a while (i < 10) built from the five dataflow ops returns 10", "[exec][frames]") {
  Counter c;
  REQUIRE_NOTHROW(c.p.verify());
  for (unsigned t : {1u, 2u}) {
    Executor exe(Place::cpu(), frame_threads(t));
    CHECK(scalar(exe.run(c.p, {{"n", i64(10)}}, {c.result})[0]) == 10);
    CHECK(scalar(exe.run(c.p, {{"n", i64(0)}}, {c.result})[0]) == 0);  // no iteration
    CHECK(scalar(exe.run(c.p, {{"n", i64(3)}}, {c.result})[0]) == 3);
  }
}

TEST_CASE("a loop constant carried by next_iteration, switch and exit leaves the loop as its value",
          "[exec][frames]") {
  // x = zeros[3]; while (i < n) { x = k; i = i + 1 }, k fed and entered as a
  // constant: the constant's value goes round the loop and out of its frame.
  for (std::int64_t parallel : {1, 10}) {
    Program p;
    Builder b(p);
    Value n = b.create<DataOp>("n", Dims0{}, DataType::Int64).result();
    Value k = b.create<DataOp>("k", Dims0{3}).result();
    std::vector<Value> out = DataflowLoop::build(
        b, "loop", parallel, {constant(b, 0, DataType::Int64), constant(b, 0, DataType::Float32, {3})},
        {n, constant(b, 1, DataType::Int64), k},
        [](Builder& bb, const std::vector<Value>& c, const std::vector<Value>& ks) {
          return bb.create<LessThanOp>(c[0], ks[0]).result();
        },
        [](Builder& bb, const std::vector<Value>& c, const std::vector<Value>& ks) {
          // k itself, through a switch on a predicate of the body (a loop is
          // dead in all its values or in none).
          Value live = bb.create<LessThanOp>(c[0], ks[0]).result();
          return std::vector<Value>{bb.create<AddOp>(c[0], ks[1]).result(),
                                    bb.create<SwitchOp>(ks[2], live).output_true()};
        });
    Value doubled = b.create<ScaleOp>(out[1], 2.0, 0.0).result();
    for (unsigned t : {1u, 2u}) {
      Executor exe(Place::cpu(), frame_threads(t));
      const Tensor fed = Tensor::from_vector<float>({3}, {1, 2, 3});
      for (std::int64_t iters : {5, 0, 3}) {
        auto r = exe.run(p, {{"n", i64(iters)}, {"k", fed}}, {out[0], out[1], doubled});
        CHECK(scalar(r[0]) == iters);
        const std::vector<float> x = iters ? std::vector<float>{1, 2, 3} : std::vector<float>{0, 0, 0};
        CHECK(r[1].to_vector<float>() == x);
        CHECK(r[2].to_vector<float>() == std::vector<float>{2 * x[0], 2 * x[1], 2 * x[2]});
      }
      CHECK(fed.to_vector<float>() == std::vector<float>{1, 2, 3});
    }
  }
}

TEST_CASE("a loop whose body reads views of its carried value updates it the same in every iteration",
          "[exec][frames]") {
  // x = zeros[4]; while (i < n) { x = reshape(reshape(x, [2, 2]) + 1, [4]); i = i + 1 }:
  // the views share their source's buffer, which a later iteration's
  // output must not write while they read it.
  Program p;
  Builder b(p);
  Value n = b.create<DataOp>("n", Dims0{}, DataType::Int64).result();
  std::vector<Value> out = DataflowLoop::build(
      b, "loop", 10, {constant(b, 0, DataType::Int64), constant(b, 0, DataType::Float32, {4})},
      {n, constant(b, 1, DataType::Int64)},
      DataflowLoop::counter_below_bound,
      [](Builder& bb, const std::vector<Value>& c, const std::vector<Value>& k) {
        Value square = bb.create<ReshapeOp>(c[1], Dims0{2, 2}).result();
        Value added = bb.create<ScaleOp>(square, 1.0, 1.0).result();
        Value flat = bb.create<ReshapeOp>(added, Dims0{4}).result();
        Value twice = bb.create<ScaleOp>(square, 2.0, 0.0).result();  // a second reader of the view
        Value back = bb.create<ScaleOp>(bb.create<ReshapeOp>(twice, Dims0{4}).result(), 0.0, 0.0).result();
        return std::vector<Value>{bb.create<AddOp>(c[0], k[1]).result(), bb.create<AddOp>(flat, back).result()};
      });
  for (unsigned t : {1u, 2u}) {
    Executor exe(Place::cpu(), frame_threads(t));
    for (std::int64_t iters : {7, 100, 2}) {
      auto r = exe.run(p, {{"n", i64(iters)}}, {out[0], out[1]});
      CHECK(scalar(r[0]) == iters);
      const float v = static_cast<float>(iters);
      CHECK(r[1].to_vector<float>() == std::vector<float>{v, v, v, v});
    }
  }
}

TEST_CASE("a view of a feed in a program with dataflow ops is a value, not an in-place write",
          "[exec][frames]") {
  Counter c;
  Builder b(c.p);
  Value x = b.create<DataOp>("x", Dims0{2, 3}).result();
  Value v = b.create<ReshapeOp>(x, Dims0{3, 2}).result();  // views the feed
  Value w = b.create<ScaleOp>(v, 2.0, 0.0).result();
  for (unsigned t : {1u, 2u}) {
    Executor exe(Place::cpu(), frame_threads(t));
    auto out = exe.run(c.p, {{"n", i64(4)}, {"x", Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6})}},
                       {c.result, v, w});
    CHECK(scalar(out[0]) == 4);
    CHECK(out[1].dims() == Dims{3, 2});
    CHECK(out[2].to_vector<float>() == std::vector<float>{2, 4, 6, 8, 10, 12});
  }
}

TEST_CASE("a switch on a false predicate kills its true output and merge forwards the false branch",
          "[exec][frames]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", Dims0{}, DataType::Int64).result();
  Value pred = b.create<DataOp>("pred", Dims0{}, DataType::Bool).result();
  auto sw = b.create<SwitchOp>(x, pred);
  // Each branch counts its runs through a kiln op: the dead one never runs.
  Value on_false = b.create<AddOp>(sw.output_false(), constant(b, 1, DataType::Int64)).result();
  Value on_true = b.create<AddOp>(sw.output_true(), constant(b, 100, DataType::Int64)).result();
  auto m = b.create<MergeOp>(std::vector<Value>{on_true, on_false});
  Executor exe;
  auto run = [&](bool p_value) {
    return exe.run(p, {{"x", i64(5)}, {"pred", Tensor::from_vector<bool>(Dims(), {p_value})}},
                   {m.output(), m.value_index()});
  };
  auto f = run(false);
  CHECK(scalar(f[0]) == 6);
  CHECK(scalar(f[1]) == 1);
  auto t = run(true);
  CHECK(scalar(t[0]) == 105);
  CHECK(scalar(t[1]) == 0);
}

TEST_CASE("a merge whose inputs are all dead is dead, and a merge of it and a live value takes the live one",
          "[exec][frames]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", Dims0{}, DataType::Int64).result();
  Value pred = b.create<DataOp>("pred", Dims0{}, DataType::Bool).result();
  auto sw = b.create<SwitchOp>(x, pred);
  Value t1 = b.create<AddOp>(sw.output_true(), constant(b, 1, DataType::Int64)).result();
  Value t2 = b.create<AddOp>(sw.output_true(), constant(b, 2, DataType::Int64)).result();
  auto all_true = b.create<MergeOp>(std::vector<Value>{t1, t2});
  auto either = b.create<MergeOp>(std::vector<Value>{all_true.output(), sw.output_false()});
  Executor exe;
  FeedMap off{{"x", i64(5)}, {"pred", Tensor::from_vector<bool>(Dims(), {false})}};
  auto r = exe.run(p, off, {either.output(), either.value_index()});
  CHECK(scalar(r[0]) == 5);
  CHECK(scalar(r[1]) == 1);
  KILN_CHECK_ERROR(exe.run(p, off, {all_true.output()}), InvalidArgument, {"fetch #0", "kiln.merge", "dead"});
  FeedMap on{{"x", i64(5)}, {"pred", Tensor::from_vector<bool>(Dims(), {true})}};
  CHECK(scalar(exe.run(p, on, {either.output()})[0]) >= 6);
}

TEST_CASE("a switch whose predicate holds more than one element at run time is a clear error",
          "[exec][frames]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", Dims0{}, DataType::Int64).result();
  Value pred = b.create<DataOp>("pred", Dims0{-1}, DataType::Bool).result();
  auto sw = b.create<SwitchOp>(x, pred);
  auto m = b.create<MergeOp>(std::vector<Value>{sw.output_false(), sw.output_true()});
  Executor exe;
  KILN_CHECK_ERROR(exe.run(p, {{"x", i64(1)}, {"pred", Tensor::from_vector<bool>(Dims({2}), {true, false})}},
                           {m.output()}),
                   InvalidArgument, {"kiln.switch", "predicate", "one element", "[2]"});
  CHECK(scalar(exe.run(p, {{"x", i64(1)}, {"pred", Tensor::from_vector<bool>(Dims({1}), {true})}},
                       {m.output()})[0]) == 1);
}

TEST_CASE("a fetch of a dead value is a clear error", "[exec][frames]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", Dims0{}, DataType::Int64).result();
  Value pred = b.create<DataOp>("pred", Dims0{}, DataType::Bool).result();
  auto sw = b.create<SwitchOp>(x, pred);
  Value on_true = b.create<AddOp>(sw.output_true(), constant(b, 1, DataType::Int64)).result();
  Executor exe;
  auto feeds = [](bool v) {
    return FeedMap{{"x", i64(5)}, {"pred", Tensor::from_vector<bool>(Dims(), {v})}};
  };
  KILN_CHECK_ERROR(exe.run(p, feeds(false), {on_true}), InvalidArgument, {"fetch #0", "kiln.add", "dead"});
  CHECK(scalar(exe.run(p, feeds(true), {on_true})[0]) == 6);  // the state is usable after the error
}

TEST_CASE("nested dataflow loops run the inner loop once per outer iteration", "[exec][frames]") {
  // acc = 0; for (i = 0; i < 3; ++i) for (j = 0; j < 4; ++j) acc += 1
  for (std::int64_t parallel : {1, 10}) {
    Program p;
    Builder b(p);
    Value zero = constant(b, 0, DataType::Int64), one = constant(b, 1, DataType::Int64);
    Value three = constant(b, 3, DataType::Int64), four = constant(b, 4, DataType::Int64);
    Value acc = DataflowLoop::build(
        b, "outer", parallel, {zero, zero}, {three, one, zero, four},
        DataflowLoop::counter_below_bound,
        [parallel](Builder& bb, const std::vector<Value>& c, const std::vector<Value>& k) {
          Value inner_acc = DataflowLoop::build(
              // j starts at i - i: like every op of the body, dead when the
              // outer loop exits (a loop is dead in all its values or in none).
              bb, "inner", parallel, {bb.create<SubOp>(c[0], c[0]).result(), c[1]}, {k[3], k[1]},
              [](Builder& ib, const std::vector<Value>& ic, const std::vector<Value>& ik) {
                return ib.create<LessThanOp>(ic[0], ik[0]).result();
              },
              [](Builder& ib, const std::vector<Value>& ic, const std::vector<Value>& ik) {
                return std::vector<Value>{ib.create<AddOp>(ic[0], ik[1]).result(),
                                          ib.create<AddOp>(ic[1], ik[1]).result()};
              })[1];
          return std::vector<Value>{bb.create<AddOp>(c[0], k[1]).result(), inner_acc};
        })[1];
    REQUIRE_NOTHROW(p.verify());
    for (unsigned t : {1u, 2u}) {
      Executor exe(Place::cpu(), frame_threads(t));
      CHECK(scalar(exe.run(p, {}, {acc})[0]) == 12);
      CHECK(scalar(exe.run(p, {}, {acc})[0]) == 12);
    }
  }
}

TEST_CASE("a dataflow loop of 10^5 iterations runs in constant memory", "[exec][frames]") {
  // x = zeros[256]; while (i < n) { x = x * 0.5 + 1; i = i + 1 }
  Program p;
  Builder b(p);
  Value n = b.create<DataOp>("n", Dims0{}, DataType::Int64).result();
  std::vector<Value> out = DataflowLoop::build(
      b, "loop", 10, {constant(b, 0, DataType::Int64), constant(b, 0, DataType::Float32, {256})},
      {n, constant(b, 1, DataType::Int64)},
      DataflowLoop::counter_below_bound,
      [](Builder& bb, const std::vector<Value>& c, const std::vector<Value>& k) {
        return std::vector<Value>{bb.create<AddOp>(c[0], k[1]).result(),
                                  bb.create<ScaleOp>(c[1], 0.5, 1.0).result()};
      });
  Executor exe(Place::cpu(), frame_threads(1));
  auto& alloc = cpu_allocator();
  auto run = [&](std::int64_t iters) { return exe.run(p, {{"n", i64(iters)}}, {out[0], out[1]}); };
  run(10);  // the plan
  alloc.reset_peak();
  auto base = alloc.bytes_in_use();
  auto few = run(10);
  const auto peak_few = alloc.peak_bytes_in_use() - base;
  const auto after_few = alloc.bytes_in_use() - base;
  few.clear();
  alloc.reset_peak();
  base = alloc.bytes_in_use();
  auto many = run(100000);
  CHECK(alloc.peak_bytes_in_use() - base <= peak_few);
  CHECK(alloc.bytes_in_use() - base == after_few);
  CHECK(scalar(many[0]) == 100000);
  CHECK(many[1].to_vector<float>()[0] == Approx(2.0f));
}

TEST_CASE("parallel_iterations bounds how many iterations of a loop run at once", "[exec][frames]") {
  // Each iteration's busy op reads only a constant: nothing orders iterations
  // but the counter, so they overlap up to parallel_iterations.
  auto peak_with = [](std::int64_t parallel, unsigned t) {
    Program p;
    Builder b(p);
    Value x = constant(b, 1, DataType::Float32);
    std::vector<Value> out = DataflowLoop::build(
        b, "loop", parallel, {constant(b, 0, DataType::Int64)},
        {constant(b, 6, DataType::Int64), constant(b, 1, DataType::Int64), x},
        DataflowLoop::counter_below_bound,
        [](Builder& bb, const std::vector<Value>& c, const std::vector<Value>& k) {
          bb.create<BusyOp>(k[2], 50000);
          return std::vector<Value>{bb.create<AddOp>(c[0], k[1]).result()};
        });
    ExecutionOptions o = frame_threads(t);
    o.passes = "";  // the busy op's result goes unread: dce would drop it
    Executor exe(Place::cpu(), o);
    g_busy_peak.store(0);
    CHECK(scalar(exe.run(p, {}, {out[0]})[0]) == 6);
    return g_busy_peak.load();
  };
  CHECK(peak_with(1, 2) == 1);
  CHECK(peak_with(2, 2) == 2);
  CHECK(peak_with(4, 1) == 1);  // one thread: one kernel at a time whatever the frame allows
}

TEST_CASE("ill-formed frames are clear errors naming the op", "[exec][frames]") {
  SECTION("a value used inside a frame without entering it") {
    Program p;
    Builder b(p);
    Value top = constant(b, 1, DataType::Int64);
    Value in = b.create<EnterOp>(constant(b, 0, DataType::Int64), "loop", false, 10).result();
    Value sum = b.create<AddOp>(in, top).result();
    b.create<ExitOp>(sum);
    Executor exe;
    KILN_CHECK_ERROR(exe.run(p, {}, {}), InvalidArgument, {"kiln.add", "frame 'loop'", "the top level", "kiln.enter"});
  }
  SECTION("an exit at the top level") {
    Program p;
    Builder b(p);
    b.create<ExitOp>(constant(b, 1, DataType::Int64));
    Executor exe;
    KILN_CHECK_ERROR(exe.run(p, {}, {}), InvalidArgument, {"kiln.exit", "top level"});
  }
  SECTION("a fetch of a value inside a frame") {
    Counter c;
    Operation* add = nullptr;
    for (Operation* op : c.p.block())
      if (op->isa<AddOp>()) add = op;
    Executor exe;
    KILN_CHECK_ERROR(exe.run(c.p, {{"n", i64(3)}}, {add->result(0)}), InvalidArgument,
                     {"fetch", "kiln.add", "frame 'count'", "kiln.exit"});
  }
  SECTION("an op of more than 64 outputs in a program with dataflow ops") {
    // The propagator keeps each op's dead and forwarded outputs as 64-bit masks.
    Program p;
    Builder b(p);
    Value in = b.create<EnterOp>(constant(b, 0, DataType::Int64), "loop", false, 10).result();
    Value x = b.create<FullOp>(std::vector<std::int64_t>{65}, 1.0).result();
    auto parts = b.create<SplitOp>(x, std::int64_t{65});
    b.create<ExitOp>(in);
    Executor exe(Place::cpu(), {.passes = ""});
    KILN_CHECK_ERROR(exe.run(p, {}, {parts->result(64)}), InvalidArgument, {"kiln.split", "65 outputs", "64"});
  }
  SECTION("enters of one frame that disagree on parallel_iterations") {
    Program p;
    Builder b(p);
    b.create<EnterOp>(constant(b, 0, DataType::Int64), "loop", false, 10);
    b.create<EnterOp>(constant(b, 0, DataType::Int64), "loop", true, 2);
    Executor exe;
    KILN_CHECK_ERROR(exe.run(p, {}, {}), InvalidArgument, {"kiln.enter", "'loop'", "parallel_iterations"});
  }
  SECTION("an op waiting for a value that never reaches its iteration stops the run, no hang") {
    // One = enter(1) without is_constant reaches iteration 0 only: the add
    // of iteration 1 waits for it forever.
    Program p;
    Builder b(p);
    Value in = b.create<EnterOp>(constant(b, 0, DataType::Int64), "loop", false, 10).result();
    Value one = b.create<EnterOp>(constant(b, 1, DataType::Int64), "loop", false, 10).result();
    Value three = b.create<EnterOp>(constant(b, 3, DataType::Int64), "loop", true, 10).result();
    auto m = b.create<MergeOp>(std::vector<Value>{in});
    auto sw = b.create<SwitchOp>(m.output(), b.create<LessThanOp>(m.output(), three).result());
    Value out = b.create<ExitOp>(sw.output_false()).result();
    b.create<NextIterationOp>(b.create<AddOp>(sw.output_true(), one).result(), m.output());
    for (unsigned t : {1u, 2u}) {
      Executor exe(Place::cpu(), frame_threads(t));
      KILN_CHECK_ERROR(exe.run(p, {}, {out}), InvalidArgument, {"never arrives", "is_constant"});
    }
  }
}

TEST_CASE("programs with and without dataflow ops run side by side in one executor", "[exec][frames]") {
  Program p;
  Builder b(p);
  Value x = b.create<AddOp>(constant(b, 1, DataType::Int64), constant(b, 2, DataType::Int64)).result();
  Executor exe;
  CHECK(scalar(exe.run(p, {}, {x})[0]) == 3);
  Counter c;
  CHECK(scalar(exe.run(c.p, {{"n", i64(4)}}, {c.result})[0]) == 4);
  CHECK(scalar(exe.run(p, {}, {x})[0]) == 3);
}

TEST_CASE("step stats of a dataflow loop give each op run its frame and iteration", "[exec][frames]") {
  Counter c;
  Executor exe(Place::cpu(), frame_threads(1));
  StepStats stats;
  CHECK(scalar(exe.run(c.p, {{"n", i64(3)}}, {c.result}, stats)[0]) == 3);
  std::vector<std::int64_t> adds, lesses;
  for (const NodeStats& n : stats.nodes) {
    if (n.op_name == "kiln.add") {
      CHECK(n.frame == "count");
      adds.push_back(n.iteration);
    }
    if (n.op_name == "kiln.less_than") lesses.push_back(n.iteration);
    if (n.op_name == "kiln.full") CHECK(n.frame.empty());
    CHECK(n.end_ns >= n.start_ns);
  }
  std::sort(adds.begin(), adds.end());
  std::sort(lesses.begin(), lesses.end());
  CHECK(adds == std::vector<std::int64_t>{0, 1, 2});  // the exit iteration's add is dead: not run
  CHECK(lesses == std::vector<std::int64_t>{0, 1, 2, 3});
  CHECK_THAT(to_chrome_trace(stats), Catch::Contains("\"frame\":\"count\",\"iteration\":2"));
}

TEST_CASE("a profiled dataflow loop's Chrome trace gives each op run its frame and iteration",
          "[exec][frames]") {
  Counter c;
  for (unsigned t : {1u, 2u}) {
    ExecutionOptions o = frame_threads(t);
    o.profile = true;
    Executor exe(Place::cpu(), o);
    CHECK(scalar(exe.run(c.p, {{"n", i64(3)}}, {c.result})[0]) == 3);
    REQUIRE(exe.last_core());
    const std::string trace = exe.last_core()->chrome_trace();
    CHECK_THAT(trace, Catch::Contains("\"name\":\"kiln.add\",\"cat\":\"op\""));
    CHECK_THAT(trace, Catch::Contains(",\"frame\":\"count\",\"iteration\":2}"));
    CHECK_THAT(trace, Catch::Contains(",\"frame\":\"count\",\"iteration\":3}"));  // the last less_than
    CHECK_THAT(trace, !Catch::Contains("\"iteration\":4"));
    // The next run's trace holds that run only.
    exe.run(c.p, {{"n", i64(1)}}, {c.result});
    CHECK_THAT(exe.last_core()->chrome_trace(), !Catch::Contains("\"iteration\":2"));
  }
}

TEST_CASE("run_async runs a dataflow loop and hands its result to done", "[exec][frames]") {
  Counter c;
  for (unsigned t : {1u, 2u}) {
    Executor exe(Place::cpu(), frame_threads(t));
    DoneRecord rec;
    exe.run_async(c.p, {{"n", i64(7)}}, {c.result}, {}, rec.callback());
    REQUIRE(rec.wait());
    REQUIRE_FALSE(rec.error());
    REQUIRE(rec.fetched().size() == 1);
    CHECK(scalar(rec.fetched()[0]) == 7);
  }
}

TEST_CASE("a dataflow loop whose body runs asynchronous kernels counts as without them", "[exec][frames]") {
  // Each iteration: one asynchronous identity that completes inline, one
  // that completes 200 us later on another thread.
  Program p;
  Builder b(p);
  Value n = b.create<DataOp>("n", Dims0{}, DataType::Int64).result();
  Value out = DataflowLoop::build(
      b, "async", 4, {constant(b, 0, DataType::Int64)}, {n, constant(b, 1, DataType::Int64)},
      DataflowLoop::counter_below_bound,
      [](Builder& bb, const std::vector<Value>& c, const std::vector<Value>& k) {
        Value now = bb.create<AsyncIdentityOp>(c[0], 0).result();
        Value later = bb.create<AsyncIdentityOp>(now, 200).result();
        return std::vector<Value>{bb.create<AddOp>(later, k[1]).result()};
      })[0];
  RunOptions bounded;
  bounded.timeout = std::chrono::seconds(10);  // a run that waits for ever fails instead
  for (unsigned t : {1u, 2u}) {
    INFO("threads " << t);
    Executor exe(Place::cpu(), frame_threads(t));
    CHECK(scalar(exe.run(p, {{"n", i64(20)}}, {out}, bounded)[0]) == 20);
    CHECK(scalar(exe.run(p, {{"n", i64(0)}}, {out}, bounded)[0]) == 0);
    DoneRecord rec;
    exe.run_async(p, {{"n", i64(5)}}, {out}, {}, rec.callback());
    REQUIRE(rec.wait(std::chrono::milliseconds(10000)));
    REQUIRE_FALSE(rec.error());
    CHECK(scalar(rec.fetched().at(0)) == 5);
  }
}

TEST_CASE("a cancelled run stops in the middle of a dataflow loop, and the next run starts clean",
          "[exec][frames]") {
  // Each iteration takes ~1 ms (a busy op the counter waits for): 10^5 of
  // them would take minutes.
  Program p;
  Builder b(p);
  Value n = b.create<DataOp>("n", Dims0{}, DataType::Int64).result();
  Value out = DataflowLoop::build(
      b, "slow", 1, {constant(b, 0, DataType::Int64)}, {n, constant(b, 1, DataType::Int64)},
      DataflowLoop::counter_below_bound,
      [](Builder& bb, const std::vector<Value>& c, const std::vector<Value>& k) {
        Value slow = bb.create<BusyOp>(c[0], 1000).result();
        return std::vector<Value>{bb.create<AddOp>(slow, k[1]).result()};
      })[0];
  for (unsigned t : {1u, 2u}) {
    Executor exe(Place::cpu(), frame_threads(t));
    CancellationManager cancel;
    RunOptions options;
    options.cancellation = &cancel;
    std::thread canceller([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      cancel.start_cancel();
    });
    const auto t0 = std::chrono::steady_clock::now();
    KILN_CHECK_ERROR(exe.run(p, {{"n", i64(100000)}}, {out}, options), Cancelled, {});
    canceller.join();
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
    CHECK(scalar(exe.run(p, {{"n", i64(3)}}, {out})[0]) == 3);
  }
}

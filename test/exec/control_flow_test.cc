// The executor runs kiln.if and kiln.while (kiln/exec/control_flow.h): each
// region a child plan, loop-carried values rebound without copies, body
// temporaries freed every iteration, max_iterations, errors with the path of
// ops into the region. Programs are built with the IR builder here; the
// frontend's cond / while_loop have tests of their own. Each program also
// runs lowered to dataflow ops (BothWays, test/cf_lowering_util.h): the
// results must be bit-identical.
#include <cstdint>
#include <functional>
#include <vector>

#include "cf_lowering_util.h"
#include "exec/exec_test_util.h"
#include "kiln/dialect/control_flow_ops.h"
#include "kiln/runtime/allocator.h"
#include "kiln/runtime/cpu_allocator.h"

using namespace kiln;
using namespace kiln_exec_test;
using kiln_test::BothWays;

namespace {

using Dims0 = std::vector<std::int64_t>;

Value constant(Builder& b, double v, DataType dt, Dims0 shape = {}) {
  return b.create<FullOp>(shape, v, dt).result();
}

// A while op: `inits` carried, `captures` read; body(args) returns
// {next_cond, next...} built with the body block's builder.
using BodyFn = std::function<std::vector<Value>(Builder&, const std::vector<Value>& carried,
                                                const std::vector<Value>& captured)>;
Operation* make_while(Builder& b, Value cond, const std::vector<Value>& inits,
                      const std::vector<Value>& captures, const BodyFn& body,
                      std::int64_t max_iterations = -1) {
  auto w = b.create<WhileOp>(cond, inits, captures, max_iterations);
  Block& blk = w->region(0).emplace_block();
  std::vector<Value> carried, captured;
  for (Value v : inits) carried.push_back(blk.add_argument(v.type()));
  for (Value v : captures) captured.push_back(blk.add_argument(v.type()));
  Builder bb(blk);
  bb.create<YieldOp>(body(bb, carried, captured));
  return w.operation();
}

using BranchFn = std::function<std::vector<Value>(Builder&, const std::vector<Value>& captured)>;
Operation* make_if(Builder& b, Value pred, const std::vector<Value>& captures,
                   const std::vector<Type>& results, const BranchFn& then_fn,
                   const BranchFn& else_fn) {
  auto op = b.create<IfOp>(pred, captures, results);
  for (std::uint32_t r = 0; r < 2; ++r) {
    Block& blk = op->region(r).emplace_block();
    std::vector<Value> captured;
    for (Value v : captures) captured.push_back(blk.add_argument(v.type()));
    Builder bb(blk);
    bb.create<YieldOp>((r == 0 ? then_fn : else_fn)(bb, captured));
  }
  return op.operation();
}

// i = 0; while (i < n) i = i + 1; with n fed (an i64 scalar).
struct Counter {
  Program p;
  Operation* loop = nullptr;
  explicit Counter(std::int64_t max_iterations = -1) {
    Builder b(p);
    Value n = b.create<DataOp>("n", Dims0{}, DataType::Int64).result();
    Value i0 = constant(b, 0, DataType::Int64);
    Value c0 = b.create<LessThanOp>(i0, n).result();
    loop = make_while(
        b, c0, {i0}, {n},
        [](Builder& bb, const std::vector<Value>& c, const std::vector<Value>& cap) {
          Value i1 = bb.create<AddOp>(c[0], constant(bb, 1, DataType::Int64)).result();
          return std::vector<Value>{bb.create<LessThanOp>(i1, cap[0]).result(), i1};
        },
        max_iterations);
  }
  Tensor n(std::int64_t v) const { return Tensor::from_vector<std::int64_t>(Dims(), {v}); }
};

ExecutionOptions sequential_options() {
  ExecutionOptions o;
  o.num_threads = 1;
  return o;
}

}  // namespace

TEST_CASE("a counter while (i < 10) returns 10, and 0 iterations return the initial value",
          "[exec][cf]") {
  Counter c;
  REQUIRE_NOTHROW(c.p.verify());
  for (unsigned threads : {1u, 2u}) {
    ExecutionOptions o;
    o.num_threads = threads;
    BothWays exe(Place::cpu(), o);
    CHECK(exe.run(c.p, {{"n", c.n(10)}}, {c.loop->result(0)})[0].to_vector<std::int64_t>() ==
          std::vector<std::int64_t>{10});
    CHECK(exe.run(c.p, {{"n", c.n(0)}}, {c.loop->result(0)})[0].to_vector<std::int64_t>() ==
          std::vector<std::int64_t>{0});
    CHECK(exe.run(c.p, {{"n", c.n(3)}}, {c.loop->result(0)})[0].to_vector<std::int64_t>() ==
          std::vector<std::int64_t>{3});
  }
}

TEST_CASE("fibonacci by while: carried values are permuted each iteration", "[exec][cf]") {
  // (a, b, k) = (0, 1, 0); while (k < n) (a, b, k) = (b, a + b, k + 1)
  Program p;
  Builder b(p);
  Value n = b.create<DataOp>("n", Dims0{}, DataType::Int64).result();
  Value a0 = constant(b, 0, DataType::Int64), b0 = constant(b, 1, DataType::Int64),
        k0 = constant(b, 0, DataType::Int64);
  Operation* w = make_while(
      b, b.create<LessThanOp>(k0, n).result(), {a0, b0, k0}, {n},
      [](Builder& bb, const std::vector<Value>& c, const std::vector<Value>& cap) {
        Value sum = bb.create<AddOp>(c[0], c[1]).result();
        Value k1 = bb.create<AddOp>(c[2], constant(bb, 1, DataType::Int64)).result();
        return std::vector<Value>{bb.create<LessThanOp>(k1, cap[0]).result(), c[1], sum, k1};
      });
  REQUIRE_NOTHROW(p.verify());
  BothWays exe(Place::cpu(), sequential_options());
  const std::vector<std::int64_t> fib = {0, 1, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89};
  for (std::int64_t k = 0; k <= 10; ++k) {
    auto out = exe.run(p, {{"n", Tensor::from_vector<std::int64_t>(Dims(), {k})}},
                       {w->result(0), w->result(1)});
    CHECK(out[0].to_vector<std::int64_t>()[0] == fib[k]);
    CHECK(out[1].to_vector<std::int64_t>()[0] == fib[k + 1]);
  }
}

TEST_CASE("a while whose body is only the condition's update leaves the other values as they were",
          "[exec][cf]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", Dims0{3}).result();
  Value i0 = constant(b, 0, DataType::Int64);
  Value lim = constant(b, 5, DataType::Int64);
  Operation* w = make_while(
      b, b.create<LessThanOp>(i0, lim).result(), {i0, x}, {lim},
      [](Builder& bb, const std::vector<Value>& c, const std::vector<Value>& cap) {
        Value i1 = bb.create<AddOp>(c[0], constant(bb, 1, DataType::Int64)).result();
        return std::vector<Value>{bb.create<LessThanOp>(i1, cap[0]).result(), i1, c[1]};
      });
  BothWays exe(Place::cpu(), sequential_options());
  Tensor xt = Tensor::from_vector<float>(Dims({3}), {1, 2, 3});
  auto out = exe.run(p, {{"x", xt}}, {w->result(0), w->result(1)});
  CHECK(out[0].to_vector<std::int64_t>() == std::vector<std::int64_t>{5});
  CHECK(out[1].to_vector<float>() == std::vector<float>{1, 2, 3});
  CHECK(xt.to_vector<float>() == std::vector<float>{1, 2, 3});
}

TEST_CASE("nested loops: an inner while in the outer body sums i*j", "[exec][cf]") {
  // s = 0; for i in [0, 4): for j in [0, 3): s += i * j  → 3 * (0+1+2) * ... = 18
  Program p;
  Builder b(p);
  const DataType f = DataType::Float32;
  Value i0 = constant(b, 0, f), s0 = constant(b, 0, f), four = constant(b, 4, f),
        three = constant(b, 3, f);
  Operation* outer = make_while(
      b, b.create<LessThanOp>(i0, four).result(), {i0, s0}, {four, three},
      [&](Builder& ob, const std::vector<Value>& oc, const std::vector<Value>& ocap) {
        Value j0 = constant(ob, 0, f);
        Operation* inner = make_while(
            ob, ob.create<LessThanOp>(j0, ocap[1]).result(), {j0, oc[1]}, {oc[0], ocap[1]},
            [&](Builder& ib, const std::vector<Value>& ic, const std::vector<Value>& icap) {
              Value prod = ib.create<MulOp>(icap[0], ic[0]).result();
              Value s1 = ib.create<AddOp>(ic[1], prod).result();
              Value j1 = ib.create<AddOp>(ic[0], constant(ib, 1, f)).result();
              return std::vector<Value>{ib.create<LessThanOp>(j1, icap[1]).result(), j1, s1};
            });
        Value i1 = ob.create<AddOp>(oc[0], constant(ob, 1, f)).result();
        return std::vector<Value>{ob.create<LessThanOp>(i1, ocap[0]).result(), i1,
                                  inner->result(1)};
      });
  REQUIRE_NOTHROW(p.verify());
  BothWays exe(Place::cpu(), sequential_options());
  auto out = exe.run(p, {}, {outer->result(1)});
  CHECK(out[0].to_vector<float>() == std::vector<float>{18});
}

TEST_CASE("an if runs the branch its fed condition picks, and branches may differ in shape",
          "[exec][cf]") {
  Program p;
  Builder b(p);
  Value pred = b.create<DataOp>("pred", Dims0{}, DataType::Bool).result();
  Value x = b.create<DataOp>("x", Dims0{-1}).result();
  Operation* op = make_if(
      b, pred, {x}, {TensorType::get(DataType::Float32, {-1})},
      [](Builder& bb, const std::vector<Value>& cap) {  // then: x * 2
        return std::vector<Value>{bb.create<ScaleOp>(cap[0], 2.0, 0.0).result()};
      },
      [](Builder& bb, const std::vector<Value>& cap) {  // else: concat(x, x)
        return std::vector<Value>{bb.create<ConcatOp>(std::vector<Value>{cap[0], cap[0]}, 0).result()};
      });
  REQUIRE_NOTHROW(p.verify());
  BothWays exe(Place::cpu(), sequential_options());
  Tensor xt = Tensor::from_vector<float>(Dims({2}), {1, 2});
  auto yes = exe.run(p, {{"pred", Tensor::from_vector<bool>(Dims(), {true})}, {"x", xt}},
                     {op->result(0)});
  CHECK(yes[0].to_vector<float>() == std::vector<float>{2, 4});
  auto no = exe.run(p, {{"pred", Tensor::from_vector<bool>(Dims(), {false})}, {"x", xt}},
                    {op->result(0)});
  CHECK(no[0].to_vector<float>() == std::vector<float>{1, 2, 1, 2});
  // Yielding a captured value hands out the caller's tensor itself.
  Operation* pass = make_if(
      b, pred, {x}, {TensorType::get(DataType::Float32, {-1})},
      [](Builder&, const std::vector<Value>& cap) { return std::vector<Value>{cap[0]}; },
      [](Builder&, const std::vector<Value>& cap) { return std::vector<Value>{cap[0]}; });
  auto same = exe.run(p, {{"pred", Tensor::from_vector<bool>(Dims(), {true})}, {"x", xt}},
                      {pass->result(0)});
  CHECK(same[0].shares_buffer_with(xt));
}

TEST_CASE("a condition fed as float, or with two elements, is a clear error naming the op",
          "[exec][cf]") {
  Program p;
  Builder b(p);
  Value pred = b.create<DataOp>("pred", Dims0{}, DataType::Float32).result();
  Value x = constant(b, 1, DataType::Float32, {2});
  KILN_CHECK_ERROR(make_if(
                       b, pred, {x}, {x.type()},
                       [](Builder&, const std::vector<Value>& c) { return c; },
                       [](Builder&, const std::vector<Value>& c) { return c; })
                       ->verify(),
                   InvalidArgument, {"kiln.if", "bool tensor of one element", "f32"});
  // A -1 dim passes the verifier; the run checks what is fed.
  Program q;
  Builder bq(q);
  Value pq = bq.create<DataOp>("pred", Dims0{-1}, DataType::Bool).result();
  Value xq = constant(bq, 1, DataType::Float32, {2});
  Operation* op = make_if(
      bq, pq, {xq}, {xq.type()}, [](Builder&, const std::vector<Value>& c) { return c; },
      [](Builder&, const std::vector<Value>& c) { return c; });
  REQUIRE_NOTHROW(q.verify());
  BothWays exe(Place::cpu(), sequential_options());
  KILN_CHECK_ERROR(
      exe.run(q, {{"pred", Tensor::from_vector<bool>(Dims({2}), {true, false})}}, {op->result(0)}),
      InvalidArgument, {"kiln.if", "bool tensor of one element"});
}

TEST_CASE("max_iterations bounds a runaway loop with a clear error, and nothing is leaked",
          "[exec][cf]") {
  Counter c(/*max_iterations=*/100);
  BothWays exe(Place::cpu(), sequential_options());
  CHECK(exe.run(c.p, {{"n", c.n(100)}}, {c.loop->result(0)})[0].to_vector<std::int64_t>() ==
        std::vector<std::int64_t>{100});
  // The lowering leaves a bounded loop structured: both runs are the control-flow runner's.
  CHECK(exe.kept_structured_runs() == 1);
  CHECK(exe.lowered_runs() == 0);
  auto& alloc = cpu_allocator();
  const auto before = alloc.bytes_in_use();
  KILN_CHECK_ERROR(exe.run(c.p, {{"n", c.n(1000)}}, {c.loop->result(0)}), OutOfRange,
                   {"kiln.while", "max_iterations = 100"});
  CHECK(alloc.bytes_in_use() <= before);
  // The executor is still usable.
  CHECK(exe.run(c.p, {{"n", c.n(7)}}, {c.loop->result(0)})[0].to_vector<std::int64_t>() ==
        std::vector<std::int64_t>{7});
}

TEST_CASE("an error inside a loop body names the path of ops into it", "[exec][cf]") {
  // while (i < 2) { i = i + 1; y = matmul(a, b) } with a [2,3], b fed [4,2].
  Program p;
  Builder b(p);
  Value bm = b.create<DataOp>("b", Dims0{-1, 2}).result();
  Value a = constant(b, 1, DataType::Float32, {2, 3});
  Value i0 = constant(b, 0, DataType::Int64), two = constant(b, 2, DataType::Int64);
  Operation* w = make_while(
      b, b.create<LessThanOp>(i0, two).result(), {i0}, {two, a, bm},
      [](Builder& bb, const std::vector<Value>& c, const std::vector<Value>& cap) {
        Value i1 = bb.create<AddOp>(c[0], constant(bb, 1, DataType::Int64)).result();
        bb.create<MatmulOp>(cap[1], cap[2]);
        return std::vector<Value>{bb.create<LessThanOp>(i1, cap[0]).result(), i1};
      });
  ExecutionOptions options = sequential_options();
  options.passes = "";  // the body's matmul has no reader: dce would remove the failing op
  BothWays exe(Place::cpu(), options);
  std::uint32_t index = 0;  // the while's position in the program
  for (Operation* o = w->prev_in_block(); o; o = o->prev_in_block()) ++index;
  const std::string at = "while#" + std::to_string(index) + " > body > matmul#2";
  auto msg = KILN_CHECK_ERROR(
      exe.run(p, {{"b", Tensor::from_vector<float>(Dims({4, 2}), std::vector<float>(8, 1))}},
              {w->result(0)}),
      InvalidArgument, {at});
  CHECK_THAT(msg, Catch::Contains("failed:"));
  auto ok = exe.run(p, {{"b", Tensor::from_vector<float>(Dims({3, 2}), std::vector<float>(6, 1))}},
                    {w->result(0)});
  CHECK(ok[0].to_vector<std::int64_t>() == std::vector<std::int64_t>{2});
}

TEST_CASE("10^5 iterations run in the memory of two: nothing grows, nothing is allocated per "
          "iteration",
          "[exec][cf]") {
  // Computing x' from x needs both: from the second iteration on, the loop
  // double-buffers its carried value (the first reads the caller's).
  // x = zeros[256]; while (i < n) { x = x * 0.5 + 1; i = i + 1 }
  Program p;
  Builder b(p);
  Value n = b.create<DataOp>("n", Dims0{}, DataType::Int64).result();
  Value x0 = constant(b, 0, DataType::Float32, {256});
  Value i0 = constant(b, 0, DataType::Int64);
  Operation* w = make_while(
      b, b.create<LessThanOp>(i0, n).result(), {i0, x0}, {n},
      [](Builder& bb, const std::vector<Value>& c, const std::vector<Value>& cap) {
        Value half = bb.create<ScaleOp>(c[1], 0.5, 1.0).result();
        Value x1 = bb.create<MulOp>(half, constant(bb, 1, DataType::Float32, {256})).result();
        Value i1 = bb.create<AddOp>(c[0], constant(bb, 1, DataType::Int64)).result();
        return std::vector<Value>{bb.create<LessThanOp>(i1, cap[0]).result(), i1, x1};
      });
  Executor exe(Place::cpu(), sequential_options());
  auto& alloc = cpu_allocator();
  auto run = [&](std::int64_t iters) {
    return exe.run(p, {{"n", Tensor::from_vector<std::int64_t>(Dims(), {iters})}},
                   {w->result(0), w->result(1)});
  };
  run(1);  // plan, buffers
  alloc.reset_peak();
  auto base = alloc.bytes_in_use();
  auto two = run(2);
  const auto peak_two = alloc.peak_bytes_in_use() - base;
  const auto after_two = alloc.bytes_in_use() - base;
  two.clear();
  alloc.reset_peak();
  base = alloc.bytes_in_use();
  const auto allocs_before = alloc.stats().allocations;
  auto many = run(100000);
  const auto peak_many = alloc.peak_bytes_in_use() - base;
  CHECK(peak_many == peak_two);
  CHECK(alloc.bytes_in_use() - base == after_two);
  CHECK(alloc.stats().allocations - allocs_before < 50);
  CHECK(many[0].to_vector<std::int64_t>() == std::vector<std::int64_t>{100000});
  CHECK(many[1].to_vector<float>()[0] == Approx(2.0f));
  // Lowered, the same loop gives the same values (its memory: frames_test.cc).
  BothWays both(Place::cpu(), sequential_options());
  for (std::int64_t iters : {0, 1, 2, 1000})
    both.run(p, {{"n", Tensor::from_vector<std::int64_t>(Dims(), {iters})}}, {w->result(0), w->result(1)});
  CHECK(both.lowered_runs() == 4);
}

TEST_CASE("a loop runs beside independent work in a graph-parallel run, run after run",
          "[exec][cf]") {
  Counter c;
  Builder b(c.p);
  Value side = b.create<ReluOp>(constant(b, -1, DataType::Float32, {64})).result();
  ExecutionOptions o;
  o.num_threads = 2;
  o.thread_plan = ThreadPlan::Graph;
  BothWays exe(Place::cpu(), o);
  for (int r = 0; r < 20; ++r) {
    auto out = exe.run(c.p, {{"n", c.n(r)}}, {c.loop->result(0), side});
    CHECK(out[0].to_vector<std::int64_t>()[0] == r);
    CHECK(out[1].to_vector<float>()[0] == 0.0f);
  }
}

TEST_CASE("DOT and the Chrome trace show a loop's body nested under its op", "[exec][cf]") {
  Counter c;
  ExecutionOptions o = sequential_options();
  o.profile = true;
  BothWays exe(Place::cpu(), o);
  exe.run(c.p, {{"n", c.n(3)}}, {c.loop->result(0)});
  InterpreterCore* core = exe.last_core();
  REQUIRE(core);
  const std::string dot = core->to_dot();
  // Instruction 2 (the data op makes none) is op #3.
  CHECK_THAT(dot, Catch::Contains("subgraph cluster_i2_body_"));
  CHECK_THAT(dot, Catch::Contains("label=\"while#3 body\""));
  CHECK_THAT(dot, Catch::Contains("i2 -> i2_body_i0 [style=dotted"));
  CHECK_THAT(dot, Catch::Contains("i2_body_i1 [label=\"1: kiln.add\"]"));
  const std::string trace = core->chrome_trace();
  CHECK_THAT(trace, Catch::Contains("\"name\":\"while#3 > body > add#1\",\"cat\":\"region\""));
  CHECK_THAT(trace, Catch::Contains("\"name\":\"kiln.while\",\"cat\":\"op\""));
}

TEST_CASE("fetching a value defined inside a loop body is a clear error naming the op",
          "[exec][cf]") {
  Program p;
  Builder b(p);
  Value i0 = constant(b, 0, DataType::Int64), lim = constant(b, 3, DataType::Int64);
  Value inner;
  make_while(b, b.create<LessThanOp>(i0, lim).result(), {i0}, {lim},
             [&](Builder& bb, const std::vector<Value>& c, const std::vector<Value>& cap) {
               inner = bb.create<AddOp>(c[0], constant(bb, 1, DataType::Int64)).result();
               return std::vector<Value>{bb.create<LessThanOp>(inner, cap[0]).result(), inner};
             });
  BothWays exe(Place::cpu(), sequential_options());
  KILN_CHECK_ERROR(exe.run(p, {}, {inner}), InvalidArgument,
                   {"fetch #0", "inside a region of op 'kiln.while'"});
}

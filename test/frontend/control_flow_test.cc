// The control-flow frontend (kiln/frontend/control_flow.h, math.h,
// capture.h and the BlockGuard of program_guard.h): the programs cond,
// while_loop and switch_case build, their captures, and their errors.
#include <nlohmann/json.hpp>

#include "frontend/frontend_test_util.h"
#include "kiln/io/json.h"

using namespace kiln;
using namespace kiln_frontend_test;
namespace F = kiln::nn::functional;

namespace {

Operation* last_op(const Program& p) { return p.block().back(); }


Value i64_scalar(double v) { return full({1}, v, DataType::Int64); }

// The op defining v, or null for a block argument.
std::string defined_by(Value v) {
  return v.defining_op() ? v.defining_op()->name() : std::string("(block argument)");
}

}  // namespace

// ---- comparisons, logic and constants ----

TEST_CASE("comparison helpers build one bool op each, a number becoming a 0-d constant of the "
          "other operand's dtype",
          "[frontend][cf]") {
  GuardedPrograms b;
  Value i = data("i", {1}, DataType::Int64);
  Value j = data("j", {1}, DataType::Int64);
  for (Value v : {equal(i, j), not_equal(i, j), less_than(i, j), less_equal(i, j),
                  greater_than(i, j), greater_equal(i, j)})
    CHECK(v.type() == TensorType::get(DataType::Bool, {1}));
  Value lt = less_than(i, 10);
  CHECK(lt.defining_op()->name() == "kiln.less_than");
  Value ten = lt.defining_op()->operand_source(1);
  CHECK(ten.type() == TensorType::get(DataType::Int64, {}));
  CHECK(FullOp(ten.defining_op()).attrs().value == 10.0);
  Value both = logical_and(lt, logical_not(equal(i, 3)));
  CHECK(both.type() == TensorType::get(DataType::Bool, {1}));
  CHECK(logical_or(both, lt).defining_op()->name() == "kiln.logical_or");
  CHECK(logical_xor(both, lt).defining_op()->name() == "kiln.logical_xor");
  Value k = increment(i, 2);
  CHECK(k.type() == i.type());
  CHECK(ScaleOp(k.defining_op()).attrs().bias == 2.0);
  CHECK(full({2, 3}, 1.5).type() == TensorType::get(DataType::Float32, {2, 3}));
  CHECK(fill_constant({}, DataType::Int32, 4).type() == TensorType::get(DataType::Int32, {}));
  CHECK_NOTHROW(b.main.verify());
}

TEST_CASE("comparison helpers reject bad operands with errors naming the helper",
          "[frontend][cf]") {
  GuardedPrograms b;
  Value f = data("f", {1});
  Value i = data("i", {1}, DataType::Int64);
  KILN_CHECK_ERROR(less_than(Value(), f), InvalidArgument, {"less_than", "null"});
  KILN_CHECK_ERROR(less_than(f, i), InvalidArgument, {"kiln.less_than"});
  KILN_CHECK_ERROR(logical_not(f), InvalidArgument, {"kiln.logical_not"});
  KILN_CHECK_ERROR(full({-2}, 0.0), InvalidArgument, {"full", "-2"});
  Program other;
  Value foreign;
  {
    ProgramGuard g(other);
    foreign = data("x", {1});
  }
  KILN_CHECK_ERROR(equal(f, foreign), InvalidArgument, {"equal", "current main program"});
}

// ---- BlockGuard ----

TEST_CASE("a BlockGuard makes main_builder fill a detached block while data and parameters "
          "stay in the top block",
          "[frontend][cf]") {
  GuardedPrograms b;
  Value x = data("x", {2});
  Block body;
  Value inner, p;
  {
    BlockGuard g(body);
    CHECK(&current_block() == &body);
    Value arg = body.add_argument(x.type());
    CHECK(in_current_program(arg));
    CHECK(in_current_program(x));
    inner = F::relu(arg);
    p = create_parameter("w", {2}, DataType::Float32, init::Constant(1));
    add(inner, p);
  }
  CHECK(&current_block() == &b.main.block());
  CHECK(body.size() == 2);
  CHECK(op_names(b.main) == std::vector<std::string>{"kiln.data", "builtin.parameter"});
  CHECK(p.defining_op()->parent_block() == &b.main.block());
  // Outside its guard, a value of the detached block is out of reach.
  CHECK_FALSE(in_current_program(inner));
  KILN_CHECK_ERROR(F::relu(inner), InvalidArgument, {"relu", "not a value"});
}

TEST_CASE("a BlockGuard needs a ProgramGuard and a detached block", "[frontend][cf]") {
  Block detached;
  KILN_CHECK_ERROR(BlockGuard(detached), PreconditionNotMet, {"no ProgramGuard"});
}

// ---- capture ----

TEST_CASE("captures are the outer values the blocks use, in first-use order, appended as "
          "arguments of every block",
          "[frontend][cf]") {
  GuardedPrograms b;
  Value x = data("x", {2});
  Value y = data("y", {2});
  Block b0, b1;
  Value a0 = b0.add_argument(x.type());
  {
    BlockGuard g(b0);
    add(a0, y);
    add(x, y);
  }
  {
    BlockGuard g(b1);
    add(x, x);
  }
  auto caps = capture_external_values({&b0, &b1});
  REQUIRE(caps.size() == 2);
  CHECK(caps[0] == y);
  CHECK(caps[1] == x);
  CHECK(b0.num_arguments() == 3);
  CHECK(b1.num_arguments() == 2);
  CHECK(y.use_empty());
  CHECK(x.use_empty());
  Operation* first = b0.front();
  CHECK(first->operand_source(0) == a0);
  CHECK(first->operand_source(1) == b0.argument(1));
  CHECK(b1.front()->operand_source(0) == b1.argument(1));
}

// ---- cond ----

TEST_CASE("cond builds a kiln.if whose captures are operands: a value defined before it and a "
          "parameter created inside a branch",
          "[frontend][cf]") {
  GuardedPrograms b;
  Value x = data("x", {2, 3});
  Value flag = data("flag", {1}, DataType::Bool);
  auto outs = cond(
      flag,
      [&] {
        Value w = create_parameter("w", {2, 3}, DataType::Float32, init::Constant(0.5));
        return std::vector<Value>{add(F::relu(x), w)};
      },
      [&] { return std::vector<Value>{F::tanh(x)}; });
  REQUIRE(outs.size() == 1);
  CHECK(outs[0].type() == x.type());
  CHECK_NOTHROW(b.main.verify());
  CHECK(op_names(b.main) ==
        std::vector<std::string>{"kiln.data", "kiln.data", "builtin.parameter", "kiln.if"});
  IfOp op(last_op(b.main));
  CHECK(op.pred() == flag);
  REQUIRE(op.num_captures() == 2);
  CHECK(op.operation()->operand_source(1) == x);
  CHECK(defined_by(op.operation()->operand_source(2)) == "builtin.parameter");
  CHECK(op.then_region().front().num_arguments() == 2);
  CHECK(op.else_region().front().num_arguments() == 2);
  CHECK(op.else_region().front().back()->name() == "kiln.yield");
}

TEST_CASE("cond's results take the join of the branches' types", "[frontend][cf]") {
  GuardedPrograms b;
  Value pred = data("p", {1}, DataType::Bool);
  Value a = data("a", {2, 3});
  Value c = data("c", {4, 3});
  Value r = cond(pred, [&] { return F::relu(a); }, [&] { return F::relu(c); });
  CHECK(r.type() == TensorType::get(DataType::Float32, {-1, 3}));
  CHECK_NOTHROW(b.main.verify());
}

TEST_CASE("cond without false_fn builds an else branch that yields nothing", "[frontend][cf]") {
  GuardedPrograms b;
  Value pred = data("p", {}, DataType::Bool);
  Value x = data("x", {2});
  auto outs = cond(pred, [&] {
    F::relu(x);
    return std::vector<Value>{};
  });
  CHECK(outs.empty());
  CHECK_NOTHROW(b.main.verify());
  IfOp op(last_op(b.main));
  CHECK(op.then_region().front().size() == 2);
  CHECK(op.else_region().front().size() == 1);
}

TEST_CASE("cond rejects bad predicates and mismatched branches, naming cond, and leaves the "
          "program as it was",
          "[frontend][cf]") {
  GuardedPrograms b;
  Value x = data("x", {2});
  Value i = data("i", {2}, DataType::Int64);
  Value pred = data("p", {1}, DataType::Bool);
  Value wide = data("wide", {2}, DataType::Bool);
  Value fpred = data("fp", {1});
  auto one = [&] { return std::vector<Value>{F::relu(x)}; };
  auto two = [&] { return std::vector<Value>{F::relu(x), F::tanh(x)}; };
  const std::string before = b.main.to_string();
  const std::size_t params = b.main.parameters().size();
  const std::size_t startup_ops = b.startup.block().size();

  KILN_CHECK_ERROR(cond(Value(), one, one), InvalidArgument, {"cond", "pred", "null"});
  KILN_CHECK_ERROR(cond(fpred, one, one), InvalidArgument,
                   {"cond", "pred", "bool tensor of one element", "f32"});
  KILN_CHECK_ERROR(cond(wide, one, one), InvalidArgument, {"cond", "pred", "one element"});
  KILN_CHECK_ERROR(cond(pred, BranchFn(), one), InvalidArgument, {"cond", "true_fn is empty"});
  KILN_CHECK_ERROR(cond(pred, two, one), InvalidArgument,
                   {"cond", "true_fn returned 2 values, false_fn 1"});
  KILN_CHECK_ERROR(cond(pred, one, [&] { return std::vector<Value>{increment(i)}; }),
                   InvalidArgument, {"cond", "value #0", "dtype and rank"});
  KILN_CHECK_ERROR(cond(pred, one, [&] { return std::vector<Value>{full({2, 1}, 0.0)}; }),
                   InvalidArgument, {"cond", "value #0", "dtype and rank"});
  KILN_CHECK_ERROR(cond(pred, one), InvalidArgument,
                   {"cond", "false_fn may be omitted only when true_fn returns no values"});
  KILN_CHECK_ERROR(cond(pred, one, [&] { return std::vector<Value>{Value()}; }),
                   InvalidArgument, {"cond", "false_fn's value #0", "null"});
  // A parameter made by the branch before the error goes away with it.
  Value made_in_true;
  KILN_CHECK_ERROR(cond(
                       pred,
                       [&] {
                         made_in_true = create_parameter("w", {2}, DataType::Float32,
                                                         init::Constant(0));
                         made_in_true = F::relu(made_in_true);
                         return std::vector<Value>{made_in_true};
                       },
                       [&] { return std::vector<Value>{F::tanh(made_in_true)}; }),
                   InvalidArgument, {"tanh", "not a value"});
  KILN_CHECK_ERROR(cond(
                       pred,
                       [&] {
                         made_in_true = F::relu(x);
                         return std::vector<Value>{made_in_true};
                       },
                       [&] {
                         return std::vector<Value>{
                             main_builder().create<TanhOp>(made_in_true).result()};
                       }),
                   InvalidArgument, {"cond", "false_fn's body", "true_fn's body"});
  CHECK(b.main.to_string() == before);
  CHECK(b.main.parameters().size() == params);
  CHECK(b.startup.block().size() == startup_ops);
  CHECK_FALSE(b.main.has_parameter("w"));
  CHECK_NOTHROW(b.main.verify());
}

// ---- while_loop ----

TEST_CASE("while_loop builds the condition before the loop and at the end of the body, and "
          "captures what cond_fn and body_fn read",
          "[frontend][cf]") {
  GuardedPrograms b;
  Value limit = data("n", {1}, DataType::Int64);
  Value i0 = i64_scalar(0);
  Value acc0 = full({2}, 0.0);
  auto outs = while_loop(
      [&](const std::vector<Value>& v) { return less_than(v[0], limit); },
      [&](const std::vector<Value>& v) {
        Value w = create_parameter("w", {2}, DataType::Float32, init::Constant(1));
        return std::vector<Value>{increment(v[0]), add(v[1], w)};
      },
      {i0, acc0}, 100);
  REQUIRE(outs.size() == 2);
  CHECK(outs[0].type() == i0.type());
  CHECK(outs[1].type() == acc0.type());
  CHECK_NOTHROW(b.main.verify());
  CHECK(op_names(b.main) ==
        std::vector<std::string>{"kiln.data", "kiln.full", "kiln.full", "kiln.less_than",
                                 "builtin.parameter", "kiln.while"});
  WhileOp op(last_op(b.main));
  CHECK(op.attrs().max_iterations == 100);
  CHECK(op.cond().defining_op()->name() == "kiln.less_than");
  CHECK(op.num_carried() == 2);
  REQUIRE(op.num_captures() == 2);
  CHECK(op.operation()->operand_source(1) == i0);
  CHECK(op.operation()->operand_source(2) == acc0);
  CHECK(defined_by(op.operation()->operand_source(3)) == "builtin.parameter");
  CHECK(op.operation()->operand_source(4) == limit);
  Block& body = op.body_region().front();
  CHECK(body.num_arguments() == 4);
  Operation* yield = body.back();
  REQUIRE(yield->name() == "kiln.yield");
  CHECK(yield->num_operands() == 3);
  CHECK(yield->operand_source(0).defining_op()->name() == "kiln.less_than");
  CHECK(yield->operand_source(0).defining_op()->operand_source(1) == body.argument(3));
}

TEST_CASE("a cond nested in a while_loop body captures through both ops", "[frontend][cf]") {
  GuardedPrograms b;
  Value x = data("x", {2});
  Value i0 = i64_scalar(0);
  auto outs = while_loop(
      [&](const std::vector<Value>& v) { return less_than(v[0], 10); },
      [&](const std::vector<Value>& v) {
        Value odd = equal(v[0], 1);
        Value y = cond(odd, [&] { return add(v[1], x); }, [&] { return F::relu(v[1]); });
        return std::vector<Value>{increment(v[0]), y};
      },
      {i0, full({2}, 0.0)});
  CHECK(outs.size() == 2);
  CHECK_NOTHROW(b.main.verify());
  WhileOp w(last_op(b.main));
  REQUIRE(w.num_captures() == 1);
  CHECK(w.operation()->operand_source(3) == x);
  Block& body = w.body_region().front();
  IfOp inner;
  for (Operation* op : body)
    if (auto i = op->dyn_cast<IfOp>()) inner = i;
  REQUIRE(inner);
  // The inner if reads the carried value and x through the body's arguments.
  REQUIRE(inner.num_captures() == 2);
  CHECK(inner.operation()->operand_source(1) == body.argument(1));
  CHECK(inner.operation()->operand_source(2) == body.argument(2));
}

TEST_CASE("a while_loop whose body changes a loop variable's dims is rebuilt with -1 there, "
          "once",
          "[frontend][cf]") {
  GuardedPrograms b;
  Value i0 = i64_scalar(0);
  Value x0 = full({2}, 0.0);
  int calls = 0;
  auto outs = while_loop(
      [&](const std::vector<Value>& v) { return less_than(v[0], 3); },
      [&](const std::vector<Value>& v) {
        ++calls;
        Value w = create_parameter("w", {3}, DataType::Float32, init::Constant(1));
        return std::vector<Value>{increment(v[0]), w};
      },
      {i0, x0});
  CHECK(calls == 2);
  CHECK(outs[1].type() == TensorType::get(DataType::Float32, {-1}));
  CHECK_NOTHROW(b.main.verify());
  CHECK(count_top_ops(b.main, "builtin.parameter") == 1);
  CHECK(count_top_ops(b.startup, "builtin.set_parameter") == 1);
  WhileOp op(last_op(b.main));
  CHECK(op.body_region().front().argument(1).type() == outs[1].type());
  // The discarded first build gave no names: a layer made in the body is
  // named as if built once.
  std::vector<std::unique_ptr<nn::Linear>> layers;
  while_loop([&](const std::vector<Value>& v) { return less_than(v[0], 3); },
             [&](const std::vector<Value>& v) {
               layers.push_back(std::make_unique<nn::Linear>(2, 3));
               return std::vector<Value>{increment(v[0]), (*layers.back())(v[1])};
             },
             {i0, full({1, 2}, 0.0)});
  CHECK(layers.size() == 2);
  CHECK(layers.back()->full_name() == "linear_0");
  CHECK(b.main.has_parameter("linear_0.w_0"));
  CHECK_FALSE(b.main.has_parameter("linear_1.w_0"));
  CHECK_NOTHROW(b.main.verify());
}

TEST_CASE("while_loop rejects bad conditions, loop vars and bodies, naming while_loop, and "
          "leaves the program as it was",
          "[frontend][cf]") {
  GuardedPrograms b;
  Value i0 = i64_scalar(0);
  Value x0 = full({2}, 0.0);
  auto lt = [](const std::vector<Value>& v) { return less_than(v[0], 10); };
  auto step = [](const std::vector<Value>& v) {
    return std::vector<Value>{increment(v[0]), v[1]};
  };
  const std::string before = b.main.to_string();

  KILN_CHECK_ERROR(while_loop(lt, step, {}), InvalidArgument, {"while_loop", "loop_vars"});
  KILN_CHECK_ERROR(while_loop(lt, step, {i0, Value()}), InvalidArgument,
                   {"while_loop", "loop var #1", "null"});
  KILN_CHECK_ERROR(while_loop(lt, step, {i0, x0}, -2), InvalidArgument,
                   {"while_loop", "max_iterations"});
  KILN_CHECK_ERROR(while_loop({}, step, {i0, x0}), InvalidArgument, {"while_loop", "cond_fn"});
  KILN_CHECK_ERROR(
      while_loop([](const std::vector<Value>& v) { return F::relu(v[1]); }, step, {i0, x0}),
      InvalidArgument, {"while_loop", "cond_fn(loop_vars)", "bool tensor of one element"});
  KILN_CHECK_ERROR(
      while_loop([](const std::vector<Value>& v) { return less_than(v[1], 1); }, step, {i0, x0}),
      InvalidArgument, {"while_loop", "cond_fn(loop_vars)", "one element"});
  KILN_CHECK_ERROR(while_loop(
                       lt,
                       [](const std::vector<Value>& v) {
                         return std::vector<Value>{increment(v[0])};
                       },
                       {i0, x0}),
                   InvalidArgument, {"while_loop", "body_fn returned 1 values for 2 loop vars"});
  KILN_CHECK_ERROR(while_loop(
                       lt,
                       [](const std::vector<Value>& v) {
                         return std::vector<Value>{increment(v[0]), v[0]};
                       },
                       {i0, x0}),
                   InvalidArgument, {"while_loop", "loop var #1", "tensor<2xf32>", "dtype and rank"});
  KILN_CHECK_ERROR(while_loop(
                       lt,
                       [](const std::vector<Value>& v) {
                         Value p = create_parameter("w", {2, 2}, DataType::Float32,
                                                    init::Constant(0));
                         return std::vector<Value>{increment(v[0]), p};
                       },
                       {i0, x0}),
                   InvalidArgument, {"while_loop", "loop var #1", "dtype and rank"});
  CHECK(b.main.to_string() == before);
  CHECK_FALSE(b.main.has_parameter("w"));
  CHECK(b.startup.block().empty());
}

// ---- switch_case ----

TEST_CASE("switch_case is a chain of conds in key order whose default is the largest key's "
          "branch when none is given",
          "[frontend][cf]") {
  GuardedPrograms b;
  Value idx = data("idx", {1}, DataType::Int64);
  Value x = data("x", {2});
  std::vector<std::string> called;
  auto branch = [&](std::string name, double scale) {
    return [&, name, scale] {
      called.push_back(name);
      return std::vector<Value>{main_builder().create<ScaleOp>(x, scale).result()};
    };
  };
  auto outs = switch_case(idx, {{3, branch("three", 3)}, {1, branch("one", 1)},
                                {2, branch("two", 2)}});
  REQUIRE(outs.size() == 1);
  CHECK(called == std::vector<std::string>{"one", "two", "three"});
  CHECK_NOTHROW(b.main.verify());
  CHECK(count_top_ops(b.main, "kiln.equal") == 2);
  CHECK(count_top_ops(b.main, "kiln.if") == 1);
  IfOp outer(last_op(b.main));
  CHECK(FullOp(outer.pred().defining_op()->operand_source(1).defining_op()).attrs().value == 1);
  Block& else_block = outer.else_region().front();
  IfOp inner;
  for (Operation* op : else_block)
    if (auto i = op->dyn_cast<IfOp>()) inner = i;
  REQUIRE(inner);
  // The inner predicate (idx == 2) was built ahead and reaches it as a capture.
  CHECK(inner.pred().is_block_argument());
  Value outer_pred2 = outer.operation()->operand_source(1 + cast<BlockArgument>(inner.pred()).index());
  CHECK(FullOp(outer_pred2.defining_op()->operand_source(1).defining_op()).attrs().value == 2);
  CHECK(inner.else_region().front().front()->name() == "kiln.scale");

  // With a default: one cond per key.
  called.clear();
  switch_case(idx, {{0, branch("zero", 0)}, {1, branch("one", 1)}}, branch("default", -1));
  CHECK(called == std::vector<std::string>{"zero", "one", "default"});
  CHECK(count_top_ops(b.main, "kiln.if") == 2);
  CHECK_NOTHROW(b.main.verify());
}

TEST_CASE("switch_case rejects bad indexes and keys, naming switch_case", "[frontend][cf]") {
  GuardedPrograms b;
  Value f = data("f", {1});
  Value idx = data("idx", {1}, DataType::Int32);
  Value x = data("x", {2});
  BranchFn fn = [&] { return std::vector<Value>{F::relu(x)}; };
  const std::string before = b.main.to_string();
  KILN_CHECK_ERROR(switch_case(f, {{0, fn}}), InvalidArgument,
                   {"switch_case", "int32 or int64 tensor of one element", "f32"});
  KILN_CHECK_ERROR(switch_case(idx, {}), InvalidArgument, {"switch_case", "branches is empty"});
  KILN_CHECK_ERROR(switch_case(idx, {{1, fn}, {1, fn}}), InvalidArgument,
                   {"switch_case", "key 1 is given twice"});
  KILN_CHECK_ERROR(switch_case(idx, {{1, fn}, {2, BranchFn()}}), InvalidArgument,
                   {"switch_case", "key 2"});
  KILN_CHECK_ERROR(switch_case(idx, {{1, fn}, {2, [&] { return std::vector<Value>{}; }}}),
                   InvalidArgument, {"cond", "true_fn returned 1 values, false_fn 0"});
  CHECK(b.main.to_string() == before);
}

// ---- serialization ----

TEST_CASE("a program with cond, while_loop and switch_case prints the same after a JSON round "
          "trip",
          "[frontend][cf]") {
  GuardedPrograms b;
  Value x = data("x", {2});
  Value idx = data("idx", {1}, DataType::Int64);
  auto outs = while_loop(
      [&](const std::vector<Value>& v) { return less_than(v[0], 4); },
      [&](const std::vector<Value>& v) {
        Value y = cond(equal(v[0], 2), [&] { return add(v[1], x); }, [&] { return v[1]; });
        return std::vector<Value>{increment(v[0]), y};
      },
      {i64_scalar(0), x}, 50);
  switch_case(idx, {{0, [&] { return std::vector<Value>{F::relu(outs[1])}; }},
                    {1, [&] { return std::vector<Value>{F::tanh(outs[1])}; }}});
  REQUIRE_NOTHROW(b.main.verify());
  const std::string text = b.main.to_string();
  Program back = program_from_json(program_to_json(b.main));
  CHECK_NOTHROW(back.verify());
  CHECK(back.to_string() == text);
}

// ---- execution ----

TEST_CASE("a counter while (i < 10) i = i + 1 gives 10", "[frontend][cf]") {
  GuardedPrograms b;
  Value i0 = full({1}, 0, DataType::Int64);
  auto outs = while_loop([](const std::vector<Value>& v) { return less_than(v[0], 10); },
                         [](const std::vector<Value>& v) {
                           return std::vector<Value>{increment(v[0])};
                         },
                         {i0});
  REQUIRE_NOTHROW(b.main.verify());
  kiln_test::BothWays exe;
  auto got = exe.run(b.main, {}, {outs[0]});
  CHECK(exe.lowered_runs() == 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].to_vector<std::int64_t>() == std::vector<std::int64_t>{10});
}

// ---- backward ----

namespace {

Value mean_all(Value v) { return main_builder().create<MeanOp>(v).result(); }

}  // namespace

TEST_CASE("the gradient through cond is the taken branch's, by finite differences, nested if "
          "included",
          "[frontend][cf][backward]") {
  for (bool taken : {true, false}) {
    INFO("pred " << taken);
    Program main_prog, startup;
    Value loss, x, w;
    std::vector<std::pair<Value, Value>> grads;
    {
      ProgramGuard guard(main_prog, startup);
      x = data("x", {2, 3}, DataType::Float64);
      w = data("w", {3, 2}, DataType::Float64);
      Value pred = data("pred", {}, DataType::Bool);
      Value inner = data("inner", {}, DataType::Bool);
      set_stop_gradient(x, false);
      set_stop_gradient(w, false);
      Value y = cond(
          pred,
          [&] {  // tanh(x · w), or through a nested cond: (x · w)²
            Value h = F::linear(x, w);
            return cond(inner, [&] { return F::tanh(h); }, [&] { return square(h); });
          },
          [&] { return F::sigmoid(F::linear(square(x), w)); });
      loss = mean_all(square(y));
      grads = append_backward(loss, {x, w});
    }
    REQUIRE(grads.size() == 2);
    REQUIRE_NOTHROW(main_prog.verify());
    for (bool in : {true, false}) {
      FeedMap fixed{{"pred", Tensor::from_vector<bool>(Dims(), {taken})},
                    {"inner", Tensor::from_vector<bool>(Dims(), {in})}};
      check_grads_by_finite_differences(main_prog, loss, grads, {"x", "w"},
                                        {{0.3, -0.2, 0.5, 0.1, 0.7, -0.4},
                                         {0.2, -0.6, 0.4, 0.9, -0.3, 0.05}},
                                        {{2, 3}, {3, 2}}, fixed);
    }
  }
}

namespace {

// h = tanh(h * w + x), n times (n fed); loss = mean(h²) + mean(h · w).
struct TanhLoop {
  Program main_prog, startup;
  Value loss, x, w;
  std::vector<std::pair<Value, Value>> grads;
  TanhLoop() {
    ProgramGuard guard(main_prog, startup);
    x = data("x", {3}, DataType::Float64);
    w = data("w", {3}, DataType::Float64);
    Value n = data("n", {1}, DataType::Int64);
    set_stop_gradient(x, false);
    set_stop_gradient(w, false);
    auto outs = while_loop([&](const std::vector<Value>& v) { return less_than(v[0], n); },
                           [&](const std::vector<Value>& v) {
                             Value h = F::tanh(add(multiply(v[1], w), x));
                             return std::vector<Value>{increment(v[0]), h};
                           },
                           {full({1}, 0, DataType::Int64), x});
    loss = add(mean_all(square(outs[1])), mean_all(multiply(outs[1], w)));
    grads = append_backward(loss, {x, w});
  }
};

FeedMap trips(std::int64_t n) {
  return {{"n", Tensor::from_vector<std::int64_t>(Dims{1}, {n})}};
}

const std::vector<std::vector<double>> kXW{{0.3, -0.2, 0.5}, {0.8, -0.6, 0.4}};

}  // namespace

TEST_CASE("the gradient of a while_loop runs the body's gradient in reverse iteration order; "
          "finite differences for trip counts fed at run time, zero included",
          "[frontend][cf][backward]") {
  TanhLoop t;
  REQUIRE(t.grads.size() == 2);
  REQUIRE_NOTHROW(t.main_prog.verify());
  CHECK(count_top_ops(t.main_prog, "kiln.while") == 2);  // the forward loop and its gradient
  for (std::int64_t n : {0, 1, 4}) {
    INFO("n = " << n);
    check_grads_by_finite_differences(t.main_prog, t.loss, t.grads, {"x", "w"}, kXW, {{3}, {3}},
                                      trips(n));
  }
}

TEST_CASE("the forward loop saves what its gradient reads, one element per iteration",
          "[frontend][cf][backward]") {
  TanhLoop t;
  // The forward while now also carries a counter and the saved arrays.
  Operation* fwd = nullptr;
  for (Operation* op : t.main_prog.block())
    if (op->isa<WhileOp>()) {
      fwd = op;
      break;
    }
  REQUIRE(fwd);
  REQUIRE(fwd->num_results() > 2);
  CHECK(fwd->result_type(2) == TensorType::get(DataType::Int64, {1}));
  for (std::uint32_t r = 3; r < fwd->num_results(); ++r)
    CHECK(is_tensor_array(fwd->result_type(r)));
  // Running it 10^4 times costs memory linear in the iterations only.
  kiln_test::BothWays exe;
  auto got = exe.run(t.main_prog, [] {
    FeedMap f = trips(10000);
    f["x"] = Tensor::from_vector<double>(Dims{3}, {0.3, -0.2, 0.5});
    f["w"] = Tensor::from_vector<double>(Dims{3}, {0.8, -0.6, 0.4});
    return f;
  }(), {t.grads[0].second});
  for (double g : got[0].to_vector<double>()) CHECK(std::isfinite(g));
}

TEST_CASE("the gradient flows through arrays a while_loop reads and writes: an RNN over time by "
          "finite differences",
          "[frontend][cf][backward][array]") {
  Program main_prog, startup;
  Value loss;
  std::vector<std::pair<Value, Value>> grads;
  {
    ProgramGuard guard(main_prog, startup);
    Value x = data("x", {3, 2, 2}, DataType::Float64);  // [T, B, I]
    Value wx = data("wx", {2, 2}, DataType::Float64);
    Value wh = data("wh", {2, 2}, DataType::Float64);
    Value h0 = data("h0", {2, 2}, DataType::Float64);
    for (Value v : {x, wx, wh, h0}) set_stop_gradient(v, false);
    Value xs = array_from_tensor(x);
    Value steps = array_length(xs);
    auto outs = while_loop(
        [&](const std::vector<Value>& v) { return less_than(v[0], steps); },
        [&](const std::vector<Value>& v) {
          Value h = F::tanh(add(matmul(array_read(xs, v[0]), wx), matmul(v[1], wh)));
          return std::vector<Value>{increment(v[0]), h, array_write(v[2], v[0], h)};
        },
        {full({1}, 0, DataType::Int64), h0, create_array(DataType::Float64, {2, 2})});
    Value hs = array_stack(outs[2]);  // [T, B, H]
    loss = add(mean_all(square(hs)), mean_all(outs[1]));
    grads = append_backward(loss, {x, wx, wh, h0});
  }
  REQUIRE(grads.size() == 4);
  REQUIRE_NOTHROW(main_prog.verify());
  check_grads_by_finite_differences(
      main_prog, loss, grads, {"x", "wx", "wh", "h0"},
      {{0.1, -0.3, 0.5, 0.2, -0.4, 0.6, 0.3, 0.1, -0.2, 0.7, 0.05, -0.5},
       {0.4, -0.2, 0.3, 0.6},
       {0.5, 0.1, -0.3, 0.2},
       {0.1, -0.1, 0.2, 0.3}},
      {{3, 2, 2}, {2, 2}, {2, 2}, {2, 2}}, {});
}

TEST_CASE("the gradient of nested loops, of a loop nested in an if, and of both, by finite "
          "differences",
          "[frontend][cf][backward]") {
  // h = tanh(h · w + x), 2 steps, or 2 × 2 steps through an inner loop.
  for (bool nested : {false, true})
    for (bool in_if : {false, true}) {
      INFO("nested " << nested << ", in an if " << in_if);
      Program main_prog, startup;
      Value loss, x, w;
      std::vector<std::pair<Value, Value>> grads;
      {
        ProgramGuard guard(main_prog, startup);
        x = data("x", {3}, DataType::Float64);
        w = data("w", {3}, DataType::Float64);
        Value pred = data("pred", {}, DataType::Bool);
        set_stop_gradient(x, false);
        set_stop_gradient(w, false);
        auto two_steps = [&](Value h0) {
          return while_loop(
              [](const std::vector<Value>& u) { return less_than(u[0], 2); },
              [&](const std::vector<Value>& u) {
                return std::vector<Value>{increment(u[0]), F::tanh(add(multiply(u[1], w), x))};
              },
              {full({}, 0, DataType::Int64), h0})[1];
        };
        auto loops = [&] {
          if (!nested) return two_steps(x);
          return while_loop(
              [](const std::vector<Value>& v) { return less_than(v[0], 2); },
              [&](const std::vector<Value>& v) {
                return std::vector<Value>{increment(v[0]), two_steps(v[1])};
              },
              {full({}, 0, DataType::Int64), x})[1];
        };
        Value y = in_if ? cond(pred, loops, [&] { return F::sigmoid(multiply(x, w)); }) : loops();
        loss = mean_all(square(y));
        grads = append_backward(loss, {x, w});
      }
      REQUIRE(grads.size() == 2);
      REQUIRE_NOTHROW(main_prog.verify());
      for (bool taken : {true, false}) {
        INFO("pred " << taken);
        check_grads_by_finite_differences(main_prog, loss, grads, {"x", "w"}, kXW, {{3}, {3}},
                                          {{"pred", Tensor::from_vector<bool>(Dims(), {taken})}});
      }
    }
}

TEST_CASE("append_backward that fails inside a loop body leaves the program as it was, loops it "
          "already rewrote included",
          "[frontend][cf][backward]") {
  Program main_prog, startup;
  ProgramGuard guard(main_prog, startup);
  Value x = data("x", {3}, DataType::Float64);
  set_stop_gradient(x, false);
  auto step = [](const std::function<Value(Value)>& f) {
    return [f](const std::vector<Value>& v) {
      return std::vector<Value>{increment(v[0]), f(v[1])};
    };
  };
  auto below3 = [](const std::vector<Value>& v) { return less_than(v[0], 3); };
  // The first loop's body uses an op without a Vjp; the second is fine.
  auto first = while_loop(below3, step([](Value h) {
                            return main_builder().create<GradOf<TanhOp>>(h, h).result();
                          }),
                          {full({}, 0, DataType::Int64), x});
  auto second = while_loop(below3, step([](Value h) { return F::tanh(h); }),
                           {full({}, 0, DataType::Int64), first[1]});
  Value loss = mean_all(second[1]);
  const std::string before = main_prog.to_string();
  KILN_CHECK_ERROR(append_backward(loss, {x}), Unimplemented, {"kiln.tanh_grad", "no Vjp"});
  CHECK(main_prog.to_string() == before);
  CHECK_NOTHROW(main_prog.verify());
}

TEST_CASE("an optimizer's update inside cond is a clear error naming the op and the parameter, not "
          "an update silently lost on the branch's copy",
          "[frontend][cf]") {
  GuardedPrograms g;
  Value x = data("x", {8, 4});
  Value pred = data("pred", {1}, DataType::Bool);
  Value loss = main_builder().create<MeanOp>(nn::Linear(4, 2)(x), std::vector<std::int64_t>{}, false).result();
  auto opt = optim::SGD(0.1);
  auto pairs = append_backward(loss);
  cond(pred, [&] {
    opt.apply_gradients(pairs);
    return std::vector<Value>{};
  });
  Executor exe;
  exe.run(g.startup);
  const FeedMap feed{{"x", normal_f32({8, 4}, 1)}, {"pred", Tensor::from_vector<bool>(Dims{1}, {true})}};
  KILN_CHECK_ERROR(exe.run(g.main, feed, {loss}), InvalidArgument,
                   {"kiln.if", "sgd_", "writes parameter 'linear_", "update parameters outside control flow"});
}

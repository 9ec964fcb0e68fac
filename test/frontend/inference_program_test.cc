// Inference programs from training programs: the op roles append_backward
// and the optimizers mark, clone_for_test (is_test switched on, backward and
// optimizer ops dropped, the original untouched) and prune (only what the
// targets need; errors name a bad target).
#include <algorithm>
#include <string>
#include <vector>

#include "catch.hpp"
#include "frontend/frontend_test_util.h"
#include "kiln/frontend/clone_for_test.h"
#include "kiln/frontend/op_role.h"
#include "kiln/frontend/prune.h"
#include "kiln/io/json.h"
#include "kiln/kernel/kernel_registry.h"

using namespace kiln;
using kiln_frontend_test::f32;
using kiln_frontend_test::op_names;

namespace {

// out = 2·x in training, x when is_test: an op with train/eval behaviour.
struct TrainScaleOp
    : Op<TrainScaleOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "infer_test.train_scale";
  static constexpr int num_operands = 1, num_results = 1;
  struct Attributes {
    BOOST_HANA_DEFINE_STRUCT(Attributes, (bool, is_test));
  };
  static void build(Builder&, OperationArgument& arg, Value x, bool is_test = false) {
    arg.add_operand(x);
    arg.attributes = to_named_attributes(Attributes{is_test});
  }
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
    return {in.at(0)};
  }
  // d(2x)/dx = 2 (only training builds gradients).
  static std::vector<Value> vjp(Builder& b, Operation*, const std::vector<Value>& out_grads) {
    return {b.create<ScaleOp>(out_grads[0], 2.0).result()};
  }
};
KILN_REGISTER_OP(TrainScaleOp);

void train_scale_f32(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const float k = ctx.attrs<TrainScaleOp>().is_test ? 1.f : 2.f;
  Tensor& y = ctx.alloc_output(0, x.dims(), x.dtype());
  for (std::int64_t i = 0; i < x.numel(); ++i) y.data<float>()[i] = k * x.data<float>()[i];
}
KILN_REGISTER_KERNEL(TrainScaleOp, Cpu, Float32, train_scale_f32);

// A small training program: x[4,3] → Linear(3,2) → train_scale → tanh →
// pred; loss = MSE(pred, label); Adam. `forward` is main before minimize.
struct Model {
  Program main, startup, forward;
  Value x, pred, scaled, loss;
  TrainScaleOp scale_op;
};

void build_model(Model& m) {
  UniqueNameGuard names;
  ProgramGuard guard(m.main, m.startup);
  m.x = data("x", {4, 3});
  nn::Linear fc(3, 2);
  m.scale_op = main_builder().create<TrainScaleOp>(fc(m.x));
  m.scaled = m.scale_op.result();
  m.pred = nn::functional::tanh(m.scaled);
  m.forward = m.main.clone();
  auto label = data("label", {4, 2});
  m.loss = nn::MSELoss()(m.pred, label);
  optim::Adam(0.01).minimize(m.loss);
}

std::vector<std::string> parameter_names(const Program& p) {
  std::vector<std::string> out;
  for (const auto& [name, param] : p.parameters()) out.push_back(name);
  return out;
}

bool has_op(const Program& p, std::string_view name) {
  for (Operation* op : p.block())
    if (op->name() == name) return true;
  return false;
}

Tensor input_x() {
  return f32({4, 3}, {0.1f, -0.2f, 0.3f, 0.4f, 0.5f, -0.6f, 0.7f, 0.8f, -0.9f, 1.0f, 1.1f, 1.2f});
}

}  // namespace

TEST_CASE("append_backward and an optimizer mark the ops they append, and the marks survive "
          "clone and JSON",
          "[frontend][for_test]") {
  Model m;
  build_model(m);
  std::size_t backward = 0, optimize = 0;
  Operation* update = nullptr;
  for (Operation* op : m.main.block()) {
    if (op->name() == "kiln.adam_") update = op;
    backward += op_role(op) == OpRole::Backward;
    optimize += op_role(op) == OpRole::Optimize;
  }
  REQUIRE(update);
  CHECK(op_role(update) == OpRole::Optimize);
  CHECK(backward > 0);
  CHECK(optimize > 0);
  // The ops the user built (forward, label, loss) carry no mark.
  const std::size_t n_user = m.forward.block().size() + 1 + 3;  // + label + MSE's sub, square, mean
  std::size_t i = 0;
  for (Operation* op : m.main.block()) {
    INFO("op #" << i << " " << op->name());
    if (i < m.forward.block().size()) CHECK(op_role(op) == OpRole::Forward);
    ++i;
  }
  CHECK(op_role(m.loss.defining_op()) == OpRole::Forward);
  CHECK(m.main.block().size() - backward - optimize == n_user);
  auto roles = [](const Program& p) {
    std::vector<OpRole> out;
    for (Operation* op : p.block()) out.push_back(op_role(op));
    return out;
  };
  CHECK(roles(m.main.clone()) == roles(m.main));
  CHECK(roles(load_program_json(save_program_json(m.main))) == roles(m.main));
  CHECK(to_string(OpRole::Backward) == "backward");
}

TEST_CASE("clone_for_test sets is_test, drops the backward and optimizer ops, and leaves the "
          "original untouched",
          "[frontend][for_test]") {
  Model m;
  build_model(m);
  const std::string before = m.main.to_string();
  IrMapping map;
  Program test = clone_for_test(m.main, &map);

  CHECK(m.main.to_string() == before);
  CHECK_FALSE(m.scale_op.attrs().is_test);
  CHECK(has_op(m.main, "kiln.adam_"));

  // The test program is the forward program plus the loss (label, loss ops)
  // with is_test on: no gradient or update op, no optimizer parameter.
  for (Operation* op : test.block()) {
    INFO(op->name());
    CHECK(op_role(op) == OpRole::Forward);
    CHECK_FALSE(op->isa<SetParameterOp>());
    if (auto b = op->attribute("is_test").dyn_cast<BoolAttribute>()) CHECK(b.value());
  }
  CHECK_FALSE(has_op(test, "kiln.adam_"));
  CHECK(has_op(test, "kiln.data"));
  CHECK(parameter_names(test) == parameter_names(m.forward));
  CHECK(parameter_names(m.main).size() > parameter_names(test).size());  // lr, moments, beta pows
  std::vector<std::string> want = op_names(m.forward);
  std::vector<std::string> got = op_names(test);
  REQUIRE(got.size() >= want.size());
  CHECK(std::vector<std::string>(got.begin(), got.begin() + want.size()) == want);
  test.verify();

  // The mapping gives the copy's values; the copy's train_scale has is_test.
  REQUIRE(map.lookup(m.pred));
  REQUIRE(map.lookup(m.scaled));
  CHECK(map.lookup(m.scaled).defining_op()->dyn_cast<TrainScaleOp>().attrs().is_test);
  Operation* update = nullptr;
  for (Operation* op : m.main.block())
    if (op->name() == "kiln.adam_") update = op;
  REQUIRE(update);
  CHECK_FALSE(map.contains(update->operand_source(1)));  // a gradient
  CHECK(map.contains(update->operand_source(0)));        // its parameter, read by the forward ops

  // Run: the training program scales by 2, the test program does not (the
  // test program first: the training run updates the weights after it
  // computed the value fetched). The test program still computes the loss,
  // so it is fed the label too.
  Executor exe;
  exe.run(m.startup);
  const FeedMap feed{{"x", input_x()}, {"label", f32({4, 2}, std::vector<float>(8, 0.f))}};
  auto in_test = exe.run(test, feed, {map.lookup(m.scaled)})[0].to_vector<float>();
  auto in_train = exe.run(m.main, feed, {m.scaled})[0].to_vector<float>();
  REQUIRE(in_test.size() == in_train.size());
  for (std::size_t k = 0; k < in_test.size(); ++k) CHECK(in_train[k] == 2.f * in_test[k]);
}

TEST_CASE("clone_for_test drops set_parameter writes and every op that uses a dropped value",
          "[frontend][for_test]") {
  Program p;
  const Type t = TensorType::get(DataType::Float32, {2});
  p.set_parameter("w", Parameter{t});
  p.set_parameter("stat", Parameter{t});
  p.set_parameter("unused", Parameter{t});
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{2}).result();
  Value w = b.create<ParameterOp>("w", t).result();
  Value y = b.create<AddOp>(x, w).result();
  b.create<SetParameterOp>(y, "stat");                    // a running statistic: training only
  Value g = b.create<ScaleOp>(y, 3.0).result();
  set_op_role(g.defining_op(), OpRole::Backward);         // as append_backward marks
  Value uses_g = b.create<ReluOp>(g).result();            // unmarked, but reads a gradient
  b.create<FetchOp>(uses_g, "g");
  b.create<FetchOp>(y, "y");

  IrMapping map;
  Program test = clone_for_test(p, &map);
  CHECK(op_names(test) ==
        std::vector<std::string>{"kiln.data", "builtin.parameter", "kiln.add", "kiln.fetch"});
  CHECK(parameter_names(test) == std::vector<std::string>{"unused", "w"});  // "stat" went
  CHECK(map.contains(y));
  CHECK_FALSE(map.contains(g));
  CHECK_FALSE(map.contains(uses_g));
  CHECK(p.block().size() == 8);
  test.verify();
}

TEST_CASE("prune keeps only the ops and parameters a target needs, and drops unneeded feeds",
          "[frontend][prune]") {
  Program main, startup;
  Value x, out1, out2, loss;
  {
    UniqueNameGuard names;
    ProgramGuard guard(main, startup);
    x = data("x", {4, 3});
    nn::Linear fc1(3, 5), fc2(5, 2), other(3, 2);
    out1 = fc2(nn::functional::relu(fc1(x)));
    out2 = other(x);
    main_builder().create<FetchOp>(out2, "out2");
    auto label = data("label", {4, 2});
    loss = nn::MSELoss()(out1, label);
  }
  IrMapping map;
  Program pruned = prune(main, {out1}, &map);
  CHECK(parameter_names(pruned) == std::vector<std::string>{"linear_0.b_0", "linear_0.w_0",
                                                            "linear_1.b_0", "linear_1.w_0"});
  int data_ops = 0;
  for (Operation* op : pruned.block()) {
    CHECK_FALSE(op->isa<FetchOp>());  // a side effect out1 does not depend on
    if (auto d = op->dyn_cast<DataOp>()) {
      ++data_ops;
      CHECK(d.attrs().name == "x");
    }
  }
  CHECK(data_ops == 1);  // "label" is no longer needed
  CHECK_FALSE(map.contains(out2));
  CHECK_FALSE(map.contains(loss));
  REQUIRE(map.lookup(out1));
  pruned.verify();

  // The pruned program computes what the full one does, fed only x.
  Executor exe;
  exe.run(startup);
  auto full = exe.run(main, {{"x", input_x()}, {"label", f32({4, 2}, std::vector<float>(8, 1.f))}},
                      {out1})[0].to_vector<float>();
  auto got = exe.run(pruned, {{"x", input_x()}}, {map.lookup(out1)})[0].to_vector<float>();
  CHECK(got == full);

  // Several targets keep the union; no targets keep nothing.
  Program both = prune(main, {out1, out2});
  CHECK(parameter_names(both).size() == 6);
  Program none = prune(main, {});
  CHECK(none.block().empty());
  CHECK(none.parameters().empty());
}

TEST_CASE("prune keeps the writes a kept op reads after: set_parameter before a read, in-place "
          "ops on a target",
          "[frontend][prune]") {
  Program p;
  const Type t = TensorType::get(DataType::Float32, {2});
  p.set_parameter("w", Parameter{t});
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{2}).result();
  Value init = b.create<FullOp>(std::vector<std::int64_t>{2}, 1.0).result();
  b.create<SetParameterOp>(init, "w");  // before the read: needed
  Value w = b.create<ParameterOp>("w", t).result();
  Value y = b.create<AddOp>(x, w).result();
  Value later = b.create<FullOp>(std::vector<std::int64_t>{2}, 5.0).result();
  b.create<SetParameterOp>(later, "w");  // after the read: not needed
  Value r = b.create<Relu_Op>(y).result();  // writes y's variable in place
  Value unrelated = b.create<ExpOp>(x).result();

  IrMapping map;
  Program pruned = prune(p, {y}, &map);
  CHECK(op_names(pruned) ==
        std::vector<std::string>{"kiln.data", "kiln.full", "builtin.set_parameter",
                                 "builtin.parameter", "kiln.add", "kiln.relu_"});
  CHECK(map.contains(r));
  CHECK_FALSE(map.contains(unrelated));
  CHECK_FALSE(map.contains(later));

  // A target that is not written in place keeps no writer after it.
  Program only_exp = prune(p, {unrelated});
  CHECK(op_names(only_exp) == std::vector<std::string>{"kiln.data", "kiln.exp"});
  CHECK(only_exp.parameters().empty());
}

TEST_CASE("prune of a target that is not a value of the program is an InvalidArgument error "
          "naming it",
          "[frontend][prune]") {
  Program p, other;
  Builder b(p), ob(other);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{2}).result();
  b.create<ReluOp>(x);
  Value foreign = ob.create<DataOp>("z", std::vector<std::int64_t>{2}).result();
  KILN_CHECK_ERROR(prune(p, {x, foreign}), InvalidArgument,
                   {"target #1", "'kiln.data'", "data 'z'", "not a value of the program"});
  KILN_CHECK_ERROR(prune(p, {Value()}), InvalidArgument, {"target #0", "null"});
  CHECK(p.block().size() == 2);  // unchanged
}

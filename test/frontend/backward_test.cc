// append_backward (seed 001 §1.2.2.1) on test-only ops whose
// Vjp emits kiln's real ops: gradients checked by hand, gradient summing for
// a value used twice, stop_gradient / no_grad_set cutting the graph, no grad
// ops off the path, and the errors (non-scalar loss, an op without Vjp).
#include "frontend/frontend_test_util.h"
#include "kiln/kernel/kernel_registry.h"

using namespace kiln;
using namespace kiln_frontend_test;

namespace kiln_frontend_test {

// f32 ops of one shape each; their Vjp uses kiln.mul / kiln.full.
template <typename Concrete>
struct SameShapeBinary {
  static constexpr int num_operands = 2, num_results = 1;
  static void build(Builder&, OperationArgument& arg, Value x, Value y) {
    arg.add_operand(x);
    arg.add_operand(y);
  }
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
    if (in.at(0) != in.at(1))
      throw_error(ErrorKind::InvalidArgument, "op '", Concrete::name, "': operand types differ");
    return {in[0]};
  }
};

// x + y
struct TAddOp : Op<TAddOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface>,
                SameShapeBinary<TAddOp> {
  using Op::Op;
  static constexpr std::string_view name = "fe_test.add";
  static std::vector<Value> vjp(Builder&, Operation*, const std::vector<Value>& g) {
    return {g[0], g[0]};
  }
};

// x * y
struct TMulOp : Op<TMulOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface>,
                SameShapeBinary<TMulOp> {
  using Op::Op;
  static constexpr std::string_view name = "fe_test.mul";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
    return {b.create<MulOp>(g[0], op->operand_source(1)).result(),
            b.create<MulOp>(g[0], op->operand_source(0)).result()};
  }
};

// Σ x → a scalar
struct TSumOp : Op<TSumOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "fe_test.sum";
  static constexpr int num_operands = 1, num_results = 1;
  static void build(Builder&, OperationArgument& arg, Value x) { arg.add_operand(x); }
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
    return {TensorType::get(shaped_data_type(in.at(0)), {})};
  }
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
    Type t = op->operand_source(0).type();
    Value ones = b.create<FullOp>(shaped_dims(t), 1.0, shaped_data_type(t)).result();
    return {b.create<MulOp>(ones, g[0]).result()};
  }
};

// x, with no Vjp.
struct TNoVjpOp : Op<TNoVjpOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "fe_test.no_vjp";
  static constexpr int num_operands = 1, num_results = 1;
  static void build(Builder&, OperationArgument& arg, Value x) { arg.add_operand(x); }
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
    return {in.at(0)};
  }
};

namespace {

template <typename F>
void binary_kernel(KernelContext& ctx, F f) {
  const Tensor& x = ctx.input(0);
  const Tensor& y = ctx.input(1);
  Tensor& out = ctx.alloc_output(0, x.dims(), DataType::Float32);
  for (std::int64_t i = 0; i < x.numel(); ++i) out.data<float>()[i] = f(x.data<float>()[i], y.data<float>()[i]);
}
void add_kernel(KernelContext& ctx) { binary_kernel(ctx, [](float a, float b) { return a + b; }); }
void mul_kernel(KernelContext& ctx) { binary_kernel(ctx, [](float a, float b) { return a * b; }); }
void sum_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& out = ctx.alloc_output(0, Dims{}, DataType::Float32);
  float s = 0;
  for (std::int64_t i = 0; i < x.numel(); ++i) s += x.data<float>()[i];
  out.data<float>()[0] = s;
}
void copy_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& out = ctx.alloc_output(0, x.dims(), DataType::Float32);
  for (std::int64_t i = 0; i < x.numel(); ++i) out.data<float>()[i] = x.data<float>()[i];
}

}  // namespace

KILN_REGISTER_KERNEL(TAddOp, Cpu, Float32, add_kernel);
KILN_REGISTER_KERNEL(TMulOp, Cpu, Float32, mul_kernel);
KILN_REGISTER_KERNEL(TSumOp, Cpu, Float32, sum_kernel);
KILN_REGISTER_KERNEL(TNoVjpOp, Cpu, Float32, copy_kernel);

}  // namespace kiln_frontend_test

namespace {

Value tadd(Value x, Value y) { return main_builder().create<TAddOp>(x, y).result(); }
Value tmul(Value x, Value y) { return main_builder().create<TMulOp>(x, y).result(); }
Value tsum(Value x) { return main_builder().create<TSumOp>(x).result(); }

// A [3] parameter filled by a `kiln.full` in startup... with distinct values
// via Uniform(v, v) — U[v, v] is exactly v.
Value param(const std::string& name, double v, bool trainable = true) {
  return create_parameter(name, {3}, DataType::Float32, init::Uniform(v, v), trainable);
}

std::map<std::string, std::vector<float>> run_grads(
    Program& main_prog, Program& startup, const std::vector<std::pair<Value, Value>>& grads,
    const FeedMap& feed = {}) {
  Executor exe;
  exe.run(startup);
  std::vector<FetchTarget> fetch;
  for (auto& [p, g] : grads) fetch.push_back(g);
  auto got = exe.run(main_prog, feed, fetch);
  std::map<std::string, std::vector<float>> out;
  for (std::size_t i = 0; i < grads.size(); ++i)
    out[parameter_name(grads[i].first)] = got[i].to_vector<float>();
  return out;
}

}  // namespace

TEST_CASE("append_backward: the gradient of Σ(w·x) w.r.t. w is x, checked by running it",
          "[frontend]") {
  Program main_prog, startup;
  std::vector<std::pair<Value, Value>> grads;
  Value w;
  {
    ProgramGuard guard(main_prog, startup);
    Value x = data("x", {3});
    w = param("w", 2.0);
    Value loss = tsum(tmul(w, x));
    grads = append_backward(loss);
  }
  REQUIRE(grads.size() == 1);
  CHECK(grads[0].first == w);
  CHECK(grads[0].second.type() == w.type());
  main_prog.verify();
  // The loss seed (full), Σ's Vjp (full, mul) and w's gradient (mul); x's
  // gradient (a mul nobody reads) is removed.
  CHECK(count_top_ops(main_prog, "kiln.full") == 2);
  CHECK(count_top_ops(main_prog, "kiln.mul") == 2);
  auto g = run_grads(main_prog, startup, grads, {{"x", f32({3}, {1.f, -2.f, 0.5f})}});
  CHECK(g["w"] == std::vector<float>{1.f, -2.f, 0.5f});
}

TEST_CASE("append_backward: a value used by several ops gets the sum of its gradients (add_n)",
          "[frontend]") {
  Program main_prog, startup;
  std::vector<std::pair<Value, Value>> grads;
  {
    ProgramGuard guard(main_prog, startup);
    Value w = param("w", 3.0);
    // loss = Σ (w·w + w): w is used three times; d/dw = 2w + 1.
    Value loss = tsum(tadd(tmul(w, w), w));
    grads = append_backward(loss);
  }
  REQUIRE(grads.size() == 1);
  CHECK(grads[0].second.defining_op()->name() == "kiln.add_n");
  CHECK(grads[0].second.defining_op()->num_operands() == 3);
  auto g = run_grads(main_prog, startup, grads);
  CHECK(g["w"] == std::vector<float>(3, 7.f));
}

TEST_CASE("append_backward: stop_gradient values and the no_grad_set cut the graph", "[frontend]") {
  for (int mode : {0, 1}) {
    INFO((mode == 0 ? "stop_gradient" : "no_grad_set"));
    Program main_prog, startup;
    std::vector<std::pair<Value, Value>> grads;
    Value a, b, frozen, h;
    Operation* last_forward = nullptr;
    {
      ProgramGuard guard(main_prog, startup);
      a = param("a", 2.0);
      b = param("b", 5.0);
      frozen = param("frozen", 1.0, /*trainable=*/false);
      h = tmul(a, a);  // cut: a gets no gradient through h
      Value loss = tsum(tadd(tadd(h, tmul(b, b)), tmul(frozen, b)));
      last_forward = main_prog.block().back();
      if (mode == 0) {
        set_stop_gradient(h);
        grads = append_backward(loss);
      } else {
        grads = append_backward(loss, {}, {h});
      }
    }
    REQUIRE(grads.size() == 1);  // a is cut off; frozen is not trainable
    CHECK(grads[0].first == b);
    // No grad op reads a or h: nothing was emitted for the cut branch.
    for (Operation* op = last_forward->next_in_block(); op; op = op->next_in_block())
      for (Value v : op->operands()) {
        CHECK(v != a);
        CHECK(v != h);
      }
    auto g = run_grads(main_prog, startup, grads);
    CHECK(g["b"] == std::vector<float>(3, 2 * 5.f + 1.f));  // d/db (b² + frozen·b)
  }
}

TEST_CASE("append_backward: explicit parameters come back in the order given", "[frontend]") {
  Program main_prog, startup;
  std::vector<std::pair<Value, Value>> grads;
  Value a, b, unused;
  {
    ProgramGuard guard(main_prog, startup);
    a = param("a", 2.0);
    b = param("b", 3.0);
    unused = param("unused", 1.0);
    Value loss = tsum(tmul(a, b));
    grads = append_backward(loss, {b, unused, a});
  }
  REQUIRE(grads.size() == 2);  // `unused` does not reach the loss: left out
  CHECK(grads[0].first == b);
  CHECK(grads[1].first == a);
  auto g = run_grads(main_prog, startup, grads);
  CHECK(g["a"] == std::vector<float>(3, 3.f));
  CHECK(g["b"] == std::vector<float>(3, 2.f));
}

TEST_CASE("append_backward: ops off the path from the parameters to the loss get no grad ops",
          "[frontend]") {
  Program main_prog, startup;
  std::vector<std::pair<Value, Value>> grads;
  std::size_t before = 0;
  {
    ProgramGuard guard(main_prog, startup);
    Value x = data("x", {3});
    Value w = param("w", 2.0);
    Value side = tmul(w, w);           // from w, but never reaches the loss
    Value xx = tmul(x, x);             // reaches the loss, but no parameter flows in
    main_builder().create<TNoVjpOp>(side);  // no Vjp, off the path: fine
    // A constant is never a gradient source: its no-Vjp user is no error.
    Value c = main_builder().create<FullOp>(std::vector<std::int64_t>{3}, 1.0).result();
    Value cc = main_builder().create<TNoVjpOp>(c).result();
    Value loss = tsum(tadd(tadd(tmul(w, xx), xx), cc));
    before = main_prog.block().size();
    grads = append_backward(loss);
  }
  // Seed full; Σ: full + mul; adds: pass through; w·xx: one mul for w.
  CHECK(main_prog.block().size() - before == 4);
  auto g = run_grads(main_prog, startup, grads, {{"x", f32({3}, {1.f, 2.f, 3.f})}});
  CHECK(g["w"] == std::vector<float>{1.f, 4.f, 9.f});
}

TEST_CASE("append_backward: a loss no parameter reaches gives no gradients and no ops",
          "[frontend]") {
  Program main_prog, startup;
  ProgramGuard guard(main_prog, startup);
  param("w", 1.0);
  Value x = data("x", {3});
  Value loss = tsum(tmul(x, x));
  const std::size_t n = main_prog.block().size();
  CHECK(append_backward(loss).empty());
  CHECK(main_prog.block().size() == n);
}

TEST_CASE("append_backward: a loss that is not one floating element is an error", "[frontend]") {
  Program main_prog, startup;
  ProgramGuard guard(main_prog, startup);
  Value w = param("w", 1.0);
  Value v = tmul(w, w);  // [3]
  const std::size_t n = main_prog.block().size();
  KILN_CHECK_ERROR(append_backward(v), InvalidArgument, {"fe_test.mul", "one element", "3xf32"});
  KILN_CHECK_ERROR(append_backward(Value{}), InvalidArgument, {"null"});
  Value ids = data("ids", {1}, DataType::Int64);
  KILN_CHECK_ERROR(append_backward(ids), InvalidArgument, {"floating-point"});
  Value batch = data("b", {-1});
  KILN_CHECK_ERROR(append_backward(batch), InvalidArgument, {"one element"});
  CHECK(main_prog.block().size() == n + 2);  // only the two data ops
  // A one-element [1, 1] loss is fine.
  Value one = create_parameter("one", {1, 1}, DataType::Float32, init::Constant(2));
  auto grads = append_backward(tmul(one, one));
  REQUIRE(grads.size() == 1);
  CHECK(grads[0].first == one);
}

TEST_CASE("append_backward: an op without Vjp on the path is an error naming it, program unchanged",
          "[frontend]") {
  Program main_prog, startup;
  ProgramGuard guard(main_prog, startup);
  Value w = param("w", 1.0);
  Value h = main_builder().create<TNoVjpOp>(tmul(w, w)).result();
  Value loss = tsum(h);
  const std::string before = main_prog.to_string();
  KILN_CHECK_ERROR(append_backward(loss), Unimplemented, {"fe_test.no_vjp", "Vjp"});
  CHECK(main_prog.to_string() == before);
  // Cutting the op's input off makes it fine (no gradient needs it).
  CHECK(append_backward(loss, {}, {h}).empty());
}

TEST_CASE("append_backward: a parameter of another program is an error", "[frontend]") {
  Program other, os, main_prog, startup;
  Value foreign;
  {
    ProgramGuard g(other, os);
    foreign = param("w", 1.0);
  }
  ProgramGuard guard(main_prog, startup);
  Value w = param("w", 1.0);
  Value loss = tsum(tmul(w, w));
  KILN_CHECK_ERROR(append_backward(loss, {w, foreign}), InvalidArgument, {"'w'", "block"});
}

TEST_CASE("append_backward: a data value with stop_gradient false is a gradient source",
          "[frontend]") {
  Program main_prog, startup;
  ProgramGuard guard(main_prog, startup);
  Value w = param("w", 1.0);
  Value x = data("x", {3});
  Value loss = tsum(tadd(tmul(w, w), main_builder().create<TNoVjpOp>(x).result()));
  // x is stop_gradient (data's default): the no-Vjp op on it is off every path.
  CHECK(append_backward(loss).size() == 1);
  Program main2, startup2;
  ProgramGuard guard2(main2, startup2);
  Value w2 = param("w", 1.0);
  Value x2 = data("x", {3});
  set_stop_gradient(x2, false);
  Value loss2 = tsum(tadd(tmul(w2, w2), main_builder().create<TNoVjpOp>(x2).result()));
  KILN_CHECK_ERROR(append_backward(loss2), Unimplemented, {"fe_test.no_vjp"});
  // With explicit parameters only w2 is a source.
  CHECK(append_backward(loss2, {w2}).size() == 1);
}

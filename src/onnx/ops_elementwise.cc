// ONNX's elementwise ops → kiln's unary, binary (numpy broadcasting, as ONNX
// since opset 7), comparison and logic ops; the variadic Sum / Max / Min as
// chains of binary ops; Gemm, MatMul, Softmax, Cast.
#include "kiln/dialect/kiln_dialect.h"
#include "op_table.h"

namespace kiln::onnx::detail {

namespace {

template <typename OpT>
std::vector<Value> unary(NodeContext& c) {
  return {c.b.create<OpT>(c.input(0)).result()};
}

template <typename OpT>
std::vector<Value> binary(NodeContext& c) {
  return {c.b.create<OpT>(c.input(0), c.input(1)).result()};
}

// Sum / Max / Min over any number of inputs, broadcasting.
template <typename OpT>
std::vector<Value> variadic(NodeContext& c) {
  Value acc = c.input(0);
  for (std::size_t i = 1; i < c.inputs.size(); ++i) acc = c.b.create<OpT>(acc, c.input(i)).result();
  return {acc};
}

std::vector<Value> identity(NodeContext& c) { return {c.input(0)}; }

std::vector<Value> reciprocal(NodeContext& c) {
  Value x = c.input(0);
  Value one = c.b.create<FullOp>(std::vector<std::int64_t>{}, 1.0, shaped_data_type(x.type())).result();
  return {c.b.create<DivOp>(one, x).result()};
}

// Y = alpha · A' · B' + beta · C (C broadcast to [M, N]).
std::vector<Value> gemm(NodeContext& c) {
  Value y = c.b.create<MatmulOp>(c.input(0), c.input(1), c.int_attr("transA", 0) != 0,
                                 c.int_attr("transB", 0) != 0)
                .result();
  const double alpha = c.float_attr("alpha", 1.0f), beta = c.float_attr("beta", 1.0f);
  if (alpha != 1.0) y = c.b.create<ScaleOp>(y, alpha, 0.0).result();
  if (c.inputs.size() > 2 && c.inputs[2] && beta != 0.0) {
    Value bias = c.inputs[2];
    if (beta != 1.0) bias = c.b.create<ScaleOp>(bias, beta, 0.0).result();
    y = c.b.create<AddOp>(y, bias).result();
  }
  return {y};
}

// numpy matmul for operands of rank >= 2 (a 1-D operand is not promoted yet).
std::vector<Value> matmul(NodeContext& c) {
  for (std::size_t i = 0; i < 2; ++i)
    if (shaped_dims(c.input(i).type()).size() < 2)
      c.unsupported("MatMul of a 1-D operand (#" + std::to_string(i) + ") is not imported yet");
  return {c.b.create<MatmulOp>(c.input(0), c.input(1)).result()};
}

// Opset 13 normalizes along `axis` alone; before, the input was coerced to
// 2-D at `axis` (default 1), the same thing only when axis is the last dim.
std::vector<Value> softmax(NodeContext& c) {
  Value x = c.input(0);
  const auto rank = static_cast<std::int64_t>(shaped_dims(x.type()).size());
  std::int64_t axis = c.int_attr("axis", c.opset >= 13 ? -1 : 1);
  if (axis < 0) axis += rank;
  if (c.opset < 13 && axis != rank - 1)
    c.unsupported("Softmax before opset 13 with axis " + std::to_string(axis) +
                  " (not the last dim) flattens its input; not imported yet");
  return {c.b.create<SoftmaxOp>(x, axis).result()};
}

std::vector<Value> cast(NodeContext& c) {
  DataType to;
  switch (c.int_attr("to", 0)) {
    case ::onnx::TensorProto_DataType_FLOAT: to = DataType::Float32; break;
    case ::onnx::TensorProto_DataType_DOUBLE: to = DataType::Float64; break;
    case ::onnx::TensorProto_DataType_INT32: to = DataType::Int32; break;
    case ::onnx::TensorProto_DataType_INT64: to = DataType::Int64; break;
    case ::onnx::TensorProto_DataType_BOOL: to = DataType::Bool; break;
    default:
      c.unsupported("Cast to element type " + std::to_string(c.int_attr("to", 0)) +
                    "; kiln has float, double, int32, int64 and bool");
  }
  return {c.b.create<CastOp>(c.input(0), to).result()};
}

}  // namespace

void add_elementwise_ops(OpTable& t) {
  // Numpy broadcasting from opset 7 (before: a `broadcast` attribute).
  t["Add"] = {&binary<AddOp>, 7};
  t["Sub"] = {&binary<SubOp>, 7};
  t["Mul"] = {&binary<MulOp>, 7};
  t["Div"] = {&binary<DivOp>, 7};
  t["Pow"] = {&binary<PowOp>, 7};
  t["Sum"] = {&variadic<AddOp>, 8};
  t["Max"] = {&variadic<MaximumOp>, 8};
  t["Min"] = {&variadic<MinimumOp>, 8};
  t["Relu"] = {&unary<ReluOp>, 6};
  t["Tanh"] = {&unary<TanhOp>, 6};
  t["Sigmoid"] = {&unary<SigmoidOp>, 6};
  t["Exp"] = {&unary<ExpOp>, 6};
  t["Log"] = {&unary<LogOp>, 6};
  t["Sqrt"] = {&unary<SqrtOp>, 6};
  t["Abs"] = {&unary<AbsOp>, 6};
  t["Neg"] = {&unary<NegOp>, 6};
  t["Reciprocal"] = {&reciprocal, 6};
  t["Identity"] = {&identity, 1};
  t["Equal"] = {&binary<EqualOp>, 11};
  t["Less"] = {&binary<LessThanOp>, 9};
  t["Greater"] = {&binary<GreaterThanOp>, 9};
  t["LessOrEqual"] = {&binary<LessEqualOp>, 12};
  t["GreaterOrEqual"] = {&binary<GreaterEqualOp>, 12};
  t["And"] = {&binary<LogicalAndOp>, 7};
  t["Or"] = {&binary<LogicalOrOp>, 7};
  t["Xor"] = {&binary<LogicalXorOp>, 7};
  t["Not"] = {&unary<LogicalNotOp>, 1};
  t["Gemm"] = {&gemm, 6};  // C broadcast one way (numpy-compatible) in every version
  t["MatMul"] = {&matmul, 9};
  t["Softmax"] = {&softmax, 1};
  t["Cast"] = {&cast, 13};
}

}  // namespace kiln::onnx::detail

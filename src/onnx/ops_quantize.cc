// ONNX's quantization ops as compositions of kiln ops: the quantized
// tensors (u8 / i8, i32 for a bias) are kiln storage types, computed on in
// f32 (QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, QLinearConv,
// QLinearMatMul) or in f64, where every integer product and sum of the
// integer ops is exact (MatMulInteger, ConvInteger).
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "kiln/dialect/kiln_dialect.h"
#include "model_proto.h"
#include "op_table.h"

namespace kiln::onnx::detail {
namespace {

Value cast_to(NodeContext& c, Value x, DataType dt) {
  return shaped_data_type(x.type()) == dt ? x : c.b.create<CastOp>(x, dt).result();
}

// A scale or zero point for x: a scalar (or one element), or 1-D along
// `axis` of x, reshaped to broadcast there.
Value along_axis(NodeContext& c, Value v, Value x, std::int64_t axis, const std::string& what) {
  const std::vector<std::int64_t> vd = shaped_dims(v.type());
  if (vd.empty() || (vd.size() == 1 && vd[0] == 1)) return v;
  const auto rank = static_cast<std::int64_t>(shaped_dims(x.type()).size());
  if (vd.size() != 1)
    c.unsupported(what + " of rank " + std::to_string(vd.size()) + " (a scalar or 1-D along axis)");
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank)
    throw_error(ErrorKind::InvalidArgument, "ONNX ", c.where(), ": axis ", axis,
                " is outside an input of rank ", rank);
  std::vector<std::int64_t> shape(static_cast<std::size_t>(rank), 1);
  shape[static_cast<std::size_t>(axis)] = vd[0];
  return c.b.create<ReshapeOp>(v, shape).result();
}

// (x - zero_point) · scale in f32; zero_point may be null (0).
Value dequantize(NodeContext& c, Value x, Value scale, Value zero_point, std::int64_t axis) {
  Value y = cast_to(c, x, DataType::Float32);
  if (zero_point)
    y = c.b.create<SubOp>(y, along_axis(c, cast_to(c, zero_point, DataType::Float32), x, axis,
                                        "a zero point")).result();
  return c.b.create<MulOp>(y, along_axis(c, cast_to(c, scale, DataType::Float32), x, axis, "a scale"))
      .result();
}

// The range of a quantized type, for saturation.
std::pair<double, double> range_of(NodeContext& c, DataType dt) {
  switch (dt) {
    case DataType::UInt8: return {0, 255};
    case DataType::Int8: return {-128, 127};
    case DataType::Int32:
      return {std::numeric_limits<std::int32_t>::min(), std::numeric_limits<std::int32_t>::max()};
    default: break;
  }
  c.unsupported("a quantized type " + std::string(to_string(dt)) + " (u8, i8 or i32)");
}

// saturate(round_half_even(y / scale) + zero_point) as `dt`.
Value quantize(NodeContext& c, Value y, Value scale, Value zero_point, std::int64_t axis,
               DataType dt) {
  Value q = c.b.create<DivOp>(cast_to(c, y, DataType::Float32),
                              along_axis(c, cast_to(c, scale, DataType::Float32), y, axis, "a scale"))
                .result();
  q = c.b.create<RoundOp>(q).result();
  if (zero_point)
    q = c.b.create<AddOp>(q, along_axis(c, cast_to(c, zero_point, DataType::Float32), y, axis,
                                        "a zero point")).result();
  const auto [lo, hi] = range_of(c, dt);
  q = c.b.create<ClipOp>(q, lo, hi).result();
  return c.b.create<CastOp>(q, dt).result();
}

Value optional_input(const NodeContext& c, std::size_t i) {
  return i < c.inputs.size() ? c.inputs[i] : Value();
}

// The element type an int attribute names (output_dtype), when kiln imports it.
std::optional<DataType> type_named(std::int64_t t) {
  return t > 0 && t < 64 ? kiln_data_type(static_cast<std::int32_t>(t)) : std::nullopt;
}

// Opset 21's blocked quantization (block_size > 0) is not imported.
void per_tensor_or_axis(NodeContext& c) {
  if (c.int_attr("block_size", 0) != 0) c.unsupported("block_size " + std::to_string(c.int_attr("block_size", 0)));
}

// The result's type: f32 before opset 19, the scale's since, or opset
// 23's output_dtype.
std::vector<Value> dequantize_linear(NodeContext& c) {
  per_tensor_or_axis(c);
  Value x = dequantize(c, c.input(0), c.input(1), optional_input(c, 2), c.int_attr("axis", 1));
  DataType want = c.opset >= 19 ? shaped_data_type(c.input(1).type()) : DataType::Float32;
  if (const std::int64_t od = c.int_attr("output_dtype", 0); od != 0) {
    const auto given = type_named(od);
    if (!given || !is_floating(*given)) c.unsupported("output_dtype " + std::to_string(od) + " (a float type)");
    want = *given;
  }
  return {cast_to(c, x, want)};
}

// y's type: the zero point's, else opset 21's output_dtype, else u8.
std::vector<Value> quantize_linear(NodeContext& c) {
  per_tensor_or_axis(c);
  // opset 23's precision: the type y / scale is computed in (kiln: f32)
  if (const std::int64_t p = c.int_attr("precision", 0); p != 0 && p != ::onnx::TensorProto_DataType_FLOAT)
    c.unsupported("precision " + std::to_string(p) + " (float only)");
  Value zp = optional_input(c, 2);
  DataType dt = zp ? shaped_data_type(zp.type()) : DataType::UInt8;
  if (const std::int64_t od = c.int_attr("output_dtype", 0); od != 0) {
    const auto want = type_named(od);
    if (!want || (zp && *want != dt))
      c.unsupported("output_dtype " + std::to_string(od) + " (a type kiln imports, the zero point's)");
    dt = *want;
  }
  return {quantize(c, c.input(0), c.input(1), zp, c.int_attr("axis", 1), dt)};
}

// u8 with the range [min(x, 0), max(x, 0)] mapped onto [0, 255]: the scale
// (range / 255) and zero point (round(-min / scale), saturated) as outputs.
std::vector<Value> dynamic_quantize_linear(NodeContext& c) {
  Value x = cast_to(c, c.input(0), DataType::Float32);
  const auto rank = static_cast<std::int64_t>(shaped_dims(x.type()).size());
  std::vector<std::int64_t> all(static_cast<std::size_t>(rank));
  for (std::int64_t i = 0; i < rank; ++i) all[static_cast<std::size_t>(i)] = i;
  Value zero = c.b.create<FullOp>(std::vector<std::int64_t>{}, 0.0, DataType::Float32).result();
  Value hi = c.b.create<MaximumOp>(c.b.create<MaxOp>(x, all).result(), zero).result();
  Value neg_x = c.b.create<NegOp>(x).result();
  Value lo = c.b.create<MinimumOp>(
                 c.b.create<NegOp>(c.b.create<MaxOp>(neg_x, all).result()).result(), zero)
                 .result();
  Value qrange = c.b.create<FullOp>(std::vector<std::int64_t>{}, 255.0, DataType::Float32).result();
  Value scale = c.b.create<DivOp>(c.b.create<SubOp>(hi, lo).result(), qrange).result();
  Value zp = c.b.create<RoundOp>(c.b.create<DivOp>(c.b.create<NegOp>(lo).result(), scale).result())
                 .result();
  zp = c.b.create<CastOp>(c.b.create<ClipOp>(zp, 0.0, 255.0).result(), DataType::UInt8).result();
  return {quantize(c, x, scale, zp, 1, DataType::UInt8), scale, zp};
}

// Runs the table's builder for `op_type` on other inputs, with this node's
// attributes (ConvInteger's are Conv's).
std::vector<Value> build_as(NodeContext& c, const std::string& op_type, std::vector<Value> inputs) {
  NodeContext sub = c;
  sub.inputs = std::move(inputs);
  sub.constants = KnownInputs();
  sub.sequences.assign(sub.inputs.size(), nullptr);
  return op_table().at(op_type).build(sub);
}

// x - zero_point in f64 (exact for 8-bit operands); zero_point may be null.
Value centered(NodeContext& c, Value x, Value zero_point, std::int64_t axis) {
  Value y = cast_to(c, x, DataType::Float64);
  if (!zero_point) return y;
  return c.b.create<SubOp>(y, along_axis(c, cast_to(c, zero_point, DataType::Float64), x, axis,
                                         "a zero point"))
      .result();
}

// (A - a_zero_point) @ (B - b_zero_point) in i32; a's zero point per row
// (axis 0 of a 2-D A) or per tensor, b's per column or per tensor.
std::vector<Value> matmul_integer(NodeContext& c) {
  Value a = c.input(0), b = c.input(1);
  const auto ra = static_cast<std::int64_t>(shaped_dims(a.type()).size());
  Value y = build_as(c, "MatMul", {centered(c, a, optional_input(c, 2), ra - 2),
                                   centered(c, b, optional_input(c, 3), -1)})[0];
  return {c.b.create<CastOp>(y, DataType::Int32).result()};
}

// Conv of (x - x_zero_point) and (w - w_zero_point, per output channel) in
// i32.
std::vector<Value> conv_integer(NodeContext& c) {
  Value y = build_as(c, "Conv", {centered(c, c.input(0), optional_input(c, 2), 1),
                                 centered(c, c.input(1), optional_input(c, 3), 0)})[0];
  return {c.b.create<CastOp>(y, DataType::Int32).result()};
}

// Dequantized operands, the float op, the result quantized to y's scale
// and zero point.
std::vector<Value> qlinear_matmul(NodeContext& c) {
  Value a = dequantize(c, c.input(0), c.input(1), c.input(2), 0);
  Value b = dequantize(c, c.input(3), c.input(4), c.input(5), -1);
  Value y = build_as(c, "MatMul", {a, b})[0];
  Value zp = c.input(7);
  return {quantize(c, y, c.input(6), zp, 1, shaped_data_type(zp.type()))};
}

// The bias (i32, scaled by x_scale · w_scale) joins the f32 conv.
std::vector<Value> qlinear_conv(NodeContext& c) {
  Value x = dequantize(c, c.input(0), c.input(1), c.input(2), 1);
  Value w = dequantize(c, c.input(3), c.input(4), c.input(5), 0);
  std::vector<Value> inputs{x, w};
  if (Value bias = optional_input(c, 8)) {
    Value scale = c.b.create<MulOp>(cast_to(c, c.input(1), DataType::Float32),
                                    cast_to(c, c.input(4), DataType::Float32)).result();
    inputs.push_back(c.b.create<MulOp>(cast_to(c, bias, DataType::Float32), scale).result());
  }
  Value y = build_as(c, "Conv", inputs)[0];
  Value zp = c.input(7);
  return {quantize(c, y, c.input(6), zp, 1, shaped_data_type(zp.type()))};
}

}  // namespace

void add_quantize_ops(OpTable& t) {
  t["QuantizeLinear"] = {&quantize_linear, 10};
  t["DequantizeLinear"] = {&dequantize_linear, 10};
  t["DynamicQuantizeLinear"] = {&dynamic_quantize_linear, 11};
  t["MatMulInteger"] = {&matmul_integer, 10};
  t["ConvInteger"] = {&conv_integer, 10};
  t["QLinearMatMul"] = {&qlinear_matmul, 10};
  t["QLinearConv"] = {&qlinear_conv, 10};
}

}  // namespace kiln::onnx::detail

// Export of kiln's elementwise families: broadcasting binaries and add_n,
// the unary family (gelu composed from Erf or Tanh), scale, assign, cast,
// comparisons and logical ops, where, clip, masked_fill, triu / tril.
#include <algorithm>
#include <cmath>
#include <limits>

#include "export_table.h"
#include "kiln/dialect/kiln_dialect.h"

namespace kiln::onnx::detail {

Emitter same_as(std::string onnx_type) {
  return [onnx_type](EmitContext& c) {
    std::vector<std::string> ins;
    for (std::size_t i = 0; i < c.num_operands(); ++i) ins.push_back(c.in(i));
    std::vector<std::string> outs;
    for (std::uint32_t i = 0; i < c.op()->num_results(); ++i) outs.push_back(c.out(i));
    c.node(onnx_type, ins, outs);
  };
}

namespace {

bool is_float(DataType dt) { return dt == DataType::Float32 || dt == DataType::Float64; }

// A bound as a constant of `dt`: integers get it clamped to their range
// first (kiln converts its double attributes the same way).
std::string bound(EmitContext& c, DataType dt, double v) {
  if (dt == DataType::Int32)
    v = std::clamp(v, double(std::numeric_limits<std::int32_t>::min()),
                   double(std::numeric_limits<std::int32_t>::max()));
  else if (dt == DataType::Int64)
    v = std::clamp(v, -9.2233720368547748e18, 9.2233720368547748e18 - 1024);
  return c.scalar(dt, v);
}

// not_equal(x, y) = Not(Equal(x, y))
void not_equal(EmitContext& c) { c.node("Not", {c.node1("Equal", {c.in(0), c.in(1)})}, {c.out(0)}); }

// isfinite(x) = Not(Or(IsNaN(x), IsInf(x))); integers are always finite.
void isfinite(EmitContext& c) {
  if (!is_float(c.in_dtype(0))) {
    c.node("Equal", {c.in(0), c.in(0)}, {c.out(0)});  // all true, in x's shape
    return;
  }
  const std::string nan = c.node1("IsNaN", {c.in(0)});
  const std::string inf = c.node1("IsInf", {c.in(0)});
  c.node("Not", {c.node1("Or", {nan, inf})}, {c.out(0)});
}

void square(EmitContext& c) { c.node("Mul", {c.in(0), c.in(0)}, {c.out(0)}); }

// gelu: exact 0.5·x·(1 + erf(x/√2)); approximate 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
void gelu(EmitContext& c) {
  const DataType dt = c.in_dtype(0);
  const std::string x = c.in(0);
  std::string inner;
  if (!GeluOp::dyn_cast(c.op()).attrs().approximate) {
    inner = c.node1("Erf", {c.node1("Mul", {x, c.scalar(dt, 0.70710678118654752440)})});
  } else {
    const std::string x3 = c.node1("Mul", {c.node1("Mul", {x, x}), x});
    const std::string s = c.node1("Add", {x, c.node1("Mul", {x3, c.scalar(dt, 0.044715)})});
    inner = c.node1("Tanh", {c.node1("Mul", {s, c.scalar(dt, 0.79788456080286535588)})});
  }
  const std::string half_x = c.node1("Mul", {x, c.scalar(dt, 0.5)});
  c.node("Mul", {half_x, c.node1("Add", {inner, c.scalar(dt, 1.0)})}, {c.out(0)});
}

// scale: bias_after_scale ? scale·x + bias : scale·(x + bias); floats only
// (kiln rounds integer results through double, which ONNX cannot say).
void scale(EmitContext& c) {
  const DataType dt = c.in_dtype(0);
  if (!is_float(dt)) c.unsupported("scale of a " + std::string(to_string(dt)) + " tensor");
  const auto a = ScaleOp::dyn_cast(c.op()).attrs();
  if (a.bias_after_scale)
    c.node("Add", {c.node1("Mul", {c.in(0), c.scalar(dt, a.scale)}), c.scalar(dt, a.bias)},
           {c.out(0)});
  else
    c.node("Mul", {c.node1("Add", {c.in(0), c.scalar(dt, a.bias)}), c.scalar(dt, a.scale)},
           {c.out(0)});
}

void cast(EmitContext& c) {
  const DataType to = CastOp::dyn_cast(c.op()).attrs().dtype;
  auto& n = c.node("Cast", {c.in(0)}, {c.out(0)});
  set_attr(n, "to", static_cast<std::int64_t>(onnx_elem_type(to, "kiln " + c.where() + " target")));
}

void clip(EmitContext& c) {
  const auto a = ClipOp::dyn_cast(c.op()).attrs();
  const DataType dt = c.in_dtype(0);
  c.node("Clip", {c.in(0), bound(c, dt, a.min), bound(c, dt, a.max)}, {c.out(0)});
}

// masked_fill(x, mask) = Where(mask, value, x)
void masked_fill(EmitContext& c) {
  const double v = MaskedFillOp::dyn_cast(c.op()).attrs().value;
  c.node("Where", {c.in(1), bound(c, c.in_dtype(0), v), c.in(0)}, {c.out(0)});
}

template <typename TriOp, bool upper>
void triangle(EmitContext& c) {
  auto& n = c.node("Trilu", {c.in(0), c.const_i64({TriOp::dyn_cast(c.op()).attrs().diagonal})},
                   {c.out(0)});
  set_attr(n, "upper", static_cast<std::int64_t>(upper));
}

// ONNX Mod: the divisor's sign (fmod = 0; integers only) or the
// dividend's (fmod = 1).
template <bool fmod>
void remainder(EmitContext& c) {
  if (!fmod && !is_integer(c.in_dtype(0)))
    c.unsupported("kiln.mod of " + std::string(to_string(c.in_dtype(0))) +
                  " (ONNX Mod takes floats only as fmod, the dividend's sign)");
  auto& n = c.node("Mod", {c.in(0), c.in(1)}, {c.out(0)});
  set_attr(n, "fmod", static_cast<std::int64_t>(fmod));
}

// ONNX BitShift shifts unsigned integers only.
template <bool left>
void bit_shift(EmitContext& c) {
  if (!is_unsigned(c.in_dtype(0)))
    c.unsupported("a shift of " + std::string(to_string(c.in_dtype(0))) +
                  " (ONNX BitShift takes u8, u16, u32 and u64)");
  auto& n = c.node("BitShift", {c.in(0), c.in(1)}, {c.out(0)});
  set_attr(n, "direction", std::string(left ? "LEFT" : "RIGHT"));
}

}  // namespace

void add_export_elementwise(ExportTable& t) {
  // Broadcasting binaries (numpy rules in both) and add_n.
  t["kiln.add"] = same_as("Add");
  t["kiln.sub"] = same_as("Sub");
  t["kiln.mul"] = same_as("Mul");
  t["kiln.div"] = same_as("Div");
  t["kiln.maximum"] = same_as("Max");
  t["kiln.minimum"] = same_as("Min");
  t["kiln.pow"] = same_as("Pow");
  t["kiln.mod"] = &remainder<false>;
  t["kiln.fmod"] = &remainder<true>;
  t["kiln.shift_left"] = &bit_shift<true>;
  t["kiln.shift_right"] = &bit_shift<false>;
  t["kiln.add_n"] = same_as("Sum");
  // The unary family, the in-place twins as their out-of-place ops.
  for (const auto& [kiln_name, onnx_name] : std::vector<std::pair<std::string, std::string>>{
           {"relu", "Relu"},   {"relu_", "Relu"},   {"tanh", "Tanh"}, {"sigmoid", "Sigmoid"},
           {"exp", "Exp"},     {"log", "Log"},      {"sqrt", "Sqrt"}, {"sqrt_", "Sqrt"},
           {"abs", "Abs"},     {"neg", "Neg"},      {"sin", "Sin"},   {"cos", "Cos"},
           {"tan", "Tan"},     {"asin", "Asin"},    {"acos", "Acos"}, {"atan", "Atan"},
           {"sinh", "Sinh"},   {"cosh", "Cosh"},    {"asinh", "Asinh"}, {"acosh", "Acosh"},
           {"atanh", "Atanh"}, {"erf", "Erf"},      {"floor", "Floor"}, {"ceil", "Ceil"},
           {"round", "Round"}, {"sign", "Sign"},    {"assign", "Identity"}})
    t["kiln." + kiln_name] = same_as(onnx_name);
  t["kiln.square"] = &square;
  t["kiln.gelu"] = &gelu;
  t["kiln.scale"] = &scale;
  t["kiln.cast"] = &cast;
  // Comparisons and logical ops (bool results).
  t["kiln.equal"] = same_as("Equal");
  t["kiln.not_equal"] = &not_equal;
  t["kiln.less_than"] = same_as("Less");
  t["kiln.less_equal"] = same_as("LessOrEqual");
  t["kiln.greater_than"] = same_as("Greater");
  t["kiln.greater_equal"] = same_as("GreaterOrEqual");
  t["kiln.logical_and"] = same_as("And");
  t["kiln.logical_or"] = same_as("Or");
  t["kiln.logical_xor"] = same_as("Xor");
  t["kiln.logical_not"] = same_as("Not");
  t["kiln.isnan"] = same_as("IsNaN");
  t["kiln.isfinite"] = &isfinite;
  t["kiln.where"] = same_as("Where");
  t["kiln.clip"] = &clip;
  t["kiln.masked_fill"] = &masked_fill;
  t["kiln.triu"] = &triangle<TriuOp, true>;
  t["kiln.tril"] = &triangle<TrilOp, false>;
}

}  // namespace kiln::onnx::detail

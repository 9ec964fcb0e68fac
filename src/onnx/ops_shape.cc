// ONNX's tensor-making ops whose result shape may be known only at run time:
// ConstantOfShape (kiln.full for a shape known at import, else
// kiln.full_by), Range (kiln.range) and Tile (reshape / expand / reshape for
// constant repeats, else kiln.tile); and the reading of
// shape vectors' entries known at import (shape_values.h).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kiln/dialect/fused_ops.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/dialect/shape_ops.h"
#include "kiln/ir/tensor_attribute.h"
#include "op_table.h"
#include "shape_values.h"

namespace kiln::onnx::detail {

namespace {

using Known = std::vector<std::optional<std::int64_t>>;

// The integers of a builtin.constant; nullopt for another op or dtype.
std::optional<std::vector<std::int64_t>> constant_ints_of(Operation* op) {
  if (!op || !op->isa<ConstantOp>()) return std::nullopt;
  auto a = ConstantOp(op).value().dyn_cast<TensorAttribute>();
  if (!a) return std::nullopt;
  std::vector<std::int64_t> v(static_cast<std::size_t>(a.numel()));
  const char* p = a.bytes().data();
  if (a.dtype() == DataType::Int64) {
    for (std::size_t i = 0; i < v.size(); ++i) std::memcpy(&v[i], p + 8 * i, 8);
  } else if (a.dtype() == DataType::Int32) {
    for (std::size_t i = 0; i < v.size(); ++i) {
      std::int32_t x;
      std::memcpy(&x, p + 4 * i, 4);
      v[i] = x;
    }
  } else {
    return std::nullopt;
  }
  return v;
}

// out[i] = from[idx[i]] (a negative index counts from the end); entries
// whose index falls outside `from` stay as they are.
template <typename Entry>
void gather_entries(const std::vector<Entry>& from, const std::vector<std::int64_t>& idx,
                    std::vector<Entry>& out) {
  for (std::size_t i = 0; i < out.size() && i < idx.size(); ++i) {
    std::int64_t k = idx[i];
    if (k < 0) k += static_cast<std::int64_t>(from.size());
    if (k >= 0 && k < static_cast<std::int64_t>(from.size())) out[i] = from[static_cast<std::size_t>(k)];
  }
}

// The entries of an integer value of static size (any rank, row-major);
// empty when its size is not known. Follows at most `depth` ops back.
Known known_values(Value v, int depth) {
  if (!v || !is_shaped(v.type())) return {};
  const DataType dt = shaped_data_type(v.type());
  if (dt != DataType::Int64 && dt != DataType::Int32) return {};
  std::int64_t n = 1;
  for (auto d : shaped_dims(v.type())) {
    if (d < 0 || n > 64) return {};
    n *= d;
  }
  if (n > 64) return {};
  Known out(static_cast<std::size_t>(n));
  Operation* op = v.defining_op();
  if (!op || depth <= 0) return out;
  if (auto c = constant_ints_of(op)) {
    for (std::size_t i = 0; i < out.size() && i < c->size(); ++i) out[i] = (*c)[i];
    return out;
  }
  if (op->isa<ShapeOp>()) {
    const auto& d = shaped_dims(op->operand_source(0).type());
    for (std::size_t i = 0; i < out.size() && i < d.size(); ++i)
      if (d[i] >= 0) out[i] = d[i];
    return out;
  }
  // Ops that keep the elements in order: views and casts between integers.
  if (op->isa<UnsqueezeOp>() || op->isa<SqueezeOp>() || op->isa<ReshapeOp>() || op->isa<FlattenOp>() ||
      op->isa<CastOp>()) {
    Known in = known_values(op->operand_source(0), depth - 1);
    return in.size() == out.size() ? in : out;
  }
  if (op->isa<ConcatOp>() && shaped_dims(v.type()).size() == 1) {
    Known all;
    for (std::uint32_t i = 0; i < op->num_operands(); ++i) {
      Known part = known_values(op->operand_source(i), depth - 1);
      if (part.empty()) return out;
      all.insert(all.end(), part.begin(), part.end());
    }
    return all.size() == out.size() ? all : out;
  }
  if (op->isa<GatherOp>() && GatherOp(op).attrs().axis == 0 &&
      shaped_dims(op->operand_source(0).type()).size() == 1) {
    Known from = known_values(op->operand_source(0), depth - 1);
    auto idx = constant_ints_of(op->operand_source(1).defining_op());
    if (!idx || idx->size() != out.size()) return out;
    gather_entries(from, *idx, out);
    return out;
  }
  if (op->isa<SliceOp>() && shaped_dims(v.type()).size() == 1) {
    Known from = known_values(op->operand_source(0), depth - 1);
    auto a = SliceOp(op).attrs();
    if (from.empty() || a.axes.size() != 1) return out;
    auto [b, e] = slice_range(a.starts[0], a.ends[0], static_cast<std::int64_t>(from.size()));
    if (e - b != static_cast<std::int64_t>(out.size())) return out;
    return Known(from.begin() + b, from.begin() + e);
  }
  return out;
}

// The value attribute (a one-element tensor; default float 0) fills the shape.
std::vector<Value> constant_of_shape(NodeContext& c) {
  double value = 0.0;
  DataType dt = DataType::Float32;
  if (const auto* a = c.attribute("value")) {
    const Tensor t = tensor_of(a->t(), c.where() + " value");
    if (t.numel() != 1) c.unsupported("a value attribute of " + std::to_string(t.numel()) + " elements");
    dt = t.dtype();
    switch (dt) {
      case DataType::Float32: value = t.to_vector<float>()[0]; break;
      case DataType::Float64: value = t.to_vector<double>()[0]; break;
      case DataType::Int32: value = t.to_vector<std::int32_t>()[0]; break;
      case DataType::Int64: value = static_cast<double>(t.to_vector<std::int64_t>()[0]); break;
      case DataType::Bool: value = t.to_vector<bool>()[0] ? 1.0 : 0.0; break;
      default: c.unsupported("a value of dtype " + std::string(to_string(dt)));
    }
  }
  if (c.constants[0])
    return {c.b.create<FullOp>(c.constant_ints(0, "ConstantOfShape's shape"), value, dt).result()};
  // Entries known at import keep their dims static.
  std::vector<std::int64_t> known;
  for (const auto& v : shape_values(c.input(0))) known.push_back(v && *v >= 0 ? *v : -1);
  if (!known.empty() && std::none_of(known.begin(), known.end(), [](std::int64_t d) { return d < 0; }))
    return {c.b.create<FullOp>(known, value, dt).result()};
  if (std::all_of(known.begin(), known.end(), [](std::int64_t d) { return d < 0; })) known.clear();
  return {c.b.create<FullByOp>(c.input(0), value, dt, known).result()};
}

// kiln.range; its length computed here when start, limit and delta are
// known at import (a view with that static length: checked per run).
std::vector<Value> range(NodeContext& c) {
  Value r = c.b.create<RangeOp>(c.input(0), c.input(1), c.input(2)).result();
  if (!c.constants[0] || !c.constants[1] || !c.constants[2]) return {r};
  double v[3];
  for (std::size_t i = 0; i < 3; ++i) {
    const Tensor& t = *c.constants[i];
    if (t.numel() != 1) return {r};
    switch (t.dtype()) {
      case DataType::Float32: v[i] = t.to_vector<float>()[0]; break;
      case DataType::Float64: v[i] = t.to_vector<double>()[0]; break;
      case DataType::Int32: v[i] = t.to_vector<std::int32_t>()[0]; break;
      case DataType::Int64: v[i] = static_cast<double>(t.to_vector<std::int64_t>()[0]); break;
      default: return {r};
    }
  }
  // The kernel's formula (in double for floats; exact for integers below
  // 2^52); the reshape's kernel checks the length again per run.
  for (double x : v)
    if (!(std::abs(x) < 4503599627370496.0)) return {r};
  const double n = v[2] != 0 ? std::ceil((v[1] - v[0]) / v[2]) : -1;
  if (!(n >= 0 && n < 1e9)) return {r};
  return {c.b.create<ReshapeOp>(r, std::vector<std::int64_t>{static_cast<std::int64_t>(n)}).result()};
}

// Constant repeats of an input whose dims are known (rank <= 4): x viewed as
// [1, d0, 1, d1, …], expanded to [r0, d0, r1, d1, …], viewed as
// [r0·d0, r1·d1, …] — static dims and a gradient; else kiln.tile.
std::vector<Value> tile(NodeContext& c) {
  Value x = c.input(0);
  const auto& d = shaped_dims(x.type());
  // (A 0 in a reshape's shape copies a dim, so empty dims take kiln.tile.)
  const bool composable = c.constants[1] && 2 * d.size() <= 9 &&
                          std::all_of(d.begin(), d.end(), [](std::int64_t v) { return v > 0; });
  const std::vector<std::int64_t> reps =
      composable ? c.constant_ints(1, "Tile's repeats") : std::vector<std::int64_t>{};
  std::vector<std::int64_t> split, expanded, out(reps.size());
  bool ok = composable && reps.size() == d.size();
  for (std::size_t i = 0; ok && i < d.size(); ++i) {
    ok = reps[i] > 0 && !__builtin_mul_overflow(reps[i], d[i], &out[i]);
    split.insert(split.end(), {1, d[i]});
    expanded.insert(expanded.end(), {reps[i], d[i]});
  }
  if (ok) {
    Value v = c.b.create<ReshapeOp>(x, split).result();
    v = c.b.create<ExpandOp>(v, expanded).result();
    return {c.b.create<ReshapeOp>(v, out).result()};
  }
  return {c.b.create<TileOp>(x, c.input(1)).result()};
}

}  // namespace

// ---- dims known only at run time, by where they come from ----

namespace {
// Axis a of a rank-`rank` value counted from the front.
std::int64_t normalized_axis(std::int64_t a, std::size_t rank) {
  return a < 0 ? a + static_cast<std::int64_t>(rank) : a;
}
}  // namespace

// Dim d of v followed back through ops whose result dim d is, by the op's
// definition, one dim of one operand: transposes, reshapes that copy it
// (a 0 entry), concats and slices along another axis, convolutions and
// pools (the batch), the unary elementwise ops. Stops at the first
// op it does not know (that op's result is then the origin).
DimOrigin dim_origin(Value v, std::int64_t d) {
  for (int depth = 0; depth < 64; ++depth) {
    Operation* op = v.defining_op();
    if (!op || op->num_operands() == 0) break;
    const auto& od = shaped_dims(v.type());
    if (d < 0 || d >= static_cast<std::int64_t>(od.size())) break;
    Value x = op->operand_source(0);
    if (!x || !is_shaped(x.type())) break;
    const auto& xd = shaped_dims(x.type());
    std::int64_t from = -1;
    if (op->isa<TransposeOp>()) {
      const auto perm = TransposeOp(op).attrs().perm;
      if (d < static_cast<std::int64_t>(perm.size())) from = perm[static_cast<std::size_t>(d)];
    } else if (op->isa<ReshapeOp>()) {
      const auto shape = ReshapeOp(op).attrs().shape;
      if (d < static_cast<std::int64_t>(shape.size()) && shape[static_cast<std::size_t>(d)] == 0) from = d;
    } else if (op->isa<ConcatOp>()) {
      if (normalized_axis(ConcatOp(op).attrs().axis, od.size()) != d) from = d;
    } else if (op->isa<SliceOp>()) {
      const auto axes = SliceOp(op).attrs().axes;
      if (std::none_of(axes.begin(), axes.end(), [&](std::int64_t a) { return normalized_axis(a, od.size()) == d; }))
        from = d;
    } else if (d == 0 && (op->isa<FusedConv2dOp>() || op->isa<Conv2dOp>() || op->isa<MaxPool2dOp>() ||
                          op->isa<AvgPool2dOp>())) {
      from = 0;
    } else if (FusedStep s; op->num_operands() == 1 && fused_step_for(op->name(), s) &&
                            (s.kind == FusedStep::Kind::Unary || s.kind == FusedStep::Kind::Scale)) {
      from = d;  // an elementwise op of one operand
    }
    if (from < 0 || from >= static_cast<std::int64_t>(xd.size())) break;
    v = x;
    d = from;
  }
  return {v.impl(), d};
}

// The origin of each entry of the integer value v (row-major) that is dim
// k of a value's Shape (through Gather, Unsqueeze, Concat, Cast); nullopt
// elsewhere. Empty when v's size is not known.
std::vector<std::optional<DimOrigin>> shape_origins(Value v, int depth) {
  const Known known = known_values(v, 1);  // for its length (scalars: 1)
  std::vector<std::optional<DimOrigin>> out(known.size());
  Operation* op = v ? v.defining_op() : nullptr;
  if (out.empty() || !op || depth <= 0) return out;
  if (op->isa<ShapeOp>()) {
    for (std::size_t i = 0; i < out.size(); ++i)
      out[i] = dim_origin(op->operand_source(0), static_cast<std::int64_t>(i));
  } else if (op->isa<UnsqueezeOp>() || op->isa<CastOp>() || op->isa<ReshapeOp>()) {
    auto in = shape_origins(op->operand_source(0), depth - 1);
    if (in.size() == out.size()) out = in;
  } else if (op->isa<ConcatOp>()) {
    std::vector<std::optional<DimOrigin>> all;
    for (std::uint32_t i = 0; i < op->num_operands(); ++i) {
      auto part = shape_origins(op->operand_source(i), depth - 1);
      if (part.empty()) return out;
      all.insert(all.end(), part.begin(), part.end());
    }
    if (all.size() == out.size()) out = all;
  } else if (op->isa<GatherOp>() && GatherOp(op).attrs().axis == 0) {
    auto from = shape_origins(op->operand_source(0), depth - 1);
    auto idx = constant_ints_of(op->operand_source(1).defining_op());
    if (!idx || idx->size() != out.size()) return out;
    gather_entries(from, *idx, out);
  }
  return out;
}

std::optional<std::vector<std::int64_t>> reshape_copying_dims(Value x, Value shape) {
  const auto known = shape_values(shape);
  const auto origins = shape_origins(shape, 16);
  if (known.empty() || origins.size() != known.size()) return std::nullopt;
  const auto& xd = shaped_dims(x.type());
  std::vector<std::int64_t> out(known.size());
  for (std::size_t i = 0; i < known.size(); ++i) {
    if (known[i]) {
      out[i] = *known[i];
    } else if (origins[i] && i < xd.size() &&
               *origins[i] == dim_origin(x, static_cast<std::int64_t>(i))) {
      out[i] = 0;  // copies x's dim i
    } else {
      return std::nullopt;
    }
  }
  return out;
}

std::vector<std::optional<std::int64_t>> shape_values(Value v) {
  if (!v || !is_shaped(v.type()) || shaped_dims(v.type()).size() != 1) return {};
  return known_values(v, 16);
}

std::vector<std::int64_t> reshape_known_dims(const std::vector<std::int64_t>& x, const Known& shape,
                                             bool allowzero) {
  std::vector<std::int64_t> out(shape.size(), -1);
  int infer_at = -1;
  std::int64_t known = 1;  // product of the known output dims but the -1 (-1: some unknown)
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (!shape[i]) {
      known = -1;
      continue;
    }
    const std::int64_t s = *shape[i];
    if (s == -1 && infer_at < 0) {
      infer_at = static_cast<int>(i);
      continue;
    }
    if (s == 0 && !allowzero) out[i] = i < x.size() ? x[i] : -1;
    else if (s >= 0) out[i] = s;
    if (out[i] < 0 || known < 0 || __builtin_mul_overflow(known, out[i], &known)) known = -1;
  }
  if (infer_at >= 0 && known > 0) {
    std::int64_t total = 1;
    for (auto d : x)
      if (d < 0 || __builtin_mul_overflow(total, d, &total)) return out;
    if (total % known == 0) out[static_cast<std::size_t>(infer_at)] = total / known;
  }
  return out;
}

void add_shape_ops(OpTable& t) {
  t["ConstantOfShape"] = {&constant_of_shape, 9};
  t["Range"] = {&range, 11};
  t["Tile"] = {&tile, 6};
}

}  // namespace kiln::onnx::detail

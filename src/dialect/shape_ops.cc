// The run-time shape ops of kiln/dialect/shape_ops.h: InferMeta, Vjp,
// gradient ops and registration.
#include "kiln/dialect/shape_ops.h"

#include <algorithm>
#include <utility>

#include "kiln/dialect/infer_meta_util.h"
#include "kiln/dialect/tensor_ops.h"

namespace kiln {

KILN_REGISTER_OP(ShapeOp, NumelOp, ReshapeByOp, ExpandByOp, StridedSliceOp, GradOf<StridedSliceOp>,
                 SliceByOp, GradOf<SliceByOp>, SqueezeByOp, UnsqueezeByOp, SplitByOp, SumByOp,
                 TileOp, FullByOp, RangeOp);

namespace {

constexpr std::int64_t kMaxRank = 9;

// Operand i as a 1-D i32/i64 tensor of static length (what the op's kernel
// reads on the host); its length. kiln::Error naming the op and `what`.
std::int64_t int_vector_operand(std::string_view op, const std::vector<Type>& in, std::size_t i,
                                std::string_view what) {
  Type t = meta::tensor_operand(op, in, i);
  const auto& d = shaped_dims(t);
  if (!meta::is_index_dtype(shaped_data_type(t)) || d.size() != 1)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' ", what, " (operand #", i,
                ") must be a 1-D i32 or i64 tensor, got ", to_string(shaped_data_type(t)), " ",
                meta::dims_string(d));
  if (d[0] < 0)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' ", what, " (operand #", i,
                ") must have a length known at build time (it sets the result's rank), got ",
                meta::dims_string(d));
  if (d[0] > kMaxRank)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' ", what, " (operand #", i, ") has ",
                d[0], " entries, beyond the maximum rank ", kMaxRank);
  return d[0];
}

void check_rank(std::string_view op, std::int64_t rank) {
  if (rank > kMaxRank)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' result rank ", rank,
                " exceeds the maximum rank ", kMaxRank);
}

Value flowing_grad(Operation* op, const std::vector<Value>& out_grads) {
  vjp::check_out_grads(op, out_grads);
  if (!out_grads[0] || !vjp::differentiable(op->operand_source(0))) return {};
  return out_grads[0];
}

// The grad viewed with operand #0's run-time shape; the other operands get none.
std::vector<Value> view_back(Builder& b, Operation* op, const std::vector<Value>& g) {
  std::vector<Value> grads(op->num_operands());
  Value d = flowing_grad(op, g);
  if (d) grads[0] = b.create<ReshapeAsOp>(d, op->operand_source(0)).result();
  return grads;
}

}  // namespace

std::vector<std::int64_t> merge_known_dims(std::string_view op, std::vector<std::int64_t> dims,
                                           const std::vector<std::int64_t>& known) {
  if (known.empty()) return dims;
  if (known.size() != dims.size())
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' known_dims ", meta::dims_string(known),
                " must have one entry per result dim (rank ", dims.size(), ")");
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (known[i] < -1)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' known_dims ", meta::dims_string(known),
                  " must be >= -1 (-1: unknown)");
    if (dims[i] >= 0 && known[i] >= 0 && dims[i] != known[i])
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' known_dims ", meta::dims_string(known),
                  " disagree with the result dims ", meta::dims_string(dims), " in dim ", i);
    if (dims[i] < 0) dims[i] = known[i];
  }
  return dims;
}

// ---- shape / numel ----

void ShapeOp::build(Builder&, OperationArgument& arg, Value x) { arg.add_operand(x); }

std::vector<Type> ShapeOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
  meta::require_count(name, in, 1);
  Type x = meta::tensor_operand(name, in, 0);
  const auto rank = static_cast<std::int64_t>(shaped_dims(x).size());
  return {meta::result_like(in, DataType::Int64, {rank})};
}

void NumelOp::build(Builder&, OperationArgument& arg, Value x) { arg.add_operand(x); }

std::vector<Type> NumelOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
  meta::require_count(name, in, 1);
  meta::tensor_operand(name, in, 0);
  return {meta::result_like(in, DataType::Int64, {})};
}

// ---- reshape_by ----

void ReshapeByOp::build(Builder&, OperationArgument& arg, Value x, Value shape, bool allowzero,
                        const std::vector<std::int64_t>& known_dims) {
  arg.add_operand(x);
  arg.add_operand(shape);
  arg.attributes = to_named_attributes(Attributes{allowzero, known_dims});
}

std::vector<Type> ReshapeByOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  meta::require_count(name, in, 2);
  Type x = meta::tensor_operand(name, in, 0);
  const std::int64_t n = int_vector_operand(name, in, 1, "shape");
  check_rank(name, n);
  std::vector<std::int64_t> out = merge_known_dims(name, std::vector<std::int64_t>(n, -1), a.known_dims);
  // Element counts that are both known must agree.
  std::int64_t nx = 1, no = 1;
  for (auto d : shaped_dims(x)) nx = nx < 0 || d < 0 || __builtin_mul_overflow(nx, d, &nx) ? -1 : nx;
  for (auto d : out) no = no < 0 || d < 0 || __builtin_mul_overflow(no, d, &no) ? -1 : no;
  if (nx >= 0 && no >= 0 && nx != no)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' cannot reshape ",
                meta::dims_string(shaped_dims(x)), " into ", meta::dims_string(out));
  return {meta::result_like({in[0]}, shaped_data_type(x), std::move(out))};
}

std::vector<Value> ReshapeByOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  return view_back(b, op, g);
}

// ---- expand_by ----

void ExpandByOp::build(Builder&, OperationArgument& arg, Value x, Value shape,
                       const std::vector<std::int64_t>& known_dims) {
  arg.add_operand(x);
  arg.add_operand(shape);
  arg.attributes = to_named_attributes(Attributes{known_dims});
}

std::vector<Type> ExpandByOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  meta::require_count(name, in, 2);
  Type x = meta::tensor_operand(name, in, 0);
  const auto& xs = shaped_dims(x);
  const std::int64_t n = int_vector_operand(name, in, 1, "shape");
  const auto xr = static_cast<std::int64_t>(xs.size());
  const std::int64_t r = std::max(n, xr);
  check_rank(name, r);
  // A dim of x other than 1 is the result's (the shape's dim must be 1 or
  // equal); the rest are known only at run time.
  std::vector<std::int64_t> out(static_cast<std::size_t>(r), -1);
  for (std::int64_t i = 0; i < xr; ++i) {
    const std::int64_t d = xs[static_cast<std::size_t>(i)];
    if (d >= 0 && d != 1) out[static_cast<std::size_t>(r - xr + i)] = d;
  }
  out = merge_known_dims(name, std::move(out), a.known_dims);
  return {meta::result_like({in[0]}, shaped_data_type(x), std::move(out))};
}

std::vector<Value> ExpandByOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = flowing_grad(op, g);
  if (!d) return {Value(), Value()};
  return {b.create<ReduceAsOp>(d, op->operand_source(0)).result(), Value()};
}

// ---- strided_slice ----

std::pair<std::int64_t, std::int64_t> strided_slice_range(std::string_view op, std::int64_t start,
                                                          std::int64_t end, std::int64_t step,
                                                          std::int64_t dim) {
  if (step == 0) throw_error(ErrorKind::InvalidArgument, "op '", op, "' has a step of 0");
  if (dim <= 0) return {0, 0};
  // Negative indices count from the end; one still negative is before the start.
  if (start < 0) start = start < -dim ? -1 : start + dim;
  if (end < 0) end = end < -dim ? -1 : end + dim;
  if (step > 0) {
    start = std::clamp<std::int64_t>(start, 0, dim);
    end = std::clamp<std::int64_t>(end, 0, dim);
    if (end <= start) return {start, 0};
    // (end - start) / step rounded up, without overflow for huge steps.
    return {start, (end - start - 1) / step + 1};
  }
  start = std::clamp<std::int64_t>(start, 0, dim - 1);
  end = std::clamp<std::int64_t>(end, -1, dim - 1);
  if (start <= end) return {start, 0};
  const std::int64_t s = step == INT64_MIN ? INT64_MAX : -step;
  return {start, (start - end - 1) / s + 1};
}

void StridedSliceOp::build(Builder&, OperationArgument& arg, Value x,
                           const std::vector<std::int64_t>& axes, const std::vector<std::int64_t>& starts,
                           const std::vector<std::int64_t>& ends, const std::vector<std::int64_t>& steps) {
  arg.add_operand(x);
  arg.attributes = to_named_attributes(Attributes{axes, starts, ends, steps});
}

std::vector<Type> StridedSliceOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  Type x = meta::tensor_operand(name, in, 0);
  std::vector<std::int64_t> out = shaped_dims(x);
  const auto rank = static_cast<std::int64_t>(out.size());
  if (a.starts.size() != a.axes.size() || a.ends.size() != a.axes.size() ||
      a.steps.size() != a.axes.size())
    throw_error(ErrorKind::InvalidArgument, "op '", name,
                "' needs one start, end and step per axis, got ", a.axes.size(), " axes, ",
                a.starts.size(), " starts, ", a.ends.size(), " ends, ", a.steps.size(), " steps");
  std::vector<bool> seen(out.size(), false);
  for (std::size_t k = 0; k < a.axes.size(); ++k) {
    const std::int64_t axis = meta::normalize_axis(name, a.axes[k], rank);
    if (seen[static_cast<std::size_t>(axis)])
      throw_error(ErrorKind::InvalidArgument, "op '", name, "' axes ", meta::dims_string(a.axes),
                  " name dim ", axis, " twice");
    seen[static_cast<std::size_t>(axis)] = true;
    if (a.steps[k] == 0)
      throw_error(ErrorKind::InvalidArgument, "op '", name, "' steps ", meta::dims_string(a.steps),
                  " hold a 0");
    auto& d = out[static_cast<std::size_t>(axis)];
    if (d >= 0) d = strided_slice_range(name, a.starts[k], a.ends[k], a.steps[k], d).second;
  }
  return {meta::result_like(in, shaped_data_type(x), std::move(out))};
}

std::vector<Value> StridedSliceOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = flowing_grad(op, g);
  if (!d) return {Value()};
  return {b.create<GradOf<StridedSliceOp>>(op, op->operand_source(0), d).result()};
}

// ---- slice_by ----

void SliceByOp::build(Builder&, OperationArgument& arg, Value x, Value starts, Value ends, Value axes,
                      Value steps) {
  arg.add_operand(x);
  arg.add_operand(starts);
  arg.add_operand(ends);
  arg.add_operand(axes);
  arg.add_operand(steps);
}

std::vector<Type> SliceByOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
  meta::require_count(name, in, 5);
  Type x = meta::tensor_operand(name, in, 0);
  const std::int64_t n = int_vector_operand(name, in, 1, "starts");
  const char* what[] = {"starts", "ends", "axes", "steps"};
  for (std::size_t i = 2; i < 5; ++i)
    if (int_vector_operand(name, in, i, what[i - 1]) != n)
      throw_error(ErrorKind::InvalidArgument, "op '", name, "' ", what[i - 1], " ",
                  meta::dims_string(shaped_dims(in[i])), " must have the length of starts (", n, ")");
  std::vector<std::int64_t> out = shaped_dims(x);
  if (n > 0)  // which dims are cut is known at run time
    for (auto& d : out) d = d == 0 ? 0 : -1;
  return {meta::result_like({in[0]}, shaped_data_type(x), std::move(out))};
}

std::vector<Value> SliceByOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  std::vector<Value> grads(5);
  Value d = flowing_grad(op, g);
  if (!d) return grads;
  grads[0] = b.create<GradOf<SliceByOp>>(op, op->operand_source(0), op->operand_source(1),
                                         op->operand_source(2), op->operand_source(3),
                                         op->operand_source(4), d)
                 .result();
  return grads;
}

// ---- squeeze_by / unsqueeze_by ----

void SqueezeByOp::build(Builder&, OperationArgument& arg, Value x, Value axes) {
  arg.add_operand(x);
  arg.add_operand(axes);
}

std::vector<Type> SqueezeByOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
  meta::require_count(name, in, 2);
  Type x = meta::tensor_operand(name, in, 0);
  const auto& xs = shaped_dims(x);
  const std::int64_t n = int_vector_operand(name, in, 1, "axes");
  const auto xr = static_cast<std::int64_t>(xs.size());
  if (n > xr)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' cannot squeeze ", n,
                " axes of an input of rank ", xr);
  // Known dims other than 1 stay; which of the others go is known at run time.
  std::vector<std::int64_t> kept;
  for (auto d : xs)
    if (d >= 0 && d != 1) kept.push_back(d);
  std::vector<std::int64_t> out(static_cast<std::size_t>(xr - n), -1);
  if (static_cast<std::int64_t>(kept.size()) == xr - n) out = kept;
  return {meta::result_like({in[0]}, shaped_data_type(x), std::move(out))};
}

std::vector<Value> SqueezeByOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  return view_back(b, op, g);
}

void UnsqueezeByOp::build(Builder&, OperationArgument& arg, Value x, Value axes) {
  arg.add_operand(x);
  arg.add_operand(axes);
}

std::vector<Type> UnsqueezeByOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
  meta::require_count(name, in, 2);
  Type x = meta::tensor_operand(name, in, 0);
  const std::int64_t n = int_vector_operand(name, in, 1, "axes");
  const std::int64_t r = static_cast<std::int64_t>(shaped_dims(x).size()) + n;
  check_rank(name, r);
  return {meta::result_like({in[0]}, shaped_data_type(x), std::vector<std::int64_t>(r, -1))};
}

std::vector<Value> UnsqueezeByOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  return view_back(b, op, g);
}

// ---- split_by ----

void SplitByOp::build(Builder&, OperationArgument& arg, Value x, Value sizes, std::int64_t axis) {
  arg.add_operand(x);
  arg.add_operand(sizes);
  arg.attributes = to_named_attributes(Attributes{axis});
}

std::vector<Type> SplitByOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  meta::require_count(name, in, 2);
  Type x = meta::tensor_operand(name, in, 0);
  const auto& xs = shaped_dims(x);
  if (xs.empty()) throw_error(ErrorKind::InvalidArgument, "op '", name, "' cannot split a rank-0 tensor");
  const std::int64_t axis = meta::normalize_axis(name, a.axis, static_cast<std::int64_t>(xs.size()));
  Type st = meta::tensor_operand(name, in, 1);
  const auto& sd = shaped_dims(st);
  if (!meta::is_index_dtype(shaped_data_type(st)) || sd.size() != 1 || sd[0] < 1)
    throw_error(ErrorKind::InvalidArgument, "op '", name,
                "' sizes (operand #1) must be a 1-D i32 or i64 tensor of a length >= 1 known at "
                "build time (one result per part), got ",
                to_string(shaped_data_type(st)), " ", meta::dims_string(sd));
  if (sd[0] > (1 << 16))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' makes at most 65536 parts, got ", sd[0]);
  std::vector<Type> out;
  for (std::int64_t i = 0; i < sd[0]; ++i) {
    std::vector<std::int64_t> d = xs;
    d[static_cast<std::size_t>(axis)] = sd[0] == 1 ? xs[static_cast<std::size_t>(axis)] : -1;
    out.push_back(meta::result_like({in[0]}, shaped_data_type(x), std::move(d)));
  }
  return out;
}

std::vector<Value> SplitByOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  vjp::check_out_grads(op, g);
  if (vjp::all_null(g) || !vjp::differentiable(op->operand_source(0))) return {Value(), Value()};
  std::vector<Value> parts;
  for (std::uint32_t i = 0; i < op->num_results(); ++i)
    parts.push_back(g[i] ? g[i] : b.create<ZerosLikeOp>(op->result(i)).result());
  return {b.create<ConcatOp>(parts, SplitByOp(op).attrs().axis).result(), Value()};
}

// ---- sum_by ----

void SumByOp::build(Builder&, OperationArgument& arg, Value x, Value axes, bool keepdims) {
  arg.add_operand(x);
  arg.add_operand(axes);
  arg.attributes = to_named_attributes(Attributes{keepdims});
}

std::vector<Type> SumByOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  meta::require_count(name, in, 2);
  Type x = meta::tensor_operand(name, in, 0);
  const DataType dt = shaped_data_type(x);
  if (dt != DataType::Float32 && dt != DataType::Float64 && !meta::is_index_dtype(dt))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' sums f32, f64, i32 or i64, got ",
                to_string(dt));
  const auto& xs = shaped_dims(x);
  const std::int64_t n = int_vector_operand(name, in, 1, "axes");
  const auto xr = static_cast<std::int64_t>(xs.size());
  if (n < 1 || n > xr)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' needs between 1 and ", xr,
                " axes (distinct dims of x ", meta::dims_string(xs), "), got ", n);
  std::vector<std::int64_t> out;
  if (a.keepdims)
    for (auto d : xs) out.push_back(d == 1 ? 1 : -1);
  else
    out.assign(static_cast<std::size_t>(xr - n), -1);
  return {meta::result_like({in[0]}, dt, std::move(out))};
}

// ---- tile ----

void TileOp::build(Builder&, OperationArgument& arg, Value x, Value repeats) {
  arg.add_operand(x);
  arg.add_operand(repeats);
}

std::vector<Type> TileOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
  meta::require_count(name, in, 2);
  Type x = meta::tensor_operand(name, in, 0);
  const auto& xs = shaped_dims(x);
  const std::int64_t n = int_vector_operand(name, in, 1, "repeats");
  if (n != static_cast<std::int64_t>(xs.size()))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' repeats ",
                meta::dims_string(shaped_dims(in[1])), " must have one entry per dim of x ",
                meta::dims_string(xs));
  std::vector<std::int64_t> out(xs.size(), -1);
  for (std::size_t i = 0; i < xs.size(); ++i)
    if (xs[i] == 0) out[i] = 0;
  return {meta::result_like({in[0]}, shaped_data_type(x), std::move(out))};
}

// ---- full_by ----

void FullByOp::build(Builder&, OperationArgument& arg, Value shape, double value, DataType dtype,
                     const std::vector<std::int64_t>& known_dims) {
  arg.add_operand(shape);
  arg.attributes = to_named_attributes(Attributes{value, dtype, known_dims});
}

std::vector<Type> FullByOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  meta::require_count(name, in, 1);
  const std::int64_t n = int_vector_operand(name, in, 0, "shape");
  check_rank(name, n);
  switch (a.dtype) {
    case DataType::Float32: case DataType::Float64: case DataType::Int32: case DataType::Int64:
    case DataType::Bool: break;
    default:
      throw_error(ErrorKind::InvalidArgument, "op '", name, "' fills f32, f64, i32, i64 or bool, got ",
                  to_string(a.dtype));
  }
  return {TensorType::get(a.dtype, merge_known_dims(name, std::vector<std::int64_t>(static_cast<std::size_t>(n), -1),
                                                    a.known_dims))};
}

// ---- range ----

void RangeOp::build(Builder&, OperationArgument& arg, Value start, Value limit, Value delta) {
  arg.add_operand(start);
  arg.add_operand(limit);
  arg.add_operand(delta);
}

std::vector<Type> RangeOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
  meta::require_count(name, in, 3);
  const DataType dt = shaped_data_type(meta::tensor_operand(name, in, 0));
  if (dt != DataType::Float32 && dt != DataType::Float64 && !meta::is_index_dtype(dt))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' makes f32, f64, i32 or i64, got ",
                to_string(dt));
  const char* what[] = {"start", "limit", "delta"};
  for (std::size_t i = 0; i < 3; ++i) {
    Type t = meta::tensor_operand(name, in, i);
    const auto& d = shaped_dims(t);
    if (shaped_data_type(t) != dt)
      throw_error(ErrorKind::InvalidArgument, "op '", name, "' ", what[i], " is ",
                  to_string(shaped_data_type(t)), ", start is ", to_string(dt), " (one dtype)");
    if (!(d.empty() || (d.size() == 1 && (d[0] == 1 || d[0] == -1))))
      throw_error(ErrorKind::InvalidArgument, "op '", name, "' ", what[i],
                  " must be a scalar (rank 0 or [1]), got ", meta::dims_string(d));
  }
  return {meta::result_like(in, dt, {-1})};
}

}  // namespace kiln

// The tensor-making, shape and indexing ops of kiln/dialect/tensor_ops.h:
// InferMeta, Vjp, gradient ops and registration.
#include "kiln/dialect/infer_meta_util.h"
#include "kiln/dialect/tensor_ops.h"

#include <algorithm>
#include <utility>


namespace kiln {

KILN_REGISTER_OP(FullOp, ReshapeOp, TransposeOp, ConcatOp, SplitOp, SliceOp, GradOf<SliceOp>,
                 GatherOp, GradOf<GatherOp>, EmbeddingOp, GradOf<EmbeddingOp>, ReduceAsOp,
                 ReshapeAsOp, ZerosLikeOp, SplitAsOp);

namespace {
// The out_grad of a one-result op whose operand #0 is the differentiable
// one; null when there is nothing to do.
Value flowing_grad(Operation* op, const std::vector<Value>& out_grads) {
  vjp::check_out_grads(op, out_grads);
  if (!out_grads[0] || !vjp::differentiable(op->operand_source(0))) return {};
  return out_grads[0];
}
}  // namespace


std::pair<std::int64_t, std::int64_t> slice_range(std::int64_t start, std::int64_t end,
                                                  std::int64_t dim) {
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  start = std::clamp<std::int64_t>(start, 0, dim);
  end = std::clamp<std::int64_t>(end, 0, dim);
  return {start, std::max(start, end)};
}

// ---- transpose ----

void TransposeOp::build(Builder&, OperationArgument& arg, Value x,
                        const std::vector<std::int64_t>& perm) {
  arg.add_operand(x);
  arg.attributes = to_named_attributes(Attributes{perm});
}

std::vector<Type> TransposeOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  Type x = meta::tensor_operand(name, in, 0);
  const auto& xs = shaped_dims(x);
  auto rank = static_cast<std::int64_t>(xs.size());
  if (static_cast<std::int64_t>(a.perm.size()) != rank)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' perm ", meta::dims_string(a.perm),
                " must have one entry per dim of the input (rank ", rank, ")");
  std::vector<bool> seen(xs.size(), false);
  std::vector<std::int64_t> out(xs.size());
  for (std::size_t i = 0; i < a.perm.size(); ++i) {
    std::int64_t p = meta::normalize_axis(name, a.perm[i], rank, "perm entry");
    if (seen[p])
      throw_error(ErrorKind::InvalidArgument, "op '", name, "' perm ", meta::dims_string(a.perm),
                  " is not a permutation (dim ", p, " appears twice)");
    seen[p] = true;
    out[i] = xs[p];
  }
  return {meta::result_like(in, shaped_data_type(x), std::move(out))};
}

// ---- concat ----

void ConcatOp::build(Builder&, OperationArgument& arg, const std::vector<Value>& xs,
                     std::int64_t axis) {
  arg.add_operands(xs);
  arg.attributes = to_named_attributes(Attributes{axis});
}

std::vector<Type> ConcatOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  if (in.empty())
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' needs at least one operand");
  Type first = meta::tensor_operand(name, in, 0);
  DataType dt = shaped_data_type(first);
  std::vector<std::int64_t> out = shaped_dims(first);
  auto rank = static_cast<std::int64_t>(out.size());
  if (rank == 0)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' cannot join rank-0 tensors");
  std::int64_t axis = meta::normalize_axis(name, a.axis, rank);
  for (std::size_t i = 1; i < in.size(); ++i) {
    Type t = meta::tensor_operand(name, in, i);
    if (shaped_data_type(t) != dt)
      throw_error(ErrorKind::InvalidArgument, "op '", name, "' operands must have one dtype: #0 is ",
                  to_string(dt), ", #", i, " is ", to_string(shaped_data_type(t)));
    const auto& ds = shaped_dims(t);
    if (static_cast<std::int64_t>(ds.size()) != rank)
      throw_error(ErrorKind::InvalidArgument, "op '", name, "' operands must have one rank: #0 is ",
                  meta::dims_string(shaped_dims(first)), ", #", i, " is ", meta::dims_string(ds));
    for (std::int64_t k = 0; k < rank; ++k) {
      if (k == axis) {
        if (out[k] >= 0 && ds[k] >= 0 && __builtin_add_overflow(out[k], ds[k], &out[k]))
          throw_error(ErrorKind::OutOfRange, "op '", name, "' concat dim ", axis,
                      " overflows int64");
        if (ds[k] < 0) out[k] = -1;
      } else if (out[k] < 0) {
        out[k] = ds[k];
      } else if (ds[k] >= 0 && ds[k] != out[k]) {
        throw_error(ErrorKind::InvalidArgument, "op '", name, "' operand #", i, " ", meta::dims_string(ds),
                    " differs from ", meta::dims_string(shaped_dims(first)), " in dim ", k,
                    " (only the concat axis ", axis, " may differ)");
      }
    }
  }
  return {meta::result_like(in, dt, std::move(out))};
}

// ---- split ----

namespace {
// Results of one op are a bounded list; a num of 10^18 from a file must not
// try to allocate them.
constexpr std::int64_t kMaxSplitParts = 1 << 16;
}  // namespace

void SplitOp::build(Builder&, OperationArgument& arg, Value x, std::int64_t num, std::int64_t axis) {
  arg.add_operand(x);
  arg.attributes = to_named_attributes(Attributes{num, {}, axis});
}

void SplitOp::build(Builder&, OperationArgument& arg, Value x,
                    const std::vector<std::int64_t>& sections, std::int64_t axis) {
  arg.add_operand(x);
  arg.attributes = to_named_attributes(Attributes{0, sections, axis});
}

std::vector<Type> SplitOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  Type x = meta::tensor_operand(name, in, 0);
  const auto& xs = shaped_dims(x);
  auto rank = static_cast<std::int64_t>(xs.size());
  if (rank == 0) throw_error(ErrorKind::InvalidArgument, "op '", name, "' cannot split a rank-0 tensor");
  std::int64_t axis = meta::normalize_axis(name, a.axis, rank);
  std::int64_t d = xs[axis];
  std::vector<std::int64_t> sizes;
  if (a.sections.empty()) {
    if (a.num < 1 || a.num > kMaxSplitParts)
      throw_error(ErrorKind::InvalidArgument, "op '", name,
                  "' needs num in [1, ", kMaxSplitParts, "] or a non-empty sections list, got num = ",
                  a.num);
    if (d >= 0 && d % a.num != 0)
      throw_error(ErrorKind::InvalidArgument, "op '", name, "' cannot split dim ", axis, " of size ",
                  d, " into ", a.num, " equal parts");
    sizes.assign(a.num, d < 0 ? -1 : d / a.num);
  } else {
    if (a.sections.size() > static_cast<std::size_t>(kMaxSplitParts))
      throw_error(ErrorKind::InvalidArgument, "op '", name, "' makes at most ", kMaxSplitParts,
                  " parts, got ", a.sections.size(), " sections");
    if (a.num != 0 && a.num != static_cast<std::int64_t>(a.sections.size()))
      throw_error(ErrorKind::InvalidArgument, "op '", name, "' got both num = ", a.num,
                  " and sections ", meta::dims_string(a.sections), " (give one)");
    int infer_at = -1;
    std::int64_t known = 0;
    for (std::size_t i = 0; i < a.sections.size(); ++i) {
      std::int64_t s = a.sections[i];
      if (s < -1)
        throw_error(ErrorKind::InvalidArgument, "op '", name, "' sections ", meta::dims_string(a.sections),
                    " must be >= 0 (one may be -1)");
      if (s == -1) {
        if (infer_at >= 0)
          throw_error(ErrorKind::InvalidArgument, "op '", name, "' sections ",
                      meta::dims_string(a.sections), " may hold one -1, got two");
        infer_at = static_cast<int>(i);
      } else if (__builtin_add_overflow(known, s, &known)) {
        throw_error(ErrorKind::OutOfRange, "op '", name, "' sections ", meta::dims_string(a.sections),
                    " add up beyond int64");
      }
    }
    sizes = a.sections;
    if (d >= 0) {
      if (infer_at >= 0 ? known > d : known != d)
        throw_error(ErrorKind::InvalidArgument, "op '", name, "' sections ", meta::dims_string(a.sections),
                    " do not add up to dim ", axis, " of size ", d);
      if (infer_at >= 0) sizes[infer_at] = d - known;
    }
  }
  std::vector<Type> out;
  out.reserve(sizes.size());
  for (auto s : sizes) {
    std::vector<std::int64_t> dims = xs;
    dims[axis] = s;
    out.push_back(meta::result_like(in, shaped_data_type(x), std::move(dims)));
  }
  return out;
}

// ---- slice ----

void SliceOp::build(Builder&, OperationArgument& arg, Value x, const std::vector<std::int64_t>& axes,
                    const std::vector<std::int64_t>& starts, const std::vector<std::int64_t>& ends) {
  arg.add_operand(x);
  arg.attributes = to_named_attributes(Attributes{axes, starts, ends});
}

std::vector<Type> SliceOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  Type x = meta::tensor_operand(name, in, 0);
  std::vector<std::int64_t> out = shaped_dims(x);
  auto rank = static_cast<std::int64_t>(out.size());
  if (a.starts.size() != a.axes.size() || a.ends.size() != a.axes.size())
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' needs one start and one end per axis, got ",
                a.axes.size(), " axes, ", a.starts.size(), " starts, ", a.ends.size(), " ends");
  std::vector<bool> seen(out.size(), false);
  for (std::size_t k = 0; k < a.axes.size(); ++k) {
    std::int64_t axis = meta::normalize_axis(name, a.axes[k], rank);
    if (seen[axis])
      throw_error(ErrorKind::InvalidArgument, "op '", name, "' axes ", meta::dims_string(a.axes),
                  " name dim ", axis, " twice");
    seen[axis] = true;
    if (out[axis] >= 0) {
      auto [b, e] = slice_range(a.starts[k], a.ends[k], out[axis]);
      out[axis] = e - b;
    }
  }
  return {meta::result_like(in, shaped_data_type(x), std::move(out))};
}

// ---- gather ----

void GatherOp::build(Builder&, OperationArgument& arg, Value x, Value index, std::int64_t axis) {
  arg.add_operand(x);
  arg.add_operand(index);
  arg.attributes = to_named_attributes(Attributes{axis});
}

std::vector<Type> GatherOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  Type x = meta::tensor_operand(name, in, 0), index = meta::tensor_operand(name, in, 1);
  if (!meta::is_index_dtype(shaped_data_type(index)))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' index must be i32 or i64, got ",
                to_string(shaped_data_type(index)));
  const auto& xs = shaped_dims(x);
  auto rank = static_cast<std::int64_t>(xs.size());
  if (rank == 0) throw_error(ErrorKind::InvalidArgument, "op '", name, "' cannot gather from a rank-0 tensor");
  std::int64_t axis = meta::normalize_axis(name, a.axis, rank);
  std::vector<std::int64_t> out(xs.begin(), xs.begin() + axis);
  const auto& is = shaped_dims(index);
  out.insert(out.end(), is.begin(), is.end());
  out.insert(out.end(), xs.begin() + axis + 1, xs.end());
  if (out.size() > 9)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' result rank ", out.size(),
                " exceeds the maximum rank 9");
  return {meta::result_like(in, shaped_data_type(x), std::move(out))};
}

// ---- embedding ----

void EmbeddingOp::build(Builder&, OperationArgument& arg, Value weight, Value ids,
                        std::int64_t padding_idx) {
  arg.add_operand(weight);
  arg.add_operand(ids);
  arg.attributes = to_named_attributes(Attributes{padding_idx});
}

std::vector<Type> EmbeddingOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  Type w = meta::tensor_operand(name, in, 0), ids = meta::tensor_operand(name, in, 1);
  const auto& ws = shaped_dims(w);
  if (ws.size() != 2)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' weight must be [vocab, dim], got ",
                meta::dims_string(ws));
  if (!meta::is_index_dtype(shaped_data_type(ids)))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' ids must be i64 or i32, got ",
                to_string(shaped_data_type(ids)));
  if (a.padding_idx < -1 || (ws[0] >= 0 && a.padding_idx >= ws[0]))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' padding_idx ", a.padding_idx,
                " must be -1 (none) or in [0, ", ws[0], ")");
  std::vector<std::int64_t> out = shaped_dims(ids);
  out.push_back(ws[1]);
  if (out.size() > 9)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' result rank ", out.size(),
                " exceeds the maximum rank 9");
  return {meta::result_like(in, shaped_data_type(w), std::move(out))};
}

// ---- full / reshape ----

void FullOp::build(Builder&, OperationArgument& arg, const std::vector<std::int64_t>& shape,
                   double value, DataType dtype, Place place) {
  arg.attributes = to_named_attributes(Attributes{shape, value, dtype, place});
}

std::vector<Type> FullOp::infer_meta(const std::vector<Type>&, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  meta::check_shape_attr(name, a.shape);
  return {TensorType::get(a.dtype, a.shape)};
}

void ReshapeOp::build(Builder&, OperationArgument& arg, Value x, const std::vector<std::int64_t>& shape) {
  arg.add_operand(x);
  arg.attributes = to_named_attributes(Attributes{shape});
}

std::vector<Type> ReshapeOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  Type x = meta::tensor_operand(name, in, 0);
  const auto& xs = shaped_dims(x);
  std::vector<std::int64_t> out = a.shape;
  int infer_at = -1;
  std::int64_t known = 1;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i] == 0) {
      if (i >= xs.size())
        throw_error(ErrorKind::InvalidArgument, "op '", name, "' shape[", i,
                    "] = 0 copies an input dim, but the input has rank ", xs.size());
      out[i] = xs[i];
    }
    if (a.shape[i] == -1) {
      if (infer_at >= 0)
        throw_error(ErrorKind::InvalidArgument, "op '", name, "' shape may hold one -1, got two");
      infer_at = static_cast<int>(i);
    } else if (out[i] < -1) {
      throw_error(ErrorKind::InvalidArgument, "op '", name, "' shape dims must be >= -1, got ",
                  out[i]);
    } else if (out[i] >= 0 && a.shape[i] != 0 && __builtin_mul_overflow(known, out[i], &known)) {
      throw_error(ErrorKind::OutOfRange, "op '", name, "' shape's element count overflows int64");
    }
  }
  // A copied dim (shape[i] = 0) is a factor of both sides: left out of both,
  // so a -1 is inferred even when the copied dim is known only at run time.
  std::int64_t total = 1;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const std::int64_t d = xs[i];
    if (i < a.shape.size() && a.shape[i] == 0) continue;
    if (d < 0 || total < 0) total = -1;
    else if (__builtin_mul_overflow(total, d, &total))
      throw_error(ErrorKind::OutOfRange, "op '", name, "' input's element count overflows int64");
  }
  bool all_known = std::none_of(out.begin(), out.end(), [&](std::int64_t d) { return d < 0; });
  if (infer_at >= 0 && total >= 0 && known > 0) {
    bool others_known = true;
    for (std::size_t i = 0; i < out.size(); ++i)
      if (int(i) != infer_at && out[i] < 0 && a.shape[i] != 0) others_known = false;
    if (others_known) {
      if (total % known != 0)
        throw_error(ErrorKind::InvalidArgument, "op '", name, "' cannot reshape ", total,
                    " elements into a shape whose known dims multiply to ", known);
      out[infer_at] = total / known;
    }
  } else if (infer_at < 0 && all_known && total >= 0 && known != total) {
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' cannot reshape ", total,
                " elements into ", known);
  }
  return {meta::result_like(in, shaped_data_type(x), std::move(out))};
}


// ---- shape ops ----

// The grad viewed with x's run-time shape.
std::vector<Value> ReshapeOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = flowing_grad(op, g);
  if (!d) return {Value()};
  return {b.create<ReshapeAsOp>(d, op->operand_source(0)).result()};
}

// The inverse permutation.
std::vector<Value> TransposeOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = flowing_grad(op, g);
  if (!d) return {Value()};
  auto perm = TransposeOp(op).attrs().perm;
  auto rank = static_cast<std::int64_t>(perm.size());
  std::vector<std::int64_t> inv(perm.size());
  for (std::int64_t i = 0; i < rank; ++i) inv[perm[i] < 0 ? perm[i] + rank : perm[i]] = i;
  return {b.create<TransposeOp>(d, inv).result()};
}

// The grad cut into pieces shaped like the operands (at run time).
std::vector<Value> ConcatOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = flowing_grad(op, g);
  std::vector<Value> grads(op->num_operands());
  if (!d) return grads;
  auto split = b.create<SplitAsOp>(d, op->operands(), ConcatOp(op).attrs().axis);
  for (std::uint32_t i = 0; i < op->num_operands(); ++i)
    grads[i] = split.operation()->result(i);
  return grads;
}

// The results' grads joined again; a result without one contributes zeros.
std::vector<Value> SplitOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  vjp::check_out_grads(op, g);
  if (vjp::all_null(g) || !vjp::differentiable(op->operand_source(0))) return {Value()};
  std::vector<Value> parts;
  for (std::uint32_t i = 0; i < op->num_results(); ++i)
    parts.push_back(g[i] ? g[i] : vjp::zeros(b, op->result(i)));
  return {b.create<ConcatOp>(parts, SplitOp(op).attrs().axis).result()};
}

std::vector<Value> SliceOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = flowing_grad(op, g);
  if (!d) return {Value()};
  auto a = SliceOp(op).attrs();
  return {b.create<GradOf<SliceOp>>(op, op->operand_source(0), d).result()};
}

// Grad w.r.t. x only; the index gets none.
std::vector<Value> GatherOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = flowing_grad(op, g);
  if (!d) return {Value(), Value()};
  return {b.create<GradOf<GatherOp>>(op, op->operand_source(0), op->operand_source(1), d).result(),
          Value()};
}

// Grad w.r.t. the weight only (a dense scatter-add); the ids get none.
std::vector<Value> EmbeddingOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = flowing_grad(op, g);
  if (!d) return {Value(), Value()};
  return {b.create<GradOf<EmbeddingOp>>(op, op->operand_source(0), op->operand_source(1), d).result(),
          Value()};
}

// ---- gradient ops ----

void SliceOp::Grad::check(std::string_view name, const std::vector<Type>& in,
                           DictionaryAttribute attrs) {
  Type x = meta::tensor_operand(name, in, 0), dout = meta::tensor_operand(name, in, 1);
  meta::require_same_dtype(name, shaped_data_type(x), shaped_data_type(dout), 0, 1);
  auto sliced = SliceOp::infer_meta(
      {x}, attrs);
  if (!meta::compatible_dims(shaped_dims(sliced[0]), shaped_dims(dout)))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' dout ", meta::dims_string(shaped_dims(dout)),
                " must have the slice's shape ", meta::dims_string(shaped_dims(sliced[0])));
}

void GatherOp::Grad::check(std::string_view name, const std::vector<Type>& in,
                           DictionaryAttribute attrs) {
  Type x = meta::tensor_operand(name, in, 0), dout = meta::tensor_operand(name, in, 2);
  auto gathered = GatherOp::infer_meta(
      {in[0], in[1]}, attrs);
  meta::require_same_dtype(name, shaped_data_type(x), shaped_data_type(dout), 0, 2);
  if (!meta::compatible_dims(shaped_dims(gathered[0]), shaped_dims(dout)))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' dout ", meta::dims_string(shaped_dims(dout)),
                " must have the gather's shape ", meta::dims_string(shaped_dims(gathered[0])));
}

void EmbeddingOp::Grad::check(std::string_view name, const std::vector<Type>& in,
                           DictionaryAttribute attrs) {
  Type w = meta::tensor_operand(name, in, 0), dout = meta::tensor_operand(name, in, 2);
  auto looked = EmbeddingOp::infer_meta(
      {in[0], in[1]},
      attrs);
  meta::require_same_dtype(name, shaped_data_type(w), shaped_data_type(dout), 0, 2);
  if (!meta::compatible_dims(shaped_dims(looked[0]), shaped_dims(dout)))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' dout ", meta::dims_string(shaped_dims(dout)),
                " must have the lookup's shape ", meta::dims_string(shaped_dims(looked[0])));
}

// ---- reduce_as ----

void ReduceAsOp::build(Builder&, OperationArgument& arg, Value x, Value target) {
  arg.add_operand(x);
  arg.add_operand(target);
}

std::vector<Type> ReduceAsOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
  meta::require_count(name, in, 2);
  Type x = meta::float_operand(name, in, 0), t = meta::tensor_operand(name, in, 1);
  const auto& xs = shaped_dims(x);
  const auto& ts = shaped_dims(t);
  bool ok = ts.size() <= xs.size();
  for (std::size_t i = 0; ok && i < ts.size(); ++i) {
    std::int64_t xd = xs[xs.size() - ts.size() + i];
    ok = xd == ts[i] || xd < 0 || ts[i] < 0 || ts[i] == 1;
  }
  if (!ok)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' cannot sum ", meta::dims_string(xs),
                " down to ", meta::dims_string(ts),
                " (the target must be a shape x broadcasts from: x's trailing dims equal or 1)");
  return {meta::result_like({in[0]}, shaped_data_type(x), ts)};
}

// ---- reshape_as ----

void ReshapeAsOp::build(Builder&, OperationArgument& arg, Value x, Value target) {
  arg.add_operand(x);
  arg.add_operand(target);
}

std::vector<Type> ReshapeAsOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
  meta::require_count(name, in, 2);
  Type x = meta::tensor_operand(name, in, 0), t = meta::tensor_operand(name, in, 1);
  auto count = [](const std::vector<std::int64_t>& d) {
    std::int64_t n = 1;
    for (auto v : d) {
      if (v < 0) return std::int64_t{-1};
      if (__builtin_mul_overflow(n, v, &n)) return std::int64_t{-1};
    }
    return n;
  };
  std::int64_t nx = count(shaped_dims(x)), nt = count(shaped_dims(t));
  if (nx >= 0 && nt >= 0 && nx != nt)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' cannot view ",
                meta::dims_string(shaped_dims(x)), " (", nx, " elements) as ", meta::dims_string(shaped_dims(t)),
                " (", nt, " elements)");
  return {meta::result_like({in[0]}, shaped_data_type(x), shaped_dims(t))};
}

// ---- zeros_like ----

void ZerosLikeOp::build(Builder&, OperationArgument& arg, Value x) { arg.add_operand(x); }

std::vector<Type> ZerosLikeOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
  meta::require_count(name, in, 1);
  return {meta::tensor_operand(name, in, 0)};
}

// ---- split_as ----

void SplitAsOp::build(Builder&, OperationArgument& arg, Value x, const std::vector<Value>& refs,
                      std::int64_t axis) {
  if (refs.empty())
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' needs at least one ref operand");
  arg.add_operand(x);
  arg.add_operands(refs);
  arg.attributes = to_named_attributes(Attributes{axis});
}

std::vector<Type> SplitAsOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  if (in.size() < 2)
    throw_error(ErrorKind::InvalidArgument, "op '", name,
                "' takes x and at least one ref operand, got ", in.size(), " operands");
  Type x = meta::tensor_operand(name, in, 0);
  const auto& xs = shaped_dims(x);
  auto rank = static_cast<std::int64_t>(xs.size());
  std::int64_t axis = meta::normalize_axis(name, a.axis, rank);
  std::vector<Type> out;
  std::int64_t total = 0;
  for (std::size_t i = 1; i < in.size(); ++i) {
    const auto& rs = shaped_dims(meta::tensor_operand(name, in, i));
    bool ok = static_cast<std::int64_t>(rs.size()) == rank;
    for (std::int64_t k = 0; ok && k < rank; ++k)
      if (k != axis) ok = rs[k] == xs[k] || rs[k] < 0 || xs[k] < 0;
    if (!ok)
      throw_error(ErrorKind::InvalidArgument, "op '", name, "' ref #", i, " ", meta::dims_string(rs),
                  " must match x ", meta::dims_string(xs), " in every dim but axis ", axis);
    if (total >= 0) total = rs[axis] < 0 ? -1 : total + rs[axis];
    std::vector<std::int64_t> dims = rs;
    for (std::int64_t k = 0; k < rank; ++k)
      if (k != axis && dims[k] < 0) dims[k] = xs[k];
    out.push_back(meta::result_like({in[0]}, shaped_data_type(x), std::move(dims)));
  }
  if (total >= 0 && xs[axis] >= 0 && total != xs[axis])
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' refs' dims along axis ", axis,
                " add up to ", total, ", x has ", xs[axis]);
  return out;
}


}  // namespace kiln

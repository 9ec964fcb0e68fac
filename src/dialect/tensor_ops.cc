// Definitions of the shape / indexing ops of tensor_ops.h: transpose, concat,
// split, slice, gather, embedding (full and reshape are in kiln_ops.cc).
#include "kiln/dialect/tensor_ops.h"

#include <algorithm>
#include <utility>

#include "op_helpers.h"

namespace kiln {

using dialect_detail::dims_str;
using dialect_detail::expect_tensor;
using dialect_detail::is_index_dtype;
using dialect_detail::make_like;
using dialect_detail::normalize_axis;

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
  Type x = expect_tensor(name, in, 0);
  const auto& xs = shaped_dims(x);
  auto rank = static_cast<std::int64_t>(xs.size());
  if (static_cast<std::int64_t>(a.perm.size()) != rank)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' perm ", dims_str(a.perm),
                " must have one entry per dim of the input (rank ", rank, ")");
  std::vector<bool> seen(xs.size(), false);
  std::vector<std::int64_t> out(xs.size());
  for (std::size_t i = 0; i < a.perm.size(); ++i) {
    std::int64_t p = normalize_axis(name, a.perm[i], rank, "perm entry");
    if (seen[p])
      throw_error(ErrorKind::InvalidArgument, "op '", name, "' perm ", dims_str(a.perm),
                  " is not a permutation (dim ", p, " appears twice)");
    seen[p] = true;
    out[i] = xs[p];
  }
  return {make_like(in, shaped_data_type(x), std::move(out))};
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
  Type first = expect_tensor(name, in, 0);
  DataType dt = shaped_data_type(first);
  std::vector<std::int64_t> out = shaped_dims(first);
  auto rank = static_cast<std::int64_t>(out.size());
  if (rank == 0)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' cannot join rank-0 tensors");
  std::int64_t axis = normalize_axis(name, a.axis, rank);
  for (std::size_t i = 1; i < in.size(); ++i) {
    Type t = expect_tensor(name, in, i);
    if (shaped_data_type(t) != dt)
      throw_error(ErrorKind::InvalidArgument, "op '", name, "' operands must have one dtype: #0 is ",
                  to_string(dt), ", #", i, " is ", to_string(shaped_data_type(t)));
    const auto& ds = shaped_dims(t);
    if (static_cast<std::int64_t>(ds.size()) != rank)
      throw_error(ErrorKind::InvalidArgument, "op '", name, "' operands must have one rank: #0 is ",
                  dims_str(shaped_dims(first)), ", #", i, " is ", dims_str(ds));
    for (std::int64_t k = 0; k < rank; ++k) {
      if (k == axis) {
        if (out[k] >= 0 && ds[k] >= 0 && __builtin_add_overflow(out[k], ds[k], &out[k]))
          throw_error(ErrorKind::OutOfRange, "op '", name, "' concat dim ", axis,
                      " overflows int64");
        if (ds[k] < 0) out[k] = -1;
      } else if (out[k] < 0) {
        out[k] = ds[k];
      } else if (ds[k] >= 0 && ds[k] != out[k]) {
        throw_error(ErrorKind::InvalidArgument, "op '", name, "' operand #", i, " ", dims_str(ds),
                    " differs from ", dims_str(shaped_dims(first)), " in dim ", k,
                    " (only the concat axis ", axis, " may differ)");
      }
    }
  }
  return {make_like(in, dt, std::move(out))};
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
  Type x = expect_tensor(name, in, 0);
  const auto& xs = shaped_dims(x);
  auto rank = static_cast<std::int64_t>(xs.size());
  if (rank == 0) throw_error(ErrorKind::InvalidArgument, "op '", name, "' cannot split a rank-0 tensor");
  std::int64_t axis = normalize_axis(name, a.axis, rank);
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
                  " and sections ", dims_str(a.sections), " (give one)");
    int infer_at = -1;
    std::int64_t known = 0;
    for (std::size_t i = 0; i < a.sections.size(); ++i) {
      std::int64_t s = a.sections[i];
      if (s < -1)
        throw_error(ErrorKind::InvalidArgument, "op '", name, "' sections ", dims_str(a.sections),
                    " must be >= 0 (one may be -1)");
      if (s == -1) {
        if (infer_at >= 0)
          throw_error(ErrorKind::InvalidArgument, "op '", name, "' sections ",
                      dims_str(a.sections), " may hold one -1, got two");
        infer_at = static_cast<int>(i);
      } else if (__builtin_add_overflow(known, s, &known)) {
        throw_error(ErrorKind::OutOfRange, "op '", name, "' sections ", dims_str(a.sections),
                    " add up beyond int64");
      }
    }
    sizes = a.sections;
    if (d >= 0) {
      if (infer_at >= 0 ? known > d : known != d)
        throw_error(ErrorKind::InvalidArgument, "op '", name, "' sections ", dims_str(a.sections),
                    " do not add up to dim ", axis, " of size ", d);
      if (infer_at >= 0) sizes[infer_at] = d - known;
    }
  }
  std::vector<Type> out;
  out.reserve(sizes.size());
  for (auto s : sizes) {
    std::vector<std::int64_t> dims = xs;
    dims[axis] = s;
    out.push_back(make_like(in, shaped_data_type(x), std::move(dims)));
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
  Type x = expect_tensor(name, in, 0);
  std::vector<std::int64_t> out = shaped_dims(x);
  auto rank = static_cast<std::int64_t>(out.size());
  if (a.starts.size() != a.axes.size() || a.ends.size() != a.axes.size())
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' needs one start and one end per axis, got ",
                a.axes.size(), " axes, ", a.starts.size(), " starts, ", a.ends.size(), " ends");
  std::vector<bool> seen(out.size(), false);
  for (std::size_t k = 0; k < a.axes.size(); ++k) {
    std::int64_t axis = normalize_axis(name, a.axes[k], rank);
    if (seen[axis])
      throw_error(ErrorKind::InvalidArgument, "op '", name, "' axes ", dims_str(a.axes),
                  " name dim ", axis, " twice");
    seen[axis] = true;
    if (out[axis] >= 0) {
      auto [b, e] = slice_range(a.starts[k], a.ends[k], out[axis]);
      out[axis] = e - b;
    }
  }
  return {make_like(in, shaped_data_type(x), std::move(out))};
}

// ---- gather ----

void GatherOp::build(Builder&, OperationArgument& arg, Value x, Value index, std::int64_t axis) {
  arg.add_operand(x);
  arg.add_operand(index);
  arg.attributes = to_named_attributes(Attributes{axis});
}

std::vector<Type> GatherOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  Type x = expect_tensor(name, in, 0), index = expect_tensor(name, in, 1);
  if (!is_index_dtype(shaped_data_type(index)))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' index must be i32 or i64, got ",
                to_string(shaped_data_type(index)));
  const auto& xs = shaped_dims(x);
  auto rank = static_cast<std::int64_t>(xs.size());
  if (rank == 0) throw_error(ErrorKind::InvalidArgument, "op '", name, "' cannot gather from a rank-0 tensor");
  std::int64_t axis = normalize_axis(name, a.axis, rank);
  std::vector<std::int64_t> out(xs.begin(), xs.begin() + axis);
  const auto& is = shaped_dims(index);
  out.insert(out.end(), is.begin(), is.end());
  out.insert(out.end(), xs.begin() + axis + 1, xs.end());
  if (out.size() > 9)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' result rank ", out.size(),
                " exceeds the maximum rank 9");
  return {make_like(in, shaped_data_type(x), std::move(out))};
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
  Type w = expect_tensor(name, in, 0), ids = expect_tensor(name, in, 1);
  const auto& ws = shaped_dims(w);
  if (ws.size() != 2)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' weight must be [vocab, dim], got ",
                dims_str(ws));
  if (!is_index_dtype(shaped_data_type(ids)))
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
  return {make_like(in, shaped_data_type(w), std::move(out))};
}

KILN_REGISTER_OP(TransposeOp);
KILN_REGISTER_OP(ConcatOp);
KILN_REGISTER_OP(SplitOp);
KILN_REGISTER_OP(SliceOp);
KILN_REGISTER_OP(GatherOp);
KILN_REGISTER_OP(EmbeddingOp);

}  // namespace kiln

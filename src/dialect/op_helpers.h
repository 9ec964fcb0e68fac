// Small helpers shared by the op definitions in src/dialect/*.cc (not
// installed): operand checks and result-type construction for infer_meta.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/ir/builtin_types.h"
#include "kiln/support/error.h"

namespace kiln::dialect_detail {

// The operand as a tensor/vtensor type, or a kiln::Error naming the op.
inline Type expect_tensor(std::string_view op, const std::vector<Type>& in, std::size_t i) {
  if (i >= in.size() || !in[i] || !is_shaped(in[i]))
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' operand #", i, " must be a tensor, got ",
                i < in.size() && in[i] ? in[i].to_string() : std::string("nothing"));
  return in[i];
}

// vtensor when every operand is a vtensor, tensor otherwise (and with no operands).
inline Type make_like(const std::vector<Type>& in, DataType dt, std::vector<std::int64_t> dims) {
  bool all_v = !in.empty() && std::all_of(in.begin(), in.end(),
                                          [](Type t) { return t.isa<VTensorType>(); });
  if (all_v) return VTensorType::get(dt, std::move(dims));
  return TensorType::get(dt, std::move(dims));
}

inline std::string dims_str(const std::vector<std::int64_t>& s) {
  std::string r = "[";
  for (std::size_t k = 0; k < s.size(); ++k) r += (k ? ", " : "") + std::to_string(s[k]);
  return r + "]";
}

// `axis` in [-rank, rank) → [0, rank); kiln::Error naming the op otherwise.
inline std::int64_t normalize_axis(std::string_view op, std::int64_t axis, std::int64_t rank,
                                   std::string_view what = "axis") {
  if (axis < -rank || axis >= rank)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' ", what, " ", axis,
                " is out of range for rank ", rank, " (expected [", -rank, ", ", rank, "))");
  return axis < 0 ? axis + rank : axis;
}

inline void check_shape_attr(std::string_view op, const std::vector<std::int64_t>& shape) {
  for (auto d : shape)
    if (d < -1)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' shape dims must be >= -1, got ", d);
}

inline bool is_index_dtype(DataType t) { return t == DataType::Int32 || t == DataType::Int64; }

}  // namespace kiln::dialect_detail

// Small helpers the ops' InferMeta functions share: fetch an operand as a
// tensor type (a kiln::Error naming the op otherwise), check dtypes, and
// make a result type that is a vtensor exactly when every operand is one.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "kiln/ir/builtin_types.h"

namespace kiln::meta {

// Operand i as a tensor/vtensor type; kiln::Error (InvalidArgument) naming
// the op and the operand otherwise.
Type tensor_operand(std::string_view op, const std::vector<Type>& in, std::size_t i);
// Operand i as a tensor of a floating dtype; kiln::Error naming the op otherwise.
Type float_operand(std::string_view op, const std::vector<Type>& in, std::size_t i);
// A vtensor type when every operand is a vtensor, else a tensor type.
Type result_like(const std::vector<Type>& in, DataType dtype, std::vector<std::int64_t> dims);
// kiln::Error unless `dtype` is f16/bf16/f32/f64, naming the op and operand.
void require_floating(std::string_view op, DataType dtype, std::size_t operand = 0);
// kiln::Error when two operands' dtypes differ (names both).
void require_same_dtype(std::string_view op, DataType a, DataType b, std::size_t ia = 0,
                        std::size_t ib = 1);
// kiln::Error when `t` is a vtensor: an op that writes its operand in place
// cannot take a value-semantics tensor.
void require_mutable(std::string_view op, Type t);
// Operand j has operand i's dtype and a shape that may equal i's at run time
// (-1 matches anything); kiln::Error naming the op and both operands otherwise.
void require_like(std::string_view op, const std::vector<Type>& in, std::size_t i, std::size_t j);
// Whether two static shapes may be equal at run time (-1 matches anything).
bool compatible_dims(const std::vector<std::int64_t>& a, const std::vector<std::int64_t>& b);
// kiln::Error unless `in` has n operands.
void require_count(std::string_view op, const std::vector<Type>& in, std::size_t n);
// "[2, -1, 3]"
std::string dims_string(const std::vector<std::int64_t>& dims);

// `axis` in [-rank, rank) → [0, rank); kiln::Error naming the op otherwise.
std::int64_t normalize_axis(std::string_view op, std::int64_t axis, std::int64_t rank,
                            std::string_view what = "axis");
// A shape attribute: every dim >= -1 (-1: unknown).
void check_shape_attr(std::string_view op, const std::vector<std::int64_t>& shape);
// i32 or i64: the dtypes of indices, ids and labels.
inline bool is_index_dtype(DataType t) { return t == DataType::Int32 || t == DataType::Int64; }
// Whether two static dims may be equal at run time (-1 matches anything).
inline bool dim_fits(std::int64_t a, std::int64_t b) { return a == b || a < 0 || b < 0; }
// The known one of two dims that must agree (-1 when neither is known).
inline std::int64_t known_dim(std::int64_t a, std::int64_t b) { return a >= 0 ? a : b; }

}  // namespace kiln::meta

namespace kiln {
// Broadcast two shapes numpy-style; -1 (unknown) broadcasts against anything
// but 1. Throws kiln::Error naming `op` when the shapes cannot broadcast.
std::vector<std::int64_t> broadcast_shapes(std::string_view op, const std::vector<std::int64_t>& a,
                                           const std::vector<std::int64_t>& b);
}  // namespace kiln

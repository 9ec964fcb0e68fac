// Shorthands the dialect tests share: static types built from dims.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "kiln/ir/builtin_types.h"

namespace kiln_dialect_test {

inline constexpr auto F32 = kiln::DataType::Float32;
inline constexpr auto F64 = kiln::DataType::Float64;

// A tensor type of `dims` (-1: unknown) and dtype `dt`.
inline kiln::Type tf(std::vector<std::int64_t> dims, kiln::DataType dt = F32) {
  return kiln::TensorType::get(dt, std::move(dims));
}
// A variable-length f32 tensor type (kiln.vtensor) of `dims`.
inline kiln::Type vf(std::vector<std::int64_t> dims) {
  return kiln::VTensorType::get(F32, std::move(dims));
}

}  // namespace kiln_dialect_test

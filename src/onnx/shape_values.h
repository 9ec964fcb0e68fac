// Private to src/onnx: what the importer knows at import about an integer
// shape vector computed at run time. PyTorch's exported shape arithmetic
// (Shape → Gather → Unsqueeze → Concat) mixes dims known at import (a static
// dim, a constant) with symbolic ones (the batch); reading the kiln ops that
// made the vector gives the known entries, so Reshape / Expand /
// ConstantOfShape keep those dims static (their ops' known_dims) and only the
// symbolic ones are left to run time.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "kiln/ir/value.h"

namespace kiln::onnx::detail {

// One entry per element of the 1-D integer value `v`: its value, or nullopt
// where it is known only at run time. Empty when v is not a 1-D integer
// tensor of static length.
std::vector<std::optional<std::int64_t>> shape_values(Value v);

// The result dims of reshaping x (dims `x`) by a shape of these entries
// (0 copies x's dim unless allowzero; one -1 is inferred): -1 where unknown.
std::vector<std::int64_t> reshape_known_dims(const std::vector<std::int64_t>& x,
                                             const std::vector<std::optional<std::int64_t>>& shape,
                                             bool allowzero);

// A dim known only at run time, by where it comes from: dim `dim` of the
// value `value` (an op result or block argument) that no op before it
// passes on unchanged. Two dims of one origin are equal at run time.
struct DimOrigin {
  const void* value = nullptr;
  std::int64_t dim = 0;
  bool operator==(const DimOrigin&) const = default;
};

// The origin of dim d of v (kiln/ops_shape.cc lists the ops it follows).
DimOrigin dim_origin(Value v, std::int64_t d);

// Per entry of the 1-D integer value v, the dim of a value's Shape it is
// at run time (through Gather, Unsqueeze, Concat, Cast, Reshape), nullopt
// where it is none; `depth` bounds the ops followed. Empty when v's length
// is not known.
std::vector<std::optional<DimOrigin>> shape_origins(Value v, int depth);

// A run-time Reshape's shape as a static kiln.reshape can take it: each
// entry known at import, or 0 where the entry is x's own dim at its index
// (by origin: Gather(Shape(y), k) with y's dim k and x's dim i one dim);
// nullopt when an entry is neither.
std::optional<std::vector<std::int64_t>> reshape_copying_dims(Value x, Value shape);

}  // namespace kiln::onnx::detail

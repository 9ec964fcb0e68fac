// ReduceKind: how a collective combines the ranks' values (sum, or mean =
// sum / number of ranks), and which dtypes a collective can reduce — shared
// by the collective ops' verification (kiln/dialect/collective_ops.h) and
// the communicator that runs them (kiln/runtime/communicator.h).
#pragma once

#include <cstdint>
#include <string_view>

#include "kiln/support/data_type.h"

namespace kiln {

enum class ReduceKind : std::uint8_t { Sum, Mean };

constexpr std::string_view to_string(ReduceKind r) { return r == ReduceKind::Sum ? "sum" : "mean"; }

// kiln::Error (InvalidArgument) for anything but "sum" and "mean".
ReduceKind reduce_kind_from_string(std::string_view s);

// Whether a collective can reduce `dtype`: a sum every integer and floating
// dtype but f16 and bf16 (MPI has no type for them) and bool; a mean only
// f32 and f64.
bool is_reducible(DataType dtype, ReduceKind kind);

// Why `dtype` cannot be reduced by `kind` (for errors): "mean needs f32 or f64; use sum", …
std::string_view not_reducible_reason(DataType dtype, ReduceKind kind);

}  // namespace kiln

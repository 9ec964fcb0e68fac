// ReduceKind (kiln/support/reduce_kind.h).
#include "kiln/support/reduce_kind.h"

#include "kiln/support/error.h"

namespace kiln {

ReduceKind reduce_kind_from_string(std::string_view s) {
  if (s == "sum") return ReduceKind::Sum;
  if (s == "mean") return ReduceKind::Mean;
  throw_error(ErrorKind::InvalidArgument, "reduction '", s, "': expected \"sum\" or \"mean\"");
}

bool is_reducible(DataType dtype, ReduceKind kind) {
  switch (dtype) {
    case DataType::Float32:
    case DataType::Float64: return true;
    case DataType::Int8:
    case DataType::Int16:
    case DataType::Int32:
    case DataType::Int64:
    case DataType::UInt8:
    case DataType::UInt16:
    case DataType::UInt32:
    case DataType::UInt64: return kind == ReduceKind::Sum;
    default: return false;
  }
}

std::string_view not_reducible_reason(DataType dtype, ReduceKind kind) {
  if (kind == ReduceKind::Mean && is_reducible(dtype, ReduceKind::Sum)) return "a mean needs f32 or f64; use sum";
  return "reducible: f32, f64 and the integer dtypes; f16, bf16 and bool have no MPI reduction type";
}

}  // namespace kiln

// The C++ type a tensor constant stores each dtype's elements as (f16 /
// bf16: their 16-bit patterns): shared by the tensor attribute's storage,
// printing and JSON (tensor_attribute.cc) and the text parser (parser.cc).
#pragma once

#include <cstdint>

#include "kiln/support/data_type.h"
#include "kiln/support/error.h"

namespace kiln::detail {

// Calls f(T{}) with T that type; kiln::Error (InvalidArgument) for
// DataType::Undefined.
template <typename F>
decltype(auto) with_storage_type(DataType dtype, F&& f) {
  switch (dtype) {
    case DataType::Float32: return f(float());
    case DataType::Float64: return f(double());
    case DataType::Int8: return f(std::int8_t());
    case DataType::Int32: return f(std::int32_t());
    case DataType::Int64: return f(std::int64_t());
    case DataType::Bool: return f(bool());
    case DataType::UInt8: return f(std::uint8_t());
    case DataType::Int16: return f(std::int16_t());
    case DataType::UInt16: return f(std::uint16_t());
    case DataType::UInt32: return f(std::uint32_t());
    case DataType::UInt64: return f(std::uint64_t());
    case DataType::Float16:
    case DataType::BFloat16: return f(std::uint16_t());
    case DataType::Undefined: break;
  }
  throw_error(ErrorKind::InvalidArgument, "a tensor constant of an undefined dtype");
}

}  // namespace kiln::detail

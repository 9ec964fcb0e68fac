// DataType: the element types kiln tensors hold. Shared vocabulary of the IR
// (DataTypeAttribute, element types of tensor types) and the runtime (Tensor);
// it lives in support/ because both layers need it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace kiln {

enum class DataType : std::uint8_t {
  Undefined = 0,
  Float16,
  BFloat16,
  Float32,
  Float64,
  Int8,
  Int32,
  Int64,
  Bool,
};

// Short names as printed in types: f16, bf16, f32, f64, i8, i32, i64, bool.
constexpr std::string_view to_string(DataType t) {
  switch (t) {
    case DataType::Float16: return "f16";
    case DataType::BFloat16: return "bf16";
    case DataType::Float32: return "f32";
    case DataType::Float64: return "f64";
    case DataType::Int8: return "i8";
    case DataType::Int32: return "i32";
    case DataType::Int64: return "i64";
    case DataType::Bool: return "bool";
    case DataType::Undefined: break;
  }
  return "undefined";
}

constexpr std::optional<DataType> parse_data_type(std::string_view s) {
  for (auto t : {DataType::Float16, DataType::BFloat16, DataType::Float32, DataType::Float64,
                 DataType::Int8, DataType::Int32, DataType::Int64, DataType::Bool})
    if (to_string(t) == s) return t;
  return std::nullopt;
}

constexpr std::size_t size_of(DataType t) {
  switch (t) {
    case DataType::Float16:
    case DataType::BFloat16: return 2;
    case DataType::Float32:
    case DataType::Int32: return 4;
    case DataType::Float64:
    case DataType::Int64: return 8;
    case DataType::Int8:
    case DataType::Bool: return 1;
    case DataType::Undefined: break;
  }
  return 0;
}

constexpr bool is_floating(DataType t) {
  return t == DataType::Float16 || t == DataType::BFloat16 || t == DataType::Float32 ||
         t == DataType::Float64;
}

template <typename T> struct DataTypeOf;
template <> struct DataTypeOf<float> { static constexpr DataType value = DataType::Float32; };
template <> struct DataTypeOf<double> { static constexpr DataType value = DataType::Float64; };
template <> struct DataTypeOf<std::int8_t> { static constexpr DataType value = DataType::Int8; };
template <> struct DataTypeOf<std::int32_t> { static constexpr DataType value = DataType::Int32; };
template <> struct DataTypeOf<std::int64_t> { static constexpr DataType value = DataType::Int64; };
template <> struct DataTypeOf<bool> { static constexpr DataType value = DataType::Bool; };
template <typename T> inline constexpr DataType data_type_of = DataTypeOf<T>::value;

}  // namespace kiln

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
  // Storage types of imported models (ONNX's uint8, int16, ...): cast,
  // copied and moved everywhere, computed on by the integer kernels that
  // list them. Appended so that the codes saved before them keep their
  // meaning.
  UInt8,
  Int16,
  UInt16,
  UInt32,
  UInt64,
};

// Short names as printed in types: f16, bf16, f32, f64, i8, i16, i32, i64,
// u8, u16, u32, u64, bool.
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
    case DataType::UInt8: return "u8";
    case DataType::Int16: return "i16";
    case DataType::UInt16: return "u16";
    case DataType::UInt32: return "u32";
    case DataType::UInt64: return "u64";
    case DataType::Undefined: break;
  }
  return "undefined";
}

constexpr std::optional<DataType> parse_data_type(std::string_view s) {
  for (auto t : {DataType::Float16, DataType::BFloat16, DataType::Float32, DataType::Float64,
                 DataType::Int8, DataType::Int32, DataType::Int64, DataType::Bool,
                 DataType::UInt8, DataType::Int16, DataType::UInt16, DataType::UInt32,
                 DataType::UInt64})
    if (to_string(t) == s) return t;
  return std::nullopt;
}

constexpr std::size_t size_of(DataType t) {
  switch (t) {
    case DataType::Float16:
    case DataType::BFloat16:
    case DataType::Int16:
    case DataType::UInt16: return 2;
    case DataType::Float32:
    case DataType::Int32:
    case DataType::UInt32: return 4;
    case DataType::Float64:
    case DataType::Int64:
    case DataType::UInt64: return 8;
    case DataType::Int8:
    case DataType::UInt8:
    case DataType::Bool: return 1;
    case DataType::Undefined: break;
  }
  return 0;
}

constexpr bool is_floating(DataType t) {
  return t == DataType::Float16 || t == DataType::BFloat16 || t == DataType::Float32 ||
         t == DataType::Float64;
}

// Integer types (signed or not; bool is not one).
constexpr bool is_integer(DataType t) {
  switch (t) {
    case DataType::Int8:
    case DataType::Int16:
    case DataType::Int32:
    case DataType::Int64:
    case DataType::UInt8:
    case DataType::UInt16:
    case DataType::UInt32:
    case DataType::UInt64: return true;
    default: return false;
  }
}

constexpr bool is_unsigned(DataType t) {
  return t == DataType::UInt8 || t == DataType::UInt16 || t == DataType::UInt32 ||
         t == DataType::UInt64;
}

template <typename T> struct DataTypeOf;
template <> struct DataTypeOf<float> { static constexpr DataType value = DataType::Float32; };
template <> struct DataTypeOf<double> { static constexpr DataType value = DataType::Float64; };
template <> struct DataTypeOf<std::int8_t> { static constexpr DataType value = DataType::Int8; };
template <> struct DataTypeOf<std::int32_t> { static constexpr DataType value = DataType::Int32; };
template <> struct DataTypeOf<std::int64_t> { static constexpr DataType value = DataType::Int64; };
template <> struct DataTypeOf<bool> { static constexpr DataType value = DataType::Bool; };
template <> struct DataTypeOf<std::uint8_t> { static constexpr DataType value = DataType::UInt8; };
template <> struct DataTypeOf<std::int16_t> { static constexpr DataType value = DataType::Int16; };
template <> struct DataTypeOf<std::uint16_t> { static constexpr DataType value = DataType::UInt16; };
template <> struct DataTypeOf<std::uint32_t> { static constexpr DataType value = DataType::UInt32; };
template <> struct DataTypeOf<std::uint64_t> { static constexpr DataType value = DataType::UInt64; };
template <typename T> inline constexpr DataType data_type_of = DataTypeOf<T>::value;

}  // namespace kiln

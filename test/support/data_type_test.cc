// DataType: element types, their short names and sizes.
#include "kiln/support/data_type.h"

#include <cstdint>

#include "catch.hpp"

using kiln::DataType;

namespace {
constexpr DataType kAll[] = {DataType::Float16, DataType::BFloat16, DataType::Float32,
                             DataType::Float64, DataType::Int8,     DataType::Int16,
                             DataType::Int32,   DataType::Int64,    DataType::UInt8,
                             DataType::UInt16,  DataType::UInt32,   DataType::UInt64,
                             DataType::Bool};
}

TEST_CASE("data types print with their short names", "[support][data_type]") {
  CHECK(kiln::to_string(DataType::Float16) == "f16");
  CHECK(kiln::to_string(DataType::BFloat16) == "bf16");
  CHECK(kiln::to_string(DataType::Float32) == "f32");
  CHECK(kiln::to_string(DataType::Float64) == "f64");
  CHECK(kiln::to_string(DataType::Int8) == "i8");
  CHECK(kiln::to_string(DataType::Int32) == "i32");
  CHECK(kiln::to_string(DataType::Int64) == "i64");
  CHECK(kiln::to_string(DataType::Bool) == "bool");
  CHECK(kiln::to_string(DataType::UInt8) == "u8");
  CHECK(kiln::to_string(DataType::Int16) == "i16");
  CHECK(kiln::to_string(DataType::UInt16) == "u16");
  CHECK(kiln::to_string(DataType::UInt32) == "u32");
  CHECK(kiln::to_string(DataType::UInt64) == "u64");
  CHECK(kiln::to_string(DataType::Undefined) == "undefined");
}

TEST_CASE("every data type's name parses back to it", "[support][data_type]") {
  for (DataType t : kAll) {
    INFO(kiln::to_string(t));
    auto parsed = kiln::parse_data_type(kiln::to_string(t));
    REQUIRE(parsed.has_value());
    CHECK(*parsed == t);
  }
  static_assert(kiln::parse_data_type("f32") == DataType::Float32);
}

TEST_CASE("unknown data type names do not parse", "[support][data_type]") {
  for (const char* s : {"", "undefined", "f128", "F32", "float32", "i128", "u1", " f32"}) {
    INFO("'" << s << "'");
    CHECK_FALSE(kiln::parse_data_type(s).has_value());
  }
}

TEST_CASE("data types know their size in bytes", "[support][data_type]") {
  CHECK(kiln::size_of(DataType::Float16) == 2);
  CHECK(kiln::size_of(DataType::BFloat16) == 2);
  CHECK(kiln::size_of(DataType::Float32) == 4);
  CHECK(kiln::size_of(DataType::Float64) == 8);
  CHECK(kiln::size_of(DataType::Int8) == 1);
  CHECK(kiln::size_of(DataType::Int32) == 4);
  CHECK(kiln::size_of(DataType::Int64) == 8);
  CHECK(kiln::size_of(DataType::Bool) == 1);
  CHECK(kiln::size_of(DataType::UInt8) == 1);
  CHECK(kiln::size_of(DataType::Int16) == 2);
  CHECK(kiln::size_of(DataType::UInt16) == 2);
  CHECK(kiln::size_of(DataType::UInt32) == 4);
  CHECK(kiln::size_of(DataType::UInt64) == 8);
  CHECK(kiln::size_of(DataType::Undefined) == 0);
}

TEST_CASE("only the float types are floating", "[support][data_type]") {
  CHECK(kiln::is_floating(DataType::Float16));
  CHECK(kiln::is_floating(DataType::BFloat16));
  CHECK(kiln::is_floating(DataType::Float32));
  CHECK(kiln::is_floating(DataType::Float64));
  CHECK_FALSE(kiln::is_floating(DataType::Int8));
  CHECK_FALSE(kiln::is_floating(DataType::Int32));
  CHECK_FALSE(kiln::is_floating(DataType::Int64));
  CHECK_FALSE(kiln::is_floating(DataType::Bool));
  CHECK_FALSE(kiln::is_floating(DataType::Undefined));
}

TEST_CASE("the integer types are integers, the unsigned ones unsigned, bool neither",
          "[support][data_type]") {
  for (DataType t : kAll) {
    INFO(kiln::to_string(t));
    const auto name = kiln::to_string(t);
    CHECK(kiln::is_integer(t) == (name[0] == 'i' || name[0] == 'u'));
    CHECK(kiln::is_unsigned(t) == (name[0] == 'u'));
  }
  CHECK_FALSE(kiln::is_integer(DataType::Undefined));
}

TEST_CASE("the storage types keep the codes of the types before them", "[support][data_type]") {
  // Saved weights hold these codes: appending types must not renumber.
  STATIC_REQUIRE(static_cast<int>(DataType::Float16) == 1);
  STATIC_REQUIRE(static_cast<int>(DataType::Bool) == 8);
  STATIC_REQUIRE(static_cast<int>(DataType::UInt8) == 9);
  STATIC_REQUIRE(static_cast<int>(DataType::UInt64) == 13);
}

TEST_CASE("C++ element types map to their data type", "[support][data_type]") {
  STATIC_REQUIRE(kiln::data_type_of<std::uint8_t> == DataType::UInt8);
  STATIC_REQUIRE(kiln::data_type_of<std::int16_t> == DataType::Int16);
  STATIC_REQUIRE(kiln::data_type_of<std::uint16_t> == DataType::UInt16);
  STATIC_REQUIRE(kiln::data_type_of<std::uint32_t> == DataType::UInt32);
  STATIC_REQUIRE(kiln::data_type_of<std::uint64_t> == DataType::UInt64);
  STATIC_REQUIRE(kiln::data_type_of<float> == DataType::Float32);
  STATIC_REQUIRE(kiln::data_type_of<double> == DataType::Float64);
  STATIC_REQUIRE(kiln::data_type_of<std::int8_t> == DataType::Int8);
  STATIC_REQUIRE(kiln::data_type_of<std::int32_t> == DataType::Int32);
  STATIC_REQUIRE(kiln::data_type_of<std::int64_t> == DataType::Int64);
  STATIC_REQUIRE(kiln::data_type_of<bool> == DataType::Bool);
  CHECK(kiln::size_of(kiln::data_type_of<float>) == sizeof(float));
  CHECK(kiln::size_of(kiln::data_type_of<std::int64_t>) == sizeof(std::int64_t));
}

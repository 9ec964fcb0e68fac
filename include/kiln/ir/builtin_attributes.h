// The builtin attributes (seed 002 §2.1.1): bool, i32, i64, f32, f64, str,
// array, dictionary (sorted by name; binary search), type, data type, place.
// Each is uniqued in the IrContext and read-only.
#pragma once

#include <bit>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/ir/dialect.h"
#include "kiln/support/data_type.h"
#include "kiln/support/place.h"

namespace kiln {

template <typename T>
struct ScalarAttributeStorage : AttributeStorage {
  using KeyTy = T;
  explicit ScalarAttributeStorage(const T& v) : value(v) {}
  bool operator==(const T& v) const {
    if constexpr (std::is_floating_point_v<T>) return bits(value) == bits(v);  // NaN-safe
    else return value == v;
  }
  static std::size_t hash_key(const T& v) {
    if constexpr (std::is_floating_point_v<T>) return std::hash<decltype(bits(v))>()(bits(v));
    else return std::hash<T>()(v);
  }
  template <typename F> static auto bits(F f) {
    if constexpr (sizeof(F) == 4) return std::bit_cast<std::uint32_t>(f);
    else return std::bit_cast<std::uint64_t>(f);
  }
  T value;
};

#define KILN_SCALAR_ATTRIBUTE(Class, T, text)                                   \
  class Class : public AttrBase<Class, ScalarAttributeStorage<T>> {             \
   public:                                                                      \
    using AttrBase::AttrBase;                                                   \
    using ValueType = T;                                                        \
    static constexpr std::string_view name = text;                              \
    static Class get(T v);                                                      \
    T value() const { return storage()->value; }                                \
    void print(std::ostream& os) const;                                         \
    void save(nlohmann::json& j) const;                                         \
    static Class load(const nlohmann::json& j);                                 \
  };
KILN_SCALAR_ATTRIBUTE(BoolAttribute, bool, "bool")
KILN_SCALAR_ATTRIBUTE(Int32Attribute, std::int32_t, "i32")
KILN_SCALAR_ATTRIBUTE(Int64Attribute, std::int64_t, "i64")
KILN_SCALAR_ATTRIBUTE(Float32Attribute, float, "f32")
KILN_SCALAR_ATTRIBUTE(Float64Attribute, double, "f64")
KILN_SCALAR_ATTRIBUTE(StrAttribute, std::string, "str")
KILN_SCALAR_ATTRIBUTE(TypeAttribute, Type, "type")
KILN_SCALAR_ATTRIBUTE(DataTypeAttribute, DataType, "dtype")
#undef KILN_SCALAR_ATTRIBUTE

struct PlaceAttributeStorage : AttributeStorage {
  using KeyTy = Place;
  explicit PlaceAttributeStorage(const Place& p) : value(p) {}
  bool operator==(const Place& p) const { return value == p; }
  static std::size_t hash_key(const Place& p) {
    return hash_combine(static_cast<std::size_t>(p.kind), static_cast<std::size_t>(p.device));
  }
  Place value;
};

class PlaceAttribute : public AttrBase<PlaceAttribute, PlaceAttributeStorage> {
 public:
  using AttrBase::AttrBase;
  using ValueType = Place;
  static constexpr std::string_view name = "place";
  static PlaceAttribute get(Place p);
  Place value() const { return storage()->value; }
  void print(std::ostream& os) const;
  void save(nlohmann::json& j) const;
  static PlaceAttribute load(const nlohmann::json& j);
};

struct ArrayAttributeStorage : AttributeStorage {
  using KeyTy = std::vector<Attribute>;
  explicit ArrayAttributeStorage(const KeyTy& k) : elements(k) {}
  bool operator==(const KeyTy& k) const;
  static std::size_t hash_key(const KeyTy& k);
  std::vector<Attribute> elements;
};

class ArrayAttribute : public AttrBase<ArrayAttribute, ArrayAttributeStorage> {
 public:
  using AttrBase::AttrBase;
  static constexpr std::string_view name = "array";
  static ArrayAttribute get(std::vector<Attribute> elements);
  const std::vector<Attribute>& value() const { return storage()->elements; }
  std::size_t size() const { return value().size(); }
  Attribute operator[](std::size_t i) const { return value()[i]; }
  void print(std::ostream& os) const;
  void save(nlohmann::json& j) const;
  static ArrayAttribute load(const nlohmann::json& j);
};

using NamedAttribute = std::pair<std::string, Attribute>;

struct DictionaryAttributeStorage : AttributeStorage {
  using KeyTy = std::vector<NamedAttribute>;  // sorted by name, unique names
  explicit DictionaryAttributeStorage(const KeyTy& k) : entries(k) {}
  bool operator==(const KeyTy& k) const;
  static std::size_t hash_key(const KeyTy& k);
  std::vector<NamedAttribute> entries;
};

class DictionaryAttribute : public AttrBase<DictionaryAttribute, DictionaryAttributeStorage> {
 public:
  using AttrBase::AttrBase;
  static constexpr std::string_view name = "dict";
  // Sorts by name; a repeated name is a kiln::Error(InvalidArgument).
  static DictionaryAttribute get(std::vector<NamedAttribute> entries = {});

  const std::vector<NamedAttribute>& value() const { return storage()->entries; }
  std::size_t size() const { return value().size(); }
  bool empty() const { return value().empty(); }
  // Binary search by name; null Attribute when absent.
  Attribute find(std::string_view key) const;
  bool contains(std::string_view key) const { return static_cast<bool>(find(key)); }
  // A copy with `key` set to `value` (added or replaced).
  DictionaryAttribute with(std::string_view key, Attribute value) const;
  DictionaryAttribute without(std::string_view key) const;

  auto begin() const { return value().begin(); }
  auto end() const { return value().end(); }

  void print(std::ostream& os) const;
  void save(nlohmann::json& j) const;
  static DictionaryAttribute load(const nlohmann::json& j);
};

// Array of i64 — the common shape/axes attribute.
ArrayAttribute make_i64_array(const std::vector<std::int64_t>& values);
std::vector<std::int64_t> to_i64_vector(ArrayAttribute a);

}  // namespace kiln

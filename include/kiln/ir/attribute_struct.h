// Op attributes declared once, as a reflected struct (Boost.Hana):
//   struct Attributes { BOOST_HANA_DEFINE_STRUCT(Attributes, (bool, transpose_x),
//                                                 (bool, transpose_y)); };
// From it follow the OpInfo's attribute list, the verifier's checks, and the
// conversions struct ⇄ DictionaryAttribute that build(), JSON and printing use.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <boost/hana/accessors.hpp>
#include <boost/hana/define_struct.hpp>
#include <boost/hana/for_each.hpp>
#include <boost/hana/string.hpp>

#include "kiln/ir/builtin_attributes.h"

namespace kiln {

// C++ field type → attribute class. Extend by specialising.
template <typename T> struct AttributeFor;
template <> struct AttributeFor<bool> { using type = BoolAttribute; };
template <> struct AttributeFor<std::int32_t> { using type = Int32Attribute; };
template <> struct AttributeFor<std::int64_t> { using type = Int64Attribute; };
template <> struct AttributeFor<float> { using type = Float32Attribute; };
template <> struct AttributeFor<double> { using type = Float64Attribute; };
template <> struct AttributeFor<std::string> { using type = StrAttribute; };
template <> struct AttributeFor<Type> { using type = TypeAttribute; };
template <> struct AttributeFor<DataType> { using type = DataTypeAttribute; };
template <> struct AttributeFor<Place> { using type = PlaceAttribute; };
template <> struct AttributeFor<std::vector<std::int64_t>> {
  using type = ArrayAttribute;
};

namespace detail {
template <typename T>
Attribute to_attribute(const T& v) {
  if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) return make_i64_array(v);
  else return AttributeFor<T>::type::get(v);
}

// Throws kiln::Error naming `owner` and the attribute when `a` is not a T.
void attribute_kind_error(std::string_view owner, std::string_view attr, std::string_view expected,
                          Attribute got);
bool is_i64_array(Attribute a);

template <typename T>
T from_attribute(Attribute a, std::string_view owner, std::string_view attr) {
  using A = typename AttributeFor<T>::type;
  if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) {
    if (!is_i64_array(a)) attribute_kind_error(owner, attr, "array of i64", a);
    return to_i64_vector(a.cast<ArrayAttribute>());
  } else {
    if (!a || !a.isa<A>()) attribute_kind_error(owner, attr, A::name, a);
    return a.cast<A>().value();
  }
}

template <typename T>
std::string_view attribute_kind_name() {
  if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) return "array<i64>";
  else return AttributeFor<T>::type::name;
}
}  // namespace detail

// Struct → named attributes, in declaration order.
template <typename S>
std::vector<NamedAttribute> to_named_attributes(const S& s) {
  std::vector<NamedAttribute> out;
  boost::hana::for_each(boost::hana::accessors<S>(), [&](auto pair) {
    const auto& field = boost::hana::second(pair)(s);
    out.emplace_back(boost::hana::to<const char*>(boost::hana::first(pair)),
                     detail::to_attribute(field));
  });
  return out;
}

// Named attributes → struct. A missing or ill-kinded attribute is a
// kiln::Error naming `owner` (the op) and the attribute.
template <typename S>
S from_attributes(DictionaryAttribute dict, std::string_view owner) {
  S s{};
  boost::hana::for_each(boost::hana::accessors<S>(), [&](auto pair) {
    const char* key = boost::hana::to<const char*>(boost::hana::first(pair));
    auto& field = boost::hana::second(pair)(s);
    using F = std::remove_cvref_t<decltype(field)>;
    field = detail::from_attribute<F>(dict.find(key), owner, key);
  });
  return s;
}

// (name, kind name) of each field — what the OpInfo records.
template <typename S>
std::vector<std::pair<std::string, std::string>> attribute_schema() {
  std::vector<std::pair<std::string, std::string>> out;
  boost::hana::for_each(boost::hana::accessors<S>(), [&](auto pair) {
    using F = std::remove_cvref_t<decltype(boost::hana::second(pair)(std::declval<S&>()))>;
    out.emplace_back(boost::hana::to<const char*>(boost::hana::first(pair)),
                     std::string(detail::attribute_kind_name<F>()));
  });
  return out;
}

}  // namespace kiln

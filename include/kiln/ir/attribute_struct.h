// Op attributes declared once, as a reflected struct (Boost.Hana):
//   KILN_ATTRIBUTES((bool, transpose_x), //                                                 (bool, transpose_y));
// From it follow the OpInfo's attribute list, the verifier's checks, and the
// conversions struct ⇄ DictionaryAttribute that build(), JSON and printing use.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <boost/hana/accessors.hpp>
#include <boost/hana/basic_tuple.hpp>
#include <boost/hana/pair.hpp>
#include <boost/hana/string.hpp>
#include <boost/hana/tuple.hpp>
#include <boost/hana/unpack.hpp>

#include "kiln/ir/builtin_attributes.h"
#include "kiln/ir/reflect.h"

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

// Compile time (the 300-op budget): the conversions below expand
// a struct's fields with one fold over its accessor pairs rather than
// hana::for_each with a generic lambda, so a struct costs one instantiation per
// conversion instead of one per field and conversion; and they read the pair
// types from the list KILN_REFLECT records (reflect.h), so
// Hana's accessor tuple is never instantiated for them.
namespace detail {
// One accessor pair of hana::accessors<S>(): (hana::string name, getter).
template <typename P> struct ReflectedField;
template <typename Name, typename Get>
struct ReflectedField<boost::hana::pair<Name, Get>> {
  static const char* name() { return Name::c_str(); }
  template <typename S>
  static decltype(auto) get(S& s) { return Get{}(s); }
};

template <typename... P>
struct ReflectedFields {
  template <typename S>
  static std::vector<NamedAttribute> to_named(const S& s) {
    std::vector<NamedAttribute> out;
    out.reserve(sizeof...(P));
    (out.emplace_back(ReflectedField<P>::name(), to_attribute(ReflectedField<P>::get(s))), ...);
    return out;
  }
  template <typename S>
  static S from_dict(DictionaryAttribute dict, std::string_view owner) {
    S s{};
    ((ReflectedField<P>::get(s) =
          from_attribute<std::remove_cvref_t<decltype(ReflectedField<P>::get(s))>>(
              dict.find(ReflectedField<P>::name()), owner, ReflectedField<P>::name())),
     ...);
    return s;
  }
  template <typename S>
  static std::vector<std::pair<std::string, std::string>> schema() {
    std::vector<std::pair<std::string, std::string>> out;
    out.reserve(sizeof...(P));
    (out.emplace_back(ReflectedField<P>::name(),
                      attribute_kind_name<std::remove_cvref_t<decltype(ReflectedField<P>::get(
                          std::declval<S&>()))>>()),
     ...);
    return out;
  }
};

// The accessor sequence's element types as ReflectedFields<P...>: read off the
// tuple type that KILN_REFLECT / BOOST_HANA_DEFINE_STRUCT produce, or through
// hana::unpack for any other hana::Struct.
template <typename Accessors>
struct FieldsOf {
  using type = decltype(boost::hana::unpack(std::declval<Accessors>(), [](auto... p) {
    return ReflectedFields<decltype(p)...>{};
  }));
};
template <typename... P>
struct FieldsOf<boost::hana::tuple<P...>> { using type = ReflectedFields<P...>; };
template <typename... P>
struct FieldsOf<boost::hana::basic_tuple<P...>> { using type = ReflectedFields<P...>; };

// A struct declared with KILN_REFLECT carries its field list; any other
// hana::Struct goes through
// hana::accessors.
template <typename S>
struct FieldsOfStruct {
  using type = typename FieldsOf<std::remove_cvref_t<decltype(boost::hana::accessors<S>())>>::type;
};
template <typename S>
  requires requires { typename S::hana_accessors_impl::template kiln_fields<>; }
struct FieldsOfStruct<S> {
  using type = typename S::hana_accessors_impl::template kiln_fields<>;
};

template <typename S>
using fields_of = typename FieldsOfStruct<S>::type;
}  // namespace detail

// Struct → named attributes, in declaration order.
template <typename S>
std::vector<NamedAttribute> to_named_attributes(const S& s) {
  return detail::fields_of<S>::to_named(s);
}

// Named attributes → struct. A missing or ill-kinded attribute is a
// kiln::Error naming `owner` (the op) and the attribute.
template <typename S>
S from_attributes(DictionaryAttribute dict, std::string_view owner) {
  return detail::fields_of<S>::template from_dict<S>(dict, owner);
}

// (name, kind name) of each field — what the OpInfo records.
template <typename S>
std::vector<std::pair<std::string, std::string>> attribute_schema() {
  return detail::fields_of<S>::template schema<S>();
}

}  // namespace kiln

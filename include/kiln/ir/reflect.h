// kiln's struct-reflection macro: fields declared once, from which op
// attributes (attribute_struct.h) get their conversions to and from
// DictionaryAttribute, their verification, JSON and printing.
//
//   struct ConvAttrs {
//     KILN_REFLECT(ConvAttrs, (std::vector<std::int64_t>, strides), (bool, bias));
//   };
//   // in an op class, the common case, a struct named Attributes:
//   KILN_ATTRIBUTES((bool, transpose_x), (bool, transpose_y));
//
// A field is (type, name); the type may contain commas; at most 16 fields. The result is a
// boost::hana::Struct (hana::accessors, keys, members, to_map all work), the
// same one BOOST_HANA_DEFINE_STRUCT would give, built at a fraction of the
// compile cost:
//  - a field name is hana::string<c...> made from a C++20 string template
//    argument, named in decltype only (one instantiation per distinct name,
//    shared by every struct), instead of Hana's per-character indexing;
//  - the accessor tuple is only instantiated when someone calls
//    hana::accessors<S>(); kiln's own conversions read the field list from
//    `hana_accessors_impl::kiln_fields<>` and never instantiate it;
//  - neither is worked out where the struct is declared (both are
//    templates over the struct), only where a conversion first needs it.
// Measured on 150 attribute structs of 1–3 fields (g++ 12, -fsyntax-only):
// ~0.1 s instead of ~1.6 s with Hana's own macro. Structs declared with
// BOOST_HANA_DEFINE_STRUCT or BOOST_HANA_ADAPT_STRUCT work too, through
// hana::accessors.
#pragma once

#include <cstddef>
#include <utility>

#include <boost/hana/pair.hpp>
#include <boost/hana/string.hpp>
#include <boost/hana/tuple.hpp>
#include <boost/hana/detail/struct_macros.hpp>
#include <boost/hana/detail/preprocessor.hpp>

namespace kiln::detail {

// A string literal as a template argument.
template <std::size_t N>
struct FieldName {
  char data[N];
  constexpr FieldName(const char (&s)[N]) {  // NOLINT: implicit from a literal
    for (std::size_t i = 0; i < N; ++i) data[i] = s[i];
  }
};

template <FieldName S, std::size_t... i>
boost::hana::string<S.data[i]...> hana_string_of(std::index_sequence<i...>);  // decltype only

// hana_string_t<"axis"> = hana::string<'a', 'x', 'i', 's'>
template <FieldName S>
using hana_string_t = decltype(hana_string_of<S>(std::make_index_sequence<sizeof(S.data) - 1>{}));

// One field: hana::pair<name, getter>, the element type of hana::accessors<S>().
template <typename S, FieldName Name, auto Member>
using reflected_field_t =
    boost::hana::pair<hana_string_t<Name>,
                      boost::hana::struct_detail::member_ptr<decltype(Member), Member>>;

// The field list as kiln's conversions read it (attribute_struct.h).
template <typename... Fields>
struct ReflectedFields;

}  // namespace kiln::detail

#define KILN_REFLECT_MEMBER_(f) BOOST_HANA_PP_DROP_BACK f BOOST_HANA_PP_BACK f;
#define KILN_REFLECT_FIELD_(S, f)                                              \
  ::kiln::detail::reflected_field_t<S, BOOST_HANA_PP_STRINGIZE(BOOST_HANA_PP_BACK f), \
                                    &S::BOOST_HANA_PP_BACK f>
// Both members name the fields through KilnSelf_, a template parameter
// defaulting to the struct: the field types (names, member pointers) are
// worked out when a conversion first asks for them, not where the struct is
// declared, so a file that only declares op classes pays nothing per field.
#define KILN_REFLECT_ACCESSORS_(S, ...)                                                   \
  struct hana_accessors_impl {                                                            \
    template <typename KilnSelf_ = S>                                                     \
    using kiln_fields = ::kiln::detail::ReflectedFields<__VA_ARGS__>;                     \
    template <typename KilnSelf_ = S>                                                     \
    static constexpr auto apply() {                                                       \
      return ::boost::hana::tuple<__VA_ARGS__>{};                                         \
    }                                                                                     \
  }
// Declares the fields (type, name)... of struct S (at most 16) and makes S
// a hana::Struct. One macro per field count, chosen by the count: cheaper for
// the preprocessor than a generic for-each (measured: 150 structs preprocess
// in ~0.1 s this way, ~0.7 s through Boost.Preprocessor's SEQ_FOR_EACH).
#define KILN_REFLECT(S, ...) \
  BOOST_HANA_PP_CONCAT(KILN_REFLECT_, BOOST_HANA_PP_NARG(__VA_ARGS__))(S, __VA_ARGS__)
#define KILN_REFLECT_1(S, m1) \
  KILN_REFLECT_MEMBER_(m1) \
  KILN_REFLECT_ACCESSORS_(S, KILN_REFLECT_FIELD_(KilnSelf_, m1))
#define KILN_REFLECT_2(S, m1, m2) \
  KILN_REFLECT_MEMBER_(m1) KILN_REFLECT_MEMBER_(m2) \
  KILN_REFLECT_ACCESSORS_(S, KILN_REFLECT_FIELD_(KilnSelf_, m1), KILN_REFLECT_FIELD_(KilnSelf_, m2))
#define KILN_REFLECT_3(S, m1, m2, m3) \
  KILN_REFLECT_MEMBER_(m1) KILN_REFLECT_MEMBER_(m2) KILN_REFLECT_MEMBER_(m3) \
  KILN_REFLECT_ACCESSORS_(S, KILN_REFLECT_FIELD_(KilnSelf_, m1), KILN_REFLECT_FIELD_(KilnSelf_, m2), KILN_REFLECT_FIELD_(KilnSelf_, m3))
#define KILN_REFLECT_4(S, m1, m2, m3, m4) \
  KILN_REFLECT_MEMBER_(m1) KILN_REFLECT_MEMBER_(m2) KILN_REFLECT_MEMBER_(m3) KILN_REFLECT_MEMBER_(m4) \
  KILN_REFLECT_ACCESSORS_(S, KILN_REFLECT_FIELD_(KilnSelf_, m1), KILN_REFLECT_FIELD_(KilnSelf_, m2), KILN_REFLECT_FIELD_(KilnSelf_, m3), KILN_REFLECT_FIELD_(KilnSelf_, m4))
#define KILN_REFLECT_5(S, m1, m2, m3, m4, m5) \
  KILN_REFLECT_MEMBER_(m1) KILN_REFLECT_MEMBER_(m2) KILN_REFLECT_MEMBER_(m3) KILN_REFLECT_MEMBER_(m4) KILN_REFLECT_MEMBER_(m5) \
  KILN_REFLECT_ACCESSORS_(S, KILN_REFLECT_FIELD_(KilnSelf_, m1), KILN_REFLECT_FIELD_(KilnSelf_, m2), KILN_REFLECT_FIELD_(KilnSelf_, m3), KILN_REFLECT_FIELD_(KilnSelf_, m4), KILN_REFLECT_FIELD_(KilnSelf_, m5))
#define KILN_REFLECT_6(S, m1, m2, m3, m4, m5, m6) \
  KILN_REFLECT_MEMBER_(m1) KILN_REFLECT_MEMBER_(m2) KILN_REFLECT_MEMBER_(m3) KILN_REFLECT_MEMBER_(m4) KILN_REFLECT_MEMBER_(m5) KILN_REFLECT_MEMBER_(m6) \
  KILN_REFLECT_ACCESSORS_(S, KILN_REFLECT_FIELD_(KilnSelf_, m1), KILN_REFLECT_FIELD_(KilnSelf_, m2), KILN_REFLECT_FIELD_(KilnSelf_, m3), KILN_REFLECT_FIELD_(KilnSelf_, m4), KILN_REFLECT_FIELD_(KilnSelf_, m5), KILN_REFLECT_FIELD_(KilnSelf_, m6))
#define KILN_REFLECT_7(S, m1, m2, m3, m4, m5, m6, m7) \
  KILN_REFLECT_MEMBER_(m1) KILN_REFLECT_MEMBER_(m2) KILN_REFLECT_MEMBER_(m3) KILN_REFLECT_MEMBER_(m4) KILN_REFLECT_MEMBER_(m5) KILN_REFLECT_MEMBER_(m6) KILN_REFLECT_MEMBER_(m7) \
  KILN_REFLECT_ACCESSORS_(S, KILN_REFLECT_FIELD_(KilnSelf_, m1), KILN_REFLECT_FIELD_(KilnSelf_, m2), KILN_REFLECT_FIELD_(KilnSelf_, m3), KILN_REFLECT_FIELD_(KilnSelf_, m4), KILN_REFLECT_FIELD_(KilnSelf_, m5), KILN_REFLECT_FIELD_(KilnSelf_, m6), KILN_REFLECT_FIELD_(KilnSelf_, m7))
#define KILN_REFLECT_8(S, m1, m2, m3, m4, m5, m6, m7, m8) \
  KILN_REFLECT_MEMBER_(m1) KILN_REFLECT_MEMBER_(m2) KILN_REFLECT_MEMBER_(m3) KILN_REFLECT_MEMBER_(m4) KILN_REFLECT_MEMBER_(m5) KILN_REFLECT_MEMBER_(m6) KILN_REFLECT_MEMBER_(m7) KILN_REFLECT_MEMBER_(m8) \
  KILN_REFLECT_ACCESSORS_(S, KILN_REFLECT_FIELD_(KilnSelf_, m1), KILN_REFLECT_FIELD_(KilnSelf_, m2), KILN_REFLECT_FIELD_(KilnSelf_, m3), KILN_REFLECT_FIELD_(KilnSelf_, m4), KILN_REFLECT_FIELD_(KilnSelf_, m5), KILN_REFLECT_FIELD_(KilnSelf_, m6), KILN_REFLECT_FIELD_(KilnSelf_, m7), KILN_REFLECT_FIELD_(KilnSelf_, m8))
#define KILN_REFLECT_9(S, m1, m2, m3, m4, m5, m6, m7, m8, m9) \
  KILN_REFLECT_MEMBER_(m1) KILN_REFLECT_MEMBER_(m2) KILN_REFLECT_MEMBER_(m3) KILN_REFLECT_MEMBER_(m4) KILN_REFLECT_MEMBER_(m5) KILN_REFLECT_MEMBER_(m6) KILN_REFLECT_MEMBER_(m7) KILN_REFLECT_MEMBER_(m8) KILN_REFLECT_MEMBER_(m9) \
  KILN_REFLECT_ACCESSORS_(S, KILN_REFLECT_FIELD_(KilnSelf_, m1), KILN_REFLECT_FIELD_(KilnSelf_, m2), KILN_REFLECT_FIELD_(KilnSelf_, m3), KILN_REFLECT_FIELD_(KilnSelf_, m4), KILN_REFLECT_FIELD_(KilnSelf_, m5), KILN_REFLECT_FIELD_(KilnSelf_, m6), KILN_REFLECT_FIELD_(KilnSelf_, m7), KILN_REFLECT_FIELD_(KilnSelf_, m8), KILN_REFLECT_FIELD_(KilnSelf_, m9))
#define KILN_REFLECT_10(S, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10) \
  KILN_REFLECT_MEMBER_(m1) KILN_REFLECT_MEMBER_(m2) KILN_REFLECT_MEMBER_(m3) KILN_REFLECT_MEMBER_(m4) KILN_REFLECT_MEMBER_(m5) KILN_REFLECT_MEMBER_(m6) KILN_REFLECT_MEMBER_(m7) KILN_REFLECT_MEMBER_(m8) KILN_REFLECT_MEMBER_(m9) KILN_REFLECT_MEMBER_(m10) \
  KILN_REFLECT_ACCESSORS_(S, KILN_REFLECT_FIELD_(KilnSelf_, m1), KILN_REFLECT_FIELD_(KilnSelf_, m2), KILN_REFLECT_FIELD_(KilnSelf_, m3), KILN_REFLECT_FIELD_(KilnSelf_, m4), KILN_REFLECT_FIELD_(KilnSelf_, m5), KILN_REFLECT_FIELD_(KilnSelf_, m6), KILN_REFLECT_FIELD_(KilnSelf_, m7), KILN_REFLECT_FIELD_(KilnSelf_, m8), KILN_REFLECT_FIELD_(KilnSelf_, m9), KILN_REFLECT_FIELD_(KilnSelf_, m10))
#define KILN_REFLECT_11(S, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11) \
  KILN_REFLECT_MEMBER_(m1) KILN_REFLECT_MEMBER_(m2) KILN_REFLECT_MEMBER_(m3) KILN_REFLECT_MEMBER_(m4) KILN_REFLECT_MEMBER_(m5) KILN_REFLECT_MEMBER_(m6) KILN_REFLECT_MEMBER_(m7) KILN_REFLECT_MEMBER_(m8) KILN_REFLECT_MEMBER_(m9) KILN_REFLECT_MEMBER_(m10) KILN_REFLECT_MEMBER_(m11) \
  KILN_REFLECT_ACCESSORS_(S, KILN_REFLECT_FIELD_(KilnSelf_, m1), KILN_REFLECT_FIELD_(KilnSelf_, m2), KILN_REFLECT_FIELD_(KilnSelf_, m3), KILN_REFLECT_FIELD_(KilnSelf_, m4), KILN_REFLECT_FIELD_(KilnSelf_, m5), KILN_REFLECT_FIELD_(KilnSelf_, m6), KILN_REFLECT_FIELD_(KilnSelf_, m7), KILN_REFLECT_FIELD_(KilnSelf_, m8), KILN_REFLECT_FIELD_(KilnSelf_, m9), KILN_REFLECT_FIELD_(KilnSelf_, m10), KILN_REFLECT_FIELD_(KilnSelf_, m11))
#define KILN_REFLECT_12(S, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12) \
  KILN_REFLECT_MEMBER_(m1) KILN_REFLECT_MEMBER_(m2) KILN_REFLECT_MEMBER_(m3) KILN_REFLECT_MEMBER_(m4) KILN_REFLECT_MEMBER_(m5) KILN_REFLECT_MEMBER_(m6) KILN_REFLECT_MEMBER_(m7) KILN_REFLECT_MEMBER_(m8) KILN_REFLECT_MEMBER_(m9) KILN_REFLECT_MEMBER_(m10) KILN_REFLECT_MEMBER_(m11) KILN_REFLECT_MEMBER_(m12) \
  KILN_REFLECT_ACCESSORS_(S, KILN_REFLECT_FIELD_(KilnSelf_, m1), KILN_REFLECT_FIELD_(KilnSelf_, m2), KILN_REFLECT_FIELD_(KilnSelf_, m3), KILN_REFLECT_FIELD_(KilnSelf_, m4), KILN_REFLECT_FIELD_(KilnSelf_, m5), KILN_REFLECT_FIELD_(KilnSelf_, m6), KILN_REFLECT_FIELD_(KilnSelf_, m7), KILN_REFLECT_FIELD_(KilnSelf_, m8), KILN_REFLECT_FIELD_(KilnSelf_, m9), KILN_REFLECT_FIELD_(KilnSelf_, m10), KILN_REFLECT_FIELD_(KilnSelf_, m11), KILN_REFLECT_FIELD_(KilnSelf_, m12))
#define KILN_REFLECT_13(S, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12, m13) \
  KILN_REFLECT_MEMBER_(m1) KILN_REFLECT_MEMBER_(m2) KILN_REFLECT_MEMBER_(m3) KILN_REFLECT_MEMBER_(m4) KILN_REFLECT_MEMBER_(m5) KILN_REFLECT_MEMBER_(m6) KILN_REFLECT_MEMBER_(m7) KILN_REFLECT_MEMBER_(m8) KILN_REFLECT_MEMBER_(m9) KILN_REFLECT_MEMBER_(m10) KILN_REFLECT_MEMBER_(m11) KILN_REFLECT_MEMBER_(m12) KILN_REFLECT_MEMBER_(m13) \
  KILN_REFLECT_ACCESSORS_(S, KILN_REFLECT_FIELD_(KilnSelf_, m1), KILN_REFLECT_FIELD_(KilnSelf_, m2), KILN_REFLECT_FIELD_(KilnSelf_, m3), KILN_REFLECT_FIELD_(KilnSelf_, m4), KILN_REFLECT_FIELD_(KilnSelf_, m5), KILN_REFLECT_FIELD_(KilnSelf_, m6), KILN_REFLECT_FIELD_(KilnSelf_, m7), KILN_REFLECT_FIELD_(KilnSelf_, m8), KILN_REFLECT_FIELD_(KilnSelf_, m9), KILN_REFLECT_FIELD_(KilnSelf_, m10), KILN_REFLECT_FIELD_(KilnSelf_, m11), KILN_REFLECT_FIELD_(KilnSelf_, m12), KILN_REFLECT_FIELD_(KilnSelf_, m13))
#define KILN_REFLECT_14(S, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12, m13, m14) \
  KILN_REFLECT_MEMBER_(m1) KILN_REFLECT_MEMBER_(m2) KILN_REFLECT_MEMBER_(m3) KILN_REFLECT_MEMBER_(m4) KILN_REFLECT_MEMBER_(m5) KILN_REFLECT_MEMBER_(m6) KILN_REFLECT_MEMBER_(m7) KILN_REFLECT_MEMBER_(m8) KILN_REFLECT_MEMBER_(m9) KILN_REFLECT_MEMBER_(m10) KILN_REFLECT_MEMBER_(m11) KILN_REFLECT_MEMBER_(m12) KILN_REFLECT_MEMBER_(m13) KILN_REFLECT_MEMBER_(m14) \
  KILN_REFLECT_ACCESSORS_(S, KILN_REFLECT_FIELD_(KilnSelf_, m1), KILN_REFLECT_FIELD_(KilnSelf_, m2), KILN_REFLECT_FIELD_(KilnSelf_, m3), KILN_REFLECT_FIELD_(KilnSelf_, m4), KILN_REFLECT_FIELD_(KilnSelf_, m5), KILN_REFLECT_FIELD_(KilnSelf_, m6), KILN_REFLECT_FIELD_(KilnSelf_, m7), KILN_REFLECT_FIELD_(KilnSelf_, m8), KILN_REFLECT_FIELD_(KilnSelf_, m9), KILN_REFLECT_FIELD_(KilnSelf_, m10), KILN_REFLECT_FIELD_(KilnSelf_, m11), KILN_REFLECT_FIELD_(KilnSelf_, m12), KILN_REFLECT_FIELD_(KilnSelf_, m13), KILN_REFLECT_FIELD_(KilnSelf_, m14))
#define KILN_REFLECT_15(S, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12, m13, m14, m15) \
  KILN_REFLECT_MEMBER_(m1) KILN_REFLECT_MEMBER_(m2) KILN_REFLECT_MEMBER_(m3) KILN_REFLECT_MEMBER_(m4) KILN_REFLECT_MEMBER_(m5) KILN_REFLECT_MEMBER_(m6) KILN_REFLECT_MEMBER_(m7) KILN_REFLECT_MEMBER_(m8) KILN_REFLECT_MEMBER_(m9) KILN_REFLECT_MEMBER_(m10) KILN_REFLECT_MEMBER_(m11) KILN_REFLECT_MEMBER_(m12) KILN_REFLECT_MEMBER_(m13) KILN_REFLECT_MEMBER_(m14) KILN_REFLECT_MEMBER_(m15) \
  KILN_REFLECT_ACCESSORS_(S, KILN_REFLECT_FIELD_(KilnSelf_, m1), KILN_REFLECT_FIELD_(KilnSelf_, m2), KILN_REFLECT_FIELD_(KilnSelf_, m3), KILN_REFLECT_FIELD_(KilnSelf_, m4), KILN_REFLECT_FIELD_(KilnSelf_, m5), KILN_REFLECT_FIELD_(KilnSelf_, m6), KILN_REFLECT_FIELD_(KilnSelf_, m7), KILN_REFLECT_FIELD_(KilnSelf_, m8), KILN_REFLECT_FIELD_(KilnSelf_, m9), KILN_REFLECT_FIELD_(KilnSelf_, m10), KILN_REFLECT_FIELD_(KilnSelf_, m11), KILN_REFLECT_FIELD_(KilnSelf_, m12), KILN_REFLECT_FIELD_(KilnSelf_, m13), KILN_REFLECT_FIELD_(KilnSelf_, m14), KILN_REFLECT_FIELD_(KilnSelf_, m15))
#define KILN_REFLECT_16(S, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12, m13, m14, m15, m16) \
  KILN_REFLECT_MEMBER_(m1) KILN_REFLECT_MEMBER_(m2) KILN_REFLECT_MEMBER_(m3) KILN_REFLECT_MEMBER_(m4) KILN_REFLECT_MEMBER_(m5) KILN_REFLECT_MEMBER_(m6) KILN_REFLECT_MEMBER_(m7) KILN_REFLECT_MEMBER_(m8) KILN_REFLECT_MEMBER_(m9) KILN_REFLECT_MEMBER_(m10) KILN_REFLECT_MEMBER_(m11) KILN_REFLECT_MEMBER_(m12) KILN_REFLECT_MEMBER_(m13) KILN_REFLECT_MEMBER_(m14) KILN_REFLECT_MEMBER_(m15) KILN_REFLECT_MEMBER_(m16) \
  KILN_REFLECT_ACCESSORS_(S, KILN_REFLECT_FIELD_(KilnSelf_, m1), KILN_REFLECT_FIELD_(KilnSelf_, m2), KILN_REFLECT_FIELD_(KilnSelf_, m3), KILN_REFLECT_FIELD_(KilnSelf_, m4), KILN_REFLECT_FIELD_(KilnSelf_, m5), KILN_REFLECT_FIELD_(KilnSelf_, m6), KILN_REFLECT_FIELD_(KilnSelf_, m7), KILN_REFLECT_FIELD_(KilnSelf_, m8), KILN_REFLECT_FIELD_(KilnSelf_, m9), KILN_REFLECT_FIELD_(KilnSelf_, m10), KILN_REFLECT_FIELD_(KilnSelf_, m11), KILN_REFLECT_FIELD_(KilnSelf_, m12), KILN_REFLECT_FIELD_(KilnSelf_, m13), KILN_REFLECT_FIELD_(KilnSelf_, m14), KILN_REFLECT_FIELD_(KilnSelf_, m15), KILN_REFLECT_FIELD_(KilnSelf_, m16))

// An op's attributes: declares `struct Attributes` with these fields.
#define KILN_ATTRIBUTES(...)              \
  struct Attributes {                     \
    KILN_REFLECT(Attributes, __VA_ARGS__); \
  }

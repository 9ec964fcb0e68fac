// TypeId: a unique, comparable id per C++ type, without RTTI.
#include "kiln/support/type_id.h"

#include <compare>
#include <map>
#include <set>
#include <unordered_set>

#include "catch.hpp"

using kiln::TypeId;

namespace {
struct OpA {};
struct OpB {};
template <typename T> struct Wrapper {};
}  // namespace

TEST_CASE("the same type always gets the same id", "[support][type_id]") {
  CHECK(TypeId::get<int>() == TypeId::get<int>());
  CHECK(TypeId::get<OpA>() == TypeId::get<OpA>());
  CHECK(TypeId::get<Wrapper<OpA>>() == TypeId::get<Wrapper<OpA>>());
  CHECK(TypeId::get<OpA>().as_opaque_pointer() == TypeId::get<OpA>().as_opaque_pointer());
}

TEST_CASE("different types get different ids", "[support][type_id]") {
  std::set<const void*> ids = {
      TypeId::get<int>().as_opaque_pointer(),          TypeId::get<float>().as_opaque_pointer(),
      TypeId::get<OpA>().as_opaque_pointer(),          TypeId::get<OpB>().as_opaque_pointer(),
      TypeId::get<Wrapper<OpA>>().as_opaque_pointer(), TypeId::get<Wrapper<OpB>>().as_opaque_pointer(),
      TypeId::get<unsigned>().as_opaque_pointer(),     TypeId::get<int*>().as_opaque_pointer(),
  };
  CHECK(ids.size() == 8);
  CHECK(TypeId::get<OpA>() != TypeId::get<OpB>());
}

TEST_CASE("a default TypeId is empty and a real one is not", "[support][type_id]") {
  TypeId none;
  CHECK_FALSE(static_cast<bool>(none));
  CHECK(none.as_opaque_pointer() == nullptr);
  CHECK(static_cast<bool>(TypeId::get<OpA>()));
  CHECK(none != TypeId::get<OpA>());
  CHECK(none == TypeId());
}

TEST_CASE("type ids are totally ordered, so sorted id arrays can be binary searched",
          "[support][type_id]") {
  TypeId a = TypeId::get<OpA>(), b = TypeId::get<OpB>();
  CHECK(((a < b) != (b < a)));
  CHECK_FALSE(a < a);
  CHECK(std::is_eq(a <=> a));
  std::map<TypeId, int> by_id{{a, 1}, {b, 2}};
  CHECK(by_id.at(TypeId::get<OpA>()) == 1);
  CHECK(by_id.at(TypeId::get<OpB>()) == 2);
}

TEST_CASE("type ids can key a hash set", "[support][type_id]") {
  std::unordered_set<TypeId> set{TypeId::get<OpA>(), TypeId::get<OpB>(), TypeId::get<OpA>()};
  CHECK(set.size() == 2);
  CHECK(set.count(TypeId::get<OpB>()) == 1);
  CHECK(set.count(TypeId::get<int>()) == 0);
}

// xxh64 (XXH64 via libxxhash) and hash_combine.
#include "kiln/support/hash.h"

#include <string>
#include <string_view>

#include "catch.hpp"

TEST_CASE("xxh64 gives the reference XXH64 values", "[support][hash]") {
  CHECK(kiln::xxh64("") == 0xEF46DB3751D8E999ULL);
  CHECK(kiln::xxh64("abc") == 0x44BC2CF5AD770999ULL);
}

TEST_CASE("xxh64 of bytes and of the same string_view agree", "[support][hash]") {
  std::string s = "kiln.matmul(%0, %1)";
  CHECK(kiln::xxh64(s.data(), s.size()) == kiln::xxh64(std::string_view(s)));
  CHECK(kiln::xxh64(s.data(), s.size(), 42) == kiln::xxh64(s, 42));
}

TEST_CASE("xxh64 depends on every byte and on the seed", "[support][hash]") {
  CHECK(kiln::xxh64("abc") != kiln::xxh64("abd"));
  CHECK(kiln::xxh64("abc") != kiln::xxh64("ab"));
  CHECK(kiln::xxh64("abc", 0) != kiln::xxh64("abc", 1));
  // Embedded NULs are part of the content.
  CHECK(kiln::xxh64(std::string_view("a\0b", 3)) != kiln::xxh64(std::string_view("a\0c", 3)));
}

TEST_CASE("hash_combine depends on the order of what it combines", "[support][hash]") {
  std::size_t ab = kiln::hash_combine(kiln::hash_combine(0, 1), 2);
  std::size_t ba = kiln::hash_combine(kiln::hash_combine(0, 2), 1);
  CHECK(ab != ba);
  CHECK(kiln::hash_combine(7, 9) == kiln::hash_combine(7, 9));
  CHECK(kiln::hash_combine(0, 0) != 0);
}

#include "kiln/runtime/task.h"

#include <array>
#include <memory>

#include "catch.hpp"

TEST_CASE("a task runs a small lambda stored inline", "[runtime][task]") {
  int hits = 0;
  kiln::Task t([&] { ++hits; });
  REQUIRE(t);
  t();
  t();
  CHECK(hits == 2);
}

TEST_CASE("a task holds move-only and large captures", "[runtime][task]") {
  auto p = std::make_unique<int>(41);
  std::array<char, 256> big{};
  big[255] = 1;
  int seen = 0;
  kiln::Task t([p = std::move(p), big, &seen] { seen = *p + big[255]; });
  kiln::Task moved = std::move(t);
  CHECK_FALSE(t);
  moved();
  CHECK(seen == 42);
}

TEST_CASE("resetting or destroying a task destroys its captures", "[runtime][task]") {
  auto shared = std::make_shared<int>(0);
  kiln::Task t([shared] {});
  CHECK(shared.use_count() == 2);
  kiln::Task u;
  u = std::move(t);
  CHECK(shared.use_count() == 2);
  u.reset();
  CHECK(shared.use_count() == 1);
  CHECK_FALSE(u);
}

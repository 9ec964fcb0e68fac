// Helpers for the frontend tests: the error check, tensors from vectors, and
// a fresh (main, startup) pair built under a ProgramGuard with deterministic
// unique names.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "catch.hpp"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/executor.h"
#include "kiln/frontend/frontend.h"

namespace kiln_frontend_test {

// Runs `f`; it must throw kiln::Error of `kind` whose message contains each
// of `parts`. Returns the message.
inline std::string expect_error(const std::function<void()>& f, kiln::ErrorKind kind,
                                const std::vector<std::string>& parts = {}) {
  try {
    f();
  } catch (const kiln::Error& e) {
    INFO("message: " << e.message());
    CHECK(kiln::to_string(e.kind()) == kiln::to_string(kind));
    for (const auto& p : parts) CHECK_THAT(e.message(), Catch::Contains(p));
    return e.message();
  }
  FAIL_CHECK("no kiln::Error was thrown");
  return {};
}

inline kiln::Tensor f32(const std::vector<std::int64_t>& dims, const std::vector<float>& v) {
  return kiln::Tensor::from_vector<float>(kiln::Dims(dims), v);
}

// The ops of a program's top block by name, in order.
inline std::vector<std::string> op_names(const kiln::Program& p) {
  std::vector<std::string> out;
  for (kiln::Operation* op : p.block()) out.push_back(op->name());
  return out;
}

inline std::size_t count_ops(const kiln::Program& p, std::string_view name) {
  std::size_t n = 0;
  for (kiln::Operation* op : p.block()) n += op->name() == name;
  return n;
}

}  // namespace kiln_frontend_test

// FRONTEND_CHECK_ERROR(kiln::data("", {1}), InvalidArgument, {"name"});
#define FRONTEND_CHECK_ERROR(expr, kind, ...) \
  ::kiln_frontend_test::expect_error([&] { (void)(expr); }, ::kiln::ErrorKind::kind, ##__VA_ARGS__)

// Helpers every test layer shares. expect_error: the check behind each
// "bad input gets a clear kiln::Error" test case.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "catch.hpp"
#include "kiln/support/error.h"
#include "kiln/support/warning.h"

namespace kiln_test {

// The warnings kiln reports while one of these lives (the previous handler
// is put back after).
struct CapturedWarnings {
  CapturedWarnings() {
    previous = kiln::set_warning_handler([this](std::string_view m) { seen.emplace_back(m); });
  }
  ~CapturedWarnings() { kiln::set_warning_handler(previous); }
  CapturedWarnings(const CapturedWarnings&) = delete;
  CapturedWarnings& operator=(const CapturedWarnings&) = delete;
  std::vector<std::string> seen;
  kiln::WarningHandler previous;
};

// Runs `f`; it must throw kiln::Error of `kind` whose message contains each of
// `parts`. Returns the message (empty when the check failed). `where` (the
// call site, from KILN_CHECK_ERROR) is shown with any failure.
inline std::string expect_error(const std::function<void()>& f, kiln::ErrorKind kind,
                                const std::vector<std::string>& parts = {},
                                const std::string& where = {}) {
  INFO(where);
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

}  // namespace kiln_test

// CHECK-style (the test goes on); an expression giving the message:
//   KILN_CHECK_ERROR(exe.run(p), NotFound, {"'x'"});
#define KILN_CHECK_ERROR(expr, kind, ...)                                           \
  ::kiln_test::expect_error([&] { (void)(expr); }, ::kiln::ErrorKind::kind,           \
                            std::vector<std::string>(__VA_ARGS__),                    \
                            std::string("KILN_CHECK_ERROR(" #expr ", " #kind ") at ") + \
                                __FILE__ + ":" + std::to_string(__LINE__))

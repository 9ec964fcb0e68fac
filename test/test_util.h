// Helpers every test layer shares. expect_error: the check behind each
// "bad input gets a clear kiln::Error" test case.
#pragma once

#include <cstring>
#include <functional>
#include <future>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "catch.hpp"
#include "kiln/ir/block.h"
#include "kiln/ir/program.h"
#include "kiln/runtime/tensor.h"
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

// Ops named `name` in the program's top block (nested blocks not counted).
inline std::size_t count_top_ops(const kiln::Program& p, std::string_view name) {
  std::size_t n = 0;
  for (kiln::Operation* op : p.block()) n += op->name() == name;
  return n;
}

// Whether two tensors hold the same dims, dtype and bytes.
inline bool same_bits(const kiln::Tensor& a, const kiln::Tensor& b) {
  return a.dims() == b.dims() && a.dtype() == b.dtype() && a.bytes() == b.bytes() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.bytes()) == 0;
}

// An f32 tensor of `dims` holding scale · ((i · 37 + seed) mod 23 − 11) at
// flat index i: small integers times a scale, exact in f32, no two
// neighbours alike.
inline kiln::Tensor pattern_f32(const std::vector<std::int64_t>& dims, float scale, int seed) {
  std::vector<float> v(static_cast<std::size_t>(kiln::Dims(dims).numel()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = scale * float(int((i * 37 + seed) % 23) - 11);
  return kiln::Tensor::from_vector<float>(kiln::Dims(dims), v);
}

// A one-shot barrier: threads wait() until a test open()s it.
struct Gate {
  std::promise<void> promise;
  std::shared_future<void> future = promise.get_future().share();
  void open() { promise.set_value(); }
  void wait() const { future.wait(); }
};

// The kiln::Error `f` throws; fails the test case when it throws none.
template <typename F>
kiln::Error error_of(F&& f) {
  try {
    f();
  } catch (const kiln::Error& e) {
    return e;
  }
  FAIL("expected a kiln::Error");
  throw std::logic_error("unreachable");
}

}  // namespace kiln_test

// CHECK-style (the test goes on); an expression giving the message:
//   KILN_CHECK_ERROR(exe.run(p), NotFound, {"'x'"});
#define KILN_CHECK_ERROR(expr, kind, ...)                                           \
  ::kiln_test::expect_error([&] { (void)(expr); }, ::kiln::ErrorKind::kind,           \
                            std::vector<std::string>(__VA_ARGS__),                    \
                            std::string("KILN_CHECK_ERROR(" #expr ", " #kind ") at ") + \
                                __FILE__ + ":" + std::to_string(__LINE__))

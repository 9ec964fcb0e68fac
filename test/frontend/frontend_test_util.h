// Helpers for the frontend tests: the error check, tensors from vectors, and
// a fresh (main, startup) pair built under a ProgramGuard with deterministic
// unique names.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "catch.hpp"
#include "test_util.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/executor.h"
#include "kiln/frontend/frontend.h"

namespace kiln_frontend_test {

using kiln_test::expect_error;  // test/test_util.h

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


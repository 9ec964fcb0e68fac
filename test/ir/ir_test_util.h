// Helpers shared by the IR tests: generic test ops (any operands/results,
// one region) built straight with Operation::create, and a check that a call
// throws kiln::Error of a given kind with a message containing some text.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "catch.hpp"
#include "test_util.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/ir/block.h"
#include "kiln/ir/op.h"
#include "kiln/ir/program.h"
#include "kiln/ir/region.h"

namespace kiln_test {

// An op with no traits or interfaces and any number of operands and results.
struct AnyOp : kiln::Op<AnyOp> {
  using Op::Op;
  static constexpr std::string_view name = "test.any";
};

// An op with one region (a body), any operands and results.
struct RegionOp : kiln::Op<RegionOp> {
  using Op::Op;
  static constexpr std::string_view name = "test.region";
  static constexpr int num_regions = 1;
};

inline kiln::Type f32() { return kiln::Float32Type::get(); }
inline kiln::Type t23() { return kiln::TensorType::get(kiln::DataType::Float32, {2, 3}); }

// A detached test.any op.
inline kiln::Operation* make_any(const std::vector<kiln::Value>& operands,
                                 const std::vector<kiln::Type>& results,
                                 kiln::DictionaryAttribute attrs = {}) {
  return kiln::Operation::create(operands, results, attrs,
                                 kiln::IrContext::instance()->op_info<AnyOp>());
}

// A test.any op appended to `block`.
inline kiln::Operation* add_any(kiln::Block& block, const std::vector<kiln::Value>& operands,
                                const std::vector<kiln::Type>& results,
                                kiln::DictionaryAttribute attrs = {}) {
  kiln::Operation* op = make_any(operands, results, attrs);
  block.push_back(op);
  return op;
}

// A test.region op (its region empty) appended to `block`.
inline kiln::Operation* add_region_op(kiln::Block& block, const std::vector<kiln::Value>& operands,
                                      const std::vector<kiln::Type>& results) {
  kiln::Operation* op = kiln::Operation::create(
      operands, results, {}, kiln::IrContext::instance()->op_info<RegionOp>(), 1);
  block.push_back(op);
  return op;
}


}  // namespace kiln_test


// A seeded generator of random, valid kiln Programs for the JSON round-trip
// tests and the fuzz corpus: every op of the first op set, program
// parameters, constants with every builtin attribute kind (NaN, infinities,
// odd strings, nested arrays and dicts, vector<…> types), and a test op with
// a region whose blocks take arguments. Same seed ⇒ same program.
#pragma once

#include <cstdint>

#include "kiln/dialect/kiln_dialect.h"

namespace kiln::test {

// "iotest.scope": variadic operands and results, one region. Its blocks may
// take arguments and use values of enclosing blocks; values defined inside
// are not visible after it. Results may exceed six (stored out of line).
struct ScopeOp : Op<ScopeOp> {
  using Op::Op;
  static constexpr std::string_view name = "iotest.scope";
  static constexpr int num_regions = 1;
  static void build(Builder& b, OperationArgument& arg, const std::vector<Value>& operands,
                    const std::vector<Type>& result_types);
};

struct RandomProgramOptions {
  int max_ops = 24;        // per block
  int max_region_depth = 2;
  int max_attribute_depth = 3;
};

// A random program, verified. Deterministic in `seed`.
Program random_program(std::uint64_t seed, const RandomProgramOptions& options = {});

}  // namespace kiln::test

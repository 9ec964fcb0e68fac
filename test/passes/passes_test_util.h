// Helpers of the pass tests: op counts (nested ones included), running one
// pipeline with live-out values, f32 tensor types.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "catch.hpp"
#include "test_util.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/ir/builder.h"
#include "kiln/passes/pass_manager.h"

namespace kiln_passes_test {

// Ops named `name` in the program, nested ones included.
inline std::size_t count_ops(const kiln::Program& p, std::string_view name) {
  std::size_t n = 0;
  for (kiln::Block* b : kiln::blocks_innermost_first(p))
    for (kiln::Operation* op : *b) n += op->name() == name;
  return n;
}

// Runs `pipeline` on `p` with `live_out` protected; returns the live-out
// values as they stand after.
inline std::vector<kiln::Value> run_pipeline(kiln::Program& p, std::string_view pipeline,
                                             const std::vector<kiln::Value>& live_out = {}) {
  kiln::PassContext ctx(live_out);
  kiln::PassManager::parse(pipeline).run(p, ctx);
  return ctx.live_out();
}

inline kiln::Type f32(std::vector<std::int64_t> dims) {
  return kiln::TensorType::get(kiln::DataType::Float32, std::move(dims));
}

}  // namespace kiln_passes_test

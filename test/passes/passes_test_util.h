// Helpers of the pass tests: op counts (nested ones included), running one
// pipeline with live-out values, f32 tensor types, and a program's fetches
// compared bit for bit with and without a pipeline.
#pragma once

#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "catch.hpp"
#include "test_util.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/executor.h"
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

using kiln_test::same_bits;

// Executor options running exactly `passes` (a comma-separated pipeline).
inline kiln::ExecutionOptions with_passes(const char* passes) {
  kiln::ExecutionOptions o;
  o.passes = passes;
  return o;
}

// A feed "x" of six f32 values, both zeros among them.
inline const kiln::FeedMap& six_values_feed() {
  static const kiln::FeedMap feed{
      {"x", kiln::Tensor::from_vector<float>({6}, {-1.5f, -0.f, 0.f, 0.25f, 2.f, -3.f})}};
  return feed;
}

// The fetches of `p` (fed six_values_feed()) run as written and with
// `pipeline` (twice): equal bit for bit.
inline void check_same_results(const kiln::Program& p, const std::vector<kiln::Value>& values,
                               const char* pipeline) {
  const std::vector<kiln::FetchTarget> fetch(values.begin(), values.end());
  kiln::Executor as_written(kiln::Place::cpu(), {.passes = ""});
  kiln::Executor with(kiln::Place::cpu(), {.passes = pipeline});
  auto want = as_written.run(p, six_values_feed(), fetch);
  for (int run = 0; run < 2; ++run) {
    auto got = with.run(p, six_values_feed(), fetch);
    for (std::size_t k = 0; k < fetch.size(); ++k) CHECK(same_bits(got[k], want[k]));
  }
}

}  // namespace kiln_passes_test

// Control-flow programs run both ways: as built (kiln.if / kiln.while run by
// the control-flow runner) and lowered to dataflow ops (the
// "lower_to_dataflow" pass, run by the frame propagator). Each run of a
// BothWays checks that the lowered runs give bit-identical results (same
// dtype, dims and bytes) or fail with the same error kind, and hands back
// the structured run's results (or rethrows its error), so a test written
// against an Executor checks both forms by changing one declaration.
#pragma once

#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "catch.hpp"
#include "kiln/exec/executor.h"
#include "kiln/exec/interpreter_core.h"
#include "kiln/ir/program.h"
#include "kiln/passes/lower_to_dataflow.h"
#include "kiln/support/error.h"

namespace kiln_test {

// Whether `program`'s top block holds an op with regions (kiln.if, kiln.while).
inline bool has_structured_control_flow(const kiln::Program& program) {
  for (const kiln::Operation* op : program.block())
    if (op->num_regions()) return true;
  return false;
}

// Whether two fetched tensors are the same bit for bit.
inline bool bit_identical(const kiln::Tensor& a, const kiln::Tensor& b) {
  if (a.is_initialized() != b.is_initialized()) return false;
  if (!a.is_initialized()) return true;
  if (a.dtype() != b.dtype() || !(a.dims() == b.dims()) || a.bytes() != b.bytes()) return false;
  return a.bytes() == 0 || std::memcmp(a.raw_data(), b.raw_data(), a.bytes()) == 0;
}

// The pipeline `passes` without auto_lower_to_dataflow (structured runs
// stay structured at any thread count).
inline std::string without_auto_lowering(std::string passes) {
  for (const std::string name : {"auto_lower_to_dataflow,", ",auto_lower_to_dataflow", "auto_lower_to_dataflow"})
    if (auto at = passes.find(name); at != std::string::npos) {
      passes.erase(at, name.size());
      break;
    }
  return passes;
}

// The pipeline `passes` with lower_to_dataflow run first (it sees the
// program as built; the other passes then see the lowered ops).
inline std::string with_lowering(const std::string& passes) {
  const std::string rest = without_auto_lowering(passes);
  return rest.empty() ? std::string("lower_to_dataflow") : "lower_to_dataflow," + rest;
}

inline kiln::ExecutionOptions structured_options(kiln::ExecutionOptions o) {
  o.passes = without_auto_lowering(o.passes);
  return o;
}

class BothWays {
 public:
  // The lowered runs use `options` with the lowering added to its passes,
  // and, when `options` asks for another thread count than 2, once more at
  // 2 threads (iterations overlap there).
  explicit BothWays(kiln::Place place = kiln::Place::cpu(), kiln::ExecutionOptions options = {})
      : structured_(place, structured_options(options)) {
    kiln::ExecutionOptions lowered = options;
    lowered.passes = with_lowering(options.passes);
    lowered_.push_back(std::make_unique<kiln::Executor>(place, lowered));
    if (options.num_threads != 2) {
      lowered.num_threads = 2;
      lowered_.push_back(std::make_unique<kiln::Executor>(place, lowered));
    }
  }

  // Runs `program` structured, then lowered (each lowered executor's scope
  // first gets a copy of the structured scope's tensors, so parameters and
  // state written by earlier runs agree); checks the results agree and
  // that the lowered executor lowered exactly the programs the pass can
  // lower (a program it cannot lower runs structured there too).
  std::vector<kiln::Tensor> run(const kiln::Program& program, const kiln::FeedMap& feed = {},
                                const std::vector<kiln::FetchTarget>& fetch = {}) {
    const bool lowers = kiln::can_lower_to_dataflow(program);
    if (lowers) ++lowered_runs_;
    else if (has_structured_control_flow(program)) ++kept_structured_runs_;
    std::vector<std::pair<std::string, kiln::Tensor>> state;
    for (const std::string& name : structured_.scope().local_var_names()) {
      const kiln::Variable* v = structured_.scope().find_var(name);
      if (v && v->is<kiln::Tensor>() && v->get<kiln::Tensor>().is_initialized())
        state.emplace_back(name, v->get<kiln::Tensor>().clone());
    }
    std::vector<kiln::Tensor> want;
    std::exception_ptr want_error;
    std::optional<kiln::ErrorKind> want_kind;
    try {
      want = structured_.run(program, feed, fetch);
    } catch (const kiln::Error& e) {
      want_error = std::current_exception();
      want_kind = e.kind();
    }
    if (!has_structured_control_flow(program)) {  // nothing to lower: one run is enough
      if (want_error) std::rethrow_exception(want_error);
      return want;
    }
    for (std::size_t e = 0; e < lowered_.size(); ++e) {
      kiln::Executor& exe = *lowered_[e];
      INFO("lowered run at " << exe.options().num_threads << " thread(s); program "
                             << (lowers ? "lowered" : "kept structured by the pass"));
      for (auto& [name, t] : state) exe.scope().var(name).set(t.clone());
      std::vector<kiln::Tensor> got;
      try {
        got = exe.run(program, feed, fetch);
      } catch (const kiln::Error& err) {
        INFO("lowered error: " << err.message());
        if (!want_kind) FAIL_CHECK("the lowered run failed, the structured one did not");
        else CHECK(kiln::to_string(err.kind()) == kiln::to_string(*want_kind));
        continue;
      }
      if (want_kind) {
        FAIL_CHECK("the structured run failed, the lowered one did not");
        continue;
      }
      // The lowered executor's plan holds frames exactly when the pass lowered.
      if (exe.last_core()) CHECK((exe.last_core()->plan().frames != nullptr) == lowers);
      REQUIRE(got.size() == want.size());
      for (std::size_t k = 0; k < want.size(); ++k) {
        INFO("fetch #" << k << ": structured " << want[k].to_string() << ", lowered "
                       << got[k].to_string());
        CHECK(bit_identical(got[k], want[k]));
      }
    }
    if (want_error) std::rethrow_exception(want_error);
    return want;
  }

  kiln::Executor& structured() { return structured_; }
  kiln::Scope& scope() { return structured_.scope(); }
  kiln::InterpreterCore* last_core() const { return structured_.last_core(); }
  // Runs of programs the pass lowered, and of programs with structured
  // control flow it left as they were.
  std::size_t lowered_runs() const { return lowered_runs_; }
  std::size_t kept_structured_runs() const { return kept_structured_runs_; }

 private:
  kiln::Executor structured_;
  std::vector<std::unique_ptr<kiln::Executor>> lowered_;
  std::size_t lowered_runs_ = 0, kept_structured_runs_ = 0;
};

}  // namespace kiln_test

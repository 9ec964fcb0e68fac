// Scheduling stress: ≥ 10⁴ random DAG programs — add, mul,
// relu, in-place relu_, full, uniform_random (fixed seeds and the
// process-wide generator), data ops — run at 1, 2 and 4 threads; every
// fetched value must be bit-identical to sequential mode, and stay so after
// later runs (a fetched tensor must not change under the caller).
//
// Program count: 10⁴ by default; 1000 under ThreadSanitizer (the TSan build
// runs every [exec] test, this one included, ~20× slower); the environment
// variable KILN_EXEC_STRESS_PROGRAMS overrides both.
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "exec/exec_test_util.h"
#include "exec/random_program.h"
#include "kiln/kernel/random.h"

using namespace kiln;
using namespace kiln_exec_test;

namespace {

#if defined(__SANITIZE_THREAD__)
constexpr int kDefaultPrograms = 1000;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr int kDefaultPrograms = 1000;
#else
constexpr int kDefaultPrograms = 10000;
#endif
#else
constexpr int kDefaultPrograms = 10000;
#endif

int program_count() {
  if (const char* env = std::getenv("KILN_EXEC_STRESS_PROGRAMS")) {
    int n = std::atoi(env);
    if (n > 0) return n;
  }
  return kDefaultPrograms;
}

std::vector<Tensor> run_once(InterpreterCore& core, const RandomProgram& rp) {
  set_random_seed(0x5eed);
  return core.run(rp.feeds);
}

}  // namespace

TEST_CASE("stress: random DAG programs at 1, 2 and 4 threads are bit-identical to sequential",
          "[exec][stress]") {
  const int programs = program_count();
  auto q2 = std::make_shared<WorkQueue>(1);
  auto q4 = std::make_shared<WorkQueue>(3);
  Scope scope;
  int checked = 0;
  for (int n = 0; n < programs; ++n) {
    RandomProgram rp;
    make_program(rp, static_cast<std::uint32_t>(n) * 7919u + 17u);
    INFO("program " << n << "\n" << rp.text);
    ExecutionOptions seq;
    seq.thread_plan = ThreadPlan::Sequential;
    seq.num_threads = 1;
    InterpreterCore ref_core(rp.program, scope, rp.feed_names, rp.fetch, seq);
    const auto first = run_once(ref_core, rp);
    REQUIRE(first.size() == rp.fetch.size());
    std::vector<Tensor> ref;  // deep copies: the reference must not move either
    for (const auto& t : first) ref.push_back(t.clone());
    // Held across the later runs: must not change under us.
    std::vector<std::vector<Tensor>> held;
    for (unsigned threads : {1u, 2u, 4u}) {
      ExecutionOptions cfg;
      cfg.num_threads = threads;
      // The pool forced: Auto could settle on program order for tiny ops.
      if (threads > 1) cfg.thread_plan = ThreadPlan::Graph;
      auto q = threads == 2 ? q2 : threads == 4 ? q4 : nullptr;
      InterpreterCore core(rp.program, scope, rp.feed_names, rp.fetch, cfg, q);
      for (int run = 0; run < 2; ++run) {
        auto got = run_once(core, rp);
        REQUIRE(got.size() == ref.size());
        for (std::size_t k = 0; k < ref.size(); ++k) {
          if (!same_bits(got[k], ref[k])) {
            INFO("program " << n << " threads " << threads << " run " << run << " fetch " << k << "\n"
                            << rp.text << "\nwant " << ref[k].to_string() << "\ngot " << got[k].to_string());
            FAIL("fetched value differs from sequential mode");
          }
        }
        held.push_back(std::move(got));
      }
    }
    // The sequential core again, after the others ran: same values, and the
    // tensors fetched earlier are unchanged.
    const auto again = run_once(ref_core, rp);
    for (std::size_t k = 0; k < ref.size(); ++k) REQUIRE(same_bits(again[k], ref[k]));
    held.push_back(first);
    for (const auto& h : held)
      for (std::size_t k = 0; k < ref.size(); ++k) {
        if (!same_bits(h[k], ref[k])) {
          INFO("program " << n << " fetch " << k << "\n" << rp.text);
          FAIL("a fetched tensor changed after later runs");
        }
      }
    ++checked;
  }
  CHECK(checked == programs);
}

// CostModel: measured kernel costs decide which ready ops run inline on the
// thread that readied them and which go to the pool (seed 003's expensive /
// inexpensive nodes).
#include <chrono>
#include <limits>
#include <memory>
#include <thread>

#include "exec/exec_test_util.h"

using namespace kiln;
using namespace kiln_exec_test;

TEST_CASE("calibration keeps a kernel's fastest time; later samples move an average", "[exec][cost]") {
  CostModel costs(2);
  CHECK(costs.estimate_ns(0) == std::numeric_limits<std::int64_t>::max());
  CHECK_FALSE(costs.expensive(0));
  REQUIRE(costs.calibrating());
  costs.record(0, 9000);  // a cold first run
  costs.record(0, 1000);
  CHECK(costs.estimate_ns(0) == 1000);
  CHECK_FALSE(costs.expensive(0));
  for (int k = 0; k < CostModel::kCalibrationRuns; ++k) costs.run_measured();
  CHECK_FALSE(costs.calibrating());
  costs.record(0, 9000);  // 1000 + (9000 - 1000) / 8
  CHECK(costs.estimate_ns(0) == 2000);
  CHECK_FALSE(costs.expensive(0));
  costs.record(0, 9000);
  CHECK(costs.estimate_ns(0) == 2875);
  CHECK(costs.expensive(0));
  for (int k = 0; k < 40; ++k) costs.record(0, 100);  // the op got cheap again
  CHECK_FALSE(costs.expensive(0));
  CHECK(costs.estimate_ns(1) == std::numeric_limits<std::int64_t>::max());  // untouched
}

TEST_CASE("after calibration one run in kSampleEvery is measured", "[exec][cost]") {
  CostModel costs(1);
  CHECK(costs.should_measure(5));  // calibrating
  for (int k = 0; k < CostModel::kCalibrationRuns; ++k) costs.run_measured();
  int measured = 0;
  for (std::uint64_t r = 0; r < 10 * CostModel::kSampleEvery; ++r) measured += costs.should_measure(r);
  CHECK(measured == 10);
}

namespace {

// x → slow (3 ms) and x → wait (a copy of four floats), fetching both;
// passes off, so instruction 1 stays the slow op (fold would make x a
// constant) and 2 the cheap one.
struct SlowAndCheap {
  Program p;
  Value slow, wait;
  Scope scope;
  SlowAndCheap() {
    Builder b(p);
    auto x = b.create<FullOp>(std::vector<std::int64_t>{4}, 1.0);
    slow = b.create<SlowOp>(x.result(), 3000).result();
    wait = b.create<WaitSlowOp>(x.result()).result();
  }
  std::unique_ptr<InterpreterCore> core() {
    ExecutionOptions o;
    o.num_threads = 2;
    o.thread_plan = ThreadPlan::Graph;
    o.passes = "";
    return std::make_unique<InterpreterCore>(p, scope, std::vector<std::string>{},
                                             std::vector<FetchTarget>{wait, slow}, o,
                                             std::make_shared<WorkQueue>(1));
  }
  // Runs core through its calibration with wait_slow's switch off (it
  // would wait for the slow kernel), leaving the switch on.
  static void calibrate(InterpreterCore& core) {
    wait_slow_enabled().store(false);
    for (int run = 0; run < CostModel::kCalibrationRuns; ++run) core.run();
    wait_slow_enabled().store(true);
  }
};

}  // namespace

// Timing: tagged [timing], which the ThreadSanitizer stage leaves out (there
// the four-float copy's allocation alone can take longer than kExpensiveNs).
TEST_CASE("calibration judges a 3 ms kernel expensive and a copy of four floats cheap",
          "[exec][cost][timing]") {
  // Calibration keeps each kernel's fastest of kCalibrationRuns runs; on a
  // loaded VM even the cheap kernel's fastest run can exceed kExpensiveNs
  // for spells of a second or more. A fresh core measures again (up to 20
  // tries, spaced by a growing pause that outlasts such a spell): a cost
  // model that misjudges the two kernels every time still fails.
  SlowAndCheap g;
  std::unique_ptr<InterpreterCore> core;
  for (int attempt = 0; attempt < 20; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(25 * attempt));
    core = g.core();
    SlowAndCheap::calibrate(*core);
    if (core->cost_model().expensive(1) && !core->cost_model().expensive(2)) break;
  }
  REQUIRE(core->instruction(1).op_name == "exec_test.slow");
  CHECK(core->cost_model().expensive(1));
  CHECK_FALSE(core->cost_model().expensive(2));
}

TEST_CASE("an expensive op is handed to the pool while a cheap one runs inline", "[exec][cost]") {
  // Once the costs are known (calibrated, then taught what calibration may
  // misjudge under a sanitizer: the slow kernel 3 ms, the copy 100 ns), the
  // thread that ran x keeps `wait` and hands `slow` to the pool. With its
  // switch on, `wait` blocks until a slow kernel is running: it sees one
  // only if `slow` runs on another thread at the same time (had it run
  // inline, before or after `wait`, none would be in flight).
  SlowAndCheap g;
  std::unique_ptr<InterpreterCore> core_ptr = g.core();
  InterpreterCore& core = *core_ptr;
  REQUIRE(core.instruction(1).op_name == "exec_test.slow");
  REQUIRE(core.instruction(2).op_name == "exec_test.wait_slow");
  SlowAndCheap::calibrate(core);
  for (int k = 0; k < 40; ++k) {
    core.cost_model().record(1, 3'000'000);
    core.cost_model().record(2, 100);
  }
  CHECK(core.cost_model().expensive(1));
  CHECK_FALSE(core.cost_model().expensive(2));
  for (int run = 0; run < 3; ++run) {
    reset_saw_slow();
    auto out = core.run();
    CHECK(saw_slow_in_flight() == 1);
    CHECK(out[0].to_vector<float>() == std::vector<float>(4, 1.f));
    CHECK(out[1].to_vector<float>() == std::vector<float>(4, 1.f));
  }
}

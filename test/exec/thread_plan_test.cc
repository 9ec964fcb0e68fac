// Where a run's threads go (ThreadPlan): to the graph's workers
// with BLAS single-threaded, or to BLAS with the graph on the caller — never
// both — chosen by measurement unless forced.
#include <limits>
#include <thread>
#include <tuple>

#include "exec/exec_test_util.h"
#include "kiln/kernel/blas.h"

using namespace kiln;
using namespace kiln_exec_test;

namespace {

struct MatmulProgram {
  Program p;
  Value out;
  MatmulProgram() {
    Builder b(p);
    auto x = b.create<FullOp>(std::vector<std::int64_t>{64, 64}, 0.5);
    auto y = b.create<FullOp>(std::vector<std::int64_t>{64, 64}, 2.0);
    auto l = b.create<MatmulOp>(x.result(), y.result());
    auto r = b.create<MatmulOp>(y.result(), x.result());
    out = b.create<AddOp>(l.result(), r.result()).result();
  }
};

ExecutionOptions config(unsigned threads, ThreadPlan plan) {
  ExecutionOptions c;
  c.num_threads = threads;
  c.thread_plan = plan;
  c.passes = "";  // the ops as written: fold would compute the constant matmuls at build time
  return c;
}

}  // namespace

TEST_CASE("a forced Blas plan gives BLAS the threads and runs every op on the caller",
          "[exec][threads]") {
  MatmulProgram m;
  Scope scope;
  auto q = std::make_shared<WorkQueue>(1);
  InterpreterCore core(m.p, scope, {}, {m.out}, config(2, ThreadPlan::Blas), q);
  for (int run = 0; run < 4; ++run) {
    auto out = core.run();
    CHECK(out[0].to_vector<float>() == std::vector<float>(64 * 64, 2 * 64.0f));
    CHECK(blas_num_threads() == 2);
  }
  CHECK(core.thread_plan() == ThreadPlan::Blas);
  blas_set_num_threads(1);
}

TEST_CASE("a forced Graph plan keeps BLAS at one thread", "[exec][threads]") {
  MatmulProgram m;
  Scope scope;
  blas_set_num_threads(2);
  auto q = std::make_shared<WorkQueue>(1);
  InterpreterCore core(m.p, scope, {}, {m.out}, config(2, ThreadPlan::Graph), q);
  core.run();
  CHECK(blas_num_threads() == 1);
  CHECK(core.thread_plan() == ThreadPlan::Graph);
}

TEST_CASE("one thread in all means BLAS runs single-threaded too", "[exec][threads]") {
  MatmulProgram m;
  Scope scope;
  blas_set_num_threads(2);
  InterpreterCore core(m.p, scope, {}, {m.out}, config(1, ThreadPlan::Auto));
  core.run();
  CHECK(blas_num_threads() == 1);
}

TEST_CASE("the Auto plan measures each candidate after calibration and keeps one; results never change",
          "[exec][threads]") {
  MatmulProgram m;
  Scope scope;
  auto q = std::make_shared<WorkQueue>(1);
  InterpreterCore core(m.p, scope, {}, {m.out}, config(2, ThreadPlan::Auto), q);
  const int calibration = CostModel::kCalibrationRuns, trials = ThreadPlanTuner::kTrials;
  std::vector<int> blas_threads;
  for (int run = 0; run < calibration + 3 * trials + 3; ++run) {
    auto out = core.run();
    REQUIRE(out[0].to_vector<float>() == std::vector<float>(64 * 64, 2 * 64.0f));
    blas_threads.push_back(blas_num_threads());
  }
  // Calibration runs, the Graph and the Sequential trials at 1 BLAS thread,
  // then the Blas trials at 2.
  for (int run = 0; run < calibration + 2 * trials; ++run) CHECK(blas_threads[run] == 1);
  for (int run = calibration + 2 * trials; run < calibration + 3 * trials; ++run)
    CHECK(blas_threads[run] == 2);
  REQUIRE(core.thread_plan_decided());
  const ThreadPlan chosen = core.thread_plan();
  CHECK(blas_threads.back() == (chosen == ThreadPlan::Blas ? 2 : 1));
  blas_set_num_threads(1);
}

TEST_CASE("a program without BLAS kernels leaves BLAS's thread count alone", "[exec][threads]") {
  Program p;
  Builder b(p);
  auto x = b.create<FullOp>(std::vector<std::int64_t>{8}, 1.0);
  auto y = b.create<AddOp>(x.result(), x.result());
  Scope scope;
  auto q = std::make_shared<WorkQueue>(1);
  InterpreterCore core(p, scope, {}, {y.result()}, config(2, ThreadPlan::Auto), q);
  blas_set_num_threads(2);
  for (int run = 0; run < 10; ++run) core.run();
  CHECK(blas_num_threads() == 2);
  blas_set_num_threads(1);
}

TEST_CASE("a program without GEMMs whose values are large gives its kernels the run's threads under "
          "the Blas plan and leaves BLAS's thread count alone",
          "[exec][threads]") {
  Program p;
  Builder b(p);
  Value v = b.create<FullOp>(std::vector<std::int64_t>{256, 256}, -1.0).result();
  v = b.create<ReluOp>(v).result();
  Value tagged = b.create<ThreadOp>(v, 11).result();
  Scope scope;
  blas_set_num_threads(1);
  clear_threads();
  InterpreterCore core(p, scope, {}, {tagged}, config(2, ThreadPlan::Blas),
                       std::make_shared<WorkQueue>(1));
  CHECK(core.thread_plan() == ThreadPlan::Blas);
  auto out = core.run();
  CHECK(out[0].to_vector<float>() == std::vector<float>(256 * 256, 0.f));
  CHECK(kernel_threads_of(11) == 2);
  CHECK(blas_num_threads() == 1);
  CHECK(kernel_threads_on_this_thread() == 0);
}

TEST_CASE("Auto measures the Blas plan for a chain of large elementwise ops but not for a chain of "
          "small ones",
          "[exec][threads]") {
  for (const auto& [n, measured] : {std::pair{std::int64_t{8}, false}, std::pair{std::int64_t{1} << 16, true}}) {
    INFO(n << " elements");
    Program p;
    Builder b(p);
    Value v = b.create<FullOp>(std::vector<std::int64_t>{n}, 1.0).result();
    for (int k = 0; k < 4; ++k) v = b.create<ReluOp>(v).result();
    Scope scope;
    InterpreterCore core(p, scope, {}, {v}, config(2, ThreadPlan::Auto), std::make_shared<WorkQueue>(1));
    CHECK(core.thread_plan_decided() != measured);
    for (int run = 0; run < CostModel::kCalibrationRuns + 2 * ThreadPlanTuner::kTrials + 1; ++run)
      REQUIRE(core.run()[0].to_vector<float>() == std::vector<float>(static_cast<std::size_t>(n), 1.f));
    CHECK(core.thread_plan_decided());
  }
}

TEST_CASE("kiln's own kernels split their loops only in a Blas run's caller: graph workers and "
          "other plans' runs get one thread, whatever BLAS's count",
          "[exec][threads]") {
  // The matmuls make the program a BLAS program; ThreadOp records the
  // kernel thread limit it ran under (kernel_threads_on_this_thread).
  for (const auto& [plan, threads, want] : {std::tuple{ThreadPlan::Blas, 2u, 2},
                                            std::tuple{ThreadPlan::Graph, 2u, 1},
                                            std::tuple{ThreadPlan::Sequential, 2u, 1},
                                            std::tuple{ThreadPlan::Auto, 1u, 1}}) {
    INFO(to_string(plan) << ", " << threads << " threads");
    MatmulProgram m;
    Value tagged = Builder(m.p).create<ThreadOp>(m.out, 7).result();
    Scope scope;
    blas_set_num_threads(2);
    clear_threads();
    InterpreterCore core(m.p, scope, {}, {tagged}, config(threads, plan),
                         threads > 1 ? std::make_shared<WorkQueue>(1) : nullptr);
    core.run();
    CHECK(kernel_threads_of(7) == want);
    CHECK(kernel_threads_on_this_thread() == 0);  // the caller's limit restored
  }
  blas_set_num_threads(1);
}

TEST_CASE("a chain of ops has nothing to run in parallel: Auto runs it in program order without measuring",
          "[exec][threads]") {
  Program p;
  Builder b(p);
  Value v = b.create<FullOp>(std::vector<std::int64_t>{8}, 1.0).result();
  for (int k = 0; k < 10; ++k) v = b.create<ReluOp>(v).result();
  Scope scope;
  auto q = std::make_shared<WorkQueue>(1);
  InterpreterCore core(p, scope, {}, {v}, config(2, ThreadPlan::Auto), q);
  CHECK(core.thread_plan_decided());
  CHECK(core.thread_plan() == ThreadPlan::Sequential);
  core.run();
  CHECK(core.cost_model().estimate_ns(0) == std::numeric_limits<std::int64_t>::max());  // never timed
}

TEST_CASE("the tuner keeps program order unless another plan is clearly faster", "[exec][threads]") {
  // Graph, Sequential and Blas are measured in that order, kTrials runs each;
  // the fastest run of each counts.
  auto decide = [](std::int64_t graph, std::int64_t seq, std::int64_t blas) {
    ThreadPlanTuner t(ThreadPlan::Auto, /*has_pool=*/true, /*has_blas=*/true, /*has_parallelism=*/true,
                      /*has_streams=*/false);
    for (ThreadPlan want : {ThreadPlan::Graph, ThreadPlan::Sequential, ThreadPlan::Blas})
      for (int k = 0; k < ThreadPlanTuner::kTrials; ++k) {
        const auto c = t.next();
        REQUIRE(c.trial);
        REQUIRE(c.plan == want);
        t.report(c, want == ThreadPlan::Graph ? graph : want == ThreadPlan::Sequential ? seq : blas);
      }
    REQUIRE(t.decided());
    CHECK_FALSE(t.next().trial);
    return t.chosen();
  };
  // A wide program of tiny ops: the pool's counters and hand-offs cost more
  // than they save, and program order wins.
  CHECK(decide(120, 100, 130) == ThreadPlan::Sequential);
  CHECK(decide(97, 100, 130) == ThreadPlan::Sequential);  // within 5%: not worth a pool
  CHECK(decide(80, 100, 130) == ThreadPlan::Graph);
  CHECK(decide(80, 100, 78) == ThreadPlan::Graph);  // Blas must beat the best by 5%
  CHECK(decide(80, 100, 70) == ThreadPlan::Blas);
}

TEST_CASE("with streams and no pool, Auto walks the DAG on the caller; a forced plan is kept",
          "[exec][threads]") {
  ThreadPlanTuner streams(ThreadPlan::Auto, false, false, false, /*has_streams=*/true);
  CHECK(streams.decided());
  CHECK(streams.chosen() == ThreadPlan::Graph);
  ThreadPlanTuner one(ThreadPlan::Auto, /*has_pool=*/false, true, true, false);
  CHECK(one.chosen() == ThreadPlan::Sequential);
  ThreadPlanTuner blas_without_blas(ThreadPlan::Blas, true, /*has_blas=*/false, true, false);
  CHECK(blas_without_blas.chosen() == ThreadPlan::Sequential);
  ThreadPlanTuner graph(ThreadPlan::Graph, true, true, false, false);
  CHECK(graph.decided());
  CHECK(graph.chosen() == ThreadPlan::Graph);
}

TEST_CASE("a wide program of tiny ops on 2 threads: Auto measures, decides, and the results never change",
          "[exec][threads]") {
  Program p;
  Builder b(p);
  auto x = b.create<FullOp>(std::vector<std::int64_t>{1}, -1.0);
  std::vector<FetchTarget> fetch;
  for (int k = 0; k < 2000; ++k) {
    auto r = b.create<ReluOp>(x.result());
    if (k % 500 == 0) fetch.push_back(r.result());
  }
  Scope scope;
  auto q = std::make_shared<WorkQueue>(1);
  InterpreterCore core(p, scope, {}, fetch, config(2, ThreadPlan::Auto), q);
  for (int run = 0; run < 20; ++run) {
    auto out = core.run();
    for (const auto& t : out) REQUIRE(t.to_vector<float>() == std::vector<float>{0.f});
  }
  CHECK(core.thread_plan_decided());
  CHECK((core.thread_plan() == ThreadPlan::Sequential || core.thread_plan() == ThreadPlan::Graph));
}

TEST_CASE("convolutions, fused matmuls and attention are BLAS kernels: one thread in all sets "
          "BLAS (and oneDNN) to one thread",
          "[exec][threads]") {
  Program p;
  Builder b(p);
  auto x = b.create<FullOp>(std::vector<std::int64_t>{1, 4, 6, 6}, 0.5);
  auto w = b.create<FullOp>(std::vector<std::int64_t>{4, 4, 3, 3}, 0.25);
  auto conv = b.create<Conv2dOp>(x.result(), w.result(), std::vector<std::int64_t>{1, 1},
                                 std::vector<std::int64_t>{1, 1});
  Value out = conv.result();
  Scope scope;
  blas_set_num_threads(2);
  InterpreterCore core(p, scope, {}, {out}, config(1, ThreadPlan::Auto));
  auto got = core.run()[0].to_vector<float>();
  CHECK(got[7] == Approx(4 * 9 * 0.5 * 0.25));  // an inner output: the whole 3x3 window
  CHECK(blas_num_threads() == 1);
}

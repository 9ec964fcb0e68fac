// RunState: what one run mutates, so that several runs over one compiled
// program (one ExecutionPlan) proceed at the same time with their own
// variables, counters and errors.
#include <atomic>
#include <thread>

#include "exec/exec_test_util.h"

using namespace kiln;
using namespace kiln_exec_test;

namespace {

// y = relu(x * 2 + w) over a fed x, with a parameter w = 1.
struct FedProgram {
  Program p;
  Value y;
  FedProgram() {
    Builder b(p);
    auto x = b.create<DataOp>("x", std::vector<std::int64_t>{-1, 64});
    auto w = b.create<ParameterOp>("w", TensorType::get(DataType::Float32, {64}));
    auto two = b.create<FullOp>(std::vector<std::int64_t>{1}, 2.0);
    auto m = b.create<MulOp>(x.result(), two.result());
    auto a = b.create<AddOp>(m.result(), w.result());
    y = b.create<ReluOp>(a.result()).result();
  }
};

void check_value(const Tensor& t, float x) {
  const auto v = t.to_vector<float>();
  REQUIRE(v.size() == 64 * 3);
  for (float e : v) REQUIRE(e == x * 2 + 1);
}

}  // namespace

TEST_CASE("two threads running one compiled program with different feeds both get their own results",
          "[exec][run_state]") {
  FedProgram m;
  for (unsigned threads : {1u, 2u}) {
    INFO("threads " << threads);
    Executor exe(Place::cpu(), {.num_threads = threads});
    exe.scope().var("w").set(filled_f32({64}, 1.f));
    exe.run(m.p, {{"x", filled_f32({3, 64}, 0.f)}}, {m.y});  // compile once
    std::atomic<int> bad{0};
    auto worker = [&](float x) {
      for (int k = 0; k < 300; ++k) {
        auto out = exe.run(m.p, {{"x", filled_f32({3, 64}, x + float(k))}}, {m.y});
        for (float e : out[0].to_vector<float>()) bad += e != (x + float(k)) * 2 + 1;
      }
    };
    std::thread a(worker, 1.f), c(worker, 1000.f);
    a.join();
    c.join();
    CHECK(bad == 0);
    CHECK(exe.num_cores_built() == 1);
    CHECK(exe.last_core()->num_run_states() >= 1);
  }
}

TEST_CASE("an InterpreterCore run from several threads at once makes a run state for each overlap",
          "[exec][run_state]") {
  FedProgram m;
  Scope scope;
  scope.var("w").set(filled_f32({64}, 1.f));
  ExecutionOptions o;
  o.num_threads = 2;
  InterpreterCore core(m.p, scope, {"x"}, {m.y}, o, std::make_shared<WorkQueue>(1));
  std::atomic<bool> go{false};
  std::atomic<int> bad{0};
  auto worker = [&](float x) {
    while (!go.load()) std::this_thread::yield();
    std::vector<Tensor> out(1);
    for (int k = 0; k < 300; ++k) {
      std::vector<Tensor> feeds{filled_f32({3, 64}, x)};
      core.run(feeds, /*take=*/true, out);
      for (float e : out[0].to_vector<float>()) bad += e != x * 2 + 1;
    }
  };
  std::thread t1(worker, 3.f), t2(worker, 5.f), t3(worker, 7.f);
  go = true;
  t1.join();
  t2.join();
  t3.join();
  CHECK(bad == 0);
  CHECK(core.num_run_states() <= 3);
  check_value(core.run(std::vector<Tensor>{filled_f32({3, 64}, 2.f)})[0], 2.f);
  // Run states drop their kid scopes with the core.
}

TEST_CASE("a run into the caller's result tensors reuses them and checks their count", "[exec][run_state]") {
  FedProgram m;
  Executor exe(Place::cpu(), {.num_threads = 1});
  exe.scope().var("w").set(filled_f32({64}, 1.f));
  std::vector<Tensor> out(1);
  for (float x : {1.f, 2.f, 3.f}) {
    exe.run(m.p, {{"x", filled_f32({3, 64}, x)}}, {m.y}, out);
    check_value(out[0], x);
  }
  std::vector<Tensor> two(2);
  KILN_CHECK_ERROR(exe.run(m.p, {{"x", filled_f32({3, 64}, 1.f)}}, {m.y}, two), InvalidArgument, {"expected room for 1 fetched tensors, got 2"});
}

TEST_CASE("a failing run on one thread does not disturb a run of the same program on another",
          "[exec][run_state]") {
  // A ThrowOp fails one core's runs while another thread runs a program
  // without it; both cores share the work queue.
  Program good, bad;
  {
    Builder b(good);
    auto x = b.create<FullOp>(std::vector<std::int64_t>{8}, 1.0);
    b.create<ReluOp>(x.result());
  }
  Value bad_out;
  {
    Builder b(bad);
    auto x = b.create<FullOp>(std::vector<std::int64_t>{8}, 1.0);
    bad_out = b.create<ThrowOp>(x.result()).result();
  }
  Executor exe(Place::cpu(), {.num_threads = 2});
  std::atomic<int> errors{0}, oks{0};
  std::thread t([&] {
    for (int k = 0; k < 200; ++k) {
      try {
        exe.run(bad, {}, {bad_out});
      } catch (const Error&) {
        ++errors;
      }
    }
  });
  for (int k = 0; k < 200; ++k) oks += exe.run(good).empty();
  t.join();
  CHECK(errors == 200);
  CHECK(oks == 200);
}

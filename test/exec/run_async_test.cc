// Asynchronous runs and run options (seed 003's RunAsync and Executor::Args):
// done called once from a worker with the fetches or the first error; a
// run cancelled before it starts, or while a receive waits; a deadline
// passing while a receive waits; asynchronous kernels holding no worker;
// 10⁴ overlapping runs of one program.
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "exec/exec_test_util.h"
#include "exec/run_test_util.h"
#include "kiln/runtime/cancellation.h"
#include "kiln/runtime/rendezvous.h"

using namespace kiln;
using namespace kiln_exec_test;
using namespace std::chrono_literals;

namespace {

ExecutionOptions async_threads(unsigned n, ThreadPlan plan = ThreadPlan::Auto) {
  ExecutionOptions o;
  o.num_threads = n;
  o.thread_plan = plan;
  return o;
}

// out = a + b, both fed ([1] f32).
struct AddProgram {
  Program p;
  Value out;
  AddProgram() {
    Builder b(p);
    auto a = b.create<DataOp>("a", std::vector<std::int64_t>{1});
    auto c = b.create<DataOp>("b", std::vector<std::int64_t>{1});
    out = b.create<AddOp>(a.result(), c.result()).result();
  }
};

// out = recv("x") + 1.
struct RecvProgram {
  Program p;
  Value out;
  RecvProgram() {
    Builder b(p);
    auto x = b.create<RecvOp>("x", DataType::Float32, std::vector<std::int64_t>{1});
    auto one = b.create<FullOp>(std::vector<std::int64_t>{1}, 1.0);
    out = b.create<AddOp>(x.result(), one.result()).result();
  }
};

RendezvousKey key_of(const std::string& name) { return RendezvousKey(Place::cpu(), Place::cpu(), name); }

}  // namespace

TEST_CASE("run_async returns at once; done gets the fetched tensors once, on a worker thread",
          "[exec][run_async]") {
  AddProgram prog;
  for (unsigned n : {1u, 2u}) {
    INFO("threads " << n);
    Executor exe(Place::cpu(), async_threads(n));
    DoneRecord rec;
    exe.run_async(prog.p, {{"a", scalar_f32(1.5f)}, {"b", scalar_f32(2.f)}}, {prog.out}, {},
                  rec.callback());
    REQUIRE(rec.wait());
    CHECK(rec.calls() == 1);
    CHECK(rec.thread() != std::this_thread::get_id());
    REQUIRE_FALSE(rec.error());
    REQUIRE(rec.fetched().size() == 1);
    CHECK(value_f32(rec.fetched()[0]) == 3.5f);
    // run and run_async share the compiled program.
    CHECK(value_f32(exe.run(prog.p, {{"a", scalar_f32(1.f)}, {"b", scalar_f32(1.f)}}, {prog.out})[0]) == 2.f);
    CHECK(exe.num_cores_built() == 1);
  }
}

TEST_CASE("a run started in the caller's thread is done, on that thread, before run_async returns",
          "[exec][run_async]") {
  AddProgram prog;
  for (unsigned n : {1u, 2u}) {
    INFO("threads " << n);
    Executor exe(Place::cpu(), async_threads(n));
    RunOptions options;
    options.run_in_caller_thread = true;
    DoneRecord rec;
    exe.run_async(prog.p, {{"a", scalar_f32(1.5f)}, {"b", scalar_f32(2.f)}}, {prog.out}, options,
                  rec.callback());
    CHECK(rec.calls() == 1);  // no wait: done already came
    CHECK(rec.thread() == std::this_thread::get_id());
    REQUIRE_FALSE(rec.error());
    REQUIRE(rec.fetched().size() == 1);
    CHECK(value_f32(rec.fetched()[0]) == 3.5f);
    // A bad feed, the same way: through done, not thrown.
    DoneRecord bad;
    exe.run_async(prog.p, {{"a", scalar_f32(1.f)}, {"b", Tensor::from_vector<float>({2}, {1.f, 2.f})}},
                  {prog.out}, options, bad.callback());
    REQUIRE(bad.wait());
    REQUIRE(bad.error());
    CHECK_THAT(bad.error()->message(), Catch::Contains("'b'"));
  }
}

TEST_CASE("a run started in the caller's thread that waits on a receive returns at once; a worker "
          "finishes it when the value is sent",
          "[exec][run_async]") {
  RecvProgram prog;
  for (unsigned n : {1u, 2u}) {
    INFO("threads " << n);
    Executor exe(Place::cpu(), async_threads(n));
    LocalRendezvous rendezvous;
    RunOptions options;
    options.rendezvous = &rendezvous;
    options.run_in_caller_thread = true;
    DoneRecord rec;
    exe.run_async(prog.p, {}, {prog.out}, options, rec.callback());
    CHECK(rec.calls() == 0);  // suspended in the receive, holding no thread
    rendezvous.send(key_of("x"), scalar_f32(41.f));
    REQUIRE(rec.wait());
    CHECK(rec.calls() == 1);
    REQUIRE_FALSE(rec.error());
    CHECK(value_f32(rec.fetched()[0]) == 42.f);
    CHECK(rec.thread() != std::this_thread::get_id());
  }
}

TEST_CASE("run_async reports a bad feed or fetch through done, naming it, not by throwing",
          "[exec][run_async]") {
  AddProgram prog;
  Executor exe(Place::cpu(), async_threads(2));
  DoneRecord missing;
  exe.run_async(prog.p, {{"a", scalar_f32(1.f)}}, {prog.out}, {}, missing.callback());
  REQUIRE(missing.wait());
  REQUIRE(missing.error());
  CHECK_THAT(missing.error()->message(), Catch::Contains("'b'"));
  DoneRecord wrong;
  exe.run_async(prog.p, {{"a", scalar_f32(1.f)}, {"b", Tensor::from_vector<double>(Dims({1}), {1.0})}},
                {prog.out}, {}, wrong.callback());
  REQUIRE(wrong.wait());
  REQUIRE(wrong.error());
  CHECK(wrong.error()->kind() == ErrorKind::InvalidArgument);
  CHECK_THAT(wrong.error()->message(), Catch::Contains("'b'"));
  DoneRecord unknown;
  exe.run_async(prog.p, {{"a", scalar_f32(1.f)}, {"b", scalar_f32(1.f)}}, {"no_such_value"}, {},
                unknown.callback());
  REQUIRE(unknown.wait());
  REQUIRE(unknown.error());
  CHECK_THAT(unknown.error()->message(), Catch::Contains("no_such_value"));
  CHECK(unknown.calls() == 1);
}

TEST_CASE("a failing op's error reaches done naming the op; the next run_async succeeds",
          "[exec][run_async]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{1});
  auto t = b.create<ThrowOp>(x.result());
  Executor exe(Place::cpu(), async_threads(2));
  throw_enabled().store(true);
  DoneRecord failed;
  exe.run_async(p, {{"x", scalar_f32(1.f)}}, {t.result()}, {}, failed.callback());
  REQUIRE(failed.wait());
  REQUIRE(failed.error());
  CHECK(failed.error()->kind() == ErrorKind::OutOfRange);
  CHECK_THAT(failed.error()->message(), Catch::Contains("exec_test.throw"));
  CHECK(failed.fetched().empty());
  throw_enabled().store(false);
  DoneRecord ok;
  exe.run_async(p, {{"x", scalar_f32(4.f)}}, {t.result()}, {}, ok.callback());
  REQUIRE(ok.wait());
  CHECK_FALSE(ok.error());
  CHECK(value_f32(ok.fetched().at(0)) == 4.f);
  throw_enabled().store(true);
}

TEST_CASE("a run cancelled before it starts fails with Cancelled and starts no op",
          "[exec][run_async]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{1});
  auto r = b.create<RecordOp>(x.result(), 7);
  CancellationManager cm;
  cm.start_cancel();
  RunOptions options;
  options.cancellation = &cm;
  for (unsigned n : {1u, 2u}) {
    Executor exe(Place::cpu(), async_threads(n));
    clear_run_log();
    KILN_CHECK_ERROR(exe.run(p, {{"x", scalar_f32(1.f)}}, {r.result()}, options), Cancelled,
                     {"cancelled"});
    DoneRecord rec;
    exe.run_async(p, {{"x", scalar_f32(1.f)}}, {r.result()}, options, rec.callback());
    REQUIRE(rec.wait());
    REQUIRE(rec.error());
    CHECK(rec.error()->kind() == ErrorKind::Cancelled);
    CHECK(run_log().empty());
    // Usable afterwards, without the token.
    CHECK(value_f32(exe.run(p, {{"x", scalar_f32(2.f)}}, {r.result()})[0]) == 2.f);
  }
}

TEST_CASE("a run cancelled while its recv waits: Cancelled naming the recv, the token's callbacks "
          "run, and the next run gets the next value",
          "[exec][run_async]") {
  RecvProgram prog;
  for (unsigned n : {1u, 2u}) {
    INFO("threads " << n);
    Executor exe(Place::cpu(), async_threads(n));
    LocalRendezvous rendezvous;
    CancellationManager cm;
    std::atomic<int> user_callback{0};
    CancellationToken token = cm.register_callback([&] { user_callback.fetch_add(1); });
    REQUIRE(token != kNoCancellationToken);
    RunOptions options;
    options.rendezvous = &rendezvous;
    options.cancellation = &cm;
    DoneRecord rec;
    exe.run_async(prog.p, {}, {prog.out}, options, rec.callback());
    CHECK_FALSE(rec.wait(30ms));  // blocked in recv
    std::thread canceller([&] { cm.start_cancel(); });
    canceller.join();
    REQUIRE(rec.wait());
    REQUIRE(rec.error());
    CHECK(rec.error()->kind() == ErrorKind::Cancelled);
    CHECK_THAT(rec.error()->message(), Catch::Contains("kiln.recv"));
    CHECK_THAT(rec.error()->message(), Catch::Contains("cpu;cpu;x;0:0"));
    CHECK(user_callback.load() == 1);
    CHECK(rec.calls() == 1);
    // The cancelled receive is gone from the rendezvous: the next run takes
    // the next value.
    rendezvous.send(key_of("x"), scalar_f32(41.f));
    RunOptions next;
    next.rendezvous = &rendezvous;
    CHECK(value_f32(exe.run(prog.p, {}, {prog.out}, next)[0]) == 42.f);
  }
}

TEST_CASE("a synchronous run cancelled from another thread while its recv waits throws Cancelled",
          "[exec][run_async]") {
  RecvProgram prog;
  Executor exe(Place::cpu(), async_threads(2));
  LocalRendezvous rendezvous;
  CancellationManager cm;
  RunOptions options;
  options.rendezvous = &rendezvous;
  options.cancellation = &cm;
  std::thread canceller([&] {
    std::this_thread::sleep_for(30ms);
    cm.start_cancel();
  });
  KILN_CHECK_ERROR(exe.run(prog.p, {}, {prog.out}, options), Cancelled, {"kiln.recv", "was cancelled"});
  canceller.join();
}

TEST_CASE("a deadline that passes while a recv waits fails the run with DeadlineExceeded",
          "[exec][run_async]") {
  RecvProgram prog;
  for (unsigned n : {1u, 2u}) {
    INFO("threads " << n);
    Executor exe(Place::cpu(), async_threads(n));
    LocalRendezvous rendezvous;
    RunOptions options;
    options.rendezvous = &rendezvous;
    options.timeout = 30ms;
    const auto t0 = std::chrono::steady_clock::now();
    KILN_CHECK_ERROR(exe.run(prog.p, {}, {prog.out}, options), DeadlineExceeded,
                     {"deadline", "kiln.recv"});
    CHECK(std::chrono::steady_clock::now() - t0 >= 30ms);
    DoneRecord rec;
    options.timeout = {};
    options.deadline = std::chrono::steady_clock::now() + 20ms;
    exe.run_async(prog.p, {}, {prog.out}, options, rec.callback());
    REQUIRE(rec.wait());
    REQUIRE(rec.error());
    CHECK(rec.error()->kind() == ErrorKind::DeadlineExceeded);
    // A deadline already past: no op starts.
    options.deadline = std::chrono::steady_clock::now() - 1ms;
    KILN_CHECK_ERROR(exe.run(prog.p, {}, {prog.out}, options), DeadlineExceeded, {"deadline"});
    // A run that finishes in time is not touched by its deadline.
    options.deadline = std::chrono::steady_clock::now() + 10s;
    rendezvous.send(key_of("x"), scalar_f32(1.f));
    CHECK(value_f32(exe.run(prog.p, {}, {prog.out}, options)[0]) == 2.f);
  }
}

TEST_CASE("a pool of 2 threads runs a program with 100 outstanding receives without deadlock, "
          "and runs other work meanwhile",
          "[exec][run_async]") {
  Program p;
  Builder b(p);
  Value sum;
  for (int k = 0; k < 100; ++k) {
    Value x = b.create<RecvOp>("x" + std::to_string(k), DataType::Float32, std::vector<std::int64_t>{1})
                  .result();
    sum = k == 0 ? x : b.create<AddOp>(sum, x).result();
  }
  AddProgram other;
  for (ThreadPlan plan : {ThreadPlan::Graph, ThreadPlan::Sequential}) {
    INFO("thread plan " << to_string(plan));
    Executor exe(Place::cpu(), async_threads(2, plan));
    LocalRendezvous rendezvous;
    RunOptions options;
    options.rendezvous = &rendezvous;
    DoneRecord rec;
    exe.run_async(p, {}, {sum}, options, rec.callback());
    // Every receive waits; no worker is held: other runs go through.
    for (int i = 0; i < 4; ++i) {
      DoneRecord small;
      exe.run_async(other.p, {{"a", scalar_f32(1.f)}, {"b", scalar_f32(2.f)}}, {other.out}, {},
                    small.callback());
      REQUIRE(small.wait(5000ms));
      CHECK(value_f32(small.fetched().at(0)) == 3.f);
      CHECK(value_f32(exe.run(other.p, {{"a", scalar_f32(1.f)}, {"b", scalar_f32(1.f)}}, {other.out})[0]) ==
            2.f);
    }
    CHECK_FALSE(rec.done());
    for (int k = 99; k >= 0; --k) rendezvous.send(key_of("x" + std::to_string(k)), scalar_f32(float(k)));
    REQUIRE(rec.wait());
    REQUIRE_FALSE(rec.error());
    CHECK(value_f32(rec.fetched().at(0)) == 4950.f);
  }
}

TEST_CASE("10^4 concurrent run_async calls on one executor complete, each done called once",
          "[exec][run_async]") {
  AddProgram prog;
  constexpr int kRuns = 10000;
  constexpr int kCallers = 4;
  for (unsigned n : {1u, 2u}) {
    INFO("threads " << n);
    std::vector<std::atomic<int>> calls(kRuns);
    std::vector<std::atomic<int>> right(kRuns);
    std::atomic<int> finished{0};
    {
      Executor exe(Place::cpu(), async_threads(n));
      std::vector<std::thread> callers;
      for (int c = 0; c < kCallers; ++c)
        callers.emplace_back([&, c] {
          for (int k = c; k < kRuns; k += kCallers) {
            exe.run_async(prog.p, {{"a", scalar_f32(float(k))}, {"b", scalar_f32(1.f)}}, {prog.out}, {},
                          [&, k](const Error* error, std::vector<Tensor>&& out) {
                            calls[k].fetch_add(1);
                            if (!error && out.size() == 1 && value_f32(out[0]) == float(k) + 1.f)
                              right[k].fetch_add(1);
                            finished.fetch_add(1);
                          });
          }
        });
      for (auto& t : callers) t.join();
      // The destructor waits for the runs still in flight.
    }
    CHECK(finished.load() == kRuns);
    int once = 0, correct = 0;
    for (int k = 0; k < kRuns; ++k) {
      once += calls[k].load() == 1;
      correct += right[k].load() == 1;
    }
    CHECK(once == kRuns);
    CHECK(correct == kRuns);
  }
}

TEST_CASE("kernels see the run's step id: the one given, or a fresh one for each run",
          "[exec][run_async]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{1});
  auto s = b.create<StepIdOp>(x.result());
  Executor exe(Place::cpu(), async_threads(2));
  RunOptions options;
  options.step_id = 123456789;
  exe.run(p, {{"x", scalar_f32(1.f)}}, {s.result()}, options);
  CHECK(last_step_id() == 123456789);
  DoneRecord rec;
  exe.run_async(p, {{"x", scalar_f32(1.f)}}, {s.result()}, options, rec.callback());
  REQUIRE(rec.wait());
  CHECK(last_step_id() == 123456789);
  exe.run(p, {{"x", scalar_f32(1.f)}}, {s.result()}, RunOptions{});
  const std::int64_t first = last_step_id();
  exe.run(p, {{"x", scalar_f32(1.f)}}, {s.result()}, RunOptions{});
  CHECK(first > 0);
  CHECK(last_step_id() > first);
  // A run given no options has no step.
  exe.run(p, {{"x", scalar_f32(1.f)}}, {s.result()});
  CHECK(last_step_id() == 0);
}

TEST_CASE("asynchronous kernels completing inline or later on another thread: their successors run, "
          "with run and run_async, at 1 and 2 threads",
          "[exec][run_async]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{1}).result();
  Value acc = x;
  for (int k = 0; k < 8; ++k) {
    Value a = b.create<AsyncIdentityOp>(acc, k % 2 ? 200 : 0).result();
    Value c = b.create<AsyncIdentityOp>(acc, k % 3 ? 0 : 100).result();
    acc = b.create<AddOp>(a, c).result();  // doubles
  }
  for (unsigned n : {1u, 2u}) {
    INFO("threads " << n);
    Executor exe(Place::cpu(), async_threads(n));
    for (int run = 0; run < 3; ++run) {
      CHECK(value_f32(exe.run(p, {{"x", scalar_f32(1.f)}}, {acc})[0]) == 256.f);
      DoneRecord rec;
      exe.run_async(p, {{"x", scalar_f32(2.f)}}, {acc}, {}, rec.callback());
      REQUIRE(rec.wait());
      REQUIRE_FALSE(rec.error());
      CHECK(value_f32(rec.fetched().at(0)) == 512.f);
    }
  }
}

TEST_CASE("a synchronous run of a program with a receive, called from a done callback on a "
          "one-thread executor, completes once the value comes",
          "[exec][run_async]") {
  // The callback runs on the only thread that takes the executor's
  // continuations; the run it starts waits on a receive and must run the
  // receive's continuation itself.
  RecvProgram prog;
  AddProgram other;
  Executor exe(Place::cpu(), async_threads(1));
  LocalRendezvous rendezvous;
  std::atomic<float> inner{0.f};
  DoneRecord rec;
  RunDone record = rec.callback();
  exe.run_async(other.p, {{"a", scalar_f32(1.f)}, {"b", scalar_f32(1.f)}}, {other.out}, {},
                [&](const Error*, std::vector<Tensor>&&) {
                  RunOptions options;
                  options.rendezvous = &rendezvous;
                  inner.store(value_f32(exe.run(prog.p, {}, {prog.out}, options)[0]));
                  record(nullptr, {});
                });
  CHECK_FALSE(rec.wait(20ms));
  rendezvous.send(key_of("x"), scalar_f32(6.f));
  REQUIRE(rec.wait());
  CHECK(inner.load() == 7.f);
}

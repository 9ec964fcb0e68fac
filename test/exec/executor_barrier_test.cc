// ExecutorBarrier (seed 003): several executors run one step over one
// rendezvous — values passed along a chain of executors, one step id for
// all, the first failure aborting the others' receives and reaching `done`
// once, a cancelled step, and the errors of a bad part list.
#include <chrono>
#include <string>
#include <vector>

#include "exec/exec_test_util.h"
#include "exec/run_test_util.h"
#include "kiln/exec/executor_barrier.h"
#include "kiln/runtime/cancellation.h"

using namespace kiln;
using namespace kiln_exec_test;
using namespace std::chrono_literals;

namespace {

Value recv_f32(Builder& b, const std::string& name) {
  return b.create<RecvOp>(name, DataType::Float32, std::vector<std::int64_t>{1}).result();
}

}  // namespace

TEST_CASE("a chain of 4 executors passes a value along one rendezvous, step after step",
          "[exec][barrier]") {
  // Part 0 sends x; part k receives v<k-1>, adds 1 and sends v<k>; part 3
  // fetches its sum.
  constexpr int kParts = 4;
  std::vector<std::unique_ptr<Program>> programs;
  std::vector<std::unique_ptr<Executor>> executors;
  Value last;
  for (int k = 0; k < kParts; ++k) {
    programs.push_back(std::make_unique<Program>());
    Builder b(*programs.back());
    Value in = k == 0 ? b.create<DataOp>("x", std::vector<std::int64_t>{1}).result()
                      : recv_f32(b, "v" + std::to_string(k - 1));
    Value one = b.create<FullOp>(std::vector<std::int64_t>{1}, 1.0).result();
    Value out = b.create<AddOp>(in, one).result();
    if (k + 1 < kParts) b.create<SendOp>(out, "v" + std::to_string(k));
    last = out;
    executors.push_back(std::make_unique<Executor>(Place::cpu(), threads(k % 2 ? 2 : 1)));
  }
  for (int step = 0; step < 3; ++step) {
    std::vector<ExecutorBarrier::Part> parts;
    for (int k = kParts - 1; k >= 0; --k) {  // the receivers start first
      ExecutorBarrier::Part part{executors[k].get(), programs[k].get(), {}, {}};
      if (k == 0) part.feed = {{"x", scalar_f32(float(step))}};
      if (k == kParts - 1) part.fetch = {last};
      parts.push_back(std::move(part));
    }
    LocalRendezvous r;
    auto results = ExecutorBarrier::run(std::move(parts), r);
    REQUIRE(results.size() == kParts);
    CHECK(value_f32(results[0].at(0)) == float(step + kParts));
    CHECK(results[1].empty());
  }
}

TEST_CASE("every part of a step sees the step id: the one given, or one fresh id", "[exec][barrier]") {
  Program sender, receiver;
  {
    Builder b(sender);
    Value x = b.create<DataOp>("x", std::vector<std::int64_t>{1}).result();
    b.create<SendOp>(b.create<StepIdOp>(x).result(), "x");
  }
  {
    Builder b(receiver);
    b.create<StepIdOp>(recv_f32(b, "x"));
  }
  Executor e0(Place::cpu(), threads(1)), e1(Place::cpu(), threads(2));
  LocalRendezvous r;
  RunOptions options;
  options.step_id = 4242;
  ExecutorBarrier::run({{&e0, &sender, {{"x", scalar_f32(1.f)}}, {}}, {&e1, &receiver, {}, {}}}, r, options);
  CHECK(last_step_id() == 4242);
}

TEST_CASE("the first failure aborts the rendezvous: a waiting receiver wakes, done gets that error once",
          "[exec][barrier]") {
  Program failing, waiting;
  {
    Builder b(failing);
    Value x = b.create<DataOp>("x", std::vector<std::int64_t>{1}).result();
    b.create<SendOp>(b.create<ThrowOp>(x).result(), "x");
  }
  Value got;
  {
    Builder b(waiting);
    got = recv_f32(b, "x");
  }
  Executor e0(Place::cpu(), threads(2)), e1(Place::cpu(), threads(2));
  throw_enabled().store(true);
  LocalRendezvous r;
  DoneRecord rec;
  std::atomic<int> calls{0};
  ExecutorBarrier::run_async({{&e1, &waiting, {}, {got}}, {&e0, &failing, {{"x", scalar_f32(1.f)}}, {}}}, r,
                             {}, [&](const Error* error, std::vector<std::vector<Tensor>>&& results) {
                               calls.fetch_add(1);
                               rec.callback()(error, results.empty() ? std::vector<Tensor>{}
                                                                     : std::move(results[0]));
                             });
  REQUIRE(rec.wait());
  REQUIRE(rec.error());
  CHECK(rec.error()->kind() == ErrorKind::OutOfRange);
  CHECK_THAT(rec.error()->message(), Catch::Contains("exec_test.throw"));
  CHECK(r.is_aborted());
  // Later receives of the step fail with Aborted, naming the failure.
  KILN_CHECK_ERROR(r.recv(RendezvousKey(Place::cpu(), Place::cpu(), "later")), Aborted,
                   {"exec_test.throw"});
  std::this_thread::sleep_for(10ms);
  CHECK(calls.load() == 1);
}

TEST_CASE("a cancelled step fails every part with Cancelled; done is called once", "[exec][barrier]") {
  Program a, b;
  {
    Builder bb(a);
    recv_f32(bb, "never");
  }
  {
    Builder bb(b);
    recv_f32(bb, "never_either");
  }
  Executor e0(Place::cpu(), threads(1)), e1(Place::cpu(), threads(2));
  LocalRendezvous r;
  CancellationManager cm;
  RunOptions options;
  options.cancellation = &cm;
  DoneRecord rec;
  ExecutorBarrier::run_async({{&e0, &a, {}, {}}, {&e1, &b, {}, {}}}, r, options,
                             [&](const Error* error, std::vector<std::vector<Tensor>>&&) {
                               rec.callback()(error, {});
                             });
  CHECK_FALSE(rec.wait(20ms));
  cm.start_cancel();
  REQUIRE(rec.wait());
  REQUIRE(rec.error());
  CHECK(rec.error()->kind() == ErrorKind::Cancelled);
  CHECK(rec.calls() == 1);
}

TEST_CASE("a barrier with no parts, or a part without an executor or program, is an error",
          "[exec][barrier]") {
  LocalRendezvous r;
  KILN_CHECK_ERROR(ExecutorBarrier::run({}, r), InvalidArgument, {"at least one part"});
  Program p;
  KILN_CHECK_ERROR(ExecutorBarrier::run({{nullptr, &p, {}, {}}}, r), InvalidArgument, {"part 0", "executor"});
  Executor e;
  KILN_CHECK_ERROR(ExecutorBarrier::run({{&e, &p, {}, {}}, {&e, nullptr, {}, {}}}, r), InvalidArgument,
                   {"part 1", "program"});
}

// Faults, as the anchors test them: steps cancelled mid-way again and again
// beside steps that succeed, deadlines that pass while a receive waits, a
// rendezvous aborted under 1000 pending receives, a kernel that throws in
// the k-th iteration of a loop, failing steps chained through run_async's
// done, a device out of memory. Each fails only what it should, with the
// error a user expects, never hangs (every wait is bounded), and leaves
// nothing behind: the CPU allocator's bytes in use and kiln's threads are
// what they were before the executor was made.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cf_lowering_util.h"
#include "exec/exec_test_util.h"
#include "exec/run_test_util.h"
#include "kiln/runtime/allocator.h"
#include "kiln/runtime/cancellation.h"
#include "kiln/runtime/cpu_allocator.h"
#include "kiln/runtime/cuda_context.h"
#include "kiln/runtime/deferred_free.h"
#include "kiln/runtime/rendezvous.h"

using namespace kiln;
using namespace kiln_exec_test;
using namespace std::chrono_literals;

namespace {

using Dims0 = std::vector<std::int64_t>;

// out = i, unless i == k: then the kernel throws OutOfRange naming k.
struct ThrowAtOp : Op<ThrowAtOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "fault_test.throw_at";
  static constexpr int num_operands = 2, num_results = 1;
  static void build(Builder&, OperationArgument& arg, Value i, Value k) {
    arg.add_operand(i);
    arg.add_operand(k);
  }
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute) { return {in.at(0)}; }
};
KILN_REGISTER_OP(ThrowAtOp);
void throw_at_kernel(KernelContext& ctx) {
  const std::int64_t i = ctx.input(0).data<std::int64_t>()[0];
  if (i == ctx.input(1).data<std::int64_t>()[0])
    throw_error(ErrorKind::OutOfRange, "throw_at: failing at iteration ", i, " as asked");
  ctx.output(0) = ctx.input(0);
}
KILN_REGISTER_KERNEL(ThrowAtOp, Cpu, Undefined, throw_at_kernel);

// kiln's live threads (it names them "kiln-…"): other tests' or libraries'
// threads starting and ending meanwhile are not counted.
std::size_t kiln_thread_count() {
  std::size_t n = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    if (std::getline(comm, name) && name.rfind("kiln-", 0) == 0) ++n;
  }
  return n;
}

// The process-wide threads an executor may start on first use (the shared
// queue that starts and resumes asynchronous runs of a one-thread
// executor, the deadline timer) run before a test counts threads.
void start_shared_threads() {
  Program p;
  Builder b(p);
  Value x = b.create<RecvOp>("warm", DataType::Float32, Dims0{1}).result();
  for (unsigned n : {1u, 2u}) {
    Executor exe(Place::cpu(), threads(n));
    LocalRendezvous rendezvous;
    RunOptions options;
    options.rendezvous = &rendezvous;
    options.timeout = 20s;
    DoneRecord rec;
    exe.run_async(p, {}, {x}, options, rec.callback());
    rendezvous.send(RendezvousKey(Place::cpu(), Place::cpu(), "warm"), scalar_f32(1.f));
    REQUIRE(rec.wait());
  }
}

// Taken before an executor is made and checked after it is gone: the CPU
// allocator holds the bytes it held, the process runs the threads it ran.
class NothingLeaked {
 public:
  NothingLeaked() : bytes_((start_shared_threads(), cpu_allocator().bytes_in_use())), threads_(kiln_thread_count()) {}
  void check() const {
    CHECK(cpu_allocator().bytes_in_use() == bytes_);
    CHECK(kiln_thread_count() == threads_);
  }

 private:
  std::size_t bytes_, threads_;
};

// Waits (at most 20 s) until the executor has no asynchronous run in flight.
bool drained(const Executor& exe) {
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (exe.runs_in_flight() > 0 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  return exe.runs_in_flight() == 0;
}

RendezvousKey key_of(const std::string& name) { return RendezvousKey(Place::cpu(), Place::cpu(), name); }

// out = a + b, both fed ([1] f32).
struct AddProgram {
  Program p;
  Value out;
  AddProgram() {
    Builder b(p);
    Value a = b.create<DataOp>("a", Dims0{1}).result();
    Value c = b.create<DataOp>("b", Dims0{1}).result();
    out = b.create<AddOp>(a, c).result();
  }
};

// out = x after `n` slow identities of `micros` each: a step long enough to
// be cancelled in the middle.
struct SlowChain {
  Program p;
  Value out;
  SlowChain(int n, std::int64_t micros) {
    Builder b(p);
    out = b.create<DataOp>("x", Dims0{1}).result();
    for (int k = 0; k < n; ++k) out = b.create<SlowOp>(out, micros).result();
  }
};

// out = recv(`key`) + 1.
struct RecvProgram {
  Program p;
  Value out;
  explicit RecvProgram(const std::string& key = "x") {
    Builder b(p);
    Value x = b.create<RecvOp>(key, DataType::Float32, Dims0{1}).result();
    out = b.create<AddOp>(x, b.create<FullOp>(Dims0{1}, 1.0).result()).result();
  }
};

// Runs `exe.run(add)` in a loop on its own thread until stopped, counting
// the runs and the wrong results.
class SideSteps {
 public:
  SideSteps(Executor& exe, const AddProgram& add) : thread_([this, &exe, &add] { loop(exe, add); }) {}
  ~SideSteps() { stop(); }
  void stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  int runs() const { return runs_.load(); }
  int wrong() const { return wrong_.load(); }

 private:
  void loop(Executor& exe, const AddProgram& add) {
    for (float v = 0; !stop_.load(); v += 1) {
      try {
        if (value_f32(exe.run(add.p, {{"a", scalar_f32(v)}, {"b", scalar_f32(1.f)}}, {add.out})[0]) != v + 1)
          wrong_.fetch_add(1);
      } catch (const Error&) {
        wrong_.fetch_add(1);
      }
      runs_.fetch_add(1);
    }
  }
  std::atomic<bool> stop_{false};
  std::atomic<int> runs_{0}, wrong_{0};
  std::thread thread_;
};

}  // namespace

TEST_CASE("steps cancelled mid-way again and again, beside steps that keep running on the same "
          "executor, fail with Cancelled alone and leave nothing behind",
          "[exec][fault]") {
  const SlowChain slow(10, 300);
  const RecvProgram recv;
  const AddProgram add;
  std::mt19937 rng(7);
  for (unsigned n : {1u, 2u}) {
    INFO("threads " << n);
    NothingLeaked leaks;
    {
      Executor exe(Place::cpu(), threads(n));
      SideSteps side(exe, add);
      int cancelled = 0, completed = 0;
      for (int cycle = 0; cycle < 60; ++cycle) {
        INFO("cycle " << cycle);
        const bool waits_on_recv = cycle % 3 == 2;
        CancellationManager cm;
        LocalRendezvous rendezvous;
        RunOptions options;
        options.cancellation = &cm;
        options.rendezvous = &rendezvous;
        options.timeout = 20s;  // a run that never ends fails instead
        DoneRecord rec;
        if (waits_on_recv) exe.run_async(recv.p, {}, {recv.out}, options, rec.callback());
        else exe.run_async(slow.p, {{"x", scalar_f32(float(cycle))}}, {slow.out}, options, rec.callback());
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
        cm.start_cancel();
        REQUIRE(rec.wait());
        if (!rec.error()) {
          CHECK_FALSE(waits_on_recv);
          CHECK(value_f32(rec.fetched().at(0)) == float(cycle));
          ++completed;
          continue;
        }
        INFO(rec.error()->message());
        CHECK(rec.error()->kind() == ErrorKind::Cancelled);
        // Named by the receive it stopped, or by the step when no op had started.
        CHECK_THAT(rec.error()->message(), Catch::Contains("was cancelled"));
        ++cancelled;
      }
      side.stop();
      CHECK(cancelled >= 20);  // every receive at least: it never gets a value
      CHECK(completed + cancelled == 60);
      CHECK(side.runs() > 0);
      CHECK(side.wrong() == 0);
      REQUIRE(drained(exe));
      CHECK(value_f32(exe.run(slow.p, {{"x", scalar_f32(5.f)}}, {slow.out})[0]) == 5.f);
    }
    leaks.check();
  }
}

TEST_CASE("a deadline that passes while a receive waits fails each step with DeadlineExceeded "
          "naming the receive, 50 times over, and the rendezvous serves the next step",
          "[exec][fault]") {
  const RecvProgram recv;
  for (unsigned n : {1u, 2u}) {
    INFO("threads " << n);
    NothingLeaked leaks;
    {
      Executor exe(Place::cpu(), threads(n));
      LocalRendezvous rendezvous;
      for (int step = 0; step < 50; ++step) {
        INFO("step " << step);
        RunOptions options;
        options.rendezvous = &rendezvous;
        options.timeout = 5ms;
        if (step % 2 == 0) {
          // Named by the receive it woke, unless (a loaded machine) the
          // deadline passed before the receive began to wait.
          const std::string message =
              KILN_CHECK_ERROR(exe.run(recv.p, {}, {recv.out}, options), DeadlineExceeded, {"deadline"});
          if (message.find("kiln.recv") != std::string::npos) CHECK_THAT(message, Catch::Contains("cpu;cpu;x;0:0"));
          continue;
        }
        DoneRecord rec;
        exe.run_async(recv.p, {}, {recv.out}, options, rec.callback());
        REQUIRE(rec.wait());
        REQUIRE(rec.error());
        CHECK(rec.error()->kind() == ErrorKind::DeadlineExceeded);
      }
      // None of the expired receives stayed behind to take this value.
      rendezvous.send(key_of("x"), scalar_f32(41.f));
      RunOptions next;
      next.rendezvous = &rendezvous;
      next.timeout = 20s;
      CHECK(value_f32(exe.run(recv.p, {}, {recv.out}, next)[0]) == 42.f);
      REQUIRE(drained(exe));
    }
    leaks.check();
  }
}

TEST_CASE("aborting a rendezvous under 1000 pending receives fails each waiting step once with the "
          "abort's error, and leaves nothing behind",
          "[exec][fault]") {
  constexpr int kReceives = 1000;
  NothingLeaked leaks;
  {
    Executor exe(Place::cpu(), threads(2));
    SECTION("1000 receives of one step") {
      Program p;
      Builder b(p);
      Value sum;
      for (int k = 0; k < kReceives; ++k) {
        Value x = b.create<RecvOp>("x" + std::to_string(k), DataType::Float32, Dims0{1}).result();
        sum = k == 0 ? x : b.create<AddOp>(sum, x).result();
      }
      LocalRendezvous rendezvous;
      RunOptions options;
      options.rendezvous = &rendezvous;
      options.timeout = 20s;
      DoneRecord rec;
      exe.run_async(p, {}, {sum}, options, rec.callback());
      for (int k = 0; k < kReceives / 2; ++k) rendezvous.send(key_of("x" + std::to_string(k)), scalar_f32(1.f));
      CHECK_FALSE(rec.wait(20ms));
      rendezvous.abort(Error(ErrorKind::Aborted, "the peer step failed"));
      REQUIRE(rec.wait());
      REQUIRE(rec.error());
      CHECK(rec.error()->kind() == ErrorKind::Aborted);
      CHECK_THAT(rec.error()->message(), Catch::Contains("the peer step failed"));
      CHECK(rec.calls() == 1);
      KILN_CHECK_ERROR(rendezvous.send(key_of("x0"), scalar_f32(1.f)), Aborted, {"the peer step failed"});
    }
    SECTION("1000 steps waiting on one key") {
      const RecvProgram recv;
      LocalRendezvous rendezvous;
      RunOptions options;
      options.rendezvous = &rendezvous;
      options.timeout = 20s;
      std::vector<DoneRecord> recs(kReceives);
      for (DoneRecord& rec : recs) exe.run_async(recv.p, {}, {recv.out}, options, rec.callback());
      CHECK(exe.runs_in_flight() == kReceives);
      rendezvous.abort(Error(ErrorKind::Aborted, "the peer step failed"));
      int aborted = 0;
      for (DoneRecord& rec : recs) {
        REQUIRE(rec.wait());
        CHECK(rec.calls() == 1);
        if (rec.error() && rec.error()->kind() == ErrorKind::Aborted) ++aborted;
      }
      CHECK(aborted == kReceives);
    }
    SECTION("the step's own kernel fails while its 1000 receives wait") {
      Program p;
      Builder b(p);
      Value sum = b.create<ThrowOp>(b.create<DataOp>("f", Dims0{1}).result()).result();
      for (int k = 0; k < kReceives; ++k)
        sum = b.create<AddOp>(sum, b.create<RecvOp>("x" + std::to_string(k), DataType::Float32, Dims0{1}).result())
                  .result();
      LocalRendezvous rendezvous;
      RunOptions options;
      options.rendezvous = &rendezvous;
      options.timeout = 20s;
      KILN_CHECK_ERROR(exe.run(p, {{"f", scalar_f32(1.f)}}, {sum}, options), OutOfRange, {"exec_test.throw"});
      CHECK(rendezvous.is_aborted());
    }
    REQUIRE(drained(exe));
  }
  leaks.check();
}

TEST_CASE("a kernel that throws at iteration k of a loop body fails the step with its error, "
          "structured and lowered alike, and the next steps are right",
          "[exec][fault]") {
  // i = 0; while (i < n) i = throw_at(i, k) + 1
  Program p;
  Builder b(p);
  Value n = b.create<DataOp>("n", Dims0{}, DataType::Int64).result();
  Value k = b.create<DataOp>("k", Dims0{}, DataType::Int64).result();
  Value i0 = b.create<FullOp>(Dims0{}, 0.0, DataType::Int64).result();
  auto loop = b.create<WhileOp>(b.create<LessThanOp>(i0, n).result(), std::vector<Value>{i0},
                                std::vector<Value>{n, k}, -1);
  Block& body = loop->region(0).emplace_block();
  Value i = body.add_argument(i0.type());
  Value bn = body.add_argument(n.type()), bk = body.add_argument(k.type());
  Builder bb(body);
  Value one = bb.create<FullOp>(Dims0{}, 1.0, DataType::Int64).result();
  Value i1 = bb.create<AddOp>(bb.create<ThrowAtOp>(i, bk).result(), one).result();
  bb.create<YieldOp>(std::vector<Value>{bb.create<LessThanOp>(i1, bn).result(), i1});
  const Value out = loop->result(0);
  auto i64 = [](std::int64_t v) { return Tensor::from_vector<std::int64_t>(Dims(), {v}); };
  NothingLeaked leaks;
  {
    kiln_test::BothWays exe(Place::cpu(), threads(1));
    for (std::int64_t at : {0, 1, 7, 99}) {
      INFO("throws at " << at);
      KILN_CHECK_ERROR(exe.run(p, {{"n", i64(100)}, {"k", i64(at)}}, {out}), OutOfRange,
                       {"throw_at", "failing at iteration " + std::to_string(at)});
      CHECK(exe.run(p, {{"n", i64(100)}, {"k", i64(-1)}}, {out})[0].to_vector<std::int64_t>().at(0) == 100);
      CHECK(exe.run(p, {{"n", i64(at)}, {"k", i64(at)}}, {out})[0].to_vector<std::int64_t>().at(0) == at);
    }
    CHECK(exe.lowered_runs() > 0);
  }
  leaks.check();
}

TEST_CASE("failing steps chained through run_async's done, each starting the next, run the chain "
          "to its end with one done per step",
          "[exec][fault]") {
  constexpr int kSteps = 300;
  const AddProgram add;
  Program throwing;
  Builder b(throwing);
  const Value thrown = b.create<ThrowOp>(b.create<DataOp>("x", Dims0{1}).result()).result();
  for (unsigned n : {1u, 2u}) {
    INFO("threads " << n);
    NothingLeaked leaks;
    {
      Executor exe(Place::cpu(), threads(n));
      std::mutex mutex;
      std::condition_variable cv;
      int dones = 0, right = 0, kernel_errors = 0, feed_errors = 0;
      // Step s: a good one (s % 3 == 0), a bad feed (1) or a throwing kernel (2).
      std::function<void(int)> start = [&](int s) {
        RunDone done = [&, s](const Error* error, std::vector<Tensor>&& fetched) {
          {
            std::lock_guard lock(mutex);
            ++dones;
            if (s % 3 == 0 && !error && value_f32(fetched.at(0)) == float(s) + 1) ++right;
            if (s % 3 == 1 && error && error->kind() == ErrorKind::InvalidArgument &&
                error->message().find("'b'") != std::string::npos)
              ++feed_errors;
            if (s % 3 == 2 && error && error->kind() == ErrorKind::OutOfRange) ++kernel_errors;
          }
          if (s + 1 < kSteps) start(s + 1);
          std::lock_guard lock(mutex);
          cv.notify_all();
        };
        if (s % 3 == 2) {
          exe.run_async(throwing, {{"x", scalar_f32(1.f)}}, {thrown}, {}, std::move(done));
          return;
        }
        const Tensor bv = s % 3 == 0 ? scalar_f32(1.f) : Tensor::from_vector<double>(Dims({1}), {1.0});
        exe.run_async(add.p, {{"a", scalar_f32(float(s))}, {"b", bv}}, {add.out}, {}, std::move(done));
      };
      start(0);
      {
        std::unique_lock lock(mutex);
        REQUIRE(cv.wait_for(lock, 30s, [&] { return dones == kSteps; }));
      }
      CHECK(right == kSteps / 3);
      CHECK(feed_errors == kSteps / 3);
      CHECK(kernel_errors == kSteps / 3);
      REQUIRE(drained(exe));
      CHECK(value_f32(exe.run(add.p, {{"a", scalar_f32(2.f)}, {"b", scalar_f32(3.f)}}, {add.out})[0]) == 5.f);
    }
    leaks.check();
  }
}

TEST_CASE("a step that runs the device out of memory fails with the allocator's error, and the next "
          "step on the same executor runs",
          "[exec][fault][cuda]") {
  if (cuda_device_count() == 0) {
    WARN("no CUDA device: the out-of-memory step is not tried");
    return;
  }
  // sum(a @ b) with a [m, 1] and b [1, m]: m = 2^20 asks for a 4 TiB product.
  Program p;
  Builder b(p);
  Value a = b.create<DataOp>("a", Dims0{-1, 1}).result();
  Value c = b.create<DataOp>("b", Dims0{1, -1}).result();
  const Value out = b.create<SumOp>(b.create<MatmulOp>(a, c).result(), Dims0{}, false).result();
  auto ones = [](std::int64_t m, bool column) {
    return Tensor::from_vector<float>(column ? Dims({m, 1}) : Dims({1, m}), std::vector<float>(std::size_t(m), 1.f));
  };
  Executor exe(Place::cuda(0));
  CHECK(exe.run(p, {{"a", ones(4, true)}, {"b", ones(4, false)}}, {out})[0].to_vector<float>().at(0) == 16.f);
  const Allocator& allocator = cuda_context(0).allocator();  // through the base: no CUDA symbol to link
  // A step's feeds that a queued kernel still read when released wait in
  // the deferred free queue, counted in use: drained before each count.
  deferred_free_queue().drain();
  const std::size_t in_use = allocator.stats().bytes_in_use;
  constexpr std::int64_t kHuge = std::int64_t{1} << 20;
  for (int attempt = 0; attempt < 2; ++attempt) {
    INFO("attempt " << attempt);
    KILN_CHECK_ERROR(exe.run(p, {{"a", ones(kHuge, true)}, {"b", ones(kHuge, false)}}, {out}), Unavailable,
                     {"matmul", "cuda allocator", "out of memory"});
    CHECK(exe.run(p, {{"a", ones(4, true)}, {"b", ones(4, false)}}, {out})[0].to_vector<float>().at(0) == 16.f);
    deferred_free_queue().drain();
    CHECK(allocator.stats().bytes_in_use <= in_use);
  }
}

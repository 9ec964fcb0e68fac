// Runtime building blocks (`./run bench runtime`), on one thread:
//   BENCH runtime.rendezvous.pair           ns: one LocalRendezvous::send then
//         one recv of that value on the same key (the recv finds it queued);
//         a one-element f32 tensor, whose buffer reference the pair copies once
//   BENCH runtime.rendezvous.async_pair     ns: recv_async first (the waiter
//         queues), then the send that calls it back
//   BENCH runtime.cancellation.register     ns: CancellationManager
//         register_callback + deregister_callback of a small callback
// Each: the median over 15 repetitions of 200k operations, after a warm-up;
// each also as `<name>.cpu`, the median CPU time per operation.
//   BENCH runtime.run_async.overhead        ns: a training step of the seed
//         program (bench_models.h) by Executor::run_async, the caller
//         spinning (then yielding) until `done`, less the same step by Executor::run; the
//         median over 15 repetitions of 2000 steps of each, interleaved,
//         after the thread plan has settled (Executor at its default
//         threads). Also .run and .async: the two step times, ns;
//         .overhead.cpu: the same difference in process CPU time (both
//         threads); .pipelined: ns per run_async when 64 are started back to
//         back and then waited for (hand-offs overlap); .caller_thread.overhead:
//         the same difference for runs started with
//         RunOptions::run_in_caller_thread (no hand-off to a worker and back).
//   BENCH runtime.partitioned.ratio         a step of a wide program (two
//         independent chains of 12 tanh(v·x) on 96×96 f32, joined by an add)
//         split over two places — one executor each (a worker of its own),
//         a recv for the join — over the same program on one executor of 2
//         threads (goal <= 1.1); also .step and .whole.step, µs (medians of
//         15 repetitions of 200 steps, fresh executors each).
#include <atomic>
#include <cstdio>
#include <memory>
#include <thread>
#include <string>
#include <vector>

#include "bench_models.h"
#include "bench_util.h"

#include "kiln/exec/partitioner.h"
#include "kiln/runtime/cancellation.h"
#include "kiln/runtime/rendezvous.h"
#include "kiln/runtime/spin_lock.h"

namespace bench {
namespace {

constexpr int kReps = 15;
constexpr int kOps = 200'000;
// A waiter for a step of about a microsecond spins (pause) this many times
// before it yields its core: a yield is a system call, slower than the step.
constexpr int kSpinsBeforeYield = 1 << 16;

// Emits `name` (median wall ns per op) and `name.cpu` (median CPU ns per op:
// on a loaded machine the wall time counts the time this thread waited for a
// core, the CPU time does not).
template <typename F>
void measure(const std::string& name, F&& op) {
  for (int i = 0; i < kOps / 10; ++i) op(i);  // warm-up: queues and tables sized
  std::vector<Sample> samples;
  for (int r = 0; r < kReps; ++r) {
    Sample s = time_both([&] {
      for (int i = 0; i < kOps; ++i) op(i);
    });
    samples.push_back({s.wall / kOps, s.cpu / kOps});
  }
  const Sample m = median(samples);
  emit(name, m.wall, "ns");
  emit(name + ".cpu", m.cpu, "ns");
}

void rendezvous_pair() {
  kiln::LocalRendezvous r;
  const kiln::RendezvousKey key(kiln::Place::cpu(), kiln::Place::cpu(), "step/x");
  const kiln::Tensor t = kiln::Tensor::from_vector<float>({1}, {1.f});
  double sink = 0;
  measure("runtime.rendezvous.pair", [&](int) {
    r.send(key, t);
    sink += static_cast<double>(r.recv(key).tensor.numel());
  });
  if (sink < 0) std::puts("");
}

void rendezvous_async_pair() {
  kiln::LocalRendezvous r;
  const kiln::RendezvousKey key(kiln::Place::cpu(), kiln::Place::cpu(), "step/x");
  const kiln::Tensor t = kiln::Tensor::from_vector<float>({1}, {1.f});
  std::int64_t received = 0;
  measure("runtime.rendezvous.async_pair", [&](int) {
    r.recv_async(key, [&received](const kiln::Error*, kiln::RendezvousValue&& v) {
      received += v.tensor.numel();
    });
    r.send(key, t);
  });
  if (received < 0) std::puts("");
}

void cancellation_register() {
  kiln::CancellationManager cm;
  int runs = 0;
  measure("runtime.cancellation.register", [&](int) {
    kiln::CancellationToken token = cm.register_callback([&runs] { ++runs; });
    cm.deregister_callback(token);
  });
  if (runs != 0) std::puts("a deregistered callback ran");
}

void run_async_overhead() {
  auto m = seed_model();
  kiln::Executor exe;
  exe.run(m->startup);
  const std::vector<kiln::FetchTarget> fetch{m->loss};
  std::vector<kiln::Tensor> out(1);
  constexpr int kSteps = 2000;
  // Warm-up: the cost model calibrates and the thread plan is chosen.
  for (int i = 0; i < 3000; ++i) exe.run(m->main, m->feeds, fetch, out);
  std::atomic<bool> done{false};
  double sink = 0;
  auto async_step = [&] {
    // Relaxed: the flag is reset before the run that sets it is started.
    done.store(false, std::memory_order_relaxed);
    exe.run_async(m->main, m->feeds, fetch, {}, [&](const kiln::Error*, std::vector<kiln::Tensor>&& t) {
      if (!t.empty()) sink += static_cast<double>(t[0].numel());
      done.store(true, std::memory_order_release);  // the caller's acquire sees `sink`
    });
    // Spin briefly, then yield: on a loaded machine a waiter that only spins
    // can hold the core the worker needs.
    for (int spins = 0; !done.load(std::memory_order_acquire); ++spins) {
      if (spins < kSpinsBeforeYield) continue;
      else std::this_thread::yield();
    }
  };
  for (int i = 0; i < 1000; ++i) async_step();
  // The same started in the caller's thread: no hand-off to a worker.
  kiln::RunOptions inline_options;
  inline_options.run_in_caller_thread = true;
  auto inline_step = [&] {
    done.store(false, std::memory_order_relaxed);
    exe.run_async(m->main, m->feeds, fetch, inline_options,
                  [&](const kiln::Error*, std::vector<kiln::Tensor>&& t) {
                    if (!t.empty()) sink += static_cast<double>(t[0].numel());
                    done.store(true, std::memory_order_release);
                  });
    while (!done.load(std::memory_order_acquire)) std::this_thread::yield();  // done already
  };
  for (int i = 0; i < 1000; ++i) inline_step();
  // kInFlight runs started back to back, then waited for: the cost per run
  // when hand-offs overlap (throughput rather than latency).
  constexpr int kInFlight = 64;
  std::atomic<int> finished{0};
  auto pipelined = [&] {
    finished.store(0, std::memory_order_relaxed);
    for (int i = 0; i < kInFlight; ++i)
      exe.run_async(m->main, m->feeds, fetch, {}, [&](const kiln::Error*, std::vector<kiln::Tensor>&&) {
        finished.fetch_add(1, std::memory_order_release);
      });
    for (int spins = 0; finished.load(std::memory_order_acquire) != kInFlight; ++spins) {
      if (spins < kSpinsBeforeYield) continue;
      else std::this_thread::yield();
    }
  };
  std::vector<double> run_ns, async_ns, diff_ns, diff_cpu, piped_ns, inline_diff_ns;
  for (int r = 0; r < kReps; ++r) {
    const Sample a = time_both([&] {
      for (int i = 0; i < kSteps; ++i) exe.run(m->main, m->feeds, fetch, out);
    });
    const Sample b = time_both([&] {
      for (int i = 0; i < kSteps; ++i) async_step();
    });
    const double c = time_ns([&] {
      for (int i = 0; i < kSteps; ++i) inline_step();
    });
    inline_diff_ns.push_back((c - a.wall) / kSteps);
    run_ns.push_back(a.wall / kSteps);
    async_ns.push_back(b.wall / kSteps);
    diff_ns.push_back((b.wall - a.wall) / kSteps);
    diff_cpu.push_back((b.cpu - a.cpu) / kSteps);
    piped_ns.push_back(time_ns([&] {
                         for (int i = 0; i < kSteps / kInFlight; ++i) pipelined();
                       }) /
                       (kSteps / kInFlight * kInFlight));
  }
  emit("runtime.run_async.run", median(run_ns), "ns");
  emit("runtime.run_async.async", median(async_ns), "ns");
  emit("runtime.run_async.overhead", median(diff_ns), "ns");
  emit("runtime.run_async.overhead.cpu", median(diff_cpu), "ns");
  emit("runtime.run_async.pipelined", median(piped_ns), "ns");
  emit("runtime.run_async.caller_thread.overhead", median(inline_diff_ns), "ns");
  if (sink < 0) std::puts("");
}


void partitioned_ratio() {
  constexpr std::int64_t kN = 96;
  constexpr int kDepth = 12, kSteps = 200, kReps = 15;
  const kiln::Place a = kiln::Place::host_stream(0), b = kiln::Place::host_stream(1);
  kiln::Program p;
  kiln::Builder bl(p);
  kiln::Value x = bl.create<kiln::DataOp>("x", std::vector<std::int64_t>{kN, kN}).result();
  kiln::Value chain[2];
  for (int w = 0; w < 2; ++w) {
    kiln::Value v = x;
    for (int d = 0; d < kDepth; ++d) {
      auto mm = bl.create<kiln::MatmulOp>(v, x);
      auto t = bl.create<kiln::TanhOp>(mm.result());
      kiln::set_op_place(mm.operation(), w == 0 ? a : b);
      kiln::set_op_place(t.operation(), w == 0 ? a : b);
      v = t.result();
    }
    chain[w] = v;
  }
  kiln::Value out = bl.create<kiln::AddOp>(chain[0], chain[1]).result();
  std::vector<float> xs(static_cast<std::size_t>(kN * kN));
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = 0.01f * static_cast<float>(i % 97) - 0.4f;
  const kiln::FeedMap feed{{"x", kiln::Tensor::from_vector<float>({kN, kN}, xs)}};

  const std::vector<kiln::FetchTarget> fetch{out};
  const kiln::PartitionedProgram pp = kiln::partition(p, {out}, a);
  // Each repetition makes its executors afresh and lets them go after
  // timing: idle pool workers of the other setup would share the cores.
  // A part's executor of 2 threads has a worker of its own for run_async
  // (with one, every part would queue on the one shared async thread).
  auto time_whole = [&] {
    kiln::Executor whole(kiln::Place::cpu(), {.num_threads = 2, .thread_plan = kiln::ThreadPlan::Graph});
    std::vector<kiln::Tensor> res(1);
    for (int i = 0; i < 30; ++i) whole.run(p, feed, fetch, res);
    return time_ns([&] {
      for (int i = 0; i < kSteps; ++i) whole.run(p, feed, fetch, res);
    });
  };
  auto time_parts = [&] {
    const kiln::ExecutionOptions one_worker{.num_threads = 2, .thread_plan = kiln::ThreadPlan::Graph};
    kiln::Executor ea(kiln::Place::cpu(), one_worker), eb(kiln::Place::cpu(), one_worker);
    kiln::Executor* exes[] = {&ea, &eb};
    for (int i = 0; i < 30; ++i) kiln::run_partitioned(pp, exes, feed);
    return time_ns([&] {
      for (int i = 0; i < kSteps; ++i) kiln::run_partitioned(pp, exes, feed);
    });
  };
  std::vector<double> w_us, p_us, ratio;
  for (int r = 0; r < kReps; ++r) {
    const double tw = time_whole(), tp = time_parts();
    w_us.push_back(tw / kSteps / 1e3);
    p_us.push_back(tp / kSteps / 1e3);
    ratio.push_back(tp / tw);
  }
  emit("runtime.partitioned.step", median(p_us), "us");
  emit("runtime.partitioned.whole.step", median(w_us), "us");
  emit("runtime.partitioned.ratio", median(ratio), "ratio");
}

}  // namespace
}  // namespace bench

int main(int argc, char** argv) {
  const std::string filter = argc > 1 ? argv[1] : "";
  if (!filter.empty() && filter != "runtime" && filter.rfind("runtime.", 0) != 0) return 0;
  auto wants = [&](const std::string& name) {
    return filter.empty() || filter == "runtime" || name.rfind(filter, 0) == 0;
  };
  if (wants("runtime.rendezvous.pair")) bench::rendezvous_pair();
  if (wants("runtime.rendezvous.async_pair")) bench::rendezvous_async_pair();
  if (wants("runtime.cancellation.register")) bench::cancellation_register();
  if (wants("runtime.run_async.overhead")) bench::run_async_overhead();
  if (wants("runtime.partitioned.ratio")) bench::partitioned_ratio();
  return 0;
}

// CPU kernels of the executor tests' own ops (exec_test_util.h).
#include <chrono>
#include <cstring>
#include <map>
#include <stdexcept>
#include <thread>

#include "exec/exec_test_util.h"
#include "kiln/kernel/blas.h"
#include "kiln/kernel/kernel_registry.h"
#include "kiln/runtime/deadline_timer.h"

namespace kiln_exec_test {
namespace {

using namespace kiln;

std::mutex g_mutex;
std::vector<std::int64_t> g_log;                       // guarded by g_mutex
std::map<std::int64_t, const Variable*> g_watch;        // guarded by g_mutex
std::map<std::int64_t, int> g_probe;                    // guarded by g_mutex

void copy_input(KernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  Tensor& out = ctx.alloc_output(0, in.dims(), in.dtype());
  if (in.bytes()) std::memcpy(out.raw_data(), in.raw_data(), in.bytes());
}

void identity_kernel(KernelContext& ctx) { copy_input(ctx); }

void throw_kernel(KernelContext& ctx) {
  if (throw_enabled().load(std::memory_order_relaxed)) {
    if (ctx.attrs<ThrowOp>().std_exception) throw std::runtime_error("boom (std)");
    throw_error(ErrorKind::OutOfRange, "boom (kiln)");
  }
  copy_input(ctx);
}

void record_kernel(KernelContext& ctx) {
  {
    std::lock_guard lock(g_mutex);
    g_log.push_back(ctx.attrs<RecordOp>().tag);
  }
  copy_input(ctx);
}

void probe_kernel(KernelContext& ctx) {
  const std::int64_t tag = ctx.attrs<ProbeOp>().tag;
  {
    std::lock_guard lock(g_mutex);
    auto it = g_watch.find(tag);
    if (it != g_watch.end()) g_probe[tag] = it->second->is_initialized() ? 1 : 0;
  }
  copy_input(ctx);
}

std::atomic<int> g_slow_in_flight{0};
std::atomic<int> g_saw_slow{-1};
std::atomic<bool> g_waiter_pending{false};  // set by reset_saw_slow, cleared by wait_slow

// While a wait_slow kernel is expected (reset_saw_slow) and has not looked
// yet, a slow kernel stays in flight (at most 5 s): a thread descheduled
// between handing `slow` to the pool and starting `wait` must not make the
// two miss each other when they do run concurrently.
void slow_kernel(KernelContext& ctx) {
  g_slow_in_flight.fetch_add(1);
  std::this_thread::sleep_for(std::chrono::microseconds(ctx.attrs<SlowOp>().micros));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (g_waiter_pending.load() && wait_slow_enabled().load() &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  copy_input(ctx);
  g_slow_in_flight.fetch_sub(1);
}

void wait_slow_kernel(KernelContext& ctx) {
  if (!wait_slow_enabled().load()) return copy_input(ctx);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  int saw = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    if (g_slow_in_flight.load() > 0) {
      saw = 1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  g_saw_slow.store(saw);
  g_waiter_pending.store(false);
  copy_input(ctx);
}

std::map<std::int64_t, std::thread::id> g_threads;  // guarded by g_mutex
std::map<std::int64_t, int> g_kernel_threads;        // guarded by g_mutex

void thread_kernel(KernelContext& ctx) {
  {
    std::lock_guard lock(g_mutex);
    g_threads[ctx.attrs<ThreadOp>().tag] = std::this_thread::get_id();
    g_kernel_threads[ctx.attrs<ThreadOp>().tag] = kernel_threads_on_this_thread();
  }
  copy_input(ctx);
}

std::atomic<std::int64_t> g_last_step{-1};

void step_id_kernel(KernelContext& ctx) {
  g_last_step.store(ctx.step() ? ctx.step()->step_id : 0);
  copy_input(ctx);
}

void async_identity_kernel(KernelContext& ctx, AsyncKernelDone done) {
  const std::int64_t delay = ctx.attrs<AsyncIdentityOp>().delay_us;
  auto finish = [&ctx, done] {
    try {
      copy_input(ctx);
    } catch (const Error& e) {
      done(&e);
      return;
    }
    done(nullptr);
  };
  if (delay == 0) {
    finish();
    return;
  }
  DeadlineTimer::shared().schedule(std::chrono::steady_clock::now() + std::chrono::microseconds(delay),
                                   finish);
}

}  // namespace

std::int64_t last_step_id() { return g_last_step.load(); }

KILN_REGISTER_KERNEL(StepIdOp, Cpu, Undefined, step_id_kernel);
KILN_REGISTER_ASYNC_KERNEL(AsyncIdentityOp, Cpu, Undefined, async_identity_kernel);
KILN_REGISTER_KERNEL(WaitSlowOp, Cpu, Undefined, wait_slow_kernel);
KILN_REGISTER_KERNEL(ThreadOp, Cpu, Undefined, thread_kernel);
KILN_REGISTER_KERNEL(IdentityOp, Cpu, Undefined, identity_kernel);
KILN_REGISTER_KERNEL(ThrowOp, Cpu, Undefined, throw_kernel);
KILN_REGISTER_KERNEL(RecordOp, Cpu, Undefined, record_kernel);
KILN_REGISTER_KERNEL(ProbeOp, Cpu, Undefined, probe_kernel);
KILN_REGISTER_KERNEL(SlowOp, Cpu, Undefined, slow_kernel);

int slow_in_flight() { return g_slow_in_flight.load(); }

int saw_slow_in_flight() { return g_saw_slow.load(); }
void reset_saw_slow() {
  g_saw_slow.store(-1);
  g_waiter_pending.store(true);
}

std::thread::id thread_of(std::int64_t tag) {
  std::lock_guard lock(g_mutex);
  auto it = g_threads.find(tag);
  return it == g_threads.end() ? std::thread::id() : it->second;
}

int kernel_threads_of(std::int64_t tag) {
  std::lock_guard lock(g_mutex);
  auto it = g_kernel_threads.find(tag);
  return it == g_kernel_threads.end() ? -1 : it->second;
}

void clear_threads() {
  std::lock_guard lock(g_mutex);
  g_threads.clear();
  g_kernel_threads.clear();
}

std::atomic<bool>& wait_slow_enabled() {
  static std::atomic<bool> on{true};
  return on;
}

std::atomic<bool>& throw_enabled() {
  static std::atomic<bool> on{true};
  return on;
}

std::vector<std::int64_t> run_log() {
  std::lock_guard lock(g_mutex);
  return g_log;
}

void clear_run_log() {
  std::lock_guard lock(g_mutex);
  g_log.clear();
}

void watch(std::int64_t tag, const Variable* var) {
  std::lock_guard lock(g_mutex);
  g_watch[tag] = var;
  g_probe.erase(tag);
}

int probe_result(std::int64_t tag) {
  std::lock_guard lock(g_mutex);
  auto it = g_probe.find(tag);
  return it == g_probe.end() ? -1 : it->second;
}

void clear_probes() {
  std::lock_guard lock(g_mutex);
  g_watch.clear();
  g_probe.clear();
}

Tensor filled_f32(const std::vector<std::int64_t>& dims, float value) {
  std::int64_t n = 1;
  for (auto d : dims) n *= d;
  return Tensor::from_vector<float>(Dims(dims), std::vector<float>(static_cast<std::size_t>(n), value));
}

}  // namespace kiln_exec_test

// Soak: many training steps through run_async, some cancelled at a random
// moment and some given a deadline they may miss, as a long-running service
// sees them. Reports, per model, the steps that completed, the failures it
// injected, every other error (goal: none) and how much the process grew
// after warm-up (RSS and the CPU allocator's bytes in use; goal: 0):
// `./run bench soak`. 10^5 steps of the seed model, 10^3 of the small GPT.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench_models.h"
#include "bench_util.h"
#include "kiln/runtime/allocator.h"
#include "kiln/runtime/cancellation.h"
#include "kiln/runtime/cpu_allocator.h"

namespace bench {
namespace {

double rss_kib() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return double(resident) * double(sysconf(_SC_PAGESIZE)) / 1024.0;
}

// One step's end, waited for by the thread that started it.
class StepDone {
 public:
  kiln::RunDone callback() {
    return [this](const kiln::Error* error, std::vector<kiln::Tensor>&& fetched) {
      std::lock_guard lock(mutex_);
      if (error) {
        kind_ = error->kind();
        message_ = error->message();
      } else {
        loss_ = fetched.at(0).to_vector<float>().at(0);
      }
      done_ = true;
      cv_.notify_all();  // under the lock: the record may go once it is released
    };
  }
  // False when no done came within a minute (a hang: counted as an error).
  bool wait() {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, std::chrono::minutes(1), [this] { return done_; });
  }
  bool failed() const { return kind_.has_value(); }
  kiln::ErrorKind kind() const { return *kind_; }
  const std::string& message() const { return message_; }
  float loss() const { return loss_; }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::optional<kiln::ErrorKind> kind_;
  std::string message_;
  float loss_ = 0;
};

void spin_for(std::chrono::nanoseconds d) {
  const auto until = Clock::now() + d;
  while (Clock::now() < until) {
  }
}

struct SoakCounts {
  long completed = 0, cancelled = 0, past_deadline = 0, unexpected = 0;
  std::string first_unexpected;
};

// What one step was given: nothing, a cancellation at a random moment, or
// a random deadline; and whether its end is one the soak expects.
enum class Fault { None, Cancel, Deadline };

void count(SoakCounts& c, Fault fault, const StepDone& done) {
  auto unexpected = [&](const std::string& what) {
    if (c.unexpected++ == 0) c.first_unexpected = what;
  };
  if (!done.failed()) {
    if (std::isfinite(done.loss())) ++c.completed;
    else unexpected("a loss that is not finite");
  } else if (fault == Fault::Cancel && done.kind() == kiln::ErrorKind::Cancelled) {
    ++c.cancelled;
  } else if (fault == Fault::Deadline && done.kind() == kiln::ErrorKind::DeadlineExceeded) {
    ++c.past_deadline;
  } else {
    unexpected(done.message());
  }
}

// `steps` steps of `m`, one in flight at a time; 1 in 10 cancelled after a
// random wait of up to twice the typical step (run_async to done), 1 in 10
// given a deadline of up to twice it. Growth is measured from the end of
// the first quarter (warm-up: the thread plan's calibration, the memory
// plan, the allocator's caches) to the end.
void soak(const std::string& name, Model& m, long steps) {
  kiln::Executor exe;
  exe.run(m.startup);
  const std::vector<kiln::FetchTarget> fetch{m.loss};
  std::vector<double> warm_ns;
  for (int i = 0; i < 50; ++i)
    warm_ns.push_back(time_ns([&] {
      StepDone done;
      exe.run_async(m.main, m.feeds, fetch, {}, done.callback());
      done.wait();
    }));
  const auto typical = std::chrono::nanoseconds(std::int64_t(median(warm_ns)));
  std::mt19937_64 rng(42);
  SoakCounts c;
  double rss_warm = 0;
  std::size_t bytes_warm = 0;
  const auto t0 = Clock::now();
  for (long s = 0; s < steps; ++s) {
    if (s == steps / 4) rss_warm = rss_kib(), bytes_warm = kiln::cpu_allocator().bytes_in_use();
    if (detail() && s % (steps / 10) == 0)
      std::printf("# %s: step %ld, rss %.0f KiB, allocator %zu bytes in use\n", name.c_str(), s, rss_kib(),
                  kiln::cpu_allocator().bytes_in_use());
    const std::uint64_t r = rng();
    const Fault fault = r % 10 == 0 ? Fault::Cancel : r % 10 == 1 ? Fault::Deadline : Fault::None;
    const auto at = std::chrono::nanoseconds((r >> 8) % std::uint64_t(2 * typical.count() + 1));
    kiln::CancellationManager cancel;
    kiln::RunOptions options;
    if (fault == Fault::Cancel) options.cancellation = &cancel;
    if (fault == Fault::Deadline) options.timeout = at + std::chrono::nanoseconds(1);
    StepDone done;
    exe.run_async(m.main, m.feeds, fetch, options, done.callback());
    if (fault == Fault::Cancel) {
      spin_for(at);
      cancel.start_cancel();
    }
    if (!done.wait()) {
      ++c.unexpected;
      c.first_unexpected = "a step whose done never came";
      break;
    }
    count(c, fault, done);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  emit(name + ".steps_completed", double(c.completed), "steps");
  emit(name + ".steps_failed_as_injected", double(c.cancelled + c.past_deadline), "steps");
  emit(name + ".unexpected_errors", double(c.unexpected), "errors");
  emit(name + ".rss_growth", rss_kib() - rss_warm, "KiB");
  emit(name + ".allocator_growth", (double(kiln::cpu_allocator().bytes_in_use()) - double(bytes_warm)) / 1024.0,
       "KiB");
  emit(name + ".step_us", seconds * 1e6 / double(steps), "us");
  if (c.unexpected) std::printf("# %s: first unexpected error: %s\n", name.c_str(), c.first_unexpected.c_str());
  if (detail())
    std::printf("# %s: %ld completed, %ld cancelled, %ld past their deadline, typical step %.1f us\n",
                name.c_str(), c.completed, c.cancelled, c.past_deadline, double(typical.count()) / 1e3);
}

}  // namespace
}  // namespace bench

int main(int argc, char** argv) {
  const std::string filter = argc > 1 ? argv[1] : "";
  if (!filter.empty() && filter != "soak" && filter.rfind("soak.", 0) != 0) return 0;
  auto wants = [&](const std::string& name) {
    return filter.empty() || filter == "soak" || name.rfind(filter, 0) == 0;
  };
  if (wants("soak.seed")) bench::soak("soak.seed", *bench::seed_model(), 100000);
  if (wants("soak.gpt")) bench::soak("soak.gpt", *bench::gpt_model(), 1000);
  return 0;
}

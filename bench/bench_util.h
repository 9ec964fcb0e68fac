// What the benchmark executables share: timing (wall and process CPU time),
// medians, the `BENCH <name> <value> <unit>` line, and the KILN_BENCH_DETAIL
// switch.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

namespace bench {

using Clock = std::chrono::steady_clock;

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename F>
double time_ns(F&& f) {
  auto t0 = Clock::now();
  f();
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
}

inline double process_cpu_ns() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) * 1e9 + double(t.tv_nsec);
}

// Wall time, and the CPU time of all the process's threads: on a shared,
// loaded machine a step of milliseconds is often descheduled part-way, which
// the wall time counts and the CPU time does not.
struct Sample {
  double wall = 0, cpu = 0;
};

template <typename F>
Sample time_both(F&& f) {
  const double c0 = process_cpu_ns();
  const double w = time_ns(f);
  return {w, process_cpu_ns() - c0};
}

inline Sample median(const std::vector<Sample>& v) {
  std::vector<double> w, c;
  for (const auto& x : v) {
    w.push_back(x.wall);
    c.push_back(x.cpu);
  }
  return {median(w), median(c)};
}

inline void emit(const std::string& name, double v, const char* unit) {
  std::printf("BENCH %s %.3f %s\n", name.c_str(), v, unit);
  std::fflush(stdout);
}

// KILN_BENCH_DETAIL set (and not "0"): print programs and breakdowns too.
inline bool detail() {
  const char* d = std::getenv("KILN_BENCH_DETAIL");
  return d && *d && std::strcmp(d, "0") != 0;
}

}  // namespace bench

#include "kiln/runtime/cancellation.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "catch.hpp"

using kiln::CancellationManager;
using kiln::CancellationToken;
using kiln::kNoCancellationToken;

TEST_CASE("start_cancel runs every registered callback exactly once", "[runtime][cancel]") {
  CancellationManager cm;
  CHECK_FALSE(cm.is_cancelled());
  std::vector<int> runs(5, 0);
  for (int i = 0; i < 5; ++i) {
    CancellationToken t = cm.register_callback([&runs, i] { ++runs[i]; });
    CHECK(t != kNoCancellationToken);
  }
  cm.start_cancel();
  cm.start_cancel();
  CHECK(cm.is_cancelled());
  CHECK(runs == std::vector<int>(5, 1));
}

TEST_CASE("a deregistered callback does not run and its token cannot be deregistered twice",
          "[runtime][cancel]") {
  CancellationManager cm;
  int a = 0, b = 0;
  CancellationToken ta = cm.register_callback([&a] { ++a; });
  CancellationToken tb = cm.register_callback([&b] { ++b; });
  CHECK(cm.deregister_callback(ta));
  CHECK_FALSE(cm.deregister_callback(ta));
  // The freed slot is reused; the stale token must not reach the new callback.
  int c = 0;
  CancellationToken tc = cm.register_callback([&c] { ++c; });
  CHECK(tc != ta);
  CHECK_FALSE(cm.deregister_callback(ta));
  cm.start_cancel();
  CHECK(a == 0);
  CHECK(b == 1);
  CHECK(c == 1);
  CHECK_FALSE(cm.deregister_callback(tb));  // it ran
  CHECK_FALSE(cm.deregister_callback(kNoCancellationToken));
}

TEST_CASE("registering after cancellation returns no token and keeps nothing",
          "[runtime][cancel]") {
  CancellationManager cm;
  cm.start_cancel();
  bool ran = false;
  CHECK(cm.register_callback([&ran] { ran = true; }) == kNoCancellationToken);
  cm.start_cancel();
  CHECK_FALSE(ran);
}

TEST_CASE("a callback may register and deregister on its own manager while cancelling",
          "[runtime][cancel]") {
  CancellationManager cm;
  int other_runs = 0;
  CancellationToken other = cm.register_callback([&other_runs] { ++other_runs; });
  bool registered_late = true, deregistered = true;
  CancellationToken first = cm.register_callback([&] {
    registered_late = cm.register_callback([] {}) != kNoCancellationToken;
    deregistered = cm.deregister_callback(other);  // must not wait for itself
  });
  CHECK(first != kNoCancellationToken);
  cm.start_cancel();
  CHECK_FALSE(registered_late);
  CHECK_FALSE(deregistered);
  CHECK(other_runs == 1);
}

TEST_CASE("deregister_callback waits while the callback runs on another thread",
          "[runtime][cancel]") {
  CancellationManager cm;
  std::atomic<bool> started{false}, finished{false};
  CancellationToken t = cm.register_callback([&] {
    started = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    finished = true;
  });
  std::thread canceller([&cm] { cm.start_cancel(); });
  while (!started) std::this_thread::yield();
  CHECK_FALSE(cm.deregister_callback(t));
  CHECK(finished);  // deregister returned only after the callback finished
  canceller.join();
}

TEST_CASE("callbacks run exactly once when cancellation races registration and deregistration",
          "[runtime][cancel]") {
  // Per round: threads register (and deregister half of) callbacks while
  // another cancels. Each registered, not-deregistered callback must run
  // once; each deregistered or refused one never.
  constexpr int kRounds = 200, kThreads = 3, kPerThread = 40;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  int rounds = 0;
  for (; rounds < kRounds && std::chrono::steady_clock::now() < deadline; ++rounds) {
    CancellationManager cm;
    std::vector<std::atomic<int>> runs(kThreads * kPerThread);
    std::vector<int> expected(kThreads * kPerThread, 0);
    std::atomic<int> go{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        ++go;
        while (go.load() < kThreads + 1) std::this_thread::yield();
        for (int i = 0; i < kPerThread; ++i) {
          const int k = t * kPerThread + i;
          CancellationToken token = cm.register_callback([&runs, k] { ++runs[k]; });
          if (token == kNoCancellationToken) continue;  // refused: never runs
          if (i % 2 == 1 && cm.deregister_callback(token)) continue;  // removed in time
          expected[k] = 1;
        }
      });
    }
    ++go;
    while (go.load() < kThreads + 1) std::this_thread::yield();
    for (int i = 0; i < rounds % 7; ++i) std::this_thread::yield();
    cm.start_cancel();
    for (auto& th : threads) th.join();
    for (std::size_t k = 0; k < runs.size(); ++k) {
      INFO("round " << rounds << ", callback " << k);
      REQUIRE(runs[k].load() == expected[k]);
    }
  }
  CHECK(rounds > 0);
}

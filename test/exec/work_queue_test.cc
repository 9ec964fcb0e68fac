// WorkQueue: the host pool's queue — every task pushed runs exactly once,
// from any number of pushers, past what its lock-free ring holds; a queue
// may be destroyed as soon as the last task it ran says so.
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "kiln/exec/work_queue.h"

using namespace kiln;

namespace {

struct Counter {
  std::atomic<int> runs{0};
  std::vector<std::atomic<int>> per_task;
  explicit Counter(int n) : per_task(n) {}
};

void count(void* c, std::uint32_t i) {
  auto* counter = static_cast<Counter*>(c);
  counter->per_task[i].fetch_add(1, std::memory_order_relaxed);
  counter->runs.fetch_add(1, std::memory_order_release);
}

}  // namespace

TEST_CASE("every task pushed by four threads runs exactly once, more than the ring holds",
          "[exec][work_queue]") {
  constexpr int kPushers = 4, kPerPusher = 5000;
  Counter counter(kPushers * kPerPusher);
  {
    WorkQueue queue(2);
    std::vector<std::thread> pushers;
    for (int t = 0; t < kPushers; ++t)
      pushers.emplace_back([&, t] {
        for (int k = 0; k < kPerPusher; ++k)
          queue.push(WorkTask{&count, &counter, static_cast<std::uint32_t>(t * kPerPusher + k)});
      });
    for (auto& p : pushers) p.join();
    while (counter.runs.load(std::memory_order_acquire) != kPushers * kPerPusher) std::this_thread::yield();
  }
  int once = 0;
  for (auto& c : counter.per_task) once += c.load() == 1;
  CHECK(once == kPushers * kPerPusher);
}

TEST_CASE("tasks queued while every worker is busy run on the caller in try_run_one, past the ring",
          "[exec][work_queue]") {
  constexpr int kTasks = 3000;  // more than the ring's slots: the rest overflow
  Counter counter(kTasks);
  WorkQueue queue(1);
  std::atomic<bool> started{false}, release{false};
  struct Blocker {
    std::atomic<bool>* started;
    std::atomic<bool>* release;
  } blocker{&started, &release};
  queue.push(WorkTask{[](void* b, std::uint32_t) {
                        auto* bl = static_cast<Blocker*>(b);
                        bl->started->store(true, std::memory_order_release);
                        while (!bl->release->load(std::memory_order_acquire)) std::this_thread::yield();
                      },
                      &blocker, 0});
  while (!started.load(std::memory_order_acquire)) std::this_thread::yield();
  for (int k = 0; k < kTasks; ++k) queue.push(WorkTask{&count, &counter, static_cast<std::uint32_t>(k)});
  int ran_here = 0;
  while (queue.try_run_one()) ++ran_here;
  release.store(true, std::memory_order_release);
  CHECK(ran_here == kTasks);
  int once = 0;
  for (auto& c : counter.per_task) once += c.load() == 1;
  CHECK(once == kTasks);
}

TEST_CASE("a task pushed from outside the pool may destroy the queue: the push has finished with it",
          "[exec][work_queue]") {
  // The pattern of an asynchronous kernel's callback: its task finishes a
  // run whose owner then drops the pool while the pusher may still be in
  // push(). Under ThreadSanitizer or ASan a push touching the queue after
  // that reports.
  for (int round = 0; round < 200; ++round) {
    auto queue = std::make_unique<WorkQueue>(1);
    std::atomic<bool> ran{false};
    std::thread pusher([&] {
      queue->push(WorkTask{[](void* r, std::uint32_t) {
                             static_cast<std::atomic<bool>*>(r)->store(true, std::memory_order_release);
                           },
                           &ran, 0});
    });
    while (!ran.load(std::memory_order_acquire)) std::this_thread::yield();
    queue.reset();  // waits for the push in progress
    pusher.join();
  }
  SUCCEED();
}

namespace {
void record_name(void* out, std::uint32_t) {
  char name[16] = {};
  pthread_getname_np(pthread_self(), name, sizeof name);
  static_cast<std::atomic<std::string*>*>(out)->load()->assign(name);
  static_cast<std::atomic<std::string*>*>(out)->store(nullptr, std::memory_order_release);
}
}  // namespace

TEST_CASE("a pool's workers are named kiln-worker (what top -H and gdb show)", "[exec][work_queue]") {
  WorkQueue queue(1);
  std::string name;
  std::atomic<std::string*> out{&name};
  queue.push(WorkTask{&record_name, &out, 0});
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (out.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  REQUIRE_FALSE(out.load());
  CHECK(name == "kiln-worker");
}

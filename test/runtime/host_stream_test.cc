#include "kiln/runtime/host_stream.h"

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "catch.hpp"
#include "test_util.h"

using kiln::ErrorKind;
using kiln::HostEvent;
using kiln::HostStream;
using kiln_test::Gate;
using kiln_test::error_of;

namespace {

// A stream of another kind, to check the host classes reject it.
struct OtherStream final : kiln::Stream {
  kiln::Place place() const noexcept override { return kiln::Place::cuda(0); }
  void enqueue(kiln::Task) override {}
  void wait(const kiln::Event&) override {}
  void synchronize() override {}
  bool query() const override { return true; }
  std::unique_ptr<kiln::Event> create_event() const override { return nullptr; }
};
struct OtherEvent final : kiln::Event {
  void record(kiln::Stream&) override {}
  bool query() const override { return true; }
  void synchronize() const override {}
};

}  // namespace

TEST_CASE("a host stream runs its tasks in order on its own thread", "[runtime][stream]") {
  HostStream s(3);
  CHECK(s.place() == kiln::Place::host_stream(3));
  std::vector<int> order;
  std::thread::id worker;
  for (int i = 0; i < 1000; ++i)
    s.enqueue([&, i] {
      order.push_back(i);
      worker = std::this_thread::get_id();
    });
  s.synchronize();
  REQUIRE(order.size() == 1000);
  for (int i = 0; i < 1000; ++i) CHECK(order[i] == i);
  CHECK(worker != std::this_thread::get_id());
  CHECK(s.enqueued_count() == 1000);
  CHECK(s.completed_count() == 1000);
  CHECK_FALSE(s.on_stream_thread());
}

TEST_CASE("enqueue returns before the task runs and query says when it has", "[runtime][stream]") {
  HostStream s;
  Gate gate;
  std::atomic<bool> ran{false};
  s.enqueue([&] {
    gate.wait();
    ran = true;
  });
  CHECK_FALSE(s.query());
  CHECK_FALSE(ran);
  gate.open();
  s.synchronize();
  CHECK(ran);
  CHECK(s.query());
}

TEST_CASE("a task may hold move-only captures, released once it has run", "[runtime][stream]") {
  HostStream s;
  auto p = std::make_shared<int>(5);
  std::weak_ptr<int> w = p;
  int seen = 0;
  s.enqueue([q = std::move(p), &seen] { seen = *q; });
  s.synchronize();
  CHECK(seen == 5);
  CHECK(w.expired());
}

TEST_CASE("an empty task is an InvalidArgument error", "[runtime][stream]") {
  HostStream s;
  auto e = error_of([&] { s.enqueue(kiln::Task{}); });
  CHECK(e.kind() == ErrorKind::InvalidArgument);
  CHECK_THAT(e.message(), Catch::Contains("host_stream:0") && Catch::Contains("empty task"));
}

TEST_CASE("an event completes when the work before it on its stream has run", "[runtime][stream][event]") {
  HostStream s;
  HostEvent e;
  CHECK(e.query());  // never recorded: complete
  e.synchronize();
  Gate gate;
  s.enqueue([&] { gate.wait(); });
  e.record(s);
  CHECK_FALSE(e.query());
  s.enqueue([] {});  // later work is not part of the event
  gate.open();
  e.synchronize();
  CHECK(e.query());
  s.synchronize();
}

TEST_CASE("an event recorded on an idle stream is already complete", "[runtime][stream][event]") {
  HostStream s;
  s.enqueue([] {});
  s.synchronize();
  HostEvent e;
  e.record(s);
  CHECK(e.query());
}

TEST_CASE("re-recording an event moves it to the newer work", "[runtime][stream][event]") {
  HostStream a, b;
  HostEvent e;
  e.record(a);
  CHECK(e.query());
  Gate gate;
  b.enqueue([&] { gate.wait(); });
  e.record(b);
  CHECK_FALSE(e.query());
  gate.open();
  e.synchronize();
  CHECK(e.query());
}

TEST_CASE("a task on stream B waiting for an event recorded on A runs after A's earlier task",
          "[runtime][stream][event]") {
  HostStream a(0), b(1);
  Gate gate;
  std::atomic<int> step{0};
  int b_saw = -1;
  a.enqueue([&] {
    gate.wait();
    step.store(1);
  });
  HostEvent e;
  e.record(a);
  b.wait(e);  // returns at once: it does not block the caller
  b.enqueue([&] { b_saw = step.load(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK_FALSE(b.query());  // B is held back by the event
  CHECK(b_saw == -1);
  gate.open();
  b.synchronize();
  CHECK(b_saw == 1);
  a.synchronize();
}

TEST_CASE("work enqueued on B before the wait is not held back by the event", "[runtime][stream][event]") {
  HostStream a, b;
  Gate gate;
  a.enqueue([&] { gate.wait(); });
  HostEvent e;
  e.record(a);
  std::atomic<bool> early{false};
  b.enqueue([&] { early = true; });
  b.wait(e);
  b.enqueue([] {});
  while (!early) std::this_thread::yield();
  CHECK_FALSE(b.query());
  gate.open();
  b.synchronize();
  a.synchronize();
}

TEST_CASE("waiting for a never-recorded or own-stream event does not hold the stream", "[runtime][stream][event]") {
  HostStream s;
  HostEvent never;
  s.wait(never);
  HostEvent own;
  Gate gate;
  s.enqueue([&] { gate.wait(); });
  own.record(s);
  s.wait(own);  // in-order already: no wait task, no deadlock
  bool ran = false;
  s.enqueue([&] { ran = true; });
  gate.open();
  s.synchronize();
  CHECK(ran);
  CHECK(s.enqueued_count() == 2);
}

TEST_CASE("events chain work across three streams", "[runtime][stream][event]") {
  HostStream s0(0), s1(1), s2(2);
  std::vector<int> log;
  std::mutex m;
  auto note = [&](int v) {
    std::lock_guard<std::mutex> g(m);
    log.push_back(v);
  };
  for (int round = 0; round < 200; ++round) {
    HostEvent e0, e1;
    s0.enqueue([&, round] { note(3 * round); });
    e0.record(s0);
    s1.wait(e0);
    s1.enqueue([&, round] { note(3 * round + 1); });
    e1.record(s1);
    s2.wait(e1);
    s2.enqueue([&, round] { note(3 * round + 2); });
    s2.synchronize();  // the events die at the end of the round
  }
  REQUIRE(log.size() == 600);
  for (int i = 0; i < 600; ++i) CHECK(log[i] == i);
}

TEST_CASE("an exception in a task surfaces at synchronize as a kiln::Error", "[runtime][stream]") {
  HostStream s(2);
  s.enqueue([] { throw std::runtime_error("kernel exploded"); });
  auto e = error_of([&] { s.synchronize(); });
  CHECK(e.kind() == ErrorKind::Internal);
  CHECK_THAT(e.message(), Catch::Contains("host_stream:2") && Catch::Contains("kernel exploded"));
  s.synchronize();  // reported once
}

TEST_CASE("a kiln::Error thrown by a task keeps its kind and message", "[runtime][stream]") {
  HostStream s;
  s.enqueue([] { kiln::throw_error(ErrorKind::InvalidArgument, "op 'matmul_3': bad shape"); });
  auto e = error_of([&] { s.synchronize(); });
  CHECK(e.kind() == ErrorKind::InvalidArgument);
  CHECK(e.message() == "op 'matmul_3': bad shape");
  s.enqueue([] { throw 42; });
  CHECK(error_of([&] { s.synchronize(); }).kind() == ErrorKind::Internal);
}

TEST_CASE("after a task throws, later tasks are skipped until synchronize reports it", "[runtime][stream]") {
  HostStream s;
  int ran = 0;
  s.enqueue([] { throw std::runtime_error("first"); });
  s.enqueue([] { throw std::runtime_error("second"); });
  s.enqueue([&] { ++ran; });
  HostEvent e;
  e.record(s);
  e.synchronize();  // skipped tasks still complete the event
  CHECK(e.query());
  auto err = error_of([&] { s.synchronize(); });
  CHECK_THAT(err.message(), Catch::Contains("first"));
  CHECK(ran == 0);
  s.enqueue([&] { ++ran; });
  s.synchronize();
  CHECK(ran == 1);
}

TEST_CASE("synchronize from a stream's own task is a PreconditionNotMet error", "[runtime][stream]") {
  HostStream s;
  s.enqueue([&] { s.synchronize(); });
  auto e = error_of([&] { s.synchronize(); });
  CHECK(e.kind() == ErrorKind::PreconditionNotMet);
  CHECK_THAT(e.message(), Catch::Contains("own tasks"));
}

TEST_CASE("synchronizing an event on its own stream's later work is a PreconditionNotMet error", "[runtime][stream][event]") {
  HostStream s;
  HostEvent e;
  HostEvent done_before;
  done_before.record(s);  // nothing queued: complete; fine to wait on from a task
  s.enqueue([&] {
    done_before.synchronize();
    e.record(s);  // covers this very task
    e.synchronize();
  });
  auto err = error_of([&] { s.synchronize(); });
  CHECK(err.kind() == ErrorKind::PreconditionNotMet);
  CHECK_THAT(err.message(), Catch::Contains("deadlock"));
}

TEST_CASE("host events and streams reject the other kind", "[runtime][stream][event]") {
  HostStream s;
  OtherStream other;
  HostEvent e;
  auto rec = error_of([&] { e.record(other); });
  CHECK(rec.kind() == ErrorKind::InvalidArgument);
  CHECK_THAT(rec.message(), Catch::Contains("cuda:0") && Catch::Contains("expected a host stream"));
  OtherEvent oe;
  auto w = error_of([&] { s.wait(oe); });
  CHECK(w.kind() == ErrorKind::InvalidArgument);
  CHECK_THAT(w.message(), Catch::Contains("expected a HostEvent"));
  auto made = s.create_event();
  REQUIRE(made);
  made->record(s);
  CHECK(made->query());
}

TEST_CASE("destroying a stream runs the tasks still queued", "[runtime][stream]") {
  std::atomic<int> ran{0};
  HostEvent e;
  {
    Gate gate;  // declared first: it must outlive the stream's queued tasks
    HostStream s;
    s.enqueue([&] { gate.wait(); });
    for (int i = 0; i < 10; ++i) s.enqueue([&] { ++ran; });
    e.record(s);
    gate.open();
  }
  CHECK(ran == 10);
  CHECK(e.query());  // the event outlives its stream
  e.synchronize();
}

TEST_CASE("many threads enqueueing on one stream lose no task", "[runtime][stream]") {
  HostStream s;
  std::atomic<int> count{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 5000; ++i) s.enqueue([&] { count.fetch_add(1, std::memory_order_relaxed); });
    });
  for (auto& t : threads) t.join();
  s.synchronize();
  CHECK(count == 20000);
  CHECK(s.query());
}

TEST_CASE("several threads waiting on events of one busy stream all wake", "[runtime][stream][event]") {
  HostStream s;
  std::atomic<bool> stop{false};
  std::thread producer([&] {
    while (!stop) {
      s.enqueue([] {});
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> waiters;
  // Catch2's assertions are not thread-safe: the waiters count, the test
  // thread checks.
  std::atomic<int> waits{0}, not_done{0};
  for (int t = 0; t < 3; ++t)
    waiters.emplace_back([&] {
      for (int i = 0; i < 300; ++i) {
        HostEvent e;
        e.record(s);
        e.synchronize();
        if (!e.query()) ++not_done;
        ++waits;
      }
    });
  for (auto& t : waiters) t.join();
  stop = true;
  producer.join();
  s.synchronize();
  CHECK(waits == 900);
  CHECK(not_done == 0);
}

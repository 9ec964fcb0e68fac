#include "kiln/runtime/rendezvous.h"

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "catch.hpp"
#include "test_util.h"

using kiln::CancellationManager;
using kiln::DataType;
using kiln::ErrorKind;
using kiln::LocalRendezvous;
using kiln::Place;
using kiln::RendezvousKey;
using kiln::RendezvousValue;
using kiln::Tensor;

namespace {

RendezvousKey key(const std::string& name, std::int64_t iter = 0) {
  return RendezvousKey(Place::cpu(), Place::cpu(), name, 0, iter);
}

Tensor scalar(float v) { return Tensor::from_vector<float>({}, {v}); }
float value_of(const RendezvousValue& v) { return v.tensor.to_vector<float>().at(0); }

// What a recv_async callback saw.
struct Outcome {
  std::atomic<bool> done{false};
  std::optional<kiln::Error> error;
  RendezvousValue value;
  kiln::RecvCallback callback() {
    return [this](const kiln::Error* e, RendezvousValue&& v) {
      if (e) {
        error.emplace(*e);
      } else {
        value = std::move(v);
      }
      done.store(true, std::memory_order_release);
    };
  }
  void wait() const {
    while (!done.load(std::memory_order_acquire)) std::this_thread::yield();
  }
};

}  // namespace

TEST_CASE("a rendezvous key's text form round-trips through parse", "[runtime][rendezvous]") {
  RendezvousKey k(Place::cpu(), Place::cuda(1), "grad/w", 7, 3);
  CHECK(k.to_string() == "cpu;cuda:1;grad/w;7:3");
  CHECK(k.name() == "grad/w");
  RendezvousKey p = RendezvousKey::parse(k.to_string());
  CHECK(p == k);
  CHECK(p.hash() == k.hash());
  CHECK(p.src() == Place::cpu());
  CHECK(p.dst() == Place::cuda(1));
  CHECK(p.name() == "grad/w");
  CHECK(p.frame_id() == 7);
  CHECK(p.iteration() == 3);
  CHECK(RendezvousKey::parse("host_stream:2;cpu;x;0:0").to_string() == "host_stream:2;cpu;x;0:0");
  // Keys differing in any field differ.
  CHECK_FALSE(RendezvousKey(Place::cpu(), Place::cpu(), "x", 0, 1) ==
              RendezvousKey(Place::cpu(), Place::cpu(), "x", 0, 2));
  CHECK_FALSE(RendezvousKey(Place::cpu(), Place::cpu(), "x", 1, 0) ==
              RendezvousKey(Place::cpu(), Place::cpu(), "x", 0, 0));
}

TEST_CASE("a malformed rendezvous key string gets an error naming it", "[runtime][rendezvous]") {
  KILN_CHECK_ERROR(RendezvousKey::parse("cpu;cpu;x"), InvalidArgument,
                   {"malformed rendezvous key 'cpu;cpu;x'", "src;dst;name;frame:iter"});
  KILN_CHECK_ERROR(RendezvousKey::parse("gpu:0;cpu;x;0:0"), InvalidArgument,
                   {"'gpu:0;cpu;x;0:0'", "source place 'gpu:0'"});
  KILN_CHECK_ERROR(RendezvousKey::parse("cpu;cuda:x;x;0:0"), InvalidArgument,
                   {"destination place 'cuda:x'"});
  KILN_CHECK_ERROR(RendezvousKey::parse("cpu;cpu;;0:0"), InvalidArgument, {"empty name"});
  KILN_CHECK_ERROR(RendezvousKey::parse("cpu;cpu;x;0"), InvalidArgument,
                   {"'cpu;cpu;x;0'", "no ':'"});
  KILN_CHECK_ERROR(RendezvousKey::parse("cpu;cpu;x;0:-1"), InvalidArgument, {"'0:-1'"});
  KILN_CHECK_ERROR(RendezvousKey::parse("cpu;cpu;x;0:1;y"), InvalidArgument, {"more than 4"});
  KILN_CHECK_ERROR(RendezvousKey(Place::cpu(), Place::cpu(), "a;b"), InvalidArgument,
                   {"'a;b'", "';'"});
}

TEST_CASE("a value sent before the recv is received", "[runtime][rendezvous]") {
  LocalRendezvous r;
  r.send(key("x"), scalar(1.5f));
  RendezvousValue v = r.recv(key("x"));
  CHECK(value_of(v) == 1.5f);
  CHECK_FALSE(v.is_dead);
  // recv_async with a value queued calls back inline.
  r.send(key("x"), RendezvousValue{scalar(2.f), true});
  Outcome o;
  r.recv_async(key("x"), o.callback());
  CHECK(o.done);
  CHECK(value_of(o.value) == 2.f);
  CHECK(o.value.is_dead);
}

TEST_CASE("a recv waiting before the send gets the value", "[runtime][rendezvous]") {
  LocalRendezvous r;
  Outcome o;
  r.recv_async(key("y"), o.callback());
  CHECK_FALSE(o.done);
  r.send(key("y"), scalar(3.f));
  CHECK(o.done);  // called on the sending thread
  CHECK(value_of(o.value) == 3.f);

  // A blocked recv on another thread is woken.
  std::thread sender([&r] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    r.send(key("y"), scalar(4.f));
  });
  CHECK(value_of(r.recv(key("y"))) == 4.f);
  sender.join();
}

TEST_CASE("values on one key are received in the order they were sent", "[runtime][rendezvous]") {
  LocalRendezvous r;
  for (int i = 0; i < 10; ++i) r.send(key("q"), scalar(float(i)));  // grows past inline
  for (int i = 0; i < 10; ++i) CHECK(value_of(r.recv(key("q"))) == float(i));
  // Waiters are served in order too.
  std::vector<Outcome> waiting(5);
  for (auto& o : waiting) r.recv_async(key("q"), o.callback());
  for (int i = 0; i < 5; ++i) r.send(key("q"), scalar(float(10 + i)));
  for (int i = 0; i < 5; ++i) CHECK(value_of(waiting[i].value) == float(10 + i));
}

TEST_CASE("different rendezvous keys are independent", "[runtime][rendezvous]") {
  LocalRendezvous r;
  Outcome a, b;
  r.recv_async(key("a"), a.callback());
  r.recv_async(RendezvousKey(Place::cpu(), Place::cpu(), "a", 0, 1), b.callback());
  r.send(key("b"), scalar(1.f));
  CHECK_FALSE(a.done);
  CHECK_FALSE(b.done);
  r.send(RendezvousKey(Place::cpu(), Place::cpu(), "a", 0, 1), scalar(2.f));
  CHECK_FALSE(a.done);
  CHECK(value_of(b.value) == 2.f);
  r.send(key("a"), scalar(3.f));
  CHECK(value_of(a.value) == 3.f);
  CHECK(value_of(r.recv(key("b"))) == 1.f);
}

TEST_CASE("keys of many loop iterations do not stay in the rendezvous", "[runtime][rendezvous]") {
  LocalRendezvous r;
  for (int i = 0; i < 5000; ++i) {
    r.send(key("it", i), scalar(float(i)));
    CHECK(value_of(r.recv(key("it", i))) == float(i));
  }
  // A key used again after the sweep still works.
  r.send(key("it", 3), scalar(9.f));
  CHECK(value_of(r.recv(key("it", 3))) == 9.f);
}

TEST_CASE("abort wakes a blocked recv with its error and later sends and recvs fail with it",
          "[runtime][rendezvous]") {
  LocalRendezvous r;
  r.send(key("dropped"), scalar(1.f));
  Outcome pending;
  r.recv_async(key("p"), pending.callback());
  std::optional<kiln::Error> blocked_error;
  std::thread blocked([&] {
    try {
      r.recv(key("b"));
    } catch (const kiln::Error& e) {
      blocked_error.emplace(e);
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  r.abort(kiln::make_error(ErrorKind::Internal, "partition 2 failed"));
  blocked.join();
  REQUIRE(blocked_error);
  CHECK(blocked_error->kind() == ErrorKind::Internal);
  CHECK(blocked_error->message() == "partition 2 failed");
  REQUIRE(pending.error);
  CHECK(pending.error->message() == "partition 2 failed");
  CHECK(r.is_aborted());
  // Sticky: the first abort's error, for sends and every kind of recv.
  r.abort(kiln::make_error(ErrorKind::Cancelled, "second"));
  KILN_CHECK_ERROR(r.send(key("x"), scalar(1.f)), Internal, {"partition 2 failed"});
  KILN_CHECK_ERROR(r.recv(key("dropped")), Internal, {"partition 2 failed"});
  Outcome later;
  r.recv_async(key("x"), later.callback());
  REQUIRE(later.error);
  CHECK(later.error->kind() == ErrorKind::Internal);
}

TEST_CASE("a cancelled recv gets Cancelled and a later send goes to the next recv",
          "[runtime][rendezvous]") {
  LocalRendezvous r;
  CancellationManager cm;
  Outcome first;
  r.recv_async(key("c"), first.callback(), &cm);
  std::optional<kiln::Error> blocked_error;
  std::thread blocked([&] {
    try {
      r.recv(key("c2"), &cm);
    } catch (const kiln::Error& e) {
      blocked_error.emplace(e);
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  cm.start_cancel();
  blocked.join();
  REQUIRE(first.error);
  CHECK(first.error->kind() == ErrorKind::Cancelled);
  CHECK_THAT(first.error->message(), Catch::Contains("cpu;cpu;c;0:0"));
  REQUIRE(blocked_error);
  CHECK(blocked_error->kind() == ErrorKind::Cancelled);
  // A recv on an already-cancelled manager is cancelled at once.
  KILN_CHECK_ERROR(r.recv(key("c"), &cm), Cancelled, {"'cpu;cpu;c;0:0'", "cancelled"});
  // The cancelled waiter is gone: the next send goes to the next recv.
  r.send(key("c"), scalar(5.f));
  CHECK(value_of(r.recv(key("c"))) == 5.f);
  // A recv whose manager was never cancelled deregisters when served.
  CancellationManager live;
  Outcome served;
  r.recv_async(key("d"), served.callback(), &live);
  r.send(key("d"), scalar(6.f));
  CHECK(value_of(served.value) == 6.f);
  live.start_cancel();  // nothing left to cancel
  CHECK_FALSE(served.error);
}

TEST_CASE("a recv expecting f32 that receives i32 gets an error naming the key and both dtypes",
          "[runtime][rendezvous]") {
  LocalRendezvous r;
  RendezvousKey k(Place::cpu(), Place::cuda(0), "logits", 0, 2);
  r.send(k, Tensor::from_vector<std::int32_t>({2}, {1, 2}));
  KILN_CHECK_ERROR(r.recv(k, DataType::Float32), InvalidArgument,
                   {"rendezvous key 'cpu;cuda:0;logits;0:2'", "expected dtype f32",
                    "received i32"});
  r.send(k, scalar(1.f));
  CHECK(value_of(r.recv(k, DataType::Float32)) == 1.f);
  // A dead value is not checked (its tensor may be uninitialized).
  r.send(k, Tensor(), true);
  CHECK(r.recv(k, DataType::Float32).is_dead);
}

TEST_CASE("destroying a rendezvous with pending receives cancels them", "[runtime][rendezvous]") {
  CancellationManager cm;
  Outcome o;
  {
    LocalRendezvous r;
    r.recv_async(key("z"), o.callback(), &cm);
  }
  REQUIRE(o.error);
  CHECK(o.error->kind() == ErrorKind::Cancelled);
  cm.start_cancel();  // its callback was taken off the manager: nothing dangles
}

TEST_CASE("every value sent by concurrent producers is received exactly once",
          "[runtime][rendezvous]") {
  // 3 producers and 3 consumers over 32 keys; consumers use blocking recv,
  // recv_async and cancellable recvs; each value carries its (producer, seq).
  constexpr int kProducers = 3, kConsumers = 3, kKeys = 32, kPerProducer = 3200;
  LocalRendezvous r;
  std::vector<RendezvousKey> keys;
  for (int k = 0; k < kKeys; ++k) keys.push_back(key("k" + std::to_string(k)));
  // Producer p sends its i-th value on key i % kKeys, so every key gets
  // per_key values; consumer c receives on keys c, c + 3, ...
  std::vector<std::atomic<int>> seen(kProducers * kPerProducer);
  std::vector<std::thread> threads;
  for (int p = 0; p < kProducers; ++p) {
    threads.emplace_back([&, p] {
      for (int i = 0; i < kPerProducer; ++i)
        r.send(keys[i % kKeys], scalar(float(p * kPerProducer + i)));
    });
  }
  const int per_key = kProducers * kPerProducer / kKeys;
  std::atomic<int> cancelled_retries{0};
  for (int c = 0; c < kConsumers; ++c) {
    threads.emplace_back([&, c] {
      CancellationManager never;
      for (int n = 0; n < per_key; ++n) {
        for (int k = c; k < kKeys; k += kConsumers) {
          RendezvousValue v;
          if (n % 3 == 0) {
            v = r.recv(keys[k]);
          } else if (n % 3 == 1) {
            v = r.recv(keys[k], &never);
          } else {
            Outcome o;
            r.recv_async(keys[k], o.callback());
            o.wait();
            v = std::move(o.value);
          }
          seen[int(value_of(v))].fetch_add(1, std::memory_order_relaxed);
        }
      }
    });
  }
  // A recv cancelled while producers run must not swallow a value.
  threads.emplace_back([&] {
    RendezvousKey lonely = key("lonely");
    for (int i = 0; i < 200; ++i) {
      CancellationManager cm;
      Outcome o;
      r.recv_async(lonely, o.callback(), &cm);
      cm.start_cancel();
      o.wait();
      if (o.error) ++cancelled_retries;
    }
  });
  for (auto& t : threads) t.join();
  int missing = 0, duplicated = 0;
  for (auto& s : seen) {
    missing += s.load() == 0;
    duplicated += s.load() > 1;
  }
  CHECK(missing == 0);
  CHECK(duplicated == 0);
  CHECK(cancelled_retries == 200);
}

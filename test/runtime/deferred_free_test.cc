#include "kiln/runtime/cpu_allocator.h"
#include "kiln/runtime/deferred_free.h"

#include <atomic>
#include <future>
#include <thread>
#include <vector>

#include "catch.hpp"
#include "test_util.h"
#include "kiln/runtime/host_stream.h"
#include "kiln/runtime/tensor.h"

using kiln::CpuAllocator;
using kiln::DataType;
using kiln::DeferredFreeQueue;
using kiln::HostStream;
using kiln::Place;
using kiln::Tensor;
using kiln_test::Gate;

TEST_CASE("a buffer freed while its stream still has queued work is freed only after the event completes",
          "[runtime][stream][deferred_free]") {
  CpuAllocator alloc;
  DeferredFreeQueue queue;
  HostStream s(1);
  Gate gate;
  {
    Tensor y = Tensor::empty({256}, DataType::Float32, Place::host_stream(1), &alloc);
    float* p = y.data<float>();
    s.enqueue([&gate, p] {
      gate.wait();
      p[0] = 1.0f;  // the kernel still writes Y after the host dropped it
    });
    y.record_stream(s, &queue);
  }  // the last reference drops here, before the task ran
  CHECK(queue.pending() == 1);
  CHECK(queue.pending_bytes() == 1024);
  CHECK(alloc.bytes_in_use() == 1024);  // not back in the allocator yet
  CHECK(queue.collect() == 0);
  CHECK(alloc.bytes_in_use() == 1024);
  gate.open();
  s.synchronize();
  CHECK(queue.collect() == 1);
  CHECK(queue.pending() == 0);
  CHECK(alloc.bytes_in_use() == 0);
}

TEST_CASE("a buffer whose streams are done is freed at once", "[runtime][stream][deferred_free]") {
  CpuAllocator alloc;
  DeferredFreeQueue queue;
  HostStream s;
  Tensor y = Tensor::empty({16}, DataType::Float32, Place::host_stream(0), &alloc);
  s.enqueue([p = y.data<float>()] { p[0] = 2.0f; });
  y.record_stream(s, &queue);
  s.synchronize();
  CHECK(y.buffer()->streams_done());
  y.reset();
  CHECK(queue.pending() == 0);
  CHECK(alloc.bytes_in_use() == 0);
}

TEST_CASE("a buffer used on two streams waits for both", "[runtime][stream][deferred_free]") {
  CpuAllocator alloc;
  DeferredFreeQueue queue;
  HostStream a(0), b(1);
  Gate ga, gb;
  {
    Tensor y = Tensor::empty({16}, DataType::Float32, Place::host_stream(0), &alloc);
    a.enqueue([&] { ga.wait(); });
    y.record_stream(a, &queue);
    b.enqueue([&] { gb.wait(); });
    y.record_stream(b, &queue);
    y.record_stream(a, &queue);  // re-recording the same stream reuses its event
  }
  ga.open();
  a.synchronize();
  CHECK(queue.collect() == 0);
  CHECK(alloc.bytes_in_use() == 64);
  gb.open();
  b.synchronize();
  CHECK(queue.collect() == 1);
  CHECK(alloc.bytes_in_use() == 0);
}

TEST_CASE("the seed's A->B, A->C example: Y outlives the host's delete until B and C ran",
          "[runtime][stream][deferred_free]") {
  // seed 001 §4.2, example 4: A: Y = f(X) and C: N = f(Y) on stream 1, B: M =
  // f(Y) on stream 2 after an event; the host launches A, B, C and deletes Y
  // right after launching C.
  CpuAllocator alloc;
  DeferredFreeQueue queue;
  HostStream s1(1), s2(2);
  Gate hold_a;
  Tensor x = Tensor::from_vector<float>({4}, {1, 2, 3, 4});
  Tensor m = Tensor::empty({4}, DataType::Float32, Place::host_stream(2));
  Tensor n = Tensor::empty({4}, DataType::Float32, Place::host_stream(1));
  Tensor y = Tensor::empty({4}, DataType::Float32, Place::host_stream(1), &alloc);
  s1.enqueue([&, py = y.data<float>()] {  // launch A
    hold_a.wait();
    for (int i = 0; i < 4; ++i) py[i] = x.data<float>()[i] * 2;
  });
  kiln::HostEvent y_ready;
  y_ready.record(s1);
  s2.wait(y_ready);
  s2.enqueue([&, py = y.data<float>()] {  // launch B
    for (int i = 0; i < 4; ++i) m.data<float>()[i] = py[i] + 1;
  });
  y.record_stream(s2, &queue);
  s1.enqueue([&, py = y.data<float>()] {  // launch C
    for (int i = 0; i < 4; ++i) n.data<float>()[i] = py[i] * py[i];
  });
  y.record_stream(s1, &queue);
  y.reset();  // delete Y
  // Y's memory must not be reused while A, B and C are pending.
  CHECK(alloc.bytes_in_use() == 64);
  CHECK(queue.pending() == 1);
  hold_a.open();
  s1.synchronize();
  s2.synchronize();
  CHECK(queue.collect() == 1);
  CHECK(alloc.bytes_in_use() == 0);
  CHECK(m.to_vector<float>() == std::vector<float>{3, 5, 7, 9});
  CHECK(n.to_vector<float>() == std::vector<float>{4, 16, 36, 64});
}

TEST_CASE("drain waits for the streams and frees every parked buffer", "[runtime][stream][deferred_free]") {
  CpuAllocator alloc;
  DeferredFreeQueue queue;
  HostStream s;
  Gate gate;
  s.enqueue([&] { gate.wait(); });
  for (int i = 0; i < 3; ++i) {
    Tensor t = Tensor::empty({16}, DataType::Float32, Place::cpu(), &alloc);
    t.record_stream(s, &queue);
  }
  CHECK(queue.pending() == 3);
  std::thread opener([&] { gate.open(); });
  CHECK(queue.drain() == 3);
  opener.join();
  CHECK(alloc.bytes_in_use() == 0);
  CHECK(queue.pending() == 0);
}

TEST_CASE("external memory used on a stream is handed to its deleter only after the stream ran",
          "[runtime][stream][deferred_free]") {
  DeferredFreeQueue queue;
  HostStream s;
  Gate gate;
  std::vector<float> storage(8, 0.0f);
  std::atomic<int> deleted{0};
  {
    Tensor t = Tensor::from_external(storage.data(), 32, {8}, DataType::Float32, Place::cpu(),
                                     [&](void*) { ++deleted; });
    s.enqueue([&] { gate.wait(); });
    t.record_stream(s, &queue);
  }
  CHECK(deleted == 0);
  gate.open();
  s.synchronize();
  queue.collect();
  CHECK(deleted == 1);
}

TEST_CASE("parked buffers are collected automatically as more arrive", "[runtime][stream][deferred_free]") {
  CpuAllocator alloc;
  DeferredFreeQueue queue;
  HostStream s;
  for (int i = 0; i < 1000; ++i) {
    Gate gate;
    Tensor t = Tensor::empty({16}, DataType::Float32, Place::cpu(), &alloc);
    s.enqueue([f = gate.future] { f.wait(); });
    t.record_stream(s, &queue);
    t.reset();  // parked: its task has not run
    gate.open();
    s.synchronize();  // now it could be freed, but nobody calls collect()
  }
  // Without any explicit collect(), the queue stayed bounded.
  CHECK(queue.pending() <= 64);
  queue.collect();
  CHECK(queue.pending() == 0);
  CHECK(alloc.bytes_in_use() == 0);
}

TEST_CASE("recording a stream on an uninitialized tensor is a PreconditionNotMet error",
          "[runtime][stream][deferred_free]") {
  HostStream s;
  Tensor t;
  try {
    t.record_stream(s);
    FAIL("no kiln::Error");
  } catch (const kiln::Error& e) {
    CHECK(e.kind() == kiln::ErrorKind::PreconditionNotMet);
    CHECK_THAT(e.message(), Catch::Contains("record_stream") && Catch::Contains("uninitialized"));
  }
}

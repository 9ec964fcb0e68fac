// CudaStream and CudaEvent: the Stream / Event contract on a CUDA device
// ([cuda]: skipped without one), and the errors without one.
#include <cstdint>
#include <vector>

#include "catch.hpp"
#include "kernel/cuda_test_util.h"
#include "kiln/runtime/cuda_context.h"
#include "kiln/runtime/host_stream.h"
#include "test_util.h"

using namespace kiln;
using kiln_test::have_cuda;

TEST_CASE("a CUDA stream runs its copies in order and an event marks their completion",
          "[cuda][runtime]") {
  if (!have_cuda()) return;
  CudaStream stream(0);
  CHECK(stream.place() == Place::cuda(0));
  CudaAllocator& alloc = cuda_context(0).allocator();
  const std::size_t n = 1 << 20;
  std::vector<float> host(n, 1.5f), back(n, 0.f);
  Allocation a = alloc.allocate(n * sizeof(float), stream);
  Allocation b = alloc.allocate(n * sizeof(float), stream);
  stream.enqueue([&] {
    copy_host_to_device(a.ptr, host.data(), n * sizeof(float), stream);
    copy_device_to_device(b.ptr, a.ptr, n * sizeof(float), stream);
    copy_device_to_host(back.data(), b.ptr, n * sizeof(float), stream);
  });
  auto done = stream.create_event();
  done->record(stream);
  done->synchronize();
  CHECK(done->query());
  CHECK(stream.query());
  CHECK(back == host);
  alloc.deallocate(a);
  alloc.deallocate(b);
}

TEST_CASE("Tensor::zeros on a CUDA place is a device tensor of zeros, in a block that held other values",
          "[cuda][runtime]") {
  if (!have_cuda()) return;
  const Place dev = Place::cuda(0);
  const Dims dims{257, 33};
  // A freed block of the same size, full of ones: the caching allocator's
  // next block of that size.
  { Tensor ones = copy_to_place(Tensor::from_vector<float>(dims, std::vector<float>(257 * 33, 1.0f)), dev); }
  const Tensor z = Tensor::zeros(dims, DataType::Float32, dev);
  CHECK(z.place() == dev);
  CHECK(z.dims() == dims);
  const std::vector<float> back = copy_to_place(z, Place::cpu()).to_vector<float>();
  CHECK(back == std::vector<float>(257 * 33, 0.0f));
}

TEST_CASE("Tensor::from_vector on a CUDA place and to_vector of a device tensor copy between host and device",
          "[cuda][runtime]") {
  if (!have_cuda()) return;
  const Place dev = Place::cuda(0);
  const std::vector<float> values{1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -0.5f};
  const Tensor t = Tensor::from_vector<float>({2, 3}, values, dev);
  CHECK(t.place() == dev);
  CHECK(t.to_vector<float>() == values);
  CHECK(copy_to_place(t, Place::cpu()).to_vector<float>() == values);
  const Tensor b = Tensor::from_vector<bool>({3}, {true, false, true}, dev);
  CHECK(b.to_vector<bool>() == std::vector<bool>{true, false, true});
}

TEST_CASE("a CUDA stream waits for another stream's event before its later work",
          "[cuda][runtime]") {
  if (!have_cuda()) return;
  CudaStream producer(0), consumer(0);
  CudaAllocator& alloc = cuda_context(0).allocator();
  const std::size_t bytes = 64 << 20;
  std::vector<std::uint8_t> host(bytes, 7), back(bytes, 0);
  Allocation a = alloc.allocate(bytes, producer);
  // A large copy on the producer; the consumer reads its result only after
  // waiting for the producer's event.
  producer.enqueue([&] { copy_host_to_device(a.ptr, host.data(), bytes, producer); });
  auto ready = producer.create_event();
  ready->record(producer);
  consumer.wait(*ready);
  consumer.enqueue([&] { copy_device_to_host(back.data(), a.ptr, bytes, consumer); });
  consumer.synchronize();
  CHECK(back == host);
  producer.synchronize();
  alloc.deallocate(a);
}

TEST_CASE("a task that throws on a CUDA stream is reported by synchronize, and later tasks are "
          "skipped until then",
          "[cuda][runtime]") {
  if (!have_cuda()) return;
  CudaStream stream(0);
  int ran = 0;
  stream.enqueue([] { throw_error(ErrorKind::InvalidArgument, "launcher failed"); });
  stream.enqueue([&] { ++ran; });
  KILN_CHECK_ERROR(stream.synchronize(), InvalidArgument, {"launcher failed"});
  CHECK(ran == 0);
  stream.enqueue([&] { ++ran; });
  stream.synchronize();
  CHECK(ran == 1);
}

TEST_CASE("CUDA events and streams refuse the host-stream kinds, naming them", "[cuda][runtime]") {
  if (!have_cuda()) return;
  CudaStream stream(0);
  HostStream host(0);
  CudaEvent event(0);
  KILN_CHECK_ERROR(event.record(host), InvalidArgument, {"CUDA event", "host_stream:0"});
  auto host_event = host.create_event();
  KILN_CHECK_ERROR(stream.wait(*host_event), InvalidArgument, {"CUDA stream"});
  CHECK(event.query());  // never recorded: complete
}

TEST_CASE("a CUDA stream or context of a device that does not exist is an error naming it",
          "[cuda][runtime]") {
  if (!built_with_cuda()) {
    KILN_CHECK_ERROR(cuda_context(0), Unimplemented, {"cuda:0", "without CUDA"});
    return;
  }
  KILN_CHECK_ERROR(CudaStream(63), InvalidArgument, {"cuda:63"});
  KILN_CHECK_ERROR(cuda_context(63), InvalidArgument, {"cuda:63"});
}

// CudaAllocator: size classes, per-stream reuse, stream-safe freeing through
// Buffer::record_stream and the deferred-free queue, statistics, and the
// out-of-memory error ([cuda]: skipped without a device).
#include <cstdint>
#include <thread>
#include <vector>

#include "catch.hpp"
#include "kernel/cuda_test_util.h"
#include "kiln/runtime/buffer.h"
#include "kiln/runtime/cuda_context.h"
#include "kiln/runtime/deferred_free.h"
#include "kiln/runtime/host_stream.h"
#include "test_util.h"

using namespace kiln;
using kiln_test::have_cuda;

TEST_CASE("CUDA blocks come in 512-byte granules and four classes per power of two",
          "[cuda][runtime]") {
  CHECK(CudaAllocator::size_class_bytes(0) == 0);
  CHECK(CudaAllocator::size_class_bytes(1) == 512);
  CHECK(CudaAllocator::size_class_bytes(513) == 1024);
  CHECK(CudaAllocator::size_class_bytes(4096) == 4096);
  CHECK(CudaAllocator::size_class_bytes(4097) == 5120);
  CHECK(CudaAllocator::size_class_bytes((1 << 20) + 1) == (1 << 20) + (1 << 18));
}

TEST_CASE("a freed CUDA block is reused by its own stream at once and by no other stream",
          "[cuda][runtime]") {
  if (!have_cuda()) return;
  CudaStream s1(0), s2(0);
  CudaAllocator alloc(0, s1);
  Allocation a = alloc.allocate(1000, s1);
  CHECK(a.size == 1024);
  CHECK(a.place == Place::cuda(0));
  void* p = a.ptr;
  alloc.deallocate(a);
  AllocatorStats st = alloc.stats();
  CHECK(st.bytes_in_use == 0);
  CHECK(st.cached_bytes == 1024);
  Allocation other = alloc.allocate(1000, s2);
  CHECK(other.ptr != p);  // s1's block is not s2's to take
  Allocation again = alloc.allocate(900, s1);
  CHECK(again.ptr == p);  // stream order makes s1's own reuse safe
  st = alloc.stats();
  CHECK(st.cache_hits == 1);
  CHECK(st.peak_bytes_in_use == 2048);
  CHECK(alloc.reserved_bytes() == 2048);
  alloc.deallocate(other);
  alloc.deallocate(again);
  CHECK(alloc.release_cache() == 2048);
  CHECK(alloc.stats().cached_bytes == 0);
}

TEST_CASE("a stream's allocator serves that stream's list: its freed blocks go to its own work, never to the "
          "default stream's",
          "[cuda][runtime]") {
  if (!have_cuda()) return;
  CudaStream compute(0), copy(0);
  CudaAllocator alloc(0, compute);
  Allocator& on_copy = alloc.for_stream(copy);
  CHECK(&on_copy == &alloc.for_stream(copy));  // one per stream
  CHECK(on_copy.place() == Place::cuda(0));
  Allocation a = on_copy.allocate(1000);
  void* p = a.ptr;
  on_copy.deallocate(a);
  Allocation other = alloc.allocate(1000);  // the default (compute) stream's list
  CHECK(other.ptr != p);
  Allocation again = on_copy.allocate(900);
  CHECK(again.ptr == p);
  CHECK(on_copy.stats().bytes_in_use == alloc.stats().bytes_in_use);
  alloc.deallocate(other);
  on_copy.deallocate(again);
  CHECK(alloc.release_cache() == 2048);
}

TEST_CASE("a retired stream's cached blocks go back to the driver at once, its live ones when freed",
          "[cuda][runtime]") {
  if (!have_cuda()) return;
  CudaStream compute(0);
  CudaAllocator alloc(0, compute);
  Allocation kept = alloc.allocate(1000);
  alloc.deallocate(kept);  // cached for the compute stream: retiring another keeps it
  Allocation live;
  {
    CudaStream named(0);
    Allocator& on_named = alloc.for_stream(named);
    Allocation cached = on_named.allocate(3000);  // a 3072-byte block
    live = on_named.allocate(5000);               // a 5120-byte block
    on_named.deallocate(cached);
    CHECK(alloc.reserved_bytes() == 1024 + 3072 + 5120);
    named.synchronize();
    alloc.retire_stream(named);
    CHECK(alloc.reserved_bytes() == 1024 + 5120);
    CHECK(alloc.stats().cached_bytes == 1024);
  }
  alloc.deallocate(live);
  CHECK(alloc.reserved_bytes() == 1024);
  CHECK(alloc.stats().bytes_in_use == 0);
  alloc.retire_stream(compute);  // the default stream: nothing changes
  CHECK(alloc.allocate(900).ptr == kept.ptr);
}

TEST_CASE("cuda_stream_allocator refuses a stream that is not one of the device's CUDA streams",
          "[runtime]") {
  if (!built_with_cuda()) return;
  HostStream host(0);
  KILN_CHECK_ERROR(cuda_stream_allocator(0, host), InvalidArgument, {"cuda_stream_allocator", "cuda:0"});
}

TEST_CASE("a block another stream still uses is not handed out again until that stream's work "
          "completes (stress)",
          "[cuda][runtime]") {
  if (!have_cuda()) return;
  CudaStream owner(0), user(0);
  CudaAllocator alloc(0, owner);
  DeferredFreeQueue queue;
  const std::size_t bytes = 32 << 20;
  std::vector<std::uint8_t> host(bytes, 3);
  for (int round = 0; round < 20; ++round) {
    INFO("round " << round);
    BufferRef buf = BufferRef::adopt(Buffer::create(alloc.allocate(bytes, owner), &alloc));
    void* p = buf->data();
    // The user stream copies into the block (slow: pageable host memory),
    // and the buffer records it; the host drops its last reference at once.
    user.enqueue([&] { copy_host_to_device(p, host.data(), bytes, user); });
    buf->record_stream(user, &queue);
    buf.reset();
    if (!user.query()) {
      // Still in use: parked, and the owner gets another block.
      CHECK(queue.pending() == 1);
      Allocation other = alloc.allocate(bytes, owner);
      CHECK(other.ptr != p);
      alloc.deallocate(other);
    }
    user.synchronize();
    queue.collect();
    CHECK(queue.pending() == 0);
    Allocation back = alloc.allocate(bytes, owner);
    CHECK(back.ptr == p);  // freed into the owner's list once the user finished
    alloc.deallocate(back);
  }
}

TEST_CASE("a CUDA allocation beyond the device's memory is an error naming the sizes, after the "
          "cache was given back",
          "[cuda][runtime]") {
  if (!have_cuda()) return;
  CudaStream s(0);
  CudaAllocator alloc(0, s);
  alloc.deallocate(alloc.allocate(1 << 20, s));
  CHECK(alloc.stats().cached_bytes > 0);
  const std::size_t huge = std::size_t{1} << 46;  // 64 TiB
  KILN_CHECK_ERROR(alloc.allocate(huge, s), Unavailable,
                   {"cuda:0", "out of memory", std::to_string(huge), "bytes free"});
  CHECK(alloc.stats().cached_bytes == 0);  // released before the retry
  Allocation ok = alloc.allocate(1 << 20, s);  // still usable
  CHECK(ok.ptr != nullptr);
  alloc.deallocate(ok);
}

TEST_CASE("pinned host blocks are host memory, cached by size class", "[cuda][runtime]") {
  if (!have_cuda()) return;
  PinnedHostAllocator& pinned = pinned_host_allocator();
  Allocation a = pinned.allocate(100);
  CHECK(a.place == Place::cpu());
  static_cast<char*>(a.ptr)[99] = 1;  // host-writable
  void* p = a.ptr;
  pinned.deallocate(a);
  Allocation b = pinned.allocate(120);  // the same size class (128)
  CHECK(b.ptr == p);
  pinned.deallocate(b);
}

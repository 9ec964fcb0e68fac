#include "kiln/runtime/allocator.h"
#include "kiln/runtime/cpu_allocator.h"
#include "kiln/support/error.h"

#include <cstdint>
#include <thread>
#include <vector>

#include "catch.hpp"

using kiln::Allocation;
using kiln::CpuAllocator;
using kiln::CpuAllocatorOptions;

// Sanitizer runtimes abort on a huge allocation instead of returning null.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KILN_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define KILN_SANITIZED 1
#endif
#endif

TEST_CASE("cpu allocations are 64-byte aligned whatever their size", "[runtime][allocator]") {
  CpuAllocator alloc;
  std::vector<Allocation> blocks;
  for (std::size_t bytes : {1, 7, 63, 64, 65, 100, 1000, 4096, 4097, 100000, 1 << 20}) {
    Allocation a = alloc.allocate(bytes);
    REQUIRE(a.ptr != nullptr);
    CHECK(reinterpret_cast<std::uintptr_t>(a.ptr) % 64 == 0);
    CHECK(a.size >= bytes);
    CHECK(a.place == kiln::Place::cpu());
    blocks.push_back(a);
  }
  for (auto& a : blocks) alloc.deallocate(a);
  CHECK(alloc.bytes_in_use() == 0);
}

TEST_CASE("allocation sizes round up to their size class", "[runtime][allocator]") {
  CHECK(CpuAllocator::size_class_bytes(0) == 0);
  CHECK(CpuAllocator::size_class_bytes(1) == 64);
  CHECK(CpuAllocator::size_class_bytes(64) == 64);
  CHECK(CpuAllocator::size_class_bytes(100) == 128);
  CHECK(CpuAllocator::size_class_bytes(4096) == 4096);
  CHECK(CpuAllocator::size_class_bytes(4097) == 5120);
  CHECK(CpuAllocator::size_class_bytes(8192) == 8192);
  CHECK(CpuAllocator::size_class_bytes(8193) == 10240);
  CHECK(CpuAllocator::size_class_bytes((1 << 20) + 1) == (1 << 20) + (1 << 18));
  // A class size is its own class, and never wastes more than 25% above 4 KiB.
  for (std::size_t b = 4097; b < (1u << 24); b = b * 5 / 4 + 3) {
    std::size_t c = CpuAllocator::size_class_bytes(b);
    CHECK(CpuAllocator::size_class_bytes(c) == c);
    CHECK(c < b + b / 4 + 64);
  }
  CpuAllocator alloc;
  Allocation a = alloc.allocate(100);
  CHECK(a.size == 128);
  alloc.deallocate(a);
}

TEST_CASE("a zero-byte allocation is null and freeing it is a no-op", "[runtime][allocator]") {
  CpuAllocator alloc;
  Allocation a = alloc.allocate(0);
  CHECK(a.ptr == nullptr);
  CHECK(a.size == 0);
  alloc.deallocate(a);
  CHECK(alloc.stats().allocations == 0);
  CHECK(alloc.bytes_in_use() == 0);
}

TEST_CASE("a freed block is reused for the next request of its size class", "[runtime][allocator]") {
  CpuAllocator alloc;
  Allocation a = alloc.allocate(1000);
  void* first = a.ptr;
  alloc.deallocate(a);
  CHECK(alloc.cached_bytes() == 1024);
  Allocation b = alloc.allocate(1000 - 10);  // same class
  CHECK(b.ptr == first);
  CHECK(alloc.stats().cache_hits == 1);
  CHECK(alloc.cached_bytes() == 0);
  Allocation c = alloc.allocate(2000);  // another class: not the cached block
  CHECK(alloc.stats().cache_hits == 1);
  alloc.deallocate(b);
  alloc.deallocate(c);
  CHECK(alloc.stats().allocations == 3);
}

TEST_CASE("bytes in use and the peak follow allocations, and the peak can be reset", "[runtime][allocator]") {
  CpuAllocator alloc;
  Allocation a = alloc.allocate(1024);
  Allocation b = alloc.allocate(2048);
  CHECK(alloc.bytes_in_use() == 3072);
  CHECK(alloc.peak_bytes_in_use() == 3072);
  alloc.deallocate(b);
  CHECK(alloc.bytes_in_use() == 1024);
  CHECK(alloc.peak_bytes_in_use() == 3072);
  alloc.reset_peak();
  CHECK(alloc.peak_bytes_in_use() == 1024);
  Allocation c = alloc.allocate(64);
  CHECK(alloc.peak_bytes_in_use() == 1088);
  alloc.deallocate(a);
  alloc.deallocate(c);
  CHECK(alloc.bytes_in_use() == 0);
  CHECK(alloc.peak_bytes_in_use() == 1088);
}

TEST_CASE("release_cache returns the cached bytes to the system", "[runtime][allocator]") {
  CpuAllocator alloc;
  Allocation a = alloc.allocate(512);
  Allocation b = alloc.allocate(100000);
  std::size_t total = a.size + b.size;
  alloc.deallocate(a);
  alloc.deallocate(b);
  CHECK(alloc.cached_bytes() == total);
  CHECK(alloc.release_cache() == total);
  CHECK(alloc.cached_bytes() == 0);
  CHECK(alloc.release_cache() == 0);
  Allocation c = alloc.allocate(512);
  CHECK(alloc.stats().cache_hits == 0);
  alloc.deallocate(c);
}

TEST_CASE("an allocator without caching frees blocks at once", "[runtime][allocator]") {
  CpuAllocator alloc(CpuAllocatorOptions{.caching = false});
  Allocation a = alloc.allocate(4096);
  alloc.deallocate(a);
  CHECK(alloc.cached_bytes() == 0);
  CHECK(alloc.bytes_in_use() == 0);
}

TEST_CASE("blocks beyond the cache limit are freed, not cached", "[runtime][allocator]") {
  CpuAllocator alloc(CpuAllocatorOptions{.caching = true, .max_cached_bytes = 3000});
  Allocation a = alloc.allocate(2048);
  Allocation b = alloc.allocate(2048);
  alloc.deallocate(a);
  alloc.deallocate(b);
  CHECK(alloc.cached_bytes() == 2048);
  CHECK(alloc.bytes_in_use() == 0);
}

TEST_CASE("an impossible allocation size is an InvalidArgument error", "[runtime][allocator]") {
  CpuAllocator alloc;
  try {
    (void)alloc.allocate(CpuAllocator::kMaxBytes + 1);
    FAIL("no kiln::Error");
  } catch (const kiln::Error& e) {
    CHECK(e.kind() == kiln::ErrorKind::InvalidArgument);
    CHECK_THAT(e.message(), Catch::Contains("cpu allocator") && Catch::Contains("maximum"));
  }
  CHECK(alloc.bytes_in_use() == 0);
}

TEST_CASE("running out of memory is an Unavailable error and leaves the stats intact", "[runtime][allocator]") {
#ifdef KILN_SANITIZED
  SUCCEED("skipped under a sanitizer");
  return;
#endif
  CpuAllocator alloc;
  Allocation keep = alloc.allocate(256);
  try {
    (void)alloc.allocate(CpuAllocator::kMaxBytes);  // 256 TiB
    FAIL("no kiln::Error");
  } catch (const kiln::Error& e) {
    CHECK(e.kind() == kiln::ErrorKind::Unavailable);
    CHECK_THAT(e.message(), Catch::Contains("out of memory"));
  }
  CHECK(alloc.bytes_in_use() == 256);
  alloc.deallocate(keep);
}

TEST_CASE("two threads allocating and freeing at once keep the statistics exact", "[runtime][allocator]") {
  CpuAllocator alloc;
  auto work = [&] {
    std::vector<Allocation> live;
    for (int i = 0; i < 20000; ++i) {
      live.push_back(alloc.allocate(64 + (i % 50) * 64));
      if (live.size() > 8) {
        alloc.deallocate(live.front());
        live.erase(live.begin());
      }
    }
    for (auto& a : live) alloc.deallocate(a);
  };
  std::thread t(work);
  work();
  t.join();
  CHECK(alloc.bytes_in_use() == 0);
  CHECK(alloc.stats().allocations == 40000);
  CHECK(alloc.peak_bytes_in_use() <= 2 * 9 * 64 * 50);
}

TEST_CASE("cpu_allocator is one shared instance", "[runtime][allocator]") {
  CHECK(&kiln::cpu_allocator() == &kiln::cpu_allocator());
  CHECK(kiln::cpu_allocator().place() == kiln::Place::cpu());
}

// CpuAllocator's size classes, free lists and statistics, and the process-wide
// CPU allocator (one instance across the library and users).
#include "kiln/runtime/cpu_allocator.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstdlib>
#include <mutex>

#include "kiln/support/error.h"

namespace kiln {
namespace {

// One more allocation of `size` bytes in use (the caller holds the lock).
void count_allocation(AllocatorStats& s, std::size_t size) {
  ++s.allocations;
  s.bytes_in_use += size;
  s.peak_bytes_in_use = std::max(s.peak_bytes_in_use, s.bytes_in_use);
}

}  // namespace

CpuAllocator& cpu_allocator() {
  // Never destroyed: buffers may be released during static destruction.
  static CpuAllocator* const allocator = new CpuAllocator();
  return *allocator;
}

CpuAllocator::CpuAllocator(CpuAllocatorOptions options) : options_(options) {}

CpuAllocator::~CpuAllocator() { release_cache(); }

std::size_t CpuAllocator::size_class_bytes(std::size_t bytes) noexcept {
  if (bytes == 0) return 0;
  std::size_t r = (bytes + kAlignment - 1) & ~(kAlignment - 1);
  if (r <= 4096) return r;
  int k = std::bit_width(r - 1) - 1;  // r in (2^k, 2^(k+1)]
  std::size_t step = std::size_t{1} << (k - 2);
  return (r + step - 1) & ~(step - 1);
}

int CpuAllocator::class_index(std::size_t c) noexcept {
  if (c <= 4096) return static_cast<int>(c / kAlignment) - 1;
  int k = std::bit_width(c - 1) - 1;
  std::size_t step = std::size_t{1} << (k - 2);
  int sub = static_cast<int>(c / step) - 5;  // c in {5,6,7,8} * step
  return kSmallClasses + (k - 12) * 4 + sub;
}

void* CpuAllocator::system_alloc(std::size_t bytes) noexcept {
  return std::aligned_alloc(kAlignment, bytes);  // bytes is a multiple of 64
}

Allocation CpuAllocator::allocate(std::size_t bytes) {
  if (bytes == 0) return {nullptr, 0, place()};
  if (bytes > kMaxBytes)
    throw_error(ErrorKind::InvalidArgument, "cpu allocator: cannot allocate ", bytes,
                " bytes (the maximum is ", kMaxBytes, ")");
  const std::size_t size = size_class_bytes(bytes);
  const int cls = class_index(size);
  void* ptr = nullptr;
  {
    std::lock_guard<SpinLock> guard(lock_);
    if (FreeBlock* block = free_lists_[cls]) {
      free_lists_[cls] = block->next;
      stats_.cached_bytes -= size;
      ++stats_.cache_hits;
      ptr = block;
    }
    if (ptr) {
      count_allocation(stats_, size);
      return {ptr, size, place()};
    }
  }
  ptr = system_alloc(size);
  if (!ptr) {
    release_cache();  // the cache may hold the memory we need, in other classes
    ptr = system_alloc(size);
  }
  if (!ptr) {
    AllocatorStats s = stats();
    throw_error(ErrorKind::Unavailable, "cpu allocator: out of memory allocating ", bytes, " bytes (",
                s.bytes_in_use, " bytes in use)");
  }
  std::lock_guard<SpinLock> guard(lock_);
  count_allocation(stats_, size);
  return {ptr, size, place()};
}

void CpuAllocator::deallocate(const Allocation& a) noexcept {
  if (!a.ptr) return;
  assert(a.size == size_class_bytes(a.size) && "deallocate: not an Allocation from this allocator");
  {
    std::lock_guard<SpinLock> guard(lock_);
    stats_.bytes_in_use -= a.size;
    if (options_.caching && stats_.cached_bytes + a.size <= options_.max_cached_bytes) {
      const int cls = class_index(a.size);
      auto* block = static_cast<FreeBlock*>(a.ptr);
      block->next = free_lists_[cls];
      free_lists_[cls] = block;
      stats_.cached_bytes += a.size;
      return;
    }
  }
  std::free(a.ptr);
}

AllocatorStats CpuAllocator::stats() const {
  std::lock_guard<SpinLock> guard(lock_);
  return stats_;
}

void CpuAllocator::reset_peak() {
  std::lock_guard<SpinLock> guard(lock_);
  stats_.peak_bytes_in_use = stats_.bytes_in_use;
}

std::size_t CpuAllocator::release_cache() {
  FreeBlock* lists[kNumClasses];
  std::size_t released;
  {
    std::lock_guard<SpinLock> guard(lock_);
    std::copy(std::begin(free_lists_), std::end(free_lists_), lists);
    std::fill(std::begin(free_lists_), std::end(free_lists_), nullptr);
    released = stats_.cached_bytes;
    stats_.cached_bytes = 0;
  }
  for (FreeBlock* head : lists) {
    while (head) {
      FreeBlock* next = head->next;
      std::free(head);
      head = next;
    }
  }
  return released;
}

}  // namespace kiln

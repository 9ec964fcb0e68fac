// CpuAllocator: the host's Allocator (kiln/runtime/allocator.h). It hands
// out 64-byte aligned host blocks and caches freed ones by size class, so
// the executor's fast GC (seed 001 §3.2.4.3 / §4.2: free a variable right
// after its last user) recycles memory without going back to malloc on
// every op. cpu_allocator() is the process-wide one.
#pragma once

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <mutex>

#include "kiln/runtime/allocator.h"
#include "kiln/runtime/spin_lock.h"
#include "kiln/support/error.h"
#include "kiln/support/place.h"

namespace kiln {

struct CpuAllocatorOptions {
  bool caching = true;
  // Freed blocks beyond this many cached bytes go straight back to the system.
  std::size_t max_cached_bytes = std::size_t{1} << 30;
};

// Size classes: requests round up to 64 bytes; up to 4 KiB every multiple of
// 64 is a class; above, each power-of-two range (2^k, 2^(k+1)] has four classes
// (waste <= 25%). Thread-safe: one SpinLock around the free lists and counters,
// held for a few instructions (malloc/free happen outside it).
class CpuAllocator final : public Allocator {
 public:
  static constexpr std::size_t kAlignment = 64;
  static constexpr std::size_t kMaxBytes = std::size_t{1} << 48;

  explicit CpuAllocator(CpuAllocatorOptions options = {});
  ~CpuAllocator() override;
  CpuAllocator(const CpuAllocator&) = delete;
  CpuAllocator& operator=(const CpuAllocator&) = delete;

  Allocation allocate(std::size_t bytes) override;
  void deallocate(const Allocation& allocation) noexcept override;
  Place place() const noexcept override { return Place::cpu(); }
  AllocatorStats stats() const override;
  void reset_peak() override;
  std::size_t release_cache() override;

  std::size_t bytes_in_use() const { return stats().bytes_in_use; }
  std::size_t peak_bytes_in_use() const { return stats().peak_bytes_in_use; }
  std::size_t cached_bytes() const { return stats().cached_bytes; }

  // The usable size allocate(bytes) returns (its size class); 0 for 0.
  static std::size_t size_class_bytes(std::size_t bytes) noexcept;

 private:
  struct FreeBlock {
    FreeBlock* next;
  };
  static constexpr int kSmallClasses = 64;  // 64 B .. 4 KiB in 64 B steps
  static constexpr int kNumClasses = kSmallClasses + (48 - 12) * 4;

  static int class_index(std::size_t class_bytes) noexcept;
  static void* system_alloc(std::size_t bytes) noexcept;

  CpuAllocatorOptions options_;
  mutable SpinLock lock_;
  FreeBlock* free_lists_[kNumClasses] = {};  // guarded by lock_
  AllocatorStats stats_;                     // guarded by lock_
};

// The process-wide CPU allocator every Tensor uses unless told otherwise. It is
// never destroyed (buffers may be released during static destruction).
CpuAllocator& cpu_allocator();

// ---------------------------------------------------------------------------

inline CpuAllocator::CpuAllocator(CpuAllocatorOptions options) : options_(options) {}

inline CpuAllocator::~CpuAllocator() { release_cache(); }

inline std::size_t CpuAllocator::size_class_bytes(std::size_t bytes) noexcept {
  if (bytes == 0) return 0;
  std::size_t r = (bytes + kAlignment - 1) & ~(kAlignment - 1);
  if (r <= 4096) return r;
  int k = std::bit_width(r - 1) - 1;  // r in (2^k, 2^(k+1)]
  std::size_t step = std::size_t{1} << (k - 2);
  return (r + step - 1) & ~(step - 1);
}

inline int CpuAllocator::class_index(std::size_t c) noexcept {
  if (c <= 4096) return static_cast<int>(c / kAlignment) - 1;
  int k = std::bit_width(c - 1) - 1;
  std::size_t step = std::size_t{1} << (k - 2);
  int sub = static_cast<int>(c / step) - 5;  // c in {5,6,7,8} * step
  return kSmallClasses + (k - 12) * 4 + sub;
}

inline void* CpuAllocator::system_alloc(std::size_t bytes) noexcept {
  return std::aligned_alloc(kAlignment, bytes);  // bytes is a multiple of 64
}

inline Allocation CpuAllocator::allocate(std::size_t bytes) {
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
      ++stats_.allocations;
      stats_.bytes_in_use += size;
      stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
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
  ++stats_.allocations;
  stats_.bytes_in_use += size;
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  return {ptr, size, place()};
}

inline void CpuAllocator::deallocate(const Allocation& a) noexcept {
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

inline AllocatorStats CpuAllocator::stats() const {
  std::lock_guard<SpinLock> guard(lock_);
  return stats_;
}

inline void CpuAllocator::reset_peak() {
  std::lock_guard<SpinLock> guard(lock_);
  stats_.peak_bytes_in_use = stats_.bytes_in_use;
}

inline std::size_t CpuAllocator::release_cache() {
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

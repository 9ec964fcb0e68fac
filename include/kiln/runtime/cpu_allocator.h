// CpuAllocator: the host's Allocator (kiln/runtime/allocator.h). It hands
// out 64-byte aligned host blocks and caches freed ones by size class, so
// the executor's fast GC (seed 001 §3.2.4.3 / §4.2: free a variable right
// after its last user) recycles memory without going back to malloc on
// every op. cpu_allocator() is the process-wide one.
#pragma once

#include <cstddef>

#include "kiln/runtime/allocator.h"
#include "kiln/runtime/spin_lock.h"
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

}  // namespace kiln

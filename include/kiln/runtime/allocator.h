// Allocator: where tensor buffers come from. `Allocator` is the interface;
// its implementations live in their own headers: CpuAllocator
// (kiln/runtime/cpu_allocator.h, the host's caching allocator and
// cpu_allocator()) and the CUDA allocator (kiln/runtime/cuda_allocator.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kiln/support/place.h"

namespace kiln {

// A block handed out by an Allocator. `size` is the usable size, which is the
// request rounded up to the allocator's size class; give the Allocation back
// unchanged.
struct Allocation {
  void* ptr = nullptr;
  std::size_t size = 0;
  Place place = Place::cpu();
};

struct AllocatorStats {
  std::size_t bytes_in_use = 0;       // sum of the sizes of live allocations
  std::size_t peak_bytes_in_use = 0;  // max of bytes_in_use since creation or reset_peak()
  std::size_t cached_bytes = 0;       // freed blocks kept for reuse
  std::uint64_t allocations = 0;      // allocate() calls that returned memory
  std::uint64_t cache_hits = 0;       // ... of which were served from the cache
};

class Allocator {
 public:
  virtual ~Allocator() = default;

  // A block of at least `bytes` bytes; {nullptr, 0} for 0 bytes. Throws
  // kiln::Error (Unavailable) when memory is exhausted, (InvalidArgument) for
  // an impossible size.
  virtual Allocation allocate(std::size_t bytes) = 0;
  // Gives back a block from allocate() on this allocator. nullptr is a no-op.
  virtual void deallocate(const Allocation& allocation) noexcept = 0;

  virtual Place place() const noexcept = 0;
  virtual AllocatorStats stats() const = 0;
  // Sets peak_bytes_in_use to the current bytes_in_use.
  virtual void reset_peak() = 0;
  // Returns cached blocks to the system; the number of bytes released.
  virtual std::size_t release_cache() = 0;
};

}  // namespace kiln

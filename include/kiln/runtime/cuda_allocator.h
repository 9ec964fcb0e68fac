// CudaAllocator: device memory for one CUDA device, cached by size class
// and by stream (seed 001 §4.2). A block freed on the host goes back to the
// free list of the stream it was allocated for, and only that stream gets
// it again: work queued on that stream before the free is ordered before
// any later use, so no wait is needed. A block that another stream used is
// never freed early: its Buffer recorded those streams (record_stream) and
// sits in the DeferredFreeQueue until their events complete, and only then
// reaches deallocate(). On out-of-memory the cache is returned to the
// driver and the allocation retried once; then a kiln::Error (Unavailable)
// names the requested, free and total bytes.
//
// PinnedHostAllocator: page-locked host memory (cudaHostAlloc), cached by
// size class, for feeds and fetches: copies from and to it are truly
// asynchronous.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "kiln/runtime/allocator.h"
#include "kiln/runtime/cuda_stream.h"

namespace kiln {

class CudaAllocator final : public Allocator {
 public:
  // Blocks of device `device`; allocate(bytes) serves `default_stream`.
  CudaAllocator(int device, const CudaStream& default_stream);
  ~CudaAllocator() override;
  CudaAllocator(const CudaAllocator&) = delete;
  CudaAllocator& operator=(const CudaAllocator&) = delete;

  Allocation allocate(std::size_t bytes) override;
  // A block for work on `stream` (reused only from that stream's list).
  Allocation allocate(std::size_t bytes, const CudaStream& stream);
  // An Allocator whose allocate(bytes) serves `stream` as the overload
  // above: the allocator of work on a copy or named stream, whose outputs
  // must not come from the compute stream's list (a block freed there while
  // a compute kernel that reads it is still queued would be written by the
  // other stream's copy too early). Kept as long as this allocator.
  Allocator& for_stream(const CudaStream& stream);
  // `stream`, done with its work and about to be destroyed, gives its
  // blocks back to the driver: the cached ones now, the live ones when
  // they are freed. Otherwise they would stay cached under a handle no
  // stream uses (until a new stream happened to get it), and a program run
  // by executor after executor, each with streams of its own, would hold
  // more memory each time. cudaFree waits for the device. No-op for the
  // default stream.
  void retire_stream(const CudaStream& stream);
  void deallocate(const Allocation& allocation) noexcept override;
  Place place() const noexcept override { return Place::cuda(static_cast<std::int16_t>(device_)); }
  AllocatorStats stats() const override;
  void reset_peak() override;
  // Frees the cached blocks (cudaFree, which waits for the device).
  std::size_t release_cache() override;
  // Bytes held from the driver: in use plus cached.
  std::size_t reserved_bytes() const;

  // Device blocks are multiples of 512 bytes; above 4 KiB, four classes per
  // power of two (as CpuAllocator).
  static std::size_t size_class_bytes(std::size_t bytes) noexcept;

 private:
  class StreamAllocator;
  using Key = std::pair<CudaStreamHandle, std::size_t>;  // (stream, size class)
  Allocation allocate_on(std::size_t bytes, CudaStreamHandle stream);
  void* device_malloc(std::size_t bytes, std::size_t requested);

  int device_;
  CudaStreamHandle default_stream_;
  mutable std::mutex mutex_;
  std::map<Key, std::vector<void*>> free_;             // guarded by mutex_
  std::unordered_map<void*, CudaStreamHandle> owner_;  // live block → its stream; mutex_
  std::unordered_set<void*> orphans_;  // live blocks of a retired stream; mutex_
  std::map<CudaStreamHandle, std::unique_ptr<StreamAllocator>> for_stream_;  // guarded by mutex_
  AllocatorStats stats_;                               // guarded by mutex_
};

class PinnedHostAllocator final : public Allocator {
 public:
  PinnedHostAllocator() = default;
  ~PinnedHostAllocator() override;
  PinnedHostAllocator(const PinnedHostAllocator&) = delete;
  PinnedHostAllocator& operator=(const PinnedHostAllocator&) = delete;

  Allocation allocate(std::size_t bytes) override;
  void deallocate(const Allocation& allocation) noexcept override;
  Place place() const noexcept override { return Place::cpu(); }
  AllocatorStats stats() const override;
  void reset_peak() override;
  std::size_t release_cache() override;

 private:
  mutable std::mutex mutex_;
  std::map<std::size_t, std::vector<void*>> free_;  // guarded by mutex_
  AllocatorStats stats_;                            // guarded by mutex_
};

// The process-wide pinned host allocator (never destroyed).
PinnedHostAllocator& pinned_host_allocator();

}  // namespace kiln

// CudaAllocator and PinnedHostAllocator (kiln/runtime/cuda_allocator.h).
#include "kiln/runtime/cpu_allocator.h"
#include "kiln/runtime/cuda_allocator.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <memory>
#include <string>

namespace kiln {

namespace {

constexpr std::size_t kDeviceGranule = 512;

void note_allocation(AllocatorStats& s, std::size_t size, bool hit) {
  ++s.allocations;
  s.cache_hits += hit;
  s.bytes_in_use += size;
  s.peak_bytes_in_use = std::max(s.peak_bytes_in_use, s.bytes_in_use);
}

// The calling thread's current device, put back when the scope ends: for
// the allocator's calls that may come from a thread working on another
// device. Throws nothing (cudaGetDevice failing leaves `fallback`).
class KeepCurrentDevice {
 public:
  explicit KeepCurrentDevice(int fallback) noexcept : previous_(fallback) { cudaGetDevice(&previous_); }
  ~KeepCurrentDevice() { cudaSetDevice(previous_); }
  KeepCurrentDevice(const KeepCurrentDevice&) = delete;
  KeepCurrentDevice& operator=(const KeepCurrentDevice&) = delete;

 private:
  int previous_;
};

}  // namespace

// ---- CudaAllocator ----

// The allocator's blocks for one stream's work (for_stream).
class CudaAllocator::StreamAllocator final : public Allocator {
 public:
  StreamAllocator(CudaAllocator& base, CudaStreamHandle stream) : base_(base), stream_(stream) {}
  Allocation allocate(std::size_t bytes) override { return base_.allocate_on(bytes, stream_); }
  void deallocate(const Allocation& allocation) noexcept override { base_.deallocate(allocation); }
  Place place() const noexcept override { return base_.place(); }
  AllocatorStats stats() const override { return base_.stats(); }
  void reset_peak() override { base_.reset_peak(); }
  std::size_t release_cache() override { return base_.release_cache(); }

 private:
  CudaAllocator& base_;
  CudaStreamHandle stream_;
};

CudaAllocator::CudaAllocator(int device, const CudaStream& default_stream)
    : device_(device), default_stream_(default_stream.handle()) {}

CudaAllocator::~CudaAllocator() { release_cache(); }

std::size_t CudaAllocator::size_class_bytes(std::size_t bytes) noexcept {
  if (bytes == 0) return 0;
  return CpuAllocator::size_class_bytes((bytes + kDeviceGranule - 1) / kDeviceGranule *
                                        kDeviceGranule);
}

Allocation CudaAllocator::allocate(std::size_t bytes) { return allocate_on(bytes, default_stream_); }

Allocation CudaAllocator::allocate(std::size_t bytes, const CudaStream& stream) {
  return allocate_on(bytes, stream.handle());
}

Allocator& CudaAllocator::for_stream(const CudaStream& stream) {
  std::lock_guard<std::mutex> guard(mutex_);
  std::unique_ptr<StreamAllocator>& a = for_stream_[stream.handle()];
  if (!a) a = std::make_unique<StreamAllocator>(*this, stream.handle());
  return *a;
}

void CudaAllocator::retire_stream(const CudaStream& stream) {
  const CudaStreamHandle dead = stream.handle();
  if (dead == default_stream_) return;
  const KeepCurrentDevice keep(device_);
  use_cuda_device(device_);  // before the cache changes: a throw here loses no block
  std::vector<void*> cached;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    for (auto it = free_.lower_bound(Key{dead, 0}); it != free_.end() && it->first.first == dead;) {
      stats_.cached_bytes -= it->first.second * it->second.size();
      cached.insert(cached.end(), it->second.begin(), it->second.end());
      it = free_.erase(it);
    }
    for (auto it = owner_.begin(); it != owner_.end();)
      if (it->second == dead) {
        orphans_.insert(it->first);
        it = owner_.erase(it);
      } else {
        ++it;
      }
  }
  for (void* p : cached) cudaFree(p);
}

Allocation CudaAllocator::allocate_on(std::size_t bytes, CudaStreamHandle stream) {
  if (bytes == 0) return {nullptr, 0, place()};
  if (bytes > CpuAllocator::kMaxBytes)
    throw_error(ErrorKind::InvalidArgument, "cuda allocator (", place().to_string(),
                "): cannot allocate ", bytes, " bytes (the maximum is ", CpuAllocator::kMaxBytes, ")");
  const std::size_t size = size_class_bytes(bytes);
  {
    std::lock_guard<std::mutex> guard(mutex_);
    auto it = free_.find(Key{stream, size});
    if (it != free_.end() && !it->second.empty()) {
      void* ptr = it->second.back();
      it->second.pop_back();
      stats_.cached_bytes -= size;
      owner_.emplace(ptr, stream);
      note_allocation(stats_, size, true);
      return {ptr, size, place()};
    }
  }
  void* ptr = device_malloc(size, bytes);
  std::lock_guard<std::mutex> guard(mutex_);
  owner_.emplace(ptr, stream);
  note_allocation(stats_, size, false);
  return {ptr, size, place()};
}

void* CudaAllocator::device_malloc(std::size_t size, std::size_t requested) {
  use_cuda_device(device_);
  void* ptr = nullptr;
  if (cudaMalloc(&ptr, size) == cudaSuccess) return ptr;
  cudaGetLastError();  // clear the failure before retrying
  release_cache();     // the cache may hold the memory, in other classes or streams
  if (cudaMalloc(&ptr, size) == cudaSuccess) return ptr;
  cudaGetLastError();
  std::size_t free_bytes = 0, total_bytes = 0;
  cudaMemGetInfo(&free_bytes, &total_bytes);
  const AllocatorStats s = stats();
  throw_error(ErrorKind::Unavailable, "cuda allocator (", place().to_string(),
              "): out of memory allocating ", requested, " bytes (", free_bytes, " of ",
              total_bytes, " bytes free on the device; kiln holds ", s.bytes_in_use, " in use)");
}

void CudaAllocator::deallocate(const Allocation& a) noexcept {
  if (!a.ptr) return;
  std::unique_lock<std::mutex> guard(mutex_);
  if (orphans_.erase(a.ptr)) {  // its stream retired: back to the driver
    stats_.bytes_in_use -= a.size;
    guard.unlock();
    // No throw here; the caller's thread keeps its device and no error of ours.
    const KeepCurrentDevice keep(device_);
    cudaSetDevice(device_);
    if (cudaFree(a.ptr) != cudaSuccess) cudaGetLastError();
    return;
  }
  auto it = owner_.find(a.ptr);
  if (it == owner_.end()) return;  // not ours: never happens with Allocations from allocate()
  const CudaStreamHandle stream = it->second;
  owner_.erase(it);
  stats_.bytes_in_use -= a.size;
  stats_.cached_bytes += a.size;
  free_[Key{stream, a.size}].push_back(a.ptr);
}

AllocatorStats CudaAllocator::stats() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return stats_;
}

void CudaAllocator::reset_peak() {
  std::lock_guard<std::mutex> guard(mutex_);
  stats_.peak_bytes_in_use = stats_.bytes_in_use;
}

std::size_t CudaAllocator::reserved_bytes() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return stats_.bytes_in_use + stats_.cached_bytes;
}

std::size_t CudaAllocator::release_cache() {
  std::map<Key, std::vector<void*>> blocks;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    blocks.swap(free_);
    stats_.cached_bytes = 0;
  }
  std::size_t released = 0;
  if (blocks.empty()) return 0;
  use_cuda_device(device_);
  for (auto& [key, ptrs] : blocks)
    for (void* p : ptrs) {
      cudaFree(p);
      released += key.second;
    }
  return released;
}

// ---- PinnedHostAllocator ----

PinnedHostAllocator::~PinnedHostAllocator() { release_cache(); }

Allocation PinnedHostAllocator::allocate(std::size_t bytes) {
  if (bytes == 0) return {nullptr, 0, place()};
  const std::size_t size = CpuAllocator::size_class_bytes(bytes);
  {
    std::lock_guard<std::mutex> guard(mutex_);
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      void* ptr = it->second.back();
      it->second.pop_back();
      stats_.cached_bytes -= size;
      note_allocation(stats_, size, true);
      return {ptr, size, place()};
    }
  }
  void* ptr = nullptr;
  if (cudaHostAlloc(&ptr, size, cudaHostAllocPortable) != cudaSuccess) {
    cudaGetLastError();
    release_cache();
    if (cudaHostAlloc(&ptr, size, cudaHostAllocPortable) != cudaSuccess) {
      cudaGetLastError();
      throw_error(ErrorKind::Unavailable, "pinned host allocator: out of memory allocating ",
                  bytes, " bytes");
    }
  }
  std::lock_guard<std::mutex> guard(mutex_);
  note_allocation(stats_, size, false);
  return {ptr, size, place()};
}

void PinnedHostAllocator::deallocate(const Allocation& a) noexcept {
  if (!a.ptr) return;
  std::lock_guard<std::mutex> guard(mutex_);
  stats_.bytes_in_use -= a.size;
  stats_.cached_bytes += a.size;
  free_[a.size].push_back(a.ptr);
}

AllocatorStats PinnedHostAllocator::stats() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return stats_;
}

void PinnedHostAllocator::reset_peak() {
  std::lock_guard<std::mutex> guard(mutex_);
  stats_.peak_bytes_in_use = stats_.bytes_in_use;
}

std::size_t PinnedHostAllocator::release_cache() {
  std::map<std::size_t, std::vector<void*>> blocks;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    blocks.swap(free_);
    stats_.cached_bytes = 0;
  }
  std::size_t released = 0;
  for (auto& [size, ptrs] : blocks)
    for (void* p : ptrs) {
      cudaFreeHost(p);
      released += size;
    }
  return released;
}

PinnedHostAllocator& pinned_host_allocator() {
  static auto* a = new PinnedHostAllocator();  // never destroyed: buffers may outlive statics
  return *a;
}

}  // namespace kiln

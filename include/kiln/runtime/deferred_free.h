// DeferredFreeQueue: where stream-safe freeing (seed 001 §4.2, RecordStreamGC)
// parks buffers whose last reference dropped while streams that used them
// still had queued work; each is freed once all its recorded events complete.
// Like Paddle's StreamSafeCUDAAllocator::ProcessUnfreedAllocations, it is
// polled: collect() frees what is ready (push() calls it every so often).
#pragma once

#include <cstddef>
#include <vector>

#include "kiln/runtime/spin_lock.h"

namespace kiln {

class Buffer;

class DeferredFreeQueue {
 public:
  DeferredFreeQueue() = default;
  // drain()s: waits for the streams, then frees everything still parked.
  ~DeferredFreeQueue();
  DeferredFreeQueue(const DeferredFreeQueue&) = delete;
  DeferredFreeQueue& operator=(const DeferredFreeQueue&) = delete;

  // Takes ownership of a buffer with no references left (Buffer calls this).
  // Frees it now if its streams are done; otherwise parks it.
  void push(Buffer* buffer) noexcept;
  // Frees the parked buffers whose events completed; returns how many.
  std::size_t collect();
  // Waits for every parked buffer's events, frees them all; returns how many.
  std::size_t drain();

  std::size_t pending() const;
  std::size_t pending_bytes() const;

 private:
  mutable SpinLock lock_;
  std::vector<Buffer*> parked_;       // guarded by lock_
  std::size_t collect_threshold_ = 64;  // guarded by lock_: push() collects when reached
};

// The queue buffers go to when record_stream() is not given one. Never
// destroyed (buffers may be released during static destruction).
DeferredFreeQueue& deferred_free_queue();

}  // namespace kiln

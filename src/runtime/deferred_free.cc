// DeferredFreeQueue: parks buffers until their recorded stream events complete.
#include "kiln/runtime/deferred_free.h"

#include <mutex>
#include <utility>

#include "kiln/runtime/buffer.h"

namespace kiln {

DeferredFreeQueue::~DeferredFreeQueue() { drain(); }

void DeferredFreeQueue::push(Buffer* buffer) noexcept {
  bool collect_now = false;
  try {
    std::lock_guard<SpinLock> guard(lock_);
    parked_.push_back(buffer);
    if (parked_.size() >= collect_threshold_) collect_now = true;
  } catch (...) {
    // Out of memory growing the list: free it the safe, slow way.
    buffer->synchronize_streams();
    delete buffer;
    return;
  }
  if (collect_now) {
    try {
      collect();
    } catch (...) {
      // collect() only fails to grow a vector; the buffers stay parked.
    }
  }
}

std::size_t DeferredFreeQueue::collect() {
  std::vector<Buffer*> parked;
  {
    std::lock_guard<SpinLock> guard(lock_);
    parked.swap(parked_);
  }
  // Query outside the lock (a CUDA event query is a driver call).
  std::vector<Buffer*> keep;
  std::size_t freed = 0;
  for (Buffer* b : parked) {
    if (b->streams_done()) {
      delete b;
      ++freed;
    } else {
      keep.push_back(b);
    }
  }
  std::lock_guard<SpinLock> guard(lock_);
  parked_.insert(parked_.end(), keep.begin(), keep.end());
  // Amortise: the next automatic collect waits until the list doubles.
  collect_threshold_ = std::max<std::size_t>(64, 2 * parked_.size());
  return freed;
}

std::size_t DeferredFreeQueue::drain() {
  std::size_t freed = 0;
  for (;;) {
    std::vector<Buffer*> parked;
    {
      std::lock_guard<SpinLock> guard(lock_);
      parked.swap(parked_);
      collect_threshold_ = 64;
    }
    if (parked.empty()) return freed;
    for (Buffer* b : parked) {
      b->synchronize_streams();
      delete b;
      ++freed;
    }
  }
}

std::size_t DeferredFreeQueue::pending() const {
  std::lock_guard<SpinLock> guard(lock_);
  return parked_.size();
}

std::size_t DeferredFreeQueue::pending_bytes() const {
  std::lock_guard<SpinLock> guard(lock_);
  std::size_t bytes = 0;
  for (const Buffer* b : parked_) bytes += b->size();
  return bytes;
}

DeferredFreeQueue& deferred_free_queue() {
  // Never destroyed: buffers may be released during static destruction.
  static DeferredFreeQueue* const queue = new DeferredFreeQueue();
  return *queue;
}

}  // namespace kiln

// Buffer: the ref-counted storage behind Tensors, given back to its Allocator
// (or external memory to its deleter) when the last reference drops. Also seed
// 001 §4.2's stream-safe freeing (RecordStream): record_stream(s) marks it used
// by work queued on s; released before that work ran, the memory waits in a
// DeferredFreeQueue until the recorded events complete.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "kiln/runtime/allocator.h"
#include "kiln/runtime/spin_lock.h"

namespace kiln {

class DeferredFreeQueue;
class Event;
class Stream;

class Buffer {
 public:
  using Deleter = std::function<void(void* ptr)>;

  // A buffer owning `allocation`, returned to `allocator` at the end. One
  // reference, owned by the caller (adopt it with BufferRef::adopt).
  static Buffer* create(const Allocation& allocation, Allocator* allocator);
  // A buffer over memory kiln does not own; `deleter` (may be empty) is called
  // with `ptr` at the end.
  static Buffer* wrap(void* ptr, std::size_t size, Place place, Deleter deleter);

  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const noexcept { return allocation_.ptr; }
  std::size_t size() const noexcept { return allocation_.size; }
  Place place() const noexcept { return allocation_.place; }
  Allocator* allocator() const noexcept { return allocator_; }

  // Which contents the buffer holds, for caches of data derived from it
  // (oneDNN's reordered convolution weights): a number no other buffer of
  // the process has, and a count that changes with every write announced
  // through a Tensor's non-const accessors (data<T>(), raw_data()). Memory
  // written another way (through data() here, or external memory its owner
  // writes) is not counted: such caches take only buffers an allocator owns.
  std::uint64_t id() const noexcept { return id_; }
  std::uint64_t writes() const noexcept { return writes_.load(std::memory_order_relaxed); }
  // A load and a store, no read-modify-write: writers of one buffer at once
  // (disjoint views) may count once, which still changes the count.
  void note_write() noexcept {
    writes_.store(writes_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }

  void retain() noexcept;
  void release() noexcept;
  long use_count() const noexcept;

  // Marks the buffer as used by the work enqueued on `stream` so far (an event
  // recorded on it, one event per stream, re-recorded on later calls). When the
  // last reference drops before every such event completed, the memory goes to
  // `queue` (default: deferred_free_queue()) instead of back to the allocator.
  // Call it for every stream whose queued work reads or writes the buffer,
  // including the one that wrote it: the CPU allocator is shared by all streams.
  void record_stream(Stream& stream, DeferredFreeQueue* queue = nullptr);
  // True when no recorded stream has pending work on this buffer.
  bool streams_done() const;
  // Whether record_stream was ever called (no lock).
  bool stream_recorded() const noexcept { return has_uses_.load(std::memory_order_acquire); }
  // Blocks until streams_done().
  void synchronize_streams() const;

 private:
  friend class DeferredFreeQueue;
  // Deletes an Event (buffer.cc): this header only declares the stream
  // types, and the inline ~Buffer destroys uses_.
  struct EventDeleter {
    void operator()(Event* event) const noexcept;
  };
  struct StreamUse {
    const Stream* stream;
    std::unique_ptr<Event, EventDeleter> event;
  };

  Buffer(const Allocation& allocation, Allocator* allocator, Deleter deleter);
  ~Buffer();
  void on_last_release() noexcept;  // slow path when streams were recorded (buffer.cc)

  static std::uint64_t next_id() noexcept;  // buffer.cc

  // Starts at 1 (the creator's reference).
  std::atomic<long> refs_{1};
  std::uint64_t id_ = next_id();
  std::atomic<std::uint64_t> writes_{0};
  Allocation allocation_;
  Allocator* allocator_;  // null for wrapped memory
  Deleter deleter_;
  mutable SpinLock uses_lock_;
  std::vector<StreamUse> uses_;         // guarded by uses_lock_
  DeferredFreeQueue* queue_ = nullptr;  // guarded by uses_lock_
  // Set once a stream was recorded; lets release() skip the lock when never.
  std::atomic<bool> has_uses_{false};
};

// An owning, intrusive pointer to a Buffer (one pointer wide; copying is one
// relaxed atomic increment).
class BufferRef {
 public:
  BufferRef() noexcept = default;
  // Takes over the reference the caller holds (from Buffer::create / wrap).
  static BufferRef adopt(Buffer* buffer) noexcept;

  BufferRef(const BufferRef& o) noexcept;
  BufferRef(BufferRef&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  BufferRef& operator=(const BufferRef& o) noexcept;
  BufferRef& operator=(BufferRef&& o) noexcept;
  ~BufferRef() { reset(); }

  void reset() noexcept;
  Buffer* get() const noexcept { return p_; }
  Buffer* operator->() const noexcept { return p_; }
  Buffer& operator*() const noexcept { return *p_; }
  explicit operator bool() const noexcept { return p_ != nullptr; }
  friend bool operator==(const BufferRef& a, const BufferRef& b) noexcept { return a.p_ == b.p_; }

 private:
  Buffer* p_ = nullptr;
};

// ---------------------------------------------------------------------------

inline void Buffer::retain() noexcept {
  // relaxed: a new reference is made from an existing one, which already keeps
  // the buffer alive; no data is published by incrementing.
  refs_.fetch_add(1, std::memory_order_relaxed);
}

inline void Buffer::release() noexcept {
  // acq_rel: release publishes this owner's writes to the buffer; the acquire
  // on the final decrement makes every other owner's writes visible to the
  // thread that frees (and may reuse) the memory.
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  // acquire: pairs with the release-store in record_stream(), so uses_ is seen.
  if (has_uses_.load(std::memory_order_acquire)) {
    on_last_release();
  } else {
    delete this;
  }
}

inline long Buffer::use_count() const noexcept {
  // acquire: a caller that sees 1 may reuse the memory (KernelContext::
  // alloc_output); this pairs with release() of the owner that let go last,
  // so that owner's reads and writes happen before the caller's reuse.
  return refs_.load(std::memory_order_acquire);
}

inline BufferRef BufferRef::adopt(Buffer* buffer) noexcept {
  BufferRef r;
  r.p_ = buffer;
  return r;
}

inline BufferRef::BufferRef(const BufferRef& o) noexcept : p_(o.p_) {
  if (p_) p_->retain();
}

inline BufferRef& BufferRef::operator=(const BufferRef& o) noexcept {
  if (o.p_) o.p_->retain();  // first, in case o aliases *this
  reset();
  p_ = o.p_;
  return *this;
}

inline BufferRef& BufferRef::operator=(BufferRef&& o) noexcept {
  if (this != &o) {
    reset();
    p_ = std::exchange(o.p_, nullptr);
  }
  return *this;
}

inline void BufferRef::reset() noexcept {
  if (Buffer* p = std::exchange(p_, nullptr)) p->release();
}

}  // namespace kiln

// Buffer's construction and destruction, and its stream-safe freeing slow paths
// (seed 001 §4.2 RecordStream).
#include "kiln/runtime/buffer.h"

#include <mutex>

#include "kiln/runtime/deferred_free.h"
#include "kiln/runtime/stream.h"

namespace kiln {

Buffer::Buffer(const Allocation& allocation, Allocator* allocator, Deleter deleter)
    : allocation_(allocation), allocator_(allocator), deleter_(std::move(deleter)) {}

Buffer::~Buffer() {
  if (allocator_) {
    allocator_->deallocate(allocation_);
  } else if (deleter_) {
    deleter_(allocation_.ptr);
  }
}

Buffer* Buffer::create(const Allocation& allocation, Allocator* allocator) {
  return new Buffer(allocation, allocator, Deleter{});
}

Buffer* Buffer::wrap(void* ptr, std::size_t size, Place place, Deleter deleter) {
  return new Buffer(Allocation{ptr, size, place}, nullptr, std::move(deleter));
}

std::uint64_t Buffer::next_id() noexcept {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

void Buffer::EventDeleter::operator()(Event* event) const noexcept { delete event; }

void Buffer::record_stream(Stream& stream, DeferredFreeQueue* queue) {
  std::lock_guard<SpinLock> guard(uses_lock_);
  if (queue) queue_ = queue;
  StreamUse* use = nullptr;
  for (auto& u : uses_)
    if (u.stream == &stream) use = &u;
  if (!use) {
    uses_.push_back({&stream, std::unique_ptr<Event, EventDeleter>(stream.create_event().release())});
    use = &uses_.back();
  }
  use->event->record(stream);  // captures everything enqueued on `stream` so far
  // release: pairs with the acquire in release(); the final releaser then
  // sees uses_ (also published by uses_lock_, but release() reads the flag
  // without taking the lock).
  has_uses_.store(true, std::memory_order_release);
}

bool Buffer::streams_done() const {
  std::lock_guard<SpinLock> guard(uses_lock_);
  for (const auto& u : uses_)
    if (!u.event->query()) return false;
  return true;
}

void Buffer::synchronize_streams() const {
  std::lock_guard<SpinLock> guard(uses_lock_);
  for (const auto& u : uses_) u.event->synchronize();
}

void Buffer::on_last_release() noexcept {
  // No other reference exists, so no other thread touches uses_ now.
  bool done = true;
  for (const auto& u : uses_) done = done && u.event->query();
  if (done) {
    delete this;
    return;
  }
  DeferredFreeQueue* queue = queue_ ? queue_ : &deferred_free_queue();
  queue->push(this);
}

}  // namespace kiln

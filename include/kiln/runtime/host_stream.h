// HostStream / HostEvent: the host-stream device, the CPU implementation of
// Stream and Event (seed 001 §3.3.1.2 event successors, §4.2 cross-stream
// events and stream-safe freeing), so multi-stream scheduling can be tested
// without a GPU. A stream is an in-order task queue served by its own thread;
// an event is a position (task count) in one stream's queue.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "kiln/runtime/spin_lock.h"
#include "kiln/runtime/stream.h"

namespace kiln {

namespace detail {

// Shared by a HostStream, its worker thread, and the events recorded on it, so
// an event or a pending wait outlives the stream object safely.
struct HostStreamState {
  explicit HostStreamState(Place place) : place(place) {}

  // Blocks until `completed` >= target. Called by event/stream synchronize()
  // and by a waiting stream's worker.
  void wait_for(std::uint64_t target);
  bool reached(std::uint64_t target) const noexcept {
    // acquire: pairs with the worker's store after a task ran, so a caller
    // that sees the count also sees the task's writes (its results).
    return completed.load(std::memory_order_acquire) >= target;
  }

  const Place place;
  std::mutex mutex;
  std::condition_variable work_cv;  // the worker sleeps here when the queue is empty
  std::condition_variable done_cv;  // wait_for() sleeps here
  std::vector<Task> pending;        // guarded by mutex
  bool stop = false;                // guarded by mutex
  bool worker_idle = false;         // guarded by mutex
  std::exception_ptr first_error;   // guarded by mutex
  // Written only under mutex (so queue order = sequence order); read anywhere.
  std::atomic<std::uint64_t> enqueued{0};
  // Number of tasks run (or skipped); written only by the worker.
  std::atomic<std::uint64_t> completed{0};
  // The lowest target a thread in wait_for() sleeps for (max when none); the
  // worker notifies done_cv only when `completed` reaches it, so a waiter is
  // not woken once per task.
  std::atomic<std::uint64_t> wake_at{~std::uint64_t{0}};
  // Set by the worker when a task throws; tasks are skipped while set.
  std::atomic<bool> failed{false};
  std::thread::id worker_id;
};

}  // namespace detail

class HostStream final : public Stream {
 public:
  // A stream at Place::host_stream(id), with its own thread.
  explicit HostStream(std::int16_t id = 0);
  // Runs the tasks still queued, then stops the thread. An error not yet
  // reported by synchronize() is dropped.
  ~HostStream() override;
  HostStream(const HostStream&) = delete;
  HostStream& operator=(const HostStream&) = delete;

  Place place() const noexcept override { return state_->place; }
  void enqueue(Task task) override;
  void wait(const Event& event) override;
  // Throws kiln::Error (PreconditionNotMet) when called from one of this
  // stream's own tasks (it would wait for itself).
  void synchronize() override;
  bool query() const override;
  std::unique_ptr<Event> create_event() const override;

  // Tasks enqueued / run so far (waits count as tasks).
  std::uint64_t enqueued_count() const noexcept;
  std::uint64_t completed_count() const noexcept;
  // True on this stream's worker thread.
  bool on_stream_thread() const noexcept;

 private:
  friend class HostEvent;
  void worker_loop();

  std::shared_ptr<detail::HostStreamState> state_;
  std::thread thread_;
};

class HostEvent final : public Event {
 public:
  HostEvent() = default;

  void record(Stream& stream) override;
  bool query() const override;
  // Throws kiln::Error (PreconditionNotMet) when called from a task of the
  // stream it waits on for work queued after that task (it would deadlock).
  void synchronize() const override;

  // The stream position this event captured; {nullptr, 0} if never recorded.
  struct Snapshot {
    std::shared_ptr<detail::HostStreamState> stream;
    std::uint64_t target = 0;
  };
  Snapshot snapshot() const;

 private:
  mutable SpinLock lock_;
  Snapshot snapshot_;  // guarded by lock_
};

// ---------------------------------------------------------------------------

inline std::uint64_t HostStream::enqueued_count() const noexcept {
  // relaxed: a counter read for information; callers that need ordering
  // synchronize() first.
  return state_->enqueued.load(std::memory_order_relaxed);
}

inline std::uint64_t HostStream::completed_count() const noexcept {
  return state_->completed.load(std::memory_order_acquire);  // see reached()
}

inline bool HostStream::query() const {
  // relaxed on enqueued: any enqueue that happens-before this call is seen
  // (coherence); the acquire in reached() makes the tasks' writes visible.
  return state_->reached(state_->enqueued.load(std::memory_order_relaxed));
}

inline bool HostStream::on_stream_thread() const noexcept {
  return std::this_thread::get_id() == state_->worker_id;
}

inline HostEvent::Snapshot HostEvent::snapshot() const {
  std::lock_guard<SpinLock> guard(lock_);
  return snapshot_;
}

inline bool HostEvent::query() const {
  std::lock_guard<SpinLock> guard(lock_);
  return !snapshot_.stream || snapshot_.stream->reached(snapshot_.target);
}

}  // namespace kiln

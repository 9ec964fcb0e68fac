// HostStream: an in-order task queue served by one thread; HostEvent: a task
// count in one such queue (seed 001 §3.3.1.2, §4.2).
#include "kiln/runtime/host_stream.h"

#include <string>
#include <utility>

#include "kiln/support/error.h"
#include "kiln/support/thread_name.h"

namespace kiln {

namespace detail {

void HostStreamState::wait_for(std::uint64_t target) {
  if (reached(target)) return;
  std::unique_lock<std::mutex> lock(mutex);
  for (;;) {
    // Register: wake_at = min(wake_at, target). seq_cst (with the load of
    // `completed` below and the worker's store/load pair): a Dekker handshake.
    // Either the worker's load of wake_at sees our target (and it notifies
    // under the mutex), or our load of `completed` sees its store; never
    // neither, so no wake-up is lost. When a lower target is registered we do
    // not store; the worker wakes everyone at that lower point and we
    // re-register (the worker resets wake_at under the mutex we hold here).
    std::uint64_t cur = wake_at.load(std::memory_order_seq_cst);
    while (target < cur && !wake_at.compare_exchange_weak(cur, target, std::memory_order_seq_cst)) {
    }
    if (completed.load(std::memory_order_seq_cst) >= target) return;
    done_cv.wait(lock);
  }
}

}  // namespace detail

namespace {

// Converts what a task threw into the kiln::Error synchronize() rethrows.
[[noreturn]] void rethrow_as_error(const std::exception_ptr& error, Place place) {
  try {
    std::rethrow_exception(error);
  } catch (const Error&) {
    throw;  // already names what failed; keep its kind
  } catch (const std::exception& e) {
    throw_error(ErrorKind::Internal, "a task on ", place.to_string(), " threw: ", e.what());
  } catch (...) {
    throw_error(ErrorKind::Internal, "a task on ", place.to_string(), " threw a non-std exception");
  }
}

}  // namespace

HostStream::HostStream(std::int16_t id)
    : state_(std::make_shared<detail::HostStreamState>(Place::host_stream(id))) {
  thread_ = std::thread([this] { worker_loop(); });
  // Tasks only run after an enqueue (which locks state_->mutex after this
  // store), so the worker's own reads of worker_id are ordered after it.
  state_->worker_id = thread_.get_id();
}

HostStream::~HostStream() {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stop = true;
  }
  state_->work_cv.notify_one();
  thread_.join();
}

void HostStream::worker_loop() {
  name_this_thread("kiln-stream");
  detail::HostStreamState& s = *state_;
  std::vector<Task> batch;
  std::unique_lock<std::mutex> lock(s.mutex);
  for (;;) {
    while (s.pending.empty() && !s.stop) {
      s.worker_idle = true;
      s.work_cv.wait(lock);
      s.worker_idle = false;
    }
    if (s.pending.empty()) return;  // stopping, and everything queued has run
    batch.swap(s.pending);  // both vectors keep their capacity: no steady-state allocation
    lock.unlock();
    for (Task& task : batch) {
      // relaxed: `failed` is only written by this thread, or cleared by
      // synchronize() under the mutex, which this thread took before the batch.
      if (!s.failed.load(std::memory_order_relaxed)) {
        try {
          task();
        } catch (...) {
          std::lock_guard<std::mutex> guard(s.mutex);
          if (!s.first_error) s.first_error = std::current_exception();
          s.failed.store(true, std::memory_order_relaxed);  // relaxed: see above
        }
      }
      task.reset();  // drop the captures before the task counts as complete
      // seq_cst: release for event/synchronize waiters (they acquire the count
      // and must see the task's writes), and the store half of the Dekker
      // handshake with wait_for().
      const std::uint64_t done = s.completed.fetch_add(1, std::memory_order_seq_cst) + 1;
      if (done >= s.wake_at.load(std::memory_order_seq_cst)) {
        // Taking the mutex orders this notify after a waiter's check; the
        // woken waiters whose targets are still ahead re-register.
        std::lock_guard<std::mutex> guard(s.mutex);
        s.wake_at.store(~std::uint64_t{0}, std::memory_order_relaxed);  // relaxed: under the mutex
        s.done_cv.notify_all();
      }
    }
    batch.clear();
    lock.lock();
  }
}

void HostStream::enqueue(Task task) {
  if (!task) throw_error(ErrorKind::InvalidArgument, place().to_string(), ": enqueue of an empty task");
  detail::HostStreamState& s = *state_;
  bool wake;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.pending.push_back(std::move(task));
    // relaxed: written only under the mutex; readers that need it ordered
    // with this enqueue are ordered by the caller (see HostEvent::record).
    s.enqueued.store(s.enqueued.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    wake = s.worker_idle;
  }
  if (wake) s.work_cv.notify_one();
}

void HostStream::wait(const Event& event) {
  const auto* host_event = dynamic_cast<const HostEvent*>(&event);
  if (!host_event)
    throw_error(ErrorKind::InvalidArgument, place().to_string(),
                ": wait on an event of another kind (expected a HostEvent)");
  HostEvent::Snapshot snap = host_event->snapshot();
  if (!snap.stream) return;                   // never recorded: already complete
  if (snap.stream == state_) return;          // same stream: in-order already
  if (snap.stream->reached(snap.target)) return;  // already complete
  enqueue([stream = std::move(snap.stream), target = snap.target] { stream->wait_for(target); });
}

void HostStream::synchronize() {
  if (on_stream_thread())
    throw_error(ErrorKind::PreconditionNotMet, place().to_string(),
                ": synchronize() called from one of its own tasks would wait for itself");
  detail::HostStreamState& s = *state_;
  s.wait_for(s.enqueued.load(std::memory_order_relaxed));  // relaxed: see query()
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    error = std::exchange(s.first_error, nullptr);
    s.failed.store(false, std::memory_order_relaxed);  // relaxed: ordered by the mutex
  }
  if (error) rethrow_as_error(error, place());
}

std::unique_ptr<Event> HostStream::create_event() const { return std::make_unique<HostEvent>(); }

void HostEvent::record(Stream& stream) {
  auto* host = dynamic_cast<HostStream*>(&stream);
  if (!host)
    throw_error(ErrorKind::InvalidArgument, "HostEvent::record on stream ", stream.place().to_string(),
                " (expected a host stream)");
  // relaxed: the enqueues this event must cover happen-before this call (same
  // thread, or ordered by the caller's own synchronisation), so coherence
  // guarantees we read at least their count.
  std::uint64_t target = host->state_->enqueued.load(std::memory_order_relaxed);
  std::lock_guard<SpinLock> guard(lock_);
  if (snapshot_.stream != host->state_) snapshot_.stream = host->state_;
  snapshot_.target = target;
}

void HostEvent::synchronize() const {
  Snapshot snap = snapshot();
  if (!snap.stream || snap.stream->reached(snap.target)) return;
  if (std::this_thread::get_id() == snap.stream->worker_id)
    throw_error(ErrorKind::PreconditionNotMet, "HostEvent::synchronize() from a task of ",
                snap.stream->place.to_string(), " waits for work queued after that task (deadlock)");
  snap.stream->wait_for(snap.target);
}

}  // namespace kiln

// Stream and Event: an in-order queue of device work and a marker in it
// (seed 001 §3.3.1.2 / §4.2: cudaStream_t, cudaEventRecord, cudaStreamWaitEvent,
// cudaEventQuery). These are the interfaces the executor schedules against;
// HostStream/HostEvent (host_stream.h) implement them on CPU threads, a CUDA
// implementation comes later with the same semantics.
#pragma once

#include <memory>

#include "kiln/runtime/task.h"
#include "kiln/support/error.h"
#include "kiln/support/place.h"

namespace kiln {

class Event;

class Stream {
 public:
  virtual ~Stream() = default;

  virtual Place place() const noexcept = 0;

  // Runs `task` after every task enqueued before it on this stream (and after
  // the events this stream was told to wait for before it). Never blocks on
  // the queued work. On a host stream the task runs on the stream's thread.
  virtual void enqueue(Task task) = 0;

  // Tasks enqueued after this call do not start before `event` completes (its
  // most recent record() at the time of this call; a never-recorded event is
  // already complete). Does not block the caller.
  virtual void wait(const Event& event) = 0;

  // Blocks until every task enqueued before the call has run; then rethrows,
  // as kiln::Error, the first exception a task threw since the last
  // synchronize() (clearing it). After a task has thrown, the stream skips
  // later tasks until that synchronize() reports the error.
  virtual void synchronize() = 0;

  // True when every task enqueued so far has run. Non-blocking.
  virtual bool query() const = 0;

  // A new event of the kind this stream records.
  virtual std::unique_ptr<Event> create_event() const = 0;
};

class Event {
 public:
  virtual ~Event() = default;

  // Captures the work enqueued on `stream` so far; the event completes when
  // that work has run. Re-recording moves the event to the newer point (or
  // another stream). Throws kiln::Error (InvalidArgument) for a stream of
  // another kind.
  virtual void record(Stream& stream) = 0;

  // Non-blocking: has the recorded work run? True for a never-recorded event.
  virtual bool query() const = 0;

  // Blocks until query() is true.
  virtual void synchronize() const = 0;
};

}  // namespace kiln

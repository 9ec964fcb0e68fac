// CudaStream / CudaEvent: the Stream and Event interfaces (stream.h) on a
// CUDA device (seed 001 §3.3.1.2 / §4.2: cudaStream_t, cudaEventRecord,
// cudaStreamWaitEvent, cudaEventQuery). A task enqueued on a CudaStream is
// a launcher: it runs at once on the calling thread, with the stream's
// device current, and puts its device work (kernels, async copies) on the
// stream, where it runs in enqueue order. The device work is what later
// tasks, waits and events order against; the host part is done when
// enqueue returns.
//
// Built with CUDA only (meson option `cuda`); without it, kiln/runtime/
// cuda_context.h's cuda_device_count() is 0 and constructing one of these
// throws kiln::Error (Unimplemented). No CUDA header is needed to include
// this one: handles are opaque.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>

#include "kiln/runtime/stream.h"

struct CUstream_st;
struct CUevent_st;

namespace kiln {

using CudaStreamHandle = CUstream_st*;  // cudaStream_t
using CudaEventHandle = CUevent_st*;    // cudaEvent_t

class CudaStream final : public Stream {
 public:
  // A new non-blocking stream on device `device` (cudaStreamNonBlocking: no
  // implicit order with the legacy default stream). kiln::Error naming the
  // device when it does not exist.
  explicit CudaStream(int device = 0);
  ~CudaStream() override;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  Place place() const noexcept override { return Place::cuda(static_cast<std::int16_t>(device_)); }
  // Runs `task` now (it launches device work on handle()); a task that
  // throws is reported by the next synchronize(), and tasks enqueued until
  // then are skipped.
  void enqueue(Task task) override;
  // cudaStreamWaitEvent: device work launched later waits for `event`.
  // kiln::Error (InvalidArgument) for an event of another kind.
  void wait(const Event& event) override;
  // Waits for the device work; rethrows a task's error or the device's
  // (an asynchronous kernel fault) as kiln::Error.
  void synchronize() override;
  bool query() const override;
  std::unique_ptr<Event> create_event() const override;

  CudaStreamHandle handle() const noexcept { return stream_; }
  int device() const noexcept { return device_; }

 private:
  int device_;
  CudaStreamHandle stream_ = nullptr;
  std::mutex error_mutex_;
  std::exception_ptr first_error_;    // guarded by error_mutex_
  std::atomic<bool> failed_{false};  // set with first_error_; read without the lock
};

class CudaEvent final : public Event {
 public:
  // `timing`: the event keeps a device timestamp (elapsed_ms); events for
  // ordering alone skip it, which makes recording them cheaper.
  explicit CudaEvent(int device = 0, bool timing = false);
  ~CudaEvent() override;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  // kiln::Error (InvalidArgument) for a stream that is not a CudaStream.
  void record(Stream& stream) override;
  bool query() const override;
  void synchronize() const override;

  CudaEventHandle handle() const noexcept { return event_; }
  // Milliseconds of device time from `start` to this event, both timing
  // events of one device that completed (synchronize() first).
  double elapsed_ms(const CudaEvent& start) const;

 private:
  int device_;
  CudaEventHandle event_ = nullptr;
};

// kiln::Error (Internal; Unavailable for out-of-memory) naming
// `what` and CUDA's message when `status` (a cudaError_t) is not success.
void check_cuda(int status, const char* what);
// Makes `device` the calling thread's current CUDA device (cheap when it
// already is); check_cuda's error when it cannot.
void use_cuda_device(int device);

}  // namespace kiln

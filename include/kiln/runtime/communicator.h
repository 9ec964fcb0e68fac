// Communicator: the ranks of one data-parallel job and the collectives that
// run over them (allreduce, broadcast, allgather, reduce-scatter, barrier) on
// an existing engine — MPI on host tensors, NCCL on CUDA tensors — or, for a
// single process, on nothing at all. Every collective runs on the
// communicator's own thread in the order it was submitted, so ranks that
// submit in program order (collective ops carry the Communication trait)
// meet in the same order (seed 001 §3.3.1.1).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>

#include "kiln/runtime/tensor.h"
#include "kiln/support/data_type.h"
#include "kiln/support/error.h"
#include "kiln/support/reduce_kind.h"

namespace kiln {

// Local: one process, collectives copy (size 1). Mpi: host tensors over
// MPI_COMM_WORLD. Nccl: CUDA tensors over an NCCL communicator.
enum class CommBackend : std::uint8_t { Local, Mpi, Nccl };

constexpr std::string_view to_string(CommBackend b) {
  switch (b) {
    case CommBackend::Local: return "local";
    case CommBackend::Mpi: return "mpi";
    case CommBackend::Nccl: return "nccl";
  }
  return "?";
}

class Communicator {
 public:
  virtual ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  CommBackend backend() const { return backend_; }
  // "rank 1 of 2 (mpi)": how errors name this process.
  std::string describe() const;

  // The job mpirun started (OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK in
  // the environment) over MPI when kiln was built with MPI — one per
  // process, shared by every call; MPI is initialized on the communicator's
  // thread and finalized when the process exits. Without such an
  // environment: single_process(). kiln::Error (Unavailable) when mpirun
  // started the process but kiln was built without MPI.
  static std::shared_ptr<Communicator> from_environment();
  // Rank 0 of 1; no thread, collectives copy.
  static std::shared_ptr<Communicator> single_process();
  // Whether this build has the MPI / NCCL backends.
  static bool built_with_mpi() noexcept;
  static bool built_with_nccl() noexcept;

  // ---- collectives; blocking, from any thread (they run on the
  // communicator's thread, after every earlier submission) ----

  // Every tensor in place: the element-wise reduction over the ranks. The
  // tensors share one dtype and go as one collective (a gradient bucket):
  // MPI keeps a request per tensor in flight at once, NCCL one group.
  void allreduce(std::span<Tensor> tensors, ReduceKind kind);
  void allreduce(Tensor& tensor, ReduceKind kind) { allreduce(std::span<Tensor>(&tensor, 1), kind); }
  // `tensor` in place: rank root's value on every rank.
  void broadcast(Tensor& tensor, int root);
  // Rank r's `tensor` becomes rows [r·d0, (r+1)·d0) of the result, whose
  // first dimension is size()·d0 (d0: tensor's first dimension; a scalar
  // gathers into a vector of size() elements).
  Tensor allgather(const Tensor& tensor);
  // The reduction over ranks of `tensor`, of which this rank keeps rows
  // [rank·d0/size, (rank+1)·d0/size); d0 must divide by size().
  Tensor reduce_scatter(const Tensor& tensor, ReduceKind kind);
  void barrier();

  // ---- asynchronous submission ----

  // Runs `work` on the communicator's thread after every earlier
  // submission (FIFO), then calls `done` there with null or the error
  // `work` threw. The Local backend runs both on the calling thread.
  using Work = std::function<void()>;
  using Done = std::function<void(const Error*)>;
  void submit(Work work, Done done);

  // The checks a collective makes before it is submitted: kiln::Error
  // naming `what` (an op, a call) and this rank when a tensor is
  // uninitialized, on a place this backend cannot reach, of a dtype it
  // cannot reduce, or when the bucket's dtypes differ.
  void check_reduce_input(std::string_view what, std::span<const Tensor* const> tensors, ReduceKind kind) const;
  void check_input(std::string_view what, const Tensor& tensor) const;
  // The work of each collective, on the communicator's thread (what the
  // blocking calls and the collective kernels submit). `out` is allocated
  // by the caller with the result's dims; allreduce's out[i] may be in[i]
  // (in place). The defaults pack several tensors into one message and
  // divide a mean on the host; a backend overrides what it does better.
  virtual void allreduce_now(std::span<const Tensor* const> in, std::span<Tensor* const> out, ReduceKind kind);
  virtual void broadcast_now(Tensor& tensor, int root);
  virtual void allgather_now(const Tensor& in, Tensor& out);
  virtual void reduce_scatter_now(const Tensor& in, Tensor& out, ReduceKind kind);
  void barrier_now() { barrier_impl(); }

  // A failure of this rank: prints "kiln: <describe()>: <message>" to
  // stderr, hands the message to every other rank — whose pending and later
  // collectives then fail with kiln::Error (Unavailable) "rank R failed:
  // <message>" — and, a moment later, ends the whole job (MPI_Abort).
  // The Local backend only prints and aborts the process. Installed as the
  // std::terminate handler of from_environment()'s MPI communicator, so an
  // exception that escapes main ends the job this way.
  [[noreturn]] void abort(const std::string& message);
  // Nanoseconds the communicator's thread has spent running submitted work
  // (collectives), since it started: a profile of how long a step's
  // allreduces took, wherever they overlapped. 0 for the Local backend.
  std::int64_t busy_ns() const;
  // Null, or the error a peer's failure (or a peer that left the job while
  // this rank waited on it) left this communicator with; every later
  // collective fails with it.
  virtual const Error* peer_failure() const { return nullptr; }

 protected:
  Communicator(int rank, int size, CommBackend backend, bool own_thread);
  // Stops the thread (after the work queued); derived destructors call it
  // before they tear the engine down.
  void stop_thread() noexcept;
  // Runs `work` on the communicator's thread and waits; rethrows its error.
  void run_blocking(Work work);
  // Set once by a backend that learns its place in the job on its thread.
  void set_world(int rank, int size) {
    rank_ = rank;
    size_ = size;
  }
  bool on_own_thread() const { return std::this_thread::get_id() == thread_.get_id(); }
  // data[0, count) /= size(): a mean from a sum (host memory; f32 or f64).
  void divide_by_size(void* data, std::size_t count, DataType dtype) const;

  // The engine's primitives, called on the communicator's thread, on
  // host or device memory of the backend's place.
  // Sum of `send` (null: `recv` in place) into `recv`.
  virtual void allreduce_impl(const void* send, void* recv, std::size_t count, DataType dtype) = 0;
  virtual void broadcast_impl(void* data, std::size_t bytes, int root) = 0;
  virtual void allgather_impl(const void* in, std::size_t bytes_per_rank, void* out) = 0;
  virtual void reduce_scatter_impl(const void* in, void* out, std::size_t count_per_rank, DataType dtype) = 0;
  virtual void barrier_impl() = 0;
  // Hands `message` to the other ranks and ends the job; never returns.
  [[noreturn]] virtual void abort_impl(const std::string& message);
  // Whether tensors on `place` are this backend's.
  virtual bool reaches(Place place) const { return place.is_cpu(); }

 private:
  void thread_main();

  int rank_;
  int size_;
  CommBackend backend_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::pair<Work, Done>> queue_;  // guarded by mutex_
  bool stopping_ = false;                     // guarded by mutex_
  std::atomic<std::int64_t> busy_ns_{0};
  std::thread thread_;
};

inline std::int64_t Communicator::busy_ns() const {
  // relaxed: a counter read for profiling; no data depends on it.
  return busy_ns_.load(std::memory_order_relaxed);
}

}  // namespace kiln

// The MPI backend (src/runtime/mpi_communicator.h). Everything MPI runs on
// the communicator's thread, which initializes MPI (MPI_THREAD_MULTIPLE, so
// that abort() may also speak from the thread that failed). Collectives are
// non-blocking MPI calls completed by a polling loop that also watches a
// second communicator for a failed peer's message: a rank never waits on a
// peer that is gone, and sleeps between polls, so its thread leaves the
// cores to the backward pass it overlaps.
#include "mpi_communicator.h"

// MPI's C API only (OpenMPI's C++ bindings are deprecated and warn).
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <optional>
#include <span>
#include <thread>
#include <vector>

namespace kiln::detail {
namespace {

constexpr int kFailureTag = 77;
// "This rank is finalizing": a rank still waiting in a collective then fails
// instead of waiting for a peer that will never come (a rank that caught
// its error and returned from main, or ran fewer steps).
constexpr int kFinishTag = 78;
constexpr std::size_t kFailureMessageBytes = 8192;

MPI_Datatype mpi_type(DataType dtype) {
  switch (dtype) {
    case DataType::Float32: return MPI_FLOAT;
    case DataType::Float64: return MPI_DOUBLE;
    case DataType::Int8: return MPI_INT8_T;
    case DataType::Int16: return MPI_INT16_T;
    case DataType::Int32: return MPI_INT32_T;
    case DataType::Int64: return MPI_INT64_T;
    case DataType::UInt8: return MPI_UINT8_T;
    case DataType::UInt16: return MPI_UINT16_T;
    case DataType::UInt32: return MPI_UINT32_T;
    case DataType::UInt64: return MPI_UINT64_T;
    default:
      throw_error(ErrorKind::InvalidArgument, "dtype ", to_string(dtype), " has no MPI reduction type");
  }
}

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return std::string(text, static_cast<std::size_t>(len));
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator();
  ~MpiCommunicator() override;
  const Error* peer_failure() const override {
    // acquire: pairs with the release in take_failure; failure_ is written before.
    return broken_.load(std::memory_order_acquire) ? &*failure_ : nullptr;
  }

 protected:
  // A bucket as one Iallreduce per tensor, all in flight at once: no packing.
  void allreduce_now(std::span<const Tensor* const> in, std::span<Tensor* const> out, ReduceKind kind) override;
  void allreduce_impl(const void* send, void* recv, std::size_t count, DataType dtype) override;
  void broadcast_impl(void* data, std::size_t bytes, int root) override;
  void allgather_impl(const void* in, std::size_t bytes_per_rank, void* out) override;
  void reduce_scatter_impl(const void* in, void* out, std::size_t count_per_rank, DataType dtype) override;
  void barrier_impl() override;
  [[noreturn]] void abort_impl(const std::string& message) override;

 private:
  void init();
  void finalize();
  int checked_count(std::size_t n, const char* what) const;
  void check(int code, const char* what) const;
  // Every rank's collective `what` must move the same number of elements of
  // one dtype in the same tensor sizes (`shape_hash`): one small allreduce
  // first, so that a mismatch is an error on every rank, not a hang or a
  // truncated message.
  void agree(const char* what, std::int64_t count, DataType dtype, std::int64_t num_tensors = 1,
             std::int64_t shape_hash = 0);
  // Throws the failure a peer reported, if one arrived (or arrived before).
  void poll_peers();
  [[noreturn]] void take_failure(int source, int bytes);
  // Completes `requests`, polling for a peer's failure in between.
  void wait(std::span<MPI_Request> requests, const char* what);
  void wait(MPI_Request& request, const char* what) { wait(std::span<MPI_Request>(&request, 1), what); }

  MPI_Comm comm_ = MPI_COMM_NULL;          // the collectives
  MPI_Comm failure_comm_ = MPI_COMM_NULL;  // failure messages, any source
  MPI_Request failure_request_ = MPI_REQUEST_NULL;
  MPI_Request finish_request_ = MPI_REQUEST_NULL;  // a peer's finish notice
  int finish_word_ = 0;
  bool finishing_ = false;  // in finalize(): notices are expected (comm thread only)
  int finished_peer_ = -1;  // the first peer whose notice came, and when (comm thread only)
  std::chrono::steady_clock::time_point finished_at_{};
  std::vector<char> failure_buffer_ = std::vector<char>(kFailureMessageBytes);
  std::optional<Error> failure_;  // written once, before broken_ turns true
  std::atomic<bool> broken_{false};
  std::atomic<bool> aborting_{false};
  int thread_level_ = MPI_THREAD_SINGLE;  // what MPI_Init_thread provided
};

MpiCommunicator::MpiCommunicator() : Communicator(0, 1, CommBackend::Mpi, /*own_thread=*/true) {
  run_blocking([this] { init(); });
}

void MpiCommunicator::init() {
  // OpenMPI's non-blocking allreduce (libnbc) picks a binomial reduce +
  // broadcast for these sizes by default: 3 ms for the MLP's 2.7 MB of
  // gradients on 2 ranks, against 0.8 ms with Rabenseifner's reduce-scatter
  // + allgather (dp_bench). A value the user set (environment, mpirun
  // --mca) wins; other MPIs ignore the variable.
  setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "3", /*overwrite=*/0);
  int provided = 0;
  int code = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  if (code != MPI_SUCCESS)
    throw_error(ErrorKind::Unavailable, "MPI_Init_thread failed: ", mpi_error_text(code));
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  thread_level_ = provided;
  if (provided < MPI_THREAD_SERIALIZED)
    throw_error(ErrorKind::Unavailable, "MPI provides thread level ", provided,
                "; kiln's communicator needs MPI_THREAD_SERIALIZED or better");
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  set_world(rank, size);
  check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
  check(MPI_Comm_dup(MPI_COMM_WORLD, &failure_comm_), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(failure_comm_, MPI_ERRORS_RETURN);
  check(MPI_Irecv(failure_buffer_.data(), static_cast<int>(failure_buffer_.size()), MPI_CHAR, MPI_ANY_SOURCE,
                  kFailureTag, failure_comm_, &failure_request_),
        "MPI_Irecv");
  check(MPI_Irecv(&finish_word_, 1, MPI_INT, MPI_ANY_SOURCE, kFinishTag, failure_comm_, &finish_request_),
        "MPI_Irecv");
}

MpiCommunicator::~MpiCommunicator() {
  if (broken_.load(std::memory_order_acquire)) {
    // Requests a gone peer never completes are pending: MPI cannot finalize.
    std::fprintf(stderr, "kiln: %s: %s\n", describe().c_str(), failure_->message().c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  try {
    run_blocking([this] { finalize(); });
  } catch (const Error& e) {
    std::fprintf(stderr, "kiln: %s: %s\n", describe().c_str(), e.message().c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  stop_thread();
}

void MpiCommunicator::finalize() {
  // Every other rank hears that this one is done, then every rank meets
  // here before any stops listening for failures.
  finishing_ = true;
  std::vector<MPI_Request> notices;
  for (int r = 0; r < size(); ++r) {
    if (r == rank()) continue;
    notices.push_back(MPI_REQUEST_NULL);
    check(MPI_Isend(&finish_word_, 1, MPI_INT, r, kFinishTag, failure_comm_, &notices.back()), "MPI_Isend");
  }
  // On the failure communicator: a peer may still wait in a collective on
  // comm_ (and fail, hearing the notice), which a barrier there would meet.
  poll_peers();
  MPI_Request barrier;
  check(MPI_Ibarrier(failure_comm_, &barrier), "MPI_Ibarrier");
  wait(barrier, "MPI_Ibarrier");
  // The peers' notices: the posted receive takes one, the rest come here.
  MPI_Wait(&finish_request_, MPI_STATUS_IGNORE);
  for (int k = 2; k < size(); ++k) {
    int word = 0;
    MPI_Recv(&word, 1, MPI_INT, MPI_ANY_SOURCE, kFinishTag, failure_comm_, MPI_STATUS_IGNORE);
  }
  MPI_Waitall(static_cast<int>(notices.size()), notices.data(), MPI_STATUSES_IGNORE);
  MPI_Cancel(&failure_request_);
  MPI_Wait(&failure_request_, MPI_STATUS_IGNORE);
  MPI_Comm_free(&failure_comm_);
  MPI_Comm_free(&comm_);
  MPI_Finalize();
}

int MpiCommunicator::checked_count(std::size_t n, const char* what) const {
  if (n > static_cast<std::size_t>(INT_MAX))
    throw_error(ErrorKind::InvalidArgument, what, " on ", describe(), ": ", n,
                " elements exceed MPI's count limit (2^31 - 1)");
  return static_cast<int>(n);
}

void MpiCommunicator::check(int code, const char* what) const {
  if (code != MPI_SUCCESS)
    throw_error(ErrorKind::Internal, what, " on ", describe(), " failed: ", mpi_error_text(code));
}

void MpiCommunicator::poll_peers() {
  if (broken_.load(std::memory_order_acquire)) throw *failure_;
  int arrived = 0;
  MPI_Status status;
  MPI_Test(&failure_request_, &arrived, &status);
  if (arrived) {
    int bytes = 0;
    MPI_Get_count(&status, MPI_CHAR, &bytes);
    take_failure(status.MPI_SOURCE, bytes);
  }
  if (finishing_) return;
  // A peer's notice may come while this rank's side of their last
  // collective still completes: only a wait still going a grace period
  // after the notice fails.
  if (finished_peer_ < 0) {
    MPI_Test(&finish_request_, &arrived, &status);
    if (!arrived) return;
    finished_peer_ = status.MPI_SOURCE;
    finished_at_ = std::chrono::steady_clock::now();
  }
  if (std::chrono::steady_clock::now() - finished_at_ < std::chrono::seconds(2)) return;
  failure_.emplace(ErrorKind::Unavailable,
                   "rank " + std::to_string(finished_peer_) + " finished (it left the job) while " + describe() +
                       " waits in a collective: the ranks ran different collectives or numbers of steps, "
                       "or that rank caught an error and returned");
  // release: failure_ is written before any thread sees broken_.
  broken_.store(true, std::memory_order_release);
  throw *failure_;
}

void MpiCommunicator::take_failure(int source, int bytes) {
  failure_.emplace(ErrorKind::Unavailable,
                   "rank " + std::to_string(source) + " failed: " +
                       std::string(failure_buffer_.data(), static_cast<std::size_t>(bytes > 0 ? bytes : 0)));
  // release: failure_ is written before any thread sees broken_.
  broken_.store(true, std::memory_order_release);
  throw *failure_;
}

void MpiCommunicator::wait(std::span<MPI_Request> requests, const char* what) {
  int spins = 0;
  for (;;) {
    int done = 0;
    check(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE), what);
    if (done) return;
    poll_peers();
    // Yields (a millisecond or so: MPI progresses only while it is called),
    // then short sleeps for the long waits: the thread must not hold a core
    // the compute it overlaps needs (2 ranks on 2 cores). Measured on the
    // MLP (dp_bench): 20 us sleeps after 32 yields cost ~0.5 ms a step more.
    if (++spins < 1000) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(5));
  }
}

void MpiCommunicator::agree(const char* what, std::int64_t count, DataType dtype, std::int64_t num_tensors,
                            std::int64_t shape_hash) {
  poll_peers();
  const auto code = static_cast<std::int64_t>(dtype);
  // max(v) and max(-v) = -min(v) of each value, in one message.
  std::int64_t v[8] = {count, -count, code, -code, num_tensors, -num_tensors, shape_hash, -shape_hash};
  MPI_Request r;
  check(MPI_Iallreduce(MPI_IN_PLACE, v, 8, MPI_INT64_T, MPI_MAX, comm_, &r), "MPI_Iallreduce (sizes)");
  wait(r, "MPI_Iallreduce (sizes)");
  if (v[0] == -v[1] && v[2] == -v[3] && v[4] == -v[5] && v[6] == -v[7]) return;
  std::string detail;
  if (v[2] != -v[3]) detail = "the ranks' dtypes differ";
  else if (v[4] != -v[5])
    detail = "the ranks hold " + std::to_string(-v[5]) + " to " + std::to_string(v[4]) + " tensors";
  else if (v[0] != -v[1])
    detail = "the ranks hold " + std::to_string(-v[1]) + " to " + std::to_string(v[0]) + " elements";
  else detail = "the ranks' tensor sizes differ";
  throw_error(ErrorKind::InvalidArgument, what, " on ", describe(), ": this rank holds ", count, " elements of ",
              to_string(dtype), " in ", num_tensors, " tensor(s), but ", detail,
              " (every rank must run the same collectives on tensors of the same sizes)");
}

void MpiCommunicator::allreduce_now(std::span<const Tensor* const> in, std::span<Tensor* const> out,
                                    ReduceKind kind) {
  std::int64_t total = 0, hash = 0;
  for (const Tensor* t : in) {
    total += t->numel();
    hash = hash * 1000003 + t->numel();
  }
  agree("allreduce", total, in[0]->dtype(), static_cast<std::int64_t>(in.size()), hash);
  std::vector<MPI_Request> requests(in.size(), MPI_REQUEST_NULL);
  for (std::size_t i = 0; i < in.size(); ++i) {
    const void* send = in[i]->raw_data();
    void* recv = out[i]->raw_data();
    check(MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv,
                         checked_count(static_cast<std::size_t>(in[i]->numel()), "allreduce"),
                         mpi_type(in[i]->dtype()), MPI_SUM, comm_, &requests[i]),
          "MPI_Iallreduce");
  }
  wait(requests, "MPI_Iallreduce");
  if (kind == ReduceKind::Mean)
    for (Tensor* t : out) divide_by_size(t->raw_data(), static_cast<std::size_t>(t->numel()), t->dtype());
}

void MpiCommunicator::allreduce_impl(const void* send, void* recv, std::size_t count, DataType dtype) {
  agree("allreduce", static_cast<std::int64_t>(count), dtype);
  MPI_Request r;
  check(MPI_Iallreduce(send ? send : MPI_IN_PLACE, recv, checked_count(count, "allreduce"), mpi_type(dtype), MPI_SUM,
                       comm_, &r),
        "MPI_Iallreduce");
  wait(r, "MPI_Iallreduce");
}

void MpiCommunicator::broadcast_impl(void* data, std::size_t bytes, int root) {
  agree("broadcast", static_cast<std::int64_t>(bytes), DataType::UInt8);
  MPI_Request r;
  check(MPI_Ibcast(data, checked_count(bytes, "broadcast"), MPI_BYTE, root, comm_, &r), "MPI_Ibcast");
  wait(r, "MPI_Ibcast");
}

void MpiCommunicator::allgather_impl(const void* in, std::size_t bytes_per_rank, void* out) {
  agree("allgather", static_cast<std::int64_t>(bytes_per_rank), DataType::UInt8);
  MPI_Request r;
  const int n = checked_count(bytes_per_rank, "allgather");
  check(MPI_Iallgather(in, n, MPI_BYTE, out, n, MPI_BYTE, comm_, &r), "MPI_Iallgather");
  wait(r, "MPI_Iallgather");
}

void MpiCommunicator::reduce_scatter_impl(const void* in, void* out, std::size_t count_per_rank, DataType dtype) {
  agree("reduce_scatter", static_cast<std::int64_t>(count_per_rank), dtype);
  MPI_Request r;
  check(MPI_Ireduce_scatter_block(in, out, checked_count(count_per_rank, "reduce_scatter"), mpi_type(dtype),
                                  MPI_SUM, comm_, &r),
        "MPI_Ireduce_scatter_block");
  wait(r, "MPI_Ireduce_scatter_block");
}

void MpiCommunicator::barrier_impl() {
  poll_peers();
  MPI_Request r;
  check(MPI_Ibarrier(comm_, &r), "MPI_Ibarrier");
  wait(r, "MPI_Ibarrier");
}

void MpiCommunicator::abort_impl(const std::string& message) {
  // Once: a second failure (the terminate handler after abort()) only ends.
  // acq_rel: whichever thread comes first sends; the others see that.
  if (aborting_.exchange(true, std::memory_order_acq_rel)) MPI_Abort(MPI_COMM_WORLD, 1);
  // Another thread than the communicator's may speak to MPI only with
  // MPI_THREAD_MULTIPLE (OpenMPI provides it); otherwise the job just ends.
  const bool may_send = thread_level_ >= MPI_THREAD_MULTIPLE || on_own_thread();
  if (may_send && !broken_.load(std::memory_order_acquire)) {
    // This rank failed first: every other rank hears why before the job ends.
    const std::string text = message.substr(0, kFailureMessageBytes);
    std::vector<MPI_Request> sends;
    for (int r = 0; r < size(); ++r) {
      if (r == rank()) continue;
      MPI_Request req;
      if (MPI_Isend(text.data(), static_cast<int>(text.size()), MPI_CHAR, r, kFailureTag, failure_comm_, &req) ==
          MPI_SUCCESS)
        sends.push_back(req);
    }
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    for (MPI_Request& req : sends) {
      int done = 0;
      while (!done && std::chrono::steady_clock::now() < give_up) {
        MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    // The peers fail their collectives with the message and print it; then
    // the job ends, whoever ends it first.
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  }
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);  // MPI_Abort does not return
}

}  // namespace

bool mpi_available() noexcept { return true; }

std::shared_ptr<Communicator> make_mpi_communicator() { return std::make_shared<MpiCommunicator>(); }

}  // namespace kiln::detail

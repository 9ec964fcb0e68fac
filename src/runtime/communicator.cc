// Communicator (kiln/runtime/communicator.h): the submission thread, the
// checks every backend shares, bucket packing, mean, and the Local backend.
#include "kiln/runtime/communicator.h"
#include "kiln/support/thread_name.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <future>
#include <vector>

#include "mpi_communicator.h"

namespace kiln {

namespace {

// Divides `count` elements by n (f32 / f64: is_reducible let nothing else
// through for a mean).
void divide(void* data, std::size_t count, DataType dtype, int n) {
  if (dtype == DataType::Float32) {
    auto* p = static_cast<float*>(data);
    const float s = 1.0f / static_cast<float>(n);
    for (std::size_t k = 0; k < count; ++k) p[k] *= s;
  } else {
    auto* p = static_cast<double*>(data);
    const double s = 1.0 / static_cast<double>(n);
    for (std::size_t k = 0; k < count; ++k) p[k] *= s;
  }
}

// The Local backend: a job of one rank.
class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator() : Communicator(0, 1, CommBackend::Local, /*own_thread=*/false) {}

 protected:
  void allreduce_impl(const void* send, void* recv, std::size_t count, DataType dtype) override {
    if (send && send != recv && count) std::memcpy(recv, send, count * size_of(dtype));
  }
  void broadcast_impl(void*, std::size_t, int) override {}
  void allgather_impl(const void* in, std::size_t bytes, void* out) override {
    if (bytes) std::memcpy(out, in, bytes);
  }
  void reduce_scatter_impl(const void* in, void* out, std::size_t count, DataType dtype) override {
    if (count) std::memcpy(out, in, count * size_of(dtype));
  }
  void barrier_impl() override {}
};

}  // namespace

Communicator::Communicator(int rank, int size, CommBackend backend, bool own_thread)
    : rank_(rank), size_(size), backend_(backend) {
  if (own_thread) thread_ = std::thread([this] { thread_main(); });
}

Communicator::~Communicator() { stop_thread(); }

void Communicator::divide_by_size(void* data, std::size_t count, DataType dtype) const {
  divide(data, count, dtype, size_);
}

void Communicator::stop_thread() noexcept {
  if (!thread_.joinable()) return;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

std::string Communicator::describe() const {
  return "rank " + std::to_string(rank_) + " of " + std::to_string(size_) + " (" +
         std::string(to_string(backend_)) + ")";
}

bool Communicator::built_with_mpi() noexcept { return detail::mpi_available(); }

bool Communicator::built_with_nccl() noexcept { return detail::nccl_available(); }

std::shared_ptr<Communicator> Communicator::single_process() { return std::make_shared<LocalCommunicator>(); }

namespace {

std::mutex world_mutex;
std::shared_ptr<Communicator> world;  // from_environment()'s, until the process exits

}  // namespace

std::shared_ptr<Communicator> Communicator::from_environment() {
  std::lock_guard lock(world_mutex);
  if (world) return world;
  const bool launched = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") ||
                        std::getenv("PMIX_RANK");
  if (!launched) return single_process();
  if (!detail::mpi_available())
    throw_error(ErrorKind::Unavailable,
                "this process was started by mpirun, but kiln was built without MPI "
                "(install libopenmpi-dev and reconfigure)");
  world = detail::make_mpi_communicator();
  // Released at exit before MPI's own exit handlers (registered earlier, by
  // MPI_Init, so run later): the communicator finalizes, or ends a failed
  // job, while MPI still works.
  std::atexit([] {
    std::shared_ptr<Communicator> last;
    {
      std::lock_guard exit_lock(world_mutex);
      last = std::move(world);
    }
  });
  // An exception that escapes main ends the job with its message on every rank.
  static Communicator* terminate_target = world.get();
  std::set_terminate([] {
    std::string message = "terminate called without an active exception";
    if (std::exception_ptr e = std::current_exception()) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        message = x.what();
      } catch (...) {
        message = "terminate called after throwing a non-std::exception";
      }
    }
    terminate_target->abort(message);
  });
  return world;
}

// ---- the thread ----

void Communicator::thread_main() {
  name_this_thread("kiln-comm");
  for (;;) {
    std::pair<Work, Done> item;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping_, and every submission ran
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    const auto start = std::chrono::steady_clock::now();
    // relaxed: a profiling counter (busy_ns()).
    auto count_busy = [&] {
      busy_ns_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
                             .count(),
                         std::memory_order_relaxed);
    };
    try {
      item.first();
    } catch (const Error& e) {
      count_busy();
      item.second(&e);
      continue;
    } catch (const std::exception& x) {
      count_busy();
      const Error e(ErrorKind::Internal, describe() + ": " + x.what());
      item.second(&e);
      continue;
    }
    count_busy();
    item.second(nullptr);
  }
}

void Communicator::submit(Work work, Done done) {
  if (!thread_.joinable()) {  // Local: here and now
    try {
      work();
    } catch (const Error& e) {
      done(&e);
      return;
    }
    done(nullptr);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    queue_.emplace_back(std::move(work), std::move(done));
  }
  wake_.notify_one();
}

void Communicator::run_blocking(Work work) {
  if (!thread_.joinable() || on_own_thread()) {
    work();
    return;
  }
  std::promise<void> finished;
  std::future<void> result = finished.get_future();
  submit(std::move(work), [&finished](const Error* e) {
    if (e) finished.set_exception(std::make_exception_ptr(*e));
    else finished.set_value();
  });
  result.get();
}

// ---- checks ----

void Communicator::check_input(std::string_view what, const Tensor& tensor) const {
  if (!tensor.is_initialized())
    throw_error(ErrorKind::InvalidArgument, what, " on ", describe(), ": the tensor is uninitialized");
  if (!reaches(tensor.place()))
    throw_error(ErrorKind::InvalidArgument, what, " on ", describe(), ": a ", tensor.type_string(),
                " is on ", tensor.place().to_string(), ", which the ", to_string(backend_),
                " backend cannot reach",
                backend_ == CommBackend::Nccl ? " (NCCL: CUDA tensors)" : " (MPI: host tensors; NCCL: CUDA)");
}

void Communicator::check_reduce_input(std::string_view what, std::span<const Tensor* const> tensors,
                                      ReduceKind kind) const {
  if (tensors.empty()) throw_error(ErrorKind::InvalidArgument, what, " on ", describe(), ": no tensors");
  for (const Tensor* t : tensors) check_input(what, *t);
  const DataType dtype = tensors[0]->dtype();
  for (std::size_t k = 1; k < tensors.size(); ++k)
    if (tensors[k]->dtype() != dtype)
      throw_error(ErrorKind::InvalidArgument, what, " on ", describe(), ": tensor #", k, " is ",
                  to_string(tensors[k]->dtype()), " but tensor #0 is ", to_string(dtype),
                  " (one reduction has one dtype)");
  if (!is_reducible(dtype, kind))
    throw_error(ErrorKind::InvalidArgument, what, " on ", describe(), ": cannot ", to_string(kind), " dtype ",
                to_string(dtype), " (", not_reducible_reason(dtype, kind), ")");
}

// ---- the collectives' work ----

void Communicator::allreduce_now(std::span<const Tensor* const> in, std::span<Tensor* const> out,
                                 ReduceKind kind) {
  const DataType dtype = in[0]->dtype();
  std::size_t count = 0;
  for (const Tensor* t : in) count += static_cast<std::size_t>(t->numel());
  if (in.size() == 1) {
    const void* send = in[0]->raw_data();
    void* recv = out[0]->raw_data();
    allreduce_impl(send == recv ? nullptr : send, recv, count, dtype);
    if (kind == ReduceKind::Mean) divide(recv, count, dtype, size_);
    return;
  }
  // A bucket: one message, packed and unpacked around the reduction.
  std::vector<char> packed(count * size_of(dtype));
  std::size_t at = 0;
  for (const Tensor* t : in) {
    if (t->bytes()) std::memcpy(packed.data() + at, t->raw_data(), t->bytes());
    at += t->bytes();
  }
  allreduce_impl(nullptr, packed.data(), count, dtype);
  if (kind == ReduceKind::Mean) divide(packed.data(), count, dtype, size_);
  at = 0;
  for (Tensor* t : out) {
    if (t->bytes()) std::memcpy(t->raw_data(), packed.data() + at, t->bytes());
    at += t->bytes();
  }
}

void Communicator::broadcast_now(Tensor& tensor, int root) {
  if (root < 0 || root >= size_)
    throw_error(ErrorKind::InvalidArgument, "broadcast on ", describe(), ": root ", root, " is not a rank (0..",
                size_ - 1, ")");
  broadcast_impl(tensor.raw_data(), tensor.bytes(), root);
}

void Communicator::allgather_now(const Tensor& in, Tensor& out) {
  if (out.bytes() != in.bytes() * static_cast<std::size_t>(size_))
    throw_error(ErrorKind::InvalidArgument, "allgather on ", describe(), ": the result ", out.type_string(),
                " does not hold ", size_, " x ", in.type_string());
  allgather_impl(in.raw_data(), in.bytes(), out.raw_data());
}

void Communicator::reduce_scatter_now(const Tensor& in, Tensor& out, ReduceKind kind) {
  const std::size_t count = static_cast<std::size_t>(out.numel());
  if (count * static_cast<std::size_t>(size_) != static_cast<std::size_t>(in.numel()))
    throw_error(ErrorKind::InvalidArgument, "reduce_scatter on ", describe(), ": ", in.type_string(),
                " does not split into ", size_, " x ", out.type_string());
  reduce_scatter_impl(in.raw_data(), out.raw_data(), count, in.dtype());
  if (kind == ReduceKind::Mean) divide(out.raw_data(), count, in.dtype(), size_);
}

// ---- blocking calls ----

void Communicator::allreduce(std::span<Tensor> tensors, ReduceKind kind) {
  std::vector<Tensor*> ptrs;
  for (Tensor& t : tensors) ptrs.push_back(&t);
  const std::vector<const Tensor*> in(ptrs.begin(), ptrs.end());
  check_reduce_input("allreduce", in, kind);
  run_blocking([&] { allreduce_now(in, ptrs, kind); });
}

void Communicator::broadcast(Tensor& tensor, int root) {
  check_input("broadcast", tensor);
  run_blocking([&] { broadcast_now(tensor, root); });
}

namespace {

Dims gathered_dims(const Tensor& t, int n) {
  std::vector<std::int64_t> d = t.dims().to_vector();
  if (d.empty()) d.push_back(n);
  else d[0] *= n;
  return Dims(d);
}

}  // namespace

Tensor Communicator::allgather(const Tensor& tensor) {
  check_input("allgather", tensor);
  Tensor out = Tensor::empty(gathered_dims(tensor, size_), tensor.dtype(), tensor.place());
  run_blocking([&] { allgather_now(tensor, out); });
  return out;
}

Tensor Communicator::reduce_scatter(const Tensor& tensor, ReduceKind kind) {
  const Tensor* in = &tensor;
  check_reduce_input("reduce_scatter", std::span<const Tensor* const>(&in, 1), kind);
  if (tensor.rank() == 0 || tensor.dim(0) % size_ != 0)
    throw_error(ErrorKind::InvalidArgument, "reduce_scatter on ", describe(), ": ", tensor.type_string(),
                " has no first dimension that divides by ", size_, " ranks");
  std::vector<std::int64_t> d = tensor.dims().to_vector();
  d[0] /= size_;
  Tensor out = Tensor::empty(Dims(d), tensor.dtype(), tensor.place());
  run_blocking([&] { reduce_scatter_now(tensor, out, kind); });
  return out;
}

void Communicator::barrier() {
  run_blocking([&] { barrier_impl(); });
}

// ---- failure ----

void Communicator::abort(const std::string& message) {
  std::fprintf(stderr, "kiln: %s: %s\n", describe().c_str(), message.c_str());
  std::fflush(stderr);
  abort_impl(message);
  std::abort();  // a backend's abort_impl does not return either
}

void Communicator::abort_impl(const std::string&) { std::abort(); }

}  // namespace kiln

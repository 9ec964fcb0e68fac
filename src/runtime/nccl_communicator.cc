// The NCCL backend (kiln/runtime/nccl_communicator.h).
#include "kiln/runtime/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>

#include "kiln/runtime/cuda_stream.h"
#include "mpi_communicator.h"

namespace kiln {
namespace {

ncclDataType_t nccl_type(DataType dtype) {
  switch (dtype) {
    case DataType::Float16: return ncclFloat16;
    case DataType::BFloat16: return ncclBfloat16;
    case DataType::Float32: return ncclFloat32;
    case DataType::Float64: return ncclFloat64;
    case DataType::Int8: return ncclInt8;
    case DataType::UInt8: return ncclUint8;
    case DataType::Int32: return ncclInt32;
    case DataType::UInt32: return ncclUint32;
    case DataType::Int64: return ncclInt64;
    case DataType::UInt64: return ncclUint64;
    default: throw_error(ErrorKind::InvalidArgument, "dtype ", to_string(dtype), " has no NCCL type");
  }
}

ncclRedOp_t nccl_op(ReduceKind kind) { return kind == ReduceKind::Mean ? ncclAvg : ncclSum; }

void check_nccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw_error(ErrorKind::Internal, what, " failed: ", ncclGetErrorString(r));
}

class NcclWorld final : public NcclCommunicator {
 public:
  NcclWorld(Communicator& bootstrap, int device);
  ~NcclWorld() override;

  void allreduce_on(std::span<const Tensor* const> in, std::span<Tensor* const> out, ReduceKind kind,
                    void* stream) override;
  void broadcast_on(const Tensor& in, Tensor& out, int root, void* stream) override;
  void allgather_on(const Tensor& in, Tensor& out, void* stream) override;
  void reduce_scatter_on(const Tensor& in, Tensor& out, ReduceKind kind, void* stream) override;
  void barrier_on(void* stream) override;

  void allreduce_now(std::span<const Tensor* const> in, std::span<Tensor* const> out, ReduceKind kind) override {
    allreduce_on(in, out, kind, stream_);
    wait();
  }
  void broadcast_now(Tensor& tensor, int root) override {
    broadcast_on(tensor, tensor, root, stream_);
    wait();
  }
  void allgather_now(const Tensor& in, Tensor& out) override {
    allgather_on(in, out, stream_);
    wait();
  }
  void reduce_scatter_now(const Tensor& in, Tensor& out, ReduceKind kind) override {
    reduce_scatter_on(in, out, kind, stream_);
    wait();
  }

 protected:
  void allreduce_impl(const void* send, void* recv, std::size_t count, DataType dtype) override {
    check_nccl(ncclAllReduce(send ? send : recv, recv, count, nccl_type(dtype), ncclSum, comm_, stream_),
               "ncclAllReduce");
    wait();
  }
  void broadcast_impl(void* data, std::size_t bytes, int root) override {
    check_nccl(ncclBroadcast(data, data, bytes, ncclUint8, root, comm_, stream_), "ncclBroadcast");
    wait();
  }
  void allgather_impl(const void* in, std::size_t bytes_per_rank, void* out) override {
    check_nccl(ncclAllGather(in, out, bytes_per_rank, ncclUint8, comm_, stream_), "ncclAllGather");
    wait();
  }
  void reduce_scatter_impl(const void* in, void* out, std::size_t count_per_rank, DataType dtype) override {
    check_nccl(ncclReduceScatter(in, out, count_per_rank, nccl_type(dtype), ncclSum, comm_, stream_),
               "ncclReduceScatter");
    wait();
  }
  void barrier_impl() override {
    barrier_on(stream_);
    wait();
  }

 private:
  void wait() { check_cuda(cudaStreamSynchronize(stream_), "waiting for an NCCL collective"); }
  cudaStream_t cast(void* stream) const { return static_cast<cudaStream_t>(stream); }

  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  float* barrier_word_ = nullptr;  // device memory the barrier reduces
};

NcclWorld::NcclWorld(Communicator& bootstrap, int device)
    : NcclCommunicator(bootstrap.rank(), bootstrap.size(), device) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  if (device < 0 || device >= devices)
    throw_error(ErrorKind::Unavailable, "NCCL communicator on ", bootstrap.describe(), ": no CUDA device ", device,
                " (", devices, " found)");
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  // Rank 0's id, by the bootstrap's broadcast.
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (bootstrap.rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  Tensor bytes = Tensor::zeros({static_cast<std::int64_t>(sizeof id)}, DataType::UInt8);
  std::memcpy(bytes.raw_data(), &id, sizeof id);
  bootstrap.broadcast(bytes, 0);
  std::memcpy(&id, bytes.raw_data(), sizeof id);
  check_nccl(ncclCommInitRank(&comm_, size(), id, rank()), "ncclCommInitRank");
  check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  check_cuda(cudaMalloc(reinterpret_cast<void**>(&barrier_word_), sizeof(float)), "cudaMalloc");
}

NcclWorld::~NcclWorld() {
  if (barrier_word_) cudaFree(barrier_word_);
  if (stream_) cudaStreamDestroy(stream_);
  if (comm_) ncclCommDestroy(comm_);
}

void NcclWorld::allreduce_on(std::span<const Tensor* const> in, std::span<Tensor* const> out, ReduceKind kind,
                             void* stream) {
  check_nccl(ncclGroupStart(), "ncclGroupStart");
  for (std::size_t i = 0; i < in.size(); ++i)
    check_nccl(ncclAllReduce(in[i]->raw_data(), out[i]->raw_data(), static_cast<std::size_t>(in[i]->numel()),
                             nccl_type(in[i]->dtype()), nccl_op(kind), comm_, cast(stream)),
               "ncclAllReduce");
  check_nccl(ncclGroupEnd(), "ncclGroupEnd");
}

void NcclWorld::broadcast_on(const Tensor& in, Tensor& out, int root, void* stream) {
  if (root < 0 || root >= size())
    throw_error(ErrorKind::InvalidArgument, "broadcast on ", describe(), ": root ", root, " is not a rank");
  check_nccl(ncclBroadcast(in.raw_data(), out.raw_data(), in.bytes(), ncclUint8, root, comm_, cast(stream)),
             "ncclBroadcast");
}

void NcclWorld::allgather_on(const Tensor& in, Tensor& out, void* stream) {
  check_nccl(ncclAllGather(in.raw_data(), out.raw_data(), in.bytes(), ncclUint8, comm_, cast(stream)),
             "ncclAllGather");
}

void NcclWorld::reduce_scatter_on(const Tensor& in, Tensor& out, ReduceKind kind, void* stream) {
  check_nccl(ncclReduceScatter(in.raw_data(), out.raw_data(), static_cast<std::size_t>(out.numel()),
                               nccl_type(in.dtype()), nccl_op(kind), comm_, cast(stream)),
             "ncclReduceScatter");
}

void NcclWorld::barrier_on(void* stream) {
  check_nccl(ncclAllReduce(barrier_word_, barrier_word_, 1, ncclFloat32, ncclSum, comm_, cast(stream)),
             "ncclAllReduce (barrier)");
}

}  // namespace

std::shared_ptr<NcclCommunicator> NcclCommunicator::create(Communicator& bootstrap, int device) {
  return std::make_shared<NcclWorld>(bootstrap, device);
}

namespace detail {
bool nccl_available() noexcept { return true; }
}  // namespace detail

}  // namespace kiln

// CUDA kernels of the collective ops (kiln/dialect/collective_ops.h) over
// the run's NcclCommunicator: each checks its inputs with the host
// kernels' messages, allocates its outputs and enqueues the NCCL call on
// the instruction's stream; the device runs it in order with the kernels
// around it. Collectives keep program order (Communication trait), so every
// rank enqueues them alike.
#include <string>
#include <vector>

#include "context_stream.h"
#include "kiln/dialect/collective_ops.h"
#include "kiln/kernel/kernel_registry.h"
#include "kiln/runtime/nccl_communicator.h"

namespace kiln::cuda {
namespace {

std::string op_label(const KernelContext& ctx) { return "op '" + std::string(ctx.op()->name()) + "'"; }

NcclCommunicator& nccl_of(const KernelContext& ctx) {
  const StepContext* step = ctx.step();
  if (!step || !step->communicator)
    throw_error(ErrorKind::PreconditionNotMet, "op '", ctx.op()->name(),
                "' has no communicator: run the program with ExecutionOptions::communicator set "
                "(kiln::NcclCommunicator::create on a CUDA place)");
  auto* nccl = dynamic_cast<NcclCommunicator*>(step->communicator);
  if (!nccl)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' on ", ctx.place().to_string(),
                " needs an NCCL communicator; the run's is ", step->communicator->describe());
  return *nccl;
}

void check_num_ranks(const KernelContext& ctx, const Communicator& comm, std::int64_t num_ranks) {
  if (num_ranks != comm.size())
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' was built for num_ranks ", num_ranks,
                " but runs on ", comm.describe());
}

void allreduce_kernel(KernelContext& ctx) {
  NcclCommunicator& comm = nccl_of(ctx);
  const ReduceKind kind = reduce_kind_from_string(ctx.attrs<AllReduceOp>().reduce);
  const std::uint32_t n = ctx.num_inputs();
  std::vector<const Tensor*> in(n);
  for (std::uint32_t i = 0; i < n; ++i) in[i] = &ctx.input(i);
  comm.check_reduce_input(op_label(ctx), in, kind);
  std::vector<Tensor*> out(n);
  for (std::uint32_t i = 0; i < n; ++i) out[i] = &ctx.alloc_output(i, in[i]->dims(), in[i]->dtype());
  comm.allreduce_on(in, out, kind, stream_of(ctx));
}

void broadcast_kernel(KernelContext& ctx) {
  NcclCommunicator& comm = nccl_of(ctx);
  const Tensor in = ctx.input(0);
  comm.check_input(op_label(ctx), in);
  Tensor& out = ctx.alloc_output(0, in.dims(), in.dtype());
  comm.broadcast_on(in, out, static_cast<int>(ctx.attrs<BroadcastOp>().root), stream_of(ctx));
}

void allgather_kernel(KernelContext& ctx) {
  NcclCommunicator& comm = nccl_of(ctx);
  const Tensor in = ctx.input(0);
  comm.check_input(op_label(ctx), in);
  check_num_ranks(ctx, comm, ctx.attrs<AllGatherOp>().num_ranks);
  std::vector<std::int64_t> dims = in.dims().to_vector();
  if (dims.empty()) dims.push_back(comm.size());
  else dims[0] *= comm.size();
  Tensor& out = ctx.alloc_output(0, Dims(dims), in.dtype());
  comm.allgather_on(in, out, stream_of(ctx));
}

void reduce_scatter_kernel(KernelContext& ctx) {
  NcclCommunicator& comm = nccl_of(ctx);
  const auto& a = ctx.attrs<ReduceScatterOp>();
  const ReduceKind kind = reduce_kind_from_string(a.reduce);
  const Tensor in = ctx.input(0);
  const Tensor* pin = &in;
  comm.check_reduce_input(op_label(ctx), std::span<const Tensor* const>(&pin, 1), kind);
  check_num_ranks(ctx, comm, a.num_ranks);
  if (in.rank() == 0 || in.dim(0) % comm.size() != 0)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "': ", in.type_string(),
                " has no first dimension that divides by the ", comm.size(), " ranks of ", comm.describe());
  std::vector<std::int64_t> dims = in.dims().to_vector();
  dims[0] /= comm.size();
  Tensor& out = ctx.alloc_output(0, Dims(dims), in.dtype());
  comm.reduce_scatter_on(in, out, kind, stream_of(ctx));
}

void barrier_kernel(KernelContext& ctx) { nccl_of(ctx).barrier_on(stream_of(ctx)); }

}  // namespace

KILN_REGISTER_KERNEL(AllReduceOp, Cuda, Undefined, allreduce_kernel);
KILN_REGISTER_KERNEL(BroadcastOp, Cuda, Undefined, broadcast_kernel);
KILN_REGISTER_KERNEL(AllGatherOp, Cuda, Undefined, allgather_kernel);
KILN_REGISTER_KERNEL(ReduceScatterOp, Cuda, Undefined, reduce_scatter_kernel);
KILN_REGISTER_KERNEL(BarrierOp, Cuda, Undefined, barrier_kernel);

}  // namespace kiln::cuda

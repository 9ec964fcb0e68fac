// Host kernels of the collective ops (kiln/dialect/collective_ops.h):
// asynchronous kernels that check their inputs and allocate their outputs on
// the worker, then hand the collective to the run's communicator
// (StepContext::communicator), whose thread runs it after every collective
// submitted before it and completes the kernel. The worker goes on with the
// ops that do not wait for it (the rest of backward, while a gradient
// bucket is reduced).
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kiln/dialect/collective_ops.h"
#include "kiln/kernel/async_kernel.h"
#include "kiln/kernel/kernel_registry.h"
#include "kiln/runtime/communicator.h"

namespace kiln::cpu {
namespace {

// What each instruction decodes once: the reduction, the root, the job
// size the program was built for.
struct CollectiveInstruction {
  ReduceKind reduce = ReduceKind::Sum;
  std::int64_t root = 0;
  std::int64_t num_ranks = 0;
};

std::shared_ptr<const void> decode_allreduce(Operation* op) {
  const auto a = from_attributes<AllReduceOp::Attributes>(op->attributes(), AllReduceOp::name);
  return std::make_shared<CollectiveInstruction>(CollectiveInstruction{reduce_kind_from_string(a.reduce), 0, 0});
}

std::shared_ptr<const void> decode_broadcast(Operation* op) {
  const auto a = from_attributes<BroadcastOp::Attributes>(op->attributes(), BroadcastOp::name);
  return std::make_shared<CollectiveInstruction>(CollectiveInstruction{ReduceKind::Sum, a.root, 0});
}

std::shared_ptr<const void> decode_allgather(Operation* op) {
  const auto a = from_attributes<AllGatherOp::Attributes>(op->attributes(), AllGatherOp::name);
  return std::make_shared<CollectiveInstruction>(CollectiveInstruction{ReduceKind::Sum, 0, a.num_ranks});
}

std::shared_ptr<const void> decode_reduce_scatter(Operation* op) {
  const auto a = from_attributes<ReduceScatterOp::Attributes>(op->attributes(), ReduceScatterOp::name);
  return std::make_shared<CollectiveInstruction>(
      CollectiveInstruction{reduce_kind_from_string(a.reduce), 0, a.num_ranks});
}

const CollectiveInstruction& decoded(const KernelContext& ctx) {
  return *static_cast<const CollectiveInstruction*>(ctx.attrs_ptr());
}

std::string op_label(std::string_view name) { return "op '" + std::string(name) + "'"; }

Communicator& communicator_of(const KernelContext& ctx, std::string_view op) {
  const StepContext* step = ctx.step();
  if (!step || !step->communicator)
    throw_error(ErrorKind::PreconditionNotMet, "op '", op,
                "' has no communicator: run the program with ExecutionOptions::communicator set "
                "(kiln::Communicator::from_environment())");
  return *step->communicator;
}

void check_num_ranks(const Communicator& comm, std::string_view op, std::int64_t num_ranks) {
  if (num_ranks != comm.size())
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' was built for num_ranks ", num_ranks,
                " but runs on ", comm.describe());
}

// Hands `work` to the communicator; its error (or none) completes the kernel.
void submit(Communicator& comm, Communicator::Work work, AsyncKernelDone done) {
  comm.submit(std::move(work), [done](const Error* e) { done(e); });
}

void allreduce_kernel(KernelContext& ctx, AsyncKernelDone done) {
  Communicator& comm = communicator_of(ctx, AllReduceOp::name);
  const ReduceKind kind = decoded(ctx).reduce;
  const std::uint32_t n = ctx.num_inputs();
  std::vector<const Tensor*> in(n);
  for (std::uint32_t i = 0; i < n; ++i) in[i] = &ctx.input(i);
  comm.check_reduce_input(op_label(AllReduceOp::name), in, kind);
  std::vector<Tensor*> out(n);
  for (std::uint32_t i = 0; i < n; ++i) out[i] = &ctx.alloc_output(i, in[i]->dims(), in[i]->dtype());
  submit(
      comm, [&comm, in = std::move(in), out = std::move(out), kind] { comm.allreduce_now(in, out, kind); }, done);
}

void broadcast_kernel(KernelContext& ctx, AsyncKernelDone done) {
  Communicator& comm = communicator_of(ctx, BroadcastOp::name);
  const Tensor& in = ctx.input(0);
  comm.check_input(op_label(BroadcastOp::name), in);
  const std::int64_t root = decoded(ctx).root;
  if (root >= comm.size())
    throw_error(ErrorKind::InvalidArgument, "op '", BroadcastOp::name, "': root ", root, " is not a rank of ",
                comm.describe());
  Tensor* out = &ctx.alloc_output(0, in.dims(), in.dtype());
  if (comm.rank() == root && out->raw_data() != in.raw_data()) std::memcpy(out->raw_data(), in.raw_data(), in.bytes());
  submit(comm, [&comm, out, root] { comm.broadcast_now(*out, static_cast<int>(root)); }, done);
}

void allgather_kernel(KernelContext& ctx, AsyncKernelDone done) {
  Communicator& comm = communicator_of(ctx, AllGatherOp::name);
  const Tensor* in = &ctx.input(0);
  comm.check_input(op_label(AllGatherOp::name), *in);
  check_num_ranks(comm, AllGatherOp::name, decoded(ctx).num_ranks);
  std::vector<std::int64_t> dims = in->dims().to_vector();
  if (dims.empty()) dims.push_back(comm.size());
  else dims[0] *= comm.size();
  Tensor* out = &ctx.alloc_output(0, Dims(dims), in->dtype());
  submit(comm, [&comm, in, out] { comm.allgather_now(*in, *out); }, done);
}

void reduce_scatter_kernel(KernelContext& ctx, AsyncKernelDone done) {
  Communicator& comm = communicator_of(ctx, ReduceScatterOp::name);
  const CollectiveInstruction& d = decoded(ctx);
  const Tensor* in = &ctx.input(0);
  comm.check_reduce_input(op_label(ReduceScatterOp::name), std::span<const Tensor* const>(&in, 1), d.reduce);
  check_num_ranks(comm, ReduceScatterOp::name, d.num_ranks);
  if (in->rank() == 0 || in->dim(0) % comm.size() != 0)
    throw_error(ErrorKind::InvalidArgument, "op '", ReduceScatterOp::name, "': ", in->type_string(),
                " has no first dimension that divides by the ", comm.size(), " ranks of ", comm.describe());
  std::vector<std::int64_t> dims = in->dims().to_vector();
  dims[0] /= comm.size();
  Tensor* out = &ctx.alloc_output(0, Dims(dims), in->dtype());
  const ReduceKind kind = d.reduce;
  submit(comm, [&comm, in, out, kind] { comm.reduce_scatter_now(*in, *out, kind); }, done);
}

void barrier_kernel(KernelContext& ctx, AsyncKernelDone done) {
  Communicator& comm = communicator_of(ctx, BarrierOp::name);
  submit(comm, [&comm] { comm.barrier_now(); }, done);
}

const bool registered = [] {
  KernelRegistry& registry = KernelRegistry::instance();
  registry.add(TypeId::get<AllReduceOp>(), AllReduceOp::name, PlaceKind::Cpu, DataType::Undefined,
               KernelInfo{nullptr, "allreduce_kernel", &decode_allreduce, &allreduce_kernel});
  registry.add(TypeId::get<BroadcastOp>(), BroadcastOp::name, PlaceKind::Cpu, DataType::Undefined,
               KernelInfo{nullptr, "broadcast_kernel", &decode_broadcast, &broadcast_kernel});
  registry.add(TypeId::get<AllGatherOp>(), AllGatherOp::name, PlaceKind::Cpu, DataType::Undefined,
               KernelInfo{nullptr, "allgather_kernel", &decode_allgather, &allgather_kernel});
  registry.add(TypeId::get<ReduceScatterOp>(), ReduceScatterOp::name, PlaceKind::Cpu, DataType::Undefined,
               KernelInfo{nullptr, "reduce_scatter_kernel", &decode_reduce_scatter, &reduce_scatter_kernel});
  registry.add(TypeId::get<BarrierOp>(), BarrierOp::name, PlaceKind::Cpu, DataType::Undefined,
               KernelInfo{nullptr, "barrier_kernel", nullptr, &barrier_kernel});
  return true;
}();

}  // namespace
}  // namespace kiln::cpu

// NcclCommunicator, the NCCL backend, in one process: one rank on CUDA
// device 0 reduces, broadcasts, gathers and scatters CUDA tensors, through
// its own calls and through the collective ops on a CUDA place ([cuda]:
// skipped without a device or without NCCL in the build). Without them,
// creating one is a clear error. Two ranks: test/mpi/collectives_test.cc.
#include <vector>

#include "catch.hpp"
#include "kiln/dialect/collective_ops.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/executor.h"
#include "kiln/ir/builder.h"
#include "kiln/runtime/cuda_context.h"
#include "kiln/runtime/nccl_communicator.h"
#include "kernel/cuda_test_util.h"
#include "test_util.h"

using namespace kiln;
using kiln_test::have_cuda;

namespace {

bool have_nccl() { return have_cuda() && Communicator::built_with_nccl(); }

Tensor on_device(const std::vector<float>& v) {
  return copy_to_place(Tensor::from_vector<float>({static_cast<std::int64_t>(v.size())}, v), Place::cuda(0));
}

std::vector<float> on_host(const Tensor& t) { return copy_to_place(t, Place::cpu()).to_vector<float>(); }

}  // namespace

TEST_CASE("an NCCL communicator without NCCL or a CUDA device is a clear error", "[nccl]") {
  if (have_nccl()) return;  // it can be made here: the [cuda] cases test it
  auto local = Communicator::single_process();
  CHECK_THROWS_WITH(NcclCommunicator::create(*local, 0),
                    Catch::Contains("NCCL communicator on rank 0 of 1 (local)"));
}

TEST_CASE("an NCCL communicator of one rank reduces, broadcasts and gathers CUDA tensors", "[cuda][nccl]") {
  if (!have_nccl()) return;
  auto comm = NcclCommunicator::create(*Communicator::single_process(), 0);
  CHECK(comm->backend() == CommBackend::Nccl);
  CHECK(comm->size() == 1);
  CHECK(comm->device() == 0);
  Tensor t = on_device({1, 2, 3});
  comm->allreduce(t, ReduceKind::Sum);
  CHECK(on_host(t) == std::vector<float>{1, 2, 3});
  comm->allreduce(t, ReduceKind::Mean);
  CHECK(on_host(t) == std::vector<float>{1, 2, 3});
  std::vector<Tensor> bucket{on_device({4, 5}), on_device({6})};
  comm->allreduce(bucket, ReduceKind::Sum);
  CHECK(on_host(bucket[0]) == std::vector<float>{4, 5});
  comm->broadcast(t, 0);
  CHECK(on_host(t) == std::vector<float>{1, 2, 3});
  CHECK(on_host(comm->allgather(t)) == std::vector<float>{1, 2, 3});
  CHECK(on_host(comm->reduce_scatter(t, ReduceKind::Sum)) == std::vector<float>{1, 2, 3});
  comm->barrier();
  Tensor host = Tensor::from_vector<float>({1}, {1});
  CHECK_THROWS_WITH(comm->allreduce(host, ReduceKind::Sum),
                    Catch::Contains("rank 0 of 1 (nccl)") && Catch::Contains("cannot reach"));
}

TEST_CASE("collective ops on a CUDA place run over NCCL", "[cuda][nccl]") {
  if (!have_nccl()) return;
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{4}, DataType::Float32).result();
  Operation* r = b.create<AllReduceOp>(std::vector<Value>{x, x}, "mean").operation();
  Value g = b.create<AllGatherOp>(r->result(0), std::int64_t{1}).result();
  Value bc = b.create<BroadcastOp>(g).result();
  b.create<BarrierOp>();
  ExecutionOptions o;
  o.num_threads = 1;
  o.communicator = NcclCommunicator::create(*Communicator::single_process(), 0);
  Executor exe(Place::cuda(0), o);
  const std::vector<float> xs{1, 2, 3, 4};
  auto got = exe.run(p, {{"x", Tensor::from_vector<float>({4}, xs)}}, {r->result(1), bc});
  CHECK(on_host(got[0]) == xs);
  CHECK(on_host(got[1]) == xs);
  // A host communicator cannot run them on the device.
  ExecutionOptions host_comm;
  host_comm.communicator = Communicator::single_process();
  Executor wrong(Place::cuda(0), host_comm);
  CHECK_THROWS_WITH(wrong.run(p, {{"x", Tensor::from_vector<float>({4}, xs)}}, {bc}),
                    Catch::Contains("needs an NCCL communicator") && Catch::Contains("(local)"));
}

// The collectives over MPI, on every rank of `mpirun -np 2`: allreduce (sum,
// mean, a bucket of several tensors), broadcast, allgather, reduce-scatter
// and barrier, through the ops and an Executor and through the
// Communicator's own calls, checked against sums computed by hand for odd
// sizes and every dtype MPI can reduce; the dtypes it cannot are errors.
// With a CUDA device per rank, the NCCL backend too ([cuda]).
#include <cstdint>
#include <string>
#include <vector>

#include "catch.hpp"
#include "kiln/dialect/collective_ops.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/executor.h"
#include "kiln/ir/builder.h"
#include "kiln/runtime/communicator.h"
#include "kiln/runtime/cuda_context.h"
#include "kiln/runtime/nccl_communicator.h"

using namespace kiln;

namespace {

std::shared_ptr<Communicator> world() { return Communicator::from_environment(); }

Executor executor_on(const std::shared_ptr<Communicator>& comm) {
  ExecutionOptions o;
  o.communicator = comm;
  o.num_threads = 1;
  return Executor(Place::cpu(), o);
}

// Rank r's element i: small enough for every integer dtype summed over 2..4 ranks.
std::int64_t element(int rank, std::int64_t i) { return (rank + 1) * (i % 13) + rank; }

template <typename T>
Tensor filled(int rank, std::int64_t n) {
  std::vector<T> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<T>(element(rank, i));
  return Tensor::from_vector<T>({n}, v);
}

template <typename T>
std::vector<T> summed(int size, std::int64_t n) {
  std::vector<T> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t s = 0;
    for (int r = 0; r < size; ++r) s += element(r, i);
    v[static_cast<std::size_t>(i)] = static_cast<T>(s);
  }
  return v;
}

const std::int64_t kOddSizes[] = {1, 7, 1001, 65537};

template <typename T>
void check_allreduce_of() {
  auto comm = world();
  const DataType dtype = data_type_of<T>;
  for (std::int64_t n : kOddSizes) {
    INFO(to_string(dtype) << " x " << n);
    // Through the op: a bucket of two tensors (n and n + 2 elements).
    Program p;
    Builder b(p);
    Value x = b.create<DataOp>("x", std::vector<std::int64_t>{n}, dtype).result();
    Value y = b.create<DataOp>("y", std::vector<std::int64_t>{n + 2}, dtype).result();
    Operation* reduce = b.create<AllReduceOp>(std::vector<Value>{x, y}, "sum").operation();
    Executor exe = executor_on(comm);
    std::vector<Tensor> got = exe.run(p, {{"x", filled<T>(comm->rank(), n)}, {"y", filled<T>(comm->rank(), n + 2)}},
                       {reduce->result(0), reduce->result(1)});
    CHECK(got[0].template to_vector<T>() == summed<T>(comm->size(), n));
    CHECK(got[1].template to_vector<T>() == summed<T>(comm->size(), n + 2));
    // Through the communicator's own call, in place.
    Tensor t = filled<T>(comm->rank(), n);
    comm->allreduce(t, ReduceKind::Sum);
    CHECK(t.template to_vector<T>() == summed<T>(comm->size(), n));
  }
}

}  // namespace

TEST_CASE("the job has two ranks over MPI", "[mpi]") {
  auto comm = world();
  CHECK(comm->backend() == CommBackend::Mpi);
  CHECK(comm->size() == 2);
  CHECK(comm->rank() >= 0);
  CHECK(comm->rank() < comm->size());
  CHECK(comm.get() == world().get());  // one per process
}

TEST_CASE("allreduce sums every reducible dtype over the ranks, for odd sizes", "[mpi][collective]") {
  check_allreduce_of<float>();
  check_allreduce_of<double>();
  check_allreduce_of<std::int8_t>();
  check_allreduce_of<std::int16_t>();
  check_allreduce_of<std::int32_t>();
  check_allreduce_of<std::int64_t>();
  check_allreduce_of<std::uint8_t>();
  check_allreduce_of<std::uint16_t>();
  check_allreduce_of<std::uint32_t>();
  check_allreduce_of<std::uint64_t>();
}

TEST_CASE("allreduce mean divides the sum by the number of ranks", "[mpi][collective]") {
  auto comm = world();
  for (std::int64_t n : kOddSizes) {
    Program p;
    Builder b(p);
    Value x = b.create<DataOp>("x", std::vector<std::int64_t>{n}, DataType::Float64).result();
    Value m = b.create<AllReduceOp>(std::vector<Value>{x}, "mean").operation()->result(0);
    Executor exe = executor_on(comm);
    const auto got = exe.run(p, {{"x", filled<double>(comm->rank(), n)}}, {m})[0].to_vector<double>();
    const auto sum = summed<double>(comm->size(), n);
    REQUIRE(got.size() == sum.size());
    for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(sum[i] / comm->size()));
  }
}

TEST_CASE("broadcast gives every rank the root's tensor, for every dtype", "[mpi][collective]") {
  auto comm = world();
  for (int root = 0; root < comm->size(); ++root) {
    for (std::int64_t n : kOddSizes) {
      INFO("root " << root << " n " << n);
      // f16 travels as bytes: a broadcast needs no arithmetic.
      Tensor h = Tensor::zeros({n}, DataType::Float16);
      auto* bits = static_cast<std::uint16_t*>(h.raw_data());
      for (std::int64_t i = 0; i < n; ++i) bits[i] = static_cast<std::uint16_t>(element(comm->rank(), i));
      comm->broadcast(h, root);
      bool same = true;
      for (std::int64_t i = 0; i < n; ++i) same = same && bits[i] == static_cast<std::uint16_t>(element(root, i));
      CHECK(same);
      Program p;
      Builder b(p);
      Value x = b.create<DataOp>("x", std::vector<std::int64_t>{n}, DataType::Int32).result();
      Value y = b.create<BroadcastOp>(x, std::int64_t{root}).result();
      Executor exe = executor_on(comm);
      CHECK(exe.run(p, {{"x", filled<std::int32_t>(comm->rank(), n)}}, {y})[0].to_vector<std::int32_t>() ==
            filled<std::int32_t>(root, n).to_vector<std::int32_t>());
    }
  }
}

TEST_CASE("allgather concatenates the ranks' tensors in rank order", "[mpi][collective]") {
  auto comm = world();
  for (std::int64_t n : kOddSizes) {
    Program p;
    Builder b(p);
    Value x = b.create<DataOp>("x", std::vector<std::int64_t>{n, 3}, DataType::Float32).result();
    Value y = b.create<AllGatherOp>(x, std::int64_t{comm->size()}).result();
    Executor exe = executor_on(comm);
    auto mine = filled<float>(comm->rank(), n * 3).reshape({n, 3});
    Tensor got = exe.run(p, {{"x", mine}}, {y})[0];
    REQUIRE(got.dims() == Dims{n * comm->size(), 3});
    std::vector<float> expected;
    for (int r = 0; r < comm->size(); ++r) {
      auto part = filled<float>(r, n * 3).to_vector<float>();
      expected.insert(expected.end(), part.begin(), part.end());
    }
    CHECK(got.to_vector<float>() == expected);
    CHECK(comm->allgather(mine).to_vector<float>() == expected);
  }
}

TEST_CASE("reduce_scatter leaves each rank its slice of the sum", "[mpi][collective]") {
  auto comm = world();
  for (std::int64_t n : kOddSizes) {
    const std::int64_t rows = n * comm->size();
    Program p;
    Builder b(p);
    Value x = b.create<DataOp>("x", std::vector<std::int64_t>{rows}, DataType::Int64).result();
    Value y = b.create<ReduceScatterOp>(x, std::int64_t{comm->size()}, "sum").result();
    Executor exe = executor_on(comm);
    Tensor got = exe.run(p, {{"x", filled<std::int64_t>(comm->rank(), rows)}}, {y})[0];
    const auto sum = summed<std::int64_t>(comm->size(), rows);
    const std::vector<std::int64_t> slice(sum.begin() + comm->rank() * n, sum.begin() + (comm->rank() + 1) * n);
    CHECK(got.to_vector<std::int64_t>() == slice);
    CHECK(comm->reduce_scatter(filled<std::int64_t>(comm->rank(), rows), ReduceKind::Sum).to_vector<std::int64_t>() ==
          slice);
  }
}

TEST_CASE("a barrier op returns on every rank", "[mpi][collective]") {
  auto comm = world();
  Program p;
  Builder b(p);
  b.create<BarrierOp>();
  Executor exe = executor_on(comm);
  for (int k = 0; k < 3; ++k) exe.run(p);
  comm->barrier();
  SUCCEED();
}

TEST_CASE("collectives of a dtype MPI cannot reduce fail naming the dtype on every rank", "[mpi][collective]") {
  auto comm = world();
  Tensor h = Tensor::zeros({5}, DataType::Float16);
  CHECK_THROWS_WITH(comm->allreduce(h, ReduceKind::Sum), Catch::Contains("f16") && Catch::Contains("rank"));
  Tensor flags = Tensor::zeros({5}, DataType::Bool);
  CHECK_THROWS_WITH(comm->allreduce(flags, ReduceKind::Sum), Catch::Contains("bool"));
  Tensor i = Tensor::zeros({5}, DataType::Int32);
  CHECK_THROWS_WITH(comm->allreduce(i, ReduceKind::Mean), Catch::Contains("mean needs f32 or f64"));
  // The job goes on: nothing was sent.
  comm->barrier();
}

TEST_CASE("an allgather built for another number of ranks fails naming both", "[mpi][collective]") {
  auto comm = world();
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{3}, DataType::Float32).result();
  Value y = b.create<AllGatherOp>(x, std::int64_t{comm->size() + 1}).result();
  Executor exe = executor_on(comm);
  CHECK_THROWS_WITH(exe.run(p, {{"x", Tensor::zeros({3}, DataType::Float32)}}, {y}),
                    Catch::Contains("num_ranks 3") && Catch::Contains("rank " + std::to_string(comm->rank()) + " of 2"));
  comm->barrier();
}

TEST_CASE("allreduce over NCCL sums CUDA tensors across the ranks", "[mpi][cuda][nccl]") {
  auto comm = world();
  // Every rank decides alike: one machine, one device count.
  if (!Communicator::built_with_nccl() || cuda_device_count() < comm->size()) {
    WARN("needs NCCL and a CUDA device per rank: skipped");
    return;
  }
  auto nccl = NcclCommunicator::create(*comm, comm->rank());
  const Place device = Place::cuda(static_cast<std::int16_t>(comm->rank()));
  for (std::int64_t n : kOddSizes) {
    Tensor t = copy_to_place(filled<float>(comm->rank(), n), device);
    nccl->allreduce(t, ReduceKind::Sum);
    CHECK(copy_to_place(t, Place::cpu()).to_vector<float>() == summed<float>(comm->size(), n));
  }
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{7}, DataType::Float32).result();
  Value m = b.create<AllReduceOp>(std::vector<Value>{x}, "mean").operation()->result(0);
  ExecutionOptions o;
  o.num_threads = 1;
  o.communicator = nccl;
  Executor exe(device, o);
  const auto got = copy_to_place(exe.run(p, {{"x", filled<float>(comm->rank(), 7)}}, {m})[0], Place::cpu());
  const auto sum = summed<float>(comm->size(), 7);
  const auto mean = got.to_vector<float>();
  for (std::size_t i = 0; i < sum.size(); ++i) CHECK(mean[i] == Approx(sum[i] / comm->size()));
}

TEST_CASE("collectives whose sizes differ between ranks fail on every rank instead of hanging", "[mpi][collective]") {
  auto comm = world();
  const std::int64_t n = comm->rank() == 0 ? 5 : 7;
  Tensor t = filled<float>(comm->rank(), n);
  CHECK_THROWS_WITH(comm->allreduce(t, ReduceKind::Sum),
                    Catch::Contains("allreduce on rank " + std::to_string(comm->rank()) + " of 2 (mpi)") &&
                        Catch::Contains("the ranks hold 5 to 7 elements"));
  CHECK_THROWS_WITH(comm->broadcast(t, 0), Catch::Contains("broadcast on rank"));
  CHECK_THROWS_WITH(comm->allgather(t), Catch::Contains("allgather on rank"));
  // A bucket of the same total in other sizes.
  std::vector<Tensor> bucket{filled<float>(comm->rank(), comm->rank() == 0 ? 2 : 3),
                             filled<float>(comm->rank(), comm->rank() == 0 ? 3 : 2)};
  CHECK_THROWS_WITH(comm->allreduce(bucket, ReduceKind::Sum), Catch::Contains("tensor sizes differ"));
  Tensor d = comm->rank() == 0 ? filled<float>(0, 4) : filled<std::int32_t>(1, 4);
  CHECK_THROWS_WITH(comm->allreduce(d, ReduceKind::Sum), Catch::Contains("dtypes differ"));
  // Through an op: the run fails naming it, on every rank.
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{-1}, DataType::Float32).result();
  Value y = b.create<AllReduceOp>(std::vector<Value>{x}, "sum").operation()->result(0);
  Executor exe = executor_on(comm);
  CHECK_THROWS_WITH(exe.run(p, {{"x", filled<float>(comm->rank(), n)}}, {y}),
                    Catch::Contains("kiln.allreduce") && Catch::Contains("the ranks hold 5 to 7 elements"));
  // The job goes on.
  CHECK(exe.run(p, {{"x", filled<float>(comm->rank(), 3)}}, {y})[0].to_vector<float>() == summed<float>(2, 3));
}

TEST_CASE("the communicator counts the time its thread spent in collectives", "[mpi][collective]") {
  auto comm = world();
  const std::int64_t before = comm->busy_ns();
  Tensor t = filled<float>(comm->rank(), 65537);
  comm->allreduce(t, ReduceKind::Sum);
  CHECK(comm->busy_ns() > before);
}

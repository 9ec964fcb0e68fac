// kiln::Communicator in one process: outside mpirun the environment gives a
// single-process communicator, whose collectives copy; bad input is a
// kiln::Error naming the call, the rank and what was expected. The
// multi-rank behaviour is tested under mpirun (test/mpi/).
#include <cstdlib>
#include <vector>

#include "catch.hpp"
#include "kiln/runtime/communicator.h"

using namespace kiln;

TEST_CASE("outside mpirun the communicator from the environment is one local rank", "[communicator]") {
  if (std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK")) {
    WARN("started by mpirun: skipped");
    return;
  }
  auto comm = Communicator::from_environment();
  CHECK(comm->rank() == 0);
  CHECK(comm->size() == 1);
  CHECK(comm->backend() == CommBackend::Local);
  CHECK(comm->describe() == "rank 0 of 1 (local)");
  CHECK(comm->peer_failure() == nullptr);
}

TEST_CASE("a single-process communicator's collectives return the input", "[communicator]") {
  auto comm = Communicator::single_process();
  Tensor t = Tensor::from_vector<float>({3}, {1.f, 2.f, 3.f});
  comm->allreduce(t, ReduceKind::Sum);
  CHECK(t.to_vector<float>() == std::vector<float>{1.f, 2.f, 3.f});
  comm->allreduce(t, ReduceKind::Mean);
  CHECK(t.to_vector<float>() == std::vector<float>{1.f, 2.f, 3.f});
  std::vector<Tensor> bucket{Tensor::from_vector<std::int64_t>({2}, {4, 5}),
                             Tensor::from_vector<std::int64_t>({1}, {6})};
  comm->allreduce(bucket, ReduceKind::Sum);
  CHECK(bucket[1].to_vector<std::int64_t>() == std::vector<std::int64_t>{6});
  comm->broadcast(t, 0);
  CHECK(t.to_vector<float>() == std::vector<float>{1.f, 2.f, 3.f});
  Tensor g = comm->allgather(Tensor::from_vector<float>({1, 2}, {7.f, 8.f}));
  CHECK(g.dims() == Dims{1, 2});
  CHECK(g.to_vector<float>() == std::vector<float>{7.f, 8.f});
  CHECK(comm->allgather(Tensor::from_vector<std::int32_t>({}, {9})).dims() == Dims{1});
  CHECK(comm->reduce_scatter(t, ReduceKind::Sum).to_vector<float>() == std::vector<float>{1.f, 2.f, 3.f});
  comm->barrier();
  CHECK(comm->busy_ns() == 0);  // no thread of its own
}

TEST_CASE("a collective on bad input names the call, the rank and what it expected", "[communicator]") {
  auto comm = Communicator::single_process();
  Tensor empty;
  CHECK_THROWS_WITH(comm->allreduce(empty, ReduceKind::Sum),
                    Catch::Contains("allreduce on rank 0 of 1 (local)") && Catch::Contains("uninitialized"));
  Tensor h = Tensor::zeros({3}, DataType::Float16);
  CHECK_THROWS_WITH(comm->allreduce(h, ReduceKind::Sum),
                    Catch::Contains("cannot sum dtype f16") && Catch::Contains("no MPI reduction type"));
  Tensor b = Tensor::zeros({3}, DataType::Bool);
  CHECK_THROWS_WITH(comm->allreduce(b, ReduceKind::Sum), Catch::Contains("cannot sum dtype bool"));
  Tensor i = Tensor::zeros({3}, DataType::Int32);
  CHECK_THROWS_WITH(comm->allreduce(i, ReduceKind::Mean),
                    Catch::Contains("cannot mean dtype i32") && Catch::Contains("mean needs f32 or f64"));
  std::vector<Tensor> mixed{Tensor::zeros({2}, DataType::Float32), Tensor::zeros({2}, DataType::Float64)};
  CHECK_THROWS_WITH(comm->allreduce(mixed, ReduceKind::Sum),
                    Catch::Contains("tensor #1 is f64 but tensor #0 is f32"));
  Tensor f = Tensor::zeros({3}, DataType::Float32);
  CHECK_THROWS_WITH(comm->broadcast(f, 1), Catch::Contains("root 1 is not a rank (0..0)"));
  CHECK_THROWS_WITH(comm->reduce_scatter(Tensor::zeros({}, DataType::Float32), ReduceKind::Sum),
                    Catch::Contains("no first dimension that divides by 1"));
}

TEST_CASE("reductions are named sum or mean; other names are errors", "[communicator]") {
  CHECK(reduce_kind_from_string("sum") == ReduceKind::Sum);
  CHECK(reduce_kind_from_string("mean") == ReduceKind::Mean);
  CHECK_THROWS_WITH(reduce_kind_from_string("max"), Catch::Contains("reduction 'max'"));
  CHECK(is_reducible(DataType::UInt64, ReduceKind::Sum));
  CHECK_FALSE(is_reducible(DataType::BFloat16, ReduceKind::Sum));
  CHECK_FALSE(is_reducible(DataType::Int8, ReduceKind::Mean));
}

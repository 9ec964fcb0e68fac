// The collective ops in one process: verification errors name the op and
// what it expected; a run without a communicator fails naming the op; over
// a single-process communicator every collective returns its input, and a
// run keeps them in program order with the ops around them.
#include <vector>

#include "catch.hpp"
#include "kiln/dialect/collective_ops.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/executor.h"
#include "kiln/ir/builder.h"
#include "kiln/runtime/communicator.h"

using namespace kiln;

namespace {

Value data_of(Builder& b, const std::string& name, std::vector<std::int64_t> shape,
              DataType dtype = DataType::Float32) {
  return b.create<DataOp>(name, shape, dtype).result();
}

ExecutionOptions with(std::shared_ptr<Communicator> comm, unsigned threads = 1) {
  ExecutionOptions o;
  o.communicator = std::move(comm);
  o.num_threads = threads;
  return o;
}

}  // namespace

TEST_CASE("collective ops carry the Communication trait", "[collective]") {
  Program p;
  Builder b(p);
  Value x = data_of(b, "x", {4});
  CHECK(b.create<AllReduceOp>(std::vector<Value>{x}).operation()->has_trait<Communication>());
  CHECK(b.create<BroadcastOp>(x).operation()->has_trait<Communication>());
  CHECK(b.create<AllGatherOp>(x, std::int64_t{2}).operation()->has_trait<Communication>());
  CHECK(b.create<ReduceScatterOp>(x, std::int64_t{2}).operation()->has_trait<Communication>());
  CHECK(b.create<BarrierOp>().operation()->has_trait<Communication>());
}

TEST_CASE("collective ops infer the shapes their results have", "[collective]") {
  Program p;
  Builder b(p);
  Value x = data_of(b, "x", {6, 3});
  CHECK(shaped_dims(b.create<AllGatherOp>(x, std::int64_t{2}).result().type()) == std::vector<std::int64_t>{12, 3});
  CHECK(shaped_dims(b.create<ReduceScatterOp>(x, std::int64_t{3}).result().type()) ==
        std::vector<std::int64_t>{2, 3});
  Value s = data_of(b, "s", {});
  CHECK(shaped_dims(b.create<AllGatherOp>(s, std::int64_t{4}).result().type()) == std::vector<std::int64_t>{4});
  Value y = data_of(b, "y", {2}, DataType::Float32);
  Operation* r = b.create<AllReduceOp>(std::vector<Value>{x, y}, "mean").operation();
  REQUIRE(r->num_results() == 2);
  CHECK(r->result(1).type() == y.type());
}

TEST_CASE("collective ops reject what they cannot reduce or split, naming the op", "[collective]") {
  Program p;
  Builder b(p);
  Value f = data_of(b, "f", {5});
  Value d = data_of(b, "d", {5}, DataType::Float64);
  Value h = data_of(b, "h", {5}, DataType::Float16);
  Value i = data_of(b, "i", {5}, DataType::Int32);
  CHECK_THROWS_WITH(b.create<AllReduceOp>(std::vector<Value>{}),
                    Catch::Contains("kiln.allreduce") && Catch::Contains("at least one operand"));
  CHECK_THROWS_WITH(b.create<AllReduceOp>(std::vector<Value>{f, d}), Catch::Contains("kiln.allreduce"));
  CHECK_THROWS_WITH(b.create<AllReduceOp>(std::vector<Value>{h}),
                    Catch::Contains("kiln.allreduce") && Catch::Contains("cannot sum dtype f16"));
  CHECK_THROWS_WITH(b.create<AllReduceOp>(std::vector<Value>{i}, "mean"),
                    Catch::Contains("cannot mean dtype i32") && Catch::Contains("use sum"));
  CHECK_THROWS_WITH(b.create<AllReduceOp>(std::vector<Value>{f}, "max"),
                    Catch::Contains("kiln.allreduce") && Catch::Contains("reduction 'max'"));
  CHECK_THROWS_WITH(b.create<ReduceScatterOp>(f, std::int64_t{2}),
                    Catch::Contains("kiln.reduce_scatter") && Catch::Contains("does not divide by num_ranks 2"));
  CHECK_THROWS_WITH(b.create<AllGatherOp>(f, std::int64_t{0}), Catch::Contains("num_ranks 0 must be >= 1"));
  CHECK_THROWS_WITH(b.create<BroadcastOp>(f, std::int64_t{-1}), Catch::Contains("root -1 is not a rank"));
}

TEST_CASE("a collective op run without a communicator fails naming the op", "[collective]") {
  Program p;
  Builder b(p);
  Value x = data_of(b, "x", {3});
  Value y = b.create<AllReduceOp>(std::vector<Value>{x}).operation()->result(0);
  Executor exe;
  CHECK_THROWS_WITH(exe.run(p, {{"x", Tensor::zeros({3}, DataType::Float32)}}, {y}),
                    Catch::Contains("kiln.allreduce") && Catch::Contains("has no communicator") &&
                        Catch::Contains("ExecutionOptions::communicator"));
}

TEST_CASE("collective ops over one local rank return their input", "[collective]") {
  Program p;
  Builder b(p);
  Value x = data_of(b, "x", {4, 2});
  Value n = data_of(b, "n", {3}, DataType::Int64);
  Operation* r = b.create<AllReduceOp>(std::vector<Value>{x, x}, "mean").operation();
  Value s = b.create<AllReduceOp>(std::vector<Value>{n}, "sum").operation()->result(0);
  Value bc = b.create<BroadcastOp>(x).result();
  Value g = b.create<AllGatherOp>(x, std::int64_t{1}).result();
  Value rs = b.create<ReduceScatterOp>(x, std::int64_t{1}).result();
  b.create<BarrierOp>();
  const std::vector<float> xs{1, 2, 3, 4, 5, 6, 7, 8};
  for (unsigned threads : {1u, 2u}) {
    INFO("threads " << threads);
    Executor exe(Place::cpu(), with(Communicator::single_process(), threads));
    auto got = exe.run(p, {{"x", Tensor::from_vector<float>({4, 2}, xs)},
                           {"n", Tensor::from_vector<std::int64_t>({3}, {1, 2, 3})}},
                       {r->result(0), r->result(1), s, bc, g, rs});
    for (std::size_t k : {0u, 1u, 3u, 4u, 5u}) CHECK(got[k].to_vector<float>() == xs);
    CHECK(got[2].to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 2, 3});
  }
}

TEST_CASE("an allgather built for two ranks fails on one, naming both", "[collective]") {
  Program p;
  Builder b(p);
  Value x = data_of(b, "x", {3});
  Value y = b.create<AllGatherOp>(x, std::int64_t{2}).result();
  Executor exe(Place::cpu(), with(Communicator::single_process()));
  CHECK_THROWS_WITH(exe.run(p, {{"x", Tensor::zeros({3}, DataType::Float32)}}, {y}),
                    Catch::Contains("kiln.allgather") && Catch::Contains("num_ranks 2") &&
                        Catch::Contains("rank 0 of 1 (local)"));
}

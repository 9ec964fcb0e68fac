// Partitioning a program by place (seed 003's graph partition): ops marked
// with set_op_place are split into one program per place, joined by
// kiln.send / kiln.recv pairs, and run as one step (run_partitioned): the
// results equal the unpartitioned program's; a value read on another place
// is sent once per reading place; a failure in one part fails the step
// without a hang; bad fetches, feeds and executor counts are errors.
#include <chrono>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "exec/exec_test_util.h"
#include "kiln/dialect/dataflow_ops.h"
#include "kiln/dialect/send_recv_ops.h"
#include "kiln/exec/partitioner.h"
#include "kiln/frontend/frontend.h"
#include "kiln/passes/lower_to_dataflow.h"

using namespace kiln;
using kiln_test::count_top_ops;

namespace {

const Place kA = Place::host_stream(0), kB = Place::host_stream(1);

std::vector<float> run_whole(const Program& p, const FeedMap& feed, const std::vector<Value>& fetch,
                             std::size_t k) {
  Executor exe(Place::cpu());
  std::vector<FetchTarget> f(fetch.begin(), fetch.end());
  return exe.run(p, feed, f)[k].to_vector<float>();
}

}  // namespace

TEST_CASE("a program split over two places gives the unpartitioned program's results",
          "[exec][partition]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{2, 3}).result();
  Value w = b.create<DataOp>("w", std::vector<std::int64_t>{3, 2}).result();
  auto on = [](auto op, Place place) {
    set_op_place(op.operation(), place);
    return op;
  };
  Value a = on(b.create<ReluOp>(x), kA).result();                // A
  Value m = on(b.create<MatmulOp>(a, w), kB).result();           // B reads a (A), w (default: A)
  Value s = on(b.create<AddOp>(m, m), kA).result();              // A reads m (B)
  Value t = on(b.create<MulOp>(a, a), kB).result();              // B reads a again: no second send
  Value u = on(b.create<ExpOp>(t), kA).result();                 // A reads t (B)
  const std::vector<Value> fetch{s, u, m};
  const PartitionedProgram pp = partition(p, fetch, kA);
  REQUIRE(pp.parts.size() == 2);
  CHECK(pp.parts[0].place == kA);
  CHECK(pp.parts[1].place == kB);
  // A → B: a, w; B → A: m, t.
  CHECK(pp.transfers == 4);
  CHECK(count_top_ops(pp.parts[0].program, "kiln.send") == 2);
  CHECK(count_top_ops(pp.parts[1].program, "kiln.recv") == 2);
  CHECK(count_top_ops(pp.parts[1].program, "kiln.send") == 2);
  CHECK(count_top_ops(pp.parts[0].program, "kiln.recv") == 2);
  CHECK(pp.parts[0].feeds == std::vector<std::string>{"x", "w"});
  CHECK(pp.parts[1].feeds.empty());
  for (const ProgramPart& part : pp.parts) {
    part.program.verify();
    for (Operation* op : part.program.block()) CHECK_FALSE(op->attribute(kPlaceAttr));
    // No dataflow ops: the parts keep the flat counters, and a dead value would be refused.
    CHECK_FALSE(has_dataflow_ops(part.program.block()));
  }

  Executor ea(Place::cpu(), {.num_threads = 1}), eb(Place::cpu(), {.num_threads = 1});
  Executor* exes[] = {&ea, &eb};
  for (int step = 0; step < 3; ++step) {
    const FeedMap feed{
        {"x", Tensor::from_vector<float>({2, 3}, {1, -2, 3, -4, 5, float(step)})},
        {"w", Tensor::from_vector<float>({3, 2}, {0.5f, -1, 2, 0.25f, -0.5f, 1})}};
    const auto got = run_partitioned(pp, exes, feed);
    REQUIRE(got.size() == 3);
    for (std::size_t k = 0; k < 3; ++k) {
      INFO("step " << step << " fetch " << k);
      CHECK(got[k].to_vector<float>() == run_whole(p, feed, fetch, k));
    }
  }
}

TEST_CASE("a random tree of adds split over two places sums like the whole program",
          "[exec][partition]") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 5; ++trial) {
    Program p;
    Builder b(p);
    std::vector<Value> pool;
    FeedMap feed;
    for (int i = 0; i < 8; ++i) {
      const std::string name = "x" + std::to_string(i);
      Value v = b.create<DataOp>(name, std::vector<std::int64_t>{4}).result();
      set_op_place(v.defining_op(), rng() % 2 ? kA : kB);
      pool.push_back(v);
      feed.emplace(name, Tensor::from_vector<float>({4}, {float(i), 1, -float(i), 0.5f}));
    }
    while (pool.size() > 1) {
      const std::size_t i = rng() % pool.size();
      Value l = pool[i];
      pool.erase(pool.begin() + static_cast<std::ptrdiff_t>(i));
      const std::size_t j = rng() % pool.size();
      auto add = b.create<AddOp>(l, pool[j]);
      set_op_place(add.operation(), rng() % 2 ? kA : kB);
      pool[j] = add.result();
    }
    const PartitionedProgram pp = partition(p, {pool[0]});
    std::vector<std::unique_ptr<Executor>> owned;
    std::vector<Executor*> exes;
    for (std::size_t k = 0; k < pp.parts.size(); ++k) {
      owned.push_back(std::make_unique<Executor>(Place::cpu()));
      exes.push_back(owned.back().get());
    }
    INFO("trial " << trial << ", " << pp.transfers << " transfers");
    CHECK(run_partitioned(pp, exes, feed)[0].to_vector<float>() ==
          run_whole(p, feed, {pool[0]}, 0));
  }
}

TEST_CASE("a control-flow op goes whole to its place, receiving what its regions read",
          "[exec][partition]") {
  Program p, startup;
  Value r, out;
  {
    ProgramGuard guard(p, startup);
    Value x = data("x", {3});
    Value flag = data("flag", {1}, DataType::Bool);
    r = nn::functional::relu(x);  // A (default)
    out = cond(flag, [&] { return main_builder().create<ExpOp>(r).result(); },
               [&] { return main_builder().create<NegOp>(r).result(); });
  }
  Operation* if_op = out.defining_op();
  REQUIRE(if_op->name() == "kiln.if");
  set_op_place(if_op, kB);
  const PartitionedProgram pp = partition(p, {out}, kA);
  REQUIRE(pp.parts.size() == 2);
  CHECK(count_top_ops(pp.parts[1].program, "kiln.recv") == 2);  // the flag, and r captured by the branches
  Executor ea, eb;
  Executor* exes[] = {&ea, &eb};
  // With lower_to_dataflow asked for, the part holding the if stays
  // structured (its receives have asynchronous kernels, which frames do not
  // run) and gives the same results.
  CHECK_FALSE(can_lower_to_dataflow(pp.parts[1].program));
  ExecutionOptions lowering;
  lowering.passes = "lower_to_dataflow";
  Executor la(Place::cpu(), lowering), lb(Place::cpu(), lowering);
  Executor* lowered[] = {&la, &lb};
  for (bool f : {true, false}) {
    const FeedMap feed{{"x", Tensor::from_vector<float>({3}, {-1, 0.5f, 2})},
                       {"flag", Tensor::from_vector<bool>({1}, {f})}};
    const auto want = run_whole(p, feed, {out}, 0);
    CHECK(run_partitioned(pp, exes, feed)[0].to_vector<float>() == want);
    CHECK(run_partitioned(pp, lowered, feed)[0].to_vector<float>() == want);
  }
}

TEST_CASE("an op failing in one part fails the partitioned step with its error, without a hang",
          "[exec][partition]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{-1, 3}).result();
  Value y = b.create<DataOp>("y", std::vector<std::int64_t>{-1, -1}).result();
  auto mm = b.create<MatmulOp>(x, y);  // A: fails when the fed inner dims differ
  Value e = b.create<ExpOp>(mm.result()).result();
  set_op_place(e.defining_op(), kB);  // B waits for mm's result
  const PartitionedProgram pp = partition(p, {e}, kA);
  Executor ea, eb;
  Executor* exes[] = {&ea, &eb};
  const FeedMap ok{{"x", Tensor::zeros({2, 3}, DataType::Float32)},
                   {"y", Tensor::zeros({3, 2}, DataType::Float32)}};
  CHECK(run_partitioned(pp, exes, ok)[0].to_vector<float>() == std::vector<float>(4, 1.f));
  const FeedMap bad{{"x", Tensor::zeros({2, 3}, DataType::Float32)},
                    {"y", Tensor::zeros({4, 2}, DataType::Float32)}};
  KILN_CHECK_ERROR(run_partitioned(pp, exes, bad), InvalidArgument, {"kiln.matmul"});
  // The executors stay usable.
  CHECK(run_partitioned(pp, exes, ok)[0].to_vector<float>() == std::vector<float>(4, 1.f));
}

TEST_CASE("partitioning refuses a foreign fetch and a bad place attribute; running it, a wrong "
          "executor count and an unknown feed",
          "[exec][partition]") {
  Program p, other;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{2}).result();
  Value r = b.create<ReluOp>(x).result();
  Value foreign = Builder(other).create<DataOp>("z", std::vector<std::int64_t>{2}).result();
  KILN_CHECK_ERROR(partition(p, {foreign}), InvalidArgument, {"fetch #0", "top-level"});
  const PartitionedProgram pp = partition(p, {r});
  REQUIRE(pp.parts.size() == 1);
  CHECK(pp.transfers == 0);
  Executor e1, e2;
  Executor* two[] = {&e1, &e2};
  Executor* one[] = {&e1};
  KILN_CHECK_ERROR(run_partitioned(pp, two, {{"x", Tensor::zeros({2}, DataType::Float32)}}),
                   InvalidArgument, {"2 executors for 1 parts"});
  KILN_CHECK_ERROR(run_partitioned(pp, one, {{"q", Tensor::zeros({2}, DataType::Float32)}}),
                   NotFound, {"feed 'q'"});
  r.defining_op()->set_attribute(kPlaceAttr, StrAttribute::get("gpu"));
  KILN_CHECK_ERROR(partition(p, {r}), InvalidArgument, {"kiln.relu", "kiln.place", "must be a place"});
}

TEST_CASE("a dataflow program split so that a part holds no dataflow op passes the untaken switch "
          "output through that part as a dead value",
          "[exec][partition]") {
  // B reads only the switch's true output; with pred false it gets a dead
  // value, passes it on dead, and A's merge takes the false output.
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{1}).result();
  Value pred = b.create<DataOp>("pred", std::vector<std::int64_t>{}, DataType::Bool).result();
  auto sw = b.create<SwitchOp>(x, pred);
  auto doubled = b.create<AddOp>(sw.output_true(), sw.output_true());
  set_op_place(doubled.operation(), kB);
  Value merged = b.create<MergeOp>(std::vector<Value>{sw.output_false(), doubled.result()}).output();
  const PartitionedProgram pp = partition(p, {merged}, kA);
  REQUIRE(pp.parts.size() == 2);
  CHECK(count_top_ops(pp.parts[1].program, "kiln.switch") + count_top_ops(pp.parts[1].program, "kiln.merge") == 0);
  CHECK(has_dataflow_ops(pp.parts[1].program.block()));  // its recv passes a dead value on
  RunOptions bounded;
  bounded.timeout = std::chrono::seconds(10);  // a part that waits for ever fails the step instead
  for (unsigned threads : {1u, 2u}) {
    Executor ea(Place::cpu(), {.num_threads = threads}), eb(Place::cpu(), {.num_threads = threads});
    Executor* exes[] = {&ea, &eb};
    for (bool taken : {true, false, true}) {
      INFO("threads " << threads << ", pred " << taken);
      const FeedMap feed{{"x", Tensor::from_vector<float>({1}, {3.f})},
                         {"pred", Tensor::from_vector<bool>(Dims(), {taken})}};
      CHECK(run_partitioned(pp, exes, feed, bounded)[0].to_vector<float>() ==
            std::vector<float>{taken ? 6.f : 3.f});
    }
  }
}

// The data-parallel transform in one process: where the gradient
// allreduces go and what the optimizer reads after it, how gradients fill
// buckets, the parameter broadcasts in startup, its errors, and training
// over one local rank (and, with a CUDA device, one NCCL rank) matching
// plain training step for step. Multi-rank
// training is tested under mpirun (test/mpi/data_parallel_test.cc).
#include <unordered_map>

#include "catch.hpp"
#include "frontend/frontend_test_util.h"
#include "kiln/dialect/collective_ops.h"
#include "kiln/dialect/optimizer_ops.h"
#include "kiln/exec/executor.h"
#include "kiln/frontend/amp.h"
#include "kiln/frontend/data_parallel.h"
#include "kiln/frontend/frontend.h"
#include "kiln/frontend/op_role.h"
#include "kiln/frontend/optimizer.h"
#include "kiln/passes/pass.h"
#include "kiln/runtime/communicator.h"
#include "kiln/runtime/cuda_context.h"
#include "kiln/runtime/nccl_communicator.h"
#include "kiln/runtime/scope.h"

using namespace kiln;
using namespace kiln_frontend_test;

namespace {

// A 3-layer MLP (6 parameters) trained with Adam, under amp O1 bf16 when
// `amp` (its updates then read the weights' and biases' bf16 gradients).
Value build_mlp(GuardedPrograms& g, bool amp = false) {
  Value x = data("x", {-1, 8});
  Value label = data("label", {-1}, DataType::Int64);
  nn::Linear fc1(8, 16), fc2(16, 16), fc3(16, 3);
  nn::ReLU relu;
  Value loss = nn::CrossEntropyLoss()(fc3(relu(fc2(relu(fc1(x))))), label);
  optim::Adam opt(1e-2);
  if (amp) amp::decorate(opt).minimize(loss);
  else opt.minimize(loss);
  (void)g;
  return loss;
}

std::unordered_map<const Operation*, std::size_t> positions(const Program& p) {
  std::unordered_map<const Operation*, std::size_t> at;
  std::size_t k = 0;
  for (Operation* op : p.block()) at[op] = k++;
  return at;
}

}  // namespace

TEST_CASE("data_parallel averages every gradient before an optimize op reads it", "[data_parallel]") {
  GuardedPrograms g;
  build_mlp(g);
  const auto before = parameter_gradients(g.main);
  REQUIRE(before.size() == 6);
  for (const ParameterGradient& pg : before) CHECK_FALSE(pg.parameter.empty());
  const DataParallelPlan plan = insert_gradient_allreduce(g.main);
  REQUIRE(plan.buckets.size() == 1);  // 25 MB holds them all
  const GradientBucket& b = plan.buckets[0];
  CHECK(b.dtype == DataType::Float32);
  CHECK(b.bytes == (8 * 16 + 16 + 16 * 16 + 16 + 16 * 3 + 3) * 4);
  REQUIRE(b.allreduce != nullptr);
  CHECK(b.allreduce->attribute("reduce").dyn_cast<StrAttribute>().value() == "mean");
  CHECK(op_role(b.allreduce) == OpRole::Backward);
  CHECK(count_top_ops(g.main, "kiln.allreduce") == 1);
  // No optimize op reads a gradient as backward made it; each reads the average.
  for (const ParameterGradient& pg : before)
    for (OpOperand use : pg.gradient.uses()) CHECK(use.owner() == b.allreduce);
  CHECK(parameter_gradients(g.main).empty());  // the averages are the allreduce's, not backward's results
  CHECK_THROWS_WITH(insert_gradient_allreduce(g.main), Catch::Contains("data-parallel already"));
}

TEST_CASE("gradients fill buckets in the order backward makes them, up to the bucket size", "[data_parallel]") {
  GuardedPrograms g;
  build_mlp(g);
  const auto grads = parameter_gradients(g.main);
  auto at = positions(g.main);
  for (std::size_t k = 1; k < grads.size(); ++k)
    CHECK(at[grads[k - 1].gradient.defining_op()] <= at[grads[k].gradient.defining_op()]);
  // Backward reaches the last layer first.
  CHECK(grads.front().parameter.rfind("linear_2.", 0) == 0);
  DataParallelOptions options;
  options.bucket_bytes = 100;  // each layer's bias and weight (>= 204 bytes) close a bucket
  const DataParallelPlan plan = insert_gradient_allreduce(g.main, options);
  REQUIRE(plan.buckets.size() >= 3);
  at = positions(g.main);
  std::size_t in_order = 0;
  for (std::size_t k = 0; k < plan.buckets.size(); ++k) {
    const GradientBucket& b = plan.buckets[k];
    INFO(plan.describe());
    if (k + 1 < plan.buckets.size()) CHECK(b.bytes >= options.bucket_bytes);
    // Each allreduce right after its bucket's last gradient, the buckets in program order.
    std::size_t last = 0;
    for (const ParameterGradient& pg : b.gradients) last = std::max(last, at[pg.gradient.defining_op()]);
    CHECK(at[b.allreduce] > last);
    CHECK(at[b.allreduce] >= in_order);
    in_order = at[b.allreduce];
  }
  CHECK_THAT(plan.describe(), Catch::StartsWith("bucket 0 (f32, "));
}

TEST_CASE("startup broadcasts every parameter it sets from the root", "[data_parallel]") {
  GuardedPrograms g;
  build_mlp(g);
  const std::size_t sets = count_top_ops(g.startup, "builtin.set_parameter");
  REQUIRE(sets > 6);  // weights, biases, Adam's state, the learning rate
  broadcast_parameters(g.startup, 0);
  CHECK(count_top_ops(g.startup, "kiln.broadcast") == sets);
  for (Operation* op : g.startup.block())
    if (op->isa<SetParameterOp>()) CHECK(op->operand_source(0).defining_op()->isa<BroadcastOp>());
}

TEST_CASE("data_parallel of a program without an optimizer names what is missing", "[data_parallel]") {
  GuardedPrograms g;
  Value x = data("x", {-1, 4});
  nn::Linear fc(4, 2);
  fc(x);
  auto comm = Communicator::single_process();
  CHECK_THROWS_WITH(data_parallel(g.main, g.startup, *comm),
                    Catch::Contains("no gradient that an optimize op reads") && Catch::Contains("minimize"));
}

TEST_CASE("data_parallel refuses a root outside the job", "[data_parallel]") {
  GuardedPrograms g;
  build_mlp(g);
  auto comm = Communicator::single_process();
  DataParallelOptions options;
  options.root = 1;
  CHECK_THROWS_WITH(data_parallel(g.main, g.startup, *comm, options),
                    Catch::Contains("root 1 is not a rank of rank 0 of 1 (local)"));
}

TEST_CASE("data_parallel averages the bf16 gradients that an amp program's updates read in f32",
          "[data_parallel]") {
  GuardedPrograms g;
  build_mlp(g, /*amp=*/true);
  const auto before = parameter_gradients(g.main);
  REQUIRE(before.size() == 6);
  for (const ParameterGradient& pg : before) CHECK(shaped_data_type(pg.gradient.type()) == DataType::BFloat16);
  const DataParallelPlan plan = insert_gradient_allreduce(g.main);
  REQUIRE(plan.buckets.size() == 1);
  CHECK(plan.buckets[0].dtype == DataType::Float32);
  CHECK(plan.buckets[0].bytes == (8 * 16 + 16 + 16 * 16 + 16 + 16 * 3 + 3) * 4);
  for (const ParameterGradient& pg : plan.buckets[0].gradients) CHECK_FALSE(pg.parameter.empty());
  // Every update reads an f32 average.
  for (Operation* op : g.main.block())
    if (op_role(op) == OpRole::Optimize && op->isa<Adam_Op>()) {
      CHECK(op->operand_source(kGradOperand).defining_op() == plan.buckets[0].allreduce);
      CHECK(shaped_data_type(op->operand_source(kGradOperand).type()) == DataType::Float32);
    }
}

TEST_CASE("data-parallel training over one local rank matches plain training, f32 and under amp",
          "[data_parallel]") {
  const bool amp = GENERATE(false, true);
  INFO((amp ? "amp O1 bf16" : "f32"));
  GuardedPrograms plain, parallel;
  Value plain_loss, parallel_loss;
  {
    ProgramGuard guard(plain.main, plain.startup);
    plain_loss = build_mlp(plain, amp);
  }
  {
    UniqueNameGuard names;  // the same parameter names
    ProgramGuard guard(parallel.main, parallel.startup);
    parallel_loss = build_mlp(parallel, amp);
  }
  Scope plain_scope, parallel_scope;  // outlive the executors that ran in them
  ExecutionOptions options;
  options.num_threads = 1;
  Executor plain_exe(Place::cpu(), options);
  options.communicator = Communicator::single_process();
  data_parallel(parallel.main, parallel.startup, *options.communicator);
  Executor parallel_exe(Place::cpu(), options);
  plain_exe.run(plain.startup, {}, {}, plain_scope);
  parallel_exe.run(parallel.startup, {}, {}, parallel_scope);
  for (const auto& [name, p] : plain.main.parameters())  // the same initial values
    parallel_scope.var(name).get_mutable<Tensor>() = plain_scope.find_var(name)->get<Tensor>().clone();
  for (int step = 0; step < 5; ++step) {
    std::vector<float> xs(4 * 8);
    for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>((i * 7 + step) % 5) - 2.f;
    const FeedMap feed{{"x", f32({4, 8}, xs)}, {"label", Tensor::from_vector<std::int64_t>({4}, {0, 1, 2, 1})}};
    const float a = plain_exe.run(plain.main, feed, {plain_loss}, plain_scope)[0].to_vector<float>()[0];
    const float b = parallel_exe.run(parallel.main, feed, {parallel_loss}, parallel_scope)[0].to_vector<float>()[0];
    CHECK(a == b);
  }
}

TEST_CASE("the data_parallel pass can be named in a pipeline", "[data_parallel]") {
  CHECK(PassRegistry::instance().contains("data_parallel"));
  GuardedPrograms g;
  build_mlp(g);
  auto pass = PassRegistry::instance().create("data_parallel");
  PassContext ctx;
  pass->run(g.main, ctx);
  CHECK(count_top_ops(g.main, "kiln.allreduce") == 1);
}

TEST_CASE("data-parallel training over a one-rank NCCL communicator matches plain training on CUDA",
          "[cuda][nccl][data_parallel]") {
  if (cuda_device_count() == 0 || !Communicator::built_with_nccl()) {
    WARN("needs a CUDA device and NCCL: skipped");
    return;
  }
  GuardedPrograms plain, parallel;
  Value plain_loss, parallel_loss;
  {
    ProgramGuard guard(plain.main, plain.startup);
    plain_loss = build_mlp(plain);
  }
  {
    UniqueNameGuard names;
    ProgramGuard guard(parallel.main, parallel.startup);
    parallel_loss = build_mlp(parallel);
  }
  Scope plain_scope, parallel_scope;
  ExecutionOptions options;
  options.num_threads = 1;
  Executor plain_exe(Place::cuda(0), options);
  options.communicator = NcclCommunicator::create(*Communicator::single_process(), 0);
  data_parallel(parallel.main, parallel.startup, *options.communicator);
  Executor parallel_exe(Place::cuda(0), options);
  plain_exe.run(plain.startup, {}, {}, plain_scope);
  parallel_exe.run(parallel.startup, {}, {}, parallel_scope);
  for (const auto& [name, p] : plain.main.parameters()) {
    const Tensor& t = plain_scope.find_var(name)->get<Tensor>();
    parallel_scope.var(name).get_mutable<Tensor>() = copy_to_place(copy_to_place(t, Place::cpu()), t.place());
  }
  for (int step = 0; step < 5; ++step) {
    std::vector<float> xs(4 * 8);
    for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>((i * 7 + step) % 5) - 2.f;
    const FeedMap feed{{"x", f32({4, 8}, xs)}, {"label", Tensor::from_vector<std::int64_t>({4}, {0, 1, 2, 1})}};
    const Tensor a = copy_to_place(plain_exe.run(plain.main, feed, {plain_loss}, plain_scope)[0], Place::cpu());
    const Tensor b =
        copy_to_place(parallel_exe.run(parallel.main, feed, {parallel_loss}, parallel_scope)[0], Place::cpu());
    CHECK(b.to_vector<float>()[0] == Approx(a.to_vector<float>()[0]).epsilon(1e-6));
  }
}

// PlanBuilder: what pre-analysis refuses, and that a refused program leaves
// the caller's scope tree as it found it.
#include "exec/exec_test_util.h"
#include "kiln/runtime/cuda_context.h"

using namespace kiln;
using namespace kiln_exec_test;

TEST_CASE("50 runs of a program whose kernel is missing leave no kid scope behind", "[exec][plan]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{4}, DataType::Int8);
  Value r = b.create<ReluOp>(x.result()).result();
  Executor exe(Place::cpu(), {.num_threads = 1});
  Tensor feed = Tensor::empty(Dims({4}), DataType::Int8);
  for (int k = 0; k < 50; ++k)
    KILN_CHECK_ERROR(exe.run(p, {{"x", feed}}, {r}), Unimplemented, {"op #1 'kiln.relu'"});
  CHECK(exe.scope().kid_count() == 0);
  CHECK(exe.scope().local_var_count() == 0);
}

TEST_CASE("a program reading a parameter the scope lacks leaves the scope tree as it was", "[exec][plan]") {
  // set_parameter of `b` comes first: its variable must not be created
  // either when the build fails on `a`.
  Program p;
  Builder b(p);
  auto one = b.create<FullOp>(std::vector<std::int64_t>{2}, 1.0);
  b.create<SetParameterOp>(one.result(), "b");
  auto a = b.create<ParameterOp>("a", TensorType::get(DataType::Float32, {2}));
  Value r = b.create<ReluOp>(a.result()).result();
  Scope scope;
  for (int k = 0; k < 50; ++k)
    KILN_CHECK_ERROR(InterpreterCore(p, scope, {}, {r}), NotFound, {"parameter 'a' (expected tensor<2xf32>) has no value in the scope"});
  CHECK(scope.kid_count() == 0);
  CHECK(scope.local_var_count() == 0);
}

TEST_CASE("a place without kernels or without a device is an error, not a silent run on the CPU",
          "[exec][plan]") {
  if (!built_with_cuda())
    KILN_CHECK_ERROR(Executor(Place::cuda()), Unimplemented, {"place cuda:0 has no kernels"});
  else
    KILN_CHECK_ERROR(Executor(Place::cuda(63)), InvalidArgument, {"cuda:63", "no such CUDA device"});
}

TEST_CASE("a plan is immutable and names the caller's values by slot", "[exec][plan]") {
  Program p;
  Builder b(p);
  auto x = b.create<FullOp>(std::vector<std::int64_t>{2}, 1.0);
  auto r = b.create<ReluOp>(x.result());
  Scope scope;
  InterpreterCore core(p, scope, {}, {r.result()}, {.passes = ""});  // fold would make it one constant
  const ExecutionPlan& plan = core.plan();
  static_assert(std::is_const_v<std::remove_reference_t<decltype(core.plan())>>);
  CHECK(plan.size() == 2);  // full, relu: fetches read their slot after the run
  REQUIRE(plan.fetches.size() == 1);
  CHECK(plan.fetches[0].slot == core.slot_of(r.result()));
  CHECK_FALSE(plan.fetches[0].deep);
  CHECK(core.slot_of(r.result()) == plan.instructions[1].writes[0]);
  CHECK(plan.slots[core.slot_of(x.result())].kind == SlotKind::Temporary);
  CHECK_FALSE(plan.has_parallelism);
}

TEST_CASE("a plan marks the outputs nothing reads or fetches, so a kernel may skip them",
          "[exec][plan]") {
  Program p;
  Builder b(p);
  auto x = b.create<FullOp>(std::vector<std::int64_t>{2, 3}, 1.0);
  auto parts = b.create<SplitOp>(x.result(), std::int64_t{3}, std::int64_t{1}).operation();
  b.create<ReluOp>(parts->result(0));  // reads part 0; parts 1 and 2 go unread
  Scope scope;
  SECTION("unread and unfetched: marked") {
    InterpreterCore core(p, scope, {}, {}, {.passes = ""});  // dce would drop the split
    CHECK(core.plan().instructions[1].unused_outputs == 0b110);
  }
  SECTION("fetched by value: not marked") {
    InterpreterCore core(p, scope, {}, {parts->result(2)}, {.passes = ""});
    CHECK(core.plan().instructions[1].unused_outputs == 0b010);
  }
}

// Pre-analysis of a program placed on a CUDA device (seed 001's
// data-transfer step and stream analysis): which ops run on the device and
// which on the CPU, the copies between them and their streams, the
// successor kinds, and stream-safe GC records. Plans are built without
// running, so these run on a machine without a GPU whenever kiln was built
// with CUDA; without CUDA they skip.
#include <algorithm>
#include <string>
#include <vector>

#include "exec/exec_test_util.h"
#include "kiln/exec/plan_builder.h"
#include "kiln/runtime/cuda_context.h"

using namespace kiln;
using namespace kiln_exec_test;

namespace {

bool have_cuda_build() {
  if (built_with_cuda()) return true;
  WARN("kiln was built without CUDA: the device plan checks are skipped");
  return false;
}

std::shared_ptr<const ExecutionPlan> device_plan(const Program& p, std::vector<std::string> feeds,
                                                 const std::vector<FetchTarget>& fetches) {
  ExecutionOptions o;
  o.place = Place::cuda(0);
  return PlanBuilder(p, std::move(feeds), fetches, o).build();
}

// "kiln.relu@cuda:0" per instruction, in plan order.
std::vector<std::string> placed(const ExecutionPlan& plan) {
  std::vector<std::string> out;
  for (const PlanInstruction& in : plan.instructions) {
    std::string s = in.name + "@" + in.place.to_string();
    if (in.lane.is_stream) s += " on " + plan.stream_names[static_cast<std::size_t>(in.lane.stream)];
    out.push_back(s);
  }
  return out;
}

std::uint32_t index_of(const ExecutionPlan& plan, const std::string& name, int nth = 0) {
  for (std::uint32_t i = 0; i < plan.size(); ++i)
    if (plan.instructions[i].name == name && nth-- == 0) return i;
  FAIL("no instruction " << name);
  return kNoIndex;
}

SuccessorKind edge(const ExecutionPlan& plan, std::uint32_t from, std::uint32_t to) {
  auto s = plan.successors(from);
  REQUIRE(std::find(s.begin(), s.end(), to) != s.end());
  return successor_kind(plan.instructions[from].lane, plan.instructions[to].lane);
}

}  // namespace

TEST_CASE("a device program copies its feed in on the h2d stream, runs on the compute stream and "
          "copies its fetch out on the d2h stream",
          "[exec][device]") {
  if (!have_cuda_build()) return;
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{4});
  auto r = b.create<ReluOp>(x.result());
  auto e = b.create<ExpOp>(r.result());
  auto plan = device_plan(p, {"x"}, {e.result()});
  CHECK(placed(*plan) == std::vector<std::string>{
                             "memcpy cpu->cuda:0@cuda:0 on cuda:0/h2d",
                             "kiln.relu@cuda:0 on cuda:0",
                             "kiln.exp@cuda:0 on cuda:0",
                             "memcpy cuda:0->cpu@cpu on cuda:0/d2h",
                         });
  const std::uint32_t h2d = 0, relu = 1, exp = 2, d2h = 3;
  CHECK(edge(*plan, h2d, relu) == SuccessorKind::Event);
  CHECK(edge(*plan, relu, exp) == SuccessorKind::Direct);
  CHECK(edge(*plan, exp, d2h) == SuccessorKind::Event);
  CHECK(plan->records_event[h2d] == 1);
  CHECK(plan->records_event[relu] == 0);
  // The fetch reads the host copy, made in page-locked memory.
  REQUIRE(plan->fetches.size() == 1);
  CHECK(plan->slots[plan->fetches[0].slot].place == Place::cpu());
  CHECK(plan->instructions[d2h].pinned);
  for (Place sp : plan->stream_places) CHECK(sp == Place::cuda(0));
}

TEST_CASE("an op the device has no kernel for runs on the CPU between copies, and the plan warns "
          "once naming it",
          "[exec][device]") {
  if (!have_cuda_build()) return;
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{4});
  auto r = b.create<ReluOp>(x.result());
  auto id = b.create<IdentityOp>(r.result());   // test-only: CPU kernel alone
  auto id2 = b.create<IdentityOp>(id.result());
  auto e = b.create<ExpOp>(id2.result());
  kiln_test::CapturedWarnings warnings;
  auto plan = device_plan(p, {"x"}, {e.result()});
  CHECK(placed(*plan) == std::vector<std::string>{
                             "memcpy cpu->cuda:0@cuda:0 on cuda:0/h2d",
                             "kiln.relu@cuda:0 on cuda:0",
                             "memcpy cuda:0->cpu@cpu on cuda:0/d2h",
                             "exec_test.identity@cpu",
                             "exec_test.identity@cpu",
                             "memcpy cpu->cuda:0@cuda:0 on cuda:0/h2d",
                             "kiln.exp@cuda:0 on cuda:0",
                             "memcpy cuda:0->cpu@cpu on cuda:0/d2h",
                         });
  // The host waits for the device-to-host copy (sync); a launch after host
  // work needs nothing (direct).
  CHECK(edge(*plan, 2, 3) == SuccessorKind::Sync);
  CHECK(edge(*plan, 3, 4) == SuccessorKind::Direct);
  CHECK(edge(*plan, 4, 5) == SuccessorKind::Direct);
  CHECK(edge(*plan, 5, 6) == SuccessorKind::Event);
  REQUIRE(warnings.seen.size() == 1);
  CHECK_THAT(warnings.seen[0], Catch::Contains("cuda:0") && Catch::Contains("exec_test.identity") &&
                                   Catch::Contains("on the CPU"));
}

TEST_CASE("a value several device ops read is copied to the device once", "[exec][device]") {
  if (!have_cuda_build()) return;
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{4});
  auto r = b.create<ReluOp>(x.result());
  auto e = b.create<ExpOp>(x.result());
  auto s = b.create<AddOp>(r.result(), e.result());
  auto plan = device_plan(p, {"x"}, {s.result(), x.result()});
  int h2d = 0;
  for (const PlanInstruction& in : plan->instructions) h2d += in.name == "memcpy cpu->cuda:0";
  CHECK(h2d == 1);
  // Fetching the feed itself needs no copy: it is a host tensor.
  CHECK(plan->slots[plan->fetches[1].slot].kind == SlotKind::Feed);
}

TEST_CASE("device buffers a copy stream touched are recorded on it and on the compute stream before GC frees them",
          "[exec][device]") {
  if (!have_cuda_build()) return;
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{1000});
  auto r = b.create<ReluOp>(x.result());
  auto e = b.create<ExpOp>(r.result());
  auto plan = device_plan(p, {"x"}, {e.result()});
  const PlanInstruction& h2d = plan->instructions[index_of(*plan, "memcpy cpu->cuda:0")];
  const PlanInstruction& d2h = plan->instructions[index_of(*plan, "memcpy cuda:0->cpu")];
  auto records = [&](std::uint32_t s) {
    std::vector<std::string> names;
    for (std::uint32_t k = plan->record_off[s]; k < plan->record_off[s + 1]; ++k)
      names.push_back(plan->stream_names[plan->record[k]]);
    return names;
  };
  REQUIRE(!plan->record_off.empty());
  // The h2d copy's device buffer: written on the h2d stream, freed after
  // relu. Recorded on the compute stream too: the block goes back to the
  // h2d stream's cache, and the next transfer must not take it while
  // relu's kernel may still be queued on the compute stream.
  CHECK(records(h2d.writes[0]) == std::vector<std::string>{"cuda:0/h2d", "cuda:0"});
  // relu's output is touched by the compute stream alone: nothing to record.
  CHECK(records(plan->instructions[index_of(*plan, "kiln.relu")].writes[0]).empty());
  // exp's output is read by the d2h copy.
  CHECK(records(d2h.reads[0]) == std::vector<std::string>{"cuda:0", "cuda:0/d2h"});
}

TEST_CASE("a device program's set_parameter writes the parameter on the device", "[exec][device]") {
  if (!have_cuda_build()) return;
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{4});
  auto r = b.create<ReluOp>(x.result());
  b.create<SetParameterOp>(r.result(), "w");
  auto plan = device_plan(p, {"x"}, {});
  const PlanInstruction& set = plan->instructions[index_of(*plan, "builtin.set_parameter")];
  CHECK(set.place == Place::cuda(0));
  CHECK(plan->slots[set.writes[0]].kind == SlotKind::Parameter);
  CHECK(plan->slots[set.writes[0]].place == Place::cuda(0));
}

TEST_CASE("a kiln.fetch op in a device program takes its value on the host", "[exec][device]") {
  if (!have_cuda_build()) return;
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{4});
  auto r = b.create<ReluOp>(x.result());
  b.create<FetchOp>(r.result(), "out");
  auto plan = device_plan(p, {"x"}, {"out"});
  const std::uint32_t f = index_of(*plan, "kiln.fetch");
  CHECK(plan->instructions[f].place == Place::cpu());
  CHECK(!plan->instructions[f].lane.is_stream);
  CHECK(plan->slots[plan->instructions[f].reads[0]].place == Place::cpu());
}

TEST_CASE("control flow in a device program is refused with an error naming the op and place",
          "[exec][device]") {
  if (!have_cuda_build()) return;
  Program p;
  Builder b(p);
  auto c = b.create<DataOp>("c", std::vector<std::int64_t>{}, DataType::Bool);
  auto op = b.create<IfOp>(c.result(), std::vector<Value>{}, std::vector<Type>{});
  for (std::uint32_t r = 0; r < 2; ++r) {
    Builder in(op->region(r).emplace_block());
    in.create<YieldOp>(std::vector<Value>{});
  }
  KILN_CHECK_ERROR(device_plan(p, {"c"}, {}), Unimplemented,
                   {"'kiln.if'", "cuda:0", "control flow runs on the CPU"});
}

TEST_CASE("a feed on another place than its data op's is an error naming the feed and both places",
          "[exec][device]") {
  if (!have_cuda_build()) return;
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{2}, DataType::Float32, Place::cuda(0));
  auto r = b.create<ReluOp>(x.result());
  auto plan = device_plan(p, {"x"}, {r.result()});
  // The data op's own place: no copy in.
  CHECK(placed(*plan).front() == "kiln.relu@cuda:0 on cuda:0");
  Tensor host = Tensor::from_vector<float>(Dims({2}), {1.f, 2.f});
  Tensor* feeds[] = {&host};
  KILN_CHECK_ERROR(plan->check_feeds(feeds), InvalidArgument, {"feed 'x'", "on cpu", "cuda:0"});
}

TEST_CASE("an interpreter core on a cuda place this process lacks is an error naming the place",
          "[exec][device]") {
  Program p;
  Builder b(p);
  auto x = b.create<FullOp>(std::vector<std::int64_t>{2}, 1.0);
  b.create<ReluOp>(x.result());
  Scope scope;
  ExecutionOptions o;
  o.place = Place::cuda(61);
  if (built_with_cuda())
    KILN_CHECK_ERROR(InterpreterCore(p, scope, {}, {}, o), InvalidArgument,
                     {"cuda:61", "no such CUDA device"});
  else
    KILN_CHECK_ERROR(InterpreterCore(p, scope, {}, {}, o), Unimplemented, {"cuda:61", "no kernels"});
  CHECK(scope.kid_count() == 0);
}

TEST_CASE("view ops (reshape, flatten, squeeze, unsqueeze) stay on the device: they change dims "
          "only",
          "[exec][device]") {
  if (!have_cuda_build()) return;
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{2, 3});
  auto r = b.create<ReluOp>(x.result());
  auto v = b.create<ReshapeOp>(r.result(), std::vector<std::int64_t>{3, 2});
  auto u = b.create<UnsqueezeOp>(v.result(), std::vector<std::int64_t>{0});
  auto s = b.create<SqueezeOp>(u.result(), std::vector<std::int64_t>{0});
  auto f = b.create<FlattenOp>(s.result());
  auto e = b.create<ExpOp>(f.result());
  auto plan = device_plan(p, {"x"}, {e.result()});
  CHECK(placed(*plan) == std::vector<std::string>{
                             "memcpy cpu->cuda:0@cuda:0 on cuda:0/h2d",
                             "kiln.relu@cuda:0 on cuda:0",
                             "kiln.reshape@cuda:0 on cuda:0",
                             "kiln.unsqueeze@cuda:0 on cuda:0",
                             "kiln.squeeze@cuda:0 on cuda:0",
                             "kiln.flatten@cuda:0 on cuda:0",
                             "kiln.exp@cuda:0 on cuda:0",
                             "memcpy cuda:0->cpu@cpu on cuda:0/d2h",
                         });
}

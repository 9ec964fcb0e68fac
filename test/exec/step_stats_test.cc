// Step stats (kiln/exec/step_stats.h): collected only by runs that ask,
// every instruction once with its times, thread, stream and the bytes its
// outputs allocated; the summary table and the Chrome trace made from them;
// a failed run's partial stats.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "exec/exec_test_util.h"
#include "kiln/dialect/control_flow_ops.h"
#include "kiln/exec/step_stats.h"
#include "kiln/runtime/cuda_context.h"

using namespace kiln;
using namespace kiln_exec_test;

namespace {

using Dims0 = std::vector<std::int64_t>;

// x [4, 8] fed; e = exp(x) (128 B), i = identity(e) (a copy: 128 B),
// relu_(i) in place (0 B), r = reshape(i) (a view: 0 B), s = sum(r) (4 B).
struct Known {
  Program p;
  Value out;
  Known() {
    Builder b(p);
    Value x = b.create<DataOp>("x", Dims0{4, 8}).result();
    Value e = b.create<ExpOp>(x).result();
    Value i = b.create<IdentityOp>(e).result();
    Value r = b.create<Relu_Op>(i).result();
    Value v = b.create<ReshapeOp>(r, Dims0{8, 4}).result();
    out = b.create<SumOp>(v).result();
  }
};


std::size_t x_events(const std::string& trace) {
  const auto j = nlohmann::json::parse(trace);
  std::size_t n = 0;
  for (const auto& e : j["traceEvents"]) n += e.value("ph", "") == "X";
  return n;
}

const NodeStats* node_named(const StepStats& s, const std::string& op_name) {
  for (const NodeStats& n : s.nodes)
    if (n.op_name == op_name) return &n;
  return nullptr;
}

}  // namespace

TEST_CASE("step stats are collected only by the runs that ask for them", "[exec][stats]") {
  Program p;
  Value out = diamond_chain(p);
  ExecutionOptions o;
  o.num_threads = 1;
  Executor exe(Place::cpu(), o);
  const FeedMap feed{{"x", filled_f32({4}, 1.f)}};
  exe.run(p, feed, {out});
  InterpreterCore* core = exe.last_core();
  REQUIRE(core);
  CHECK(x_events(core->chrome_trace()) == 0);  // a plain run records nothing

  StepStats stats;
  exe.run(p, feed, {out}, stats);
  CHECK(stats.nodes.size() == core->num_instructions());
  CHECK(stats.step_id == 2);
  const std::string after_stats = core->chrome_trace();

  // A later plain run leaves the records of the asked run as they were.
  exe.run(p, feed, {out});
  CHECK(core->chrome_trace() == after_stats);

  // Asking again fills the same value afresh (cleared first), for the new step.
  exe.run(p, feed, {out}, stats);
  CHECK(stats.nodes.size() == core->num_instructions());
  CHECK(stats.step_id == 4);
  CHECK_FALSE(stats.failed);
}

TEST_CASE("every instruction appears once in a run's step stats, ending after it starts", "[exec][stats]") {
  Program p;
  Value out = diamond_chain(p);
  for (unsigned threads : {1u, 2u}) {
    ExecutionOptions o;
    o.num_threads = threads;
    o.thread_plan = threads == 1 ? ThreadPlan::Sequential : ThreadPlan::Graph;
    Executor exe(Place::cpu(), o);
    for (int run = 0; run < 3; ++run) {
      StepStats stats;
      auto got = exe.run(p, {{"x", filled_f32({4}, 2.f)}}, {out}, stats);
      REQUIRE(got.size() == 1);
      InterpreterCore* core = exe.last_core();
      REQUIRE(core);
      std::set<std::uint32_t> seen;
      for (const NodeStats& n : stats.nodes) {
        CHECK(seen.insert(n.instruction).second);
        CHECK(n.start_ns >= 0);
        CHECK(n.end_ns >= n.start_ns);
        CHECK(n.end_ns <= stats.wall_ns);
        CHECK(n.op_name == core->instruction(n.instruction).op_name);
        CHECK_FALSE(n.label.empty());
        CHECK(n.stream.empty());  // host instructions
      }
      CHECK(seen.size() == core->num_instructions());
      CHECK(stats.wall_ns > 0);
      CHECK(stats.start_ns > 0);
    }
  }
}

TEST_CASE("the bytes allocated by each instruction are its new outputs' sizes", "[exec][stats]") {
  Known k;
  ExecutionOptions o;
  o.num_threads = 1;
  Executor exe(Place::cpu(), o);
  StepStats stats;
  exe.run(k.p, {{"x", filled_f32({4, 8}, 0.5f)}}, {k.out}, stats);
  const NodeStats* exp = node_named(stats, "kiln.exp");
  const NodeStats* copy = node_named(stats, "exec_test.identity");
  const NodeStats* relu = node_named(stats, "kiln.relu_");
  const NodeStats* view = node_named(stats, "kiln.reshape");
  const NodeStats* sum = node_named(stats, "kiln.sum");
  REQUIRE(exp);
  REQUIRE(copy);
  REQUIRE(relu);
  REQUIRE(view);
  REQUIRE(sum);
  CHECK(exp->bytes_allocated == 4 * 8 * 4);
  CHECK(copy->bytes_allocated == 4 * 8 * 4);
  CHECK(relu->bytes_allocated == 0);  // in place
  CHECK(view->bytes_allocated == 0);  // shares its input's buffer
  CHECK(sum->bytes_allocated == 4);
  std::int64_t total = 0;
  for (const NodeStats& n : stats.nodes) total += n.bytes_allocated;
  CHECK(stats.total_bytes_allocated() == total);
  CHECK(total >= 4 * 8 * 4 * 2 + 4);
}

TEST_CASE("the summary table sorts op kinds by total time and its totals add up", "[exec][stats]") {
  SECTION("on stats made by hand") {
    StepStats s;
    s.step_id = 7;
    s.wall_ns = 1000;
    auto add = [&](std::string op, std::int64_t start, std::int64_t end, std::int64_t bytes) {
      NodeStats n;
      n.instruction = static_cast<std::uint32_t>(s.nodes.size());
      n.op_name = std::move(op);
      n.label = n.op_name + "#" + std::to_string(n.instruction);
      n.start_ns = start;
      n.end_ns = end;
      n.bytes_allocated = bytes;
      s.nodes.push_back(n);
    };
    add("kiln.add", 0, 100, 16);
    add("kiln.matmul", 100, 400, 64);
    add("kiln.add", 400, 450, 16);
    add("kiln.relu", 450, 650, 0);
    add("kiln.matmul", 650, 900, 64);
    const std::vector<OpSummary> rows = summarize(s);
    REQUIRE(rows.size() == 3);
    CHECK(rows[0].op_name == "kiln.matmul");
    CHECK(rows[0].calls == 2);
    CHECK(rows[0].total_ns == 550);
    CHECK(rows[0].min_ns == 250);
    CHECK(rows[0].max_ns == 300);
    CHECK(rows[0].mean_ns() == Approx(275.0));
    CHECK(rows[0].bytes_allocated == 128);
    CHECK(rows[1].op_name == "kiln.relu");
    CHECK(rows[2].op_name == "kiln.add");
    CHECK(rows[2].total_ns == 150);
    const std::string table = summary_table(s);
    // Header, rule, three rows in that order, rule, totals, step line.
    const auto matmul = table.find("kiln.matmul"), relu = table.find("kiln.relu"), add_row = table.find("kiln.add");
    REQUIRE(matmul != std::string::npos);
    CHECK(matmul < relu);
    CHECK(relu < add_row);
    CHECK_THAT(table, Catch::Contains("55.0%"));  // matmul: 550 of the step's 1000 ns
    CHECK_THAT(table, Catch::Contains("90.0%"));  // all ops: 900 of 1000
    CHECK_THAT(table, Catch::Contains("Total"));
    CHECK_THAT(table, Catch::Contains("Step 7"));
  }
  SECTION("on a run's stats") {
    Program p;
    Builder b(p);
    Value x = b.create<DataOp>("x", Dims0{4}).result();
    Value v = x;
    for (int i = 0; i < 3; ++i) v = b.create<SlowOp>(v, 2000).result();  // 2 ms each
    v = b.create<AddOp>(v, x).result();
    ExecutionOptions o;
    o.num_threads = 1;
    Executor exe(Place::cpu(), o);
    StepStats stats;
    exe.run(p, {{"x", filled_f32({4}, 1.f)}}, {v}, stats);
    const std::vector<OpSummary> rows = summarize(stats);
    REQUIRE(!rows.empty());
    CHECK(rows[0].op_name == "exec_test.slow");
    CHECK(rows[0].calls == 3);
    std::int64_t rows_total = 0, nodes_total = 0;
    std::uint64_t calls = 0;
    for (std::size_t k = 0; k < rows.size(); ++k) {
      if (k) CHECK(rows[k - 1].total_ns >= rows[k].total_ns);
      rows_total += rows[k].total_ns;
      calls += rows[k].calls;
    }
    for (const NodeStats& n : stats.nodes) nodes_total += n.duration_ns();
    CHECK(rows_total == nodes_total);
    CHECK(calls == stats.nodes.size());
    CHECK(rows_total <= stats.wall_ns);
    CHECK_THAT(summary_table(stats), Catch::Contains("exec_test.slow"));
  }
}

TEST_CASE("a run's step stats export as a Chrome trace with one event per node", "[exec][stats]") {
  Program p;
  Value out = diamond_chain(p);
  ExecutionOptions o;
  o.num_threads = 2;
  o.thread_plan = ThreadPlan::Graph;
  Executor exe(Place::cpu(), o);
  StepStats stats;
  exe.run(p, {{"x", filled_f32({4}, 1.f)}}, {out}, stats);
  const auto j = nlohmann::json::parse(to_chrome_trace(stats));
  REQUIRE(j["traceEvents"].is_array());
  std::set<std::uint32_t> instructions;
  for (const auto& e : j["traceEvents"]) {
    if (e.value("ph", "") != "X") continue;
    CHECK(e["name"].is_string());
    CHECK(e["dur"].get<double>() >= 0.0);
    CHECK(e["ts"].get<double>() >= 0.0);
    CHECK(e["args"]["label"].is_string());
    CHECK(e["args"]["bytes_allocated"].get<std::int64_t>() >= 0);
    instructions.insert(e["args"]["instruction"].get<std::uint32_t>());
  }
  CHECK(x_events(to_chrome_trace(stats)) == stats.nodes.size());
  CHECK(instructions.size() == stats.nodes.size());
  CHECK(j["otherData"]["step_id"].get<std::uint64_t>() == stats.step_id);
}

TEST_CASE("step stats of a host_stream run name the stream of each instruction on it", "[exec][stats]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", Dims0{4}).result();
  Value y = b.create<AddOp>(b.create<FullOp>(Dims0{4}, 1.0).result(), x).result();
  ExecutionOptions o;
  o.num_threads = 1;
  o.place = Place::host_stream(0);
  Scope scope;
  InterpreterCore core(p, scope, {"x"}, {y}, o);
  StepStats stats;
  std::vector<Tensor> feeds{filled_f32({4}, 1.f)};
  auto got = core.run(feeds, stats);
  REQUIRE(got.size() == 1);
  CHECK(stats.nodes.size() == core.num_instructions());
  std::size_t on_stream = 0;
  for (const NodeStats& n : stats.nodes) {
    CHECK(n.end_ns >= n.start_ns);
    if (core.instruction(n.instruction).lane.is_stream) {
      ++on_stream;
      CHECK(n.stream == "host_stream:0");
    }
  }
  CHECK(on_stream > 0);
  // The stream's row is named in the trace.
  CHECK_THAT(to_chrome_trace(stats), Catch::Contains("stream host_stream:0"));
}

TEST_CASE("a control-flow op's region runs count as its one node", "[exec][stats]") {
  // i = 0; while (i < n) i = i + 1
  Program p;
  Builder b(p);
  Value n = b.create<DataOp>("n", Dims0{}, DataType::Int64).result();
  Value i0 = b.create<FullOp>(Dims0{}, 0.0, DataType::Int64).result();
  Value c0 = b.create<LessThanOp>(i0, n).result();
  auto w = b.create<WhileOp>(c0, std::vector<Value>{i0}, std::vector<Value>{n}, std::int64_t{-1});
  Block& body = w->region(0).emplace_block();
  Value i = body.add_argument(i0.type());
  Value cap = body.add_argument(n.type());
  Builder bb(body);
  Value i1 = bb.create<AddOp>(i, bb.create<FullOp>(Dims0{}, 1.0, DataType::Int64).result()).result();
  bb.create<YieldOp>(std::vector<Value>{bb.create<LessThanOp>(i1, cap).result(), i1});
  ExecutionOptions o;
  o.num_threads = 1;
  Executor exe(Place::cpu(), o);
  StepStats stats;
  auto got = exe.run(p, {{"n", Tensor::from_vector<std::int64_t>(Dims(), {50})}}, {w->result(0)}, stats);
  REQUIRE(got.size() == 1);
  CHECK(got[0].data<std::int64_t>()[0] == 50);
  CHECK(stats.nodes.size() == exe.last_core()->num_instructions());
  const NodeStats* loop = node_named(stats, "kiln.while");
  REQUIRE(loop);
  CHECK(loop->end_ns > loop->start_ns);
}

TEST_CASE("a failed run's step stats hold what ran before the failure, and the error", "[exec][stats]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", Dims0{4}).result();
  Value a = b.create<ExpOp>(x).result();
  Value t = b.create<ThrowOp>(a).result();
  Value out = b.create<AddOp>(t, x).result();
  ExecutionOptions o;
  o.num_threads = 1;
  o.thread_plan = ThreadPlan::Sequential;
  Executor exe(Place::cpu(), o);
  const FeedMap feed{{"x", filled_f32({4}, 1.f)}};
  StepStats stats;
  throw_enabled() = true;
  CHECK_THROWS_AS(exe.run(p, feed, {out}, stats), Error);
  throw_enabled() = false;
  CHECK(stats.failed);
  CHECK_THAT(stats.error, Catch::Contains("exec_test.throw"));
  CHECK(node_named(stats, "kiln.exp"));
  CHECK_FALSE(node_named(stats, "exec_test.throw"));  // it did not finish
  CHECK_FALSE(node_named(stats, "kiln.add"));         // never started
  CHECK(stats.nodes.size() < exe.last_core()->num_instructions());
  CHECK_THAT(summary_table(stats), Catch::Contains("failed"));

  // The executor stays usable and the next asked run is whole.
  exe.run(p, feed, {out}, stats);
  CHECK_FALSE(stats.failed);
  CHECK(stats.error.empty());
  CHECK(stats.nodes.size() == exe.last_core()->num_instructions());
}

TEST_CASE("a run that asks for step stats with a bad feed fails before it starts, saying why",
          "[exec][stats]") {
  Program p;
  Value out = diamond_chain(p);
  Executor exe;
  StepStats stats;
  stats.nodes.resize(3);  // stale content is cleared
  CHECK_THROWS_WITH(exe.run(p, {{"x", filled_f32({5}, 1.f)}}, {out}, stats), Catch::Contains("x"));
  CHECK(stats.failed);
  CHECK_FALSE(stats.error.empty());
  CHECK(stats.nodes.empty());
  CHECK_THROWS_AS(exe.run(p, {}, {out}, stats), Error);  // missing feed
  CHECK(stats.failed);
  CHECK(stats.nodes.empty());
}

TEST_CASE("step stats on a CUDA device have each kernel's device times and stream", "[cuda][stats]") {
  if (cuda_device_count() == 0) {
    WARN("no CUDA device: the [cuda] step stats check is skipped");
    return;
  }
  constexpr std::int64_t n = 1 << 20;
  Program p;
  Builder b(p);
  Value a = b.create<DataOp>("a", Dims0{n}).result();
  Value v = a;
  for (int i = 0; i < 8; ++i) v = b.create<ReluOp>(b.create<ExpOp>(v).result()).result();
  Value out = b.create<AddOp>(v, a).result();
  ExecutionOptions o;
  o.num_threads = 1;
  o.place = Place::cuda(0);
  Scope scope;
  InterpreterCore core(p, scope, {"a"}, {out}, o);
  std::vector<Tensor> feeds{Tensor::zeros(Dims({n}), DataType::Float32)};
  core.run(feeds);  // a plain run first: no timing events are made for it
  StepStats stats;
  for (int run = 0; run < 2; ++run) {
    auto got = core.run(feeds, stats);
    REQUIRE(got.size() == 1);
    CHECK(stats.nodes.size() == core.num_instructions());
    std::size_t on_compute = 0;
    for (const NodeStats& node : stats.nodes) {
      CHECK(node.end_ns >= node.start_ns);
      if (node.stream == "cuda:0") {
        ++on_compute;
        CHECK(node.thread >= 1000000u);  // a device row
      }
      if (node.op_name == "kiln.exp") CHECK(node.bytes_allocated == n * 4);
    }
    CHECK(on_compute >= 17);
    CHECK_THAT(to_chrome_trace(stats), Catch::Contains("stream cuda:0"));
    core.run(feeds);  // plain runs between asked ones
  }
}

TEST_CASE("a CUDA graph replay's step stats have its wall time and no nodes", "[cuda][stats]") {
  if (cuda_device_count() == 0) {
    WARN("no CUDA device: the [cuda] step stats check is skipped");
    return;
  }
  Program p;
  Builder b(p);
  Value a = b.create<DataOp>("a", Dims0{1024}).result();
  Value out = b.create<ReluOp>(b.create<ExpOp>(a).result()).result();
  ExecutionOptions o;
  o.num_threads = 1;
  o.place = Place::cuda(0);
  o.cuda_graph = true;
  Scope scope;
  InterpreterCore core(p, scope, {"a"}, {out}, o);
  std::vector<Tensor> feeds{Tensor::zeros(Dims({1024}), DataType::Float32)};
  StepStats stats;
  core.run(feeds, stats);  // the first run launches every kernel
  CHECK(stats.nodes.size() == core.num_instructions());
  core.run(feeds);          // captured
  auto got = core.run(feeds, stats);  // replayed
  REQUIRE(got.size() == 1);
  CHECK(got[0].data<float>()[0] == Approx(1.0f));
  CHECK(stats.nodes.empty());
  CHECK(stats.wall_ns > 0);
  CHECK_FALSE(stats.failed);
}

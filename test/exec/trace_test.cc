// Introspection: with ExecutionOptions::profile the last core's
// chrome_trace() is valid JSON with one complete ("X") event per instruction;
// to_dot() lists every edge of the instruction DAG once.
#include <nlohmann/json.hpp>

#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "exec/exec_test_util.h"
#include "kiln/runtime/cuda_context.h"

using namespace kiln;
using namespace kiln_exec_test;

TEST_CASE("profile: the Chrome trace parses as JSON with one X event per instruction", "[exec]") {
  Program p;
  Value out = diamond_chain(p);
  for (unsigned threads : {1u, 2u}) {
    ExecutionOptions o;
    o.num_threads = threads;
    o.profile = true;
    Executor exe(Place::cpu(), o);
    for (int run = 0; run < 2; ++run) {
      exe.run(p, {{"x", filled_f32({4}, 1.f)}}, {out});
      InterpreterCore* core = exe.last_core();
      REQUIRE(core);
      auto j = nlohmann::json::parse(core->chrome_trace());
      REQUIRE(j.contains("traceEvents"));
      const auto& events = j["traceEvents"];
      REQUIRE(events.is_array());
      std::set<std::int64_t> seen;
      std::size_t x_events = 0;
      for (const auto& e : events) {
        if (e.value("ph", "") != "X") continue;
        ++x_events;
        CHECK(e["name"].is_string());
        CHECK(e["ts"].is_number());
        CHECK(e["dur"].is_number());
        CHECK(e["dur"].get<double>() >= 0.0);
        CHECK(e.contains("pid"));
        CHECK(e.contains("tid"));
        seen.insert(e["args"]["instruction"].get<std::int64_t>());
      }
      CHECK(x_events == core->num_instructions());
      CHECK(seen.size() == core->num_instructions());
    }
  }
}

TEST_CASE("to_dot lists every instruction and every edge once", "[exec]") {
  Program p;
  Value out = diamond_chain(p);
  Executor exe;
  exe.run(p, {{"x", filled_f32({4}, 1.f)}}, {out});
  InterpreterCore* core = exe.last_core();
  REQUIRE(core);
  const std::string dot = core->to_dot();
  CHECK(dot.rfind("digraph", 0) == 0);
  CHECK(dot.find('}') != std::string::npos);
  std::multiset<std::pair<std::uint32_t, std::uint32_t>> listed;
  std::set<std::uint32_t> nodes;
  std::regex edge(R"(^\s*i(\d+) -> i(\d+))"), node(R"(^\s*i(\d+) \[label)");
  std::istringstream in(dot);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_search(line, m, edge)) listed.emplace(std::stoul(m[1]), std::stoul(m[2]));
    else if (std::regex_search(line, m, node)) nodes.insert(static_cast<std::uint32_t>(std::stoul(m[1])));
  }
  std::multiset<std::pair<std::uint32_t, std::uint32_t>> want;
  for (std::uint32_t i = 0; i < core->num_instructions(); ++i) {
    CHECK(nodes.count(i) == 1);
    for (auto s : core->instruction(i).successors) want.emplace(i, s);
  }
  CHECK(listed == want);
  CHECK(!want.empty());
}

TEST_CASE("profile on a CUDA device: copies on the h2d stream overlap compute in the trace, one "
          "row per stream",
          "[cuda][trace]") {
  if (cuda_device_count() == 0) {
    WARN("no CUDA device: the [cuda] trace check is skipped");
    return;
  }
  // b is copied first; the relu chain on it runs while a's copy goes on.
  constexpr std::int64_t n = 1 << 22;
  Program p;
  Builder b(p);
  Value a = b.create<DataOp>("a", std::vector<std::int64_t>{n}).result();
  Value v = b.create<DataOp>("b", std::vector<std::int64_t>{n}).result();
  for (int i = 0; i < 20; ++i) v = b.create<ReluOp>(b.create<ExpOp>(v).result()).result();
  Value out = b.create<AddOp>(v, a).result();
  ExecutionOptions o;
  o.num_threads = 1;
  o.profile = true;
  o.place = Place::cuda(0);
  Scope scope;
  InterpreterCore core(p, scope, {"a", "b"}, {out}, o);
  std::vector<Tensor> feeds{Tensor::zeros(Dims({n}), DataType::Float32),
                            Tensor::zeros(Dims({n}), DataType::Float32)};
  core.run(feeds);
  core.run(feeds);
  const auto trace = nlohmann::json::parse(core.chrome_trace());
  std::map<std::int64_t, std::string> rows;  // tid → "stream cuda:0/h2d"
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "M") rows[e["tid"].get<std::int64_t>()] = e["args"]["name"];
  double copy_begin = -1, copy_end = -1;
  std::vector<std::pair<double, double>> compute;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const std::string row = rows[e["tid"].get<std::int64_t>()];
    const double t0 = e["ts"], t1 = t0 + e["dur"].get<double>();
    if (row == "stream cuda:0/h2d" && e["args"]["instruction"] != 0) {
      copy_begin = t0;
      copy_end = t1;
    }
    if (row == "stream cuda:0") compute.emplace_back(t0, t1);
  }
  REQUIRE(copy_end > copy_begin);
  REQUIRE(!compute.empty());
  bool overlap = false;
  for (auto [t0, t1] : compute) overlap = overlap || (t0 < copy_end && t1 > copy_begin);
  CHECK(overlap);
}

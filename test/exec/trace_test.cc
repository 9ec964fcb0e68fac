// Introspection (issue 3 §4): with ExecutionOptions::profile the last core's
// chrome_trace() is valid JSON with one complete ("X") event per instruction;
// to_dot() lists every edge of the instruction DAG once.
#include <nlohmann/json.hpp>

#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "exec/exec_test_util.h"

using namespace kiln;
using namespace kiln_exec_test;

namespace {

Value diamond_chain(Program& p) {
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{4}).result();
  Value v = b.create<FullOp>(std::vector<std::int64_t>{4}, 1.0).result();
  for (int i = 0; i < 6; ++i) {
    Value l = b.create<IdentityOp>(v).result();
    Value r = b.create<MulOp>(v, x).result();
    v = b.create<AddOp>(l, r).result();
  }
  return b.create<Relu_Op>(v).result();
}

}  // namespace

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

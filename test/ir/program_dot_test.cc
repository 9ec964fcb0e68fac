// program_to_dot: a Program as a Graphviz graph — an op per node, a value per
// edge (labelled with its type), a cluster per region, nested as the regions are.
#include "kiln/ir/program_dot.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "catch.hpp"
#include "ir_test_util.h"
#include "kiln/dialect/control_flow_ops.h"

using namespace kiln;

namespace {

using Dims0 = std::vector<std::int64_t>;
using BodyFn = std::function<std::vector<Value>(Builder&, const std::vector<Value>& args)>;

Value counter_while(Builder& b, Value n) {
  Value i0 = b.create<FullOp>(Dims0{}, 0.0, DataType::Int64).result();
  Value c0 = b.create<LessThanOp>(i0, n).result();
  auto w = b.create<WhileOp>(c0, std::vector<Value>{i0}, std::vector<Value>{n}, std::int64_t{-1});
  Block& body = w->region(0).emplace_block();
  Value i = body.add_argument(i0.type());
  Value cap = body.add_argument(n.type());
  Builder bb(body);
  Value i1 = bb.create<AddOp>(i, bb.create<FullOp>(Dims0{}, 1.0, DataType::Int64).result()).result();
  bb.create<YieldOp>(std::vector<Value>{bb.create<LessThanOp>(i1, cap).result(), i1});
  return w->result(0);
}

// x, flag, n fed; y = if flag { exp(x) after a counting loop } else { relu(x) };
// then a counting loop at the top level; out = y + x.
struct IfWhileProgram {
  Program p;
  IfWhileProgram() {
    Builder b(p);
    Value x = b.create<DataOp>("x", Dims0{4}).result();
    Value flag = b.create<DataOp>("flag", Dims0{}, DataType::Bool).result();
    Value n = b.create<DataOp>("n", Dims0{}, DataType::Int64).result();
    auto op = b.create<IfOp>(flag, std::vector<Value>{x, n}, std::vector<Type>{x.type()});
    for (std::uint32_t r = 0; r < 2; ++r) {
      Block& blk = op->region(r).emplace_block();
      Value cx = blk.add_argument(x.type());
      Value cn = blk.add_argument(n.type());
      Builder bb(blk);
      if (r == 0) {
        counter_while(bb, cn);  // a region inside a region
        bb.create<YieldOp>(std::vector<Value>{bb.create<ExpOp>(cx).result()});
      } else {
        bb.create<YieldOp>(std::vector<Value>{bb.create<ReluOp>(cx).result()});
      }
    }
    counter_while(b, n);
    b.create<AddOp>(op->result(0), x);
  }
};

std::size_t count_operands(const Block& block) {
  std::size_t n = 0;
  for (Operation* op : block) {
    for (std::uint32_t i = 0; i < op->num_operands(); ++i) n += static_cast<bool>(op->operand_source(i));
    for (std::uint32_t r = 0; r < op->num_regions(); ++r)
      for (Block* b : op->region(r)) n += count_operands(*b);
  }
  return n;
}

std::size_t count_arguments(const Block& block) {
  std::size_t n = block.num_arguments();
  for (Operation* op : block)
    for (std::uint32_t r = 0; r < op->num_regions(); ++r)
      for (Block* b : op->region(r)) n += count_arguments(*b);
  return n;
}

}  // namespace

TEST_CASE("the program DOT has a node per op and a typed edge per value use", "[ir][dot]") {
  IfWhileProgram g;
  const std::string dot = program_to_dot(g.p);
  CHECK(dot.rfind("digraph program {", 0) == 0);
  std::size_t op_nodes = 0, arg_nodes = 0, value_edges = 0;
  std::regex op_node(R"(^\s*n\d+ \[label=)"), arg_node(R"(^\s*a\d+ \[shape=ellipse)"),
      value_edge(R"(^\s*[an]\d+ -> n\d+ \[label="%\d+: [^"]+"\];$)");
  std::istringstream in(dot);
  std::string line;
  while (std::getline(in, line)) {
    op_nodes += std::regex_search(line, op_node);
    arg_nodes += std::regex_search(line, arg_node);
    value_edges += std::regex_search(line, value_edge);
  }
  CHECK(op_nodes == g.p.num_ops());
  CHECK(arg_nodes == count_arguments(g.p.block()));
  CHECK(value_edges == count_operands(g.p.block()));
  CHECK_THAT(dot, Catch::Contains("tensor<4xf32>"));
  CHECK_THAT(dot, Catch::Contains("kiln.while"));
}

TEST_CASE("the program DOT has a cluster per region, nested as the regions are", "[ir][dot]") {
  IfWhileProgram g;
  const std::string dot = program_to_dot(g.p);
  // Each cluster's enclosing cluster, by brace depth.
  std::map<std::string, std::string> parent;
  std::map<std::string, std::string> label;
  std::vector<std::string> open;  // the enclosing subgraphs ("" for the graph)
  std::regex cluster(R"(^\s*subgraph (cluster_\w+) \{$)"), label_line(R"re(^\s*label="([^"]*)";$)re");
  std::istringstream in(dot);
  std::string line;
  int depth = 0;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_search(line, m, cluster)) {
      parent[m[1].str()] = open.empty() ? "" : open.back();
      open.push_back(m[1].str());
      ++depth;
    } else if (std::regex_search(line, m, label_line) && !open.empty()) {
      label[open.back()] = m[1].str();
    } else if (line.find_first_not_of(' ') != std::string::npos && line.substr(line.find_first_not_of(' ')) == "}") {
      if (!open.empty()) open.pop_back();
      --depth;
    }
  }
  CHECK(depth == -1);  // every cluster closed, then the graph
  REQUIRE(parent.size() == 4);  // if: then, else; the inner while; the outer while
  std::map<std::string, std::string> by_label;
  for (const auto& [name, l] : label) by_label[l] = name;
  CHECK(by_label.count("kiln.if then"));
  CHECK(by_label.count("kiln.if else"));
  std::size_t bodies = 0, nested_bodies = 0;
  for (const auto& [name, l] : label) {
    if (l != "kiln.while body") continue;
    ++bodies;
    if (parent[name] == by_label["kiln.if then"]) ++nested_bodies;
    else CHECK(parent[name].empty());
  }
  CHECK(bodies == 2);
  CHECK(nested_bodies == 1);
  CHECK(parent[by_label["kiln.if then"]].empty());
  CHECK(parent[by_label["kiln.if else"]].empty());
  // The op points at each of its regions' boxes.
  for (const auto& [name, p] : parent) CHECK_THAT(dot, Catch::Contains("lhead=" + name));
}

TEST_CASE("the program DOT is accepted by Graphviz's dot when it is installed", "[ir][dot]") {
  if (std::system("command -v dot >/dev/null 2>&1") != 0) {
    WARN("graphviz's dot is not installed: only the DOT's structure is checked");
    return;
  }
  IfWhileProgram g;
  char path[] = "/tmp/kiln_program_dot_XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  {
    std::ofstream out(path);
    out << program_to_dot(g.p);
  }
  const std::string cmd = std::string("dot -Tsvg ") + path + " -o /dev/null 2>&1";
  CHECK(std::system(cmd.c_str()) == 0);
  std::remove(path);
}

TEST_CASE("an empty program's DOT is an empty graph", "[ir][dot]") {
  Program p;
  const std::string dot = program_to_dot(p);
  CHECK(dot.rfind("digraph program {", 0) == 0);
  CHECK(dot.find("->") == std::string::npos);
  CHECK(dot.find("subgraph") == std::string::npos);
}

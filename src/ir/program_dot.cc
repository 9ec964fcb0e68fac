#include "kiln/ir/program_dot.h"

#include <sstream>
#include <unordered_map>

#include "kiln/ir/region.h"

namespace kiln {

namespace {

std::string escaped(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

// The name of region r of `op` in a cluster's label.
std::string region_name(const Operation& op, std::uint32_t r) {
  if (op.name() == "kiln.if") return r == 0 ? "then" : r == 1 ? "else" : "region " + std::to_string(r);
  if (op.name() == "kiln.while" && op.num_regions() == 1) return "body";
  return "region " + std::to_string(r);
}

class DotWriter {
 public:
  explicit DotWriter(std::ostream& os) : os_(os) {}

  void write(const Program& program) {
    os_ << "digraph program {\n  compound=true;\n  node [shape=box, fontname=\"monospace\"];\n"
        << "  edge [fontname=\"monospace\", fontsize=10];\n";
    write_block(program.block(), "  ");
    os_ << edges_.str() << "}\n";
  }

 private:
  std::size_t number(Value v) {
    auto [it, fresh] = values_.try_emplace(v.impl(), values_.size());
    return it->second;
  }

  // The node a value comes from: its defining op, or its block argument's.
  std::string source_node(Value v) {
    auto it = nodes_.find(v.impl());
    return it == nodes_.end() ? std::string() : it->second;
  }

  void write_block(const Block& block, const std::string& indent) {
    for (std::uint32_t a = 0; a < block.num_arguments(); ++a) {
      Value arg = block.argument(a);
      const std::string node = "a" + std::to_string(next_arg_++);
      nodes_[arg.impl()] = node;
      os_ << indent << node << " [shape=ellipse, label=\"^arg" << a << " %" << number(arg) << "\"];\n";
    }
    for (Operation* op : block) write_op(*op, indent);
  }

  void write_op(const Operation& op, const std::string& indent) {
    const std::string node = "n" + std::to_string(next_op_++);
    std::string label = op.name();
    if (op.num_results()) {
      label += "\n-> ";
      for (std::uint32_t i = 0; i < op.num_results(); ++i) {
        if (i) label += ", ";
        label += "%" + std::to_string(number(op.result(i)));
        nodes_[op.result(i).impl()] = node;
      }
    }
    os_ << indent << node << " [label=\"" << escaped(label) << "\"";
    if (op.num_regions()) os_ << ", style=bold";
    os_ << "];\n";
    // Values as edges, from where each operand is defined to this op. Regions
    // are isolated from above, so an operand is defined before its user.
    for (std::uint32_t i = 0; i < op.num_operands(); ++i) {
      Value v = op.operand_source(i);
      if (!v) continue;
      const std::string from = source_node(v);
      if (from.empty()) continue;
      edges_ << "  " << from << " -> " << node << " [label=\"%" << number(v) << ": "
             << escaped(v.type() ? v.type().to_string() : std::string("<none>")) << "\"];\n";
    }
    for (std::uint32_t r = 0; r < op.num_regions(); ++r) {
      const std::string cluster = "cluster_" + node + "_r" + std::to_string(r);
      os_ << indent << "subgraph " << cluster << " {\n"
          << indent << "  label=\"" << escaped(op.name() + " " + region_name(op, r)) << "\";\n"
          << indent << "  style=rounded;\n";
      const std::size_t first_arg = next_arg_, first_op = next_op_;
      for (Block* b : op.region(r)) write_block(*b, indent + "  ");
      os_ << indent << "}\n";
      // A dotted edge from the op to its region's box.
      std::string inside;
      if (next_arg_ > first_arg) inside = "a" + std::to_string(first_arg);
      else if (next_op_ > first_op) inside = "n" + std::to_string(first_op);
      if (!inside.empty())
        edges_ << "  " << node << " -> " << inside << " [style=dotted, arrowhead=none, lhead=" << cluster
               << "];\n";
    }
  }

  std::ostream& os_;
  std::ostringstream edges_;
  std::unordered_map<const detail::ValueImpl*, std::size_t> values_;
  std::unordered_map<const detail::ValueImpl*, std::string> nodes_;
  std::size_t next_op_ = 0;
  std::size_t next_arg_ = 0;
};

}  // namespace

std::string program_to_dot(const Program& program) {
  std::ostringstream os;
  DotWriter(os).write(program);
  return os.str();
}

}  // namespace kiln

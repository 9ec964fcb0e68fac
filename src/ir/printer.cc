#include "kiln/ir/printer.h"

#include <sstream>

#include "kiln/ir/region.h"
#include "kiln/ir/text_form.h"

namespace kiln {

std::size_t IrPrinter::number(Value v) {
  auto [it, fresh] = names_.try_emplace(v.impl(), next_value_);
  if (fresh) ++next_value_;
  return it->second;
}

void IrPrinter::print_value(Value v) {
  if (!v) os_ << "%<null>";
  else os_ << '%' << number(v);
}

void IrPrinter::print(const Program& program) {
  os_ << "program";
  // Arguments of the top block are rare (a program loaded from JSON may have
  // them), but the text must not lose them.
  const Block& body = program.block();
  if (body.num_arguments()) {
    os_ << '(';
    for (std::uint32_t a = 0; a < body.num_arguments(); ++a) {
      if (a) os_ << ", ";
      print_value(body.argument(a));
      os_ << ": " << body.argument(a).type();
    }
    os_ << ')';
  }
  os_ << " {\n";
  for (const auto& [name, p] : program.parameters()) {
    indent(1);
    os_ << "parameter ";
    print_quoted_string(os_, name);
    os_ << " : " << p.type;
    if (!p.is_mutable) os_ << " {mutable = false}";
    os_ << '\n';
  }
  for (Operation* op : program.block()) print(*op, 1);
  os_ << "}\n";
}

void IrPrinter::print(const Operation& op, int ind) {
  indent(ind);
  for (std::uint32_t i = 0; i < op.num_results(); ++i) {
    if (i) os_ << ", ";
    print_value(op.result(i));
  }
  if (op.num_results()) os_ << " = ";
  os_ << op.name() << '(';
  for (std::uint32_t i = 0; i < op.num_operands(); ++i) {
    if (i) os_ << ", ";
    print_value(op.operand_source(i));
  }
  os_ << ')';
  if (!op.attributes().empty()) {
    os_ << ' ';
    op.attributes().print(os_);
  }
  os_ << " : (";
  for (std::uint32_t i = 0; i < op.num_operands(); ++i) {
    if (i) os_ << ", ";
    Value v = op.operand_source(i);
    if (v) os_ << v.type();
    else os_ << "<null>";
  }
  os_ << ") -> ";
  if (op.num_results() == 1) {
    os_ << op.result_type(0);
  } else {
    os_ << '(';
    for (std::uint32_t i = 0; i < op.num_results(); ++i) {
      if (i) os_ << ", ";
      os_ << op.result_type(i);
    }
    os_ << ')';
  }
  for (std::uint32_t r = 0; r < op.num_regions(); ++r) {
    os_ << " {\n";
    for (Block* b : op.region(r)) print(*b, ind + 1);
    indent(ind);
    os_ << '}';
  }
  os_ << '\n';
}

void IrPrinter::print(const Block& block, int ind) {
  indent(ind);
  os_ << "^bb" << next_block_++;
  if (block.num_arguments()) {
    os_ << '(';
    for (std::uint32_t a = 0; a < block.num_arguments(); ++a) {
      if (a) os_ << ", ";
      print_value(block.argument(a));
      os_ << ": " << block.argument(a).type();
    }
    os_ << ')';
  }
  os_ << ":\n";
  for (Operation* op : block) print(*op, ind + 1);
}

void Operation::print(std::ostream& os) const {
  IrPrinter p(os);
  p.print(*this);
}

}  // namespace kiln

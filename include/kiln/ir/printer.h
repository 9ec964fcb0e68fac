// IrPrinter: the text form of seed 002 / DESIGN.md —
//   %3 = kiln.matmul(%0, %1) {transpose_x = false, transpose_y = false} :
//        (tensor<16x16xf32>, tensor<16x1xf32>) -> tensor<16x1xf32>
// Values are numbered %0, %1, … in the order they are defined; regions are
// printed nested, each block as ^bbN(args) followed by its ops. A program
// prints as `program {` (or `program(%0: type) {` when its top block has
// arguments), its parameters, its ops, `}`. The text is lossless: attributes
// print every value, floats in their shortest round-trip form, strings and
// odd names quoted with escapes (kiln/ir/text_form.h), and parse_program
// (kiln/ir/parser.h) reads it back to a structurally equal program.
#pragma once

#include <ostream>
#include <unordered_map>

#include "kiln/ir/block.h"
#include "kiln/ir/program.h"

namespace kiln {

class IrPrinter {
 public:
  explicit IrPrinter(std::ostream& os) : os_(os) {}

  void print(const Program& program);
  void print(const Operation& op, int indent = 0);
  void print(const Block& block, int indent = 0);
  void print_value(Value v);

 private:
  std::size_t number(Value v);
  void indent(int n) {
    for (int i = 0; i < n; ++i) os_ << "  ";
  }

  std::ostream& os_;
  std::unordered_map<const detail::ValueImpl*, std::size_t> names_;
  std::size_t next_value_ = 0;
  std::size_t next_block_ = 0;
};

}  // namespace kiln

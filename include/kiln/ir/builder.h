// Builder: creates ops at an insertion point. `create<OpT>(args…)` runs the
// op's build() and, for ops with InferMeta, its infer_meta() to set the result
// types — the C++ counterpart of Paddle PIR's Builder::Build<OpT>.
#pragma once

#include <utility>

#include "kiln/ir/block.h"
#include "kiln/ir/interfaces.h"
#include "kiln/ir/op.h"
#include "kiln/ir/program.h"

namespace kiln {

class Builder {
 public:
  // Inserts at the end of `block`.
  explicit Builder(Block& block) : block_(&block) {}
  explicit Builder(Program& program) : block_(&program.block()) {}

  Block* block() const { return block_; }
  // The op new ops go before; null = the end of the block.
  Operation* insertion_point() const { return before_; }
  void set_insertion_point_to_end(Block& block) {
    block_ = &block;
    before_ = nullptr;
  }
  // The op must be in a block (kiln::Error(InvalidArgument) otherwise).
  void set_insertion_point(Operation* before) {
    block_ = checked_block(before);
    before_ = before;
  }
  void set_insertion_point_after(Operation* op) {
    block_ = checked_block(op);
    before_ = op->next_in_block();
  }

  template <typename OpT, typename... Args>
  OpT create(Args&&... args);

  // Inserts a detached op at the insertion point.
  Operation* insert(Operation* op) {
    block_->insert(before_, op);
    return op;
  }

 private:
  static Block* checked_block(Operation* op) {
    if (!op->parent_block())
      throw_error(ErrorKind::InvalidArgument, "cannot insert at op '", op->name(),
                  "': it is in no block");
    return op->parent_block();
  }

  Block* block_;
  Operation* before_ = nullptr;
};

template <typename OpT, typename... Args>
OpT Builder::create(Args&&... args) {
  OperationArgument arg(IrContext::instance()->op_info<OpT>());
  OpT::build(*this, arg, std::forward<Args>(args)...);
  if constexpr (OpT::template declares<InferMetaInterface>) {
    std::vector<Type> in;
    in.reserve(arg.operands.size());
    for (Value v : arg.operands) {
      if (!v) throw_error(ErrorKind::InvalidArgument, "op '", OpT::name, "' got a null operand");
      in.push_back(v.type());
    }
    arg.result_types = OpT::infer_meta(in, DictionaryAttribute::get(arg.attributes));
  }
  return OpT(insert(Operation::create(arg)));
}

}  // namespace kiln

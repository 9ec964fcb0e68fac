// IrMapping's maps from original to cloned values, blocks and operations.
#include "kiln/ir/ir_mapping.h"

namespace kiln {

void IrMapping::map(Value from, Value to) { values_[from.impl()] = to; }
void IrMapping::map(Block* from, Block* to) { blocks_[from] = to; }
void IrMapping::map(Operation* from, Operation* to) { ops_[from] = to; }

Value IrMapping::lookup_or_self(Value v) const {
  auto it = values_.find(v.impl());
  return it == values_.end() ? v : it->second;
}

Value IrMapping::lookup(Value v) const {
  auto it = values_.find(v.impl());
  return it == values_.end() ? Value() : it->second;
}

Block* IrMapping::lookup(Block* b) const {
  auto it = blocks_.find(b);
  return it == blocks_.end() ? nullptr : it->second;
}

Operation* IrMapping::lookup(Operation* op) const {
  auto it = ops_.find(op);
  return it == ops_.end() ? nullptr : it->second;
}

bool IrMapping::contains(Value v) const { return values_.count(v.impl()) != 0; }

}  // namespace kiln

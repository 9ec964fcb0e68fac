// IrMapping's map from original to cloned values, blocks and operations.
#include "kiln/ir/ir_mapping.h"

namespace kiln {

void IrMapping::map(Value from, Value to) { map_[from.impl()] = to.impl(); }
void IrMapping::map(Block* from, Block* to) { map_[from] = to; }
void IrMapping::map(Operation* from, Operation* to) { map_[from] = to; }

Value IrMapping::lookup_or_self(Value v) const {
  auto it = map_.find(v.impl());
  return it == map_.end() ? v : Value(static_cast<detail::ValueImpl*>(it->second));
}

Value IrMapping::lookup(Value v) const {
  auto it = map_.find(v.impl());
  return it == map_.end() ? Value() : Value(static_cast<detail::ValueImpl*>(it->second));
}

Block* IrMapping::lookup(Block* b) const {
  auto it = map_.find(b);
  return it == map_.end() ? nullptr : static_cast<Block*>(it->second);
}

Operation* IrMapping::lookup(Operation* op) const {
  auto it = map_.find(op);
  return it == map_.end() ? nullptr : static_cast<Operation*>(it->second);
}

bool IrMapping::contains(Value v) const { return map_.count(v.impl()) != 0; }

}  // namespace kiln

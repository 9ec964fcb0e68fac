// IrMapping: old → new values, blocks and ops, filled while cloning so that a
// clone's operands refer to the cloned definitions (seed 002 §3.3 passes).
#pragma once

#include <unordered_map>

#include "kiln/ir/value.h"

namespace kiln {

class IrMapping {
 public:
  void map(Value from, Value to) { values_[from.impl()] = to; }
  void map(Block* from, Block* to) { blocks_[from] = to; }
  void map(Operation* from, Operation* to) { ops_[from] = to; }

  // The mapped value, or `v` itself when it was not mapped (defined outside
  // what was cloned).
  Value lookup_or_self(Value v) const {
    auto it = values_.find(v.impl());
    return it == values_.end() ? v : it->second;
  }
  Value lookup(Value v) const {
    auto it = values_.find(v.impl());
    return it == values_.end() ? Value() : it->second;
  }
  Block* lookup(Block* b) const {
    auto it = blocks_.find(b);
    return it == blocks_.end() ? nullptr : it->second;
  }
  Operation* lookup(Operation* op) const {
    auto it = ops_.find(op);
    return it == ops_.end() ? nullptr : it->second;
  }
  bool contains(Value v) const { return values_.count(v.impl()) != 0; }

 private:
  std::unordered_map<const detail::ValueImpl*, Value> values_;
  std::unordered_map<const Block*, Block*> blocks_;
  std::unordered_map<const Operation*, Operation*> ops_;
};

}  // namespace kiln

// IrMapping: old → new values, blocks and ops, filled while cloning so that a
// clone's operands refer to the cloned definitions (seed 002 §3.3 passes).
#pragma once

#include <memory>

#include "kiln/ir/value.h"

namespace kiln {

class IrMapping {
 public:
  IrMapping();
  ~IrMapping();
  IrMapping(const IrMapping& other);
  IrMapping& operator=(const IrMapping& other);
  IrMapping(IrMapping&&);
  IrMapping& operator=(IrMapping&&) noexcept;

  void map(Value from, Value to);
  void map(Block* from, Block* to);
  void map(Operation* from, Operation* to);

  // The mapped value, or `v` itself when it was not mapped (defined outside
  // what was cloned).
  Value lookup_or_self(Value v) const;
  Value lookup(Value v) const;
  Block* lookup(Block* b) const;
  Operation* lookup(Operation* op) const;
  bool contains(Value v) const;

 private:
  // One map for the three kinds, keyed by address (a value's ValueImpl, a
  // block, an op are distinct objects), defined in ir_mapping.cc: no
  // includer instantiates a hash table.
  struct Map;
  std::unique_ptr<Map> map_;
};

}  // namespace kiln

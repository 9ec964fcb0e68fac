// IrMapping's map from original to cloned values, blocks and operations.
#include "kiln/ir/ir_mapping.h"

#include <unordered_map>

namespace kiln {

struct IrMapping::Map : std::unordered_map<const void*, void*> {};

IrMapping::IrMapping() : map_(std::make_unique<Map>()) {}
IrMapping::~IrMapping() = default;
IrMapping::IrMapping(const IrMapping& other) : map_(std::make_unique<Map>(*other.map_)) {}
IrMapping& IrMapping::operator=(const IrMapping& other) {
  *map_ = *other.map_;
  return *this;
}
// A moved-from mapping stays usable (empty, or holding the other's entries
// after an assignment), as a moved-from std::unordered_map.
IrMapping::IrMapping(IrMapping&& other) : map_(std::make_unique<Map>()) { std::swap(map_, other.map_); }
IrMapping& IrMapping::operator=(IrMapping&& other) noexcept {
  std::swap(map_, other.map_);
  return *this;
}

void IrMapping::map(Value from, Value to) { (*map_)[from.impl()] = to.impl(); }
void IrMapping::map(Block* from, Block* to) { (*map_)[from] = to; }
void IrMapping::map(Operation* from, Operation* to) { (*map_)[from] = to; }

Value IrMapping::lookup_or_self(Value v) const {
  auto it = map_->find(v.impl());
  return it == map_->end() ? v : Value(static_cast<detail::ValueImpl*>(it->second));
}

Value IrMapping::lookup(Value v) const {
  auto it = map_->find(v.impl());
  return it == map_->end() ? Value() : Value(static_cast<detail::ValueImpl*>(it->second));
}

Block* IrMapping::lookup(Block* b) const {
  auto it = map_->find(b);
  return it == map_->end() ? nullptr : static_cast<Block*>(it->second);
}

Operation* IrMapping::lookup(Operation* op) const {
  auto it = map_->find(op);
  return it == map_->end() ? nullptr : static_cast<Operation*>(it->second);
}

bool IrMapping::contains(Value v) const { return map_->count(v.impl()) != 0; }

}  // namespace kiln

// capture_external_values of kiln/frontend/capture.h.
#include "kiln/frontend/capture.h"

#include <string>
#include <unordered_set>

#include "kiln/ir/operation.h"
#include "kiln/ir/region.h"
#include "kiln/ir/traits.h"
#include "kiln/support/error.h"

namespace kiln {

namespace {

// The index in `blocks` of the block holding `b` (b itself or a block
// further out); -1 when none does.
int root_index(const Block* b, const std::vector<Block*>& blocks) {
  while (b) {
    for (std::size_t i = 0; i < blocks.size(); ++i)
      if (blocks[i] == b) return static_cast<int>(i);
    Operation* parent = b->parent_op();
    b = parent ? parent->parent_block() : nullptr;
  }
  return -1;
}

const Block* defining_block(Value v) {
  return v.defining_op() ? v.defining_op()->parent_block() : cast<BlockArgument>(v).owner();
}

std::string block_name(const std::vector<std::string_view>& names, std::size_t i) {
  if (i < names.size()) return std::string(names[i]);
  return "block #" + std::to_string(i);
}

struct Scan {
  const std::vector<Block*>& blocks;
  std::string_view who;
  const std::vector<std::string_view>& names;
  std::vector<Value> captures;
  std::unordered_set<Value> seen;

  void block(const Block& b, std::size_t index) {
    for (Operation* op : b) {
      for (std::uint32_t i = 0; i < op->num_operands(); ++i) {
        Value v = op->operand_source(i);
        const int root = root_index(defining_block(v), blocks);
        if (root < 0) {
          if (seen.insert(v).second) captures.push_back(v);
        } else if (static_cast<std::size_t>(root) != index) {
          throw_error(ErrorKind::InvalidArgument, who, ": op '", op->name(), "' of ",
                      block_name(names, index), " uses a value defined in ",
                      block_name(names, static_cast<std::size_t>(root)),
                      " (a value made in one body cannot be used in another)");
        }
      }
      if (op->has_trait<IsolatedFromAbove>()) continue;
      for (std::uint32_t r = 0; r < op->num_regions(); ++r)
        for (const Block* inner : op->region(r)) block(*inner, index);
    }
  }
};

}  // namespace

std::vector<Value> capture_external_values(const std::vector<Block*>& blocks,
                                           std::string_view who,
                                           const std::vector<std::string_view>& names) {
  Scan scan{blocks, who, names, {}, {}};
  for (std::size_t i = 0; i < blocks.size(); ++i) scan.block(*blocks[i], i);
  for (Value v : scan.captures)
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      Value arg = blocks[i]->add_argument(v.type());
      v.replace_uses_if(arg, [&](OpOperand use) {
        return root_index(use.owner()->parent_block(), blocks) == static_cast<int>(i);
      });
    }
  return scan.captures;
}

}  // namespace kiln

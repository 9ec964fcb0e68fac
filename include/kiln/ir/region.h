// Region: an ordered list of blocks owned by an op (seed 002 §3.2) — the body
// of control flow and other nested ops. Ops → regions → blocks → ops make a
// Program a tree.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/ir/block.h"

namespace kiln {

class Region {
 public:
  explicit Region(Operation* owner) : owner_(owner) {}
  ~Region();
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  Operation* parent_op() const { return owner_; }

  bool empty() const { return blocks_.empty(); }
  std::size_t size() const { return blocks_.size(); }
  Block& front() const { return *blocks_.front(); }
  Block& block(std::size_t i) const { return *blocks_[i]; }
  auto begin() const { return blocks_.begin(); }
  auto end() const { return blocks_.end(); }

  // Appends a new empty block.
  Block& emplace_block();
  // Takes ownership of a block.
  void push_back(Block* block);
  // Frees a block of this region. Throws kiln::Error, changing nothing, when
  // a value it defines is used outside it.
  void erase(Block* block);

  // Clones every block into `dest` (appended), recording the mapping.
  void clone_into(Region& dest, IrMapping& map) const;

 private:
  Operation* owner_;
  std::vector<Block*> blocks_;
};

inline Region& Operation::region(std::uint32_t i) const {
  if (i >= num_regions_) [[unlikely]]
    throw_index_out_of_range("region", i, num_regions_);
  return region_storage()[i];
}

}  // namespace kiln

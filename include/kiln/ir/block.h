// Block: an SSA basic block (seed 002 §3.2) — an ordered list of ops (intrusive,
// O(1) insert/erase) and the block's arguments. A Block lives in a Region, or
// is a Program's top-level block.
#pragma once

#include <cstdint>
#include <iterator>
#include <vector>

#include "kiln/ir/operation.h"

namespace kiln {

class Block {
 public:
  Block() = default;
  ~Block();
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;

  class iterator {
   public:
    using iterator_category = std::bidirectional_iterator_tag;
    using value_type = Operation*;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = Operation*;
    iterator() = default;
    iterator(Operation* op, const Block* block) : op_(op), block_(block) {}
    Operation* operator*() const { return op_; }
    iterator& operator++() {
      op_ = op_->next_in_block();
      return *this;
    }
    iterator operator++(int) {
      auto t = *this;
      ++*this;
      return t;
    }
    iterator& operator--() {
      op_ = op_ ? op_->prev_in_block() : block_->back();
      return *this;
    }
    bool operator==(const iterator& o) const { return op_ == o.op_; }

   private:
    Operation* op_ = nullptr;
    const Block* block_ = nullptr;
  };
  iterator begin() const { return iterator(head_, this); }
  iterator end() const { return iterator(nullptr, this); }

  bool empty() const { return head_ == nullptr; }
  std::size_t size() const { return size_; }
  Operation* front() const { return head_; }
  Operation* back() const { return tail_; }

  // Takes ownership of a detached op. `before` null = at the end.
  void insert(Operation* before, Operation* op);
  void push_back(Operation* op) { insert(nullptr, op); }
  void push_front(Operation* op) { insert(head_, op); }
  // Erases (frees) an op of this block; see Operation::erase.
  void erase(Operation* op);
  // Detaches an op without freeing it; the caller owns it again.
  Operation* take(Operation* op);
  // Erases every op (uses among them are dropped first). Throws, changing
  // nothing, if a result is used outside the block.
  void clear();

  // ---- arguments ----
  BlockArgument add_argument(Type type);
  std::uint32_t num_arguments() const { return static_cast<std::uint32_t>(args_.size()); }
  BlockArgument argument(std::uint32_t i) const { return BlockArgument(args_[i]); }
  std::vector<Value> arguments() const;
  // Throws kiln::Error when the argument is still used.
  void erase_argument(std::uint32_t i);

  Region* parent_region() const { return parent_; }
  Operation* parent_op() const;

 private:
  friend class Region;
  friend class Operation;
  void unlink(Operation* op);
  // True when `op` holds this block (directly or further out).
  bool is_nested_in(const Operation* op) const;

  Operation* head_ = nullptr;
  Operation* tail_ = nullptr;
  std::size_t size_ = 0;
  std::vector<detail::BlockArgumentImpl*> args_;
  Region* parent_ = nullptr;
};

}  // namespace kiln

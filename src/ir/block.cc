#include "kiln/ir/block.h"

#include <algorithm>
#include <string>
#include <unordered_set>

#include "kiln/ir/region.h"

namespace kiln {

Block::~Block() {
  for (Operation* op : *this) op->drop_all_references();
  for (Operation* op = head_; op;) {
    Operation* next = op->next_;
    op->parent_ = nullptr;
    op->destroy_unchecked();
    op = next;
  }
  for (auto* a : args_) {
    while (auto* u = a->first_use()) u->unlink();  // defensive; see destroy_unchecked
    delete a;
  }
}

bool Block::is_nested_in(const Operation* op) const {
  for (const Operation* p = parent_op(); p; p = p->parent_op())
    if (p == op) return true;
  return false;
}

void Block::insert(Operation* before, Operation* op) {
  if (op->parent_)
    throw_error(ErrorKind::InvalidArgument, "op '", op->name(),
                "' is already in a block; take() or move it instead");
  if (is_nested_in(op))
    throw_error(ErrorKind::InvalidArgument, "cannot insert op '", op->name(),
                "' into a block inside itself");
  if (before && before->parent_ != this)
    throw_error(ErrorKind::InvalidArgument, "insertion point op '", before->name(),
                "' is not in this block");
  detail::bump_ir_epoch();
  op->parent_ = this;
  op->next_ = before;
  op->prev_ = before ? before->prev_ : tail_;
  if (op->prev_) op->prev_->next_ = op;
  else head_ = op;
  if (before) before->prev_ = op;
  else tail_ = op;
  ++size_;
}

void Block::unlink(Operation* op) {
  detail::bump_ir_epoch();
  if (op->prev_) op->prev_->next_ = op->next_;
  else head_ = op->next_;
  if (op->next_) op->next_->prev_ = op->prev_;
  else tail_ = op->prev_;
  op->prev_ = op->next_ = nullptr;
  op->parent_ = nullptr;
  --size_;
}

void Block::erase(Operation* op) {
  if (op->parent_ != this)
    throw_error(ErrorKind::InvalidArgument, "op '", op->name(), "' is not in this block");
  op->erase();
}

Operation* Block::take(Operation* op) {
  if (op->parent_ != this)
    throw_error(ErrorKind::InvalidArgument, "op '", op->name(), "' is not in this block");
  unlink(op);
  return op;
}

namespace {
void collect(Operation* op, std::unordered_set<const Operation*>& out) {
  out.insert(op);
  for (std::uint32_t r = 0; r < op->num_regions(); ++r)
    for (Block* b : op->region(r))
      for (Operation* inner : *b) collect(inner, out);
}

// Throws (`what` = "clear block", …) when a value defined by the ops in
// `inside` — a result, or an argument of a block nested in one of them — is
// used by an op outside `inside`.
void check_no_outside_uses(const std::unordered_set<const Operation*>& inside,
                           std::string_view what) {
  auto check = [&](Value v, const Operation* def, const std::string& desc) {
    for (OpOperand u : v.uses())
      if (!inside.count(u.owner()))
        throw_error(ErrorKind::PreconditionNotMet, "cannot ", what, ": ", desc, " of op '",
                    def->name(), "' is used by op '", u.owner()->name(), "' outside it");
  };
  for (const Operation* op : inside) {
    for (std::uint32_t i = 0; i < op->num_results(); ++i)
      check(op->result(i), op, "result #" + std::to_string(i));
    for (std::uint32_t r = 0; r < op->num_regions(); ++r)
      for (Block* b : op->region(r))
        for (std::uint32_t a = 0; a < b->num_arguments(); ++a)
          check(b->argument(a), op, "a block argument in a region");
  }
}
}  // namespace

void Block::clear() {
  std::unordered_set<const Operation*> inside;
  for (Operation* op : *this) collect(op, inside);
  check_no_outside_uses(inside, "clear block");
  for (Operation* op : *this) op->drop_all_references();
  while (head_) {
    Operation* op = head_;
    unlink(op);
    op->destroy_unchecked();
  }
}

BlockArgument Block::add_argument(Type type) {
  if (!type) throw_error(ErrorKind::InvalidArgument, "block argument needs a type");
  detail::bump_ir_epoch();
  args_.push_back(new detail::BlockArgumentImpl(type, this, static_cast<std::uint32_t>(args_.size())));
  return BlockArgument(args_.back());
}

std::vector<Value> Block::arguments() const {
  std::vector<Value> out;
  for (auto* a : args_) out.emplace_back(a);
  return out;
}

void Block::erase_argument(std::uint32_t i) {
  if (i >= args_.size())
    throw_error(ErrorKind::OutOfRange, "block has ", args_.size(), " arguments; cannot erase #", i);
  if (!args_[i]->use_empty())
    throw_error(ErrorKind::PreconditionNotMet, "block argument #", i, " is still used by op '",
                args_[i]->first_use()->owner()->name(), "'");
  detail::bump_ir_epoch();
  delete args_[i];
  args_.erase(args_.begin() + i);
  for (std::size_t k = i; k < args_.size(); ++k) args_[k]->set_index(static_cast<std::uint32_t>(k));
}

Operation* Block::parent_op() const { return parent_ ? parent_->parent_op() : nullptr; }

// ---- Region ----

Region::~Region() {
  // Drop every reference first so blocks can go in any order.
  for (Block* b : blocks_)
    for (Operation* op : *b) op->drop_all_references();
  for (Block* b : blocks_) delete b;
}

Block& Region::emplace_block() {
  auto* b = new Block();
  push_back(b);
  return *b;
}

void Region::push_back(Block* block) {
  if (block->parent_)
    throw_error(ErrorKind::InvalidArgument, "block already belongs to a region");
  block->parent_ = this;
  blocks_.push_back(block);
}

void Region::erase(Block* block) {
  auto it = std::find(blocks_.begin(), blocks_.end(), block);
  if (it == blocks_.end()) throw_error(ErrorKind::InvalidArgument, "block is not in this region");
  std::unordered_set<const Operation*> inside;
  for (Operation* op : *block) collect(op, inside);
  auto outside = [&](Value v) {
    for (OpOperand u : v.uses())
      if (!inside.count(u.owner())) return u.owner();
    return static_cast<Operation*>(nullptr);
  };
  check_no_outside_uses(inside, "erase block");
  for (std::uint32_t a = 0; a < block->num_arguments(); ++a)
    if (Operation* user = outside(block->argument(a)))
      throw_error(ErrorKind::PreconditionNotMet, "cannot erase block: argument #", a,
                  " is used by op '", user->name(), "' outside it");
  blocks_.erase(it);
  for (Operation* op : *block) op->drop_all_references();
  delete block;
}

void Region::clone_into(Region& dest, IrMapping& map) const {
  // A copy of the block list: `dest` may be this region.
  const std::vector<Block*> src = blocks_;
  // Blocks and their arguments first, so ops may refer to any of them.
  std::vector<Block*> made;
  for (Block* b : src) {
    Block& nb = dest.emplace_block();
    map.map(b, &nb);
    for (std::uint32_t a = 0; a < b->num_arguments(); ++a)
      map.map(b->argument(a), nb.add_argument(b->argument(a).type()));
    made.push_back(&nb);
  }
  for (std::size_t i = 0; i < src.size(); ++i)
    for (Operation* op : *src[i]) made[i]->push_back(op->clone(map));
}

}  // namespace kiln

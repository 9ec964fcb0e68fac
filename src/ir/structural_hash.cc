#include "kiln/ir/structural_hash.h"

#include <functional>
#include <unordered_map>
#include <vector>

#include "kiln/ir/block.h"
#include "kiln/ir/program.h"
#include "kiln/ir/region.h"
#include "kiln/support/hash.h"

namespace kiln {

namespace {

// Operand words far above any value number.
constexpr std::uint64_t kNullOperand = ~std::uint64_t(0);
constexpr std::uint64_t kOutsideValue = ~std::uint64_t(0) - 1;

// Collects the program as a sequence of 64-bit words, hashed once at the end
// with xxh64. Every list is preceded by its length, so the sequence reads back
// one way only: different structures give different sequences.
class StructuralHasher {
 public:
  std::uint64_t hash(const Program& p) {
    // Two passes: numbering first lets an operand refer to a value defined
    // later (a malformed program) without special cases.
    number_block(p.block());
    put(p.parameters().size());
    for (const auto& [name, param] : p.parameters()) {
      put(xxh64(name));
      put(std::hash<Type>()(param.type));
      put(param.is_mutable);
    }
    hash_block(p.block());
    return xxh64(words_.data(), words_.size() * sizeof(std::uint64_t));
  }

 private:
  void put(std::uint64_t w) { words_.push_back(w); }

  // The Executor's order (memo_for): a block's arguments, then for each op
  // the values of its regions, then its results. A block's arguments and an
  // op's results are numbered consecutively, so only the first number of
  // each is kept.
  void number_block(const Block& b) {
    first_argument_[&b] = next_;
    next_ += b.num_arguments();
    for (const Operation* op : b) {
      for (std::uint32_t r = 0; r < op->num_regions(); ++r)
        for (const Block* inner : op->region(r)) number_block(*inner);
      first_result_[op] = next_;
      next_ += op->num_results();
    }
  }

  void hash_block(const Block& b) {
    put(b.num_arguments());
    for (std::uint32_t a = 0; a < b.num_arguments(); ++a)
      put(std::hash<Type>()(b.argument(a).type()));
    put(b.size());
    for (const Operation* op : b) hash_op(*op);
  }

  void hash_op(const Operation& op) {
    put(xxh64(op.name()));
    put(std::hash<Attribute>()(op.attributes()));
    put(op.num_operands());
    for (std::uint32_t i = 0; i < op.num_operands(); ++i) hash_operand(op.operand_source(i));
    put(op.num_results());
    for (std::uint32_t i = 0; i < op.num_results(); ++i)
      put(std::hash<Type>()(op.result_type(i)));
    put(op.num_regions());
    for (std::uint32_t r = 0; r < op.num_regions(); ++r) {
      put(op.region(r).size());
      for (const Block* inner : op.region(r)) hash_block(*inner);
    }
  }

  void hash_operand(Value v) {
    if (!v) {
      put(kNullOperand);
      return;
    }
    const std::uint64_t* first = nullptr;
    std::uint32_t index = 0;
    if (auto arg = dyn_cast<BlockArgument>(v)) {
      auto it = first_argument_.find(arg.owner());
      if (it != first_argument_.end()) first = &it->second;
      index = arg.index();
    } else {
      auto res = cast<OpResult>(v);
      auto it = first_result_.find(res.owner());
      if (it != first_result_.end()) first = &it->second;
      index = res.index();
    }
    if (first) {
      put(*first + index);
    } else {
      put(kOutsideValue);
      put(std::hash<const void*>()(v.impl()));
    }
  }

  std::vector<std::uint64_t> words_;
  std::unordered_map<const Block*, std::uint64_t> first_argument_;
  std::unordered_map<const Operation*, std::uint64_t> first_result_;
  std::uint64_t next_ = 0;
};

}  // namespace

std::uint64_t structural_hash(const Program& program) { return StructuralHasher().hash(program); }

}  // namespace kiln

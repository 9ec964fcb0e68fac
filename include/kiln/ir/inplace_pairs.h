// The alias pairs of one in-place operation. An Inplace op type declares a
// static `inplace_map` (kiln/ir/traits.h), the same for all its ops; a
// variadic in-place op (kiln.merged_adam_ updates as many parameters as it
// has operand groups) computes its pairs from the operation instead, through
// InplaceMapInterface. Everything that follows aliasing — the verifier, the
// plan builders, the passes' alias queries, the backward pass — asks
// inplace_pairs(op), which answers either way.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "kiln/ir/op_base.h"

namespace kiln {

// (result index, operand index): the result is the operand's buffer.
using AliasPair = std::pair<std::uint32_t, std::uint32_t>;

// An op with InplaceMapInterface (and the Inplace trait, with an empty
// static inplace_map) declares
//   static void inplace_pairs(const Operation& op, std::vector<AliasPair>& out);
// appending its (result, operand) pairs for that operation's operand count.
class InplaceMapInterface : public OpInterfaceBase<InplaceMapInterface> {
 public:
  struct Concept {
    void (*inplace_pairs)(const Operation&, std::vector<AliasPair>&);
  };
  template <typename ConcreteOp>
  struct Model : Concept {
    static_assert(requires(const Operation& op, std::vector<AliasPair>& out) {
      ConcreteOp::inplace_pairs(op, out);
    }, "an op with InplaceMapInterface must define static void "
       "inplace_pairs(const Operation&, std::vector<AliasPair>&)");
    constexpr Model() : Concept{&ConcreteOp::inplace_pairs} {}
  };

  using OpInterfaceBase::OpInterfaceBase;
  void inplace_pairs(std::vector<AliasPair>& out) const {
    concept_table<Concept>()->inplace_pairs(*op_, out);
  }
};

// The pairs of one operation: a view of its type's static map (no
// allocation), or the pairs its InplaceMapInterface computed. Iterable.
class InplacePairs {
 public:
  explicit InplacePairs(std::span<const AliasPair> shared) : view_(shared) {}
  explicit InplacePairs(std::vector<AliasPair> own) : own_(std::move(own)), owned_(true) {}

  const AliasPair* begin() const { return owned_ ? own_.data() : view_.data(); }
  const AliasPair* end() const { return begin() + size(); }
  std::size_t size() const { return owned_ ? own_.size() : view_.size(); }
  bool empty() const { return size() == 0; }

 private:
  std::span<const AliasPair> view_;
  std::vector<AliasPair> own_;
  bool owned_ = false;
};

// The (result, operand) pairs `op` writes in place; empty for an op
// without the Inplace trait.
InplacePairs inplace_pairs(const Operation& op);

}  // namespace kiln

// Merged optimizer updates (PyTorch's fused/_foreach Adam, Paddle's
// merged_adam and merged_momentum): one op updates every parameter of a
// group of sgd_ / momentum_ / adam_ / adamw_ updates that share their
// attributes and their learning-rate value, in one kernel call. The
// fuse_optimizer pass (kiln/passes/fuse_optimizer.h) builds them; a user
// may too.
//
// Operands: the learning rate, then each parameter's operands in the
// single op's order without the learning rate (merged_adam_: lr, then
// param, grad, moment1, moment2, beta1_pow, beta2_pow per parameter), then
// optionally the single ops' `skip` flag, one for every parameter.
// Results: each parameter's results in the single op's order. Result
// i·R + r aliases what result r of the single op aliases in parameter i's
// operands (InplaceMapInterface: the pairs follow the operand count), and
// each update computes what the single op's kernel computes, element for
// element, so results are bit-identical to the unmerged ops'.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "kiln/dialect/optimizer_ops.h"
#include "kiln/ir/inplace_pairs.h"

namespace kiln {

// The layout of a merged op over single op `Single`: its operands but the
// learning rate form one parameter's group.
template <typename Single>
struct MergedLayout {
  // Index of the learning rate among the single op's operands.
  static constexpr std::uint32_t lr = [] {
    for (std::uint32_t i = 0; i < Single::operand_names.size(); ++i)
      if (Single::operand_names[i] == "learning_rate") return i;
    return std::uint32_t(-1);
  }();
  static constexpr std::uint32_t operands = Single::num_operands - 1;  // per parameter
  static constexpr std::uint32_t results = Single::num_results;       // per parameter
  // The merged op's operand holding single operand `i` of parameter `k`.
  static constexpr std::uint32_t operand(std::uint32_t k, std::uint32_t i) {
    return i == lr ? 0 : 1 + k * operands + (i < lr ? i : i - 1);
  }
  static constexpr std::uint32_t result(std::uint32_t k, std::uint32_t r) { return k * results + r; }
};

// What the four merged ops share: build, the per-parameter InferMeta of
// the single op (errors name the merged op, the parameter and the operand)
// and the alias pairs.
template <typename Merged, typename Single>
struct MergedUpdateBase : Op<Merged, Inplace, InferMetaInterface, InplaceMapInterface> {
  using Op<Merged, Inplace, InferMetaInterface, InplaceMapInterface>::Op;
  using SingleOp = Single;
  using Layout = MergedLayout<Single>;
  static constexpr int num_operands = -1, num_results = -1;
  // Empty: the pairs are the operation's (inplace_pairs).
  static constexpr std::array<AliasPair, 0> inplace_map{};
  // Number of parameters an op with `num_operands` operands updates (a
  // kiln::Error naming the op when the count is not 1 + k·operands, plus
  // one with the skip flag, k ≥ 1).
  static std::uint32_t parameter_count(std::size_t num_operands);
  // Whether the last of `num_operands` operands is the skip flag: one more
  // than whole groups (a group has at least two operands, so the two
  // counts never meet).
  static constexpr bool has_skip(std::size_t num_operands) {
    return num_operands >= 2 && (num_operands - 1) % Layout::operands == 1;
  }
  static void inplace_pairs(const Operation& op, std::vector<AliasPair>& out);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

struct MergedSgd_Op : MergedUpdateBase<MergedSgd_Op, Sgd_Op> {
  using MergedUpdateBase::MergedUpdateBase;
  static constexpr std::string_view name = "kiln.merged_sgd_";
  // `members`: each parameter's operands in Sgd_Op's order, learning rate
  // left out (it is `lr`).
  static void build(Builder& b, OperationArgument& arg, Value lr, const std::vector<Value>& members,
                    Value skip = {});
};

struct MergedMomentum_Op : MergedUpdateBase<MergedMomentum_Op, Momentum_Op> {
  using MergedUpdateBase::MergedUpdateBase;
  static constexpr std::string_view name = "kiln.merged_momentum_";
  using Attributes = Momentum_Op::Attributes;
  static void build(Builder& b, OperationArgument& arg, Value lr, const std::vector<Value>& members,
                    const Attributes& attrs, Value skip = {});
};

struct MergedAdam_Op : MergedUpdateBase<MergedAdam_Op, Adam_Op> {
  using MergedUpdateBase::MergedUpdateBase;
  static constexpr std::string_view name = "kiln.merged_adam_";
  using Attributes = Adam_Op::Attributes;
  static void build(Builder& b, OperationArgument& arg, Value lr, const std::vector<Value>& members,
                    const Attributes& attrs, Value skip = {});
};

struct MergedAdamW_Op : MergedUpdateBase<MergedAdamW_Op, AdamW_Op> {
  using MergedUpdateBase::MergedUpdateBase;
  static constexpr std::string_view name = "kiln.merged_adamw_";
  using Attributes = AdamW_Op::Attributes;
  static void build(Builder& b, OperationArgument& arg, Value lr, const std::vector<Value>& members,
                    const Attributes& attrs, Value skip = {});
};

}  // namespace kiln

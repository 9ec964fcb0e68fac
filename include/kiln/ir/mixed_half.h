// MixedHalfInterface: the operands an op reads in bf16 or f16 beside f32
// operands that stay f32, and the results whose dtype follows theirs — a
// batch norm's x (and y) with its f32 scale, bias and running statistics,
// as cuDNN's and PyTorch's mixed batch norm. Its kernels compute in f32.
// Mixed precision (kiln/frontend/amp.h) lets such an op read a value it
// made low as it is, without a cast back to f32, and the results that
// follow are then low; the op's other operands are never cast. A property
// of the op type, declared with it (as HalfOperandsInterface,
// kiln/ir/half_operands.h).
#pragma once

#include <cstdint>
#include <span>

#include "kiln/ir/op_base.h"

namespace kiln {

// An op with MixedHalfInterface declares
//   static constexpr std::array<std::uint32_t, N> mixed_half_operands{…};
//   static constexpr std::array<std::uint32_t, M> mixed_half_results{…};
// the indices of those operands (all 16-bit together, or none) and of the
// results that then have their dtype; its InferMeta accepts that mix, and
// it registers kernels for bf16 / f16 (its kernel dtype: the first of
// those operands'). Where a target lacks them, amp keeps the casts.
class MixedHalfInterface : public OpInterfaceBase<MixedHalfInterface> {
 public:
  struct Concept {
    std::span<const std::uint32_t> operands, results;
  };
  template <typename ConcreteOp>
  struct Model : Concept {
    static_assert(requires {
      std::span<const std::uint32_t>(ConcreteOp::mixed_half_operands);
      std::span<const std::uint32_t>(ConcreteOp::mixed_half_results);
    }, "an op with MixedHalfInterface must declare static constexpr std::array<std::uint32_t, N> "
       "mixed_half_operands{...} and mixed_half_results{...}");
    constexpr Model() : Concept{ConcreteOp::mixed_half_operands, ConcreteOp::mixed_half_results} {}
  };

  using OpInterfaceBase::OpInterfaceBase;
  // The operands that may be 16-bit, and the results that follow them.
  std::span<const std::uint32_t> half_operands() const { return concept_table<Concept>()->operands; }
  std::span<const std::uint32_t> half_results() const { return concept_table<Concept>()->results; }
  bool reads_half(std::uint32_t i) const {
    for (std::uint32_t k : half_operands())
      if (k == i) return true;
    return false;
  }
};

}  // namespace kiln

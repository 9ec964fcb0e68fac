// HalfOperandsInterface: the operands an op's kernels read in bf16 or f16
// as they are (widening each element to f32 themselves, or reading only its
// dims), so that the op gives for a 16-bit operand there the results, types
// and values, it gives for that operand cast to f32 — cross_entropy's
// logits, the operand of shape and numel. Mixed precision
// (kiln/frontend/amp.h) reads a 16-bit value there without a cast back to
// f32. A property of the op type, declared with it (seed 002 §2.2.1's
// concept/model idiom).
#pragma once

#include <cstdint>
#include <span>

#include "kiln/ir/op_base.h"

namespace kiln {

// An op with HalfOperandsInterface declares
//   static constexpr std::array<std::uint32_t, N> half_operands{…};
// the indices of those operands; the op also registers its kernels for
// bf16 / f16 (where a target lacks them, amp keeps the cast).
class HalfOperandsInterface : public OpInterfaceBase<HalfOperandsInterface> {
 public:
  struct Concept {
    std::span<const std::uint32_t> operands;
  };
  template <typename ConcreteOp>
  struct Model : Concept {
    static_assert(requires { std::span<const std::uint32_t>(ConcreteOp::half_operands); },
                  "an op with HalfOperandsInterface must declare static constexpr "
                  "std::array<std::uint32_t, N> half_operands{...}");
    constexpr Model() : Concept{ConcreteOp::half_operands} {}
  };

  using OpInterfaceBase::OpInterfaceBase;
  // Whether operand i is one of them.
  bool reads_half_as_f32(std::uint32_t i) const {
    for (std::uint32_t k : concept_table<Concept>()->operands)
      if (k == i) return true;
    return false;
  }
};

}  // namespace kiln

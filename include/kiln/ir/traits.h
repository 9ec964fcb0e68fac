// The traits kiln's scheduler and passes read (seed 002 §2.2.1 / §2.5,
// seed 001 §3.3.1): ReadOnly, ValueSemantics, Inplace (output → input alias
// pairs), ViewLike, Random, SideEffect, Communication; and the structural
// Terminator and IsolatedFromAbove of ops with regions. A trait may define
// `static void verify_trait(Operation*)`, run by the verifier.
#pragma once

#include "kiln/ir/op_base.h"

namespace kiln {

// The op never writes its operands.
class ReadOnly : public OpTraitBase<ReadOnly> {};

// Operands and results are values (vtensor-like): no aliasing at all.
class ValueSemantics : public OpTraitBase<ValueSemantics> {};

// Some outputs reuse the memory of some inputs. The op declares
//   static constexpr std::array<std::pair<std::uint32_t, std::uint32_t>, N>
//       inplace_map{{{out, in}, …}};
// An output and the input it aliases must have the same type.
class Inplace : public OpTraitBase<Inplace> {
 public:
  static void verify_trait(Operation* op);
};

// Some outputs are views of inputs (same buffer, other shape). The op declares
// `view_map` like Inplace's `inplace_map`.
class ViewLike : public OpTraitBase<ViewLike> {
 public:
  static void verify_trait(Operation* op);
};

// Ends a block: the op must be the last of its block, and not in a
// program's top block (kiln.yield ends the regions of kiln.if / kiln.while).
class Terminator : public OpTraitBase<Terminator> {};
// The op's regions see nothing outside them: a value an inner op uses is
// defined inside the region or is one of its blocks' arguments (which the op
// binds to its operands). Control flow declares it, so everything a region
// reads from outside is an operand — the scheduler's dependencies, the
// backward pass's gradients and the executor's bindings then follow operands
// alone. The verifier checks it (Program::verify).
class IsolatedFromAbove : public OpTraitBase<IsolatedFromAbove> {};
// Draws random numbers: random ops keep program order among themselves.
class Random : public OpTraitBase<Random> {};

// Effects beyond its results (fetch, print, I/O): keeps program order.
class SideEffect : public OpTraitBase<SideEffect> {};

// A collective: communication ops keep program order.
class Communication : public OpTraitBase<Communication> {};

}  // namespace kiln

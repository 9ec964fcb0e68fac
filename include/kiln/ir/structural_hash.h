// structural_hash: a 64-bit hash of a Program's structure (seed 002 §2.1.4) —
// every op's name, attributes and result types, block argument types, the
// use-def edges, the regions and blocks, and the named parameters. Computed
// in the IR layer, without serializing the program.
#pragma once

#include <cstdint>

namespace kiln {

class Program;

// Equal for a program and its clone(), and for two programs built the same
// way; any change to the structure above changes it (barring a 64-bit
// collision). Operands are hashed as the number of the value they use, values
// numbered in definition order (block arguments, then each op's nested
// regions, then its results), as the Executor numbers them.
//
// Stable within one process only: types and attributes are hashed by the
// identity of their uniqued storage (std::hash<Type> / std::hash<Attribute>),
// which the process-wide IrContext keeps for the life of the process. A large
// constant's tensor is a held attribute (TensorAttribute::get_or_hold), one
// per load, parse or import: two loads of one program with such a constant
// hash differently (compiled twice, never confused). Use
// content_hash (kiln/io/json.h) for a hash that other processes can compare.
//
// Never throws for a malformed program: a null operand, or one using a value
// defined outside the program, is hashed as such (the latter by its identity).
std::uint64_t structural_hash(const Program& program);

}  // namespace kiln

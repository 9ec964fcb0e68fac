// Value semantics and in-place ops (seed 002 §2.5.2): two passes over an op
// and its twin — `kiln.relu` and `kiln.relu_` — that compute the same thing,
// one into a new buffer, one into its operand's.
//
// "pure" turns an in-place op whose write only its own later readers see
// into its pure twin: b = relu_(a) becomes b = relu(a), and every reader of
// a after it reads b. The program then says through SSA what the variable
// said through program order, and the ops around it are free to move: an
// in-place op is a barrier to fusion and orders the ops around it.
//
// "inplace" does the reverse where it saves a buffer (Paddle's inplace
// pass): b = relu(a) becomes b = relu_(a) when a dies at that op — its last
// reader, read once there; not a parameter, a feed, a block argument or a
// live-out value; not a view, nor viewed, nor kept by another op
// (set_parameter, fetch, control flow); of b's type (static dims for an op
// with more than one operand: a broadcast would change the size); neither
// op placed on a stream.
//
// Both change an op only into a twin with a kernel for the op's dtype at
// the program's target (PassContext::target_place): relu_ has no bf16
// kernel where relu has one, and a device may have one twin's kernel and
// not the other's.
#pragma once

#include <cstddef>
#include <memory>

#include "kiln/ir/block.h"
#include "kiln/passes/pass.h"

namespace kiln {

// The number of ops each changed in `block` (not its regions).
std::size_t make_pure(Block& block, PassContext& ctx);
std::size_t make_inplace(Block& block, PassContext& ctx);

std::unique_ptr<Pass> create_pure_pass();     // "pure"
std::unique_ptr<Pass> create_inplace_pass();  // "inplace"

}  // namespace kiln

// Common-subexpression elimination ("cse"): an op equal to an earlier one —
// same kind, operands, attributes (one uniqued dictionary: a pointer
// compare) and result types — is replaced by it. Only ops that are
// ReadOnly or ViewLike, have no regions and are neither Random, SideEffect,
// Communication nor Inplace take part, and never one whose results some op
// writes in place. Scopes follow dominance: an op of a block sees earlier
// ops of its block and, unless the region's op is IsolatedFromAbove (kiln.if
// and kiln.while are), of the enclosing blocks.
#pragma once

#include <memory>

#include "kiln/passes/pass.h"

namespace kiln {

std::unique_ptr<Pass> create_cse_pass();

}  // namespace kiln

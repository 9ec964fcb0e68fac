// Algebraic simplification ("simplify") as rewrite patterns: x·1, 1·x,
// x+0, 0+x, x−0, x/1 → x (only where the result's type is x's: a
// broadcast may change the shape); transpose∘transpose → one transpose
// (composed perms) or x; reshape∘reshape → one reshape; a cast to x's own
// dtype → x; scale by 1 with bias 0 → x. A value some op writes in place is
// never replaced (it is a buffer, not a value). As a pattern pass it also
// erases every dead op of the block (the greedy driver's rule, pattern.h):
// what the rewrites leave unused, and anything else unused that has no
// effect and is not live-out.
#pragma once

#include <memory>

#include "kiln/passes/pattern.h"

namespace kiln {

// The patterns, for a user's own PatternSet.
void add_simplify_patterns(PatternSet& patterns);
std::unique_ptr<Pass> create_simplify_pass(GreedyRewriteConfig config = {});

}  // namespace kiln

// Captures of detached blocks: the outer values that ops of the bodies of a
// control-flow op being built read become block arguments, and the op takes
// the outer values as operands (control-flow ops are IsolatedFromAbove:
// kiln/dialect/control_flow_ops.h).
#pragma once

#include <string_view>
#include <vector>

#include "kiln/ir/value.h"

namespace kiln {

class Block;  // kiln/ir/block.h

// The values that ops of `blocks` use and that are defined outside all of
// them, in first-use order (blocks in order, ops in order, operands in
// order). Every block gets one new argument per such value, appended after
// its existing arguments in that order, and its uses are rewired to it. The
// scan descends into the regions of nested ops, except those of
// IsolatedFromAbove ops: their operands are their only uses of outer values.
// An op of one block that uses a value defined in another of `blocks` is a
// kiln::Error(InvalidArgument) from `who`, naming both blocks (`names[i]`,
// or "block #i" without names), and nothing changes.
std::vector<Value> capture_external_values(const std::vector<Block*>& blocks,
                                           std::string_view who = "capture",
                                           const std::vector<std::string_view>& names = {});

}  // namespace kiln

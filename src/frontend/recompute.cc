#include "kiln/frontend/recompute.h"

#include <algorithm>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "kiln/dialect/builtin.h"
#include "kiln/dialect/io_ops.h"
#include "kiln/frontend/op_role.h"
#include "kiln/ir/ir_mapping.h"
#include "kiln/ir/region.h"
#include "kiln/passes/op_effects.h"
#include "kiln/support/error.h"

namespace kiln {
namespace {

using Positions = std::unordered_map<const Operation*, std::size_t>;
using Writes = std::unordered_map<const detail::ValueImpl*, std::vector<std::size_t>>;

// The op of `block` that holds `op`: itself, or the region op around it.
Operation* top_level(Operation* op, const Block& block) {
  while (op && op->parent_block() != &block) op = op->parent_op();
  return op;
}

// A parameter's or a feed's value: held for the whole run anyway, so
// computing it again would free nothing.
bool held_anyway(const Operation* op) { return op->isa<ParameterOp>() || op->isa<DataOp>(); }

// Records the buffers `op` and the ops nested in it write in place, at `at`.
void note_writes(const Operation& op, std::size_t at, Writes& writes) {
  for (std::uint32_t i : written_operands(op)) writes[alias_root(op.operand(i).source()).impl()].push_back(at);
  for (std::uint32_t r = 0; r < op.num_regions(); ++r)
    for (Block* inner : op.region(r))
      for (Operation* nested : *inner) note_writes(*nested, at, writes);
}

// Where each top-level op of `block` is, and at which of those positions
// each buffer (an alias root) is written in place, nested writes counting
// at their top-level op.
void number(Block& block, Positions& pos, Writes& writes) {
  pos.clear();
  writes.clear();
  std::size_t k = 0;
  for (Operation* top : block) {
    pos[top] = k;
    note_writes(*top, k, writes);
    ++k;
  }
}

// Whether `v`'s buffer is written in place strictly between positions a and b.
bool written_between(Value v, std::size_t a, std::size_t b, const Writes& writes) {
  auto it = writes.find(alias_root(v).impl());
  if (it == writes.end()) return false;
  return std::any_of(it->second.begin(), it->second.end(), [&](std::size_t p) { return p > a && p < b; });
}

// Whether a copy of `op` placed at position `at` computes what `op` did at
// its own place: no effect, no regions, no in-place write, and nothing it
// reads or defines is written in place in between.
bool safe_to_repeat(Operation* op, std::size_t at, const Positions& pos, const Writes& writes) {
  if (op->num_regions() || has_effect(*op) || !written_operands(*op).empty()) return false;
  const std::size_t a = pos.at(op);
  for (std::uint32_t i = 0; i < op->num_operands(); ++i)
    if (written_between(op->operand(i).source(), a, at, writes)) return false;
  for (std::uint32_t r = 0; r < op->num_results(); ++r)
    if (written_between(op->result(r), a, at, writes)) return false;
  return true;
}

// The position of the first backward op reading one of `values`; `none` if none does.
std::size_t first_backward_reader(const std::vector<Value>& values, const Block& block, const Positions& pos,
                                  std::size_t none) {
  std::size_t first = none;
  for (Value v : values)
    for (OpOperand use : v.uses()) {
      Operation* top = top_level(use.owner(), block);
      if (top && op_role(top) == OpRole::Backward) first = std::min(first, pos.at(top));
    }
  return first;
}

// One segment's recompute: the ops to clone (in program order) and the
// values the backward will read from the clones.
struct SegmentPlan {
  std::vector<Operation*> clone;
  std::vector<Value> values;
};

// The segment's ops that computing `wanted` again at position `at` needs,
// walking operands back inside the segment; an op not safe to repeat keeps
// its results (they are read as they are, like a checkpoint's).
SegmentPlan plan_segment(const std::vector<Operation*>& segment, const std::vector<Value>& wanted,
                         std::size_t at, const Positions& pos, const Writes& writes) {
  std::unordered_set<Operation*> in_segment(segment.begin(), segment.end()), cloned, seen;
  std::vector<Operation*> work;
  for (Value v : wanted) work.push_back(v.defining_op());
  while (!work.empty()) {
    Operation* op = work.back();
    work.pop_back();
    if (!seen.insert(op).second || !safe_to_repeat(op, at, pos, writes)) continue;
    cloned.insert(op);
    for (std::uint32_t i = 0; i < op->num_operands(); ++i)
      if (Operation* def = op->operand(i).source().defining_op(); def && in_segment.count(def) && !held_anyway(def))
        work.push_back(def);
  }
  SegmentPlan plan;
  for (Operation* op : segment)
    if (cloned.count(op)) plan.clone.push_back(op);
  for (Value v : wanted)
    if (cloned.count(v.defining_op())) plan.values.push_back(v);
  return plan;
}

// The values `segment` defines, other than checkpoints, that a backward op reads.
std::vector<Value> read_by_backward(const std::vector<Operation*>& segment,
                                    const std::unordered_set<const detail::ValueImpl*>& checkpoints,
                                    const Block& block) {
  std::vector<Value> out;
  for (Operation* op : segment)
    for (std::uint32_t r = 0; r < op->num_results() && !held_anyway(op); ++r) {
      Value v = op->result(r);
      if (checkpoints.count(v.impl())) continue;
      for (OpOperand use : v.uses())
        if (Operation* top = top_level(use.owner(), block); top && op_role(top) == OpRole::Backward) {
          out.push_back(v);
          break;
        }
    }
  return out;
}

// Recomputes one segment; returns how many ops it cloned.
std::size_t recompute_segment(Block& block, const std::vector<Operation*>& segment,
                              const std::unordered_set<const detail::ValueImpl*>& checkpoints,
                              RecomputeResult& result) {
  Positions pos;
  Writes writes;
  number(block, pos, writes);
  const std::vector<Value> wanted = read_by_backward(segment, checkpoints, block);
  const std::size_t none = pos.size();
  std::size_t at = first_backward_reader(wanted, block, pos, none);
  SegmentPlan plan;
  // A later insertion point widens the window an in-place write may fall
  // in, so the plan is made again until the point stays (it only moves on).
  for (std::size_t next = at; at != none; at = next) {
    plan = plan_segment(segment, wanted, at, pos, writes);
    next = first_backward_reader(plan.values, block, pos, none);
    if (next == at || next == none) break;
  }
  if (plan.values.empty()) return 0;
  Operation* before = nullptr;
  for (Operation* top : block)
    if (pos.at(top) == at) before = top;
  IrMapping map;
  std::unordered_set<Operation*> clones;
  for (Operation* op : plan.clone) {
    Operation* c = op->clone(map);
    block.insert(before, c);
    set_op_role(c, OpRole::Backward);
    clones.insert(c);
  }
  for (Value v : plan.values)
    v.replace_uses_if(map.lookup(v), [&](OpOperand use) {
      Operation* top = top_level(use.owner(), block);
      return top && op_role(top) == OpRole::Backward && !clones.count(top);
    });
  ++result.segments;
  result.values += plan.values.size();
  return plan.clone.size();
}

}  // namespace

RecomputeResult recompute(Program& program, const std::vector<Value>& checkpoints) {
  Block& block = program.block();
  std::vector<Operation*> forward;
  Positions index;
  bool has_backward = false;
  for (Operation* op : block) {
    if (op_role(op) == OpRole::Backward) has_backward = true;
    if (has_backward || op_role(op) != OpRole::Forward) continue;
    index[op] = forward.size();
    forward.push_back(op);
  }
  if (!has_backward)
    throw_error(ErrorKind::InvalidArgument, "recompute: the program has no backward ops (run append_backward "
                "or an optimizer's minimize first)");
  if (checkpoints.size() < 2)
    throw_error(ErrorKind::InvalidArgument, "recompute: needs at least two checkpoints, got ",
                checkpoints.size());
  std::unordered_set<const detail::ValueImpl*> marked;
  std::vector<std::size_t> cuts;
  for (std::size_t k = 0; k < checkpoints.size(); ++k) {
    Value c = checkpoints[k];
    Operation* def = c ? c.defining_op() : nullptr;
    if (!def || !index.count(def))
      throw_error(ErrorKind::InvalidArgument, "recompute: checkpoint #", k,
                  c ? " is not a result of a forward op of the program's top-level block"
                    : " is a null value");
    if (!marked.insert(c.impl()).second)
      throw_error(ErrorKind::InvalidArgument, "recompute: checkpoint #", k, " (a result of '", def->name(),
                  "') is given twice");
    cuts.push_back(index.at(def));
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  RecomputeResult result;
  // Last segment first: the backward meets it first, and a segment's clones
  // may read an earlier segment's values, which that segment's recompute
  // then gives them too.
  for (std::size_t s = cuts.size(); s-- > 1;) {
    std::vector<Operation*> segment(forward.begin() + std::ptrdiff_t(cuts[s - 1] + 1),
                                    forward.begin() + std::ptrdiff_t(cuts[s] + 1));
    result.ops += recompute_segment(block, segment, marked, result);
  }
  return result;
}

}  // namespace kiln

// What the rewrite passes ask of an op before they remove, merge or move it:
// whether it has effects beyond its results (the traits Random, SideEffect,
// Communication; an Inplace write to state that outlives the program; an
// op of unknown behaviour), which operands it writes, and which values
// alias which (seed 002 §2.5: tensor vs vtensor — only values that nothing
// writes in place may be merged or replaced).
#pragma once

#include <cstdint>
#include <unordered_set>
#include <vector>

#include "kiln/ir/operation.h"
#include "kiln/passes/pass.h"

namespace kiln {

// The operand indices an Inplace op writes (its inplace_map's inputs);
// empty for other ops.
std::vector<std::uint32_t> written_operands(const Operation& op);

// The value whose buffer `v` is: followed back through Inplace outputs
// (to the operand they alias) and ViewLike outputs (to the viewed operand).
Value alias_root(Value v);

// Whether some op writes `v` in place (v is a written operand of an Inplace
// op).
bool is_written_in_place(Value v);

// Whether some op writes in place a value sharing `v`'s buffer (the values
// whose alias_root is v's). Such a write changes the variable for every
// reader after it in program order, so `v` is not a constant, and two reads
// of it are not one value.
// With a PassContext that has a program, answered from its AliasInfo.
bool alias_written_in_place(Value v, const PassContext* ctx = nullptr);

// Whether `v`'s buffer is more than a value: some op writes in place a
// value sharing it (the values whose alias_root is v's), or an op keeps or
// hands it on — builtin.set_parameter (the parameter takes the buffer),
// kiln.fetch, control flow, any op neither ReadOnly, ViewLike nor Inplace.
// Such a value may not be merged with or replaced by another value, nor
// another by it: two parameters set from one merged buffer would update
// each other in place.
bool is_buffer(Value v, const PassContext* ctx = nullptr);

// alias_written_in_place and is_buffer for every value of a program at
// once: the alias roots of the buffers, gathered in one walk, so that each
// query is an alias_root walk and a hash look-up instead of a scan of the
// buffer's uses (a constant read by thousands of ops). A PassContext keeps
// one per pass (PassContext::aliases): kiln's passes only remove writes
// and captures or replace values that have none, so it stays true — or
// errs on the safe side — while they run.
class AliasInfo {
 public:
  explicit AliasInfo(const Program& program);
  bool written_in_place(Value v) const { return written_.count(alias_root(v).impl()) != 0; }
  bool is_buffer(Value v) const { return buffers_.count(alias_root(v).impl()) != 0; }

 private:
  std::unordered_set<const detail::ValueImpl*> written_, buffers_;
};

// Whether erasing `op` (its results unused) could change what a run does:
//  - Random (kept: it advances the generator, so removing one would change
//    every later draw), SideEffect, Communication, Terminator;
//  - kiln.data, and any op that is neither ReadOnly, ViewLike nor Inplace
//    (an op of unknown behaviour, e.g. kiln.recv, kiln.array_create);
//  - an Inplace op whose write can be seen: kiln's in-place updates change
//    the variable, which every later reader of a value sharing the buffer
//    sees (program order decides). Seen when the buffer is a parameter's, a
//    fed kiln.data's or a block argument's (a region's outer value), when a
//    live-out value of `ctx` shares it, or when another op reads a value
//    sharing it;
//  - an op with regions holding such an op.
bool has_effect(const Operation& op, const PassContext* ctx = nullptr);

// Whether the user placed `op` where it runs: an execution_stream attribute
// (kiln/exec/execution_options.h) or a kiln.place (kiln/exec/partitioner.h).
// Folding, merging or fusing it would drop that choice (and hide a bad
// attribute the plan builder reports), so those passes leave it as written.
bool has_placement(const Operation& op);

}  // namespace kiln

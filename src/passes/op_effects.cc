// Effect and alias queries of the rewrite passes.
#include "kiln/passes/op_effects.h"

#include "kiln/dialect/builtin.h"
#include "kiln/dialect/io_ops.h"
#include "kiln/dialect/placement_attributes.h"
#include "kiln/ir/inplace_pairs.h"
#include "kiln/ir/region.h"
#include "kiln/ir/traits.h"

namespace kiln {

std::vector<std::uint32_t> written_operands(const Operation& op) {
  std::vector<std::uint32_t> out;
  if (!op.has_trait<Inplace>()) return out;
  for (const auto& [res, in] : inplace_pairs(op)) out.push_back(in);
  return out;
}

namespace {

// The operand result #r of `op` aliases (Inplace or ViewLike), or -1.
std::int64_t aliased_operand(const Operation& op, std::uint32_t r) {
  const auto* impl = op.info().impl();
  if (op.has_trait<Inplace>())
    for (const auto& [res, in] : inplace_pairs(op))
      if (res == r) return in;
  if (op.has_trait<ViewLike>())
    for (const auto& [res, in] : impl->view_map)
      if (res == r) return in;
  return -1;
}

}  // namespace

Value alias_root(Value v) {
  while (Operation* def = v.defining_op()) {
    const std::int64_t in = aliased_operand(*def, cast<OpResult>(v).index());
    if (in < 0 || static_cast<std::uint32_t>(in) >= def->num_operands()) break;
    v = def->operand_source(static_cast<std::uint32_t>(in));
  }
  return v;
}

bool is_written_in_place(Value v) {
  for (OpOperand use : v.uses()) {
    Operation* user = use.owner();
    if (!user->has_trait<Inplace>()) continue;
    for (const auto& [res, in] : inplace_pairs(*user))
      if (in == use.index()) return true;
  }
  return false;
}

namespace {

// Calls f(value) for `root` and every value aliasing it (Inplace and
// ViewLike results over it, transitively) until f returns true.
template <typename F>
bool any_in_alias_class(Value root, F&& f) {
  if (f(root)) return true;
  for (OpOperand use : root.uses()) {
    Operation* user = use.owner();
    const auto* impl = user->info().impl();
    if (user->has_trait<Inplace>())
      for (const auto& [res, in] : inplace_pairs(*user))
        if (in == use.index() && res < user->num_results() &&
            any_in_alias_class(user->result(res), f))
          return true;
    if (user->has_trait<ViewLike>())
      for (const auto& [res, in] : impl->view_map)
        if (in == use.index() && res < user->num_results() &&
            any_in_alias_class(user->result(res), f))
          return true;
  }
  return false;
}

// Whether `op` writing `v` in place can be seen: kiln's in-place updates
// change a variable, so every later reader of any value sharing the buffer
// sees them (program order decides, as in Paddle's programs). Seen when the
// buffer is a parameter's, a fed value's or a block argument's (an outer
// value), when a live-out value shares it, or when any op but `op` reads
// a value sharing it (conservatively, wherever that reader is).
bool write_seen(const Operation& op, Value v, const PassContext* ctx) {
  Value root = alias_root(v);
  Operation* def = root.defining_op();
  if (!def) return true;  // a block argument: the region's op binds it to an outer value
  if (def->isa<ParameterOp>() || def->isa<DataOp>()) return true;
  return any_in_alias_class(root, [&](Value a) {
    if (ctx && ctx->is_protected(a)) return true;
    for (OpOperand use : a.uses())
      if (use.owner() != &op) return true;
    return false;
  });
}

}  // namespace

bool alias_written_in_place(Value v, const PassContext* ctx) {
  if (const AliasInfo* info = ctx ? ctx->aliases() : nullptr) return info->written_in_place(v);
  return any_in_alias_class(alias_root(v), [](Value a) { return is_written_in_place(a); });
}

bool is_buffer(Value v, const PassContext* ctx) {
  if (const AliasInfo* info = ctx ? ctx->aliases() : nullptr) return info->is_buffer(v);
  return any_in_alias_class(alias_root(v), [](Value a) {
    for (OpOperand use : a.uses()) {
      Operation* user = use.owner();
      if (user->has_trait<Inplace>()) {
        for (const auto& [res, in] : inplace_pairs(*user))
          if (in == use.index()) return true;
        continue;
      }
      if (!user->has_trait<ReadOnly>() && !user->has_trait<ViewLike>()) return true;
    }
    return false;
  });
}

AliasInfo::AliasInfo(const Program& program) {
  for (Block* b : blocks_innermost_first(program))
    for (Operation* op : *b) {
      const bool inplace = op->has_trait<Inplace>();
      if (inplace)
        for (std::uint32_t in : written_operands(*op)) {
          if (in >= op->num_operands()) continue;
          const auto* root = alias_root(op->operand_source(in)).impl();
          written_.insert(root);
          buffers_.insert(root);
        }
      else if (!op->has_trait<ReadOnly>() && !op->has_trait<ViewLike>())
        for (std::uint32_t i = 0; i < op->num_operands(); ++i)
          buffers_.insert(alias_root(op->operand_source(i)).impl());
    }
}

bool has_effect(const Operation& op, const PassContext* ctx) {
  if (op.has_trait<Random>() || op.has_trait<SideEffect>() || op.has_trait<Communication>() ||
      op.has_trait<Terminator>())
    return true;
  if (op.isa<DataOp>()) return true;
  const bool inplace = op.has_trait<Inplace>();
  if (op.num_regions() == 0 && !inplace && !op.has_trait<ReadOnly>() && !op.has_trait<ViewLike>())
    return true;  // unknown behaviour
  if (inplace)
    for (std::uint32_t in : written_operands(op))
      if (in < op.num_operands() && write_seen(op, op.operand_source(in), ctx)) return true;
  for (std::uint32_t r = 0; r < op.num_regions(); ++r)
    for (Block* b : op.region(r))
      for (Operation* inner : *b)
        if (!inner->has_trait<Terminator>() && has_effect(*inner, nullptr)) return true;
  return false;
}

bool has_placement(const Operation& op) {
  return op.attribute(kExecutionStreamAttr) || op.attribute(kPlaceAttr);
}

}  // namespace kiln

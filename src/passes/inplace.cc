// The "pure" and "inplace" passes: an op and its in-place twin, found by
// name (kiln.relu ↔ kiln.relu_), swapped where kiln's semantics allow.
#include "kiln/passes/inplace.h"

#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/dialect/builtin.h"
#include "kiln/dialect/io_ops.h"
#include "kiln/ir/ir_context.h"
#include "kiln/ir/traits.h"
#include "kiln/kernel/kernel_registry.h"
#include "kiln/passes/op_effects.h"

namespace kiln {

namespace {

// Result 0 of an in-place op aliases operand 0.
bool writes_operand_zero(OpInfo info) {
  for (const auto& [res, in] : info.impl()->inplace_map)
    if (res == 0 && in == 0) return true;
  return false;
}

// Whether `twin` has a kernel at `place` for the dtype `op`'s kernel is
// chosen by (a twin may have fewer: relu_ has no bf16 kernel where relu has,
// cross_entropy_grad_ none on a device where cross_entropy_grad has one).
bool has_kernel(OpInfo twin, const Operation& op, Place place) {
  return KernelRegistry::instance().find(twin.id(), place.kind, kernel_dtype(op)) != nullptr;
}

// kiln.relu → kiln.relu_ (an Inplace op writing operand 0), or null.
OpInfo inplace_twin(const Operation& op, Place place) {
  if (op.has_trait<Inplace>() || !op.has_trait<ReadOnly>() || op.num_results() != 1) return {};
  OpInfo twin = IrContext::instance()->find_op(op.name() + "_");
  return twin && twin.has_trait<Inplace>() && writes_operand_zero(twin) && has_kernel(twin, op, place)
             ? twin
             : OpInfo{};
}

// kiln.relu_ → kiln.relu (a ReadOnly op), or null.
OpInfo pure_twin(const Operation& op, Place place) {
  const std::string& name = op.name();
  if (!op.has_trait<Inplace>() || op.num_results() != 1 || name.size() < 2 || name.back() != '_' ||
      !writes_operand_zero(op.info()))
    return {};
  OpInfo twin = IrContext::instance()->find_op(std::string_view(name).substr(0, name.size() - 1));
  return twin && twin.has_trait<ReadOnly>() && !twin.has_trait<Inplace>() && has_kernel(twin, op, place)
             ? twin
             : OpInfo{};
}

// A value whose buffer is the program's own and nobody else's: defined in
// `block` by an op that makes a new buffer (not a parameter, a feed, a view
// or an in-place update), not live-out, with every reader in `block` and
// none that views it or keeps it (fetch, set_parameter, control flow, an op
// of unknown behaviour).
bool private_buffer(Value a, const Block& block, const PassContext& ctx) {
  Operation* def = a.defining_op();
  if (!def || def->parent_block() != &block || ctx.is_protected(a) || has_placement(*def)) return false;
  if (def->isa<ParameterOp>() || def->isa<DataOp>() || def->has_trait<ViewLike>() ||
      def->has_trait<Inplace>() || !def->has_trait<ReadOnly>())
    return false;
  for (OpOperand use : a.uses()) {
    Operation* u = use.owner();
    if (u->parent_block() != &block || u->num_regions() > 0 || u->has_trait<ViewLike>() ||
        u->has_trait<SideEffect>() || u->has_trait<Communication>())
      return false;
    if (!u->has_trait<ReadOnly>() && !u->has_trait<Inplace>()) return false;  // unknown: may keep it
  }
  return true;
}

bool all_static(Type t) {
  if (!is_shaped(t)) return false;
  for (std::int64_t d : shaped_dims(t))
    if (d < 0) return false;
  return true;
}

// Position of each op of `block`, for "before" questions.
std::unordered_map<const Operation*, std::size_t> positions(const Block& block) {
  std::unordered_map<const Operation*, std::size_t> pos;
  for (const Operation* op : block) pos.emplace(op, pos.size());
  return pos;
}

Operation* create_twin(OpInfo twin, Operation* op) {
  std::vector<Value> operands;
  for (std::uint32_t i = 0; i < op->num_operands(); ++i) operands.push_back(op->operand_source(i));
  Operation* made = Operation::create(operands, {op->result_type(0)}, op->attributes(), twin);
  op->parent_block()->insert(op, made);
  return made;
}

class PurePass : public Pass {
 public:
  PurePass() : Pass("pure") {}
  void run_on_block(Block& block, PassContext& ctx) override {
    make_pure(block, ctx);
  }
};

class InplacePass : public Pass {
 public:
  InplacePass() : Pass("inplace") {}
  void run_on_block(Block& block, PassContext& ctx) override {
    make_inplace(block, ctx);
  }
};

}  // namespace

std::size_t make_pure(Block& block, PassContext& ctx) {
  std::size_t changed = 0;
  auto pos = positions(block);
  for (Operation* op = block.front(); op;) {
    Operation* next = op->next_in_block();
    OpInfo twin = pure_twin(*op, ctx.target_place);
    if (!twin || has_placement(*op) || ctx.is_protected(op->result(0))) {
      op = next;
      continue;
    }
    Value a = op->operand_source(0);
    if (!private_buffer(a, block, ctx)) {
      op = next;
      continue;
    }
    Operation* made = create_twin(twin, op);
    pos[made] = pos.at(op);
    Value b = made->result(0);
    // Readers of a after the update read the updated value: b.
    std::vector<OpOperand> later;
    for (OpOperand use : a.uses())
      if (use.owner() != op && use.owner() != made && pos.at(use.owner()) > pos.at(op)) later.push_back(use);
    for (OpOperand use : later) use.set_source(b);
    ctx.replace_all_uses(op->result(0), b);
    ctx.erase_op(op);
    ++changed;
    op = next;
  }
  return changed;
}

std::size_t make_inplace(Block& block, PassContext& ctx) {
  std::size_t changed = 0;
  auto pos = positions(block);
  for (Operation* op = block.front(); op;) {
    Operation* next = op->next_in_block();
    OpInfo twin = inplace_twin(*op, ctx.target_place);
    if (!twin || op->num_operands() == 0 || has_placement(*op)) {
      op = next;
      continue;
    }
    Value a = op->operand_source(0);
    const Type t = op->result_type(0);
    // A vtensor (kiln/passes/value_semantics.h) is never written: it stays pure.
    bool ok = a.type() == t && a.type().isa<TensorType>() && (op->num_operands() == 1 || all_static(t)) &&
              private_buffer(a, block, ctx);
    // a dies here: read once by op, every other reader before it.
    for (std::uint32_t i = 1; ok && i < op->num_operands(); ++i) ok = op->operand_source(i) != a;
    if (ok)
      for (OpOperand use : a.uses())
        if (use.owner() != op && pos.at(use.owner()) > pos.at(op)) ok = false;
    if (!ok) {
      op = next;
      continue;
    }
    Operation* made = create_twin(twin, op);
    pos[made] = pos.at(op);
    ctx.replace_all_uses(op->result(0), made->result(0));
    ctx.erase_op(op);
    ++changed;
    op = next;
  }
  return changed;
}

std::unique_ptr<Pass> create_pure_pass() { return std::make_unique<PurePass>(); }
std::unique_ptr<Pass> create_inplace_pass() { return std::make_unique<InplacePass>(); }

KILN_REGISTER_PASS("pure", [] { return create_pure_pass(); },
                   "an in-place op whose write only its later readers see → its pure twin "
                   "(relu_ → relu), the readers reading the result");
KILN_REGISTER_PASS("inplace", [] { return create_inplace_pass(); },
                   "a pure op whose operand dies there → its in-place twin (relu → relu_): "
                   "one buffer fewer");

}  // namespace kiln

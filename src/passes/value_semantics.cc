// The "vtensor" pass (kiln/passes/value_semantics.h).
#include "kiln/passes/value_semantics.h"

#include <unordered_map>
#include <vector>

#include "kiln/dialect/value_semantics_ops.h"
#include "kiln/ir/builtin_types.h"
#include "kiln/ir/builder.h"
#include "kiln/ir/interfaces.h"
#include "kiln/passes/op_effects.h"

namespace kiln {

namespace {

// The operand types `op` would have with every tensor a vtensor.
std::vector<Type> as_vtensors(const Operation& op) {
  std::vector<Type> in = op.operand_types();
  for (Type& t : in)
    if (t.isa<TensorType>()) t = VTensorType::get(shaped_data_type(t), shaped_dims(t));
  return in;
}

// The result types of `op` over vtensor operands, or empty when it stays
// as written.
std::vector<Type> vtensor_results(Operation& op, const PassContext& ctx) {
  if (!op.info().has_trait<ValueSemantics>() || op.num_regions() != 0 || op.num_results() == 0 ||
      op.num_operands() == 0 || op.isa<ToVTensorOp>() || op.isa<ToTensorOp>() || has_placement(op) ||
      has_effect(op, &ctx))
    return {};
  auto im = op.dyn_cast<InferMetaInterface>();
  if (!im) return {};
  bool any_tensor = false;
  for (std::uint32_t i = 0; i < op.num_operands(); ++i) {
    const Type t = op.operand_source(i).type();
    if (!is_shaped(t)) return {};
    any_tensor = any_tensor || t.isa<TensorType>();
  }
  if (!any_tensor) return {};
  try {
    std::vector<Type> out = im.infer_meta(as_vtensors(op), op.attributes());
    return out.size() == op.num_results() ? out : std::vector<Type>{};
  } catch (const Error&) {
    return {};  // an op that takes no vtensor
  }
}

std::size_t insert_conversions(Block& block, PassContext& ctx) {
  std::unordered_map<const detail::ValueImpl*, Value> vtensor_of;
  std::vector<Operation*> ops;
  for (Operation* op : block) ops.push_back(op);
  std::size_t changed = 0;
  for (Operation* op : ops) {
    const std::vector<Type> out = vtensor_results(*op, ctx);
    if (out.empty()) continue;
    Builder b(block);
    for (std::uint32_t i = 0; i < op->num_operands(); ++i) {
      Value v = op->operand_source(i);
      if (!v.type().isa<TensorType>()) continue;
      auto [it, fresh] = vtensor_of.try_emplace(v.impl());
      if (fresh) {
        b.set_insertion_point(op);
        it->second = b.create<ToVTensorOp>(v).result();
      }
      op->set_operand(i, it->second);
    }
    b.set_insertion_point_after(op);
    for (std::uint32_t r = 0; r < op->num_results(); ++r) {
      Value result = op->result(r);
      if (out[r] == result.type()) continue;
      result.set_type(out[r]);
      // Readers (and a fetch of it) take the tensor; the conversion reads the vtensor.
      Value back = b.create<ToTensorOp>(result).result();
      ctx.replace_all_uses(result, back);
      back.defining_op()->set_operand(0, result);
      b.set_insertion_point_after(back.defining_op());
    }
    ++changed;
  }
  return changed;
}

// to_vtensor(to_tensor(a)) is a where nothing writes, views or keeps the tensor.
void remove_needless_pairs(Block& block, PassContext& ctx) {
  // The to_tensor ops alone: the to_vtensor ops erased below must not be
  // visited afterwards.
  std::vector<Operation*> ops;
  for (Operation* op : block)
    if (op->isa<ToTensorOp>()) ops.push_back(op);
  for (Operation* op : ops) {
    Value t = op->result(0), a = op->operand_source(0);
    bool plain = !is_buffer(t);
    for (OpOperand use : t.uses()) plain = plain && !use.owner()->info().has_trait<ViewLike>();
    if (!plain) continue;
    std::vector<Operation*> back;
    for (OpOperand use : t.uses())
      if (use.owner()->isa<ToVTensorOp>()) back.push_back(use.owner());
    for (Operation* v : back) {
      ctx.replace_all_uses(v->result(0), a);
      ctx.erase_op(v);
    }
    if (t.use_empty() && !ctx.is_protected(t)) ctx.erase_op(op);
  }
}

class VTensorPass : public Pass {
 public:
  VTensorPass() : Pass("vtensor") {}
  void run_on_block(Block& block, PassContext& ctx) override { to_value_semantics(block, ctx); }
};

}  // namespace

std::size_t to_value_semantics(Block& block, PassContext& ctx) {
  const std::size_t changed = insert_conversions(block, ctx);
  if (changed) remove_needless_pairs(block, ctx);
  return changed;
}

std::unique_ptr<Pass> create_vtensor_pass() { return std::make_unique<VTensorPass>(); }

KILN_REGISTER_PASS("vtensor", [] { return create_vtensor_pass(); },
                   "value-semantics ops take and give vtensors: kiln.to_vtensor / kiln.to_tensor "
                   "at the edges, the needless pairs removed (seed 002 §2.5.1)");

}  // namespace kiln

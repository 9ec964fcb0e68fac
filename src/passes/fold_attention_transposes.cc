// fold_attention_transposes (kiln/passes/fold_attention_transposes.h): the
// attention ops of a block in program order, each forward op before its
// gradient; a rewritten forward op leaves a swap of its new out for the
// gradient op, which that op's rewrite then reads through and erases.
#include "kiln/passes/fold_attention_transposes.h"

#include <algorithm>
#include <vector>

#include "kiln/dialect/attention_ops.h"
#include "kiln/dialect/tensor_ops.h"
#include "kiln/ir/builder.h"
#include "kiln/ir/region.h"
#include "kiln/passes/op_effects.h"

namespace kiln {

namespace {

using AttentionGradOp = GradOf<ScaledDotProductAttentionOp>;
using Attrs = ScaledDotProductAttentionOp::Attributes;

// Axes 1 and 2 of a rank-4 tensor swapped: BHLD ↔ BLHD (its own inverse).
const std::vector<std::int64_t> kSwap = {0, 2, 1, 3};

bool is_swap(Operation* op) {
  auto t = op->dyn_cast<TransposeOp>();
  if (!t || has_placement(*op) || shaped_dims(op->operand_source(0).type()).size() != 4)
    return false;
  std::vector<std::int64_t> perm = t.attrs().perm;
  for (auto& p : perm)
    if (p < 0) p += 4;
  return perm == kSwap;
}

// The alias questions below are asked of the IR as it stands, not of the
// context's cached AliasInfo: that one is computed once per pass and knows
// nothing of the swaps this pass makes.

// x when v = swap(x) and the attention op may read x in v's place: nothing
// writes x in place (the read moves from the swap to the op) and v is a
// plain value; else a null Value.
Value swapped_source(Value v) {
  Operation* def = v.defining_op();
  if (!def || !is_swap(def) || is_buffer(v)) return {};
  Value x = def->operand_source(0);
  return alias_written_in_place(x) ? Value() : x;
}

// v in the other layout: its source when v is a swap, else a new swap of v.
Value other_layout(Builder& b, Value v) {
  if (Value x = swapped_source(v)) return x;
  return b.create<TransposeOp>(v, kSwap).result();
}

// `from` (a result of the op being replaced) is `to` in the other layout:
// a reader that swaps `from` back reads `to` instead (the swap erased; a
// kept one only through a context, which moves the live-out value to `to`);
// other readers read a swap of `to` made right after `to`'s op.
void replace_in_other_layout(Value from, Value to, const ValueSet& keep, PassContext* ctx) {
  std::vector<Operation*> swaps;
  for (auto use : from.uses()) {
    Operation* u = use.owner();
    if (is_swap(u) && (ctx || !keep.count(u->result(0).impl())) && !is_buffer(u->result(0)) &&
        std::find(swaps.begin(), swaps.end(), u) == swaps.end())
      swaps.push_back(u);
  }
  for (Operation* s : swaps) {
    replace_all_uses(s->result(0), to, ctx);
    erase_op(s, ctx);
  }
  if (from.use_empty()) return;
  Operation* def = to.defining_op();
  Builder b(*def->parent_block());
  b.set_insertion_point_after(def);
  replace_all_uses(from, b.create<TransposeOp>(to, kSwap).result(), ctx);
}

// Erases the swaps among `operands` that nothing reads any more (q, k and
// v may be one value).
void erase_dead_swaps(std::vector<Value> operands, const ValueSet& keep, PassContext* ctx) {
  std::vector<Operation*> dead;
  for (Value v : operands) {
    Operation* def = v.defining_op();
    if (def && is_swap(def) && v.use_empty() && !keep.count(v.impl()) &&
        std::find(dead.begin(), dead.end(), def) == dead.end())
      dead.push_back(def);
  }
  for (Operation* op : dead) erase_op(op, ctx);
}

// Whether the target's kernel reads layout BLHD in place: the CPU's always;
// CUDA's fused (flash) kernels, which take f32, bf16 and f16 with head
// dims up to 128 (kernels/cuda/attention.cc; its cuBLAS path for the rest
// stages BLHD through BHLD copies, the transposes' work again).
bool reads_blhd_in_place(const Operation& op, const Place& target) {
  if (target.is_cpu()) return true;
  if (target.kind != PlaceKind::Cuda || op.isa<AttentionMaskGradOp>()) return false;  // the mask's gradient: cuBLAS
  const Type q = op.operand_source(0).type(), v = op.operand_source(2).type();
  if (!is_shaped(q) || !is_shaped(v) || shaped_dims(q).empty() || shaped_dims(v).empty()) return false;
  const DataType dt = shaped_data_type(q);
  const std::int64_t d = shaped_dims(q).back(), dv = shaped_dims(v).back();
  return (dt == DataType::Float32 || dt == DataType::BFloat16 || dt == DataType::Float16) && d > 0 && d <= 128 &&
         dv > 0 && dv <= 128;
}

// An op in layout BHLD whose q, k and v are swaps it may read through, and
// whose results are plain values: not kept, not written in place nor held
// by another op (their readers move to the new op's results).
bool foldable(Operation* op, const ValueSet& keep, const Place& target) {
  if (has_placement(*op) || !reads_blhd_in_place(*op, target)) return false;
  for (std::uint32_t i = 0; i < op->num_results(); ++i)
    if (keep.count(op->result(i).impl()) || is_buffer(op->result(i))) return false;
  const Attrs a = from_attributes<Attrs>(op->attributes(), op->name());
  if (a.layout != "BHLD") return false;
  for (std::uint32_t i = 0; i < 3; ++i)
    if (!swapped_source(op->operand_source(i))) return false;
  return true;
}

std::vector<Value> operands_of(Operation* op) {
  std::vector<Value> v;
  for (std::uint32_t i = 0; i < op->num_operands(); ++i) v.push_back(op->operand_source(i));
  return v;
}

// Replaces `op` (forward, gradient or the mask's gradient) by its BLHD twin
// reading its operands in the other layout (lse, the gradients' operand #4,
// is [B, H, Lq] in both; key_lengths and the mask are the same in both),
// and gives its results' readers the twin's: the forward's lse and the
// mask's gradient as they are, every other result through
// replace_in_other_layout.
void fold(Operation* op, const ValueSet& keep, PassContext* ctx) {
  const bool forward = op->isa<ScaledDotProductAttentionOp>(), mask_grad = op->isa<AttentionMaskGradOp>();
  Attrs a = from_attributes<Attrs>(op->attributes(), op->name());
  a.layout = "BLHD";
  const std::vector<Value> old = operands_of(op);
  Builder b(*op->parent_block());
  b.set_insertion_point(op);
  std::vector<Value> in;
  const std::size_t optionals = forward ? 3 : 6;  // key_lengths', the mask's and the dropout key's place
  for (std::size_t i = 0; i < old.size(); ++i)
    in.push_back((!forward && i == 4) || i >= optionals ? old[i] : other_layout(b, old[i]));
  Operation* twin = forward     ? b.create<ScaledDotProductAttentionOp>(in, a).operation()
                    : mask_grad ? b.create<AttentionMaskGradOp>(in, a).operation()
                                : b.create<AttentionGradOp>(a, in).operation();
  for (std::uint32_t r = 0; r < op->num_results(); ++r) {
    if ((forward && r == 1) || mask_grad) replace_all_uses(op->result(r), twin->result(r), ctx);
    else replace_in_other_layout(op->result(r), twin->result(r), keep, ctx);
  }
  erase_op(op, ctx);
  erase_dead_swaps(old, keep, ctx);
}

}  // namespace

std::size_t fold_attention_transposes(Block& block, const ValueSet& keep, PassContext* ctx, const Place& target) {
  std::size_t made = 0;
  std::vector<Operation*> ops;
  for (Operation* op : block) {
    for (std::uint32_t r = 0; r < op->num_regions(); ++r)
      for (Block* inner : op->region(r)) made += fold_attention_transposes(*inner, keep, ctx, target);
    if (op->isa<ScaledDotProductAttentionOp>() || op->isa<AttentionGradOp>() || op->isa<AttentionMaskGradOp>())
      ops.push_back(op);
  }
  for (Operation* op : ops) {
    if (!foldable(op, keep, target)) continue;
    fold(op, keep, ctx);
    ++made;
  }
  return made;
}

namespace {

class FoldAttentionTransposesPass : public Pass {
 public:
  FoldAttentionTransposesPass() : Pass("fold_attention_transposes") {}
  void run(Program& program, PassContext& ctx) override {
    fold_attention_transposes(program.block(), live_out_set(ctx), &ctx, ctx.target_place);
  }
};

}  // namespace

std::unique_ptr<Pass> create_fold_attention_transposes_pass() {
  return std::make_unique<FoldAttentionTransposesPass>();
}

KILN_REGISTER_PASS("fold_attention_transposes", [] { return create_fold_attention_transposes_pass(); },
                   "the [0, 2, 1, 3] transposes around kiln.scaled_dot_product_attention (and its "
                   "gradient) into the op's layout \"BLHD\" (CPU)");

}  // namespace kiln

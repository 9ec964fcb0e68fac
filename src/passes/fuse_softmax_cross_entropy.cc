// fuse_softmax_cross_entropy (kiln/passes/fuse_softmax_cross_entropy.h):
// each kiln.take_along_axis is tried as the middle of the pattern; the
// chain is matched backwards to the logits and forwards to the neg (and
// the ignore_index weight), then replaced from its last op.
#include "kiln/passes/fuse_softmax_cross_entropy.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <vector>

#include "kiln/dialect/binary_ops.h"
#include "kiln/dialect/compare_ops.h"
#include "kiln/dialect/indexing_ops.h"
#include "kiln/dialect/manipulation_ops.h"
#include "kiln/dialect/nn_ops.h"
#include "kiln/dialect/tensor_ops.h"
#include "kiln/dialect/unary_ops.h"
#include "kiln/ir/builder.h"
#include "kiln/ir/region.h"
#include "kiln/passes/op_effects.h"

namespace kiln {

namespace {

// The op reading `v` when it has exactly one reader (one use) and v is not
// kept; else null.
Operation* sole_reader(Value v, const ValueSet& keep) {
  if (keep.count(v.impl())) return nullptr;
  Operation* user = nullptr;
  for (auto use : v.uses()) {
    if (user) return nullptr;
    user = use.owner();
  }
  return user;
}

// The constant a kiln.full value is (any shape), or nullopt.
std::optional<double> full_value(Value v) {
  Operation* def = v ? v.defining_op() : nullptr;
  if (!def || !def->isa<FullOp>() || alias_written_in_place(v)) return std::nullopt;
  return from_attributes<FullOp::Attributes>(def->attributes(), FullOp::name).value;
}

// `axis` normalized against `rank`, or -1 when out of range.
std::int64_t normalized(std::int64_t axis, std::size_t rank) {
  const auto r = static_cast<std::int64_t>(rank);
  if (axis < 0) axis += r;
  return axis >= 0 && axis < r ? axis : -1;
}

bool floating(Type t) {
  if (!is_shaped(t)) return false;
  const DataType dt = shaped_data_type(t);
  return dt == DataType::Float32 || dt == DataType::Float64;
}
bool integer_label(Type t) {
  if (!is_shaped(t)) return false;
  const DataType dt = shaped_data_type(t);
  return dt == DataType::Int64 || dt == DataType::Int32;
}

template <typename OpT>
std::int64_t axis_of(Operation* op) {
  return from_attributes<typename OpT::Attributes>(op->attributes(), OpT::name).axis;
}
template <typename OpT>
std::vector<std::int64_t> axes_of(Operation* op) {
  return from_attributes<typename OpT::Attributes>(op->attributes(), OpT::name).axes;
}

struct Match {
  Value logits, label;
  std::int64_t ignore_index = std::numeric_limits<std::int64_t>::min();  // none
  Operation* last = nullptr;         // its result becomes the fused loss
  bool squeeze = false;              // the loss is [..., ] (squeezed), not [..., 1]
  std::vector<Operation*> chain;     // the ops the fused op replaces (program order)
};

// The ignore_index form around take_along_axis's index `idx` and the
// unweighted loss `loss`: fills m.label, m.ignore_index and m.last.
bool match_ignore(Value idx, Value loss, std::int64_t last_axis, const ValueSet& keep, Match& m) {
  Operation* unsq = idx.defining_op();
  if (!unsq || !unsq->isa<UnsqueezeOp>() || axes_of<UnsqueezeOp>(unsq).size() != 1 ||
      normalized(axes_of<UnsqueezeOp>(unsq)[0], shaped_dims(idx.type()).size()) != last_axis)
    return false;
  Operation* where_t = unsq->operand_source(0).defining_op();
  if (!where_t || !where_t->isa<WhereOp>()) return false;
  Value ig = where_t->operand_source(0), t = where_t->operand_source(2);
  const auto zero_t = full_value(where_t->operand_source(1));
  Operation* eq = ig.defining_op();
  if (!zero_t || *zero_t != 0 || !eq || !eq->isa<EqualOp>() || eq->operand_source(0) != t ||
      !integer_label(t.type()))
    return false;
  const auto ii = full_value(eq->operand_source(1));
  if (!ii) return false;
  // loss · where(ig, 0, 1), the loss read by nothing else.
  Operation* mul = sole_reader(loss, keep);
  if (!mul || !mul->isa<MulOp>()) return false;
  Value w = mul->operand_source(mul->operand_source(0) == loss ? 1 : 0);
  Operation* where_w = w.defining_op();
  if (!where_w || !where_w->isa<WhereOp>() || where_w->operand_source(0) != ig) return false;
  const auto w0 = full_value(where_w->operand_source(1)), w1 = full_value(where_w->operand_source(2));
  if (!w0 || *w0 != 0 || !w1 || *w1 != 1 || mul->result(0).type() != loss.type()) return false;
  m.label = t;
  m.ignore_index = static_cast<std::int64_t>(*ii);
  if (static_cast<double>(m.ignore_index) != *ii) return false;
  m.chain.push_back(mul);
  m.last = mul;
  return true;
}

std::optional<Match> match(Operation* take, const ValueSet& keep) {
  if (has_placement(*take) || take->num_operands() != 2) return std::nullopt;
  Value lp = take->operand_source(0), idx = take->operand_source(1);
  Type lt = lp.type();
  if (!floating(lt) || !integer_label(idx.type())) return std::nullopt;
  const auto& dims = shaped_dims(lt);
  const std::size_t rank = dims.size();
  if (rank < 2) return std::nullopt;
  const auto last_axis = static_cast<std::int64_t>(rank - 1);
  if (normalized(axis_of<TakeAlongAxisOp>(take), rank) != last_axis) return std::nullopt;
  const auto& id = shaped_dims(idx.type());
  if (id.size() != rank || id.back() != 1) return std::nullopt;
  Match m;
  // Backwards: log_softmax(x), or log(softmax(x)), along the last axis.
  Operation* def = lp.defining_op();
  if (!def || sole_reader(lp, keep) != take || has_placement(*def)) return std::nullopt;
  if (def->isa<LogSoftmaxOp>()) {
    if (normalized(axis_of<LogSoftmaxOp>(def), rank) != last_axis) return std::nullopt;
    m.chain = {def};
  } else if (def->isa<LogOp>()) {
    Value sm = def->operand_source(0);
    Operation* soft = sm.defining_op();
    if (!soft || !soft->isa<SoftmaxOp>() || sole_reader(sm, keep) != def || has_placement(*soft) ||
        normalized(axis_of<SoftmaxOp>(soft), rank) != last_axis)
      return std::nullopt;
    m.chain = {soft, def};
  } else {
    return std::nullopt;
  }
  m.logits = m.chain.front()->operand_source(0);
  if (m.logits.type() != lt) return std::nullopt;
  m.chain.push_back(take);
  // Forwards: [squeeze(axes = [last])], then neg.
  Value picked = take->result(0);
  Operation* next = sole_reader(picked, keep);
  if (next && next->isa<SqueezeOp>()) {
    const auto axes = axes_of<SqueezeOp>(next);
    if (axes.size() != 1 || normalized(axes[0], rank) != last_axis) return std::nullopt;
    m.squeeze = true;
    m.chain.push_back(next);
    next = sole_reader(next->result(0), keep);
  }
  if (!next || !next->isa<NegOp>() || has_placement(*next)) return std::nullopt;
  m.chain.push_back(next);
  m.last = next;
  // The ignore_index form, else the plain one (the index is the label).
  Match with_ignore = m;
  if (match_ignore(idx, next->result(0), last_axis, keep, with_ignore)) return with_ignore;
  // The label: the index, or what it unsqueezes ([..., 1] from [...]).
  m.label = idx;
  if (Operation* unsq = idx.defining_op(); unsq && unsq->isa<UnsqueezeOp>()) {
    const auto axes = axes_of<UnsqueezeOp>(unsq);
    if (axes.size() == 1 && normalized(axes[0], rank) == last_axis) m.label = unsq->operand_source(0);
  }
  return m;
}

std::size_t rewrite_block(Block& block, const ValueSet& keep, PassContext* ctx) {
  std::vector<Operation*> takes;
  for (Operation* op : block)
    if (op->isa<TakeAlongAxisOp>()) takes.push_back(op);
  std::size_t made = 0;
  for (Operation* take : takes) {
    std::optional<Match> m = match(take, keep);
    if (!m) continue;
    bool here = true;
    for (Operation* op : m->chain) here = here && op->parent_block() == &block;
    if (!here) continue;
    // Moving the softmax's read of x (and the label's) to the last op:
    // nothing may write them in place.
    if (alias_written_in_place(m->logits, ctx) || alias_written_in_place(m->label, ctx)) continue;
    Builder b(block);
    b.set_insertion_point(m->last);
    const std::uint32_t out = 0;
    Operation* fused =
        b.create<CrossEntropyOp>(m->logits, m->label, m->ignore_index).operation();
    Value loss = fused->result(0);
    Operation* squeeze = nullptr;
    if (m->squeeze) {
      squeeze = b.create<SqueezeOp>(loss, std::vector<std::int64_t>{static_cast<std::int64_t>(
                                              shaped_dims(loss.type()).size() - 1)})
                    .operation();
      loss = squeeze->result(0);
    }
    Value old = m->last->result(out);
    if (loss.type() != old.type()) {  // dims the static types do not pin down
      if (squeeze) squeeze->erase();
      fused->erase();
      continue;
    }
    replace_all_uses(old, loss, ctx);
    // The chain (program order), then what only it read.
    std::vector<Operation*> dead(m->chain.rbegin(), m->chain.rend());
    auto erase = [&](Operation* op) { erase_op(op, ctx); };
    // Defined outside the chain (alive after it goes), each once: an op
    // erased below must not be reached again through a second copy.
    std::vector<Value> inputs;
    auto add_input = [&](Value v) {
      if (std::find(inputs.begin(), inputs.end(), v) == inputs.end()) inputs.push_back(v);
    };
    for (Operation* op : dead)
      for (std::uint32_t i = 0; i < op->num_operands(); ++i) {
        Value v = op->operand_source(i);
        if (std::find(dead.begin(), dead.end(), v.defining_op()) == dead.end()) add_input(v);
      }
    for (Operation* op : dead) erase(op);
    // The index's unsqueeze, where and equal of the ignore_index form
    // (and the weight's where), when nothing else reads them (constants
    // are left to DCE).
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      Operation* def = inputs[i].defining_op();
      if (!def || !(def->isa<UnsqueezeOp>() || def->isa<WhereOp>() || def->isa<EqualOp>()) ||
          keep.count(inputs[i].impl()))
        continue;
      if (!def->result(0).use_empty() || def->parent_block() != &block) continue;
      for (std::uint32_t k = 0; k < def->num_operands(); ++k) add_input(def->operand_source(k));
      erase(def);
    }
    ++made;
  }
  return made;
}

}  // namespace

std::size_t fuse_softmax_cross_entropy(Block& block, const ValueSet& keep, PassContext* ctx) {
  std::size_t made = 0;
  for (Operation* op : block)
    for (std::uint32_t r = 0; r < op->num_regions(); ++r)
      for (Block* inner : op->region(r)) made += fuse_softmax_cross_entropy(*inner, keep, ctx);
  return made + rewrite_block(block, keep, ctx);
}

namespace {

class FuseSoftmaxCrossEntropyPass : public Pass {
 public:
  FuseSoftmaxCrossEntropyPass() : Pass("fuse_softmax_ce") {}
  void run(Program& program, PassContext& ctx) override {
    fuse_softmax_cross_entropy(program.block(), live_out_set(ctx), &ctx);
  }
};

}  // namespace

std::unique_ptr<Pass> create_fuse_softmax_cross_entropy_pass() {
  return std::make_unique<FuseSoftmaxCrossEntropyPass>();
}

KILN_REGISTER_PASS("fuse_softmax_ce", [] { return create_fuse_softmax_cross_entropy_pass(); },
                   "log_softmax (or log of softmax) + take_along_axis + neg, with ONNX's "
                   "ignore_index form, into kiln.cross_entropy");

}  // namespace kiln

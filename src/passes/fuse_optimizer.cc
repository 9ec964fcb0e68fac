// fuse_optimizer_updates (kiln/passes/fuse_optimizer.h): one walk over a
// block indexes which positions touch and write each buffer; updates are
// grouped by (kind, attributes, learning-rate buffer, skip flag), and each group's
// members that may move to its last member's place become one merged op.
#include "kiln/passes/fuse_optimizer.h"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kiln/dialect/builtin.h"
#include "kiln/dialect/io_ops.h"
#include "kiln/dialect/merged_optimizer_ops.h"
#include "kiln/ir/builder.h"
#include "kiln/ir/region.h"
#include "kiln/passes/fusion.h"
#include "kiln/passes/op_effects.h"

namespace kiln {

namespace {

// One update kind: its single op, the learning rate's operand index, the
// operands before the optional skip flag, and how its merged op is built.
struct UpdateKind {
  OpInfo single;
  std::uint32_t lr;
  std::uint32_t fixed;
  Operation* (*build)(Builder&, Value lr, const std::vector<Value>&, DictionaryAttribute, Value skip);

  // The update's skip flag, or null.
  Value skip(const Operation& op) const {
    return op.num_operands() > fixed ? op.operand_source(fixed) : Value{};
  }
};

template <typename Merged>
Operation* build_merged(Builder& b, Value lr, const std::vector<Value>& members, DictionaryAttribute attrs,
                        Value skip) {
  if constexpr (requires { typename Merged::Attributes; }) {
    using Single = typename Merged::SingleOp;
    return b.create<Merged>(lr, members,
                            from_attributes<typename Merged::Attributes>(attrs, Single::name), skip)
        .operation();
  } else {
    return b.create<Merged>(lr, members, skip).operation();
  }
}

template <typename Merged>
UpdateKind kind_of() {
  using Single = typename Merged::SingleOp;
  return {IrContext::instance()->op_info<Single>(), MergedLayout<Single>::lr, Single::num_operands,
          &build_merged<Merged>};
}

const UpdateKind* update_kind(const Operation& op) {
  static const UpdateKind kinds[] = {kind_of<MergedSgd_Op>(), kind_of<MergedMomentum_Op>(),
                                     kind_of<MergedAdam_Op>(), kind_of<MergedAdamW_Op>()};
  for (const UpdateKind& k : kinds)
    if (op.info() == k.single) return &k;
  return nullptr;
}

// Calls f on op and on every op nested in its regions.
template <typename F>
void walk(Operation* op, F&& f) {
  f(op);
  for (std::uint32_t r = 0; r < op->num_regions(); ++r)
    for (Block* inner : op->region(r))
      for (Operation* o : *inner) walk(o, f);
}

// The most results one merged op has: the dataflow frame plan
// (kiln/exec/frame_plan.h) keeps a kernel node's parameter outputs in a
// 64-bit mask.
constexpr std::uint32_t kMaxResults = 64;

class BlockMerger {
 public:
  BlockMerger(Block& block, PassContext* ctx) : block_(block), ctx_(ctx) {
    for (Operation* op : block) {
      const std::size_t i = ops_.size();
      ops_.push_back(op);
      pos_[op] = i;
      std::size_t barrier = barriers_.empty() ? 0 : barriers_.back();
      walk(op, [&](Operation* o) {
        // A side effect other than a fetch (whose read is its operand) may
        // read or write state nothing names: nothing moves across it.
        if (o->has_trait<SideEffect>() && !o->isa<FetchOp>() && !o->isa<SetParameterOp>()) ++barrier;
        index(o, i);
      });
      barriers_.push_back(barrier);
    }
  }

  std::size_t run() {
    // Groups by (kind, attributes, learning-rate buffer, skip flag's
    // buffer), in order of their first member.
    std::map<std::tuple<const void*, const void*, const void*, const void*>, std::size_t> group_of;
    std::vector<std::vector<std::size_t>> groups;  // member positions, program order
    for (std::size_t i = 0; i < ops_.size(); ++i) {
      Operation* op = ops_[i];
      const UpdateKind* kind = update_kind(*op);
      if (!kind || has_placement(*op) || !op->info().impl()->takes_operands(op->num_operands())) continue;
      Value lr = op->operand_source(kind->lr);
      if (!lr) continue;
      Value skip = kind->skip(*op);
      auto key = std::make_tuple(static_cast<const void*>(kind), op->attributes().storage(), buffer_key(lr),
                                 skip ? buffer_key(skip) : nullptr);
      auto [it, fresh] = group_of.try_emplace(key, groups.size());
      if (fresh) groups.emplace_back();
      groups[it->second].push_back(i);
    }
    for (const auto& g : groups)
      if (g.size() >= 2) merge(g);
    return made_;
  }

 private:
  // A key per buffer: a parameter's name (every builtin.parameter value
  // of one name is its variable), else the alias root's value.
  const void* name_key(const std::string& name) {
    return &param_keys_.try_emplace(name, 0).first->first;
  }
  const void* buffer_key(Value v) {
    Value root = alias_root(v);
    if (Operation* def = root.defining_op())
      if (auto p = def->dyn_cast<ParameterOp>()) return name_key(p.attrs().parameter_name);
    return root.impl();
  }
  static void add(std::vector<std::size_t>& at, std::size_t i) {
    if (at.empty() || at.back() != i) at.push_back(i);
  }
  // Records what `o` (at top-level position i) reads and writes. An op
  // that is neither ReadOnly, ViewLike nor Inplace may write any operand.
  void index(Operation* o, std::size_t i) {
    if (auto s = o->dyn_cast<SetParameterOp>()) {
      const void* k = name_key(s.attrs().parameter_name);
      add(touched_[k], i);
      add(written_[k], i);
    }
    const bool unknown = !o->has_trait<ReadOnly>() && !o->has_trait<ViewLike>() && !o->has_trait<Inplace>();
    std::vector<bool> writes(o->num_operands(), unknown);
    for (std::uint32_t w : written_operands(*o))
      if (w < writes.size()) writes[w] = true;
    for (std::uint32_t j = 0; j < o->num_operands(); ++j) {
      Value v = o->operand_source(j);
      if (!v) continue;
      const void* k = buffer_key(v);
      add(touched_[k], i);
      if (writes[j]) add(written_[k], i);
    }
  }

  // Whether a position in (from, to), not a staying member, is in `at`.
  bool hit(const std::vector<std::size_t>& at, std::size_t from, std::size_t to) const {
    for (auto it = std::upper_bound(at.begin(), at.end(), from); it != at.end() && *it < to; ++it)
      if (!moving_.count(*it)) return true;
    return false;
  }
  bool hit(const std::unordered_map<const void*, std::vector<std::size_t>>& index, const void* k,
           std::size_t from, std::size_t to) const {
    auto it = index.find(k);
    return it != index.end() && hit(it->second, from, to);
  }

  // The update at `from` may move to `to`: between them, no barrier, no op
  // but a moving member touching a buffer it writes or writing one it reads.
  bool may_move(std::size_t from, std::size_t to) {
    if (barriers_[to - 1] != barriers_[from]) return false;
    Operation* op = ops_[from];
    // A moving member reading its result would read the merged op's own.
    for (std::uint32_t r = 0; r < op->num_results(); ++r)
      for (auto use : op->result(r).uses())
        if (auto it = pos_.find(use.owner()); it != pos_.end() && moving_.count(it->second)) return false;
    std::vector<bool> writes(op->num_operands(), false);
    for (std::uint32_t w : written_operands(*op)) writes[w] = true;
    for (std::uint32_t j = 0; j < op->num_operands(); ++j) {
      const void* k = buffer_key(op->operand_source(j));
      if (hit(writes[j] ? touched_ : written_, k, from, to)) return false;
    }
    return true;
  }

  // Merges the members of `group` that may move to its last member's
  // place; false when fewer than two may.
  bool merge(const std::vector<std::size_t>& group) {
    const std::size_t last = group.back();
    moving_.clear();
    moving_.insert(last);
    std::vector<std::size_t> members{last};
    for (auto it = group.rbegin() + 1; it != group.rend(); ++it)
      if (may_move(*it, last)) {
        moving_.insert(*it);
        members.push_back(*it);
      }
    if (members.size() < 2) return false;
    std::reverse(members.begin(), members.end());  // program order

    Operation* anchor = ops_[last];
    const UpdateKind& kind = *update_kind(*anchor);
    // At most kMaxResults results per merged op: the groups split evenly
    // into as few ops as that allows, all in the members' order.
    const std::size_t per = std::max<std::size_t>(1, kMaxResults / anchor->num_results());
    const std::size_t chunks = (members.size() + per - 1) / per;
    Builder b(block_);
    b.set_insertion_point(anchor);
    for (std::size_t c = 0, begin = 0; c < chunks; ++c) {
      const std::size_t end = begin + (members.size() - begin) / (chunks - c);
      std::vector<Value> operands;
      for (std::size_t i = begin; i < end; ++i) {
        Operation* op = ops_[members[i]];
        for (std::uint32_t j = 0; j < kind.fixed; ++j)
          if (j != kind.lr) operands.push_back(op->operand_source(j));
      }
      Operation* merged =
          kind.build(b, anchor->operand_source(kind.lr), operands, anchor->attributes(), kind.skip(*anchor));
      // The members' attributes, undeclared ones too (op_role): one dict,
      // the grouping key.
      merged->set_attributes(anchor->attributes());
      std::uint32_t r = 0;
      for (std::size_t i = begin; i < end; ++i) {
        Operation* op = ops_[members[i]];
        for (std::uint32_t k = 0; k < op->num_results(); ++k, ++r) {
          Value from = op->result(k), to = merged->result(r);
          replace_all_uses(from, to, ctx_);
        }
      }
      ++made_;
      begin = end;
    }
    for (auto it = members.rbegin(); it != members.rend(); ++it) {
      erase_op(ops_[*it], ctx_);
    }
    return true;
  }

  Block& block_;
  PassContext* ctx_;
  std::vector<Operation*> ops_;
  std::unordered_map<Operation*, std::size_t> pos_;
  std::vector<std::size_t> barriers_;  // barriers at or before each position
  std::unordered_map<std::string, int> param_keys_;
  // Positions (ascending) of the ops touching / writing each buffer.
  std::unordered_map<const void*, std::vector<std::size_t>> touched_, written_;
  std::unordered_set<std::size_t> moving_;  // the group members that move
  std::size_t made_ = 0;                    // merged ops created
};

}  // namespace

std::size_t fuse_optimizer_updates(Block& block, PassContext* ctx) {
  std::size_t made = 0;
  for (Operation* op : block)
    for (std::uint32_t r = 0; r < op->num_regions(); ++r)
      for (Block* inner : op->region(r)) made += fuse_optimizer_updates(*inner, ctx);
  // The index of reads and writes only for a block with a group to form
  // (an inference program, or one update, costs a walk of the ops).
  std::size_t updates = 0;
  for (Operation* op : block) updates += update_kind(*op) != nullptr;
  if (updates >= 2) made += BlockMerger(block, ctx).run();
  return made;
}

namespace {

class FuseOptimizerPass : public Pass {
 public:
  FuseOptimizerPass() : Pass("fuse_optimizer") {}
  void run(Program& program, PassContext& ctx) override {
    if (ctx.target_place.is_cpu() || ctx.target_place.kind == PlaceKind::Cuda)
      fuse_optimizer_updates(program.block(), &ctx);
  }
};

}  // namespace

std::unique_ptr<Pass> create_fuse_optimizer_pass() { return std::make_unique<FuseOptimizerPass>(); }

KILN_REGISTER_PASS("fuse_optimizer", [] { return create_fuse_optimizer_pass(); },
                   "the sgd_/momentum_/adam_/adamw_ updates of one kind, attributes and learning "
                   "rate into one kiln.merged_*_ op per block (CPU, CUDA)");

}  // namespace kiln

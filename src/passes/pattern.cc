// PatternRewriter and the greedy driver: a worklist of the block's ops,
// swept in order; an op a rewrite creates, or whose operand a rewrite
// replaced, goes back on the worklist, an op it erased comes off and the
// producers of that op's operands go on (they may be dead now: a dead op
// is erased when visited).
#include "kiln/passes/pattern.h"

#include "kiln/passes/dce.h"

#include <algorithm>
#include <set>
#include <unordered_set>

namespace kiln {

PatternSet::PatternSet() = default;
PatternSet::~PatternSet() = default;
PatternSet::PatternSet(PatternSet&&) noexcept = default;
PatternSet& PatternSet::operator=(PatternSet&&) noexcept = default;

PatternSet& PatternSet::add(std::unique_ptr<RewritePattern> p) {
  patterns_.push_back(std::move(p));
  return *this;
}

// ---- PatternRewriter ----

PatternRewriter::PatternRewriter(PassContext& ctx, RewriteListener* listener)
    : ctx_(ctx), listener_(listener) {}
PatternRewriter::~PatternRewriter() = default;

void PatternRewriter::set_insertion_point(Operation* op) {
  if (!builder_) builder_.emplace(*op->parent_block());
  builder_->set_insertion_point(op);
}

void PatternRewriter::set_insertion_point_after(Operation* op) {
  if (!builder_) builder_.emplace(*op->parent_block());
  builder_->set_insertion_point_after(op);
}

Builder& PatternRewriter::builder() {
  if (!builder_)
    throw_error(ErrorKind::PreconditionNotMet, "a PatternRewriter creates ops only after an insertion point is set");
  return *builder_;
}

Operation* PatternRewriter::insert(Operation* op) {
  builder().insert(op);
  if (listener_) listener_->op_inserted(op);
  return op;
}

void PatternRewriter::replace_all_uses_with(Value from, Value to) {
  if (!from || !to) throw_error(ErrorKind::InvalidArgument, "a rewrite replaced a null value");
  if (from.type() != to.type())
    throw_error(ErrorKind::InvalidArgument, "a rewrite replaced a value of type ", from.type().to_string(),
                " with one of type ", to.type().to_string());
  ctx_.replace_all_uses(from, to);
  if (listener_) listener_->value_replaced(to);
}

void PatternRewriter::replace_op(Operation* op, const std::vector<Value>& values) {
  if (values.size() != op->num_results())
    throw_error(ErrorKind::InvalidArgument, "replacing op '", op->name(), "' (", op->num_results(),
                " results) with ", values.size(), " values");
  for (std::uint32_t i = 0; i < op->num_results(); ++i) replace_all_uses_with(op->result(i), values[i]);
  erase_op(op);
}

void PatternRewriter::erase_op(Operation* op) {
  for (std::uint32_t i = 0; i < op->num_results(); ++i)
    if (!op->result(i).use_empty())
      throw_error(ErrorKind::PreconditionNotMet, "a rewrite erased op '", op->name(), "' whose result #",
                  i, " is still used");
  if (listener_) listener_->op_erased(op);
  ctx_.erase_op(op);
}

// ---- the greedy driver ----

namespace {

class GreedyDriver : public RewriteListener {
 public:
  GreedyDriver(Block& block, const PatternSet& patterns, PassContext& ctx)
      : block_(block), ctx_(ctx) {
    for (const auto& p : patterns.patterns()) {
      if (p->op_name().empty()) any_.push_back(p.get());
      else by_name_[p->op_name()].push_back(p.get());
    }
    auto by_benefit = [](const RewritePattern* a, const RewritePattern* b) {
      return a->benefit() > b->benefit();
    };
    for (auto& [n, v] : by_name_) std::stable_sort(v.begin(), v.end(), by_benefit);
    std::stable_sort(any_.begin(), any_.end(), by_benefit);
  }

  GreedyRewriteResult run(const GreedyRewriteConfig& config) {
    GreedyRewriteResult result;
    PatternRewriter rewriter(ctx_, this);
    while (true) {
      ++result.iterations;
      std::set<std::string> fired;
      std::size_t rewrites = 0;
      const std::size_t cap = config.max_rewrites_per_op * block_.size() + 1000;
      worklist_.clear();
      pending_.clear();
      for (Operation* op : block_) push(op);
      std::reverse(worklist_.begin(), worklist_.end());  // popped from the back: program order
      while (!worklist_.empty() && rewrites <= cap) {
        Operation* op = worklist_.back();
        worklist_.pop_back();
        if (!pending_.erase(op)) continue;  // erased, or already visited again
        if (is_trivially_dead(*op, ctx_)) {  // as MLIR's driver: no pattern needed
          rewriter.erase_op(op);
          ++rewrites;
          fired.insert("erase-dead-op");
          continue;
        }
        for (const RewritePattern* p : patterns_for(op)) {
          rewriter.set_insertion_point(op);
          if (p->match_and_rewrite(op, rewriter)) {
            ++rewrites;
            fired.insert(p->name());
            break;
          }
        }
      }
      result.rewrites += rewrites;
      if (rewrites == 0) break;
      if (result.iterations >= config.max_iterations || rewrites > cap) {
        result.converged = false;
        result.still_firing.assign(fired.begin(), fired.end());
        break;
      }
    }
    return result;
  }

  void op_inserted(Operation* op) override {
    if (op->parent_block() == &block_) push(op);
  }
  // The producers of what `op` read may be dead now.
  void op_erased(Operation* op) override {
    pending_.erase(op);
    for (std::uint32_t i = 0; i < op->num_operands(); ++i)
      if (Operation* def = op->operand_source(i).defining_op(); def && def->parent_block() == &block_)
        push(def);
  }
  void value_replaced(Value to) override {
    for (OpOperand use : to.uses())
      if (use.owner()->parent_block() == &block_) push(use.owner());
  }

 private:
  void push(Operation* op) {
    if (pending_.insert(op).second) worklist_.push_back(op);
  }

  const std::vector<const RewritePattern*>& patterns_for(Operation* op) {
    auto [it, added] = cache_.try_emplace(op->info().impl());
    if (added) {
      if (auto n = by_name_.find(op->name()); n != by_name_.end()) it->second = n->second;
      it->second.insert(it->second.end(), any_.begin(), any_.end());
      std::stable_sort(it->second.begin(), it->second.end(),
                       [](const RewritePattern* a, const RewritePattern* b) {
                         return a->benefit() > b->benefit();
                       });
    }
    return it->second;
  }

  Block& block_;
  PassContext& ctx_;
  std::unordered_map<std::string, std::vector<const RewritePattern*>> by_name_;
  std::vector<const RewritePattern*> any_;
  std::unordered_map<const void*, std::vector<const RewritePattern*>> cache_;
  std::vector<Operation*> worklist_;
  std::unordered_set<Operation*> pending_;
};

}  // namespace

GreedyRewriteResult apply_patterns_greedily(Block& block, const PatternSet& patterns,
                                            PassContext& ctx, GreedyRewriteConfig config) {
  if (config.max_iterations < 1)
    throw_error(ErrorKind::InvalidArgument, "GreedyRewriteConfig::max_iterations must be >= 1, got ",
                config.max_iterations);
  return GreedyDriver(block, patterns, ctx).run(config);
}

PatternPass::PatternPass(std::string name, PatternSet patterns, GreedyRewriteConfig config)
    : Pass(std::move(name)), patterns_(std::move(patterns)), config_(config) {}
PatternPass::~PatternPass() = default;

void PatternPass::run_on_block(Block& block, PassContext& ctx) {
  GreedyRewriteResult r = apply_patterns_greedily(block, patterns_, ctx, config_);
  if (!r.converged) {
    std::string names;
    for (const auto& n : r.still_firing) names += (names.empty() ? "" : ", ") + n;
    throw_error(ErrorKind::Internal, "pattern rewriting in pass '", name(), "' did not converge after ",
                r.iterations, " iterations; patterns still firing: ", names);
  }
}

}  // namespace kiln

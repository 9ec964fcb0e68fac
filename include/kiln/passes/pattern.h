// Rewrite patterns (MLIR's RewritePattern / PatternRewriter / greedy driver,
// seed 002 §3.3): a pattern matches ops of one kind (by op name) and has a
// benefit; a PatternRewriter makes its edits — create ops, replace values or
// ops, erase ops — so that the IR stays consistent and the driver learns
// what changed; apply_patterns_greedily applies a set of patterns to a
// block until none fires, within an iteration cap.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/ir/builder.h"
#include "kiln/passes/pass.h"

namespace kiln {

class PatternRewriter;

class RewritePattern {
 public:
  // `op_name`: the kind of op it matches ("kiln.mul"); empty = every op.
  // Higher benefit is tried first. `name` names the pattern in errors and
  // reports (default: the op name).
  explicit RewritePattern(std::string op_name, int benefit = 1, std::string name = {})
      : op_name_(std::move(op_name)),
        name_(name.empty() ? op_name_ : std::move(name)),
        benefit_(benefit) {}
  virtual ~RewritePattern() = default;

  // Rewrites `op` through `rewriter` and returns true, or returns false
  // having changed nothing.
  virtual bool match_and_rewrite(Operation* op, PatternRewriter& rewriter) const = 0;

  const std::string& op_name() const { return op_name_; }
  const std::string& name() const { return name_; }
  int benefit() const { return benefit_; }

 private:
  std::string op_name_;
  std::string name_;
  int benefit_;
};

// A pattern for one op class: match_and_rewrite gets the typed handle.
template <typename OpT>
class OpRewritePattern : public RewritePattern {
 public:
  explicit OpRewritePattern(int benefit = 1, std::string name = {})
      : RewritePattern(std::string(OpT::name), benefit, std::move(name)) {}
  virtual bool match_and_rewrite(OpT op, PatternRewriter& rewriter) const = 0;
  bool match_and_rewrite(Operation* op, PatternRewriter& rewriter) const final {
    OpT typed = op->dyn_cast<OpT>();
    return typed && match_and_rewrite(typed, rewriter);
  }
};

class PatternSet {
 public:
  PatternSet();
  ~PatternSet();
  PatternSet(PatternSet&&) noexcept;
  PatternSet& operator=(PatternSet&&) noexcept;
  PatternSet& add(std::unique_ptr<RewritePattern> p);
  template <typename P, typename... Args>
  PatternSet& add(Args&&... args) {
    return add(std::make_unique<P>(std::forward<Args>(args)...));
  }
  const std::vector<std::unique_ptr<RewritePattern>>& patterns() const { return patterns_; }
  bool empty() const { return patterns_.empty(); }

 private:
  std::vector<std::unique_ptr<RewritePattern>> patterns_;
};

// What the greedy driver listens to.
class RewriteListener {
 public:
  virtual ~RewriteListener() = default;
  virtual void op_inserted(Operation*) {}
  virtual void op_erased(Operation*) {}
  // `to` took over the uses of another value: its users may match now.
  virtual void value_replaced(Value /*to*/) {}
};

class PatternRewriter {
 public:
  PatternRewriter(PassContext& ctx, RewriteListener* listener = nullptr);
  ~PatternRewriter();

  PassContext& context() const { return ctx_; }

  // New ops go right before `op` (the usual place: before the matched op).
  // The driver sets it before each match_and_rewrite.
  void set_insertion_point(Operation* op);
  void set_insertion_point_after(Operation* op);
  template <typename OpT, typename... Args>
  OpT create(Args&&... args) {
    OpT op = builder().create<OpT>(std::forward<Args>(args)...);
    if (listener_) listener_->op_inserted(op.operation());
    return op;
  }
  // Inserts a detached op at the insertion point.
  Operation* insert(Operation* op);

  // Every use of `from` now uses `to` (live-out values follow, see
  // PassContext::replace_all_uses). kiln::Error (InvalidArgument) naming
  // both types when they differ: a rewrite must not change what users see.
  void replace_all_uses_with(Value from, Value to);
  // Replaces each result of `op` with the matching value, then erases `op`.
  // kiln::Error (InvalidArgument) naming the op for a count mismatch.
  void replace_op(Operation* op, const std::vector<Value>& values);
  // Erases `op`, whose results must be unused (kiln::Error otherwise,
  // naming it).
  void erase_op(Operation* op);

 private:
  PassContext& ctx_;
  RewriteListener* listener_;
  // kiln::Error (PreconditionNotMet) before an insertion point is set.
  Builder& builder();
  std::optional<Builder> builder_;
};

struct GreedyRewriteConfig {
  // Sweeps over the block; the driver stops with converged = false when the
  // last one still rewrote something.
  int max_iterations = 10;
  // Rewrites one sweep may do, as a multiple of the ops in the block (plus
  // 1000): catches patterns that undo each other within a sweep.
  std::size_t max_rewrites_per_op = 8;
};

struct GreedyRewriteResult {
  bool converged = true;
  int iterations = 0;          // sweeps run
  std::size_t rewrites = 0;    // patterns that fired, in all
  // When not converged: the patterns that fired in the last sweep.
  std::vector<std::string> still_firing;
};

// Applies `patterns` to the ops of `block` (not of nested regions: the
// PassManager visits those) until none fires — MLIR's
// applyPatternsAndFoldGreedily, which likewise reports non-convergence by
// its result instead of throwing. Ops a rewrite creates or whose operands
// it changes are visited again in the same sweep. A visited op that is dead
// (kiln/passes/dce.h's is_trivially_dead: unused, not live-out, no effect)
// is erased, as MLIR's driver does — so a rewrite never leaves behind
// producers that would still run — and counts as a rewrite
// ("erase-dead-op").
GreedyRewriteResult apply_patterns_greedily(Block& block, const PatternSet& patterns,
                                            PassContext& ctx, GreedyRewriteConfig config = {});

// A pass applying a pattern set to every block; kiln::Error (Internal)
// naming the pass and the patterns still firing when it does not converge.
class PatternPass : public Pass {
 public:
  PatternPass(std::string name, PatternSet patterns, GreedyRewriteConfig config = {});
  ~PatternPass() override;
  void run_on_block(Block& block, PassContext& ctx) override;

 private:
  PatternSet patterns_;
  GreedyRewriteConfig config_;
};

}  // namespace kiln

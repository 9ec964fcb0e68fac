// Rewrite patterns and the greedy driver: patterns by op kind and benefit,
// rewriter edits that keep the IR consistent (and live-out values
// followed), a fixpoint, and non-convergence reported.
#include "passes/passes_test_util.h"
#include "kiln/passes/pattern.h"

using namespace kiln;
using namespace kiln_passes_test;

namespace {

// exp(x) → tanh(x)
struct ExpToTanh : OpRewritePattern<ExpOp> {
  ExpToTanh() : OpRewritePattern(1, "exp-to-tanh") {}
  bool match_and_rewrite(ExpOp op, PatternRewriter& r) const override {
    auto t = r.create<TanhOp>(op.operand(0));
    r.replace_op(op, {t.result()});
    return true;
  }
};

// tanh(tanh(x)) → tanh(x): fires on what ExpToTanh made.
struct TanhTanh : OpRewritePattern<TanhOp> {
  TanhTanh() : OpRewritePattern(1, "tanh-tanh") {}
  bool match_and_rewrite(TanhOp op, PatternRewriter& r) const override {
    Operation* def = op.operand(0).defining_op();
    if (!def || !def->isa<TanhOp>()) return false;
    r.replace_op(op, {def->result(0)});
    return true;
  }
};

// exp(x) → abs(x), preferred over ExpToTanh by its benefit.
struct ExpToAbs : RewritePattern {
  ExpToAbs() : RewritePattern("kiln.exp", 5, "exp-to-abs") {}
  bool match_and_rewrite(Operation* op, PatternRewriter& r) const override {
    auto a = r.create<AbsOp>(op->operand_source(0));
    r.replace_op(op, {a.result()});
    return true;
  }
};

// Pretends to rewrite forever.
struct AlwaysFires : RewritePattern {
  AlwaysFires() : RewritePattern("kiln.relu", 1, "always-fires") {}
  bool match_and_rewrite(Operation* op, PatternRewriter&) const override {
    op->set_attribute("n", BoolAttribute::get(true));
    return true;
  }
};

// Replaces a value with one of another type.
struct BadTypes : RewritePattern {
  BadTypes() : RewritePattern("kiln.sum", 1, "bad-types") {}
  bool match_and_rewrite(Operation* op, PatternRewriter& r) const override {
    r.replace_op(op, {op->operand_source(0)});
    return true;
  }
};

}  // namespace

TEST_CASE("the greedy driver applies patterns to a fixpoint, revisiting what rewrites made",
          "[passes][pattern]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{4}).result();
  Value t = b.create<TanhOp>(x).result();
  Value e = b.create<ExpOp>(t).result();  // → tanh(tanh(x)) → tanh(x)
  Value out = b.create<ReluOp>(e).result();
  PatternSet set;
  set.add<ExpToTanh>().add<TanhTanh>();
  PassContext ctx({e, out});
  auto r = apply_patterns_greedily(p.block(), set, ctx);
  CHECK(r.converged);
  CHECK(r.rewrites == 2);
  CHECK(count_ops(p, "kiln.exp") == 0);
  CHECK(out.defining_op()->operand_source(0) == t);
  CHECK(ctx.live_out()[0] == t);  // the live-out exp followed its replacements
  p.verify();
}

TEST_CASE("the greedy driver erases the producers a rewrite leaves unused, and other dead ops",
          "[passes][pattern]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{4}).result();
  Value t = b.create<TanhOp>(x).result();
  Value t2 = b.create<TanhOp>(t).result();  // tanh(tanh(x)) → the outer reads x's tanh
  Value e = b.create<ExpOp>(t2).result();   // → tanh(t2) → t2's producer reused
  b.create<AbsOp>(x);                       // dead from the start
  Value side = b.create<ReluOp>(b.create<NegOp>(x).result()).result();  // live-out chain stays
  PatternSet set;
  set.add<ExpToTanh>().add<TanhTanh>();
  PassContext ctx({e, side});
  auto r = apply_patterns_greedily(p.block(), set, ctx);
  CHECK(r.converged);
  // Left: x, one tanh (the live-out value), the live-out neg → relu chain.
  CHECK(count_ops(p, "kiln.tanh") == 1);
  CHECK(count_ops(p, "kiln.abs") == 0);
  CHECK(count_ops(p, "kiln.neg") == 1);
  CHECK(count_ops(p, "kiln.relu") == 1);
  CHECK(ctx.live_out()[0] == t);
  p.verify();
}

TEST_CASE("the pattern of higher benefit is tried first", "[passes][pattern]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{4}).result();
  Value e = b.create<ExpOp>(x).result();
  PatternSet set;
  set.add<ExpToTanh>().add<ExpToAbs>();
  PassContext ctx({e});
  apply_patterns_greedily(p.block(), set, ctx);
  CHECK(count_ops(p, "kiln.abs") == 1);
  CHECK(count_ops(p, "kiln.tanh") == 0);
}

TEST_CASE("patterns that never stop are reported: a result flag naming them, and an error from "
          "a pattern pass",
          "[passes][pattern]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{4}).result();
  Value y = b.create<ReluOp>(x).result();
  PatternSet set;
  set.add<AlwaysFires>();
  PassContext ctx({y});  // live-out: not dead
  GreedyRewriteConfig config;
  config.max_iterations = 3;
  auto r = apply_patterns_greedily(p.block(), set, ctx, config);
  CHECK_FALSE(r.converged);
  CHECK(r.iterations == 3);
  CHECK(r.still_firing == std::vector<std::string>{"always-fires"});

  PatternSet set2;
  set2.add<AlwaysFires>();
  PassManager pm;
  pm.add(std::make_unique<PatternPass>("my-rewrites", std::move(set2), config));
  PassContext ctx2({y});
  KILN_CHECK_ERROR(pm.run(p, ctx2), Internal, {"'my-rewrites'", "did not converge", "always-fires"});
}

TEST_CASE("a rewrite replacing a value by one of another type is an error naming both types",
          "[passes][pattern]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{4}).result();
  Value s = b.create<SumOp>(x, std::vector<std::int64_t>{0}).result();
  PatternSet set;
  set.add<BadTypes>();
  PassContext ctx({s});
  KILN_CHECK_ERROR(apply_patterns_greedily(p.block(), set, ctx), InvalidArgument,
                   {"tensor<4xf32>", "tensor<f32>"});
}

TEST_CASE("erasing an op whose result is still used is an error naming it", "[passes][pattern]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{4}).result();
  Value e = b.create<ExpOp>(x).result();
  b.create<ReluOp>(e);
  PassContext ctx;
  PatternRewriter r(ctx);
  KILN_CHECK_ERROR(r.erase_op(e.defining_op()), PreconditionNotMet, {"kiln.exp", "still used"});
  KILN_CHECK_ERROR(r.create<ReluOp>(x), PreconditionNotMet, {"insertion point"});
}

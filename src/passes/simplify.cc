// Algebraic simplification patterns. Each replaces a value only by one of
// the same type, and never a value that some op writes in place (nor by
// one): a write through it would then reach another buffer, or a fetch of
// it would observe the write.
#include "kiln/passes/simplify.h"

#include <cmath>
#include <numeric>

#include "kiln/dialect/binary_ops.h"
#include "kiln/dialect/tensor_ops.h"
#include "kiln/dialect/unary_ops.h"
#include "kiln/ir/builtin_types.h"
#include "kiln/passes/constant_fold.h"
#include "kiln/passes/op_effects.h"

namespace kiln {

namespace {

// Whether `result` may be replaced by `by`.
bool replaceable(Value result, Value by, const PassContext& ctx) {
  return result.type() == by.type() && !is_buffer(result, &ctx) && !is_buffer(by, &ctx);
}

// x ∘ c → x where c is a constant whose every element is `identity`, on the
// right (and on the left for commutative ops). On floats a zero identity
// must have the identity's sign: x + (-0) and x - (+0) are x for every x,
// but x + (+0) is +0 for x = -0 (XLA's simplifier rewrites it anyway; kiln's
// pipeline keeps results bit for bit).
class IdentityOperandPattern : public RewritePattern {
 public:
  IdentityOperandPattern(std::string_view op, double identity, bool commutative, std::string name)
      : RewritePattern(std::string(op), 1, std::move(name)),
        identity_(identity),
        commutative_(commutative) {}

  bool match_and_rewrite(Operation* op, PatternRewriter& rewriter) const override {
    if (op->num_operands() != 2 || op->num_results() != 1) return false;
    for (std::uint32_t side : {1u, 0u}) {
      if (side == 0 && !commutative_) break;
      auto c = constant_splat_value(op->operand_source(side), &rewriter.context());
      if (!c || *c != identity_) continue;
      if (identity_ == 0 && is_floating(shaped_data_type(op->result(0).type())) &&
          std::signbit(*c) != std::signbit(identity_))
        continue;
      Value x = op->operand_source(1 - side);
      if (!replaceable(op->result(0), x, rewriter.context())) continue;
      rewriter.replace_op(op, {x});
      return true;
    }
    return false;
  }

 private:
  double identity_;
  bool commutative_;
};

// Normalises a perm (negative entries count from the end); empty when it is
// not a permutation of [0, rank).
std::vector<std::int64_t> normal_perm(std::vector<std::int64_t> p) {
  const auto rank = static_cast<std::int64_t>(p.size());
  std::vector<bool> seen(p.size(), false);
  for (auto& x : p) {
    if (x < 0) x += rank;
    if (x < 0 || x >= rank || seen[x]) return {};
    seen[x] = true;
  }
  return p;
}

// transpose(transpose(z, p1), p2) → transpose(z, p1∘p2), or z when that is
// the identity: out.dims[i] = z.dims[p1[p2[i]]].
class TransposeTransposePattern : public OpRewritePattern<TransposeOp> {
 public:
  TransposeTransposePattern() : OpRewritePattern(1, "transpose-transpose") {}
  bool match_and_rewrite(TransposeOp op, PatternRewriter& rewriter) const override {
    auto inner = op.operand(0).defining_op() ? op.operand(0).defining_op()->dyn_cast<TransposeOp>()
                                             : TransposeOp();
    if (!inner || is_buffer(op.result(), &rewriter.context())) return false;
    auto p1 = normal_perm(inner.attrs().perm), p2 = normal_perm(op.attrs().perm);
    if (p1.empty() || p1.size() != p2.size()) return false;
    std::vector<std::int64_t> q(p2.size());
    for (std::size_t i = 0; i < q.size(); ++i) q[i] = p1[p2[i]];
    Value z = inner.operand(0);
    if (alias_written_in_place(z, &rewriter.context())) return false;  // z may change between the two transposes
    std::vector<std::int64_t> id(q.size());
    std::iota(id.begin(), id.end(), 0);
    if (q == id) {
      if (!replaceable(op.result(), z, rewriter.context())) return false;
      rewriter.replace_op(op, {z});
      return true;
    }
    auto t = rewriter.create<TransposeOp>(z, q);
    if (t.result().type() != op.result().type()) {
      rewriter.erase_op(t);
      return false;
    }
    rewriter.replace_op(op, {t.result()});
    return true;
  }
};

// reshape(reshape(z, s1), s2) → reshape(z, s2) (a 0 in s2, "the input's
// dim", becomes the inner result's static dim); reshape(x) of x's own type
// → x.
class ReshapeReshapePattern : public OpRewritePattern<ReshapeOp> {
 public:
  ReshapeReshapePattern() : OpRewritePattern(1, "reshape-reshape") {}
  bool match_and_rewrite(ReshapeOp op, PatternRewriter& rewriter) const override {
    if (is_buffer(op.result(), &rewriter.context())) return false;
    Value x = op.operand(0);
    if (x.type() == op.result().type() && static_shape(x.type()) && replaceable(op.result(), x, rewriter.context())) {
      rewriter.replace_op(op, {x});
      return true;
    }
    Operation* def = x.defining_op();
    auto inner = def ? def->dyn_cast<ReshapeOp>() : ReshapeOp();
    if (!inner || alias_written_in_place(inner.operand(0), &rewriter.context())) return false;
    std::vector<std::int64_t> shape = op.attrs().shape;
    const auto& mid = shaped_dims(x.type());
    for (std::size_t i = 0; i < shape.size(); ++i) {
      if (shape[i] != 0) continue;
      if (i >= mid.size() || mid[i] < 0) return false;
      shape[i] = mid[i];
    }
    auto r = rewriter.create<ReshapeOp>(inner.operand(0), shape);
    if (r.result().type() != op.result().type()) {
      rewriter.erase_op(r);
      return false;
    }
    rewriter.replace_op(op, {r.result()});
    return true;
  }

 private:
  static bool static_shape(Type t) {
    if (!is_shaped(t)) return false;
    for (auto d : shaped_dims(t))
      if (d < 0) return false;
    return true;
  }
};

// cast(x, x's dtype) → x.
class SameTypeCastPattern : public OpRewritePattern<CastOp> {
 public:
  SameTypeCastPattern() : OpRewritePattern(1, "cast-to-same-dtype") {}
  bool match_and_rewrite(CastOp op, PatternRewriter& rewriter) const override {
    Value x = op.operand(0);
    if (!is_shaped(x.type()) || op.attrs().dtype != shaped_data_type(x.type())) return false;
    if (!replaceable(op.result(), x, rewriter.context())) return false;
    rewriter.replace_op(op, {x});
    return true;
  }
};

// scale(x, 1, bias 0) → x.
class IdentityScalePattern : public OpRewritePattern<ScaleOp> {
 public:
  IdentityScalePattern() : OpRewritePattern(1, "scale-by-one") {}
  bool match_and_rewrite(ScaleOp op, PatternRewriter& rewriter) const override {
    const auto a = op.attrs();
    if (a.scale != 1.0 || a.bias != 0.0) return false;
    Value x = op.operand(0);
    if (!replaceable(op.result(), x, rewriter.context())) return false;
    rewriter.replace_op(op, {x});
    return true;
  }
};

}  // namespace

void add_simplify_patterns(PatternSet& patterns) {
  patterns.add<IdentityOperandPattern>(MulOp::name, 1.0, true, "mul-by-one");
  patterns.add<IdentityOperandPattern>(AddOp::name, -0.0, true, "add-zero");
  patterns.add<IdentityOperandPattern>(SubOp::name, 0.0, false, "sub-zero");
  patterns.add<IdentityOperandPattern>(DivOp::name, 1.0, false, "div-by-one");
  patterns.add<TransposeTransposePattern>();
  patterns.add<ReshapeReshapePattern>();
  patterns.add<SameTypeCastPattern>();
  patterns.add<IdentityScalePattern>();
}

std::unique_ptr<Pass> create_simplify_pass(GreedyRewriteConfig config) {
  PatternSet patterns;
  add_simplify_patterns(patterns);
  return std::make_unique<PatternPass>("simplify", std::move(patterns), config);
}

KILN_REGISTER_PASS("simplify", [] { return create_simplify_pass(); },
                   "algebraic identities: x*1, x+0, x-0, x/1, transpose/reshape chains, no-op casts and scales");

}  // namespace kiln

// ONNX's reductions: ReduceSum, ReduceMean, ReduceMax, ReduceProd as kiln's; ReduceMin,
// ReduceSumSquare, ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp composed.
// Axes are an attribute until ReduceSum's opset 13 (the others' 18, past
// kiln's range); as an input computed at run time they are kiln.sum_by's
// operand (their count must be known at import). No axes reduce every dim,
// unless noop_with_empty_axes = 1 (then the input is the result).
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/dialect/shape_ops.h"
#include "op_table.h"

namespace kiln::onnx::detail {

namespace {

template <typename OpT, bool AxesInputFrom13>
std::vector<Value> reduce(NodeContext& c) {
  std::vector<std::int64_t> axes;
  if (AxesInputFrom13 && c.opset >= 13) {
    if (c.inputs.size() > 1 && c.inputs[1] && !c.constants[1]) {
      const auto& ad = shaped_dims(c.inputs[1].type());
      if (ad.size() != 1 || ad[0] < 0) c.unsupported("axes computed at run time of a length not known at import");
      if (ad[0] > 0)
        return {c.b.create<SumByOp>(c.input(0), c.inputs[1], c.int_attr("keepdims", 1) != 0).result()};
    } else if (c.inputs.size() > 1 && c.inputs[1]) {
      axes = c.constant_ints(1, "the axes");
    }
  } else {
    axes = c.ints_attr("axes");
  }
  if (axes.empty() && c.int_attr("noop_with_empty_axes", 0) != 0) return {c.input(0)};
  return {c.b.create<OpT>(c.input(0), axes, c.int_attr("keepdims", 1) != 0).result()};
}

// The reductions kiln has no op for, composed: before(x) reduced by Sum or
// Max, then after(result). Axes are attributes in every opset kiln imports.
struct Composed {
  std::vector<std::int64_t> axes;
  bool keepdims;
};
Composed composed_axes(NodeContext& c) { return {c.ints_attr("axes"), c.int_attr("keepdims", 1) != 0}; }

template <typename Reduce, typename Pre, typename Post>
std::vector<Value> compose(NodeContext& c, Pre pre, Post post) {
  const Composed a = composed_axes(c);
  Value x = pre(c.input(0));
  return {post(c.b.create<Reduce>(x, a.axes, a.keepdims).result())};
}

std::vector<Value> reduce_min(NodeContext& c) {  // -max(-x)
  auto neg = [&](Value v) { return c.b.create<NegOp>(v).result(); };
  return compose<MaxOp>(c, neg, neg);
}
std::vector<Value> reduce_sum_square(NodeContext& c) {
  return compose<SumOp>(c, [&](Value v) { return c.b.create<SquareOp>(v).result(); },
                        [](Value v) { return v; });
}
std::vector<Value> reduce_l1(NodeContext& c) {
  return compose<SumOp>(c, [&](Value v) { return c.b.create<AbsOp>(v).result(); },
                        [](Value v) { return v; });
}
std::vector<Value> reduce_l2(NodeContext& c) {
  return compose<SumOp>(c, [&](Value v) { return c.b.create<SquareOp>(v).result(); },
                        [&](Value v) { return c.b.create<SqrtOp>(v).result(); });
}
std::vector<Value> reduce_log_sum(NodeContext& c) {
  return compose<SumOp>(c, [](Value v) { return v; },
                        [&](Value v) { return c.b.create<LogOp>(v).result(); });
}
std::vector<Value> reduce_log_sum_exp(NodeContext& c) {  // as ONNX defines it: log(Σ exp(x))
  return compose<SumOp>(c, [&](Value v) { return c.b.create<ExpOp>(v).result(); },
                        [&](Value v) { return c.b.create<LogOp>(v).result(); });
}

}  // namespace

void add_reduce_ops(OpTable& t) {
  t["ReduceSum"] = {&reduce<SumOp, true>, 1};
  t["ReduceMean"] = {&reduce<MeanOp, false>, 1};
  t["ReduceMax"] = {&reduce<MaxOp, false>, 1};
  t["ReduceProd"] = {&reduce<ProdOp, false>, 1};
  t["ReduceMin"] = {&reduce_min, 1};
  t["ReduceSumSquare"] = {&reduce_sum_square, 1};
  t["ReduceL1"] = {&reduce_l1, 1};
  t["ReduceL2"] = {&reduce_l2, 1};
  t["ReduceLogSum"] = {&reduce_log_sum, 1};
  t["ReduceLogSumExp"] = {&reduce_log_sum_exp, 1};
}

}  // namespace kiln::onnx::detail

// ONNX's reductions: ReduceSum, ReduceMean, ReduceMax, ReduceProd as kiln's; ReduceMin,
// ReduceSumSquare, ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp composed.
// Axes are an attribute until ReduceSum's opset 13 and the others' 18, an
// input since; computed at run time they are kiln.sum_by's operand for
// ReduceSum (their count must be known at import) and an error for the
// others. No axes reduce every dim, unless noop_with_empty_axes = 1: then
// kiln's four give the input, and the composed ones are an error (ONNX's
// reference applies their elementwise part, the spec says the input).
#include <type_traits>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/dialect/shape_ops.h"
#include "op_table.h"

namespace kiln::onnx::detail {

namespace {

// Whether node c reduces nothing: no axes and noop_with_empty_axes.
bool reduces_nothing(NodeContext& c, const std::vector<std::int64_t>& axes) {
  return axes.empty() && c.int_attr("noop_with_empty_axes", 0) != 0;
}

template <typename OpT, std::int64_t AxesInputSince>
std::vector<Value> reduce(NodeContext& c) {
  const bool keepdims = c.int_attr("keepdims", 1) != 0;
  std::vector<std::int64_t> axes;
  if (std::is_same_v<OpT, SumOp> && c.opset >= AxesInputSince && c.inputs.size() > 1 && c.inputs[1] &&
      !c.constants[1]) {
    const auto& ad = shaped_dims(c.inputs[1].type());
    if (ad.size() != 1 || ad[0] < 0) c.unsupported("axes computed at run time of a length not known at import");
    if (ad[0] > 0) return {c.b.create<SumByOp>(c.input(0), c.inputs[1], keepdims).result()};
  } else {
    axes = c.ints_input_or_attr(1, "axes", AxesInputSince, "the axes");
  }
  if (reduces_nothing(c, axes)) return {c.input(0)};
  return {c.b.create<OpT>(c.input(0), axes, keepdims).result()};
}

// The reductions kiln has no op for, composed: before(x) reduced by Sum or
// Max, then after(result).
struct Composed {
  std::vector<std::int64_t> axes;
  bool keepdims;
};
Composed composed_axes(NodeContext& c) {
  Composed a{c.ints_input_or_attr(1, "axes", 18, "the axes"), c.int_attr("keepdims", 1) != 0};
  if (reduces_nothing(c, a.axes)) c.unsupported("noop_with_empty_axes with no axes");
  return a;
}

template <typename Reduce, typename Pre, typename Post>
std::vector<Value> compose(NodeContext& c, Pre pre, Post post) {
  const Composed a = composed_axes(c);
  Value x = pre(c.input(0));
  return {post(c.b.create<Reduce>(x, a.axes, a.keepdims).result())};
}

// -max(-x); integers of 32 bits or fewer negated as i64 (no wrap at 0 or
// at their minimum); u64 is an error, i64's minimum wraps.
std::vector<Value> reduce_min(NodeContext& c) {
  const DataType dt = shaped_data_type(c.input(0).type());
  const bool wide = dt == DataType::UInt8 || dt == DataType::UInt16 || dt == DataType::UInt32 ||
                    dt == DataType::Int8 || dt == DataType::Int16 || dt == DataType::Int32;
  if (dt == DataType::UInt64) c.unsupported("ReduceMin of u64");
  auto neg = [&](Value v) {
    if (wide && shaped_data_type(v.type()) == dt) v = c.b.create<CastOp>(v, DataType::Int64).result();
    return c.b.create<NegOp>(v).result();
  };
  auto back = [&](Value v) {
    Value y = c.b.create<NegOp>(v).result();
    return wide ? c.b.create<CastOp>(y, dt).result() : y;
  };
  return compose<MaxOp>(c, neg, back);
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
  t["ReduceSum"] = {&reduce<SumOp, 13>, 1};
  t["ReduceMean"] = {&reduce<MeanOp, 18>, 1};
  t["ReduceMax"] = {&reduce<MaxOp, 18>, 1};
  t["ReduceProd"] = {&reduce<ProdOp, 18>, 1};
  t["ReduceMin"] = {&reduce_min, 1};
  t["ReduceSumSquare"] = {&reduce_sum_square, 1};
  t["ReduceL1"] = {&reduce_l1, 1};
  t["ReduceL2"] = {&reduce_l2, 1};
  t["ReduceLogSum"] = {&reduce_log_sum, 1};
  t["ReduceLogSumExp"] = {&reduce_log_sum_exp, 1};
}

}  // namespace kiln::onnx::detail

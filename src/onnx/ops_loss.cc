// ONNX's losses over class scores [N, C, d1, …] and integer targets
// [N, d1, …]: NegativeLogLikelihoodLoss, and SoftmaxCrossEntropyLoss (its
// log_prob = log_softmax over the classes, then the same loss; log_prob is
// its optional second output). Composed of kiln ops, so an imported loss has
// a gradient: the target's entry is taken along the class dim
// (kiln.take_along_axis), scaled by the class weight (kiln.gather) and
// zeroed where the target is ignore_index (which may be negative or >= C).
// reduction: none, sum, or mean = Σ loss / Σ weights of the targets not
// ignored (ONNX's rule; without weights, their count). ONNX leaves a target
// outside [0, C) that is not ignore_index undefined: here one >= C is a
// run-time OutOfRange error, a negative one counts from the end of the
// classes (take_along_axis's rule) unless there are weights (kiln.gather
// rejects it).
#include "kiln/dialect/kiln_dialect.h"
#include "op_table.h"

namespace kiln::onnx::detail {

namespace {

Value scalar(Builder& b, double v, DataType dt) {
  return b.create<FullOp>(std::vector<std::int64_t>{}, v, dt).result();
}

// The loss of log-probabilities `logp` [N, C, d…] at `target` [N, d…] with
// optional class weights [C], under the node's reduction and ignore_index.
Value nll(NodeContext& c, Value logp, Value target, Value weight) {
  Builder& b = c.b;
  const auto* red_attr = c.attribute("reduction");
  const std::string red = red_attr ? red_attr->s() : "mean";
  if (red != "none" && red != "sum" && red != "mean") c.unsupported("reduction '" + red + "'");
  const auto& xs = shaped_dims(logp.type());
  const auto& ts = shaped_dims(target.type());
  if (xs.size() < 2 || ts.size() + 1 != xs.size())
    c.unsupported("input of rank " + std::to_string(xs.size()) + " with target of rank " +
                  std::to_string(ts.size()) + " (expected [N, C, d…] and [N, d…])");
  const DataType dt = shaped_data_type(logp.type());
  const DataType it = shaped_data_type(target.type());

  Value ignored;  // bool [N, d…], where target == ignore_index
  if (c.has_attr("ignore_index")) {
    ignored = b.create<EqualOp>(target, scalar(b, static_cast<double>(c.int_attr("ignore_index", 0)), it))
                  .result();
    target = b.create<WhereOp>(ignored, scalar(b, 0, it), target).result();
  }
  Value picked = b.create<TakeAlongAxisOp>(logp, b.create<UnsqueezeOp>(target, std::vector<std::int64_t>{1}).result(),
                                           std::int64_t{1})
                     .result();
  Value loss = b.create<NegOp>(b.create<SqueezeOp>(picked, std::vector<std::int64_t>{1}).result()).result();

  Value w;  // [N, d…]: the weight of each target, 0 where ignored; null = all 1
  if (weight) w = b.create<GatherOp>(weight, target, std::int64_t{0}).result();
  if (ignored) w = b.create<WhereOp>(ignored, scalar(b, 0, dt), w ? w : scalar(b, 1, dt)).result();
  if (w) loss = b.create<MulOp>(loss, w).result();

  if (red == "none") return loss;
  Value total = b.create<SumOp>(loss).result();
  if (red == "sum") return total;
  if (!w) return b.create<MeanOp>(loss).result();
  return b.create<DivOp>(total, b.create<SumOp>(w).result()).result();
}

Value optional_input(const NodeContext& c, std::size_t i) {
  return i < c.inputs.size() ? c.inputs[i] : Value();
}

std::vector<Value> nll_loss(NodeContext& c) {
  return {nll(c, c.input(0), c.input(1), optional_input(c, 2))};
}

std::vector<Value> softmax_cross_entropy(NodeContext& c) {
  Value log_prob = c.b.create<LogSoftmaxOp>(c.input(0), std::int64_t{1}).result();
  return {nll(c, log_prob, c.input(1), optional_input(c, 2)), log_prob};
}

}  // namespace

void add_loss_ops(OpTable& t) {
  t["NegativeLogLikelihoodLoss"] = {&nll_loss, 12};
  t["SoftmaxCrossEntropyLoss"] = {&softmax_cross_entropy, 12};
}

}  // namespace kiln::onnx::detail

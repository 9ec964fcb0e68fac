// ONNX's 2-D convolution and pooling (NCHW) → kiln.conv2d (+ a broadcast bias
// add), kiln.max_pool2d, kiln.avg_pool2d; the global pools as reductions over
// the spatial dims; LayerNormalization (composed, with its Mean
// and InvStdDev outputs); BatchNormalization and Dropout at inference.
#include <algorithm>

#include "kiln/dialect/kiln_dialect.h"
#include "op_table.h"

namespace kiln::onnx::detail {

namespace {

std::vector<std::int64_t> ints_or(const NodeContext& c, const std::string& name,
                                  std::vector<std::int64_t> fallback) {
  std::vector<std::int64_t> v = c.ints_attr(name);
  return v.empty() ? fallback : v;
}

// The node's 2-D window attributes, checked: a rank-4 input, explicit pads
// (auto_pad NOTSET or VALID), as kiln's [top, bottom, left, right].
struct Window2d {
  std::vector<std::int64_t> kernel, strides, pads, dilations;
};
Window2d window2d(NodeContext& c, bool has_kernel_attr) {
  if (shaped_dims(c.input(0).type()).size() != 4)
    c.unsupported("only 2-D (NCHW, rank-4) inputs are imported");
  const auto* auto_pad = c.attribute("auto_pad");
  if (auto_pad && auto_pad->s() != "NOTSET" && auto_pad->s() != "VALID")
    c.unsupported("auto_pad " + auto_pad->s());
  Window2d w;
  if (has_kernel_attr) {
    w.kernel = c.ints_attr("kernel_shape");
    if (w.kernel.size() != 2) c.unsupported("kernel_shape must have 2 dims");
  }
  w.strides = ints_or(c, "strides", {1, 1});
  w.dilations = ints_or(c, "dilations", {1, 1});
  const std::vector<std::int64_t> p = ints_or(c, "pads", {0, 0, 0, 0});  // [h0, w0, h1, w1]
  if (p.size() != 4 || w.strides.size() != 2 || w.dilations.size() != 2)
    c.unsupported("pads / strides / dilations of a 2-D window");
  w.pads = {p[0], p[2], p[1], p[3]};
  return w;
}

std::vector<Value> conv(NodeContext& c) {
  Window2d w = window2d(c, false);
  Value y = c.b.create<Conv2dOp>(c.input(0), c.input(1), w.strides, w.pads, w.dilations,
                                 c.int_attr("group", 1))
                .result();
  if (c.inputs.size() > 2 && c.inputs[2]) {
    Value bias = c.b.create<ReshapeOp>(c.inputs[2], std::vector<std::int64_t>{1, -1, 1, 1}).result();
    y = c.b.create<AddOp>(y, bias).result();
  }
  return {y};
}

std::vector<Value> max_pool(NodeContext& c) {
  Window2d w = window2d(c, true);
  if (w.dilations != std::vector<std::int64_t>{1, 1}) c.unsupported("MaxPool with dilations");
  if (c.node.output_size() > 1 && !c.node.output(1).empty())
    c.unsupported("MaxPool's Indices output");
  return {c.b.create<MaxPool2dOp>(c.input(0), w.kernel, w.strides, w.pads,
                                  c.int_attr("ceil_mode", 0) != 0)
              .result()};
}

std::vector<Value> average_pool(NodeContext& c) {
  Window2d w = window2d(c, true);
  if (w.dilations != std::vector<std::int64_t>{1, 1}) c.unsupported("AveragePool with dilations");
  return {c.b.create<AvgPool2dOp>(c.input(0), w.kernel, w.strides, w.pads,
                                  c.int_attr("ceil_mode", 0) != 0,
                                  /*exclusive=*/c.int_attr("count_include_pad", 0) == 0)
              .result()};
}

// Over every dim after the channels, kept as extent 1.
template <typename OpT>
std::vector<Value> global_pool(NodeContext& c) {
  const auto rank = static_cast<std::int64_t>(shaped_dims(c.input(0).type()).size());
  if (rank < 3) c.unsupported("an input of rank below 3");
  std::vector<std::int64_t> axes;
  for (std::int64_t a = 2; a < rank; ++a) axes.push_back(a);
  return {c.b.create<OpT>(c.input(0), axes, true).result()};
}

// Inference: y = x, the mask all true. Training mode (opset 12's input, or is_test
// = 0 before opset 7) draws random numbers: not imported.
std::vector<Value> dropout(NodeContext& c) {
  if (c.opset < 7 && c.int_attr("is_test", 0) == 0) c.unsupported("Dropout in training (is_test = 0)");
  if (c.inputs.size() > 2 && c.inputs[2]) {
    if (!c.constants[2]) c.unsupported("Dropout's training_mode computed at run time");
    if (c.constants[2]->to_vector<bool>().at(0)) c.unsupported("Dropout in training mode");
  }
  if (c.node.output_size() < 2 || c.node.output(1).empty()) return {c.input(0)};
  // The mask: every element kept (true), x's dims.
  Value x = c.input(0);
  const auto& d = shaped_dims(x.type());
  if (std::none_of(d.begin(), d.end(), [](std::int64_t v) { return v < 0; }))
    return {x, c.b.create<FullOp>(d, 1.0, DataType::Bool).result()};
  return {x, c.b.create<FullByOp>(c.b.create<ShapeOp>(x).result(), 1.0, DataType::Bool).result()};
}

// Inference: y = (x - mean) · scale / sqrt(var + epsilon) + B, per channel
// (dim 1), composed from broadcasting kiln ops; training mode is not imported.
std::vector<Value> batch_norm(NodeContext& c) {
  if (c.int_attr("training_mode", 0) != 0) c.unsupported("BatchNormalization in training mode");
  if (c.opset < 7 && c.int_attr("is_test", 0) == 0)
    c.unsupported("BatchNormalization with is_test = 0");
  if (c.opset < 9 && c.int_attr("spatial", 1) == 0) c.unsupported("BatchNormalization with spatial = 0");
  for (int k = 1; k < c.node.output_size(); ++k)
    if (!c.node.output(k).empty()) c.unsupported("BatchNormalization's running statistics outputs");
  Value x = c.input(0);
  const auto rank = shaped_dims(x.type()).size();
  if (rank < 2) c.unsupported("an input of rank below 2");
  std::vector<std::int64_t> per_channel(rank, 1);
  per_channel[1] = -1;
  auto channel = [&](std::size_t i) { return c.b.create<ReshapeOp>(c.input(i), per_channel).result(); };
  const DataType dt = shaped_data_type(x.type());
  Value eps = c.b.create<FullOp>(std::vector<std::int64_t>{}, c.float_attr("epsilon", 1e-5f), dt).result();
  Value inv_std = c.b.create<SqrtOp>(c.b.create<AddOp>(channel(4), eps).result()).result();
  Value gain = c.b.create<DivOp>(channel(1), inv_std).result();
  Value centered = c.b.create<SubOp>(x, channel(3)).result();
  return {c.b.create<AddOp>(c.b.create<MulOp>(centered, gain).result(), channel(2)).result()};
}

// LayerNormalization (opset 17) over the dims from `axis` on, composed of
// kiln ops so its optional Mean and InvStdDev outputs (kept dims) come too:
// Y = (X - mean) · invstd · Scale + B, invstd = 1 / sqrt(var + epsilon).
std::vector<Value> layer_norm(NodeContext& c) {
  Value x = c.input(0);
  const auto rank = static_cast<std::int64_t>(shaped_dims(x.type()).size());
  std::int64_t axis = c.int_attr("axis", -1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) c.unsupported("axis out of range");
  std::vector<std::int64_t> axes;
  for (std::int64_t a = axis; a < rank; ++a) axes.push_back(a);
  Value mean = c.b.create<MeanOp>(x, axes, true).result();
  Value centered = c.b.create<SubOp>(x, mean).result();
  Value var = c.b.create<MeanOp>(c.b.create<SquareOp>(centered).result(), axes, true).result();
  Value eps = c.b.create<FullOp>(std::vector<std::int64_t>{}, c.float_attr("epsilon", 1e-5f),
                                 shaped_data_type(x.type()))
                  .result();
  Value inv_std = c.b.create<DivOp>(c.b.create<FullOp>(std::vector<std::int64_t>{}, 1.0,
                                                       shaped_data_type(x.type()))
                                        .result(),
                                    c.b.create<SqrtOp>(c.b.create<AddOp>(var, eps).result()).result())
                      .result();
  Value y = c.b.create<MulOp>(c.b.create<MulOp>(centered, inv_std).result(), c.input(1)).result();
  if (c.inputs.size() > 2 && c.inputs[2]) y = c.b.create<AddOp>(y, c.inputs[2]).result();
  return {y, mean, inv_std};
}

}  // namespace

void add_nn_ops(OpTable& t) {
  t["LayerNormalization"] = {&layer_norm, 17};
  t["BatchNormalization"] = {&batch_norm, 1};
  t["Conv"] = {&conv, 1};
  t["MaxPool"] = {&max_pool, 1};
  t["AveragePool"] = {&average_pool, 1};
  t["GlobalAveragePool"] = {&global_pool<MeanOp>, 1};
  t["GlobalMaxPool"] = {&global_pool<MaxOp>, 1};
  t["Dropout"] = {&dropout, 1};
}

}  // namespace kiln::onnx::detail

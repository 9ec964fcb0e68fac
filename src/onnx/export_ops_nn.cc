// Export of kiln's nn ops: matmul (transposes as Transpose nodes), conv2d
// and conv2d_transpose, the pools, softmax / log_softmax, layer_norm
// (LayerNormalization, opset 17), rms_norm and scaled dot-product attention
// (composed), batch_norm and dropout at inference, embedding (Gather),
// kiln.rnn / kiln.gru / kiln.lstm (RNN, GRU, LSTM: the same operands and
// attributes; an int64 sequence_lens goes through a Cast to int32).
#include <cmath>
#include <limits>

#include "export_table.h"
#include "kiln/dialect/attention_ops.h"
#include "kiln/dialect/kiln_dialect.h"

namespace kiln::onnx::detail {

namespace {

// x with its last two dims swapped.
std::string swap_last_two(EmitContext& c, const std::string& x, std::size_t rank) {
  std::vector<std::int64_t> perm;
  for (std::size_t i = 0; i < rank; ++i) perm.push_back(static_cast<std::int64_t>(i));
  std::swap(perm[rank - 1], perm[rank - 2]);
  ::onnx::NodeProto* n = nullptr;
  std::string o = c.node1("Transpose", {x}, &n);
  set_attr(*n, "perm", perm);
  return o;
}

void matmul(EmitContext& c) {
  const auto a = MatmulOp::dyn_cast(c.op()).attrs();
  std::string x = c.in(0), y = c.in(1);
  if (c.in_dims(0).size() < 2 || c.in_dims(1).size() < 2)
    c.unsupported("an operand of rank below 2");
  if (a.transpose_x) x = swap_last_two(c, x, c.in_dims(0).size());
  if (a.transpose_y) y = swap_last_two(c, y, c.in_dims(1).size());
  c.node("MatMul", {x, y}, {c.out(0)});
}

// kiln's [top, bottom, left, right] as ONNX's [top, left, bottom, right].
std::vector<std::int64_t> onnx_pads(EmitContext& c, const std::vector<std::int64_t>& p) {
  const auto p4 = conv::paddings4(c.op()->name(), p);
  return {p4[0], p4[2], p4[1], p4[3]};
}

// The kernel dims of the op's weight, its input #w_input.
std::vector<std::int64_t> kernel_shape(EmitContext& c, std::size_t w_input = 1) {
  const auto& w = c.in_dims(w_input);
  if (w.size() != 4 || w[2] < 0 || w[3] < 0) c.unsupported("a weight whose kernel dims are not known");
  return {w[2], w[3]};
}

// A Conv node's attributes from a kiln conv's (its weight input #w_input).
template <typename A>
void set_conv_attrs(EmitContext& c, ::onnx::NodeProto& n, const A& a, std::size_t w_input = 1) {
  set_attr(n, "kernel_shape", kernel_shape(c, w_input));
  set_attr(n, "strides", a.strides);
  set_attr(n, "pads", onnx_pads(c, a.paddings));
  set_attr(n, "dilations", a.dilations);
  set_attr(n, "group", a.groups);
}

void conv2d(EmitContext& c) {
  set_conv_attrs(c, c.node("Conv", {c.in(0), c.in(1)}, {c.out(0)}),
                 Conv2dOp::dyn_cast(c.op()).attrs());
}

// Conv with its bias input, then Add of the residual (when not empty), then
// the activation: Relu, Clip(0, 6), or Sigmoid and Mul for silu, into
// `out`. An NHWC op's x and residual go through Transposes, its result
// back (ONNX's Conv is NCHW).
void emit_fused_conv(EmitContext& c, const FusedConv2dOp::Attributes& a, const std::string& x_in,
                     std::size_t w_input, const std::string& bias, const std::string& residual,
                     const std::string& out) {
  const bool act = a.activation != "none", nhwc = a.data_format == "NHWC";
  auto as_nchw = [&](const std::string& v) {
    if (!nhwc) return v;
    const std::string t = c.fresh("nchw");
    set_attr(c.node("Transpose", {v}, {t}), "perm", std::vector<std::int64_t>{0, 3, 1, 2});
    return t;
  };
  const std::string x = as_nchw(x_in);
  const std::string y = nhwc ? c.fresh("conv_nchw") : out;
  const std::string conv_out = act || !residual.empty() ? c.fresh("conv") : y;
  set_conv_attrs(c, c.node("Conv", {x, c.in(w_input), bias}, {conv_out}), a, w_input);
  std::string z = conv_out;
  if (!residual.empty()) {
    z = act ? c.fresh("sum") : y;
    c.node("Add", {conv_out, as_nchw(residual)}, {z});
  }
  if (a.activation == "relu") c.node("Relu", {z}, {y});
  if (a.activation == "relu6")
    c.node("Clip", {z, c.scalar(c.in_dtype(0), 0.0), c.scalar(c.in_dtype(0), 6.0)}, {y});
  if (a.activation == "silu") {
    const std::string sigmoid = c.fresh("sigmoid");
    c.node("Sigmoid", {z}, {sigmoid});
    c.node("Mul", {z, sigmoid}, {y});
  }
  if (nhwc)
    set_attr(c.node("Transpose", {y}, {out}), "perm", std::vector<std::int64_t>{0, 2, 3, 1});
}

void fused_conv2d(EmitContext& c) {
  emit_fused_conv(c, FusedConv2dOp::dyn_cast(c.op()).attrs(), c.in(0), 1, c.in(2),
                  c.op()->num_operands() == 4 ? c.in(3) : std::string(), c.out(0));
}

// Mul of x by its factors (broadcast as ONNX's Mul does), then fused_conv2d's nodes.
void channel_scaled_conv2d(EmitContext& c) {
  const std::string scaled = c.fresh("scaled");
  c.node("Mul", {c.in(0), c.in(1)}, {scaled});
  emit_fused_conv(c, ChannelScaledConv2dOp::dyn_cast(c.op()).attrs(), scaled, 2, c.in(3),
                  c.op()->num_operands() == 5 ? c.in(4) : std::string(), c.out(0));
}

// fused_conv2d's nodes, then ReduceMean of the result over axes 1 and 2.
void fused_conv2d_mean(EmitContext& c) {
  emit_fused_conv(c, FusedConv2dMeanOp::dyn_cast(c.op()).attrs(), c.in(0), 1, c.in(2), std::string(), c.out(0));
  auto& mean = c.node("ReduceMean", {c.out(0)}, {c.out(1)});
  set_attr(mean, "axes", std::vector<std::int64_t>{1, 2});
  set_attr(mean, "keepdims", std::int64_t{1});
}

// The two fused_conv2d's nodes, the expanded tensor between them.
void pointwise_depthwise_conv2d(EmitContext& c) {
  using Op = PointwiseDepthwiseConv2dOp;
  const auto a = Op::dyn_cast(c.op()).attrs();
  const std::string expanded = c.fresh("expanded");
  emit_fused_conv(c, Op::pointwise_attrs(a), c.in(0), 1, c.in(2), std::string(), expanded);
  const std::int64_t channels = shaped_dims(c.op()->operand_source(1).type())[0];
  emit_fused_conv(c, Op::depthwise_attrs(a, channels), expanded, 3, c.in(4), std::string(), c.out(0));
}

void conv2d_transpose(EmitContext& c) {
  const auto a = Conv2dTransposeOp::dyn_cast(c.op()).attrs();
  auto& n = c.node("ConvTranspose", {c.in(0), c.in(1)}, {c.out(0)});
  set_attr(n, "kernel_shape", kernel_shape(c));
  set_attr(n, "strides", a.strides);
  set_attr(n, "pads", onnx_pads(c, a.paddings));
  set_attr(n, "output_padding", a.output_padding);
  set_attr(n, "dilations", a.dilations);
  set_attr(n, "group", a.groups);
}

// MaxPool; an NHWC op between Transposes (ONNX's MaxPool is NCHW).
void max_pool2d(EmitContext& c) {
  const auto a = MaxPool2dOp::dyn_cast(c.op()).attrs();
  const bool nhwc = a.data_format == "NHWC";
  std::string x = c.in(0), y = c.out(0);
  if (nhwc) {
    x = c.fresh("nchw"), y = c.fresh("pool_nchw");
    set_attr(c.node("Transpose", {c.in(0)}, {x}), "perm", std::vector<std::int64_t>{0, 3, 1, 2});
  }
  auto& n = c.node("MaxPool", {x}, {y});
  set_attr(n, "kernel_shape", a.kernel_size);
  set_attr(n, "strides", a.strides.empty() ? a.kernel_size : a.strides);
  set_attr(n, "pads", onnx_pads(c, a.paddings));
  set_attr(n, "ceil_mode", static_cast<std::int64_t>(a.ceil_mode));
  if (nhwc)
    set_attr(c.node("Transpose", {y}, {c.out(0)}), "perm", std::vector<std::int64_t>{0, 2, 3, 1});
}

void avg_pool2d(EmitContext& c) {
  const auto a = AvgPool2dOp::dyn_cast(c.op()).attrs();
  auto& n = c.node("AveragePool", {c.in(0)}, {c.out(0)});
  set_attr(n, "kernel_shape", a.kernel_size);
  set_attr(n, "strides", a.strides.empty() ? a.kernel_size : a.strides);
  set_attr(n, "pads", onnx_pads(c, a.paddings));
  set_attr(n, "ceil_mode", static_cast<std::int64_t>(a.ceil_mode));
  set_attr(n, "count_include_pad", static_cast<std::int64_t>(!a.exclusive));
}

// GlobalAveragePool for a 1×1 output; an AveragePool when the output
// divides the known input extents (the windows are then equal and
// disjoint); anything else has no ONNX form.
void adaptive_avg_pool2d(EmitContext& c) {
  const auto out = AdaptiveAvgPool2dOp::dyn_cast(c.op()).attrs().output_size;
  if (out == std::vector<std::int64_t>{1, 1}) {
    c.node("GlobalAveragePool", {c.in(0)}, {c.out(0)});
    return;
  }
  const auto& x = c.in_dims(0);
  if (x.size() != 4 || x[2] < 0 || x[3] < 0 || x[2] % out[0] != 0 || x[3] % out[1] != 0)
    c.unsupported("adaptive windows of unequal sizes (the input's height and width must be known "
                  "multiples of the output size)");
  const std::vector<std::int64_t> k{x[2] / out[0], x[3] / out[1]};
  auto& n = c.node("AveragePool", {c.in(0)}, {c.out(0)});
  set_attr(n, "kernel_shape", k);
  set_attr(n, "strides", k);
}

// RoiAlign (opset 16); ONNX's batch_indices are int64, so an i32 operand
// is cast.
void roi_align(EmitContext& c) {
  const auto a = RoiAlignOp::dyn_cast(c.op()).attrs();
  std::string indices = c.in(2);
  if (c.in_dtype(2) != DataType::Int64) {
    indices = c.fresh("batch_indices");
    set_attr(c.node("Cast", {c.in(2)}, {indices}), "to", static_cast<std::int64_t>(::onnx::TensorProto::INT64));
  }
  auto& n = c.node("RoiAlign", {c.in(0), c.in(1), indices}, {c.out(0)});
  set_attr(n, "coordinate_transformation_mode", std::string(a.aligned ? "half_pixel" : "output_half_pixel"));
  set_attr(n, "mode", a.mode);
  set_attr(n, "output_height", a.output_size[0]);
  set_attr(n, "output_width", a.output_size[1]);
  set_attr(n, "sampling_ratio", a.sampling_ratio);
  set_attr(n, "spatial_scale", static_cast<float>(a.spatial_scale));
}

template <typename SoftmaxT>
void softmax(EmitContext& c) {
  auto& n = c.node(std::is_same_v<SoftmaxT, SoftmaxOp> ? "Softmax" : "LogSoftmax", {c.in(0)},
                   {c.out(0)});
  set_attr(n, "axis", SoftmaxT::dyn_cast(c.op()).attrs().axis);
}

// A norm's weight (operand i) shaped like the normalized dims of x.
std::string norm_weight(EmitContext& c, std::size_t i, std::int64_t axis) {
  const auto& x = c.in_dims(0);
  const std::vector<std::int64_t> want(x.begin() + axis, x.end());
  if (c.in_dims(i) == want) return c.in(i);
  for (auto d : want)
    if (d < 0) c.unsupported("a flattened weight over normalized dims that are not known");
  return c.node1("Reshape", {c.in(i), c.const_i64(want)});
}

// A per-row statistic kept as [..., 1, …] by ONNX, as kiln's flat [M].
void flat_stat(EmitContext& c, const std::string& kept, std::size_t result) {
  c.node("Reshape", {kept, c.const_i64({-1})}, {c.out(result)});
}

void layer_norm(EmitContext& c) {
  const auto a = LayerNormOp::dyn_cast(c.op()).attrs();
  const std::int64_t axis = norm_axis(a.begin_norm_axis, c.in_dims(0).size());
  const bool stats = c.used(1) || c.used(2);
  if (stats && norm_stats_dtype(c.in_dtype(0)) != DataType::Float32)
    c.unsupported("mean / rstd of an f64 layer_norm (ONNX keeps them in f32)");
  std::vector<std::string> outs{c.out(0)};
  if (stats) {
    outs.push_back(c.fresh("mean"));
    outs.push_back(c.fresh("rstd"));
  }
  auto& n = c.node("LayerNormalization",
                   {c.in(0), norm_weight(c, 1, axis), norm_weight(c, 2, axis)}, outs);
  set_attr(n, "axis", axis);
  set_attr(n, "epsilon", static_cast<float>(a.epsilon));
  if (stats) {
    flat_stat(c, outs[1], 1);
    flat_stat(c, outs[2], 2);
  }
}

// y = x · 1/sqrt(mean(x²) + eps) · weight over the normalized dims.
void rms_norm(EmitContext& c) {
  const auto a = RmsNormOp::dyn_cast(c.op()).attrs();
  const std::size_t rank = c.in_dims(0).size();
  const std::int64_t axis = norm_axis(a.begin_norm_axis, rank);
  const DataType dt = c.in_dtype(0);
  std::vector<std::int64_t> axes;
  for (auto i = axis; i < static_cast<std::int64_t>(rank); ++i) axes.push_back(i);
  ::onnx::NodeProto* mean = nullptr;
  const std::string ms = c.node1("ReduceMean", {c.node1("Mul", {c.in(0), c.in(0)})}, &mean);
  set_attr(*mean, "axes", axes);
  set_attr(*mean, "keepdims", std::int64_t{1});
  const std::string rstd =
      c.node1("Reciprocal", {c.node1("Sqrt", {c.node1("Add", {ms, c.scalar(dt, a.epsilon)})})});
  c.node("Mul", {c.node1("Mul", {c.in(0), rstd}), norm_weight(c, 1, axis)}, {c.out(0)});
  if (c.used(1)) flat_stat(c, rstd, 1);
}

// Inference only: the running statistics normalize x, then the activation
// ("" none, "relu", "relu6"). An NHWC op's x goes through a Transpose, its
// y back (ONNX's BatchNormalization is NCHW).
void batch_norm_nodes(EmitContext& c, double epsilon, double momentum, bool is_test, const std::string& format,
                      const std::string& activation) {
  if (!is_test)
    c.unsupported("batch_norm in training mode (is_test false); export the for-test clone "
                  "(kiln::clone_for_test)");
  const bool nhwc = format == "NHWC";
  std::string x = c.in(0);
  if (nhwc) set_attr(c.node("Transpose", {c.in(0)}, {x = c.fresh("nchw")}), "perm", std::vector<std::int64_t>{0, 3, 1, 2});
  const std::string y = nhwc ? c.fresh("y_nchw") : c.out(0);
  const std::string z = activation.empty() ? y : c.fresh("normalized");
  auto& n = c.node("BatchNormalization", {x, c.in(1), c.in(2), c.in(3), c.in(4)}, {z});
  set_attr(n, "epsilon", static_cast<float>(epsilon));
  set_attr(n, "momentum", static_cast<float>(momentum));
  if (activation == "relu") c.node("Relu", {z}, {y});
  if (activation == "relu6") c.node("Clip", {z, c.scalar(c.in_dtype(0), 0.0), c.scalar(c.in_dtype(0), 6.0)}, {y});
  if (nhwc) set_attr(c.node("Transpose", {y}, {c.out(0)}), "perm", std::vector<std::int64_t>{0, 2, 3, 1});
  // The running statistics pass through; the saved ones are what normalized.
  if (c.used(1)) c.node("Identity", {c.in(3)}, {c.out(1)});
  if (c.used(2)) c.node("Identity", {c.in(4)}, {c.out(2)});
  if (c.used(3)) c.node("Identity", {c.in(3)}, {c.out(3)});
  if (c.used(4))
    c.node("Reciprocal",
           {c.node1("Sqrt", {c.node1("Add", {c.in(4), c.scalar(c.in_dtype(4), epsilon)})})},
           {c.out(4)});
}

void batch_norm(EmitContext& c) {
  const auto a = BatchNormOp::dyn_cast(c.op()).attrs();
  batch_norm_nodes(c, a.epsilon, a.momentum, a.is_test, a.data_format, "");
}

void fused_batch_norm(EmitContext& c) {
  const auto a = FusedBatchNormOp::dyn_cast(c.op()).attrs();
  batch_norm_nodes(c, a.epsilon, a.momentum, a.is_test, a.data_format, a.activation);
}

// Inference (is_test, or p = 0): the identity; the mask, if read, all true.
void dropout(EmitContext& c) {
  const auto a = DropoutOp::dyn_cast(c.op()).attrs();
  if (!a.is_test && a.p != 0)
    c.unsupported("dropout in training mode (is_test false); export the for-test clone "
                  "(kiln::clone_for_test)");
  c.node("Identity", {c.in(0)}, {c.out(0)});
  if (c.used(1)) {
    ::onnx::TensorProto one = tensor_proto(DataType::Bool, {1}, std::string(1, '\1'), c.where());
    auto& n = c.node("ConstantOfShape", {c.node1("Shape", {c.in(0)})}, {c.out(1)});
    set_attr(n, "value", one);
  }
}

// A key drawn at run time has no ONNX form; what reads it (attention
// dropout) is off in an inference graph, so a constant 0 stands in.
void random_key(EmitContext& c) {
  const std::uint64_t zero = 0;
  ::onnx::TensorProto t = tensor_proto(DataType::UInt64, {1},
                                       std::string(reinterpret_cast<const char*>(&zero), sizeof zero), c.where());
  auto& n = c.node("Constant", {}, {c.out(0)});
  set_attr(n, "value", t);
}

// [B, X, Y, W] → [B, Y, X, W]: BLHD ↔ BHLD.
std::string swap_heads(EmitContext& c, const std::string& x) {
  ::onnx::NodeProto* n = nullptr;
  std::string r = c.node1("Transpose", {x}, &n);
  set_attr(*n, "perm", std::vector<std::int64_t>{0, 2, 1, 3});
  return r;
}

// The causal mask of scores s ([.., Lq, Lk]): row i sees keys 0..i (top-left
// aligned); a constant when both lengths are known.
std::string causal_mask(EmitContext& c, const std::string& s, std::int64_t lq, std::int64_t lk) {
  if (lq >= 0 && lk >= 0) {
    std::string bytes(static_cast<std::size_t>(lq * lk), '\0');
    for (std::int64_t i = 0; i < lq; ++i)
      for (std::int64_t j = 0; j <= i && j < lk; ++j) bytes[static_cast<std::size_t>(i * lk + j)] = 1;
    return c.constant(DataType::Bool, {lq, lk}, bytes);
  }
  ::onnx::NodeProto* shape = nullptr;
  const std::string lq_lk = c.node1("Shape", {s}, &shape);
  set_attr(*shape, "start", std::int64_t{-2});
  ::onnx::NodeProto* ones = nullptr;
  const std::string all = c.node1("ConstantOfShape", {lq_lk}, &ones);
  set_attr(*ones, "value", tensor_proto(DataType::Bool, {1}, std::string(1, '\1'), c.where()));
  ::onnx::NodeProto* tri = nullptr;
  const std::string mask = c.node1("Trilu", {all}, &tri);
  set_attr(*tri, "upper", std::int64_t{0});
  return mask;
}

// The mask of key_lengths (operand 3), [B, 1, 1, Lk]: key j < key_lengths[b];
// k's sequence axis is `axis`.
std::string key_length_mask(EmitContext& c, std::size_t axis) {
  ::onnx::NodeProto* shape = nullptr;
  const std::string lk = c.node1("Shape", {c.in(1)}, &shape);
  set_attr(*shape, "start", static_cast<std::int64_t>(axis));
  set_attr(*shape, "end", static_cast<std::int64_t>(axis + 1));
  const std::string keys = c.node1(
      "Range", {c.scalar(DataType::Int64, 0), c.node1("Squeeze", {lk}), c.scalar(DataType::Int64, 1)});
  ::onnx::NodeProto* cast = nullptr;
  const std::string n = c.node1("Cast", {c.in(3)}, &cast);
  set_attr(*cast, "to", std::int64_t{::onnx::TensorProto_DataType_INT64});
  return c.node1("Less", {keys, c.node1("Reshape", {n, c.const_i64({-1, 1, 1, 1})})});
}

// x (BHLD [B, Hk, L, w]) repeated to h heads, each k / v head once per
// query head of its group: Unsqueeze at 2, Expand by h / hk there, Reshape.
std::string repeat_heads(EmitContext& c, const std::string& x, std::int64_t h, std::int64_t hk, std::int64_t w) {
  const std::string e =
      c.node1("Expand", {c.node1("Unsqueeze", {x, c.const_i64({2})}), c.const_i64({1, 1, h / hk, 1, 1})});
  return c.node1("Reshape", {e, c.const_i64({0, h, -1, w})});
}

// softmax(scale · q·kᵀ [+ a float mask] [causal: -inf above the diagonal;
// key_lengths: -inf from batch b's length on; a bool mask: -inf where
// false]) · v, in BHLD (layout BLHD: q, k, v transposed in and out
// transposed back; a mask is [.., Lq, Lk] in both). A row that sees no key
// is NaN in ONNX's Softmax where kiln gives 0. Inference only: dropout off
// (is_test, or dropout_p 0); its key, if any, is not read.
void attention(EmitContext& c) {
  const auto a = ScaledDotProductAttentionOp::dyn_cast(c.op()).attrs();
  if (!a.is_test && a.dropout_p != 0)
    c.unsupported("attention dropout in training mode (is_test false); export the for-test clone "
                  "(kiln::clone_for_test)");
  const bool heads_inner = attention_heads_inner(ScaledDotProductAttentionOp::name, a.layout);
  const auto& q = c.in_dims(0);
  const auto& k = c.in_dims(1);
  const DataType dt = c.in_dtype(0);
  if (q.size() != 4 || k.size() != 4) c.unsupported("q or k of a rank other than 4");
  if (a.scale == 0 && q[3] < 0) c.unsupported("a head size that is not known (for the default scale)");
  const double scale = attention_scale(a.scale, q[3]);
  const std::size_t l = heads_inner ? 1 : 2, hx = 3 - l;  // the sequence and head axes
  const std::int64_t lq = q[l], lk = k[l], h = q[hx], hk = k[hx], d = q[3] >= 0 ? q[3] : k[3],
                     dv = c.in_dims(2).back();
  // Grouped-query attention (head counts known and different): k and v
  // repeated to q's heads. A head count known only at run time exports as
  // multi-head attention.
  const bool grouped = h >= 0 && hk >= 0 && h != hk;
  if (grouped && (d < 0 || dv < 0)) c.unsupported("grouped-query attention with a head size that is not known");
  auto in = [&](int i) {
    const std::string x = heads_inner ? swap_heads(c, c.in(i)) : c.in(i);
    return grouped && i > 0 ? repeat_heads(c, x, h, hk, i == 1 ? d : dv) : x;
  };
  // q, k and v first: an importer fusing the chain from kᵀ on finds v defined.
  const std::string qh = in(0), kh = in(1), vh = in(2);
  std::string s = c.node1("Mul", {c.node1("MatMul", {qh, swap_last_two(c, kh, 4)}), c.scalar(dt, scale)});
  std::string mask = a.causal ? causal_mask(c, s, lq, lk) : std::string();
  auto and_mask = [&](const std::string& m) { mask = mask.empty() ? m : c.node1("And", {mask, m}); };
  std::vector<DataType> dtypes;
  for (std::size_t i = 0; i < c.num_operands(); ++i) dtypes.push_back(c.in_dtype(i));
  const AttentionOptionals opt = attention_optionals(ScaledDotProductAttentionOp::name, dtypes, 3);
  if (opt.key_lengths >= 0) and_mask(key_length_mask(c, l));
  const std::size_t m = static_cast<std::size_t>(opt.mask);
  if (opt.mask >= 0 && c.in_dtype(m) == DataType::Bool) and_mask(c.in(m));
  else if (opt.mask >= 0) s = c.node1("Add", {s, c.in(m)});
  if (!mask.empty()) s = c.node1("Where", {mask, s, c.scalar(dt, -std::numeric_limits<double>::infinity())});
  ::onnx::NodeProto* sm = nullptr;
  const std::string p = c.node1("Softmax", {s}, &sm);
  set_attr(*sm, "axis", std::int64_t{-1});
  if (heads_inner) {
    auto& back = c.node("Transpose", {c.node1("MatMul", {p, vh})}, {c.out(0)});
    set_attr(back, "perm", std::vector<std::int64_t>{0, 2, 1, 3});
  } else {
    c.node("MatMul", {p, vh}, {c.out(0)});
  }
  if (c.used(1)) {
    auto& n = c.node("ReduceLogSumExp", {s}, {c.out(1)});
    set_attr(n, "axes", std::vector<std::int64_t>{-1});
    set_attr(n, "keepdims", std::int64_t{0});
  }
}

// Gather of the weight's rows; padding_idx rows are zeros.
void embedding(EmitContext& c) {
  const std::int64_t pad = EmbeddingOp::dyn_cast(c.op()).attrs().padding_idx;
  if (pad < 0) {
    auto& n = c.node("Gather", {c.in(0), c.in(1)}, {c.out(0)});
    set_attr(n, "axis", std::int64_t{0});
    return;
  }
  ::onnx::NodeProto* g = nullptr;
  const std::string rows = c.node1("Gather", {c.in(0), c.in(1)}, &g);
  set_attr(*g, "axis", std::int64_t{0});
  const std::string is_pad = c.node1(
      "Unsqueeze", {c.node1("Equal", {c.in(1), c.scalar(c.in_dtype(1), static_cast<double>(pad))}),
                    c.const_i64({-1})});
  c.node("Where", {is_pad, c.scalar(c.in_dtype(0), 0.0), rows}, {c.out(0)});
}

}  // namespace

// RNN / GRU / LSTM: absent operands and unused results as empty names.
template <typename OpT>
void recurrent(EmitContext& c, const char* onnx_type) {
  const auto a = OpT::dyn_cast(c.op()).attrs();
  const rnn::Config cfg = rnn::config_of(OpT::name, a);
  auto opt = [&](int i) -> std::string {
    if (i < 0) return "";
    const std::size_t k = static_cast<std::size_t>(i);
    if (i == cfg.sequence_lens && c.in_dtype(k) != DataType::Int32) {
      ::onnx::NodeProto* n = nullptr;
      std::string o = c.node1("Cast", {c.in(k)}, &n);
      set_attr(*n, "to", static_cast<std::int64_t>(::onnx::TensorProto_DataType_INT32));
      return o;
    }
    return c.in(k);
  };
  std::vector<std::string> ins{c.in(0), c.in(1), c.in(2), opt(cfg.b), opt(cfg.sequence_lens),
                               opt(cfg.initial_h)};
  if (cfg.cell == rnn::Cell::Lstm) {
    ins.push_back(opt(cfg.initial_c));
    ins.push_back(opt(cfg.p));
  }
  while (ins.back().empty()) ins.pop_back();
  std::vector<std::string> outs;
  for (std::size_t i = 0; i < c.op()->num_results(); ++i) outs.push_back(c.used(i) ? c.out(i) : "");
  while (!outs.empty() && outs.back().empty()) outs.pop_back();
  auto& n = c.node(onnx_type, ins, outs);
  set_attr(n, "hidden_size", cfg.hidden_size);
  auto* dir = n.add_attribute();
  dir->set_name("direction");
  dir->set_type(::onnx::AttributeProto::STRING);
  dir->set_s(a.direction);
  if (!a.activations.empty()) {
    auto* acts = n.add_attribute();
    acts->set_name("activations");
    acts->set_type(::onnx::AttributeProto::STRINGS);
    std::vector<float> alphas, betas;
    for (const auto& f : cfg.activations) {
      const std::string s = rnn::activation_string(f);
      acts->add_strings(s.substr(0, s.find('(')));
      if (rnn::uses_alpha(f.kind)) alphas.push_back(static_cast<float>(f.alpha));
      if (rnn::uses_beta(f.kind)) betas.push_back(static_cast<float>(f.beta));
    }
    for (auto [name, v] : {std::pair{"activation_alpha", &alphas}, std::pair{"activation_beta", &betas}}) {
      if (v->empty()) continue;
      auto* at = n.add_attribute();
      at->set_name(name);
      at->set_type(::onnx::AttributeProto::FLOATS);
      for (float f : *v) at->add_floats(f);
    }
  }
  if (cfg.clip > 0) set_attr(n, "clip", static_cast<float>(cfg.clip));
  if (cfg.cell == rnn::Cell::Lstm && cfg.input_forget) set_attr(n, "input_forget", std::int64_t{1});
  if (cfg.cell == rnn::Cell::Gru && cfg.linear_before_reset)
    set_attr(n, "linear_before_reset", std::int64_t{1});
}

void add_export_nn(ExportTable& t) {
  t["kiln.rnn"] = [](EmitContext& c) { recurrent<RnnOp>(c, "RNN"); };
  t["kiln.gru"] = [](EmitContext& c) { recurrent<GruOp>(c, "GRU"); };
  t["kiln.lstm"] = [](EmitContext& c) { recurrent<LstmOp>(c, "LSTM"); };
  t["kiln.matmul"] = &matmul;
  t["kiln.conv2d"] = &conv2d;
  t["kiln.fused_conv2d"] = &fused_conv2d;
  t["kiln.channel_scaled_conv2d"] = &channel_scaled_conv2d;
  t["kiln.pointwise_depthwise_conv2d"] = &pointwise_depthwise_conv2d;
  t["kiln.fused_conv2d_mean"] = &fused_conv2d_mean;
  t["kiln.conv2d_transpose"] = &conv2d_transpose;
  t["kiln.max_pool2d"] = &max_pool2d;
  t["kiln.avg_pool2d"] = &avg_pool2d;
  t["kiln.adaptive_avg_pool2d"] = &adaptive_avg_pool2d;
  t["kiln.roi_align"] = &roi_align;
  t["kiln.softmax"] = &softmax<SoftmaxOp>;
  t["kiln.log_softmax"] = &softmax<LogSoftmaxOp>;
  t["kiln.layer_norm"] = &layer_norm;
  t["kiln.rms_norm"] = &rms_norm;
  t["kiln.batch_norm"] = &batch_norm;
  t["kiln.fused_batch_norm"] = &fused_batch_norm;
  t["kiln.dropout"] = &dropout;
  t["kiln.random_key"] = &random_key;
  t["kiln.scaled_dot_product_attention"] = &attention;
  t["kiln.embedding"] = &embedding;
}

}  // namespace kiln::onnx::detail

// kiln::nn::functional (include/kiln/frontend/functional.h): each function
// builds primitive ops at the end of the current main program.
#include <string>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/frontend/functional.h"
#include "kiln/frontend/program_guard.h"

namespace kiln::nn::functional {

namespace {

// kiln::Error unless `v` is a value of the current main program that the
// block being built can use (in_current_program).
void check_value(std::string_view fn, std::string_view arg, Value v) {
  if (!v) throw_error(ErrorKind::InvalidArgument, fn, ": ", arg, " is a null value");
  if (!in_current_program(v))
    throw_error(ErrorKind::InvalidArgument, fn, ": ", arg,
                " is not a value of the current main program (made under another ProgramGuard?)");
}

const std::vector<std::int64_t>& dims_of(std::string_view fn, std::string_view arg, Value v) {
  if (!v.type().isa<TensorType>() && !v.type().isa<VTensorType>())
    throw_error(ErrorKind::InvalidArgument, fn, ": ", arg, " must be a tensor, got ",
                v.type().to_string());
  return shaped_dims(v.type());
}

Value reduce(Builder& b, Value v, Reduction r) {
  switch (r) {
    case Reduction::Mean: return b.create<MeanOp>(v).result();
    case Reduction::Sum: return b.create<SumOp>(v).result();
    case Reduction::None: return v;
  }
  return v;
}

// input and label must have one shape (an unknown -1 matches any dim).
void check_same_shape(std::string_view fn, Value input, Value label) {
  const auto& a = dims_of(fn, "input", input);
  const auto& l = dims_of(fn, "label", label);
  bool same = a.size() == l.size();
  for (std::size_t i = 0; same && i < a.size(); ++i)
    same = a[i] == l[i] || a[i] == -1 || l[i] == -1;
  if (!same)
    throw_error(ErrorKind::InvalidArgument, fn, ": input ", meta::dims_string(a), " and label ",
                meta::dims_string(l), " must have the same shape");
}

// A single number stands for both spatial axes ({3} → {3, 3}).
std::vector<std::int64_t> pair(std::vector<std::int64_t> v) {
  if (v.size() == 1) v.push_back(v[0]);
  return v;
}

// bias [O] added along axis 1 of an NCHW result.
Value add_channel_bias(std::string_view fn, Builder& b, Value y, Value bias) {
  if (!bias) return y;
  check_value(fn, "bias", bias);
  const auto& bd = dims_of(fn, "bias", bias);
  const auto& yd = shaped_dims(y.type());
  if (bd.size() != 1 || (yd[1] >= 0 && bd[0] != yd[1]))
    throw_error(ErrorKind::InvalidArgument, fn, ": bias must be [", yd[1], "] (one per output channel), got ",
                meta::dims_string(bd));
  Value b3 = b.create<ReshapeOp>(bias, std::vector<std::int64_t>{bd[0], 1, 1}).result();
  return b.create<AddOp>(y, b3).result();
}

// The normalized_shape of layer_norm / rms_norm: x must end in it.
std::int64_t begin_norm_axis(std::string_view fn, Value x,
                             const std::vector<std::int64_t>& normalized_shape, double eps) {
  const auto& d = dims_of(fn, "x", x);
  const std::size_t k = normalized_shape.size();
  bool ok = k >= 1 && k <= d.size();
  for (std::size_t i = 0; ok && i < k; ++i) ok = d[d.size() - k + i] == normalized_shape[i];
  if (!ok)
    throw_error(ErrorKind::InvalidArgument, fn, ": x ", meta::dims_string(d),
                " must end in normalized_shape ", meta::dims_string(normalized_shape));
  if (!(eps > 0)) throw_error(ErrorKind::InvalidArgument, fn, ": eps ", eps, " must be > 0");
  return static_cast<std::int64_t>(d.size() - k);
}

// `v`, or a kiln.full of `shape` filled with `fill` when v is null.
Value or_full(std::string_view fn, std::string_view arg, Builder& b, Value v,
              const std::vector<std::int64_t>& shape, double fill, DataType dt) {
  if (v) {
    check_value(fn, arg, v);
    return v;
  }
  return b.create<FullOp>(shape, fill, dt).result();
}

}  // namespace

Value linear(Value x, Value weight, Value bias) {
  check_value("linear", "x", x);
  check_value("linear", "weight", weight);
  const auto& w = dims_of("linear", "weight", weight);
  if (w.size() != 2)
    throw_error(ErrorKind::InvalidArgument, "linear: weight must be [in, out], got ",
                meta::dims_string(w));
  Builder b = main_builder();
  Value y = b.create<MatmulOp>(x, weight).result();
  if (bias) {
    check_value("linear", "bias", bias);
    const auto& bd = dims_of("linear", "bias", bias);
    if (bd.size() != 1 || bd[0] != w[1])
      throw_error(ErrorKind::InvalidArgument, "linear: bias must be [", w[1], "], got ",
                  meta::dims_string(bd));
    y = b.create<AddOp>(y, bias).result();
  }
  return y;
}

Value relu(Value x) {
  check_value("relu", "x", x);
  return main_builder().create<ReluOp>(x).result();
}

Value gelu(Value x, bool approximate) {
  check_value("gelu", "x", x);
  return main_builder().create<GeluOp>(x, approximate).result();
}

Value tanh(Value x) {
  check_value("tanh", "x", x);
  return main_builder().create<TanhOp>(x).result();
}

Value sigmoid(Value x) {
  check_value("sigmoid", "x", x);
  return main_builder().create<SigmoidOp>(x).result();
}

Value softmax(Value x, std::int64_t axis) {
  check_value("softmax", "x", x);
  return main_builder().create<SoftmaxOp>(x, axis).result();
}

Value dropout(Value x, double p, bool training, std::int64_t seed) {
  check_value("dropout", "x", x);
  if (!(p >= 0.0 && p < 1.0))
    throw_error(ErrorKind::InvalidArgument, "dropout: p = ", p, " must lie in [0, 1)");
  if (!training || p == 0.0) return x;
  return main_builder().create<DropoutOp>(x, p, false, seed).result(0);
}

Value embedding(Value ids, Value weight, std::int64_t padding_idx) {
  check_value("embedding", "ids", ids);
  check_value("embedding", "weight", weight);
  return main_builder().create<EmbeddingOp>(weight, ids, padding_idx).result();
}

Value layer_norm(Value x, const std::vector<std::int64_t>& normalized_shape, Value weight,
                 Value bias, double eps) {
  check_value("layer_norm", "x", x);
  const std::int64_t begin = begin_norm_axis("layer_norm", x, normalized_shape, eps);
  Builder b = main_builder();
  const DataType dt = shaped_data_type(x.type());
  weight = or_full("layer_norm", "weight", b, weight, normalized_shape, 1.0, dt);
  bias = or_full("layer_norm", "bias", b, bias, normalized_shape, 0.0, dt);
  return b.create<LayerNormOp>(x, weight, bias, begin, eps).result(0);
}

Value rms_norm(Value x, const std::vector<std::int64_t>& normalized_shape, Value weight,
               double eps) {
  check_value("rms_norm", "x", x);
  const std::int64_t begin = begin_norm_axis("rms_norm", x, normalized_shape, eps);
  Builder b = main_builder();
  weight = or_full("rms_norm", "weight", b, weight, normalized_shape, 1.0,
                   shaped_data_type(x.type()));
  return b.create<RmsNormOp>(x, weight, begin, eps).result(0);
}

Value batch_norm(Value x, Value running_mean, Value running_var, Value weight, Value bias,
                 bool training, double momentum, double eps) {
  check_value("batch_norm", "x", x);
  check_value("batch_norm", "running_mean", running_mean);
  check_value("batch_norm", "running_var", running_var);
  const auto& d = dims_of("batch_norm", "x", x);
  if (d.size() < 2)
    throw_error(ErrorKind::InvalidArgument, "batch_norm: x ", meta::dims_string(d),
                " must be [N, C, ...] (rank >= 2)");
  Builder b = main_builder();
  const DataType dt = shaped_data_type(x.type());
  const std::vector<std::int64_t> c{d[1]};
  weight = or_full("batch_norm", "weight", b, weight, c, 1.0, dt);
  bias = or_full("batch_norm", "bias", b, bias, c, 0.0, dt);
  return b.create<BatchNormOp>(x, weight, bias, running_mean, running_var, momentum, eps,
                               !training)
      .result(0);
}

Value conv2d(Value x, Value weight, Value bias, std::vector<std::int64_t> strides,
             std::vector<std::int64_t> paddings, std::vector<std::int64_t> dilations,
             std::int64_t groups) {
  check_value("conv2d", "x", x);
  check_value("conv2d", "weight", weight);
  Builder b = main_builder();
  Value y = b.create<Conv2dOp>(x, weight, pair(std::move(strides)), pair(std::move(paddings)),
                               pair(std::move(dilations)), groups)
                .result();
  return add_channel_bias("conv2d", b, y, bias);
}

Value conv2d_transpose(Value x, Value weight, Value bias, std::vector<std::int64_t> strides,
                       std::vector<std::int64_t> paddings, std::vector<std::int64_t> output_padding,
                       std::vector<std::int64_t> dilations, std::int64_t groups) {
  check_value("conv2d_transpose", "x", x);
  check_value("conv2d_transpose", "weight", weight);
  Builder b = main_builder();
  Value y = b.create<Conv2dTransposeOp>(x, weight, pair(std::move(strides)),
                                        pair(std::move(paddings)), pair(std::move(output_padding)),
                                        pair(std::move(dilations)), groups)
                .result();
  return add_channel_bias("conv2d_transpose", b, y, bias);
}

Value max_pool2d(Value x, std::vector<std::int64_t> kernel_size, std::vector<std::int64_t> strides,
                 std::vector<std::int64_t> paddings, bool ceil_mode) {
  check_value("max_pool2d", "x", x);
  return main_builder()
      .create<MaxPool2dOp>(x, pair(std::move(kernel_size)), pair(std::move(strides)),
                           pair(std::move(paddings)), ceil_mode)
      .result();
}

Value avg_pool2d(Value x, std::vector<std::int64_t> kernel_size, std::vector<std::int64_t> strides,
                 std::vector<std::int64_t> paddings, bool ceil_mode, bool exclusive) {
  check_value("avg_pool2d", "x", x);
  return main_builder()
      .create<AvgPool2dOp>(x, pair(std::move(kernel_size)), pair(std::move(strides)),
                           pair(std::move(paddings)), ceil_mode, exclusive)
      .result();
}

Value adaptive_avg_pool2d(Value x, std::vector<std::int64_t> output_size) {
  check_value("adaptive_avg_pool2d", "x", x);
  return main_builder().create<AdaptiveAvgPool2dOp>(x, pair(std::move(output_size))).result();
}

Value roi_align(Value x, Value boxes, Value batch_indices, std::vector<std::int64_t> output_size,
                double spatial_scale, std::int64_t sampling_ratio, bool aligned) {
  check_value("roi_align", "x", x);
  check_value("roi_align", "boxes", boxes);
  check_value("roi_align", "batch_indices", batch_indices);
  return main_builder()
      .create<RoiAlignOp>(x, boxes, batch_indices, pair(std::move(output_size)), spatial_scale,
                          sampling_ratio, aligned)
      .result();
}

Value flatten(Value x, std::int64_t start_axis, std::int64_t stop_axis) {
  check_value("flatten", "x", x);
  return main_builder().create<FlattenOp>(x, start_axis, stop_axis).result();
}

Value scaled_dot_product_attention(Value q, Value k, Value v, bool causal, double scale,
                                   Value key_lengths, Value attn_mask, bool enable_gqa, double dropout_p,
                                   std::int64_t seed) {
  check_value("scaled_dot_product_attention", "q", q);
  check_value("scaled_dot_product_attention", "k", k);
  check_value("scaled_dot_product_attention", "v", v);
  if (key_lengths) check_value("scaled_dot_product_attention", "key_lengths", key_lengths);
  if (attn_mask) check_value("scaled_dot_product_attention", "attn_mask", attn_mask);
  const auto& qd = shaped_dims(q.type());
  const auto& kd = shaped_dims(k.type());
  const auto& vd = shaped_dims(v.type());
  for (const auto* x : {&kd, &vd})
    if (!enable_gqa && qd.size() == 4 && x->size() == 4 && qd[1] >= 0 && (*x)[1] >= 0 && qd[1] != (*x)[1])
      throw_error(ErrorKind::InvalidArgument, "scaled_dot_product_attention: q has ", qd[1], " heads, ",
                  x == &kd ? "k" : "v", " has ", (*x)[1],
                  " (pass enable_gqa = true for grouped-query attention, where k and v's heads divide q's)");
  if (!(dropout_p >= 0 && dropout_p < 1))
    throw_error(ErrorKind::InvalidArgument, "scaled_dot_product_attention: dropout_p must lie in [0, 1), got ",
                dropout_p);
  Builder b = main_builder();
  Value key = dropout_p > 0 ? b.create<RandomKeyOp>(seed).result() : Value();
  return b.create<ScaledDotProductAttentionOp>(q, k, v, causal, scale, "BHLD", key_lengths, attn_mask, dropout_p, key)
      .result(0);
}

Value mse_loss(Value input, Value label, Reduction reduction) {
  check_value("mse_loss", "input", input);
  check_value("mse_loss", "label", label);
  check_same_shape("mse_loss", input, label);
  Builder b = main_builder();
  Value diff = b.create<SubOp>(input, label).result();
  return reduce(b, b.create<SquareOp>(diff).result(), reduction);
}

Value l1_loss(Value input, Value label, Reduction reduction) {
  check_value("l1_loss", "input", input);
  check_value("l1_loss", "label", label);
  check_same_shape("l1_loss", input, label);
  Builder b = main_builder();
  Value diff = b.create<SubOp>(input, label).result();
  return reduce(b, b.create<AbsOp>(diff).result(), reduction);
}

Value cross_entropy(Value logits, Value label, Reduction reduction, std::int64_t ignore_index) {
  check_value("cross_entropy", "logits", logits);
  check_value("cross_entropy", "label", label);
  Builder b = main_builder();
  Value loss = b.create<CrossEntropyOp>(logits, label, ignore_index).result(0);
  if (reduction != Reduction::Mean) return reduce(b, loss, reduction);
  // Mean over the rows whose label is not ignore_index (PyTorch).
  const DataType label_dt = shaped_data_type(label.type());
  Value ignored = b.create<FullOp>(std::vector<std::int64_t>{}, double(ignore_index), label_dt)
                      .result();
  Value kept = b.create<NotEqualOp>(label, ignored).result();
  Value count =
      b.create<SumOp>(b.create<CastOp>(kept, shaped_data_type(loss.type())).result()).result();
  return b.create<DivOp>(b.create<SumOp>(loss).result(), count).result();
}

}  // namespace kiln::nn::functional

// kiln::nn layers (include/kiln/frontend/layers.h).
#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <tuple>

#include "kiln/frontend/layers.h"
#include "kiln/frontend/parameter.h"
#include "kiln/frontend/program_guard.h"
#include "kiln/frontend/stop_gradient.h"
#include "kiln/frontend/unique_name.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/ir/block.h"
#include "kiln/ir/builder.h"

namespace kiln::nn {

Layer::Layer(std::string_view name_prefix) : full_name_(unique_name(name_prefix)) {}

Layer::~Layer() = default;

Value Layer::add_parameter(std::string_view suffix, const std::vector<std::int64_t>& shape,
                           DataType dtype, const init::Initializer& initializer,
                           bool trainable) {
  Value v = create_parameter(unique_name(full_name_ + "." + std::string(suffix)), shape, dtype,
                             initializer, trainable);
  params_.push_back(v);
  return v;
}

std::vector<Value> Layer::parameters() const {
  std::vector<Value> all = params_;
  for (const auto& l : sublayers_) {
    auto sub = l->parameters();
    all.insert(all.end(), sub.begin(), sub.end());
  }
  return all;
}

Value Layer::forward(Value) const {
  throw_error(ErrorKind::InvalidArgument, "layer '", full_name_.empty() ? "(unnamed)" : full_name_,
              "' takes no single input (call it with its own arguments)");
}

void Layer::set_training(bool training) {
  training_ = training;
  for (const auto& l : sublayers_) l->set_training(training);
}

Value Layer::use(Value param) const {
  if (!param) return param;
  if (in_current_program(param)) return param;
  return parameter_value(parameter_name(param), param.type(), !stop_gradient(param));
}

namespace {

void check_positive(std::string_view layer, std::string_view what, std::int64_t v) {
  if (v <= 0)
    throw_error(ErrorKind::InvalidArgument, layer, ": ", what, " must be > 0, got ", v);
}

}  // namespace

Linear::Linear(std::int64_t in_features, std::int64_t out_features, bool bias,
               init::InitializerPtr weight_init, init::InitializerPtr bias_init, DataType dtype)
    : Layer("linear") {
  check_positive("Linear", "in_features", in_features);
  check_positive("Linear", "out_features", out_features);
  const double bound = 1.0 / std::sqrt(double(in_features));
  if (!weight_init) weight_init = std::make_shared<init::KaimingUniform>(std::sqrt(5.0));
  weight_ = add_parameter("w", {in_features, out_features}, dtype, *weight_init);
  if (bias) {
    if (!bias_init) bias_init = std::make_shared<init::Uniform>(-bound, bound);
    bias_ = add_parameter("b", {out_features}, dtype, *bias_init);
  }
}

Value Linear::forward(Value x) const { return functional::linear(x, use(weight_), use(bias_)); }

Value ReLU::forward(Value x) const { return functional::relu(x); }
Value GELU::forward(Value x) const { return functional::gelu(x, approximate_); }
Value Tanh::forward(Value x) const { return functional::tanh(x); }
Value Sigmoid::forward(Value x) const { return functional::sigmoid(x); }
Value Softmax::forward(Value x) const { return functional::softmax(x, axis_); }
Value Flatten::forward(Value x) const { return functional::flatten(x, start_, stop_); }

Dropout::Dropout(double p, std::int64_t seed) : p_(p), seed_(seed) {
  if (!(p >= 0.0 && p < 1.0))
    throw_error(ErrorKind::InvalidArgument, "Dropout: p = ", p, " must lie in [0, 1)");
}

Value Dropout::forward(Value x) const { return functional::dropout(x, p_, training_, seed_); }

Embedding::Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim,
                     std::int64_t padding_idx, init::InitializerPtr weight_init, DataType dtype)
    : Layer("embedding"), padding_idx_(padding_idx) {
  check_positive("Embedding", "num_embeddings", num_embeddings);
  check_positive("Embedding", "embedding_dim", embedding_dim);
  if (padding_idx < -1 || padding_idx >= num_embeddings)
    throw_error(ErrorKind::InvalidArgument, "Embedding: padding_idx ", padding_idx,
                " must be -1 (none) or in [0, ", num_embeddings, ")");
  if (!weight_init) weight_init = std::make_shared<init::Normal>(0.0, 1.0);
  weight_ = add_parameter("w", {num_embeddings, embedding_dim}, dtype, *weight_init);
}

Value Embedding::forward(Value ids) const {
  return functional::embedding(ids, use(weight_), padding_idx_);
}

LayerNorm::LayerNorm(std::vector<std::int64_t> normalized_shape, double eps,
                     bool elementwise_affine, DataType dtype)
    : Layer("layer_norm"), normalized_shape_(std::move(normalized_shape)), eps_(eps) {
  if (normalized_shape_.empty())
    throw_error(ErrorKind::InvalidArgument, "LayerNorm: normalized_shape is empty");
  for (auto d : normalized_shape_) check_positive("LayerNorm", "each normalized dim", d);
  if (elementwise_affine) {
    weight_ = add_parameter("w", normalized_shape_, dtype, init::Constant(1.0));
    bias_ = add_parameter("b", normalized_shape_, dtype, init::Constant(0.0));
  }
}

Value LayerNorm::forward(Value x) const {
  return functional::layer_norm(x, normalized_shape_, use(weight_), use(bias_), eps_);
}

RMSNorm::RMSNorm(std::vector<std::int64_t> normalized_shape, double eps,
                 bool elementwise_affine, DataType dtype)
    : Layer("rms_norm"), normalized_shape_(std::move(normalized_shape)), eps_(eps) {
  if (normalized_shape_.empty())
    throw_error(ErrorKind::InvalidArgument, "RMSNorm: normalized_shape is empty");
  for (auto d : normalized_shape_) check_positive("RMSNorm", "each normalized dim", d);
  if (elementwise_affine) weight_ = add_parameter("w", normalized_shape_, dtype, init::Constant(1.0));
}

Value RMSNorm::forward(Value x) const {
  return functional::rms_norm(x, normalized_shape_, use(weight_), eps_);
}

BatchNorm2D::BatchNorm2D(std::int64_t num_features, double momentum, double eps, DataType dtype)
    : Layer("batch_norm2d"), momentum_(momentum), eps_(eps) {
  check_positive("BatchNorm2D", "num_features", num_features);
  if (!(momentum >= 0.0 && momentum <= 1.0))
    throw_error(ErrorKind::InvalidArgument, "BatchNorm2D: momentum ", momentum,
                " must lie in [0, 1]");
  if (!(eps > 0.0)) throw_error(ErrorKind::InvalidArgument, "BatchNorm2D: eps ", eps, " must be > 0");
  weight_ = add_parameter("w", {num_features}, dtype, init::Constant(1.0));
  bias_ = add_parameter("b", {num_features}, dtype, init::Constant(0.0));
  mean_ = add_parameter("mean", {num_features}, dtype, init::Constant(0.0), /*trainable=*/false);
  var_ = add_parameter("variance", {num_features}, dtype, init::Constant(1.0), false);
}

Value BatchNorm2D::forward(Value x) const {
  const auto& d = shaped_dims(x.type());
  if (d.size() != 4)
    throw_error(ErrorKind::InvalidArgument, "BatchNorm2D '", full_name_, "': x ",
                meta::dims_string(d), " must be [N, C, H, W]");
  return functional::batch_norm(x, use(mean_), use(var_), use(weight_), use(bias_), training_,
                                momentum_, eps_);
}

Conv2D::Conv2D(std::int64_t in_channels, std::int64_t out_channels, Size2 kernel_size,
               Size2 stride, Size2 padding, Size2 dilation, std::int64_t groups, bool bias,
               DataType dtype)
    : Layer("conv2d"), stride_(stride), padding_(padding), dilation_(dilation), groups_(groups) {
  check_positive("Conv2D", "in_channels", in_channels);
  check_positive("Conv2D", "out_channels", out_channels);
  check_positive("Conv2D", "kernel_size", std::min(kernel_size.h, kernel_size.w));
  check_positive("Conv2D", "groups", groups);
  if (in_channels % groups != 0 || out_channels % groups != 0)
    throw_error(ErrorKind::InvalidArgument, "Conv2D: groups (", groups,
                ") must divide in_channels (", in_channels, ") and out_channels (", out_channels,
                ")");
  const std::int64_t fan_in = in_channels / groups * kernel_size.h * kernel_size.w;
  const double bound = 1.0 / std::sqrt(double(fan_in));
  weight_ = add_parameter("w", {out_channels, in_channels / groups, kernel_size.h, kernel_size.w},
                          dtype, init::Uniform(-bound, bound));
  if (bias) bias_ = add_parameter("b", {out_channels}, dtype, init::Uniform(-bound, bound));
}

Value Conv2D::forward(Value x) const {
  return functional::conv2d(x, use(weight_), use(bias_), stride_.vec(), padding_.vec(),
                            dilation_.vec(), groups_);
}

namespace {
// A pooling stride of 0 means the kernel size.
std::vector<std::int64_t> pool_stride(Size2 stride, Size2 kernel) {
  return {stride.h == 0 ? kernel.h : stride.h, stride.w == 0 ? kernel.w : stride.w};
}
}  // namespace

MaxPool2D::MaxPool2D(Size2 kernel_size, Size2 stride, Size2 padding, bool ceil_mode)
    : kernel_(kernel_size), stride_(stride), padding_(padding), ceil_mode_(ceil_mode) {}

Value MaxPool2D::forward(Value x) const {
  return functional::max_pool2d(x, kernel_.vec(), pool_stride(stride_, kernel_), padding_.vec(),
                                ceil_mode_);
}

AvgPool2D::AvgPool2D(Size2 kernel_size, Size2 stride, Size2 padding, bool ceil_mode,
                     bool exclusive)
    : kernel_(kernel_size),
      stride_(stride),
      padding_(padding),
      ceil_mode_(ceil_mode),
      exclusive_(exclusive) {}

Value AvgPool2D::forward(Value x) const {
  return functional::avg_pool2d(x, kernel_.vec(), pool_stride(stride_, kernel_), padding_.vec(),
                                ceil_mode_, exclusive_);
}

Value AdaptiveAvgPool2D::forward(Value x) const {
  return functional::adaptive_avg_pool2d(x, output_size_.vec());
}

MultiHeadAttention::MultiHeadAttention(std::int64_t embed_dim, std::int64_t num_heads, bool bias,
                                       DataType dtype, double dropout, std::int64_t kdim, std::int64_t vdim)
    : Layer("multi_head_attention"), embed_dim_(embed_dim), num_heads_(num_heads), kdim_(kdim ? kdim : embed_dim),
      vdim_(vdim ? vdim : embed_dim), dropout_(dropout) {
  check_positive("MultiHeadAttention", "embed_dim", embed_dim);
  check_positive("MultiHeadAttention", "num_heads", num_heads);
  check_positive("MultiHeadAttention", "kdim", kdim_);
  check_positive("MultiHeadAttention", "vdim", vdim_);
  if (!(dropout >= 0 && dropout < 1))
    throw_error(ErrorKind::InvalidArgument, "MultiHeadAttention: dropout must lie in [0, 1), got ", dropout);
  if (embed_dim % num_heads != 0)
    throw_error(ErrorKind::InvalidArgument, "MultiHeadAttention: num_heads (", num_heads,
                ") must divide embed_dim (", embed_dim, ")");
  // PyTorch's in_proj init: Xavier-uniform weights, zero bias.
  const auto xavier = [&](const char* name, std::int64_t in, std::int64_t out) {
    const double bound = std::sqrt(6.0 / double(in + out));
    return add_parameter(name, {in, out}, dtype, init::Uniform(-bound, bound));
  };
  if (kdim_ == embed_dim && vdim_ == embed_dim) {
    qkv_weight_ = xavier("qkv_w", embed_dim, 3 * embed_dim);
  } else {
    q_weight_ = xavier("q_w", embed_dim, embed_dim);
    k_weight_ = xavier("k_w", kdim_, embed_dim);
    v_weight_ = xavier("v_w", vdim_, embed_dim);
  }
  if (bias) qkv_bias_ = add_parameter("qkv_b", {3 * embed_dim}, dtype, init::Constant(0.0));
  out_proj_ = add_sublayer(std::make_shared<Linear>(embed_dim, embed_dim, bias, nullptr,
                                                     std::make_shared<init::Constant>(0.0), dtype));
}

Value MultiHeadAttention::forward(Value x) const { return (*this)(x, x, x, false); }

Value MultiHeadAttention::operator()(Value query, Value key, Value value, bool causal,
                                     Value key_lengths, Value attn_mask) const {
  const auto& qd = shaped_dims(query.type());
  if (qd.size() != 3 || (qd[2] >= 0 && qd[2] != embed_dim_))
    throw_error(ErrorKind::InvalidArgument, "MultiHeadAttention '", full_name_, "': query ",
                meta::dims_string(qd), " must be [B, L, ", embed_dim_, "]");
  for (const auto& [x, width, what] : {std::tuple{key, kdim_, "key"}, std::tuple{value, vdim_, "value"}}) {
    const auto& d = shaped_dims(x.type());
    if (d.size() != 3 || (d[2] >= 0 && d[2] != width))
      throw_error(ErrorKind::InvalidArgument, "MultiHeadAttention '", full_name_, "': ", what, " ",
                  meta::dims_string(d), " must be [B, L, ", width, "]", width != embed_dim_ ? " (its kdim / vdim)" : "");
  }
  Builder b = main_builder();
  const auto [q, k, v] = project(query, key, value);
  const std::int64_t hd = embed_dim_ / num_heads_;
  // [B, L, E] → [B, H, L, E / H]
  auto heads = [&](Value x) {
    Value r = b.create<ReshapeOp>(x, std::vector<std::int64_t>{0, 0, num_heads_, hd}).result();
    return b.create<TransposeOp>(r, std::vector<std::int64_t>{0, 2, 1, 3}).result();
  };
  Value o = functional::scaled_dot_product_attention(heads(q), heads(k), heads(v), causal, 0.0, key_lengths,
                                                     attn_mask, false, training() ? dropout_ : 0.0);
  o = b.create<TransposeOp>(o, std::vector<std::int64_t>{0, 2, 1, 3}).result();
  o = b.create<ReshapeOp>(o, std::vector<std::int64_t>{0, 0, embed_dim_}).result();
  return (*out_proj_)(o);
}

std::array<Value, 3> MultiHeadAttention::project(Value query, Value key, Value value) const {
  Builder b = main_builder();
  const Value bias = use(qkv_bias_);
  if (query == key && key == value && !separate()) {
    Value qkv = functional::linear(query, use(qkv_weight_), bias);
    auto parts = b.create<SplitOp>(qkv, std::int64_t{3}, std::int64_t{-1}).operation();
    return {parts->result(0), parts->result(1), parts->result(2)};
  }
  std::array<Value, 3> w;
  if (separate()) {
    w = {use(q_weight_), use(k_weight_), use(v_weight_)};
  } else {
    Operation* ws = b.create<SplitOp>(use(qkv_weight_), std::int64_t{3}, std::int64_t{1}).operation();
    w = {ws->result(0), ws->result(1), ws->result(2)};
  }
  Operation* bs = bias ? b.create<SplitOp>(bias, std::int64_t{3}, std::int64_t{0}).operation() : nullptr;
  const Value in[] = {query, key, value};
  std::array<Value, 3> out;
  for (std::uint32_t i = 0; i < 3; ++i) out[i] = functional::linear(in[i], w[i], bs ? bs->result(i) : Value());
  return out;
}

namespace {

// The transformer layers' checks of their feed-forward width and activation.
void check_block(std::string_view layer, std::int64_t dim_feedforward, const std::string& activation) {
  check_positive(layer, "dim_feedforward", dim_feedforward);
  if (activation != "relu" && activation != "gelu")
    throw_error(ErrorKind::InvalidArgument, layer, ": activation '", activation, "' must be \"relu\" or \"gelu\"");
}

// A transformer layer's residual step: x + branch(norm(x)) (pre-norm) or
// norm(x + branch(x)) (post-norm).
template <typename Branch>
Value residual(bool norm_first, Value x, const LayerNorm& norm, const Branch& branch) {
  Builder b = main_builder();
  if (!norm_first) return norm(b.create<AddOp>(x, branch(x)).result());
  return b.create<AddOp>(x, branch(norm(x))).result();
}

// out(linear2(hidden(activation(linear1(x))))): the feed-forward branch.
Value feed_forward(const Linear& linear1, const Linear& linear2, const Dropout& hidden, const Dropout& out,
                   const std::string& activation, Value x) {
  Value h = linear1(x);
  h = activation == "gelu" ? functional::gelu(h) : functional::relu(h);
  return out(linear2(hidden(h)));
}

}  // namespace

TransformerEncoderLayer::TransformerEncoderLayer(std::int64_t d_model, std::int64_t nhead,
                                                 std::int64_t dim_feedforward, double dropout,
                                                 std::string activation, double layer_norm_eps,
                                                 DataType dtype, bool norm_first)
    : Layer("transformer_encoder_layer"), activation_(std::move(activation)), norm_first_(norm_first) {
  check_block("TransformerEncoderLayer", dim_feedforward, activation_);
  attn_ = add_sublayer(std::make_shared<MultiHeadAttention>(d_model, nhead, true, dtype, dropout));
  norm1_ = add_sublayer(std::make_shared<LayerNorm>(std::vector<std::int64_t>{d_model},
                                                    layer_norm_eps, true, dtype));
  norm2_ = add_sublayer(std::make_shared<LayerNorm>(std::vector<std::int64_t>{d_model},
                                                    layer_norm_eps, true, dtype));
  linear1_ = add_sublayer(std::make_shared<Linear>(d_model, dim_feedforward, true, nullptr,
                                                   nullptr, dtype));
  linear2_ = add_sublayer(std::make_shared<Linear>(dim_feedforward, d_model, true, nullptr,
                                                   nullptr, dtype));
  dropout_ = add_sublayer(std::make_shared<Dropout>(dropout));
  dropout1_ = add_sublayer(std::make_shared<Dropout>(dropout));
  dropout2_ = add_sublayer(std::make_shared<Dropout>(dropout));
}

Value TransformerEncoderLayer::forward(Value x) const { return (*this)(x, false); }

Value TransformerEncoderLayer::operator()(Value x, bool causal, Value key_lengths, Value attn_mask) const {
  x = residual(norm_first_, x, *norm1_,
               [&](Value n) { return (*dropout1_)((*attn_)(n, n, n, causal, key_lengths, attn_mask)); });
  return residual(norm_first_, x, *norm2_, [&](Value n) {
    return feed_forward(*linear1_, *linear2_, *dropout_, *dropout2_, activation_, n);
  });
}

TransformerDecoderLayer::TransformerDecoderLayer(std::int64_t d_model, std::int64_t nhead,
                                                 std::int64_t dim_feedforward, double dropout,
                                                 std::string activation, double layer_norm_eps,
                                                 DataType dtype, bool norm_first)
    : Layer("transformer_decoder_layer"), activation_(std::move(activation)), norm_first_(norm_first) {
  check_block("TransformerDecoderLayer", dim_feedforward, activation_);
  self_attn_ = add_sublayer(std::make_shared<MultiHeadAttention>(d_model, nhead, true, dtype, dropout));
  cross_attn_ = add_sublayer(std::make_shared<MultiHeadAttention>(d_model, nhead, true, dtype, dropout));
  for (auto* norm : {&norm1_, &norm2_, &norm3_})
    *norm = add_sublayer(std::make_shared<LayerNorm>(std::vector<std::int64_t>{d_model}, layer_norm_eps, true,
                                                     dtype));
  linear1_ = add_sublayer(std::make_shared<Linear>(d_model, dim_feedforward, true, nullptr, nullptr, dtype));
  linear2_ = add_sublayer(std::make_shared<Linear>(dim_feedforward, d_model, true, nullptr, nullptr, dtype));
  for (auto* d : {&dropout_, &dropout1_, &dropout2_, &dropout3_}) *d = add_sublayer(std::make_shared<Dropout>(dropout));
}

Value TransformerDecoderLayer::operator()(Value tgt, Value memory, bool tgt_is_causal, Value tgt_key_lengths,
                                          Value memory_key_lengths, Value tgt_mask, Value memory_mask) const {
  Value x = residual(norm_first_, tgt, *norm1_, [&](Value n) {
    return (*dropout1_)((*self_attn_)(n, n, n, tgt_is_causal, tgt_key_lengths, tgt_mask));
  });
  x = residual(norm_first_, x, *norm2_, [&](Value n) {
    return (*dropout2_)((*cross_attn_)(n, memory, memory, false, memory_key_lengths, memory_mask));
  });
  return residual(norm_first_, x, *norm3_, [&](Value n) {
    return feed_forward(*linear1_, *linear2_, *dropout_, *dropout3_, activation_, n);
  });
}

template <typename L>
LayerStack<L>::LayerStack(std::string_view name_prefix, std::string_view what,
                          const std::function<std::shared_ptr<L>()>& make_layer, std::int64_t num_layers,
                          std::shared_ptr<LayerNorm> norm)
    : Layer(name_prefix) {
  check_positive(what, "num_layers", num_layers);
  for (std::int64_t i = 0; i < num_layers; ++i) {
    std::shared_ptr<L> l = make_layer ? make_layer() : nullptr;
    if (!l) throw_error(ErrorKind::InvalidArgument, what, ": make_layer gave no layer for layer ", i);
    layers_.push_back(add_sublayer(std::move(l)));
  }
  if (norm) norm_ = add_sublayer(std::move(norm));
}

template <typename L>
Value LayerStack<L>::normed(Value x) const {
  return norm_ ? (*norm_)(x) : x;
}

template class LayerStack<TransformerEncoderLayer>;
template class LayerStack<TransformerDecoderLayer>;

TransformerEncoder::TransformerEncoder(const std::function<std::shared_ptr<TransformerEncoderLayer>()>& make_layer,
                                       std::int64_t num_layers, std::shared_ptr<LayerNorm> norm)
    : LayerStack("transformer_encoder", "TransformerEncoder", make_layer, num_layers, std::move(norm)) {}

Value TransformerEncoder::forward(Value x) const { return (*this)(x, false); }

Value TransformerEncoder::operator()(Value x, bool causal, Value key_lengths, Value attn_mask) const {
  for (const auto& l : layers_) x = (*l)(x, causal, key_lengths, attn_mask);
  return normed(x);
}

TransformerDecoder::TransformerDecoder(const std::function<std::shared_ptr<TransformerDecoderLayer>()>& make_layer,
                                       std::int64_t num_layers, std::shared_ptr<LayerNorm> norm)
    : LayerStack("transformer_decoder", "TransformerDecoder", make_layer, num_layers, std::move(norm)) {}

Value TransformerDecoder::operator()(Value tgt, Value memory, bool tgt_is_causal, Value tgt_key_lengths,
                                     Value memory_key_lengths, Value tgt_mask, Value memory_mask) const {
  for (const auto& l : layers_)
    tgt = (*l)(tgt, memory, tgt_is_causal, tgt_key_lengths, memory_key_lengths, tgt_mask, memory_mask);
  return normed(tgt);
}

Sequential::Sequential(std::initializer_list<std::shared_ptr<Layer>> layers) {
  for (const auto& l : layers) add_sublayer(l);
}

Sequential& Sequential::append(std::shared_ptr<Layer> layer) {
  add_sublayer(std::move(layer));
  return *this;
}

Value Sequential::forward(Value x) const {
  for (const auto& l : sublayers_) x = l->forward(x);
  return x;
}

}  // namespace kiln::nn

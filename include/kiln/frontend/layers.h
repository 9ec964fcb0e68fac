// kiln::nn layers (seed 001 §1.2, `paddle.nn.Linear(16, 1)(x)`): a layer
// makes its parameters (in the current startup/main programs) when
// constructed and builds its ops into the current main program when called.
// Names are Paddle's: Linear → "linear_0", its weight "linear_0.w_0".
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/frontend/functional.h"
#include "kiln/frontend/initializer.h"
#include "kiln/ir/value.h"
#include "kiln/support/data_type.h"
#include "kiln/support/error.h"

namespace kiln::nn {

class Layer {
 public:
  virtual ~Layer();
  // This layer's parameter values (in the main program current when they
  // were made) in creation order, then its sublayers', depth first.
  std::vector<Value> parameters() const;
  // "linear_0"; empty for layers without parameters of their own.
  const std::string& full_name() const { return full_name_; }
  // The one-input call that Sequential chains. A layer whose call takes
  // other inputs (MultiHeadAttention's query, key, value) throws kiln::Error.
  virtual Value forward(Value x) const;
  Value operator()(Value x) const { return forward(x); }
  // Dropout, batch norm and MultiHeadAttention's dropout build training or
  // inference ops according to this flag (read when the layer is called:
  // the program is static). Set on this layer and all its sublayers.
  void train() { set_training(true); }
  void eval() { set_training(false); }
  bool training() const { return training_; }

 protected:
  Layer() = default;
  explicit Layer(std::string_view name_prefix);
  // "<full_name>.<suffix>_<n>" created with create_parameter; non-trainable
  // ones (batch norm's running statistics) get no gradient but are saved
  // with the others.
  Value add_parameter(std::string_view suffix, const std::vector<std::int64_t>& shape,
                      DataType dtype, const init::Initializer& initializer,
                      bool trainable = true);
  // Keeps `layer` as a sublayer (its parameters and training flag follow
  // this layer's) and returns it.
  template <typename L> std::shared_ptr<L> add_sublayer(std::shared_ptr<L> layer);
  // The parameter as a value of the current main program (a layer used
  // under another ProgramGuard refers to its parameter by name there).
  Value use(Value param) const;

  std::string full_name_;
  std::vector<Value> params_;
  std::vector<std::shared_ptr<Layer>> sublayers_;
  bool training_ = true;

 private:
  void set_training(bool training);
};

// One number for both spatial axes (3 → 3×3), or {h, w}.
struct Size2 {
  Size2(std::int64_t both) : h(both), w(both) {}  // NOLINT: implicit on purpose
  Size2(std::int64_t h, std::int64_t w) : h(h), w(w) {}
  std::vector<std::int64_t> vec() const { return {h, w}; }
  std::int64_t h, w;
};

// y = x · W + b; W [in, out], b [out]. Default init as PyTorch's Linear:
// W ~ KaimingUniform(a = √5) = U(±1/√in), b ~ U(±1/√in).
class Linear : public Layer {
 public:
  Linear(std::int64_t in_features, std::int64_t out_features, bool bias = true,
         init::InitializerPtr weight_init = nullptr, init::InitializerPtr bias_init = nullptr,
         DataType dtype = DataType::Float32);
  Value forward(Value x) const override;
  Value weight() const { return weight_; }
  Value bias() const { return bias_; }  // null without bias

 private:
  Value weight_, bias_;
};

class ReLU : public Layer {
 public:
  Value forward(Value x) const override;
};
class GELU : public Layer {
 public:
  explicit GELU(bool approximate = false) : approximate_(approximate) {}
  Value forward(Value x) const override;

 private:
  bool approximate_;
};
class Tanh : public Layer {
 public:
  Value forward(Value x) const override;
};
class Sigmoid : public Layer {
 public:
  Value forward(Value x) const override;
};
class Softmax : public Layer {
 public:
  explicit Softmax(std::int64_t axis = -1) : axis_(axis) {}
  Value forward(Value x) const override;

 private:
  std::int64_t axis_;
};

// p in [0, 1) (kiln::Error otherwise); train(): random mask, eval(): identity.
class Dropout : public Layer {
 public:
  explicit Dropout(double p = 0.5, std::int64_t seed = 0);
  Value forward(Value x) const override;

 private:
  double p_;
  std::int64_t seed_;
};

// Lookup table W [num_embeddings, embedding_dim] ~ N(0, 1) (as PyTorch);
// ids (i32/i64) → [ids…, embedding_dim].
class Embedding : public Layer {
 public:
  Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim, std::int64_t padding_idx = -1,
            init::InitializerPtr weight_init = nullptr, DataType dtype = DataType::Float32);
  Value forward(Value ids) const override;
  Value weight() const { return weight_; }

 private:
  Value weight_;
  std::int64_t padding_idx_;
};

// Over the trailing normalized_shape axes; weight ones, bias zeros.
class LayerNorm : public Layer {
 public:
  explicit LayerNorm(std::vector<std::int64_t> normalized_shape, double eps = 1e-5,
                     bool elementwise_affine = true, DataType dtype = DataType::Float32);
  Value forward(Value x) const override;
  Value weight() const { return weight_; }  // null without affine
  Value bias() const { return bias_; }

 private:
  std::vector<std::int64_t> normalized_shape_;
  double eps_;
  Value weight_, bias_;
};

// x / √(mean(x²) + eps) · weight over the trailing normalized_shape axes;
// weight ones.
class RMSNorm : public Layer {
 public:
  explicit RMSNorm(std::vector<std::int64_t> normalized_shape, double eps = 1e-6,
                   bool elementwise_affine = true, DataType dtype = DataType::Float32);
  Value forward(Value x) const override;
  Value weight() const { return weight_; }  // null without affine

 private:
  std::vector<std::int64_t> normalized_shape_;
  double eps_;
  Value weight_;
};

// Batch norm over x [N, C, H, W] (Paddle's BatchNorm2D): weight ones, bias
// zeros, running mean zeros and variance ones (non-trainable parameters,
// saved with the weights). train(): batch statistics, running ones updated
// with running = momentum · running + (1 - momentum) · batch (Paddle's
// momentum 0.9 is PyTorch's 0.1); eval() or clone_for_test: the running ones.
class BatchNorm2D : public Layer {
 public:
  explicit BatchNorm2D(std::int64_t num_features, double momentum = 0.9, double eps = 1e-5,
                       DataType dtype = DataType::Float32);
  Value forward(Value x) const override;
  Value weight() const { return weight_; }
  Value bias() const { return bias_; }
  Value running_mean() const { return mean_; }
  Value running_var() const { return var_; }

 private:
  double momentum_, eps_;
  Value weight_, bias_, mean_, var_;
};

// NCHW convolution; weight [out, in / groups, kH, kW], bias [out]; both
// U(±1/√(in / groups · kH · kW)) as PyTorch's Conv2d.
class Conv2D : public Layer {
 public:
  Conv2D(std::int64_t in_channels, std::int64_t out_channels, Size2 kernel_size,
         Size2 stride = 1, Size2 padding = 0, Size2 dilation = 1, std::int64_t groups = 1,
         bool bias = true, DataType dtype = DataType::Float32);
  Value forward(Value x) const override;
  Value weight() const { return weight_; }
  Value bias() const { return bias_; }  // null without bias

 private:
  Size2 stride_, padding_, dilation_;
  std::int64_t groups_;
  Value weight_, bias_;
};

// stride 0: the kernel size (PyTorch's default).
class MaxPool2D : public Layer {
 public:
  explicit MaxPool2D(Size2 kernel_size, Size2 stride = 0, Size2 padding = 0,
                     bool ceil_mode = false);
  Value forward(Value x) const override;

 private:
  Size2 kernel_, stride_, padding_;
  bool ceil_mode_;
};

// exclusive: padding is not counted in a window's average (Paddle's default).
class AvgPool2D : public Layer {
 public:
  explicit AvgPool2D(Size2 kernel_size, Size2 stride = 0, Size2 padding = 0,
                     bool ceil_mode = false, bool exclusive = true);
  Value forward(Value x) const override;

 private:
  Size2 kernel_, stride_, padding_;
  bool ceil_mode_, exclusive_;
};

class AdaptiveAvgPool2D : public Layer {
 public:
  explicit AdaptiveAvgPool2D(Size2 output_size) : output_size_(output_size) {}
  Value forward(Value x) const override;

 private:
  Size2 output_size_;
};

// Joins axes start_axis..stop_axis (default: all but the batch axis).
class Flatten : public Layer {
 public:
  explicit Flatten(std::int64_t start_axis = 1, std::int64_t stop_axis = -1)
      : start_(start_axis), stop_(stop_axis) {}
  Value forward(Value x) const override;

 private:
  std::int64_t start_, stop_;
};

// Multi-head attention over [B, L, E] inputs: q, k, v projections (one
// [E, 3E] weight, so self-attention is one GEMM), the fused
// kiln.scaled_dot_product_attention per head (E / num_heads wide), and an
// output projection. num_heads must divide embed_dim (kiln::Error naming
// the layer). dropout (PyTorch's) drops attention probabilities inside
// the fused op while the layer is training (train(), the default; eval()
// or the for-test clone: none).
class MultiHeadAttention : public Layer {
 public:
  // kdim, vdim (PyTorch's; 0: embed_dim): the widths of key and value, for
  // attention to a memory of another width (then q, k and v have weights
  // of their own, [E, E], [kdim, E], [vdim, E], as PyTorch's
  // q/k/v_proj_weight; else one [E, 3E] weight).
  MultiHeadAttention(std::int64_t embed_dim, std::int64_t num_heads, bool bias = true,
                     DataType dtype = DataType::Float32, double dropout = 0.0, std::int64_t kdim = 0,
                     std::int64_t vdim = 0);
  // PyTorch's order (embed_dim, num_heads, dropout, …) would turn a dropout
  // into bias = true: kiln's dropout comes last, and this does not compile.
  MultiHeadAttention(std::int64_t embed_dim, std::int64_t num_heads, double dropout, bool bias = true) = delete;
  // Self-attention.
  using Layer::operator();
  Value forward(Value x) const override;
  Value operator()(Value x, bool causal) const { return (*this)(x, x, x, causal); }
  // query [B, Lq, E], key [B, Lk, kdim] and value [B, Lk, vdim] → [B, Lq, E]; with
  // key_lengths (int32 or int64 [B]) batch b attends to its first
  // key_lengths[b] keys only (right padding masked); attn_mask as
  // functional::scaled_dot_product_attention's ([B|1, H|1, Lq, Lk], bool or
  // the layer's dtype; a bool true means the key takes part, the opposite
  // of nn.MultiheadAttention's bool mask).
  Value operator()(Value query, Value key, Value value, bool causal = false,
                   Value key_lengths = Value(), Value attn_mask = Value()) const;
  std::int64_t num_heads() const { return num_heads_; }

 private:
  // q, k and v's weights (kdim or vdim other than embed_dim), else the one qkv_weight_.
  bool separate() const { return static_cast<bool>(k_weight_); }
  // query, key and value projected to E: one [E, 3E] GEMM for
  // self-attention through qkv_weight_, else a GEMM each.
  std::array<Value, 3> project(Value query, Value key, Value value) const;

  std::int64_t embed_dim_, num_heads_, kdim_, vdim_;
  double dropout_;
  Value qkv_weight_, qkv_bias_, q_weight_, k_weight_, v_weight_;
  std::shared_ptr<Linear> out_proj_;
};

// One transformer encoder block, PyTorch's TransformerEncoderLayer:
// norm_first (pre-norm, GPT-2's and kiln's default; PyTorch's default is
// false):
//   x = x + dropout(attention(norm1(x)))
//   x = x + dropout(linear2(dropout(activation(linear1(norm2(x))))))
// else (post-norm, the original Transformer's and BERT's):
//   x = norm1(x + dropout(attention(x)))
//   x = norm2(x + dropout(linear2(dropout(activation(linear1(x))))))
// activation "relu" or "gelu"; causal masks future positions (a decoder-only
// model's block: kiln applies the causal mask itself, combined with
// attn_mask; PyTorch's is_causal is a hint beside its mask). dropout applies
// to the residual branches, the feed-forward's hidden layer and, as
// PyTorch's, the attention probabilities (MultiHeadAttention's dropout). A
// bool attn_mask is true where the key takes part: the opposite of
// nn.Transformer*'s.
class TransformerEncoderLayer : public Layer {
 public:
  TransformerEncoderLayer(std::int64_t d_model, std::int64_t nhead,
                          std::int64_t dim_feedforward = 2048, double dropout = 0.1,
                          std::string activation = "relu", double layer_norm_eps = 1e-5,
                          DataType dtype = DataType::Float32, bool norm_first = true);
  using Layer::operator();
  Value forward(Value x) const override;
  // x [B, L, d_model]; key_lengths and attn_mask as MultiHeadAttention's
  // (PyTorch's src_key_padding_mask for right padding, and src_mask).
  Value operator()(Value x, bool causal, Value key_lengths = Value(), Value attn_mask = Value()) const;
  bool norm_first() const { return norm_first_; }

 private:
  std::string activation_;
  bool norm_first_;
  std::shared_ptr<MultiHeadAttention> attn_;
  std::shared_ptr<LayerNorm> norm1_, norm2_;
  std::shared_ptr<Linear> linear1_, linear2_;
  std::shared_ptr<Dropout> dropout_, dropout1_, dropout2_;
};

// One transformer decoder block, PyTorch's TransformerDecoderLayer: self-
// attention over the target, attention from the target to the encoder's
// memory, a feed-forward; norm_first (pre-norm, kiln's default):
//   x = x + dropout(self_attention(norm1(x)))
//   x = x + dropout(attention(norm2(x), memory))
//   x = x + dropout(linear2(dropout(activation(linear1(norm3(x))))))
// else (post-norm, PyTorch's default) each sum is normalized instead:
// x = norm1(x + …), norm2, norm3. The arguments, masks (a bool one true
// where the key takes part: the opposite of nn.Transformer*'s) and dropout
// as TransformerEncoderLayer's. It has no one-input call (forward throws):
// it needs the memory.
class TransformerDecoderLayer : public Layer {
 public:
  TransformerDecoderLayer(std::int64_t d_model, std::int64_t nhead,
                          std::int64_t dim_feedforward = 2048, double dropout = 0.1,
                          std::string activation = "relu", double layer_norm_eps = 1e-5,
                          DataType dtype = DataType::Float32, bool norm_first = true);
  using Layer::operator();
  // tgt [B, Lt, d_model], memory [B, Lm, d_model] → [B, Lt, d_model].
  // tgt_is_causal masks later target positions (PyTorch's tgt_is_causal
  // with its square subsequent mask); the key lengths (int32 or int64 [B])
  // mask right padding of the target in self-attention and of the memory
  // in the cross-attention (tgt_ / memory_key_padding_mask); the masks are
  // MultiHeadAttention's attn_mask for each attention (tgt_mask,
  // memory_mask).
  Value operator()(Value tgt, Value memory, bool tgt_is_causal = false, Value tgt_key_lengths = Value(),
                   Value memory_key_lengths = Value(), Value tgt_mask = Value(), Value memory_mask = Value()) const;
  bool norm_first() const { return norm_first_; }

 private:
  std::string activation_;
  bool norm_first_;
  std::shared_ptr<MultiHeadAttention> self_attn_, cross_attn_;
  std::shared_ptr<LayerNorm> norm1_, norm2_, norm3_;
  std::shared_ptr<Linear> linear1_, linear2_;
  std::shared_ptr<Dropout> dropout_, dropout1_, dropout2_, dropout3_;
};

// What TransformerEncoder and TransformerDecoder share: num_layers layers
// of type L, each built by make_layer (so each has parameters of its own,
// as PyTorch's deep copies of one layer do), then `norm` when given (the
// final LayerNorm a pre-norm stack ends with). num_layers < 1 or a null
// layer is a kiln::Error naming the stack.
template <typename L>
class LayerStack : public Layer {
 public:
  std::size_t num_layers() const { return layers_.size(); }
  L& layer(std::size_t i) const { return *layers_.at(i); }

 protected:
  LayerStack(std::string_view name_prefix, std::string_view what,
             const std::function<std::shared_ptr<L>()>& make_layer, std::int64_t num_layers,
             std::shared_ptr<LayerNorm> norm);
  // x through the final norm, when there is one.
  Value normed(Value x) const;

  std::vector<std::shared_ptr<L>> layers_;
  std::shared_ptr<LayerNorm> norm_;
};

// PyTorch's TransformerEncoder: the layers called in turn with the same
// causal flag, key lengths and mask, then the norm.
class TransformerEncoder : public LayerStack<TransformerEncoderLayer> {
 public:
  TransformerEncoder(const std::function<std::shared_ptr<TransformerEncoderLayer>()>& make_layer,
                     std::int64_t num_layers, std::shared_ptr<LayerNorm> norm = nullptr);
  using Layer::operator();
  Value forward(Value x) const override;
  // x [B, L, d_model]; as TransformerEncoderLayer's call (PyTorch's mask,
  // src_key_padding_mask for right padding, is_causal).
  Value operator()(Value x, bool causal, Value key_lengths = Value(), Value attn_mask = Value()) const;
};

// PyTorch's TransformerDecoder: the layers called in turn, each reading the
// same memory, then the norm. No one-input call (forward throws: it needs
// the memory).
class TransformerDecoder : public LayerStack<TransformerDecoderLayer> {
 public:
  TransformerDecoder(const std::function<std::shared_ptr<TransformerDecoderLayer>()>& make_layer,
                     std::int64_t num_layers, std::shared_ptr<LayerNorm> norm = nullptr);
  using Layer::operator();
  // As TransformerDecoderLayer's call, for every layer.
  Value operator()(Value tgt, Value memory, bool tgt_is_causal = false, Value tgt_key_lengths = Value(),
                   Value memory_key_lengths = Value(), Value tgt_mask = Value(), Value memory_mask = Value()) const;
};

// Layers called one after another: y = ln(… l2(l1(x))).
class Sequential : public Layer {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<std::shared_ptr<Layer>> layers);
  // Appends a layer made from `args`; returns it.
  template <typename L, typename... Args> L& emplace(Args&&... args) {
    return *add_sublayer(std::make_shared<L>(std::forward<Args>(args)...));
  }
  Sequential& append(std::shared_ptr<Layer> layer);
  std::size_t size() const { return sublayers_.size(); }
  Layer& operator[](std::size_t i) const { return *sublayers_.at(i); }
  Value forward(Value x) const override;
};

template <typename L>
std::shared_ptr<L> Layer::add_sublayer(std::shared_ptr<L> layer) {
  if (!layer) throw_error(ErrorKind::InvalidArgument, "add_sublayer: null layer");
  sublayers_.push_back(layer);
  return layer;
}

}  // namespace kiln::nn

// kiln::nn layers (seed 001 §1.2, `paddle.nn.Linear(16, 1)(x)`): a layer
// makes its parameters (in the current startup/main programs) when
// constructed and builds its ops into the current main program when called.
// Names are Paddle's: Linear → "linear_0", its weight "linear_0.w_0".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/frontend/functional.h"
#include "kiln/frontend/initializer.h"
#include "kiln/ir/value.h"
#include "kiln/support/data_type.h"

namespace kiln::nn {

class Layer {
 public:
  virtual ~Layer() = default;
  // This layer's parameter values (in the main program current when it was
  // made), in creation order.
  const std::vector<Value>& parameters() const { return params_; }
  // "linear_0"; empty for layers without parameters.
  const std::string& full_name() const { return full_name_; }
  // Dropout builds training or inference ops according to this flag (read
  // when the layer is called, as the program is static).
  void train() { training_ = true; }
  void eval() { training_ = false; }
  bool training() const { return training_; }

 protected:
  Layer() = default;
  explicit Layer(std::string_view name_prefix);
  // "<full_name>.<suffix>_<n>" created with create_parameter.
  Value add_parameter(std::string_view suffix, const std::vector<std::int64_t>& shape,
                      DataType dtype, const init::Initializer& initializer);
  // The parameter as a value of the current main program (a layer used
  // under another ProgramGuard refers to its parameter by name there).
  Value use(Value param) const;

  std::string full_name_;
  std::vector<Value> params_;
  bool training_ = true;
};

// y = x · W + b; W [in, out], b [out]. Default init as PyTorch's Linear:
// W ~ KaimingUniform(a = √5) = U(±1/√in), b ~ U(±1/√in).
class Linear : public Layer {
 public:
  Linear(std::int64_t in_features, std::int64_t out_features, bool bias = true,
         init::InitializerPtr weight_init = nullptr, init::InitializerPtr bias_init = nullptr,
         DataType dtype = DataType::Float32);
  Value operator()(Value x) const;
  Value weight() const { return weight_; }
  Value bias() const { return bias_; }  // null without bias

 private:
  Value weight_, bias_;
};

class ReLU : public Layer {
 public:
  Value operator()(Value x) const { return functional::relu(x); }
};
class GELU : public Layer {
 public:
  explicit GELU(bool approximate = false) : approximate_(approximate) {}
  Value operator()(Value x) const { return functional::gelu(x, approximate_); }

 private:
  bool approximate_;
};
class Tanh : public Layer {
 public:
  Value operator()(Value x) const { return functional::tanh(x); }
};
class Sigmoid : public Layer {
 public:
  Value operator()(Value x) const { return functional::sigmoid(x); }
};
class Softmax : public Layer {
 public:
  explicit Softmax(std::int64_t axis = -1) : axis_(axis) {}
  Value operator()(Value x) const { return functional::softmax(x, axis_); }

 private:
  std::int64_t axis_;
};

// p in [0, 1) (kiln::Error otherwise); train(): random mask, eval(): identity.
class Dropout : public Layer {
 public:
  explicit Dropout(double p = 0.5, std::int64_t seed = 0);
  Value operator()(Value x) const;

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
  Value operator()(Value ids) const;
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
  Value operator()(Value x) const;
  Value weight() const { return weight_; }  // null without affine
  Value bias() const { return bias_; }

 private:
  std::vector<std::int64_t> normalized_shape_;
  double eps_;
  Value weight_, bias_;
};

}  // namespace kiln::nn

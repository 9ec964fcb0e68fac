// kiln::nn layers (include/kiln/frontend/layers.h).
#include <cmath>
#include <memory>

#include "kiln/frontend/layers.h"
#include "kiln/frontend/parameter.h"
#include "kiln/frontend/program_guard.h"
#include "kiln/frontend/stop_gradient.h"
#include "kiln/frontend/unique_name.h"
#include "kiln/ir/block.h"

namespace kiln::nn {

Layer::Layer(std::string_view name_prefix) : full_name_(unique_name(name_prefix)) {}

Value Layer::add_parameter(std::string_view suffix, const std::vector<std::int64_t>& shape,
                           DataType dtype, const init::Initializer& initializer) {
  Value v = create_parameter(unique_name(full_name_ + "." + std::string(suffix)), shape, dtype,
                             initializer, /*trainable=*/true);
  params_.push_back(v);
  return v;
}

Value Layer::use(Value param) const {
  if (!param) return param;
  if (param.defining_op()->parent_block() == &current_main_program().block()) return param;
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

Value Linear::operator()(Value x) const { return functional::linear(x, use(weight_), use(bias_)); }

Dropout::Dropout(double p, std::int64_t seed) : p_(p), seed_(seed) {
  if (!(p >= 0.0 && p < 1.0))
    throw_error(ErrorKind::InvalidArgument, "Dropout: p = ", p, " must lie in [0, 1)");
}

Value Dropout::operator()(Value x) const { return functional::dropout(x, p_, training_, seed_); }

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

Value Embedding::operator()(Value ids) const {
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

Value LayerNorm::operator()(Value x) const {
  return functional::layer_norm(x, normalized_shape_, use(weight_), use(bias_), eps_);
}

}  // namespace kiln::nn

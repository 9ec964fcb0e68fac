// kiln::nn::functional (include/kiln/frontend/functional.h): each function
// builds primitive ops at the end of the current main program.
#include <string>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/frontend/functional.h"
#include "kiln/frontend/program_guard.h"

namespace kiln::nn::functional {

namespace {

const Block* top_block(const Block* b) {
  while (b && b->parent_op()) b = b->parent_op()->parent_block();
  return b;
}

// kiln::Error unless `v` is a value of the current main program.
void check_value(std::string_view fn, std::string_view arg, Value v) {
  if (!v) throw_error(ErrorKind::InvalidArgument, fn, ": ", arg, " is a null value");
  const Block* b = v.defining_op() ? v.defining_op()->parent_block() : cast<BlockArgument>(v).owner();
  if (top_block(b) != &current_main_program().block())
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
  const auto& d = dims_of("layer_norm", "x", x);
  const std::size_t k = normalized_shape.size();
  bool ok = k >= 1 && k <= d.size();
  for (std::size_t i = 0; ok && i < k; ++i) ok = d[d.size() - k + i] == normalized_shape[i];
  if (!ok)
    throw_error(ErrorKind::InvalidArgument, "layer_norm: x ", meta::dims_string(d),
                " must end in normalized_shape ", meta::dims_string(normalized_shape));
  if (!(eps > 0)) throw_error(ErrorKind::InvalidArgument, "layer_norm: eps ", eps, " must be > 0");
  Builder b = main_builder();
  // One fused kiln.layer_norm over the trailing k axes; a missing weight /
  // bias is ones / zeros shaped like normalized_shape.
  const DataType dt = shaped_data_type(x.type());
  if (weight) check_value("layer_norm", "weight", weight);
  else weight = b.create<FullOp>(normalized_shape, 1.0, dt).result();
  if (bias) check_value("layer_norm", "bias", bias);
  else bias = b.create<FullOp>(normalized_shape, 0.0, dt).result();
  const auto begin = static_cast<std::int64_t>(d.size() - k);
  return b.create<LayerNormOp>(x, weight, bias, begin, eps).result(0);
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
  Value loss = b.create<SoftmaxWithCrossEntropyOp>(logits, label, ignore_index).result(1);
  return reduce(b, loss, reduction);
}

}  // namespace kiln::nn::functional

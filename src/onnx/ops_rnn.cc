// ONNX's RNN, GRU and LSTM (opset 7 on) → kiln.rnn, kiln.gru, kiln.lstm,
// which take ONNX's operands, gate layouts and attributes as they are. The
// activations list (with activation_alpha / activation_beta, consumed in
// order by the activations that take an alpha, then a beta) becomes the op's
// activations string; an activation kiln lacks is an Unimplemented error
// naming the node. layout = 1 (batch-major X, initial states and outputs)
// is imported as transposes around the seq-major op.
#include <cctype>

#include "kiln/dialect/kiln_dialect.h"
#include "op_table.h"

namespace kiln::onnx::detail {

namespace {

// What the three nodes share, read from the node.
struct Common {
  std::int64_t hidden_size = 0;
  std::string direction, activations;
  double clip = 0;
  bool batch_major = false;
};

std::string joined_activations(const NodeContext& c) {
  const auto* acts = c.attribute("activations");
  if (!acts || acts->strings_size() == 0) {
    if (c.has_attr("activation_alpha") || c.has_attr("activation_beta"))
      c.unsupported("activation_alpha / activation_beta without an activations list");
    return "";
  }
  std::vector<float> alphas, betas;
  if (const auto* a = c.attribute("activation_alpha")) alphas.assign(a->floats().begin(), a->floats().end());
  if (const auto* a = c.attribute("activation_beta")) betas.assign(a->floats().begin(), a->floats().end());
  std::size_t ia = 0, ib = 0;
  std::string out;
  for (const auto& name : acts->strings()) {
    rnn::Activation a;
    if (!rnn::activation_named(name, &a))
      c.unsupported("activation '" + name +
                    "' (kiln's recurrent ops take Sigmoid, Tanh, Relu, HardSigmoid, LeakyRelu, "
                    "Affine, ScaledTanh, Elu, ThresholdedRelu, Softsign and Softplus)");
    if (rnn::uses_alpha(a.kind) && ia < alphas.size()) a.alpha = alphas[ia++];
    if (rnn::uses_beta(a.kind) && ib < betas.size()) a.beta = betas[ib++];
    if (!out.empty()) out += ',';
    out += rnn::activation_string(a);
  }
  return out;
}

Common common(NodeContext& c) {
  Common m;
  const auto* dir = c.attribute("direction");
  m.direction = dir && !dir->s().empty() ? dir->s() : "forward";
  m.clip = c.has_attr("clip") ? static_cast<double>(c.float_attr("clip", 0)) : 0.0;
  if (c.has_attr("clip") && m.clip <= 0) c.unsupported("clip must be > 0");
  m.activations = joined_activations(c);
  const std::int64_t layout = c.int_attr("layout", 0);
  if (layout != 0 && layout != 1) c.unsupported("layout " + std::to_string(layout));
  m.batch_major = layout == 1;
  m.hidden_size = c.int_attr("hidden_size", -1);
  if (m.hidden_size < 0) {  // from R [dirs, G·hidden, hidden]
    const auto& rd = shaped_dims(c.input(2).type());
    if (rd.size() == 3 && rd[2] > 0) m.hidden_size = rd[2];
    else c.unsupported("no hidden_size attribute, and R's last dim is not known at import");
  }
  return m;
}

Value transposed(NodeContext& c, Value v, std::vector<std::int64_t> perm) {
  return c.b.create<TransposeOp>(v, perm).result();
}

// The node's operands as the op's inputs, batch-major ones made seq-major.
RecurrentInputs inputs(NodeContext& c, const Common& m, bool lstm) {
  auto opt = [&](std::size_t i) { return i < c.inputs.size() ? c.inputs[i] : Value(); };
  RecurrentInputs in;
  in.x = c.input(0);
  in.w = c.input(1);
  in.r = c.input(2);
  in.b = opt(3);
  in.sequence_lens = opt(4);
  in.initial_h = opt(5);
  if (lstm) {
    in.initial_c = opt(6);
    in.p = opt(7);
  }
  if (m.batch_major) {
    in.x = transposed(c, in.x, {1, 0, 2});  // [batch, seq, input] → [seq, batch, input]
    if (in.initial_h) in.initial_h = transposed(c, in.initial_h, {1, 0, 2});
    if (in.initial_c) in.initial_c = transposed(c, in.initial_c, {1, 0, 2});
  }
  return in;
}

// The op's results as the node's outputs (batch-major ones for layout 1).
std::vector<Value> outputs(NodeContext& c, const Common& m, Operation* op) {
  std::vector<Value> out;
  for (std::uint32_t i = 0; i < op->num_results(); ++i) out.push_back(op->result(i));
  if (m.batch_major) {
    out[0] = transposed(c, out[0], {2, 0, 1, 3});  // [seq, dirs, batch, h] → [batch, seq, dirs, h]
    for (std::size_t i = 1; i < out.size(); ++i) out[i] = transposed(c, out[i], {1, 0, 2});
  }
  return out;
}

template <typename A>
A attributes_of(const Common& m) {
  A a{};
  a.hidden_size = m.hidden_size;
  a.direction = m.direction;
  a.activations = m.activations;
  a.clip = m.clip;
  return a;
}

std::vector<Value> rnn(NodeContext& c) {
  const Common m = common(c);
  auto op = c.b.create<RnnOp>(inputs(c, m, false), attributes_of<RnnOp::Attributes>(m));
  return outputs(c, m, op.operation());
}

std::vector<Value> gru(NodeContext& c) {
  const Common m = common(c);
  auto a = attributes_of<GruOp::Attributes>(m);
  a.linear_before_reset = c.int_attr("linear_before_reset", 0) != 0;
  auto op = c.b.create<GruOp>(inputs(c, m, false), a);
  return outputs(c, m, op.operation());
}

std::vector<Value> lstm(NodeContext& c) {
  const Common m = common(c);
  auto a = attributes_of<LstmOp::Attributes>(m);
  a.input_forget = c.int_attr("input_forget", 0) != 0;
  auto op = c.b.create<LstmOp>(inputs(c, m, true), a);
  return outputs(c, m, op.operation());
}

}  // namespace

void add_rnn_ops(OpTable& t) {
  t["RNN"] = {&rnn, 7};
  t["GRU"] = {&gru, 7};
  t["LSTM"] = {&lstm, 7};
}

}  // namespace kiln::onnx::detail

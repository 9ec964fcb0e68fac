// SimpleRNN, LSTM and GRU (kiln/frontend/rnn.h).
#include "kiln/frontend/rnn.h"

#include <cmath>
#include <vector>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/frontend/control_flow.h"
#include "kiln/frontend/functional.h"
#include "kiln/frontend/math.h"
#include "kiln/frontend/program_guard.h"
#include "kiln/frontend/tensor_array.h"

namespace kiln::nn {

SimpleRNN::SimpleRNN(std::int64_t input_size, std::int64_t hidden_size, DataType dtype)
    : Layer("simple_rnn"), input_size_(input_size), hidden_size_(hidden_size), dtype_(dtype) {
  if (input_size <= 0 || hidden_size <= 0)
    throw_error(ErrorKind::InvalidArgument, "SimpleRNN: input_size and hidden_size must be > 0, "
                "got ", input_size, " and ", hidden_size);
  // PyTorch's and Paddle's initialization: U(-1/sqrt(H), 1/sqrt(H)).
  const double k = 1.0 / std::sqrt(static_cast<double>(hidden_size));
  const init::Uniform u(-k, k);
  weight_ih_ = add_parameter("w_ih", {input_size, hidden_size}, dtype, u);
  weight_hh_ = add_parameter("w_hh", {hidden_size, hidden_size}, dtype, u);
  bias_ = add_parameter("b", {hidden_size}, dtype, u);
}

Value SimpleRNN::forward(Value x) const { return (*this)(x).first; }

std::pair<Value, Value> SimpleRNN::operator()(Value x, Value h0) const {
  if (!x) throw_error(ErrorKind::InvalidArgument, "SimpleRNN: x is a null value");
  if (!is_shaped(x.type()) || shaped_dims(x.type()).size() != 3 ||
      shaped_data_type(x.type()) != dtype_ ||
      (shaped_dims(x.type())[2] != input_size_ && shaped_dims(x.type())[2] != -1))
    throw_error(ErrorKind::InvalidArgument, "SimpleRNN: x must be a ", to_string(dtype_),
                " tensor [T, B, ", input_size_, "], got ", x.type().to_string());
  const std::int64_t batch = shaped_dims(x.type())[1];
  Builder b = main_builder();
  const Value w_hh = use(weight_hh_);
  // Every step's input projection at once: [T, B, H].
  Value projected = functional::linear(x, use(weight_ih_), use(bias_));
  Value xs = array_from_tensor(projected);
  Value steps = array_length(xs);
  Value t0 = full({1}, 0, DataType::Int64);
  if (!h0) {
    h0 = batch >= 0 ? full({batch, hidden_size_}, 0.0, dtype_)
                    : b.create<ZerosLikeOp>(array_read(xs, t0)).result();
  }
  Value outs0 = create_array(dtype_, {batch, hidden_size_});
  auto r = while_loop(
      [&](const std::vector<Value>& v) { return less_than(v[0], steps); },
      [&](const std::vector<Value>& v) {
        Builder bb = main_builder();
        Value pre = bb.create<AddOp>(array_read(xs, v[0]), bb.create<MatmulOp>(v[1], w_hh).result())
                        .result();
        Value h = functional::tanh(pre);
        return std::vector<Value>{increment(v[0]), h, array_write(v[2], v[0], h)};
      },
      {t0, h0, outs0});
  // Stacked like the projected inputs, so zero steps give [0, B, H].
  Value outs = b.create<ArrayStackLikeOp>(r[2], projected).result();
  return {outs, r[1]};
}

FusedRecurrent::FusedRecurrent(std::string_view name, int gates, std::int64_t input_size,
                               std::int64_t hidden_size, bool bidirectional, DataType dtype)
    : Layer(name == "LSTM" ? "lstm" : "gru"),
      layer_name_(name),
      gates_(gates),
      input_size_(input_size),
      hidden_size_(hidden_size),
      bidirectional_(bidirectional),
      dtype_(dtype) {
  if (input_size <= 0 || hidden_size <= 0)
    throw_error(ErrorKind::InvalidArgument, name, ": input_size and hidden_size must be > 0, got ",
                input_size, " and ", hidden_size);
  const std::int64_t dirs = bidirectional ? 2 : 1, gh = gates * hidden_size;
  // PyTorch's initialization: U(-1/sqrt(H), 1/sqrt(H)) for every weight and bias.
  const double k = 1.0 / std::sqrt(static_cast<double>(hidden_size));
  const init::Uniform u(-k, k);
  weight_ih_ = add_parameter("w_ih", {dirs, gh, input_size}, dtype, u);
  weight_hh_ = add_parameter("w_hh", {dirs, gh, hidden_size}, dtype, u);
  bias_ = add_parameter("b", {dirs, 2 * gh}, dtype, u);
}

Value FusedRecurrent::forward(Value x) const { return call(x, {}, {}).y; }

RecurrentOutput FusedRecurrent::call(Value x, Value h0, Value c0) const {
  if (!x) throw_error(ErrorKind::InvalidArgument, layer_name_, ": x is a null value");
  if (!is_shaped(x.type()) || shaped_dims(x.type()).size() != 3 ||
      shaped_data_type(x.type()) != dtype_ ||
      (shaped_dims(x.type())[2] != input_size_ && shaped_dims(x.type())[2] != -1))
    throw_error(ErrorKind::InvalidArgument, layer_name_, ": x must be a ", to_string(dtype_),
                " tensor [T, B, ", input_size_, "], got ", x.type().to_string());
  Builder b = main_builder();
  RecurrentInputs in{x, use(weight_ih_), use(weight_hh_), use(bias_), {}, h0, c0, {}};
  const std::string direction = bidirectional_ ? "bidirectional" : "forward";
  Operation* op = nullptr;
  if (gates_ == 4) {
    LstmOp::Attributes a{};
    a.hidden_size = hidden_size_, a.direction = direction;
    op = b.create<LstmOp>(in, a).operation();
  } else {
    GruOp::Attributes a{};
    a.hidden_size = hidden_size_, a.direction = direction, a.linear_before_reset = true;
    op = b.create<GruOp>(in, a).operation();
  }
  // [T, dirs, B, H] → [T, B, dirs, H] → [T, B, dirs·H]
  Value y = b.create<TransposeOp>(op->result(0), std::vector<std::int64_t>{0, 2, 1, 3}).result();
  y = b.create<FlattenOp>(y, std::int64_t{2}, std::int64_t{3}).result();
  return {y, op->result(1), gates_ == 4 ? op->result(2) : Value()};
}

LSTM::LSTM(std::int64_t input_size, std::int64_t hidden_size, bool bidirectional, DataType dtype)
    : FusedRecurrent("LSTM", 4, input_size, hidden_size, bidirectional, dtype) {}

GRU::GRU(std::int64_t input_size, std::int64_t hidden_size, bool bidirectional, DataType dtype)
    : FusedRecurrent("GRU", 3, input_size, hidden_size, bidirectional, dtype) {}

}  // namespace kiln::nn

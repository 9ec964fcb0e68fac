// Recurrent layers written with while_loop and tensor arrays, so one
// program runs any sequence length: SimpleRNN is paddle.nn.SimpleRNN /
// torch.nn.RNN with a tanh cell, time-major,
//
//   h_t = tanh(x_t · W_ih + b + h_{t-1} · W_hh)
//
// built as one GEMM for the input projection of every time step (hoisted
// out of the loop), then a kiln.while over time whose body is one GEMM, an
// add and a tanh, reading the projected inputs from an array and appending
// each h_t to another. append_backward differentiates it like any loop
// (the forward saves h per step; the gradient loop runs backward in time).
//
// LSTM and GRU are PyTorch's nn.LSTM / nn.GRU (one layer, time-major,
// optionally bidirectional) as one fused op each (kiln.lstm, kiln.gru of
// kiln/dialect/rnn_ops.h), their weights in ONNX's layout; they train like
// any layer (append_backward reaches the weights through the ops' grad op,
// backpropagation through time in one kernel).
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>

#include "kiln/frontend/layers.h"

namespace kiln::nn {

class SimpleRNN : public Layer {
 public:
  SimpleRNN(std::int64_t input_size, std::int64_t hidden_size, DataType dtype = DataType::Float32);
  // x [T, B, input_size] (T and B may be -1); h0 [B, hidden_size], zeros
  // when null (then B must be known, or T >= 1 at run time). Returns the
  // outputs [T, B, hidden_size] (every h_t) and the last state h_T.
  std::pair<Value, Value> operator()(Value x, Value h0 = {}) const;
  // The outputs of operator()(x).
  Value forward(Value x) const override;

  Value weight_ih() const { return weight_ih_; }  // [input_size, hidden_size]
  Value weight_hh() const { return weight_hh_; }  // [hidden_size, hidden_size]
  Value bias() const { return bias_; }            // [hidden_size]

 private:
  std::int64_t input_size_, hidden_size_;
  DataType dtype_;
  Value weight_ih_, weight_hh_, bias_;
};

// What LSTM and GRU return: y [T, B, dirs·hidden] (every step's hidden
// state, the directions side by side, as PyTorch), h [dirs, B, hidden] (the
// last hidden state) and, for LSTM, c [dirs, B, hidden] (the last cell state).
struct RecurrentOutput {
  Value y, h, c;
};

// The parameters and call shared by LSTM and GRU.
class FusedRecurrent : public Layer {
 public:
  Value weight_ih() const { return weight_ih_; }  // [dirs, gates·hidden, input_size]
  Value weight_hh() const { return weight_hh_; }  // [dirs, gates·hidden, hidden_size]
  Value bias() const { return bias_; }            // [dirs, 2·gates·hidden]: ih's then hh's
  Value forward(Value x) const override;          // operator()(x).y

 protected:
  FusedRecurrent(std::string_view name, int gates, std::int64_t input_size,
                 std::int64_t hidden_size, bool bidirectional, DataType dtype);
  // x [T, B, input_size] checked; h0 / c0 [dirs, B, hidden] or null (zeros).
  RecurrentOutput call(Value x, Value h0, Value c0) const;

  std::string_view layer_name_;
  int gates_;
  std::int64_t input_size_, hidden_size_;
  bool bidirectional_;
  DataType dtype_;
  Value weight_ih_, weight_hh_, bias_;
};

// Gates i, o, f, c (ONNX's order; PyTorch's weight_ih_l0 is i, f, g, o).
class LSTM : public FusedRecurrent {
 public:
  LSTM(std::int64_t input_size, std::int64_t hidden_size, bool bidirectional = false,
       DataType dtype = DataType::Float32);
  RecurrentOutput operator()(Value x, Value h0 = {}, Value c0 = {}) const {
    return call(x, h0, c0);
  }
};

// Gates z, r, h (ONNX's order; PyTorch's is r, z, n), linear_before_reset
// as PyTorch's GRU computes n = tanh(W_in x + b_in + r ∘ (W_hn h + b_hn)).
class GRU : public FusedRecurrent {
 public:
  GRU(std::int64_t input_size, std::int64_t hidden_size, bool bidirectional = false,
      DataType dtype = DataType::Float32);
  RecurrentOutput operator()(Value x, Value h0 = {}) const { return call(x, h0, {}); }
};

}  // namespace kiln::nn

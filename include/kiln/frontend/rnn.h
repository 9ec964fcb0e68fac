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
#pragma once

#include <cstdint>
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
  Value forward(Value x) const override { return (*this)(x).first; }

  Value weight_ih() const { return weight_ih_; }  // [input_size, hidden_size]
  Value weight_hh() const { return weight_hh_; }  // [hidden_size, hidden_size]
  Value bias() const { return bias_; }            // [hidden_size]

 private:
  std::int64_t input_size_, hidden_size_;
  DataType dtype_;
  Value weight_ih_, weight_hh_, bias_;
};

}  // namespace kiln::nn

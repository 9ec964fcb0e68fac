// Recurrent layers as fused ops: kiln.rnn (Elman), kiln.gru and kiln.lstm,
// with ONNX's semantics, operands and gate layouts (what PyTorch's fused
// nn.LSTM / Paddle's rnn op are: one op for a whole sequence, not a graph
// of per-step matmuls). The CPU kernels make the input projection of every
// step one GEMM and then one h·Rᵀ GEMM plus the gate math per step.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/dialect/grad_op.h"

namespace kiln {

// Operands of all three ops, in this order (absent ones are left out, and
// the op's has_* attributes say which are there):
//   X [seq, batch, input]           seq-major (ONNX's layout 0)
//   W [dirs, G·hidden, input]       the input weights of every gate
//   R [dirs, G·hidden, hidden]      the recurrent weights
//   B [dirs, 2·G·hidden]            (has_bias) W's bias then R's; zeros when absent
//   sequence_lens [batch]           (has_sequence_lens) int32 or int64, each in
//                                   [0, seq]; all seq when absent
//   initial_h [dirs, batch, hidden] (has_initial_h) zeros when absent
//   initial_c [dirs, batch, hidden] (kiln.lstm, has_initial_c) zeros when absent
//   P [dirs, 3·hidden]              (kiln.lstm, has_peepholes) peepholes i, o, f;
//                                   zeros when absent
// G is 1 (rnn), 3 (gru: gates z, r, h) or 4 (lstm: gates i, o, f, c); dirs
// is 2 for direction "bidirectional", else 1. X, W, R, B, initial_h/c and P
// share one floating dtype (kernels: f32, f64).
//
// Attributes shared by the three ops:
//   hidden_size > 0 (R's last dim);
//   direction "forward", "reverse" or "bidirectional" (the reverse pass of
//   batch entry b walks steps len_b-1 .. 0);
//   activations: comma-separated activation names, one per function of the
//   cell (rnn: f; gru: f, g; lstm: f, g, h), given once for every direction
//   or once per direction (forward's first); "" means the cell's defaults
//   (rnn Tanh; gru Sigmoid,Tanh; lstm Sigmoid,Tanh,Tanh). Names are ONNX's:
//   Sigmoid, Tanh, Relu, HardSigmoid(alpha,beta), LeakyRelu(alpha),
//   Affine(alpha,beta), ScaledTanh(alpha,beta), Elu(alpha),
//   ThresholdedRelu(alpha), Softsign, Softplus; the parameters in
//   parentheses are optional (ONNX's defaults otherwise);
//   clip: when > 0, the input of every activation is clamped to [-clip,
//   clip] (each gate's pre-activation, and for kiln.lstm Ct before h; the
//   cell state carried to the next step is not clipped); 0: no clipping.
//
// Results: Y [seq, dirs, batch, hidden] (every step's hidden state; 0 at
// steps at or past a batch entry's sequence length), Y_h [dirs, batch,
// hidden] (the last hidden state: for a batch entry of length 0, initial_h,
// the state after no step — ONNX leaves this case open, ONNX Runtime gives 0),
// and for kiln.lstm Y_c [dirs, batch, hidden] (the last cell state).
//
// Gradients: every result's gradient flows back (one that none reaches is
// taken as zeros) into X, W, R, B, initial_h, initial_c and P through the
// op's RecurrentGradOp below; sequence_lens gets none. Padding steps (t >=
// len_b) get and pass on no gradient: Y is a constant 0 there and the state
// passes through unchanged.

// The operands of a recurrent op as Values (a null Value: absent). The
// ops' builders take them with the op's Attributes, whose has_* flags they
// set from which Values are given: b.create<LstmOp>(RecurrentInputs{x, w,
// r}, attrs).
struct RecurrentInputs {
  Value x, w, r;
  Value b, sequence_lens, initial_h;
  Value initial_c, p;  // kiln.lstm only
};

// Ht = f(Xt·Wᵀ + Ht-1·Rᵀ + Wb + Rb)
struct RnnOp : Op<RnnOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.rnn";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = -1, num_results = 2;  // variadic: the optional operands
  KILN_ATTRIBUTES((std::int64_t, hidden_size), (std::string, direction),
                  (std::string, activations), (double, clip), (bool, has_bias),
                  (bool, has_sequence_lens), (bool, has_initial_h));
  static void build(Builder& b, OperationArgument& arg, const RecurrentInputs& in, Attributes attrs);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// zt = f(Xt·Wzᵀ + Ht-1·Rzᵀ + Wbz + Rbz)
// rt = f(Xt·Wrᵀ + Ht-1·Rrᵀ + Wbr + Rbr)
// ht = g(Xt·Whᵀ + (rt ∘ Ht-1)·Rhᵀ + Rbh + Wbh)      linear_before_reset false
// ht = g(Xt·Whᵀ + rt ∘ (Ht-1·Rhᵀ + Rbh) + Wbh)      linear_before_reset true
// Ht = (1 - zt) ∘ ht + zt ∘ Ht-1
struct GruOp : Op<GruOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.gru";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = -1, num_results = 2;
  KILN_ATTRIBUTES((std::int64_t, hidden_size), (std::string, direction),
                  (std::string, activations), (double, clip), (bool, has_bias),
                  (bool, has_sequence_lens), (bool, has_initial_h), (bool, linear_before_reset));
  static void build(Builder& b, OperationArgument& arg, const RecurrentInputs& in, Attributes attrs);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// it = f(Xt·Wiᵀ + Ht-1·Riᵀ + Pi ∘ Ct-1 + Wbi + Rbi)
// ft = f(Xt·Wfᵀ + Ht-1·Rfᵀ + Pf ∘ Ct-1 + Wbf + Rbf)   (1 - it with input_forget)
// ct = g(Xt·Wcᵀ + Ht-1·Rcᵀ + Wbc + Rbc)
// Ct = ft ∘ Ct-1 + it ∘ ct
// ot = f(Xt·Woᵀ + Ht-1·Roᵀ + Po ∘ Ct + Wbo + Rbo)
// Ht = ot ∘ h(Ct)
struct LstmOp : Op<LstmOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.lstm";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = -1, num_results = 3;
  KILN_ATTRIBUTES((std::int64_t, hidden_size), (std::string, direction),
                  (std::string, activations), (double, clip), (bool, has_bias),
                  (bool, has_sequence_lens), (bool, has_initial_h), (bool, has_initial_c),
                  (bool, has_peepholes), (bool, input_forget));
  static void build(Builder& b, OperationArgument& arg, const RecurrentInputs& in, Attributes attrs);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// (dX, dW, dR[, dB][, d_initial_h][, d_initial_c][, dP]) =
//   kiln.<cell>_grad(X, W, R[, B][, sequence_lens][, initial_h][, initial_c][, P],
//                    dY, dY_h[, dY_c])
// Backpropagation through time for the recurrent op Fwd (kiln.rnn_grad,
// kiln.gru_grad, kiln.lstm_grad): Fwd's attributes and operands as they
// are, then the gradients of its results, shaped like them; one result per
// floating operand, typed like it, in operand order (sequence_lens has
// none). One template for the three cells: GradOf does not fit their
// optional operands and results.
// The kernel recomputes the forward (recording each step's gate inputs and
// the states it started from) rather than the forward saving them as extra
// results: the forward's results stay ONNX's and nothing is held until the
// backward, for one forward's FLOPs more in a backward of about two (dh·R per
// step, then dX, dW, dR as one GEMM each): about a quarter of a training
// step (bench/rnn_bench.cc: rnn.<size>.<cell>.train_ms next to fused_ms).
template <typename Fwd>
struct RecurrentGradOp : Op<RecurrentGradOp<Fwd>, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op<RecurrentGradOp<Fwd>, ReadOnly, ValueSemantics, InferMetaInterface>::Op;
  using Attributes = typename Fwd::Attributes;
  static constexpr std::string_view name = detail::GradName<Fwd>::value;
  static constexpr int num_operands = -1, num_results = -1;
  // From Fwd's Vjp: the forward op (its operands and attributes are copied)
  // and one gradient per result (null: zeros shaped like that result).
  static void build(Builder& b, OperationArgument& arg, Operation* fwd,
                    const std::vector<Value>& out_grads);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

namespace rnn {

enum class Cell { Rnn, Gru, Lstm };

// One activation function of a cell, with its parameters.
struct Activation {
  enum class Kind {
    Sigmoid, Tanh, Relu, HardSigmoid, LeakyRelu, Affine, ScaledTanh, Elu, ThresholdedRelu,
    Softsign, Softplus
  };
  Kind kind = Kind::Sigmoid;
  double alpha = 0, beta = 0;
};

// What the three ops' attributes say, in one form (InferMeta and the
// kernels work on it).
struct Config {
  Cell cell = Cell::Rnn;
  std::int64_t hidden_size = 0;
  int num_directions = 1;
  bool reverse_only = false;  // direction "reverse"
  std::vector<Activation> activations;  // per cell function, for each direction (forward's first)
  double clip = 0;
  bool has_bias = false, has_sequence_lens = false, has_initial_h = false;
  bool has_initial_c = false, has_peepholes = false;
  bool input_forget = false, linear_before_reset = false;
  // Operand index of each operand, -1 when absent.
  int b = -1, sequence_lens = -1, initial_h = -1, initial_c = -1, p = -1;
  int num_operands = 3;
  // Gates per cell: 1, 3 or 4.
  int gates() const { return cell == Cell::Rnn ? 1 : cell == Cell::Gru ? 3 : 4; }
};

// The config of an op's attributes; kiln::Error naming `op` for a bad
// direction, activation list or clip.
Config config_of(std::string_view op, const RnnOp::Attributes& a);
Config config_of(std::string_view op, const GruOp::Attributes& a);
Config config_of(std::string_view op, const LstmOp::Attributes& a);

// "Sigmoid,Tanh,LeakyRelu(0.1)" → activations; kiln::Error naming `op` for
// an unknown name or a bad parameter list.
std::vector<Activation> parse_activations(std::string_view op, std::string_view spec);
// The activation's name as the `activations` attribute spells it, with its
// parameters when it has any ("LeakyRelu(0.01)").
std::string activation_string(const Activation& a);
// The activation of `name` (ONNX's spelling) with ONNX's default
// parameters; false when kiln has no such activation.
bool activation_named(std::string_view name, Activation* out);
// Whether an activation reads alpha / beta.
bool uses_alpha(Activation::Kind k);
bool uses_beta(Activation::Kind k);

}  // namespace rnn

}  // namespace kiln

// Vjp (vector-Jacobian product) of the elementwise and linear-algebra ops of
// math_ops.h: given the gradient of each result, build the ops computing the
// gradient of each operand (seed 001 §1.2.2.1; seed 002 §2.2.1 interfaces).
// Integer operands get no gradient (a null Value); broadcast gradients are
// summed back to the operand's run-time shape with kiln.reduce_as.
#include "kiln/dialect/grad_ops.h"
#include "kiln/dialect/math_ops.h"

namespace kiln {

using vjp::differentiable;

namespace {

// The single out_grad of a one-result op; null when none flows.
Value single_grad(Operation* op, const std::vector<Value>& out_grads) {
  vjp::check_out_grads(op, out_grads);
  return out_grads[0];
}

// Common start of a one-result op's Vjp: null grads when the out_grad is
// null, or for operands that are not floating tensors.
struct Start {
  Value dout;
  std::vector<Value> grads;
  bool done;
};
Start start(Operation* op, const std::vector<Value>& out_grads) {
  Value d = single_grad(op, out_grads);
  Start s{d, std::vector<Value>(op->num_operands()), true};
  if (!d) return s;
  for (std::uint32_t i = 0; i < op->num_operands(); ++i)
    if (differentiable(op->operand_source(i))) s.done = false;
  return s;
}

// For a unary op: the grad of its operand, or nothing to do.
template <typename F>
std::vector<Value> unary(Operation* op, const std::vector<Value>& out_grads, F&& f) {
  Start s = start(op, out_grads);
  if (s.done) return s.grads;
  s.grads[0] = f(s.dout, op->operand_source(0), op->result(0));
  return s.grads;
}

// For a broadcasting binary op: f_x / f_y give the grads in the broadcast
// shape, reduced here to each operand's shape.
template <typename FX, typename FY>
std::vector<Value> binary(Builder& b, Operation* op, const std::vector<Value>& out_grads, FX&& fx,
                          FY&& fy) {
  Start s = start(op, out_grads);
  if (s.done) return s.grads;
  Value x = op->operand_source(0), y = op->operand_source(1);
  if (differentiable(x)) s.grads[0] = vjp::reduce_to_operand(b, fx(s.dout), x, y);
  if (differentiable(y)) s.grads[1] = vjp::reduce_to_operand(b, fy(s.dout), y, x);
  return s.grads;
}

}  // namespace

// ---- broadcasting binary ops ----

std::vector<Value> AddOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  return binary(b, op, g, [](Value d) { return d; }, [](Value d) { return d; });
}

std::vector<Value> SubOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  return binary(b, op, g, [](Value d) { return d; },
                [&](Value d) { return b.create<NegOp>(d).result(); });
}

std::vector<Value> MulOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value x = op->operand_source(0), y = op->operand_source(1);
  return binary(b, op, g, [&](Value d) { return b.create<MulOp>(d, y).result(); },
                [&](Value d) { return b.create<MulOp>(d, x).result(); });
}

// d/dx x/y = 1/y; d/dy x/y = -x/y² = -out/y.
std::vector<Value> DivOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value y = op->operand_source(1), out = op->result(0);
  return binary(b, op, g, [&](Value d) { return b.create<DivOp>(d, y).result(); },
                [&](Value d) {
                  Value t = b.create<DivOp>(b.create<MulOp>(d, out).result(), y).result();
                  return b.create<NegOp>(t).result();
                });
}

namespace {
template <typename GradOp>
std::vector<Value> minmax_vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Start s = start(op, g);
  if (s.done) return s.grads;
  Value x = op->operand_source(0), y = op->operand_source(1);
  auto split = b.create<GradOp>(x, y, s.dout);
  s.grads[0] = vjp::reduce_to_operand(b, split.operation()->result(0), x, y);
  s.grads[1] = vjp::reduce_to_operand(b, split.operation()->result(1), y, x);
  return s.grads;
}
}  // namespace

std::vector<Value> MaximumOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  return minmax_vjp<MaximumGradOp>(b, op, g);
}
std::vector<Value> MinimumOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  return minmax_vjp<MinimumGradOp>(b, op, g);
}

// d/dx x^y = y·x^(y-1); d/dy x^y = x^y·ln x.
std::vector<Value> PowOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value x = op->operand_source(0), y = op->operand_source(1), out = op->result(0);
  return binary(b, op, g,
                [&](Value d) {
                  Value ym1 = b.create<ScaleOp>(y, 1.0, -1.0).result();
                  Value p = b.create<PowOp>(x, ym1).result();
                  return b.create<MulOp>(d, b.create<MulOp>(y, p).result()).result();
                },
                [&](Value d) {
                  Value lx = b.create<LogOp>(x).result();
                  return b.create<MulOp>(b.create<MulOp>(d, out).result(), lx).result();
                });
}

// ---- matmul ----

// out = op(x) @ op(y) with op = transpose of the last two dims when flagged.
// Each grad is one matmul of dout with the other operand (flags chosen so
// no explicit transpose is needed), then reduce_as over broadcast batches.
std::vector<Value> MatmulOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Start s = start(op, g);
  if (s.done) return s.grads;
  auto a = MatmulOp(op).attrs();
  Value x = op->operand_source(0), y = op->operand_source(1), d = s.dout;
  auto mm = [&](Value p, Value q, bool tp, bool tq) {
    return b.create<MatmulOp>(p, q, tp, tq).result();
  };
  // Rank-2 operands have no batch dims to broadcast: their grads have their
  // shape already.
  const bool plain = shaped_dims(x.type()).size() == 2 && shaped_dims(y.type()).size() == 2;
  auto fit = [&](Value grad, Value operand) {
    return plain ? grad : vjp::reduce_to(b, grad, operand);
  };
  Value dx, dy;
  if (differentiable(x)) {
    if (!a.transpose_x) dx = a.transpose_y ? mm(d, y, false, false) : mm(d, y, false, true);
    else dx = a.transpose_y ? mm(y, d, true, true) : mm(y, d, false, true);
    s.grads[0] = fit(dx, x);
  }
  if (differentiable(y)) {
    if (!a.transpose_y) dy = a.transpose_x ? mm(x, d, false, false) : mm(x, d, true, false);
    else dy = a.transpose_x ? mm(d, x, true, true) : mm(d, x, true, false);
    s.grads[1] = fit(dy, y);
  }
  return s.grads;
}

// ---- unary ops ----

std::vector<Value> ReluOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  return unary(op, g, [&](Value d, Value, Value out) {
    return b.create<ReluGradOp>(out, d).result();
  });
}

// The in-place twin: its result is a distinct SSA value holding relu(x), and
// out > 0 exactly where x > 0, so the grad needs only the result.
std::vector<Value> Relu_Op::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  return unary(op, g, [&](Value d, Value, Value out) {
    return b.create<ReluGradOp>(out, d).result();
  });
}

std::vector<Value> GeluOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  bool approximate = GeluOp(op).attrs().approximate;
  return unary(op, g, [&](Value d, Value x, Value) {
    return b.create<GeluGradOp>(x, d, approximate).result();
  });
}

std::vector<Value> TanhOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  return unary(op, g, [&](Value d, Value, Value out) {
    return b.create<TanhGradOp>(out, d).result();
  });
}

std::vector<Value> SigmoidOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  return unary(op, g, [&](Value d, Value, Value out) {
    return b.create<SigmoidGradOp>(out, d).result();
  });
}

std::vector<Value> ExpOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  return unary(op, g, [&](Value d, Value, Value out) { return b.create<MulOp>(d, out).result(); });
}

std::vector<Value> LogOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  return unary(op, g, [&](Value d, Value x, Value) { return b.create<DivOp>(d, x).result(); });
}

namespace {
// d/dx √x = 0.5 / √x = 0.5 / out.
Value sqrt_grad(Builder& b, Value d, Value out) {
  return b.create<DivOp>(b.create<ScaleOp>(d, 0.5).result(), out).result();
}
}  // namespace

std::vector<Value> SqrtOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  return unary(op, g, [&](Value d, Value, Value out) { return sqrt_grad(b, d, out); });
}

// In place: the result (a distinct SSA value) holds √x.
std::vector<Value> Sqrt_Op::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  return unary(op, g, [&](Value d, Value, Value out) { return sqrt_grad(b, d, out); });
}

std::vector<Value> SquareOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  return unary(op, g, [&](Value d, Value x, Value) {
    return b.create<MulOp>(d, b.create<ScaleOp>(x, 2.0).result()).result();
  });
}

std::vector<Value> AbsOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  return unary(op, g, [&](Value d, Value x, Value) {
    return b.create<AbsGradOp>(x, d).result();
  });
}

std::vector<Value> NegOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  return unary(op, g, [&](Value d, Value, Value) { return b.create<NegOp>(d).result(); });
}

// The bias does not depend on x: d/dx (s·x + c) = s.
std::vector<Value> ScaleOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  double scale = ScaleOp(op).attrs().scale;
  return unary(op, g, [&](Value d, Value, Value) {
    return b.create<ScaleOp>(d, scale, 0.0).result();
  });
}

std::vector<Value> AssignOp::vjp(Builder&, Operation* op, const std::vector<Value>& g) {
  return unary(op, g, [&](Value d, Value, Value) { return d; });
}

// Float → float: the grad cast back to x's dtype; no grad through integers.
std::vector<Value> CastOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Start s = start(op, g);
  if (s.done || !differentiable(op->result(0))) return std::vector<Value>(1);
  DataType from = shaped_data_type(op->operand_source(0).type());
  if (shaped_data_type(s.dout.type()) == from) return {s.dout};
  return {b.create<CastOp>(s.dout, from).result()};
}

// Every operand gets dout.
std::vector<Value> AddNOp::vjp(Builder&, Operation* op, const std::vector<Value>& g) {
  Start s = start(op, g);
  if (s.done) return s.grads;
  for (std::uint32_t i = 0; i < op->num_operands(); ++i)
    if (differentiable(op->operand_source(i))) s.grads[i] = s.dout;
  return s.grads;
}

}  // namespace kiln

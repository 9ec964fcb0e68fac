// ONNX's training domain (ai.onnx.preview.training, version 1): Adagrad,
// Adam and Momentum (standard and Nesterov). Each is a pure function of the
// learning rate R, the update count T, the optimized tensors X, their
// gradients G and their accumulators, returning new X and new accumulators;
// kiln's optimizer ops (kiln.adam_, kiln.momentum_) update in place with
// Paddle's semantics (other bias correction, no regularization term), so
// the updates are composed of kiln's elementwise ops, one chain per
// optimized tensor, following ONNX's pseudo code term by term. Gradient
// (the gradient of a graph value w.r.t. others of the same graph) is
// kiln's append_backward.
#include <string>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/frontend/backward.h"
#include "kiln/support/error.h"
#include "node_helpers.h"
#include "op_table.h"

namespace kiln::onnx::detail {

namespace {

Value as(NodeContext& c, Value v, DataType dt) {
  return dtype_of(v) == dt ? v : c.b.create<CastOp>(v, dt).result();
}

double required_float(NodeContext& c, const std::string& name) {
  if (!c.has_attr(name))
    throw_error(ErrorKind::InvalidArgument, "ONNX ", c.where(), " needs attribute '", name, "'");
  return c.float_attr(name, 0.0f);
}

// The optimizer's operands: R, T, then `groups` lists of n tensors each
// (X…, G…, accumulators…). Returns n; kiln::Error naming the node when the
// count does not split, or R / T / X have dtypes ONNX does not allow.
std::size_t tensors_per_group(NodeContext& c, std::size_t groups) {
  const std::size_t rest = c.inputs.size() < 2 ? 0 : c.inputs.size() - 2;
  if (rest == 0 || rest % groups != 0)
    throw_error(ErrorKind::InvalidArgument, "ONNX ", c.where(), " has ", c.inputs.size(),
                " inputs; it takes R, T and ", groups, " equally long lists of tensors");
  for (std::size_t i = 0; i < c.inputs.size(); ++i) {
    const DataType dt = dtype_of(c.input(i));
    const bool ok = i == 1 ? dt == DataType::Int64 : dt == DataType::Float32 || dt == DataType::Float64;
    if (!ok)
      throw_error(ErrorKind::InvalidArgument, "ONNX ", c.where(), ": input #", i, " is ",
                  to_string(dt), i == 1 ? ", the update count T must be int64" : ", expected float or double");
  }
  return rest / groups;
}

// norm_coefficient · X + G
Value regularized(NodeContext& c, Value x, Value g, double norm_coefficient) {
  return c.b.create<AddOp>(c.b.create<ScaleOp>(x, norm_coefficient, 0.0).result(), g).result();
}

// T > 0, a bool scalar.
Value positive(NodeContext& c) {
  return c.b.create<GreaterThanOp>(c.input(1), scalar(c, DataType::Int64, 0.0)).result();
}

// r = R / (1 + T · decay_factor)
// G_regularized = norm_coefficient · X + G
// H_new = H + G_regularized²
// X_new = X - r · G_regularized / (sqrt(H_new) + epsilon)
std::vector<Value> adagrad(NodeContext& c) {
  const std::size_t n = tensors_per_group(c, 3);
  const double decay = c.float_attr("decay_factor", 0.0f), eps = c.float_attr("epsilon", 1e-6f),
               norm = c.float_attr("norm_coefficient", 0.0f);
  std::vector<Value> out(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    Value x = c.input(2 + i), g = c.input(2 + n + i), h = c.input(2 + 2 * n + i);
    const DataType dt = dtype_of(x);
    Value t = c.b.create<ScaleOp>(as(c, c.input(1), dt), decay, 1.0).result();
    Value r = c.b.create<DivOp>(as(c, c.input(0), dt), t).result();
    Value greg = regularized(c, x, g, norm);
    Value h_new = c.b.create<AddOp>(h, c.b.create<MulOp>(greg, greg).result()).result();
    Value h_adaptive = c.b.create<ScaleOp>(c.b.create<SqrtOp>(h_new).result(), 1.0, eps).result();
    Value step = c.b.create<DivOp>(c.b.create<MulOp>(r, greg).result(), h_adaptive).result();
    out[i] = c.b.create<SubOp>(x, step).result();
    out[n + i] = h_new;
  }
  return out;
}

// G_regularized = norm_coefficient · X + G
// beta_adjusted = T > 0 ? beta : 1
// V_new = alpha · V + beta_adjusted · G_regularized
// X_new = X - R · V_new                                  (standard)
//       = X - R · (G_regularized + alpha · V_new)        (nesterov)
std::vector<Value> momentum(NodeContext& c) {
  const std::size_t n = tensors_per_group(c, 3);
  const double alpha = required_float(c, "alpha"), beta = required_float(c, "beta"),
               norm = required_float(c, "norm_coefficient");
  const auto* mode_attr = c.attribute("mode");
  if (!mode_attr)
    throw_error(ErrorKind::InvalidArgument, "ONNX ", c.where(), " needs attribute 'mode'");
  const std::string& mode = mode_attr->s();
  if (mode != "standard" && mode != "nesterov")
    c.unsupported("mode '" + mode + "' (ONNX defines 'standard' and 'nesterov')");
  std::vector<Value> out(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    Value x = c.input(2 + i), g = c.input(2 + n + i), v = c.input(2 + 2 * n + i);
    const DataType dt = dtype_of(x);
    Value r = as(c, c.input(0), dt);
    Value beta_adjusted = c.b.create<WhereOp>(positive(c), scalar(c, dt, beta), scalar(c, dt, 1.0)).result();
    Value greg = regularized(c, x, g, norm);
    Value v_new = c.b.create<AddOp>(c.b.create<ScaleOp>(v, alpha, 0.0).result(),
                                    c.b.create<MulOp>(beta_adjusted, greg).result())
                      .result();
    Value direction =
        mode == "standard"
            ? v_new
            : c.b.create<AddOp>(greg, c.b.create<ScaleOp>(v_new, alpha, 0.0).result()).result();
    out[i] = c.b.create<SubOp>(x, c.b.create<MulOp>(r, direction).result()).result();
    out[n + i] = v_new;
  }
  return out;
}

// G_regularized = norm_coefficient · X + G
// V_new = alpha · V + (1 - alpha) · G_regularized
// H_new = beta · H + (1 - beta) · G_regularized²
// H_sqrt = sqrt(H_new) + epsilon
// R_adjusted = T > 0 ? R · sqrt(1 - beta^T) / (1 - alpha^T) : R
// X_new = X - R_adjusted · V_new / H_sqrt
// X_final = (1 - norm_coefficient_post) · X_new
std::vector<Value> adam(NodeContext& c) {
  const std::size_t n = tensors_per_group(c, 4);
  const double alpha = c.float_attr("alpha", 0.9f), beta = c.float_attr("beta", 0.999f),
               eps = c.float_attr("epsilon", 1e-6f), norm = c.float_attr("norm_coefficient", 0.0f),
               norm_post = c.float_attr("norm_coefficient_post", 0.0f);
  std::vector<Value> out(3 * n);
  for (std::size_t i = 0; i < n; ++i) {
    Value x = c.input(2 + i), g = c.input(2 + n + i), v = c.input(2 + 2 * n + i),
          h = c.input(2 + 3 * n + i);
    const DataType dt = dtype_of(x);
    Value r = as(c, c.input(0), dt), t = as(c, c.input(1), dt);
    Value greg = regularized(c, x, g, norm);
    Value v_new = c.b.create<AddOp>(c.b.create<ScaleOp>(v, alpha, 0.0).result(),
                                    c.b.create<ScaleOp>(greg, 1.0 - alpha, 0.0).result())
                      .result();
    Value g2 = c.b.create<MulOp>(greg, greg).result();
    Value h_new = c.b.create<AddOp>(c.b.create<ScaleOp>(h, beta, 0.0).result(),
                                    c.b.create<ScaleOp>(g2, 1.0 - beta, 0.0).result())
                      .result();
    Value h_sqrt = c.b.create<ScaleOp>(c.b.create<SqrtOp>(h_new).result(), 1.0, eps).result();
    // 1 - alpha^T and sqrt(1 - beta^T), scalars.
    Value alpha_t = c.b.create<PowOp>(scalar(c, dt, alpha), t).result();
    Value beta_t = c.b.create<PowOp>(scalar(c, dt, beta), t).result();
    Value correction =
        c.b.create<DivOp>(c.b.create<SqrtOp>(c.b.create<ScaleOp>(beta_t, -1.0, 1.0).result()).result(),
                          c.b.create<ScaleOp>(alpha_t, -1.0, 1.0).result())
            .result();
    Value r_adjusted =
        c.b.create<WhereOp>(positive(c), c.b.create<MulOp>(r, correction).result(), r).result();
    Value step = c.b.create<DivOp>(c.b.create<MulOp>(r_adjusted, v_new).result(), h_sqrt).result();
    Value x_new = c.b.create<SubOp>(x, step).result();
    out[i] = c.b.create<ScaleOp>(x_new, 1.0 - norm_post, 0.0).result();
    out[n + i] = v_new;
    out[2 * n + i] = h_new;
  }
  return out;
}

// d y / d xs by kiln's append_backward: y (one element, as append_backward
// needs) and xs are values of the graph, named by attributes; an x that y
// does not depend on gets zeros. The node's inputs only order it after what
// computes them.
std::vector<Value> gradient(NodeContext& c) {
  const auto* y_attr = c.attribute("y");
  const auto* xs_attr = c.attribute("xs");
  if (!y_attr || !xs_attr)
    throw_error(ErrorKind::InvalidArgument, "ONNX ", c.where(), " needs attributes 'xs' and 'y'");
  auto named = [&](const std::string& name, const char* what) {
    Value v = c.lookup ? c.lookup(name) : Value{};
    if (!v)
      throw_error(ErrorKind::InvalidArgument, "ONNX ", c.where(), ": its ", what, " '", name,
                  "' is made by no earlier node and is no graph input");
    return v;
  };
  Value y = named(y_attr->s(), "y");
  std::vector<Value> xs;
  for (const auto& name : xs_attr->strings()) xs.push_back(named(name, "x"));
  auto here = [&](Value v) { return v.defining_op() && v.defining_op()->parent_block() == c.b.block(); };
  if (!here(y)) c.unsupported("y '" + y_attr->s() + "' is not computed in the Gradient node's graph");
  for (int i = 0; i < xs_attr->strings_size(); ++i)
    if (!here(xs[static_cast<std::size_t>(i)]))
      c.unsupported("x '" + xs_attr->strings(i) + "' is not defined in the Gradient node's graph");
  const auto grads = append_backward(y, xs);
  std::vector<Value> out;
  for (Value x : xs) {
    Value g;
    for (const auto& [p, d] : grads)
      if (p == x) g = d;
    out.push_back(g ? g : c.b.create<ZerosLikeOp>(x).result());
  }
  return out;
}

}  // namespace

const OpTable& training_op_table() {
  static const OpTable table = [] {
    OpTable t;
    add_training_ops(t);
    return t;
  }();
  return table;
}

void add_training_ops(OpTable& t) {
  t["Adagrad"] = {&adagrad, 1, 1};
  t["Adam"] = {&adam, 1, 1};
  t["Momentum"] = {&momentum, 1, 1};
  t["Gradient"] = {&gradient, 1, 1};
}

}  // namespace kiln::onnx::detail

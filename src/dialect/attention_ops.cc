// The ops of kiln/dialect/attention_ops.h: InferMeta, Vjp, gradient op and
// registration.
#include "kiln/dialect/attention_ops.h"

#include <array>
#include <cmath>
#include <span>

namespace kiln {

KILN_REGISTER_OP(ScaledDotProductAttentionOp, GradOf<ScaledDotProductAttentionOp>);

double attention_scale(double scale, std::int64_t head_dim) {
  if (scale != 0) return scale;
  return head_dim > 0 ? 1.0 / std::sqrt(static_cast<double>(head_dim)) : 1.0;
}

AttentionDims attention_dims(std::string_view op, const Dims& q, const Dims& k, const Dims& v) {
  if (q.rank() != 4 || k.rank() != 4 || v.rank() != 4 || q[0] != k[0] || q[0] != v[0] ||
      q[1] != k[1] || q[1] != v[1] || q[3] != k[3] || k[2] != v[2])
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' q [", q.to_string(), "], k [",
                k.to_string(), "], v [", v.to_string(),
                "] do not fit q [B, H, Lq, D], k [B, H, Lk, D], v [B, H, Lk, Dv]");
  return {.bh = q[0] * q[1], .lq = q[2], .lk = k[2], .d = q[3], .dv = v[3]};
}

void check_attention_grad_operands(std::string_view op, const Dims& q, const AttentionDims& a,
                                   const Dims& out, const Dims& lse, const Dims& dout) {
  const std::int64_t shape[] = {q[0], q[1], a.lq, a.dv};
  const Dims od(std::span<const std::int64_t>(shape, 4));
  const Dims ld(std::span<const std::int64_t>(shape, 3));
  if (out != od || dout != od || lse != ld)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' out [", out.to_string(), "], lse [",
                lse.to_string(), "], dout [", dout.to_string(), "] must be [", od.to_string(),
                "], [", ld.to_string(), "], [", od.to_string(), "]");
}

namespace {

// Whether two static dims may be equal at run time (-1 matches anything).
bool dim_fits(std::int64_t a, std::int64_t b) { return a == b || a < 0 || b < 0; }
// The known one of two dims that must agree (-1 when neither is known).
std::int64_t known(std::int64_t a, std::int64_t b) { return a >= 0 ? a : b; }

const char* const kOperandNames[] = {"q", "k", "v"};

[[noreturn]] void qkv_error(std::string_view op, const std::vector<Type>& in, const char* what) {
  throw_error(ErrorKind::InvalidArgument, "op '", op, "' ", what, ": q is ",
              meta::dims_string(shaped_dims(in[0])), ", k is ",
              meta::dims_string(shaped_dims(in[1])), ", v is ",
              meta::dims_string(shaped_dims(in[2])),
              " (expected q [B, H, Lq, D], k [B, H, Lk, D], v [B, H, Lk, Dv])");
}

// Checks q, k, v (operands 0..2 of `in`) and returns {B, H, Lq, Lk, D, Dv}.
std::array<std::int64_t, 6> check_qkv(std::string_view op, const std::vector<Type>& in) {
  DataType dt{};
  for (std::size_t i = 0; i < 3; ++i) {
    Type t = meta::tensor_operand(op, in, i);
    meta::require_floating(op, shaped_data_type(t), i);
    if (i == 0) dt = shaped_data_type(t);
    else meta::require_same_dtype(op, dt, shaped_data_type(t), 0, i);
    if (shaped_dims(t).size() != 4)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' ", kOperandNames[i],
                  " (operand #", i, ") must have rank 4 ([B, H, L, D]), got ",
                  meta::dims_string(shaped_dims(t)));
  }
  const auto& q = shaped_dims(in[0]);
  const auto& k = shaped_dims(in[1]);
  const auto& v = shaped_dims(in[2]);
  if (!dim_fits(q[0], k[0]) || !dim_fits(q[0], v[0]) || !dim_fits(k[0], v[0]) ||
      !dim_fits(q[1], k[1]) || !dim_fits(q[1], v[1]) || !dim_fits(k[1], v[1]))
    qkv_error(op, in, "needs q, k and v with one batch and head count (dims 0 and 1)");
  if (!dim_fits(q[3], k[3])) qkv_error(op, in, "needs q and k with one head dim (dim 3)");
  if (!dim_fits(k[2], v[2]))
    qkv_error(op, in, "needs k and v with one sequence length (dim 2)");
  return {known(known(q[0], k[0]), v[0]), known(known(q[1], k[1]), v[1]), q[2],
          known(k[2], v[2]), known(q[3], k[3]), v[3]};
}

}  // namespace

void ScaledDotProductAttentionOp::build(Builder&, OperationArgument& arg, Value q, Value k, Value v,
                                        bool causal, double scale) {
  arg.add_operand(q);
  arg.add_operand(k);
  arg.add_operand(v);
  arg.attributes = to_named_attributes(Attributes{causal, scale});
}

std::vector<Type> ScaledDotProductAttentionOp::infer_meta(const std::vector<Type>& in,
                                                          DictionaryAttribute attrs) {
  const auto a = from_attributes<Attributes>(attrs, name);
  meta::require_count(name, in, 3);
  const auto d = check_qkv(name, in);
  if (!std::isfinite(a.scale))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' scale must be finite, got ", a.scale);
  const DataType dt = shaped_data_type(in[0]);
  return {meta::result_like(in, dt, {d[0], d[1], d[2], d[5]}),
          meta::result_like(in, dt, {d[0], d[1], d[2]})};
}

void ScaledDotProductAttentionOp::Grad::check(std::string_view op, const std::vector<Type>& in,
                                              DictionaryAttribute attrs) {
  (void)from_attributes<Attributes>(attrs, op);
  const auto d = check_qkv(op, in);
  const DataType dt = shaped_data_type(in[0]);
  const std::vector<std::int64_t> out{d[0], d[1], d[2], d[5]}, lse{d[0], d[1], d[2]};
  const char* names[] = {"out", "lse", "dout"};
  const std::vector<std::int64_t>* want[] = {&out, &lse, &out};
  for (std::size_t i = 3; i < 6; ++i) {
    meta::require_same_dtype(op, dt, shaped_data_type(in[i]), 0, i);
    if (!meta::compatible_dims(shaped_dims(in[i]), *want[i - 3]))
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' ", names[i - 3], " (operand #", i,
                  ") is ", meta::dims_string(shaped_dims(in[i])), ", expected ",
                  meta::dims_string(*want[i - 3]));
  }
}

// Results (out, lse): out's grad flows to q, k and v through the gradient
// op; lse is a saved statistic without a gradient of its own.
std::vector<Value> ScaledDotProductAttentionOp::vjp(Builder& b, Operation* op,
                                                    const std::vector<Value>& g) {
  vjp::check_out_grads(op, g);
  if (g[1])
    throw_error(ErrorKind::Unimplemented, "op '", name,
                "' has no gradient through its lse result (the saved log-sum-exp)");
  if (!g[0] || !vjp::differentiable(op->operand_source(0))) return {Value(), Value(), Value()};
  auto grad = b.create<GradOf<ScaledDotProductAttentionOp>>(
      op, op->operand_source(0), op->operand_source(1), op->operand_source(2), op->result(0),
      op->result(1), g[0]);
  Operation* gop = grad.operation();
  return {gop->result(0), gop->result(1), gop->result(2)};
}

}  // namespace kiln

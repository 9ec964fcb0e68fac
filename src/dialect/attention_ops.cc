// The ops of kiln/dialect/attention_ops.h: InferMeta, Vjp, gradient op and
// registration.
#include "kiln/dialect/attention_ops.h"

#include <array>
#include <cmath>
#include <span>

#include "kiln/dialect/infer_meta_util.h"

namespace kiln {

KILN_REGISTER_OP(ScaledDotProductAttentionOp, GradOf<ScaledDotProductAttentionOp>, AttentionMaskGradOp);

double attention_scale(double scale, std::int64_t head_dim) {
  if (scale != 0) return scale;
  return head_dim > 0 ? 1.0 / std::sqrt(static_cast<double>(head_dim)) : 1.0;
}

bool attention_heads_inner(std::string_view op, std::string_view layout) {
  if (layout == "BLHD") return true;
  if (layout != "BHLD")
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' layout must be \"BHLD\" or \"BLHD\", got \"",
                layout, "\"");
  return false;
}

namespace {
// Whether k / v's hk heads serve q's h (both known): hk is h, or divides it.
bool heads_divide(std::int64_t h, std::int64_t hk) { return h == hk || (h > 0 && hk > 0 && h % hk == 0); }
}  // namespace

Dims AttentionDims::out_dims() const {
  const std::int64_t hd[] = {b, h, lq, dv}, ld[] = {b, lq, h, dv};
  return Dims(std::span<const std::int64_t>(heads_inner ? ld : hd, 4));
}

AttentionDims attention_dims(std::string_view op, const Dims& q, const Dims& k, const Dims& v,
                             bool heads_inner) {
  const int l = heads_inner ? 1 : 2, hx = heads_inner ? 2 : 1;  // the length and head axes
  if (q.rank() != 4 || k.rank() != 4 || v.rank() != 4 || q[0] != k[0] || q[0] != v[0] ||
      !heads_divide(q[hx], k[hx]) || k[hx] != v[hx] || q[3] != k[3] || k[l] != v[l])
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' q [", q.to_string(), "], k [",
                k.to_string(), "], v [", v.to_string(), "] do not fit ",
                heads_inner ? "layout BLHD: q [B, Lq, H, D], k [B, Lk, Hk, D], v [B, Lk, Hk, Dv]"
                            : "q [B, H, Lq, D], k [B, Hk, Lk, D], v [B, Hk, Lk, Dv]",
                " (Hk divides H)");
  return {.b = q[0], .h = q[hx], .bh = q[0] * q[hx], .lq = q[l], .lk = k[l], .d = q[3], .dv = v[3],
          .hk = k[hx], .heads_inner = heads_inner};
}

std::int64_t checked_key_length(std::string_view op, std::int64_t b, std::int64_t n, std::int64_t lk) {
  if (n < 0 || n > lk)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' key_lengths[", b, "] is ", n,
                ", expected a key count in [0, ", lk, "] (Lk)");
  return n;
}

void check_key_lengths_tensor(std::string_view op, DataType dt, const Dims& dims, std::int64_t batch) {
  if (dims.rank() != 1 || dims[0] != batch || (dt != DataType::Int32 && dt != DataType::Int64))
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' key_lengths is ", to_string(dt), " [",
                dims.to_string(), "], expected int32 or int64 [", batch, "] (one key count per batch)");
}

AttentionOptionals attention_optionals(std::string_view op, const std::vector<DataType>& dtypes,
                                       std::size_t fixed) {
  AttentionOptionals o;
  std::size_t i = fixed;
  if (i < dtypes.size() && (dtypes[i] == DataType::Int32 || dtypes[i] == DataType::Int64))
    o.key_lengths = static_cast<int>(i++);
  if (i < dtypes.size() && (dtypes[i] == DataType::Bool || is_floating(dtypes[i])))
    o.mask = static_cast<int>(i++);
  if (i < dtypes.size() && dtypes[i] == DataType::UInt64) o.dropout_key = static_cast<int>(i++);
  if (dtypes.size() < fixed || i != dtypes.size())
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' takes ",
                fixed == 3 ? "q, k, v" : "q, k, v, out, lse, dout",
                ", then optionally key_lengths (int32 or int64), a mask (bool or floating) and a dropout key "
                "(u64), in that order; got ",
                dtypes.size(), " operands",
                dtypes.size() > i ? std::string(", operand #") + std::to_string(i) + " being " + std::string(to_string(dtypes[i]))
                                  : std::string());
  return o;
}

double attention_dropout_p(std::string_view op, double dropout_p, bool is_test, bool has_key) {
  if (!(dropout_p >= 0 && dropout_p < 1))
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' dropout_p must lie in [0, 1), got ", dropout_p);
  if (is_test || dropout_p == 0) return 0;
  if (!has_key)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' has dropout_p ", dropout_p,
                " but no dropout_key operand (u64 [1], e.g. from kiln.random_key) to draw which "
                "probabilities drop");
  return dropout_p;
}

void check_dropout_key_tensor(std::string_view op, DataType dt, const Dims& dims) {
  if (dt != DataType::UInt64 || dims.rank() != 1 || dims[0] != 1)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' dropout_key is ", to_string(dt), " [",
                dims.to_string(), "], expected u64 [1]");
}

AttentionMaskStrides attention_mask_strides(std::string_view op, DataType mask_dt, const Dims& mask,
                                            DataType dt, const AttentionDims& a) {
  const std::int64_t full[] = {a.b, a.h, a.lq, a.lk};
  const int r = static_cast<int>(mask.rank());
  bool fits = (mask_dt == DataType::Bool || mask_dt == dt) && r >= 2 && r <= 4;
  std::int64_t s[4] = {}, step = 1;
  for (int k = 3; fits && k >= 4 - r; --k) {
    const std::int64_t n = mask[static_cast<std::size_t>(k - (4 - r))];
    fits = n == 1 || n == full[k];
    s[k] = n == 1 ? 0 : step;
    step *= n;
  }
  if (!fits)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' mask is ", to_string(mask_dt), " [",
                mask.to_string(), "], expected bool or ", to_string(dt), " broadcasting to [B, H, Lq, Lk] = [",
                a.b, ", ", a.h, ", ", a.lq, ", ", a.lk, "] (rank 2 to 4, each dim 1 or equal)");
  return {.sb = s[0], .sh = s[1], .si = s[2], .sj = s[3]};
}

void check_attention_grad_operands(std::string_view op, const AttentionDims& a, const Dims& out,
                                   const Dims& lse, const Dims& dout) {
  const Dims od = a.out_dims();
  const std::int64_t shape[] = {a.b, a.h, a.lq};
  const Dims ld(std::span<const std::int64_t>(shape, 3));
  if (out != od || dout != od || lse != ld)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' out [", out.to_string(), "], lse [",
                lse.to_string(), "], dout [", dout.to_string(), "] must be [", od.to_string(),
                "], [", ld.to_string(), "], [", od.to_string(), "]");
}

namespace {


const char* const kOperandNames[] = {"q", "k", "v"};

[[noreturn]] void qkv_error(std::string_view op, const std::vector<Type>& in, bool heads_inner,
                            const char* what) {
  throw_error(ErrorKind::InvalidArgument, "op '", op, "' ", what, ": q is ",
              meta::dims_string(shaped_dims(in[0])), ", k is ",
              meta::dims_string(shaped_dims(in[1])), ", v is ",
              meta::dims_string(shaped_dims(in[2])),
              heads_inner ? " (expected layout BLHD: q [B, Lq, H, D], k [B, Lk, Hk, D], v [B, Lk, Hk, Dv])"
                          : " (expected q [B, H, Lq, D], k [B, Hk, Lk, D], v [B, Hk, Lk, Dv])");
}

// Checks q, k, v (operands 0..2 of `in`) in their layout and returns
// {B, H, Lq, Lk, D, Dv}.
std::array<std::int64_t, 6> check_qkv(std::string_view op, const std::vector<Type>& in,
                                      bool heads_inner) {
  DataType dt{};
  for (std::size_t i = 0; i < 3; ++i) {
    Type t = meta::tensor_operand(op, in, i);
    meta::require_floating(op, shaped_data_type(t), i);
    if (i == 0) dt = shaped_data_type(t);
    else meta::require_same_dtype(op, dt, shaped_data_type(t), 0, i);
    if (shaped_dims(t).size() != 4)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' ", kOperandNames[i],
                  " (operand #", i, ") must have rank 4 (", heads_inner ? "[B, L, H, D]" : "[B, H, L, D]",
                  "), got ", meta::dims_string(shaped_dims(t)));
  }
  const auto& q = shaped_dims(in[0]);
  const auto& k = shaped_dims(in[1]);
  const auto& v = shaped_dims(in[2]);
  const std::size_t l = heads_inner ? 1 : 2, h = heads_inner ? 2 : 1;
  if (!meta::dim_fits(q[0], k[0]) || !meta::dim_fits(q[0], v[0]) || !meta::dim_fits(k[0], v[0]))
    qkv_error(op, in, heads_inner, "needs q, k and v with one batch (dim 0)");
  const std::int64_t hk = meta::known_dim(k[h], v[h]);
  if (!meta::dim_fits(k[h], v[h]) || (q[h] >= 0 && hk >= 0 && !heads_divide(q[h], hk)))
    qkv_error(op, in, heads_inner,
              heads_inner ? "needs k and v with one head count (dim 2) that divides q's (grouped-query attention)"
                          : "needs k and v with one head count (dim 1) that divides q's (grouped-query attention)");
  if (!meta::dim_fits(q[3], k[3])) qkv_error(op, in, heads_inner, "needs q and k with one head dim (dim 3)");
  if (!meta::dim_fits(k[l], v[l]))
    qkv_error(op, in, heads_inner,
              heads_inner ? "needs k and v with one sequence length (dim 1)"
                          : "needs k and v with one sequence length (dim 2)");
  return {meta::known_dim(meta::known_dim(q[0], k[0]), v[0]), q[h], q[l],
          meta::known_dim(k[l], v[l]), meta::known_dim(q[3], k[3]), v[3]};
}

// key_lengths (operand i of `in`, when there): int32 or int64 [B].
void check_key_lengths(std::string_view op, const std::vector<Type>& in, std::size_t i,
                       std::int64_t batch) {
  if (in.size() <= i) return;
  Type t = meta::tensor_operand(op, in, i);
  const auto& dims = shaped_dims(t);
  if (!meta::is_index_dtype(shaped_data_type(t)) || dims.size() != 1 || !meta::dim_fits(dims[0], batch))
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' key_lengths (operand #", i, ") is ",
                to_string(shaped_data_type(t)), " ", meta::dims_string(dims),
                ", expected int32 or int64 [", batch, "] (one key count per batch; a mask is bool or float)");
}

std::vector<DataType> dtypes_of(const std::vector<Type>& in) {
  std::vector<DataType> dt;
  for (Type t : in) dt.push_back(t && is_shaped(t) ? shaped_data_type(t) : DataType::Undefined);
  return dt;
}

// mask (operand i of `in`, when i >= 0): bool or the operands' dtype `dt`,
// rank 2 to 4, its dims right-aligned with d's [B, H, Lq, Lk], each 1 or equal.
void check_mask(std::string_view op, const std::vector<Type>& in, int i,
                const std::array<std::int64_t, 6>& d, DataType dt) {
  if (i < 0) return;
  Type t = meta::tensor_operand(op, in, static_cast<std::size_t>(i));
  const auto& dims = shaped_dims(t);
  const std::int64_t full[] = {d[0], d[1], d[2], d[3]};
  const DataType mdt = shaped_data_type(t);
  bool fits = (mdt == DataType::Bool || mdt == dt) && dims.size() >= 2 && dims.size() <= 4;
  for (std::size_t m = 0; fits && m < dims.size(); ++m)
    fits = dims[m] == 1 || meta::dim_fits(dims[m], full[4 - dims.size() + m]);
  if (!fits)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' mask (operand #", i, ") is ", to_string(mdt), " ",
                meta::dims_string(dims), ", expected bool or ", to_string(dt), " broadcasting to [B, H, Lq, Lk] = ",
                meta::dims_string({d[0], d[1], d[2], d[3]}),
                " (rank 2 to 4, each dim 1 or equal; key_lengths are int32 or int64 [B])");
}

// The dropout attributes and dropout_key (operand i of `in`, when i >= 0):
// u64 [1], there when dropout_p > 0 and not is_test.
void check_dropout(std::string_view op, const std::vector<Type>& in, int i, double dropout_p, bool is_test) {
  attention_dropout_p(op, dropout_p, is_test, i >= 0);
  if (i < 0) return;
  const auto& dims = shaped_dims(meta::tensor_operand(op, in, static_cast<std::size_t>(i)));
  if (dims.size() != 1 || !meta::dim_fits(dims[0], 1))
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' dropout_key (operand #", i, ") is u64 ",
                meta::dims_string(dims), ", expected u64 [1]");
}

// out's dims in the layout: [B, H, Lq, Dv] or [B, Lq, H, Dv].
std::vector<std::int64_t> out_dims(const std::array<std::int64_t, 6>& d, bool heads_inner) {
  if (heads_inner) return {d[0], d[2], d[1], d[5]};
  return {d[0], d[1], d[2], d[5]};
}

}  // namespace

std::vector<NamedAttribute> ScaledDotProductAttentionOp::attribute_defaults() {
  return {{"layout", StrAttribute::get("BHLD")},
          {"dropout_p", Float64Attribute::get(0.0)},
          {"is_test", BoolAttribute::get(false)}};
}

void ScaledDotProductAttentionOp::build(Builder& b, OperationArgument& arg, Value q, Value k, Value v,
                                        bool causal, double scale, std::string layout,
                                        Value key_lengths, Value mask, double dropout_p, Value dropout_key) {
  std::vector<Value> operands{q, k, v};
  for (Value x : {key_lengths, mask, dropout_key})
    if (x) operands.push_back(x);
  build(b, arg, operands, causal, scale, std::move(layout), dropout_p);
}

void ScaledDotProductAttentionOp::build(Builder& b, OperationArgument& arg, const std::vector<Value>& operands,
                                        bool causal, double scale, std::string layout, double dropout_p,
                                        bool is_test) {
  build(b, arg, operands, Attributes{causal, scale, std::move(layout), dropout_p, is_test});
}

void ScaledDotProductAttentionOp::build(Builder&, OperationArgument& arg, const std::vector<Value>& operands,
                                        const Attributes& attrs) {
  for (Value v : operands) arg.add_operand(v);
  arg.attributes = to_named_attributes(attrs);
}

std::vector<Type> ScaledDotProductAttentionOp::infer_meta(const std::vector<Type>& in,
                                                          DictionaryAttribute attrs) {
  const auto a = from_attributes<Attributes>(attrs, name);
  const bool heads_inner = attention_heads_inner(name, a.layout);
  const AttentionOptionals opt = attention_optionals(name, dtypes_of(in), 3);
  const auto d = check_qkv(name, in, heads_inner);
  if (opt.key_lengths >= 0) check_key_lengths(name, in, 3, d[0]);
  check_mask(name, in, opt.mask, d, shaped_data_type(in[0]));
  check_dropout(name, in, opt.dropout_key, a.dropout_p, a.is_test);
  if (!std::isfinite(a.scale))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' scale must be finite, got ", a.scale);
  const DataType dt = shaped_data_type(in[0]);
  return {meta::result_like(in, dt, out_dims(d, heads_inner)),
          meta::result_like(in, attention_lse_dtype(dt), {d[0], d[1], d[2]})};
}

void ScaledDotProductAttentionOp::Grad::check(std::string_view op, const std::vector<Type>& in,
                                              DictionaryAttribute attrs) {
  const auto a = from_attributes<Attributes>(attrs, op);
  const bool heads_inner = attention_heads_inner(op, a.layout);
  const AttentionOptionals opt = attention_optionals(op, dtypes_of(in), 6);
  const auto d = check_qkv(op, in, heads_inner);
  if (opt.key_lengths >= 0) check_key_lengths(op, in, 6, d[0]);
  const DataType dt = shaped_data_type(in[0]);
  check_mask(op, in, opt.mask, d, dt);
  check_dropout(op, in, opt.dropout_key, a.dropout_p, a.is_test);
  const std::vector<std::int64_t> out = out_dims(d, heads_inner), lse{d[0], d[1], d[2]};
  const char* names[] = {"out", "lse", "dout"};
  const std::vector<std::int64_t>* want[] = {&out, &lse, &out};
  for (std::size_t i = 3; i < 6; ++i) {
    if (i == 4 && shaped_data_type(in[i]) != attention_lse_dtype(dt))
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' lse (operand #4) is ",
                  to_string(shaped_data_type(in[i])), ", expected ", to_string(attention_lse_dtype(dt)));
    if (i != 4) meta::require_same_dtype(op, dt, shaped_data_type(in[i]), 0, i);
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
  std::vector<Value> grads(op->num_operands());  // key_lengths: integers, no gradient
  if (!g[0] || !vjp::differentiable(op->operand_source(0))) return grads;
  std::vector<Value> in{op->operand_source(0), op->operand_source(1), op->operand_source(2),
                        op->result(0), op->result(1), g[0]};
  for (std::uint32_t i = 3; i < op->num_operands(); ++i) in.push_back(op->operand_source(i));
  Operation* gop = b.create<GradOf<ScaledDotProductAttentionOp>>(op, in).operation();
  for (std::uint32_t i = 0; i < 3; ++i) grads[i] = gop->result(i);
  std::vector<DataType> dt;
  for (std::uint32_t i = 0; i < op->num_operands(); ++i) dt.push_back(shaped_data_type(op->operand_source(i).type()));
  const int m = attention_optionals(name, dt, 3).mask;
  if (m >= 0 && vjp::differentiable(op->operand_source(static_cast<std::uint32_t>(m))))  // a float mask
    grads[static_cast<std::size_t>(m)] = b.create<AttentionMaskGradOp>(op, in).result();
  return grads;
}

void AttentionMaskGradOp::build(Builder&, OperationArgument& arg, Operation* fwd,
                                const std::vector<Value>& operands) {
  for (Value v : operands) arg.add_operand(v);
  for (const auto& [k, v] : fwd->attributes()) arg.add_attribute(k, v);
}

void AttentionMaskGradOp::build(Builder& b, OperationArgument& arg, const std::vector<Value>& operands,
                                bool causal, double scale, std::string layout) {
  build(b, arg, operands, Attributes{causal, scale, std::move(layout), 0.0, false});
}

void AttentionMaskGradOp::build(Builder&, OperationArgument& arg, const std::vector<Value>& operands,
                                const Attributes& attrs) {
  for (Value v : operands) arg.add_operand(v);
  arg.attributes = to_named_attributes(attrs);
}

std::vector<Type> AttentionMaskGradOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  ScaledDotProductAttentionOp::Grad::check(name, in, attrs);
  const AttentionOptionals opt = attention_optionals(name, dtypes_of(in), 6);
  if (opt.mask < 0 || !is_floating(shaped_data_type(in[static_cast<std::size_t>(opt.mask)])))
    throw_error(ErrorKind::InvalidArgument, "op '", name,
                "' needs a float mask as its last operand (a bool mask has no gradient)");
  return {in[static_cast<std::size_t>(opt.mask)]};
}

}  // namespace kiln

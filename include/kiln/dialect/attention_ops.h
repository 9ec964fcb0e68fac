// Scaled dot-product attention (fused; optional causal, key-length and arbitrary masks).
#pragma once

#include "kiln/dialect/grad_op.h"
#include "kiln/support/dims.h"

namespace kiln {

// (out, lse) = kiln.scaled_dot_product_attention(q, k, v[, key_lengths][, mask]
//   [, dropout_key]) {causal, scale, layout, dropout_p, is_test}
//   layout "BHLD": q [B, H, Lq, D], k [B, Hk, Lk, D], v [B, Hk, Lk, Dv], out
//   [B, H, Lq, Dv]; layout "BLHD" (FlashAttention's, what a linear layer's
//   [B, L, H·D] result is once reshaped): q [B, Lq, H, D], k [B, Lk, Hk, D],
//   v [B, Lk, Hk, Dv], out [B, Lq, H, Dv]. f32, f64, bf16 or f16, one dtype.
//   Both layouts compute the same numbers: only the rows' addresses differ.
//   Hk is H, or divides it: grouped-query attention (PyTorch's enable_gqa,
//   Llama's n_kv_heads; Hk 1 is multi-query), where query head h reads
//   k / v head h / (H / Hk) and a k / v head's gradient sums its group's.
//   out[b, h, i] = Σ_j softmax_j(s[i, j]) · v[b, g(h), j] with
//   s[i, j] = scale · q[b, h, i] · k[b, g(h), j] (g(h) = h / (H / Hk);
//   scale 0 means 1 / sqrt(D)) and,
//   when causal, s[i, j] = -inf for j > i (PyTorch's is_causal: the mask is
//   aligned at the top-left, so row i sees keys 0..i also when Lq != Lk);
//   with key_lengths (an optional 4th operand, int32 or int64 [B]: a padded
//   batch's key counts, PyTorch's key_padding_mask for right padding), row i
//   of batch b also sees only keys j < key_lengths[b]; a row that sees no key
//   is an empty sum: out 0, lse -inf, no gradient. A length outside [0, Lk]
//   is a kiln::Error on the CPU; CUDA's kernels clamp it (checking it would
//   cost a copy to the host and a wait each call). No kernel lets a padded
//   key or value reach a result (a NaN there stays there), but CUDA's
//   cuBLAS path (f64, f32 head dims above 128) and the mask's gradient,
//   which multiply padded rows by zero probabilities (0 · NaN is NaN, as
//   under PyTorch's masks).
//   mask (optional, after key_lengths when both are there; the attn_mask of
//   PyTorch's F.scaled_dot_product_attention) is bool, where true means the
//   key takes part (nn.MultiheadAttention's bool mask means the opposite),
//   or the operands' float dtype, added to s; its dims broadcast to
//   [B, H, Lq, Lk] in either layout (rank 2 to 4, right-aligned, each 1 or
//   equal: a rank-3 mask is [H, Lq, Lk], not nn.MultiheadAttention's
//   [B·H, Lq, Lk]). It
//   combines with causal and key_lengths; a row it leaves without keys (all
//   false or -inf) is an empty sum as above. Keys it masks are read, so a
//   NaN there reaches the row as under PyTorch. A float mask has a gradient,
//   dS summed over the dims it broadcasts over (a learned bias: ALiBi's
//   slopes, T5's or Swin's relative positions), from AttentionMaskGradOp.
//   dropout_p (PyTorch's SDPA dropout_p, Paddle's attn_dropout_rate; in
//   [0, 1)) drops each probability with that chance and scales the kept ones
//   by the inverse keep rate (1 / (1 - dropout_p)) before they weigh v, unless is_test (the for-test
//   clone sets it). Which ones drop is a pure function of dropout_key (u64
//   [1], the last operand, needed when dropout_p > 0 and not is_test;
//   kiln.random_key draws one per run) and the score's place
//   (kiln/kernel/attention_dropout.h), so the gradient ops, handed the same
//   key, drop the same ones, and a recomputed forward repeats them. lse is
//   the softmax's before dropout.
//   lse [B, H, Lq] (either layout; the operands' dtype, f32 for bf16 / f16) is the
//   per-row log Σ_j exp(s[i, j]) that the gradient uses to recompute the
//   probabilities (FlashAttention's saved statistic); it carries no gradient
//   of its own (a grad flowing into lse is a kiln::Error from the Vjp).
//   The kernel never holds a whole [Lq, Lk] matrix per head: it works on
//   tiles of query rows against the keys they see.
struct ScaledDotProductAttentionOp
    : Op<ScaledDotProductAttentionOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.scaled_dot_product_attention";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = -1, num_results = 2;  // q, k, v[, key_lengths][, mask][, dropout_key]
  KILN_ATTRIBUTES((bool, causal), (double, scale), (std::string, layout), (double, dropout_p), (bool, is_test));
  // A program saved before `layout` existed loads as BHLD; one saved
  // before dropout_p and is_test, without dropout.
  static std::vector<NamedAttribute> attribute_defaults();
  static void build(Builder& b, OperationArgument& arg, Value q, Value k, Value v,
                    bool causal = false, double scale = 0, std::string layout = "BHLD",
                    Value key_lengths = Value(), Value mask = Value(), double dropout_p = 0,
                    Value dropout_key = Value());
  // operands: q, k, v[, key_lengths][, mask][, dropout_key] (as a pass or
  // an importer has them).
  static void build(Builder& b, OperationArgument& arg, const std::vector<Value>& operands,
                    bool causal = false, double scale = 0, std::string layout = "BHLD",
                    double dropout_p = 0, bool is_test = false);
  static void build(Builder& b, OperationArgument& arg, const std::vector<Value>& operands,
                    const Attributes& attrs);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  // scaled_dot_product_attention_grad(q, k, v, out, lse, dout[, key_lengths][, mask]
  //   [, dropout_key]) {the forward's} -> (dq, dk, dv), typed like q, k, v
  //   (out and dout in the layout of the attributes, as the forward's out).
  //   P is recomputed per tile from q, k and lse; with Δ_i = Σ dout[i] ∘
  //   out[i] and Z the dropout's keep mask times the inverse keep rate (all 1
  //   without dropout): dv = (P ∘ Z)ᵀ·dout, dS = P ∘ (Z ∘ dout·vᵀ − Δ),
  //   dq = scale · dS·k, dk = scale · dSᵀ·q.
  struct Grad : GradSpec<-1, 0, 1, 2> {  // 6 operands, up to 9 with key_lengths, mask and dropout_key
    static void check(std::string_view op, const std::vector<Type>& in, DictionaryAttribute attrs);
  };
};

// dmask = kiln.scaled_dot_product_attention_mask_grad(q, k, v, out, lse,
//   dout[, key_lengths], mask[, dropout_key]) {the forward's}: the gradient of a
//   float mask, typed like it: dS = P ∘ (dout·vᵀ − Δ) (the gradient op's
//   dS, before the scale) summed over the dims the mask broadcasts over.
//   The attention's Vjp adds it for every float mask and dead-code removal
//   drops it where nothing reads the mask's gradient; its kernels recompute
//   P per tile as the gradient op's do.
struct AttentionMaskGradOp : Op<AttentionMaskGradOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.scaled_dot_product_attention_mask_grad";
  static constexpr int num_operands = -1, num_results = 1;
  using Attributes = ScaledDotProductAttentionOp::Attributes;
  static std::vector<NamedAttribute> attribute_defaults() {
    return ScaledDotProductAttentionOp::attribute_defaults();
  }
  // The forward op's attributes, and the gradient op's operands.
  static void build(Builder& b, OperationArgument& arg, Operation* fwd, const std::vector<Value>& operands);
  static void build(Builder& b, OperationArgument& arg, const std::vector<Value>& operands, bool causal = false,
                    double scale = 0, std::string layout = "BHLD");
  static void build(Builder& b, OperationArgument& arg, const std::vector<Value>& operands, const Attributes& attrs);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// Where an attention op's optional operands are among its operands'
// dtypes, past its `fixed` ones (3 for the op, 6 for its gradients):
// key_lengths (int32 or int64) first, then mask (bool or floating), then
// dropout_key (u64); -1 for one that is absent. kiln::Error naming `op`
// for any other dtype, order or count.
struct AttentionOptionals {
  int key_lengths = -1, mask = -1, dropout_key = -1;
};
AttentionOptionals attention_optionals(std::string_view op, const std::vector<DataType>& dtypes,
                                       std::size_t fixed);

// The dropout probability an attention op applies: its dropout_p, or 0
// under is_test; kiln::Error naming `op` unless dropout_p is in [0, 1), or
// when it is above 0 (not is_test) and the op has no dropout_key
// (has_key).
double attention_dropout_p(std::string_view op, double dropout_p, bool is_test, bool has_key);
// A kernel's check of its dropout_key tensor: kiln::Error naming `op`
// unless it is u64 [1].
void check_dropout_key_tensor(std::string_view op, DataType dt, const Dims& dims);

// The scale an attention op applies: `scale`, or 1 / sqrt(head_dim) when it is 0.
double attention_scale(double scale, std::int64_t head_dim);

// lse's dtype for operands of `dt`: f32 for bf16 / f16 (a rounded lse
// would scale each row's recomputed probabilities by its rounding error),
// else dt.
inline DataType attention_lse_dtype(DataType dt) {
  return dt == DataType::BFloat16 || dt == DataType::Float16 ? DataType::Float32 : dt;
}

// Whether `layout` is "BLHD" (true) or "BHLD" (false); kiln::Error naming
// `op` for anything else.
bool attention_heads_inner(std::string_view op, std::string_view layout);

// The dims of one attention call at run time (InferMeta may have seen -1
// dims), every kernel's check: kiln::Error naming `op` and the three shapes
// unless they fit the layout (q [B, H, Lq, D], k [B, Hk, Lk, D],
// v [B, Hk, Lk, Dv], or [B, L, H, ·] each when heads_inner, Hk dividing H).
struct AttentionDims {
  std::int64_t b = 0, h = 0, bh = 0, lq = 0, lk = 0, d = 0, dv = 0;
  std::int64_t hk = 0;  // k and v's heads: H, or H / group under grouped-query attention
  bool heads_inner = false;  // layout "BLHD"

  // Where head `i` (= batch · H + head) of a q-like tensor of `len` rows
  // of `width` elements per head begins, and the step from one row to the next.
  std::int64_t head_offset(std::int64_t i, std::int64_t len, std::int64_t width) const {
    return heads_inner ? ((i / h) * len * h + i % h) * width : i * len * width;
  }
  std::int64_t row_step(std::int64_t width) const { return heads_inner ? h * width : width; }
  // Query heads per k / v head (1 unless grouped-query attention).
  std::int64_t group() const { return hk > 0 ? h / hk : 1; }
  // The k / v head (batch · Hk + head) query head i reads (H = group · Hk).
  std::int64_t kv_head(std::int64_t i) const { return i / group(); }
  // head_offset and row_step of k, v and their gradients, for query head i.
  std::int64_t kv_offset(std::int64_t i, std::int64_t len, std::int64_t width) const {
    const std::int64_t j = kv_head(i);
    return heads_inner ? ((j / hk) * len * hk + j % hk) * width : j * len * width;
  }
  std::int64_t kv_row_step(std::int64_t width) const { return heads_inner ? hk * width : width; }
  // An out-like tensor's dims: [B, H, Lq, Dv] or [B, Lq, H, Dv].
  Dims out_dims() const;
};
AttentionDims attention_dims(std::string_view op, const Dims& q, const Dims& k, const Dims& v,
                             bool heads_inner = false);
// The key count batch b's rows see from its key_lengths entry `n` (any
// integer dtype's value): n itself; kiln::Error naming `op` and the batch
// unless 0 <= n <= lk.
std::int64_t checked_key_length(std::string_view op, std::int64_t b, std::int64_t n, std::int64_t lk);
// A kernel's check of its key_lengths tensor: kiln::Error naming `op`
// unless it is int32 or int64 [batch].
void check_key_lengths_tensor(std::string_view op, DataType dt, const Dims& dims, std::int64_t batch);
// Where element (b, h, i, j) of a mask broadcast over [B, H, Lq, Lk] is:
// b·sb + h·sh + i·si + j·sj elements in (0 along a dim it broadcasts over).
struct AttentionMaskStrides {
  std::int64_t sb = 0, sh = 0, si = 0, sj = 0;
  std::int64_t head(std::int64_t b, std::int64_t h) const { return b * sb + h * sh; }
};
// A kernel's check of its mask: kiln::Error naming `op` unless its dtype is
// bool or `dt` and its dims broadcast to a's [B, H, Lq, Lk] (rank 2 to 4,
// right-aligned, each 1 or equal).
AttentionMaskStrides attention_mask_strides(std::string_view op, DataType mask_dt, const Dims& mask,
                                            DataType dt, const AttentionDims& a);

// The gradient's out, lse and dout checked against q and v's dims.
void check_attention_grad_operands(std::string_view op, const AttentionDims& a, const Dims& out,
                                   const Dims& lse, const Dims& dout);

}  // namespace kiln

// ONNX's transformer ops of opsets 23 and 24: Attention as kiln's fused
// kiln.scaled_dot_product_attention (3-D inputs split into heads and read
// in layout BLHD, 4-D ones in BHLD; past key and value concatenated in
// front of the new ones, the concatenations being present_key /
// present_value; grouped-query attention where k and v have fewer heads,
// query head h reading k / v head h / (Hq / Hkv), as ONNX Runtime does;
// nonpad_kv_seqlen as key_lengths), RMSNormalization as kiln.rms_norm where
// the scale has the normalized dims (else composed), RotaryEmbedding
// composed (half-split or interleaved pairs, a tail past
// rotary_embedding_dim passed through). What kiln's op has no form for is
// an error naming it: q, k and v of different ranks, qk_matmul_output_mode
// other than 0. is_causal over a past (j <= i + P) is a bool mask; softcap
// and the qk_matmul_output output take attention composed of kiln ops.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/dialect/shape_ops.h"
#include "op_table.h"

namespace kiln::onnx::detail {
namespace {

bool given(const NodeContext& c, std::size_t i) { return i < c.inputs.size() && c.inputs[i]; }
bool output_used(const NodeContext& c, int i) { return i < c.node.output_size() && !c.node.output(i).empty(); }

Value transposed_heads(NodeContext& c, Value x) {  // BLHD <-> BHLD
  return c.b.create<TransposeOp>(x, std::vector<std::int64_t>{0, 2, 1, 3}).result();
}

// Attention's q, k or v as 4-D: a 3-D [B, L, H·D] split into `heads`
// heads (BLHD), a 4-D one as it is (BHLD).
Value as_heads(NodeContext& c, Value x, const char* heads_attr) {
  const auto rank = shaped_dims(x.type()).size();
  if (rank == 4) return x;
  if (rank != 3) c.unsupported("q, k and v of rank " + std::to_string(rank) + " (3 or 4)");
  const std::int64_t heads = c.int_attr(heads_attr, 0);
  if (heads < 1) c.unsupported(std::string("3-D inputs without ") + heads_attr);
  return c.b.create<ReshapeOp>(x, std::vector<std::int64_t>{0, 0, heads, -1}).result();
}

// Attention's mask as the fused op reads it: bool as it is (true: the key
// takes part), another type as an additive mask of q's dtype.
Value attention_mask(NodeContext& c, Value mask, DataType dt) {
  const DataType m = shaped_data_type(mask.type());
  return m == DataType::Bool || m == dt ? mask : c.b.create<CastOp>(mask, dt).result();
}

// The causal bool mask [Lq, T] of queries q [B, H, Lq, D] over keys k [B,
// Hk, T, D]: key j is seen from query i when j <= i (top-left), or over a
// past when j <= i + T - Lq (the new queries are the last T - P keys').
Value causal_mask(NodeContext& c, Value q, Value k, bool past) {
  auto dim = [&](Value x) {  // x's dim 2 as an i64 scalar, read at run time
    Value at = constant_value(c.b, Tensor::from_vector<std::int64_t>(Dims{}, {2}));
    return c.b.create<GatherOp>(c.b.create<ShapeOp>(x).result(), at, 0).result();
  };
  Value zero = constant_value(c.b, Tensor::from_vector<std::int64_t>(Dims{}, {0}));
  Value one = constant_value(c.b, Tensor::from_vector<std::int64_t>(Dims{}, {1}));
  Value lq = dim(q), t = dim(k);
  Value rows = c.b.create<UnsqueezeOp>(c.b.create<RangeOp>(zero, lq, one).result(), std::vector<std::int64_t>{1}).result();
  Value cols = c.b.create<UnsqueezeOp>(c.b.create<RangeOp>(zero, t, one).result(), std::vector<std::int64_t>{0}).result();
  Value ahead = c.b.create<SubOp>(cols, rows).result();  // j - i
  return c.b.create<LessEqualOp>(ahead, past ? c.b.create<SubOp>(t, lq).result() : zero).result();
}

// x [B, Hk, T, D] (D known) with each head repeated `group` times in a row.
Value repeated_heads(NodeContext& c, Value x, std::int64_t group) {
  const auto d = shaped_dims(x.type());
  Value e = c.b.create<ExpandOp>(c.b.create<UnsqueezeOp>(x, std::vector<std::int64_t>{2}).result(),
                                 std::vector<std::int64_t>{-1, -1, group, -1, -1})
                .result();
  return c.b.create<ReshapeOp>(e, std::vector<std::int64_t>{0, d[1] * group, -1, d[3]}).result();
}

// Attention of kiln ops, for what the fused op has no form for (softcap,
// the qk_matmul_output output): q, k, v in BHLD (k and v with their past),
// mask as attention_mask gives it. Returns y and the scaled scores (mode 0).
std::pair<Value, Value> composed_attention(NodeContext& c, Value q, Value k, Value v, Value mask, bool causal,
                                           bool past, double scale) {
  const auto qd = shaped_dims(q.type()), kd = shaped_dims(k.type()), vd = shaped_dims(v.type());
  const std::int64_t hq = qd[1], hk = kd[1];
  if (hq != hk) {
    if (hq < 1 || hk < 1 || hq % hk != 0 || kd[3] < 0 || vd[3] < 0)
      c.unsupported("softcap or qk_matmul_output with head counts or head sizes known only at run time");
    k = repeated_heads(c, k, hq / hk), v = repeated_heads(c, v, hq / hk);
  }
  if (scale == 0 && qd[3] < 1) c.unsupported("the default scale of a head size known only at run time");
  const DataType dt = shaped_data_type(q.type());
  auto full = [&](double x) { return c.b.create<FullOp>(std::vector<std::int64_t>{}, x, dt).result(); };
  Value qk = c.b.create<MatmulOp>(q, k, false, true).result();
  qk = c.b.create<ScaleOp>(qk, scale != 0 ? scale : 1 / std::sqrt(static_cast<double>(qd[3]))).result();
  Value s = qk;
  if (const double cap = c.float_attr("softcap", 0.f); cap != 0)  // cap · tanh(s / cap), before the mask
    s = c.b.create<ScaleOp>(c.b.create<TanhOp>(c.b.create<ScaleOp>(s, 1 / cap).result()).result(), cap).result();
  const Value none = full(-std::numeric_limits<double>::infinity());
  if (mask && shaped_data_type(mask.type()) == DataType::Bool) s = c.b.create<WhereOp>(mask, s, none).result();
  else if (mask) s = c.b.create<AddOp>(s, mask).result();
  if (causal) s = c.b.create<WhereOp>(causal_mask(c, q, k, past), s, none).result();
  Value p = c.b.create<SoftmaxOp>(s, -1).result();
  p = c.b.create<WhereOp>(c.b.create<IsNanOp>(p).result(), full(0), p).result();  // a row without keys: 0
  return {c.b.create<MatmulOp>(p, v).result(), qk};
}

std::vector<Value> attention_op(NodeContext& c) {
  const bool composed = c.float_attr("softcap", 0.f) != 0.f || output_used(c, 3);
  if (composed && c.int_attr("qk_matmul_output_mode", 0) != 0)
    c.unsupported("qk_matmul_output_mode " + std::to_string(c.int_attr("qk_matmul_output_mode", 0)));
  const bool three_d = shaped_dims(c.input(0).type()).size() == 3, past = given(c, 4) || given(c, 5);
  for (std::size_t i : {1, 2})
    if (shaped_dims(c.input(i).type()).size() != shaped_dims(c.input(0).type()).size())
      c.unsupported("q, k and v of different ranks");
  if (given(c, 4) != given(c, 5)) c.unsupported("past_key without past_value or the reverse");
  const bool causal = c.int_attr("is_causal", 0) != 0;
  Value q = as_heads(c, c.input(0), "q_num_heads"), k = as_heads(c, c.input(1), "kv_num_heads"),
        v = as_heads(c, c.input(2), "kv_num_heads");
  std::string layout = three_d ? "BLHD" : "BHLD";
  if (past) {  // [past, new] along the sequence, in BHLD as the past is
    if (three_d) q = transposed_heads(c, q), k = transposed_heads(c, k), v = transposed_heads(c, v);
    layout = "BHLD";
    k = c.b.create<ConcatOp>(std::vector<Value>{c.input(4), k}, 2).result();
    v = c.b.create<ConcatOp>(std::vector<Value>{c.input(5), v}, 2).result();
  }
  const DataType dt = shaped_data_type(q.type());
  Value mask = given(c, 3) ? attention_mask(c, c.inputs[3], dt) : Value();
  Value lengths = given(c, 6) ? c.inputs[6] : Value();  // opset 24's nonpad_kv_seqlen
  if (lengths && (past || causal)) c.unsupported("nonpad_kv_seqlen with a past or is_causal");
  const double scale = c.has_attr("scale") ? c.float_attr("scale", 0.f) : 0.0;
  if (c.has_attr("scale") && scale == 0) c.unsupported("scale 0");
  if (layout == "BLHD" && composed) q = transposed_heads(c, q), k = transposed_heads(c, k), v = transposed_heads(c, v);
  if (composed) layout = "BHLD";
  Value y, qk;
  if (composed) {
    if (lengths) c.unsupported("nonpad_kv_seqlen with softcap or qk_matmul_output");
    std::tie(y, qk) = composed_attention(c, q, k, v, mask, causal, past, scale);
  } else {
    // Causal over a past sees the keys up to its own position among them, j <= i + P (a mask, as
    // kiln's causal attribute is top-left aligned); one new query sees every key.
    if (past && causal && shaped_dims(q.type())[2] != 1) {
      Value seen = causal_mask(c, q, k, true);
      if (!mask) mask = seen;
      else if (shaped_data_type(mask.type()) == DataType::Bool) mask = c.b.create<LogicalAndOp>(mask, seen).result();
      else mask = c.b.create<WhereOp>(seen, mask, c.b.create<FullOp>(std::vector<std::int64_t>{},
                                                                     -std::numeric_limits<double>::infinity(), dt)
                                                  .result())
                      .result();
    }
    y = c.b.create<ScaledDotProductAttentionOp>(q, k, v, causal && !past, scale, layout, lengths, mask).result(0);
  }
  if (three_d) {
    if (layout == "BHLD") y = transposed_heads(c, y);
    y = c.b.create<ReshapeOp>(y, std::vector<std::int64_t>{0, 0, -1}).result();
  }
  // present_key / present_value: the keys and values read, [B, Hkv, T, D] (BHLD)
  if (layout == "BLHD") k = transposed_heads(c, k), v = transposed_heads(c, v);
  std::vector<Value> out{y, k, v};
  if (qk) out.push_back(qk);
  return out;
}

// x / sqrt(mean(x², dims from axis on) + epsilon) · scale.
std::vector<Value> rms_normalization(NodeContext& c) {
  if (c.int_attr("stash_type", 1) != 1) c.unsupported("stash_type other than 1 (float)");
  Value x = c.input(0), scale = c.input(1);
  const std::vector<std::int64_t> d = shaped_dims(x.type());
  const auto rank = static_cast<std::int64_t>(d.size());
  std::int64_t axis = c.int_attr("axis", -1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) c.unsupported("axis out of range");
  const double eps = c.float_attr("epsilon", 1e-5f);
  const std::vector<std::int64_t> normalized(d.begin() + axis, d.end());
  if (shaped_dims(scale.type()) == normalized &&
      std::all_of(normalized.begin(), normalized.end(), [](std::int64_t e) { return e >= 0; }))
    return {c.b.create<RmsNormOp>(x, scale, axis, eps).result(0)};
  std::vector<std::int64_t> axes;
  for (std::int64_t a = axis; a < rank; ++a) axes.push_back(a);
  const DataType dt = shaped_data_type(x.type());
  const bool widen = dt == DataType::Float16 || dt == DataType::BFloat16;  // stash_type 1: in f32
  Value xs = widen ? c.b.create<CastOp>(x, DataType::Float32).result() : x;
  Value ms = c.b.create<MeanOp>(c.b.create<SquareOp>(xs).result(), axes, true).result();
  Value root = c.b.create<SqrtOp>(c.b.create<ScaleOp>(ms, 1.0, eps).result()).result();
  Value y = c.b.create<DivOp>(xs, root).result();
  if (widen) y = c.b.create<CastOp>(y, dt).result();
  return {c.b.create<MulOp>(y, scale).result()};
}

Value slice_last(NodeContext& c, Value x, std::int64_t start, std::int64_t end, std::int64_t step = 1) {
  if (step == 1) return c.b.create<SliceOp>(x, std::vector<std::int64_t>{3}, std::vector<std::int64_t>{start},
                                            std::vector<std::int64_t>{end})
                      .result();
  return c.b.create<StridedSliceOp>(x, std::vector<std::int64_t>{3}, std::vector<std::int64_t>{start},
                                    std::vector<std::int64_t>{end}, std::vector<std::int64_t>{step})
      .result();
}

// x [B, S, H, D]: its first R dims rotated by the angles whose cos and sin
// are [B, S, 1, R/2] — pairs (i, i + R/2), or (2i, 2i + 1) interleaved.
Value rotated(NodeContext& c, Value x, Value cos, Value sin, std::int64_t r, std::int64_t d, bool interleaved) {
  Value x1 = interleaved ? slice_last(c, x, 0, r, 2) : slice_last(c, x, 0, r / 2);
  Value x2 = interleaved ? slice_last(c, x, 1, r, 2) : slice_last(c, x, r / 2, r);
  auto mul = [&](Value a, Value b) { return c.b.create<MulOp>(a, b).result(); };
  Value y1 = c.b.create<SubOp>(mul(cos, x1), mul(sin, x2)).result();
  Value y2 = c.b.create<AddOp>(mul(sin, x1), mul(cos, x2)).result();
  Value y = interleaved ? c.b.create<ReshapeOp>(c.b.create<StackOp>(std::vector<Value>{y1, y2}, 4).result(),
                                                std::vector<std::int64_t>{0, 0, 0, r})
                              .result()
                        : c.b.create<ConcatOp>(std::vector<Value>{y1, y2}, 3).result();
  if (r == d) return y;
  return c.b.create<ConcatOp>(std::vector<Value>{y, slice_last(c, x, r, d)}, 3).result();
}

// X 4-D [B, H, S, D] or 3-D [B, S, H·D] (num_heads); cos / sin caches
// [B, S, R/2], or [positions, R/2] read at position_ids [B, S].
std::vector<Value> rotary_embedding(NodeContext& c) {
  Value x = c.input(0);
  const auto rank = shaped_dims(x.type()).size();
  if (rank != 3 && rank != 4) c.unsupported("an input of rank " + std::to_string(rank) + " (3 or 4)");
  if (rank == 3) {
    const std::int64_t heads = c.int_attr("num_heads", 0);
    if (heads < 1) c.unsupported("a 3-D input without num_heads");
    x = c.b.create<ReshapeOp>(x, std::vector<std::int64_t>{0, 0, heads, -1}).result();
  } else {
    x = transposed_heads(c, x);
  }
  const std::int64_t d = shaped_dims(x.type())[3];
  const std::int64_t r = c.int_attr("rotary_embedding_dim", 0) > 0 ? c.int_attr("rotary_embedding_dim", 0) : d;
  if (d < 0 || r % 2 != 0 || r > d)
    c.unsupported("rotary_embedding_dim " + std::to_string(r) + " for a head size of " + std::to_string(d) +
                  " (known at import, even, at most the head size)");
  auto angles = [&](std::size_t i) {
    Value t = given(c, 3) ? c.b.create<GatherOp>(c.input(i), c.inputs[3], 0).result() : c.input(i);
    t = c.b.create<SliceOp>(t, std::vector<std::int64_t>{2}, std::vector<std::int64_t>{0},
                            std::vector<std::int64_t>{r / 2})
            .result();
    return c.b.create<UnsqueezeOp>(t, std::vector<std::int64_t>{2}).result();
  };
  Value y = rotated(c, x, angles(1), angles(2), r, d, c.int_attr("interleaved", 0) != 0);
  if (rank == 3) return {c.b.create<ReshapeOp>(y, std::vector<std::int64_t>{0, 0, -1}).result()};
  return {transposed_heads(c, y)};
}

}  // namespace

void add_attention_ops(OpTable& t) {
  t["Attention"] = {&attention_op, 23};
  t["RMSNormalization"] = {&rms_normalization, 23};
  t["RotaryEmbedding"] = {&rotary_embedding, 23};
}

}  // namespace kiln::onnx::detail

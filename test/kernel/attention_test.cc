// Kernel tests of the ops of kiln/dialect/attention_ops.h: the fused
// attention and its gradient against a plain reference computed with loops
// in double (softmax(q kᵀ · scale + mask) · v, the whole score matrix
// materialized), causal and not, Lq != Lk, several query tiles, the default
// scale, f32 and f64; key_lengths; masks (bool and float, broadcast) and a
// float mask's gradient.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernel/kernel_test_util.h"

using namespace kiln;
using namespace kiln_test;

namespace {

struct Shape {
  std::int64_t b, h, lq, lk, d, dv;
};

// The reference: out, lse and, given dout, dq / dk / dv and dS (the
// scores' gradient, [B, H, Lq, Lk]), all in double. bias, when not empty,
// is added to every head's scores ([B, H, Lq, Lk], -inf: masked); a row
// without keys gives 0, lse -inf and no gradient.
struct Reference {
  std::vector<double> out, lse, dq, dk, dv, ds;
};

Reference reference(const Shape& s, const std::vector<double>& q, const std::vector<double>& k,
                    const std::vector<double>& v, const std::vector<double>& dout, bool causal,
                    double scale, const std::vector<double>& bias = {}) {
  Reference r;
  r.ds.assign(s.b * s.h * s.lq * s.lk, 0);
  r.out.assign(s.b * s.h * s.lq * s.dv, 0);
  r.lse.assign(s.b * s.h * s.lq, 0);
  r.dq.assign(q.size(), 0);
  r.dk.assign(k.size(), 0);
  r.dv.assign(v.size(), 0);
  const double ninf = -std::numeric_limits<double>::infinity();
  for (std::int64_t bh = 0; bh < s.b * s.h; ++bh) {
    auto Q = [&](std::int64_t i, std::int64_t c) { return q[(bh * s.lq + i) * s.d + c]; };
    auto K = [&](std::int64_t j, std::int64_t c) { return k[(bh * s.lk + j) * s.d + c]; };
    auto V = [&](std::int64_t j, std::int64_t c) { return v[(bh * s.lk + j) * s.dv + c]; };
    auto dO = [&](std::int64_t i, std::int64_t c) { return dout[(bh * s.lq + i) * s.dv + c]; };
    std::vector<double> p(s.lq * s.lk);
    for (std::int64_t i = 0; i < s.lq; ++i) {
      double m = ninf;
      for (std::int64_t j = 0; j < s.lk; ++j) {
        double x = 0;
        for (std::int64_t c = 0; c < s.d; ++c) x += Q(i, c) * K(j, c);
        x *= scale;
        if (!bias.empty()) x += bias[(bh * s.lq + i) * s.lk + j];
        if (causal && j > i) x = ninf;  // the mask, added to the scores
        p[i * s.lk + j] = x;
        m = std::max(m, x);
      }
      double sum = 0;
      for (std::int64_t j = 0; j < s.lk && m != ninf; ++j) sum += std::exp(p[i * s.lk + j] - m);
      r.lse[bh * s.lq + i] = m == ninf ? ninf : m + std::log(sum);
      for (std::int64_t j = 0; j < s.lk; ++j) p[i * s.lk + j] = m == ninf ? 0 : std::exp(p[i * s.lk + j] - m) / sum;
      for (std::int64_t c = 0; c < s.dv; ++c) {
        double o = 0;
        for (std::int64_t j = 0; j < s.lk; ++j) o += p[i * s.lk + j] * V(j, c);
        r.out[(bh * s.lq + i) * s.dv + c] = o;
      }
    }
    // Backward through the materialized softmax: dS = P ∘ (dP - Σ_j P dP).
    for (std::int64_t i = 0; i < s.lq; ++i) {
      std::vector<double> dp(s.lk);
      double dot = 0;
      for (std::int64_t j = 0; j < s.lk; ++j) {
        for (std::int64_t c = 0; c < s.dv; ++c) dp[j] += dO(i, c) * V(j, c);
        dot += p[i * s.lk + j] * dp[j];
      }
      for (std::int64_t j = 0; j < s.lk; ++j) {
        const double pij = p[i * s.lk + j];
        const double ds = pij * (dp[j] - dot);
        r.ds[(bh * s.lq + i) * s.lk + j] = ds;
        for (std::int64_t c = 0; c < s.dv; ++c) r.dv[(bh * s.lk + j) * s.dv + c] += pij * dO(i, c);
        for (std::int64_t c = 0; c < s.d; ++c) {
          r.dq[(bh * s.lq + i) * s.d + c] += scale * ds * K(j, c);
          r.dk[(bh * s.lk + j) * s.d + c] += scale * ds * Q(i, c);
        }
      }
    }
  }
  return r;
}

template <typename T>
std::vector<T> cast(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

template <typename T>
void check_attention(const Shape& s, bool causal, double scale, double rtol, double atol) {
  INFO("shape [" << s.b << ", " << s.h << ", " << s.lq << "/" << s.lk << ", " << s.d << "/"
                 << s.dv << "] causal " << causal << " scale " << scale);
  const Tensor q = filled<T>({s.b, s.h, s.lq, s.d}, -1, 1, 1);
  const Tensor k = filled<T>({s.b, s.h, s.lk, s.d}, -1, 1, 2);
  const Tensor v = filled<T>({s.b, s.h, s.lk, s.dv}, -1, 1, 3);
  const Tensor dout = filled<T>({s.b, s.h, s.lq, s.dv}, -1, 1, 4);
  auto dbl = [](const Tensor& t) {
    auto x = t.to_vector<T>();
    return std::vector<double>(x.begin(), x.end());
  };
  const double used = scale != 0 ? scale : 1.0 / std::sqrt(static_cast<double>(s.d));
  const Reference r = reference(s, dbl(q), dbl(k), dbl(v), dbl(dout), causal, used);

  auto fwd = run_op<ScaledDotProductAttentionOp>({q, k, v}, causal, scale);
  check_close(fwd.out(0), cast<T>(r.out), rtol, atol);
  check_close(fwd.out(1), cast<T>(r.lse), rtol, atol);

  auto bwd = run_op<GradOf<ScaledDotProductAttentionOp>>({q, k, v, fwd.out(0), fwd.out(1), dout},
                                                          causal, scale, std::string("BHLD"));
  check_close(bwd.out(0), cast<T>(r.dq), rtol, atol);
  check_close(bwd.out(1), cast<T>(r.dk), rtol, atol);
  check_close(bwd.out(2), cast<T>(r.dv), rtol, atol);
}

// Layout BLHD on the swapped operands gives BHLD's results swapped, bit
// for bit (the same arithmetic on rows at other addresses).
template <typename T>
void check_blhd_matches_bhld(const Shape& s, bool causal, double scale) {
  INFO("shape [" << s.b << ", " << s.h << ", " << s.lq << "/" << s.lk << ", " << s.d << "/"
                 << s.dv << "] causal " << causal);
  const Tensor q = filled<T>({s.b, s.h, s.lq, s.d}, -1, 1, 5);
  const Tensor k = filled<T>({s.b, s.h, s.lk, s.d}, -1, 1, 6);
  const Tensor v = filled<T>({s.b, s.h, s.lk, s.dv}, -1, 1, 7);
  const Tensor dout = filled<T>({s.b, s.h, s.lq, s.dv}, -1, 1, 8);
  const std::string bhld = "BHLD", blhd = "BLHD";
  auto fwd = run_op<ScaledDotProductAttentionOp>({q, k, v}, causal, scale, bhld);
  auto bwd = run_op<GradOf<ScaledDotProductAttentionOp>>({q, k, v, fwd.out(0), fwd.out(1), dout},
                                                          causal, scale, bhld);
  const Tensor sq = swap12<T>(q), sk = swap12<T>(k), sv = swap12<T>(v), sdout = swap12<T>(dout);
  auto f2 = run_op<ScaledDotProductAttentionOp>({sq, sk, sv}, causal, scale, blhd);
  CHECK(f2.out(0).dims() == swap12<T>(fwd.out(0)).dims());
  CHECK(f2.out(0).template to_vector<T>() == swap12<T>(fwd.out(0)).template to_vector<T>());
  CHECK(f2.out(1).template to_vector<T>() == fwd.out(1).template to_vector<T>());
  auto b2 = run_op<GradOf<ScaledDotProductAttentionOp>>({sq, sk, sv, f2.out(0), f2.out(1), sdout},
                                                         causal, scale, blhd);
  for (int i = 0; i < 3; ++i) {
    INFO("gradient #" << i);
    CHECK(b2.out(i).template to_vector<T>() == swap12<T>(bwd.out(i)).template to_vector<T>());
  }
}

template <typename T>
void check_shapes(double rtol, double atol) {
  for (bool causal : {false, true}) {
    check_attention<T>({2, 3, 5, 5, 4, 4}, causal, 0, rtol, atol);
    check_attention<T>({1, 2, 4, 7, 3, 5}, causal, 0.5, rtol, atol);   // Lq < Lk, Dv != D
    check_attention<T>({2, 1, 6, 3, 4, 2}, causal, 0, rtol, atol);     // Lq > Lk
    check_attention<T>({1, 2, 70, 70, 8, 8}, causal, 0, rtol, atol);   // two query tiles
    check_attention<T>({1, 1, 130, 90, 4, 6}, causal, 0.3, rtol, atol);  // three tiles, Lq > Lk
    // rows of 128 keys or more: the softmax's one-pass exp and sum, with a tail
    check_attention<T>({1, 2, 40, 203, 8, 8}, causal, 0, rtol, atol);
    check_attention<T>({1, 1, 150, 150, 4, 4}, causal, 0, rtol, atol);
  }
}

}  // namespace

TEST_CASE("scaled_dot_product_attention and its gradient match a plain reference in f64",
          "[kernel][attention]") {
  check_shapes<double>(1e-11, 1e-12);
}

TEST_CASE("scaled_dot_product_attention and its gradient match a plain reference in f32",
          "[kernel][attention]") {
  check_shapes<float>(2e-4, 2e-5);
}

TEST_CASE("scaled_dot_product_attention's causal first row is the first value row",
          "[kernel][attention]") {
  // Row 0 sees key 0 only: out[0] = v[0], lse[0] = scale · q[0]·k[0].
  const Tensor q = Tensor::from_vector<float>({1, 1, 2, 2}, {1, 2, 3, 4});
  const Tensor k = Tensor::from_vector<float>({1, 1, 2, 2}, {0.5f, -1, 2, 1});
  const Tensor v = Tensor::from_vector<float>({1, 1, 2, 3}, {1, 2, 3, -4, 5, 6});
  auto r = run_op<ScaledDotProductAttentionOp>({q, k, v}, true, 1.0);
  // Row 1: scores 3·0.5 - 4 = -2.5 and 6 + 4 = 10.
  const double p0 = std::exp(-2.5) / (std::exp(-2.5) + std::exp(10.0)), p1 = 1 - p0;
  check_close<float>(r.out(0), {1, 2, 3, float(p0 * 1 + p1 * -4), float(p0 * 2 + p1 * 5),
                                float(p0 * 3 + p1 * 6)});
  check_close<float>(r.out(1), {-1.5f, float(std::log(std::exp(-2.5) + std::exp(10.0)))});
}

TEST_CASE("scaled_dot_product_attention in layout BLHD gives BHLD's results, transposed",
          "[kernel][attention]") {
  for (bool causal : {false, true}) {
    check_blhd_matches_bhld<float>({2, 3, 5, 5, 4, 4}, causal, 0);
    check_blhd_matches_bhld<float>({1, 4, 70, 70, 8, 8}, causal, 0);  // two query tiles
    check_blhd_matches_bhld<float>({2, 2, 4, 7, 3, 5}, causal, 0.5);  // Lq < Lk, Dv != D
    check_blhd_matches_bhld<double>({2, 2, 6, 3, 4, 2}, causal, 0);  // Lq > Lk
  }
}

TEST_CASE("scaled_dot_product_attention refuses operands that do not fit its layout",
          "[kernel][attention]") {
  // [B, H, L, D] operands whose head counts (dim 1) agree but whose dim 2 differs
  // fit BHLD (two lengths) but not BLHD (two head counts).
  const Tensor q = filled<float>({1, 2, 3, 4}), k = filled<float>({1, 2, 5, 4}),
               v = filled<float>({1, 2, 5, 4});
  KILN_CHECK_ERROR(run_op<ScaledDotProductAttentionOp>({q, k, v}, false, 0.0, std::string("BLHD")),
                   InvalidArgument, {"'kiln.scaled_dot_product_attention'", "layout BLHD"});
}

TEST_CASE("scaled_dot_product_attention stays finite for large scores", "[kernel][attention]") {
  const Tensor q = filled<float>({1, 1, 4, 8}, 50, 60, 1);
  const Tensor k = filled<float>({1, 1, 4, 8}, 50, 60, 2);
  const Tensor v = filled<float>({1, 1, 4, 8}, -1, 1, 3);
  auto r = run_op<ScaledDotProductAttentionOp>({q, k, v}, false, 0.0);
  for (float x : r.out(0).to_vector<float>()) CHECK(std::isfinite(x));
  for (float x : r.out(1).to_vector<float>()) CHECK(std::isfinite(x));
}

namespace {

// Rows [from, from + n) of axis 2 of batch b of a [B, H, L, W] tensor, as a
// [1, H, n, W] tensor.
Tensor batch_rows(const Tensor& t, std::int64_t b, std::int64_t from, std::int64_t n) {
  const Dims& d = t.dims();
  const std::vector<double> x = t.to_vector<double>();
  std::vector<double> y;
  for (std::int64_t h = 0; h < d[1]; ++h)
    for (std::int64_t i = from; i < from + n; ++i)
      for (std::int64_t c = 0; c < d[3]; ++c) y.push_back(x[static_cast<std::size_t>(((b * d[1] + h) * d[2] + i) * d[3] + c)]);
  return Tensor::from_vector<double>({1, d[1], n, d[3]}, y);
}

// With key_lengths, batch b's results are those of attention over its first
// key_lengths[b] keys alone, and keys past them get no gradient.
void check_key_lengths(const Tensor& lengths, bool causal) {
  std::vector<std::int64_t> lens;
  if (lengths.dtype() == DataType::Int32)
    for (std::int32_t n : lengths.to_vector<std::int32_t>()) lens.push_back(n);
  else
    lens = lengths.to_vector<std::int64_t>();
  const std::int64_t nb = static_cast<std::int64_t>(lens.size()), h = 2, lq = 70, lk = 9, d = 4;
  INFO("key_lengths " << to_string(lengths.dtype()) << " causal " << causal);
  const Tensor q = filled<double>({nb, h, lq, d}, -1, 1, 1), k = filled<double>({nb, h, lk, d}, -1, 1, 2),
               v = filled<double>({nb, h, lk, d}, -1, 1, 3), dout = filled<double>({nb, h, lq, d}, -1, 1, 4);
  auto fwd = run_op<ScaledDotProductAttentionOp>({q, k, v, lengths}, causal, 0.0);
  auto bwd = run_op<GradOf<ScaledDotProductAttentionOp>>({q, k, v, fwd.out(0), fwd.out(1), dout, lengths},
                                                          causal, 0.0, std::string("BHLD"));
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::int64_t n = lens[static_cast<std::size_t>(b)];
    INFO("batch " << b << " sees " << n << " keys");
    const Tensor qb = batch_rows(q, b, 0, lq), kb = batch_rows(k, b, 0, n), vb = batch_rows(v, b, 0, n),
                 dob = batch_rows(dout, b, 0, lq);
    auto f1 = run_op<ScaledDotProductAttentionOp>({qb, kb, vb}, causal, 0.0);
    check_close(batch_rows(fwd.out(0), b, 0, lq), f1.out(0).to_vector<double>(), 1e-12, 1e-12);
    auto b1 = run_op<GradOf<ScaledDotProductAttentionOp>>({qb, kb, vb, f1.out(0), f1.out(1), dob}, causal, 0.0,
                                                           std::string("BHLD"));
    check_close(batch_rows(bwd.out(0), b, 0, lq), b1.out(0).to_vector<double>(), 1e-12, 1e-12);
    check_close(batch_rows(bwd.out(1), b, 0, n), b1.out(1).to_vector<double>(), 1e-12, 1e-12);
    check_close(batch_rows(bwd.out(2), b, 0, n), b1.out(2).to_vector<double>(), 1e-12, 1e-12);
    for (int g = 1; g < 3; ++g)
      for (double x : batch_rows(bwd.out(g), b, n, lk - n).to_vector<double>()) CHECK(x == 0);
  }
}

}  // namespace

TEST_CASE("scaled_dot_product_attention with key_lengths attends to each batch's first keys only",
          "[kernel][attention]") {
  for (bool causal : {false, true}) {
    check_key_lengths(Tensor::from_vector<std::int32_t>({3}, {9, 2, 5}), causal);
    check_key_lengths(Tensor::from_vector<std::int64_t>({2}, {1, 7}), causal);
  }
}

TEST_CASE("scaled_dot_product_attention gives a batch without keys zeros and lse -inf",
          "[kernel][attention]") {
  const Tensor q = filled<float>({2, 1, 3, 4}, -1, 1, 1), k = filled<float>({2, 1, 5, 4}, -1, 1, 2),
               v = filled<float>({2, 1, 5, 4}, -1, 1, 3), dout = filled<float>({2, 1, 3, 4}, -1, 1, 4);
  const Tensor lengths = Tensor::from_vector<std::int64_t>({2}, {0, 5});
  for (bool causal : {false, true}) {
    auto fwd = run_op<ScaledDotProductAttentionOp>({q, k, v, lengths}, causal, 0.0);
    const std::vector<float> out = fwd.out(0).to_vector<float>(), lse = fwd.out(1).to_vector<float>();
    for (std::size_t i = 0; i < 12; ++i) CHECK(out[i] == 0.f);
    for (std::size_t i = 0; i < 3; ++i) CHECK(lse[i] == -std::numeric_limits<float>::infinity());
    for (std::size_t i = 3; i < 6; ++i) CHECK(std::isfinite(lse[i]));
    auto bwd = run_op<GradOf<ScaledDotProductAttentionOp>>({q, k, v, fwd.out(0), fwd.out(1), dout, lengths},
                                                            causal, 0.0, std::string("BHLD"));
    for (int g = 0; g < 3; ++g) {
      const std::vector<float> grad = bwd.out(g).to_vector<float>();
      for (std::size_t i = 0; i < grad.size() / 2; ++i) CHECK(grad[i] == 0.f);
    }
  }
}

TEST_CASE("scaled_dot_product_attention refuses a key length outside [0, Lk] on the CPU",
          "[kernel][attention]") {
  const Tensor q = filled<float>({2, 1, 3, 4}), k = filled<float>({2, 1, 5, 4}), v = filled<float>({2, 1, 5, 4});
  KILN_CHECK_ERROR(run_op<ScaledDotProductAttentionOp>({q, k, v, Tensor::from_vector<std::int32_t>({2}, {5, 6})},
                                                       false, 0.0),
                   InvalidArgument, {"'kiln.scaled_dot_product_attention'", "key_lengths[1] is 6", "[0, 5]"});
  KILN_CHECK_ERROR(run_op<ScaledDotProductAttentionOp>({q, k, v, Tensor::from_vector<std::int64_t>({2}, {-1, 2})},
                                                       false, 0.0),
                   InvalidArgument, {"key_lengths[0] is -1"});
}

TEST_CASE("scaled_dot_product_attention with key_lengths in layout BLHD gives BHLD's results",
          "[kernel][attention]") {
  const Tensor q = filled<float>({3, 2, 6, 4}, -1, 1, 5), k = filled<float>({3, 2, 7, 4}, -1, 1, 6),
               v = filled<float>({3, 2, 7, 4}, -1, 1, 7);
  const Tensor lengths = Tensor::from_vector<std::int32_t>({3}, {7, 3, 0});
  auto bhld = run_op<ScaledDotProductAttentionOp>({q, k, v, lengths}, true, 0.0, std::string("BHLD"));
  auto blhd = run_op<ScaledDotProductAttentionOp>({swap12<float>(q), swap12<float>(k), swap12<float>(v), lengths},
                                                  true, 0.0, std::string("BLHD"));
  CHECK(blhd.out(0).to_vector<float>() == swap12<float>(bhld.out(0)).to_vector<float>());
  CHECK(blhd.out(1).to_vector<float>() == bhld.out(1).to_vector<float>());
}

namespace {

// Element (b, h, i, j) of [B, H, Lq, Lk] in a mask of dims md (right-aligned,
// a dim of 1 broadcast).
std::size_t mask_index(const std::vector<std::int64_t>& md, std::int64_t b, std::int64_t h, std::int64_t i,
                       std::int64_t j) {
  const std::int64_t full[] = {b, h, i, j};
  const std::size_t skip = 4 - md.size();
  std::int64_t at = 0;
  for (std::size_t a = 0; a < md.size(); ++a) at = at * md[a] + (md[a] == 1 ? 0 : full[skip + a]);
  return static_cast<std::size_t>(at);
}

// A float mask of dims md: values in [-2, 2], every seventh one -inf.
std::vector<double> mask_values(const std::vector<std::int64_t>& md) {
  std::vector<double> m = filled<double>(md, -2, 2, 9).to_vector<double>();
  for (std::size_t i = 3; i < m.size(); i += 7) m[i] = -std::numeric_limits<double>::infinity();
  return m;
}

void check_lse(const Tensor& got, const std::vector<double>& want) {
  const std::vector<double> g = got.to_vector<double>();
  REQUIRE(g.size() == want.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    INFO("lse element " << i);
    if (std::isinf(want[i])) CHECK(g[i] == want[i]);
    else CHECK(std::abs(g[i] - want[i]) <= 1e-12 * (1 + std::abs(want[i])));
  }
}

// Attention with a float mask of dims md and with its bool form (false
// where the float one is -inf) against the reference over the broadcast
// bias; the float mask's gradient against dS summed into md.
void check_mask(const Shape& s, const std::vector<std::int64_t>& md, bool causal) {
  INFO("shape [" << s.b << ", " << s.h << ", " << s.lq << "/" << s.lk << "] mask rank " << md.size()
                 << " causal " << causal);
  const Tensor q = filled<double>({s.b, s.h, s.lq, s.d}, -1, 1, 1), k = filled<double>({s.b, s.h, s.lk, s.d}, -1, 1, 2),
               v = filled<double>({s.b, s.h, s.lk, s.dv}, -1, 1, 3),
               dout = filled<double>({s.b, s.h, s.lq, s.dv}, -1, 1, 4);
  const std::vector<double> mv = mask_values(md);
  std::vector<double> bias, flags;  // the float mask and the bool one, broadcast
  std::vector<std::uint8_t> keep(mv.size());
  for (std::size_t i = 0; i < mv.size(); ++i) keep[i] = std::isfinite(mv[i]);
  for (std::int64_t b = 0; b < s.b; ++b)
    for (std::int64_t h = 0; h < s.h; ++h)
      for (std::int64_t i = 0; i < s.lq; ++i)
        for (std::int64_t j = 0; j < s.lk; ++j) {
          const double x = mv[mask_index(md, b, h, i, j)];
          bias.push_back(x);
          flags.push_back(std::isfinite(x) ? 0 : x);
        }
  const Tensor fmask = Tensor::from_vector<double>(md, mv);
  Tensor bmask = Tensor::empty(Dims(md), DataType::Bool);
  for (std::size_t i = 0; i < keep.size(); ++i) bmask.data<bool>()[i] = keep[i];
  const std::string bhld = "BHLD";
  for (const bool boolean : {false, true}) {
    INFO((boolean ? "bool mask" : "float mask"));
    const Tensor& mask = boolean ? bmask : fmask;
    const Reference r = reference(s, q.to_vector<double>(), k.to_vector<double>(), v.to_vector<double>(),
                                  dout.to_vector<double>(), causal, 1 / std::sqrt(double(s.d)), boolean ? flags : bias);
    auto fwd = run_op<ScaledDotProductAttentionOp>({q, k, v, mask}, causal, 0.0);
    check_close(fwd.out(0), r.out, 1e-12, 1e-12);
    check_lse(fwd.out(1), r.lse);
    const std::vector<Tensor> in{q, k, v, fwd.out(0), fwd.out(1), dout, mask};
    auto bwd = run_op<GradOf<ScaledDotProductAttentionOp>>(in, causal, 0.0, bhld);
    check_close(bwd.out(0), r.dq, 1e-12, 1e-12);
    check_close(bwd.out(1), r.dk, 1e-12, 1e-12);
    check_close(bwd.out(2), r.dv, 1e-12, 1e-12);
    if (boolean) continue;
    std::vector<double> dmask(mv.size(), 0.0);
    for (std::int64_t b = 0; b < s.b; ++b)
      for (std::int64_t h = 0; h < s.h; ++h)
        for (std::int64_t i = 0; i < s.lq; ++i)
          for (std::int64_t j = 0; j < s.lk; ++j)
            dmask[mask_index(md, b, h, i, j)] += r.ds[static_cast<std::size_t>(((b * s.h + h) * s.lq + i) * s.lk + j)];
    auto mg = run_op<AttentionMaskGradOp>(in, causal, 0.0, bhld);
    CHECK(mg.out(0).dims() == fmask.dims());
    check_close(mg.out(0), dmask, 1e-11, 1e-12);
  }
}

}  // namespace

TEST_CASE("scaled_dot_product_attention with a mask matches the reference with the mask added to the scores",
          "[kernel][attention][mask]") {
  for (bool causal : {false, true}) {
    check_mask({2, 3, 5, 7, 4, 3}, {2, 3, 5, 7}, causal);    // one mask per head
    check_mask({2, 2, 70, 66, 4, 4}, {70, 66}, causal);      // one for all heads, two query tiles
    check_mask({2, 3, 6, 5, 3, 2}, {1, 3, 6, 5}, causal);    // per head, shared by the batches
    check_mask({3, 2, 4, 6, 2, 2}, {3, 1, 1, 6}, causal);    // per batch and key: a padding mask
    check_mask({2, 3, 4, 5, 2, 2}, {3, 1, 5}, causal);       // rank 3: per head and key
    check_mask({2, 2, 6, 4, 3, 3}, {2, 1, 6, 1}, causal);    // per batch and query row
  }
}

TEST_CASE("scaled_dot_product_attention gives a row its mask leaves without keys zeros, lse -inf and no gradient",
          "[kernel][attention][mask]") {
  const Tensor q = filled<float>({1, 2, 3, 4}, -1, 1, 1), k = filled<float>({1, 2, 5, 4}, -1, 1, 2),
               v = filled<float>({1, 2, 5, 4}, -1, 1, 3), dout = filled<float>({1, 2, 3, 4}, -1, 1, 4);
  Tensor mask = Tensor::empty(Dims({3, 5}), DataType::Bool);
  for (std::int64_t i = 0; i < 15; ++i) mask.data<bool>()[i] = i / 5 != 1;  // row 1 sees nothing
  auto fwd = run_op<ScaledDotProductAttentionOp>({q, k, v, mask}, false, 0.0);
  const std::vector<float> out = fwd.out(0).to_vector<float>(), lse = fwd.out(1).to_vector<float>();
  for (std::int64_t h = 0; h < 2; ++h) {
    CHECK(lse[static_cast<std::size_t>(h * 3 + 1)] == -std::numeric_limits<float>::infinity());
    CHECK(std::isfinite(lse[static_cast<std::size_t>(h * 3)]));
    for (std::size_t c = 0; c < 4; ++c) CHECK(out[static_cast<std::size_t>((h * 3 + 1) * 4) + c] == 0.f);
  }
  auto bwd = run_op<GradOf<ScaledDotProductAttentionOp>>({q, k, v, fwd.out(0), fwd.out(1), dout, mask}, false,
                                                          0.0, std::string("BHLD"));
  const std::vector<float> dq = bwd.out(0).to_vector<float>();
  for (std::int64_t h = 0; h < 2; ++h)
    for (std::size_t c = 0; c < 4; ++c) CHECK(dq[static_cast<std::size_t>((h * 3 + 1) * 4) + c] == 0.f);
  for (float x : bwd.out(1).to_vector<float>()) CHECK(std::isfinite(x));
}

TEST_CASE("scaled_dot_product_attention with key_lengths and a mask applies both", "[kernel][attention][mask]") {
  // Lengths 4 and 2 as a bool mask [B, 1, 1, Lk], And-ed with a random one,
  // give what the two operands give together.
  const Tensor q = filled<double>({2, 2, 6, 3}, -1, 1, 1), k = filled<double>({2, 2, 5, 3}, -1, 1, 2),
               v = filled<double>({2, 2, 5, 3}, -1, 1, 3);
  const Tensor lengths = Tensor::from_vector<std::int32_t>({2}, {4, 2});
  const std::vector<double> mv = mask_values({6, 5});
  const Tensor fmask = Tensor::from_vector<double>({6, 5}, mv);
  std::vector<double> both;
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t i = 0; i < 6; ++i)
      for (std::int64_t j = 0; j < 5; ++j)
        both.push_back(j < (b == 0 ? 4 : 2) ? mv[static_cast<std::size_t>(i * 5 + j)]
                                            : -std::numeric_limits<double>::infinity());
  const Tensor combined = Tensor::from_vector<double>({2, 1, 6, 5}, both);
  for (bool causal : {false, true}) {
    auto two = run_op<ScaledDotProductAttentionOp>({q, k, v, lengths, fmask}, causal, 0.0);
    auto one = run_op<ScaledDotProductAttentionOp>({q, k, v, combined}, causal, 0.0);
    check_close(two.out(0), one.out(0).to_vector<double>(), 1e-13, 1e-13);
    check_lse(two.out(1), one.out(1).to_vector<double>());
  }
}

TEST_CASE("scaled_dot_product_attention with a mask in layout BLHD gives BHLD's results",
          "[kernel][attention][mask]") {
  const Tensor q = filled<float>({2, 3, 6, 4}, -1, 1, 5), k = filled<float>({2, 3, 7, 4}, -1, 1, 6),
               v = filled<float>({2, 3, 7, 4}, -1, 1, 7), dout = filled<float>({2, 3, 6, 4}, -1, 1, 8);
  const Tensor mask = filled<float>({1, 3, 6, 7}, -3, 3, 9);
  const std::string bhld = "BHLD", blhd = "BLHD";
  auto f1 = run_op<ScaledDotProductAttentionOp>({q, k, v, mask}, true, 0.0, bhld);
  auto f2 = run_op<ScaledDotProductAttentionOp>({swap12<float>(q), swap12<float>(k), swap12<float>(v), mask}, true,
                                                0.0, blhd);
  CHECK(f2.out(0).to_vector<float>() == swap12<float>(f1.out(0)).to_vector<float>());
  auto g1 = run_op<AttentionMaskGradOp>({q, k, v, f1.out(0), f1.out(1), dout, mask}, true, 0.0, bhld);
  auto g2 = run_op<AttentionMaskGradOp>({swap12<float>(q), swap12<float>(k), swap12<float>(v), f2.out(0), f2.out(1),
                                         swap12<float>(dout), mask},
                                        true, 0.0, blhd);
  CHECK(g2.out(0).to_vector<float>() == g1.out(0).to_vector<float>());
}

TEST_CASE("scaled_dot_product_attention refuses a mask that does not broadcast to its scores, naming it",
          "[kernel][attention][mask]") {
  const Tensor q = filled<float>({2, 3, 4, 5}), k = filled<float>({2, 3, 6, 5}), v = filled<float>({2, 3, 6, 5});
  KILN_CHECK_ERROR(run_op<ScaledDotProductAttentionOp>({q, k, v, filled<float>({4, 5})}, false, 0.0),
                   InvalidArgument, {"'kiln.scaled_dot_product_attention'", "mask", "[2, 3, 4, 6]"});
  KILN_CHECK_ERROR(run_op<ScaledDotProductAttentionOp>({q, k, v, filled<float>({3, 3, 4, 6})}, false, 0.0),
                   InvalidArgument, {"mask", "broadcasting"});
  KILN_CHECK_ERROR(run_op<ScaledDotProductAttentionOp>({q, k, v, filled<double>({4, 6})}, false, 0.0),
                   InvalidArgument, {"mask", "f64", "expected bool or f32"});
  // A mask before key_lengths: the operands' order is q, k, v, key_lengths, mask.
  KILN_CHECK_ERROR(run_op<ScaledDotProductAttentionOp>(
                       {q, k, v, filled<float>({4, 6}), Tensor::from_vector<std::int32_t>({2}, {6, 6})}, false, 0.0),
                   InvalidArgument, {"key_lengths (int32 or int64), a mask", "operand #4 being i32"});
}

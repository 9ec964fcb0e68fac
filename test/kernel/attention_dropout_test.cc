// Kernel tests of attention dropout (kiln.scaled_dot_product_attention's
// dropout_p and dropout_key, kiln/kernel/attention_dropout.h) on the CPU:
// the forward, its gradient and a float mask's gradient against a plain
// f64 reference that drops exactly the probabilities the rule drops (to
// 1e-12); the keep rate and the expectation; is_test; keys; layouts and
// grouped-query attention; bad dropout operands.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kernel/kernel_test_util.h"
#include "kiln/kernel/attention_dropout.h"

using namespace kiln;
using namespace kiln_test;

namespace {

struct DropoutShape {
  std::int64_t b, h, hk, lq, lk, d, dv;
};

Tensor key_tensor(std::uint64_t key) { return Tensor::from_vector<std::uint64_t>({1}, {key}); }

// out, dq, dk, dv and dS ([B·H, Lq, Lk]) of attention with dropout over
// q [B, H, Lq, D], k [B, Hk, Lk, D], v [B, Hk, Lk, Dv] (BHLD) in f64,
// the probability matrix materialized; lens: key counts per batch (empty:
// all); bias [B·H, Lq, Lk] added to the scores (empty: none).
struct DropoutReference {
  std::vector<double> out, dq, dk, dv, ds;
};
DropoutReference dropout_reference(const DropoutShape& s, const std::vector<double>& q, const std::vector<double>& k,
                    const std::vector<double>& v, const std::vector<double>& dout, bool causal,
                    const AttentionDropout& drop, const std::vector<std::int64_t>& lens = {},
                    const std::vector<double>& bias = {}) {
  DropoutReference r{std::vector<double>(s.b * s.h * s.lq * s.dv), std::vector<double>(q.size()),
              std::vector<double>(k.size()), std::vector<double>(v.size()),
              std::vector<double>(s.b * s.h * s.lq * s.lk)};
  const double scale = 1 / std::sqrt(double(s.d));
  for (std::int64_t bh = 0; bh < s.b * s.h; ++bh) {
    const std::int64_t kv = bh / (s.h / s.hk), n = lens.empty() ? s.lk : lens[bh / s.h];
    auto K = [&](std::int64_t j, std::int64_t c) -> double { return k[(kv * s.lk + j) * s.d + c]; };
    auto V = [&](std::int64_t j, std::int64_t c) -> double { return v[(kv * s.lk + j) * s.dv + c]; };
    for (std::int64_t i = 0; i < s.lq; ++i) {
      const double* qi = &q[(bh * s.lq + i) * s.d];
      const double* doi = &dout[(bh * s.lq + i) * s.dv];
      std::vector<double> p(s.lk, 0.0), z(s.lk, 0.0), dp(s.lk, 0.0);
      double m = -std::numeric_limits<double>::infinity(), sum = 0, dot = 0;
      for (std::int64_t j = 0; j < n && (!causal || j <= i); ++j) {
        for (std::int64_t c = 0; c < s.d; ++c) p[j] += qi[c] * K(j, c);
        p[j] = p[j] * scale + (bias.empty() ? 0.0 : bias[(bh * s.lq + i) * s.lk + j]);
        m = std::max(m, p[j]);
      }
      const std::int64_t seen = causal ? std::min(n, i + 1) : n;
      for (std::int64_t j = 0; j < seen; ++j) sum += std::exp(p[j] - m);
      for (std::int64_t j = 0; j < s.lk; ++j) {
        p[j] = j < seen ? std::exp(p[j] - m) / sum : 0.0;
        z[j] = drop.keep(bh * s.lq + i, j) ? drop.scale : 0.0;
        for (std::int64_t c = 0; c < s.dv; ++c) {
          r.out[(bh * s.lq + i) * s.dv + c] += p[j] * z[j] * V(j, c);
          dp[j] += doi[c] * V(j, c);
        }
        dot += p[j] * z[j] * dp[j];
      }
      for (std::int64_t j = 0; j < s.lk; ++j) {
        const double ds = p[j] * (z[j] * dp[j] - dot);
        r.ds[(bh * s.lq + i) * s.lk + j] = ds;
        for (std::int64_t c = 0; c < s.dv; ++c) r.dv[(kv * s.lk + j) * s.dv + c] += p[j] * z[j] * doi[c];
        for (std::int64_t c = 0; c < s.d; ++c) {
          r.dq[(bh * s.lq + i) * s.d + c] += scale * ds * K(j, c);
          r.dk[(kv * s.lk + j) * s.d + c] += scale * ds * qi[c];
        }
      }
    }
  }
  return r;
}

using DropoutAttrs = ScaledDotProductAttentionOp::Attributes;

DropoutAttrs with_dropout(bool causal, double p, std::string layout = "BHLD", bool is_test = false) {
  return {causal, 0.0, std::move(layout), p, is_test};
}

struct DropoutOperands {
  Tensor q, k, v, dout;
};
DropoutOperands dropout_operands(const DropoutShape& s) {
  return {filled<double>({s.b, s.h, s.lq, s.d}, -1, 1, 1), filled<double>({s.b, s.hk, s.lk, s.d}, -1, 1, 2),
          filled<double>({s.b, s.hk, s.lk, s.dv}, -1, 1, 3), filled<double>({s.b, s.h, s.lq, s.dv}, -1, 1, 4)};
}

// The forward and gradient with dropout p under `key` (optionals: key
// lengths and / or a mask before the key) against the reference.
void check_dropout(const DropoutShape& s, bool causal, double p, std::uint64_t key,
                   const std::vector<std::int64_t>& lens = {}) {
  INFO("B " << s.b << " H " << s.h << "/" << s.hk << " Lq " << s.lq << " Lk " << s.lk << " causal " << causal
            << " p " << p << " lens " << lens.size());
  const DropoutOperands x = dropout_operands(s);
  const AttentionDropout drop = attention_dropout(p, key, s.lk);
  const DropoutReference r = dropout_reference(s, x.q.to_vector<double>(), x.k.to_vector<double>(), x.v.to_vector<double>(),
                                x.dout.to_vector<double>(), causal, drop, lens);
  std::vector<Tensor> in{x.q, x.k, x.v};
  if (!lens.empty()) in.push_back(Tensor::from_vector<std::int64_t>({s.b}, lens));
  in.push_back(key_tensor(key));
  auto fwd = run_op<ScaledDotProductAttentionOp>(in, with_dropout(causal, p));
  check_close(fwd.out(0), r.out, 1e-12, 1e-12);
  std::vector<Tensor> gin{x.q, x.k, x.v, fwd.out(0), fwd.out(1), x.dout};
  gin.insert(gin.end(), in.begin() + 3, in.end());
  auto bwd = run_op<GradOf<ScaledDotProductAttentionOp>>(gin, causal, 0.0, std::string("BHLD"), p, false);
  check_close(bwd.out(0), r.dq, 1e-11, 1e-12);
  check_close(bwd.out(1), r.dk, 1e-11, 1e-12);
  check_close(bwd.out(2), r.dv, 1e-11, 1e-12);
}

}  // namespace

TEST_CASE("attention dropout drops the probabilities its rule draws, forward and gradient alike",
          "[kernel][attention][dropout]") {
  for (bool causal : {false, true}) {
    check_dropout({2, 3, 3, 5, 7, 4, 3}, causal, 0.3, 11);
    check_dropout({1, 2, 2, 70, 66, 8, 8}, causal, 0.1, 12);      // two query tiles
    check_dropout({2, 2, 2, 9, 13, 4, 5}, causal, 0.5, 13, {13, 6});  // key lengths
    check_dropout({1, 4, 2, 6, 9, 4, 4}, causal, 0.2, 14);       // grouped-query attention
    check_dropout({1, 4, 1, 5, 8, 2, 3}, causal, 0.6, 15, {3});  // multi-query, key lengths
  }
}

TEST_CASE("attention dropout reaches a float mask's gradient", "[kernel][attention][dropout][mask]") {
  const DropoutShape s{2, 2, 2, 6, 9, 4, 3};
  const DropoutOperands x = dropout_operands(s);
  const Tensor mask = filled<double>({1, 2, 6, 9}, -2, 2, 9);  // per head, shared by the batches
  std::vector<double> bias;
  for (std::int64_t b = 0; b < s.b; ++b) {
    const std::vector<double> m = mask.to_vector<double>();
    bias.insert(bias.end(), m.begin(), m.end());
  }
  const AttentionDropout drop = attention_dropout(0.25, 7, s.lk);
  const DropoutReference r = dropout_reference(s, x.q.to_vector<double>(), x.k.to_vector<double>(), x.v.to_vector<double>(),
                                x.dout.to_vector<double>(), true, drop, {}, bias);
  auto fwd = run_op<ScaledDotProductAttentionOp>({x.q, x.k, x.v, mask, key_tensor(7)}, with_dropout(true, 0.25));
  check_close(fwd.out(0), r.out, 1e-12, 1e-12);
  const std::vector<Tensor> gin{x.q, x.k, x.v, fwd.out(0), fwd.out(1), x.dout, mask, key_tensor(7)};
  auto bwd = run_op<GradOf<ScaledDotProductAttentionOp>>(gin, true, 0.0, std::string("BHLD"), 0.25, false);
  check_close(bwd.out(0), r.dq, 1e-11, 1e-12);
  auto mg = run_op<AttentionMaskGradOp>(gin, with_dropout(true, 0.25));
  std::vector<double> dmask(static_cast<std::size_t>(2 * 6 * 9), 0.0);
  for (std::size_t e = 0; e < r.ds.size(); ++e) dmask[e % dmask.size()] += r.ds[e];
  check_close(mg.out(0), dmask, 1e-11, 1e-12);
}

TEST_CASE("attention dropout keeps about 1 - p of the probabilities and leaves the expectation unchanged",
          "[kernel][attention][dropout]") {
  // q = 0: every probability of a row is 1 / Lk, so with v all ones each
  // output is (kept keys / Lk) · scale (the inverse keep rate): 1 on average.
  const std::int64_t lq = 64, lk = 2048;
  const Tensor q = Tensor::from_vector<double>({1, 1, lq, 4}, std::vector<double>(lq * 4, 0.0));
  const Tensor k = filled<double>({1, 1, lk, 4}, -1, 1, 2);
  const Tensor v = Tensor::from_vector<double>({1, 1, lk, 1}, std::vector<double>(lk, 1.0));
  for (double p : {0.1, 0.5, 0.9}) {
    INFO("p " << p);
    const auto out = run_op<ScaledDotProductAttentionOp>({q, k, v, key_tensor(3)}, with_dropout(false, p))
                         .out(0)
                         .to_vector<double>();
    double mean = 0;
    for (double o : out) mean += o / lq;
    const double kept = mean * (1 - p);
    CHECK(std::abs(kept - (1 - p)) < 0.01);
    CHECK(std::abs(mean - 1) < 0.02);
    const double scale = attention_dropout(p, 3, lk).scale;  // 1 / (1 - p) to within 2⁻¹⁷
    for (double o : out) {  // each row: a whole number of kept keys
      const double keys = o / scale * lk;
      CHECK(std::abs(keys - std::round(keys)) < 1e-6);
    }
  }
}

TEST_CASE("attention dropout draws another mask under another key and the same under the same",
          "[kernel][attention][dropout]") {
  const DropoutShape s{1, 2, 2, 8, 12, 4, 4};
  const DropoutOperands x = dropout_operands(s);
  auto run = [&](std::uint64_t key) {
    return run_op<ScaledDotProductAttentionOp>({x.q, x.k, x.v, key_tensor(key)}, with_dropout(false, 0.5))
        .out(0)
        .to_vector<double>();
  };
  CHECK(run(21) == run(21));
  CHECK(run(21) != run(22));
}

TEST_CASE("attention under is_test or with dropout_p 0 gives the results without dropout, bit for bit",
          "[kernel][attention][dropout]") {
  const DropoutShape s{2, 2, 2, 6, 9, 4, 4};
  const DropoutOperands x = dropout_operands(s);
  const auto plain = run_op<ScaledDotProductAttentionOp>({x.q, x.k, x.v}, true, 0.0).out(0).to_vector<double>();
  CHECK(run_op<ScaledDotProductAttentionOp>({x.q, x.k, x.v, key_tensor(5)}, with_dropout(true, 0.5, "BHLD", true))
            .out(0)
            .to_vector<double>() == plain);
  CHECK(run_op<ScaledDotProductAttentionOp>({x.q, x.k, x.v}, with_dropout(true, 0.5, "BHLD", true))
            .out(0)
            .to_vector<double>() == plain);
  CHECK(run_op<ScaledDotProductAttentionOp>({x.q, x.k, x.v, key_tensor(5)}, with_dropout(true, 0.0))
            .out(0)
            .to_vector<double>() == plain);
}

TEST_CASE("attention dropout in layout BLHD drops what BHLD drops", "[kernel][attention][dropout]") {
  const DropoutShape s{2, 3, 3, 7, 10, 4, 5};
  const DropoutOperands x = dropout_operands(s);
  const Tensor key = key_tensor(9);
  auto fwd = run_op<ScaledDotProductAttentionOp>({x.q, x.k, x.v, key}, with_dropout(true, 0.4));
  auto bwd = run_op<GradOf<ScaledDotProductAttentionOp>>({x.q, x.k, x.v, fwd.out(0), fwd.out(1), x.dout, key}, true,
                                                          0.0, std::string("BHLD"), 0.4, false);
  const Tensor sq = swap12<double>(x.q), sk = swap12<double>(x.k), sv = swap12<double>(x.v),
               sd = swap12<double>(x.dout);
  auto f2 = run_op<ScaledDotProductAttentionOp>({sq, sk, sv, key}, with_dropout(true, 0.4, "BLHD"));
  CHECK(f2.out(0).to_vector<double>() == swap12<double>(fwd.out(0)).to_vector<double>());
  auto b2 = run_op<GradOf<ScaledDotProductAttentionOp>>({sq, sk, sv, f2.out(0), f2.out(1), sd, key}, true, 0.0,
                                                         std::string("BLHD"), 0.4, false);
  for (int i = 0; i < 3; ++i) {
    INFO("gradient #" << i);
    CHECK(b2.out(i).to_vector<double>() == swap12<double>(bwd.out(i)).to_vector<double>());
  }
}

TEST_CASE("attention refuses a bad dropout_p or dropout_key, naming the op", "[kernel][attention][dropout]") {
  Program p;
  const TypeSpec q{DataType::Float32, {1, 2, 4, 8}}, key{DataType::UInt64, {1}};
  for (double bad : {1.0, -0.1, std::nan("")})
    KILN_CHECK_ERROR(build_op<ScaledDotProductAttentionOp>(p, {q, q, q, key}, with_dropout(false, bad)),
                     InvalidArgument, {"kiln.scaled_dot_product_attention", "dropout_p must lie in [0, 1)"});
  KILN_CHECK_ERROR(build_op<ScaledDotProductAttentionOp>(p, {q, q, q}, with_dropout(false, 0.1)), InvalidArgument,
                   {"kiln.scaled_dot_product_attention", "no dropout_key operand"});
  KILN_CHECK_ERROR(
      build_op<ScaledDotProductAttentionOp>(p, {q, q, q, {DataType::UInt64, {2}}}, with_dropout(false, 0.1)),
      InvalidArgument, {"dropout_key (operand #3) is u64 [2], expected u64 [1]"});
  KILN_CHECK_ERROR(build_op<ScaledDotProductAttentionOp>(p, {q, q, q, key, {DataType::Bool, {4, 4}}},
                                                         with_dropout(false, 0.1)),
                   InvalidArgument, {"in that order"});
  CHECK_NOTHROW(build_op<ScaledDotProductAttentionOp>(p, {q, q, q}, with_dropout(false, 0.1, "BHLD", true)));
}

TEST_CASE("attention dropout's rule scales kept scores by the inverse keep rate and drops nothing for a p "
          "below its resolution",
          "[kernel][attention][dropout]") {
  for (double p : {0.1, 0.5, 1.0 / 3, 0.999, 0.99999}) {
    INFO("p " << p);
    const AttentionDropout d = attention_dropout(p, 1, 16);
    REQUIRE(d.active());
    CHECK(d.scale * (65536 - d.threshold) == 65536);  // unbiased: keep rate times scale is 1
    CHECK(std::abs(d.threshold / 65536.0 - p) <= 0x1p-17);
  }
  CHECK(attention_dropout(0.1, 1, 16).scale == Approx(1 / 0.9).epsilon(1e-4));
  CHECK_FALSE(attention_dropout(1e-6, 1, 16).active());
  CHECK_FALSE(attention_dropout(0.0, 1, 16).active());
  // The kernel: a p that drops nothing gives the results without dropout.
  const DropoutShape s{1, 2, 2, 5, 6, 4, 4};
  const DropoutOperands x = dropout_operands(s);
  CHECK(run_op<ScaledDotProductAttentionOp>({x.q, x.k, x.v, key_tensor(3)}, with_dropout(false, 1e-6))
            .out(0)
            .to_vector<double>() ==
        run_op<ScaledDotProductAttentionOp>({x.q, x.k, x.v}, false, 0.0).out(0).to_vector<double>());
}

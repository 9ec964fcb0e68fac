// Kernel tests of grouped-query attention (kiln.scaled_dot_product_attention
// with k and v of fewer heads than q) on the CPU: every result equals
// multi-head attention over k and v repeated to q's heads, dk and dv that
// attention's summed per group; with causal, key_lengths, masks (and a float
// mask's gradient), several query tiles, both layouts; f64 to 1e-12.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kernel/kernel_test_util.h"

using namespace kiln;
using namespace kiln_test;

namespace {

// [B, Hk, L, W] → [B, Hk · group, L, W]: head j copied to heads
// j · group .. j · group + group - 1.
Tensor repeat_heads(const Tensor& t, std::int64_t group) {
  const Dims& d = t.dims();
  const std::vector<double> x = t.to_vector<double>();
  const std::int64_t plane = d[2] * d[3];
  std::vector<double> y;
  for (std::int64_t b = 0; b < d[0]; ++b)
    for (std::int64_t h = 0; h < d[1] * group; ++h) {
      const auto from = x.begin() + (b * d[1] + h / group) * plane;
      y.insert(y.end(), from, from + plane);
    }
  return Tensor::from_vector<double>({d[0], d[1] * group, d[2], d[3]}, y);
}

// The other way: [B, H, L, W] summed over each group of heads → [B, H / group, L, W].
std::vector<double> sum_groups(const Tensor& t, std::int64_t group) {
  const Dims& d = t.dims();
  const std::vector<double> x = t.to_vector<double>();
  const std::int64_t plane = d[2] * d[3], hk = d[1] / group;
  std::vector<double> y(static_cast<std::size_t>(d[0] * hk * plane), 0.0);
  for (std::int64_t b = 0; b < d[0]; ++b)
    for (std::int64_t h = 0; h < d[1]; ++h)
      for (std::int64_t e = 0; e < plane; ++e)
        y[static_cast<std::size_t>((b * hk + h / group) * plane + e)] +=
            x[static_cast<std::size_t>((b * d[1] + h) * plane + e)];
  return y;
}

struct GroupedCase {
  std::int64_t b, h, hk, lq, lk, d, dv;
  bool causal;
  std::vector<Tensor> optionals;  // key_lengths and / or a mask, as the op takes them
};

// Grouped attention on q [B, H, ..], k and v [B, Hk, ..] against
// multi-head attention on k and v repeated; in layout BLHD too (the same
// numbers, transposed).
void check_grouped(const GroupedCase& c) {
  INFO("B " << c.b << " H " << c.h << " Hk " << c.hk << " Lq " << c.lq << " Lk " << c.lk << " causal "
            << c.causal << " optionals " << c.optionals.size());
  const std::int64_t group = c.h / c.hk;
  const Tensor q = filled<double>({c.b, c.h, c.lq, c.d}, -1, 1, 1), k = filled<double>({c.b, c.hk, c.lk, c.d}, -1, 1, 2),
               v = filled<double>({c.b, c.hk, c.lk, c.dv}, -1, 1, 3),
               dout = filled<double>({c.b, c.h, c.lq, c.dv}, -1, 1, 4);
  const Tensor rk = repeat_heads(k, group), rv = repeat_heads(v, group);
  const bool float_mask = !c.optionals.empty() && c.optionals.back().dtype() == DataType::Float64;
  for (const std::string layout : {"BHLD", "BLHD"}) {
    INFO("layout " << layout);
    const bool inner = layout == "BLHD";
    auto in = [&](const Tensor& t) { return inner ? swap12<double>(t) : t; };
    auto back = [&](const Tensor& t) { return inner ? swap12<double>(t) : t; };
    auto with = [&](std::vector<Tensor> v) {
      v.insert(v.end(), c.optionals.begin(), c.optionals.end());
      return v;
    };
    auto want = run_op<ScaledDotProductAttentionOp>(with({in(q), in(rk), in(rv)}), c.causal, 0.0, layout);
    auto got = run_op<ScaledDotProductAttentionOp>(with({in(q), in(k), in(v)}), c.causal, 0.0, layout);
    check_close(got.out(0), want.out(0).to_vector<double>(), 1e-12, 1e-12);
    CHECK(got.out(1).to_vector<double>() == want.out(1).to_vector<double>());
    const std::vector<Tensor> mha = with({in(q), in(rk), in(rv), want.out(0), want.out(1), in(dout)});
    const std::vector<Tensor> gqa = with({in(q), in(k), in(v), got.out(0), got.out(1), in(dout)});
    auto wg = run_op<GradOf<ScaledDotProductAttentionOp>>(mha, c.causal, 0.0, layout);
    auto gg = run_op<GradOf<ScaledDotProductAttentionOp>>(gqa, c.causal, 0.0, layout);
    CHECK(gg.out(1).dims() == in(k).dims());
    CHECK(gg.out(2).dims() == in(v).dims());
    check_close(back(gg.out(0)), back(wg.out(0)).to_vector<double>(), 1e-12, 1e-12);
    check_close(back(gg.out(1)), sum_groups(back(wg.out(1)), group), 1e-12, 1e-12);
    check_close(back(gg.out(2)), sum_groups(back(wg.out(2)), group), 1e-12, 1e-12);
    if (!float_mask) continue;
    auto wm = run_op<AttentionMaskGradOp>(mha, c.causal, 0.0, layout);
    auto gm = run_op<AttentionMaskGradOp>(gqa, c.causal, 0.0, layout);
    check_close(gm.out(0), wm.out(0).to_vector<double>(), 1e-12, 1e-12);
  }
}

}  // namespace

TEST_CASE("grouped-query attention equals attention over k and v repeated to q's heads",
          "[kernel][attention][gqa]") {
  for (bool causal : {false, true}) {
    check_grouped({2, 4, 2, 5, 7, 4, 3, causal, {}});    // two query heads per k / v head
    check_grouped({1, 6, 1, 70, 66, 8, 8, causal, {}});  // multi-query: one k / v head, two query tiles
    check_grouped({2, 6, 3, 4, 9, 3, 5, causal, {}});    // Dv != D
    check_grouped({4, 8, 2, 9, 9, 4, 4, causal, {}});    // four query heads per k / v head
  }
}

TEST_CASE("grouped-query attention takes key_lengths and masks, and a float mask gets its gradient",
          "[kernel][attention][gqa][mask]") {
  const Tensor lengths = Tensor::from_vector<std::int32_t>({2}, {5, 2});
  std::vector<double> bias = filled<double>({4, 6, 7}, -2, 2, 9).to_vector<double>();
  for (std::size_t i = 3; i < bias.size(); i += 7) bias[i] = -std::numeric_limits<double>::infinity();
  const Tensor fmask = Tensor::from_vector<double>({4, 6, 7}, bias);  // per query head, row and key
  Tensor bmask = Tensor::empty(Dims({2, 1, 1, 7}), DataType::Bool);   // per batch and key
  for (std::int64_t i = 0; i < 14; ++i) bmask.data<bool>()[i] = i % 5 != 1;
  for (bool causal : {false, true}) {
    check_grouped({2, 4, 2, 6, 7, 4, 3, causal, {lengths}});
    check_grouped({2, 4, 1, 6, 7, 4, 3, causal, {fmask}});
    check_grouped({2, 4, 2, 6, 7, 4, 3, causal, {lengths, bmask}});
  }
}

TEST_CASE("scaled_dot_product_attention refuses k and v heads that do not divide q's, naming the op",
          "[kernel][attention][gqa]") {
  const Tensor q = filled<float>({1, 4, 3, 2}), k3 = filled<float>({1, 3, 5, 2}), v3 = filled<float>({1, 3, 5, 2}),
               k2 = filled<float>({1, 2, 5, 2}), v1 = filled<float>({1, 1, 5, 2});
  KILN_CHECK_ERROR(run_op<ScaledDotProductAttentionOp>({q, k3, v3}, false, 0.0), InvalidArgument,
                   {"'kiln.scaled_dot_product_attention'", "divides q's"});
  KILN_CHECK_ERROR(run_op<ScaledDotProductAttentionOp>({q, k2, v1}, false, 0.0), InvalidArgument,
                   {"'kiln.scaled_dot_product_attention'", "k and v with one head count"});
}

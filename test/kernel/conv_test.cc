// Kernel tests of the ops of kiln/dialect/conv_ops.h: hand-computed values,
// and every stride / padding / dilation / groups combination against a
// direct six-loop reference.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <cstring>
#include <string>
#include <vector>

#include "../../kernels/cpu/pointwise_depthwise.h"
#include "kernel/kernel_test_util.h"
#include "kiln/kernel/cpu_convolution.h"

using namespace kiln;
using namespace kiln_test;

namespace {
using V = std::vector<std::int64_t>;

struct Cfg {
  V x, w;  // x [N, C, H, W], w [O, C/g, kh, kw]
  V strides, paddings, dilations;
  std::int64_t groups;
};

std::array<std::int64_t, 4> pads(const V& p) {
  return p.size() == 2 ? std::array<std::int64_t, 4>{p[0], p[0], p[1], p[1]}
                       : std::array<std::int64_t, 4>{p[0], p[1], p[2], p[3]};
}

// Direct conv2d: out, and the grads dx, dw for a given dout.
struct Ref {
  std::vector<double> out, dx, dw;
  V out_dims;
};
Ref reference(const Cfg& c, const std::vector<double>& x, const std::vector<double>& w,
              const std::vector<double>* dout) {
  const auto p = pads(c.paddings);
  const std::int64_t N = c.x[0], C = c.x[1], H = c.x[2], W = c.x[3];
  const std::int64_t O = c.w[0], Cg = c.w[1], KH = c.w[2], KW = c.w[3], G = c.groups, Og = O / G;
  const std::int64_t Ho = (H + p[0] + p[1] - c.dilations[0] * (KH - 1) - 1) / c.strides[0] + 1;
  const std::int64_t Wo = (W + p[2] + p[3] - c.dilations[1] * (KW - 1) - 1) / c.strides[1] + 1;
  Ref r;
  r.out_dims = {N, O, Ho, Wo};
  r.out.assign(N * O * Ho * Wo, 0.0);
  r.dx.assign(x.size(), 0.0);
  r.dw.assign(w.size(), 0.0);
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t o = 0; o < O; ++o)
      for (std::int64_t oh = 0; oh < Ho; ++oh)
        for (std::int64_t ow = 0; ow < Wo; ++ow) {
          const std::int64_t oi = ((n * O + o) * Ho + oh) * Wo + ow;
          for (std::int64_t cg = 0; cg < Cg; ++cg)
            for (std::int64_t i = 0; i < KH; ++i)
              for (std::int64_t j = 0; j < KW; ++j) {
                const std::int64_t ih = oh * c.strides[0] - p[0] + i * c.dilations[0];
                const std::int64_t iw = ow * c.strides[1] - p[2] + j * c.dilations[1];
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                const std::int64_t ci = (o / Og) * Cg + cg;
                const std::int64_t xi = ((n * C + ci) * H + ih) * W + iw;
                const std::int64_t wi = ((o * Cg + cg) * KH + i) * KW + j;
                r.out[oi] += x[xi] * w[wi];
                if (dout) {
                  r.dx[xi] += (*dout)[oi] * w[wi];
                  r.dw[wi] += (*dout)[oi] * x[xi];
                }
              }
        }
  return r;
}

std::vector<Cfg> configs() {
  return {
      {{2, 3, 5, 6}, {4, 3, 3, 3}, {1, 1}, {0, 0}, {1, 1}, 1},
      {{2, 3, 5, 6}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
      {{1, 2, 7, 6}, {3, 2, 3, 2}, {2, 3}, {1, 2}, {1, 1}, 1},
      {{2, 4, 6, 7}, {6, 2, 3, 3}, {1, 2}, {2, 1}, {2, 1}, 2},
      {{1, 3, 8, 8}, {3, 1, 3, 3}, {2, 2}, {0, 1, 2, 0}, {1, 2}, 3},
      {{3, 5, 4, 4}, {2, 5, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1},  // 1x1: no im2col
      {{2, 1, 12, 12}, {6, 1, 5, 5}, {1, 1}, {2, 2}, {1, 1}, 1},  // LeNet's first conv
      // rows wider than one 16-lane SIMD chunk (the vector im2col / col2im)
      {{1, 2, 9, 37}, {3, 2, 3, 5}, {1, 1}, {1, 3}, {2, 1}, 1},
      {{2, 1, 20, 20}, {2, 1, 5, 5}, {1, 1}, {2, 2}, {1, 1}, 1},
      {{1, 4, 9, 33}, {2, 2, 3, 3}, {2, 1}, {1, 0, 2, 1}, {1, 3}, 2},
      // few output channels, stride 1: the direct AVX-512 convolution
      // (rows of 28, 32 and 19 outputs: one full and one partial vector)
      {{2, 1, 28, 28}, {6, 1, 5, 5}, {1, 1}, {2, 2}, {1, 1}, 1},  // LeNet's first conv, full size
      {{1, 3, 6, 34}, {8, 3, 3, 3}, {1, 1}, {1, 0, 0, 0}, {1, 1}, 1},
      {{2, 2, 5, 19}, {3, 2, 2, 4}, {1, 1}, {0, 1, 1, 2}, {1, 1}, 1},
      // channel counts beyond one 16-channel block, partly filled (oneDNN's
      // blocked layouts): depthwise as MobileNet's, with a channel
      // multiplier, a 7x7 stem with stride 2, a 3x3 residual block's conv
      {{2, 20, 9, 9}, {20, 1, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 20},
      {{1, 8, 6, 6}, {16, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 8},
      {{1, 3, 16, 16}, {18, 3, 7, 7}, {2, 2}, {3, 3}, {1, 1}, 1},
      {{2, 24, 7, 7}, {36, 24, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
      {{1, 32, 5, 5}, {32, 4, 3, 3}, {1, 1}, {2, 1, 0, 2}, {2, 2}, 8},
      // more depthwise: long rows, stride 2 with uneven padding, 5x5
      // (EfficientNet's), a kernel wider than the image, one output column
      {{2, 3, 6, 37}, {3, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 3},
      {{2, 5, 11, 20}, {5, 1, 3, 3}, {2, 2}, {0, 1, 1, 0}, {1, 1}, 5},
      {{1, 4, 9, 9}, {4, 1, 5, 5}, {1, 1}, {2, 2}, {1, 1}, 4},
      {{1, 2, 3, 4}, {2, 1, 5, 7}, {1, 2}, {2, 3}, {1, 1}, 2},
      {{3, 2, 7, 5}, {2, 1, 3, 3}, {3, 3}, {0, 0}, {1, 1}, 2},
  };
}

template <typename T>
void check_against_reference(const std::vector<Cfg>& cases = configs()) {
  std::uint32_t seed = 3;
  for (const Cfg& c : cases) {
    INFO("x " << Dims(c.x).to_string() << " w " << Dims(c.w).to_string() << " groups "
              << c.groups);
    Tensor x = filled<T>(Dims(c.x), -1, 1, ++seed), w = filled<T>(Dims(c.w), -1, 1, ++seed);
    auto xd = x.to_vector<T>(), wd = w.to_vector<T>();
    std::vector<double> xv(xd.begin(), xd.end()), wv(wd.begin(), wd.end());
    Ref r0 = reference(c, xv, wv, nullptr);
    Tensor dout = filled<T>(Dims(r0.out_dims), -1, 1, ++seed);
    auto dd = dout.to_vector<T>();
    std::vector<double> dv(dd.begin(), dd.end());
    Ref r = reference(c, xv, wv, &dv);
    const double tol = sizeof(T) == 4 ? 1e-4 : 1e-12;
    auto as_t = [](const std::vector<double>& v) { return std::vector<T>(v.begin(), v.end()); };

    auto fwd = run_op<Conv2dOp>({x, w}, c.strides, c.paddings, c.dilations, c.groups);
    CHECK(fwd.out().dims().to_vector() == r.out_dims);
    check_close<T>(fwd.out(), as_t(r.out), tol, tol);

    auto grad = run_op<GradOf<Conv2dOp>>({x, w, dout}, c.strides, c.paddings, c.dilations,
                                         c.groups);
    check_close<T>(grad.out(0), as_t(r.dx), tol, tol);
    check_close<T>(grad.out(1), as_t(r.dw), tol, tol);

    // conv2d_transpose(dout, w) is conv2d's input grad; its input grad is
    // conv2d(x', w) and its weight grad conv2d's weight grad with x, dout swapped.
    V op{0, 0};
    for (int i = 0; i < 2; ++i) {
      const auto p = pads(c.paddings);
      const std::int64_t in = c.x[2 + i], k = c.w[2 + i], s = c.strides[i], d = c.dilations[i];
      const std::int64_t back = (r0.out_dims[2 + i] - 1) * s - p[2 * i] - p[2 * i + 1] +
                                d * (k - 1) + 1;
      op[i] = in - back;  // the rows conv2d's last window skipped
    }
    if (op[0] < std::max(c.strides[0], c.dilations[0]) &&
        op[1] < std::max(c.strides[1], c.dilations[1])) {
      auto tr = run_op<Conv2dTransposeOp>({dout, w}, c.strides, c.paddings, op, c.dilations,
                                          c.groups);
      CHECK(tr.out().dims().to_vector() == c.x);
      check_close<T>(tr.out(), as_t(r.dx), tol, tol);
      auto trg = run_op<GradOf<Conv2dTransposeOp>>({dout, w, x}, c.strides, c.paddings, op,
                                                   c.dilations, c.groups);
      // d/d dout of <conv2d_transpose(dout, w), x> = conv2d(x, w); d/dw = dw(x, dout).
      check_close<T>(trg.out(0), as_t(r.out), tol, tol);
      check_close<T>(trg.out(1), as_t(r.dw), tol, tol);
    }
  }
}
}  // namespace

TEST_CASE("conv2d computes hand-checked sums without padding", "[kernel][conv]") {
  Tensor x = Tensor::from_vector<float>({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  Tensor w = Tensor::from_vector<float>({1, 1, 2, 2}, {1, 0, 0, 1});
  auto r = run_op<Conv2dOp>({x, w}, V{1, 1}, V{0, 0}, V{1, 1}, std::int64_t{1});
  CHECK(r.out().dims().to_vector() == V{1, 1, 2, 2});
  check_close<float>(r.out(), {6, 8, 12, 14});
}

TEST_CASE("conv2d with padding 1 and stride 2 sums the windows that overlap the image",
          "[kernel][conv]") {
  Tensor x = Tensor::from_vector<float>({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  Tensor w = Tensor::from_vector<float>({1, 1, 3, 3}, std::vector<float>(9, 1.0f));
  auto r = run_op<Conv2dOp>({x, w}, V{2, 2}, V{1, 1}, V{1, 1}, std::int64_t{1});
  CHECK(r.out().dims().to_vector() == V{1, 1, 2, 2});
  check_close<float>(r.out(), {12, 16, 24, 28});
}

TEST_CASE("conv2d's grad op gives hand-checked dx and dw", "[kernel][conv]") {
  Tensor x = Tensor::from_vector<double>({1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor w = Tensor::from_vector<double>({1, 1, 1, 1}, {2});
  Tensor dout = Tensor::from_vector<double>({1, 1, 2, 2}, {1, 1, 1, 1});
  auto r = run_op<GradOf<Conv2dOp>>({x, w, dout}, V{1, 1}, V{0, 0}, V{1, 1}, std::int64_t{1});
  check_close<double>(r.out(0), {2, 2, 2, 2});
  check_close<double>(r.out(1), {10});
}

TEST_CASE("conv2d_transpose scatters each input over a stride-spaced kernel", "[kernel][conv]") {
  // x [1, 1, 2, 2], w all ones 2x2, stride 2: each input fills its own 2x2 block.
  Tensor x = Tensor::from_vector<float>({1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor w = Tensor::from_vector<float>({1, 1, 2, 2}, {1, 1, 1, 1});
  auto r = run_op<Conv2dTransposeOp>({x, w}, V{2, 2}, V{0, 0}, V{0, 0}, V{1, 1}, std::int64_t{1});
  CHECK(r.out().dims().to_vector() == V{1, 1, 4, 4});
  check_close<float>(r.out(), {1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4});
  // Stride 1: overlapping blocks add up.
  auto s1 = run_op<Conv2dTransposeOp>({x, w}, V{1, 1}, V{0, 0}, V{0, 0}, V{1, 1}, std::int64_t{1});
  CHECK(s1.out().dims().to_vector() == V{1, 1, 3, 3});
  check_close<float>(s1.out(), {1, 3, 2, 4, 10, 6, 3, 7, 4});
}

TEST_CASE("conv2d, its grad and conv2d_transpose match a direct reference in f32",
          "[kernel][conv]") {
  check_against_reference<float>();
}

TEST_CASE("conv2d's grad matches the reference at batches that split into unequal slices, channels "
          "in oneDNN's blocked layouts", "[kernel][conv]") {
  // The weight gradient is a sum over four slices of the batch, read from
  // the data gradient's blocked dout: batches 5 and 7 give slices of
  // unequal sizes, 2 and 3 fewer slices than four.
  check_against_reference<float>({
      {{5, 16, 9, 9}, {32, 16, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
      {{7, 32, 8, 8}, {16, 32, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 1},
      {{2, 24, 7, 7}, {40, 24, 3, 3}, {1, 1}, {0, 0}, {1, 1}, 1},
      {{3, 16, 10, 10}, {48, 16, 5, 5}, {1, 1}, {2, 2}, {1, 1}, 1},
      {{6, 32, 8, 8}, {32, 8, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 4},
  });
}

TEST_CASE("conv2d, its grad and conv2d_transpose match a direct reference in f64",
          "[kernel][conv]") {
  check_against_reference<double>();
}

TEST_CASE("fused_conv2d gives conv2d plus the channel's bias, through relu when asked",
          "[kernel][conv]") {
  // Two output channels: the identity-like kernel and its negation.
  Tensor x = Tensor::from_vector<float>({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  Tensor w = Tensor::from_vector<float>({2, 1, 2, 2}, {1, 0, 0, 1, -1, 0, 0, -1});
  Tensor bias = Tensor::from_vector<float>({2}, {0.5f, 10.f});
  auto plain = run_op<FusedConv2dOp>({x, w, bias}, V{1, 1}, V{0, 0}, V{1, 1}, std::int64_t{1},
                                     std::string("none"));
  check_close<float>(plain.out(), {6.5f, 8.5f, 12.5f, 14.5f, 4, 2, -2, -4});
  auto relu = run_op<FusedConv2dOp>({x, w, bias}, V{1, 1}, V{0, 0}, V{1, 1}, std::int64_t{1},
                                    std::string("relu"));
  check_close<float>(relu.out(), {6.5f, 8.5f, 12.5f, 14.5f, 4, 2, 0, 0});
}

TEST_CASE("fused_conv2d matches conv2d, add and its activation (relu, relu6, silu) run apart for "
          "every geometry, f32 and f64",
          "[kernel][conv]") {
  const std::vector<Cfg> cfgs{{{2, 3, 7, 6}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
                              {{2, 1, 28, 28}, {6, 1, 5, 5}, {1, 1}, {2, 2}, {1, 1}, 1},
                              {{1, 2, 6, 20}, {9, 2, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
                              {{1, 4, 9, 8}, {6, 2, 3, 2}, {2, 1}, {0, 1, 2, 0}, {1, 2}, 2},
                              {{3, 2, 5, 5}, {5, 2, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1}};
  for (const auto& c : cfgs)
    for (const std::string act : {"none", "relu", "relu6", "silu"}) {
      INFO("x " << Dims(c.x).to_string() << " w " << Dims(c.w).to_string() << " " << act);
      Tensor x = filled<double>(Dims(c.x), -2, 2, 1), w = filled<double>(Dims(c.w), -1, 1, 2);
      Tensor bias = filled<double>(Dims{c.w[0]}, -1, 1, 3);
      auto conv = run_op<Conv2dOp>({x, w}, c.strides, c.paddings, c.dilations, c.groups).out();
      auto want = conv.to_vector<double>();
      const std::int64_t per_channel = conv.numel() / (conv.dims()[0] * c.w[0]);
      for (std::size_t i = 0; i < want.size(); ++i) {
        want[i] += bias.to_vector<double>()[(i / per_channel) % c.w[0]];
        if (act == "relu") want[i] = std::max(want[i], 0.0);
        if (act == "relu6") want[i] = std::min(std::max(want[i], 0.0), 6.0);
        if (act == "silu") want[i] = want[i] / (1.0 + std::exp(-want[i]));
      }
      auto got = run_op<FusedConv2dOp>({x, w, bias}, c.strides, c.paddings, c.dilations, c.groups, act);
      check_close<double>(got.out(), want, 1e-12, 1e-12);
      auto got32 = run_op<FusedConv2dOp>({filled<float>(Dims(c.x), -2, 2, 1), filled<float>(Dims(c.w), -1, 1, 2),
                                          filled<float>(Dims{c.w[0]}, -1, 1, 3)},
                                         c.strides, c.paddings, c.dilations, c.groups, act);
      check_close<float>(got32.out(), std::vector<float>(want.begin(), want.end()), 1e-4, 1e-4);
    }
}

namespace {

// [n, c, h, w] as [n, h, w, c] (to_nhwc) or back.
template <typename T>
Tensor swap_channels(const Tensor& t, bool to_nhwc) {
  const auto& d = t.dims();
  const std::int64_t n = d[0], c = to_nhwc ? d[1] : d[3], hw = to_nhwc ? d[2] * d[3] : d[1] * d[2];
  const auto v = t.to_vector<T>();
  std::vector<T> out(v.size());
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t ch = 0; ch < c; ++ch)
      for (std::int64_t p = 0; p < hw; ++p) {
        const std::int64_t nchw = (i * c + ch) * hw + p, nhwc = (i * hw + p) * c + ch;
        out[std::size_t(to_nhwc ? nhwc : nchw)] = v[std::size_t(to_nhwc ? nchw : nhwc)];
      }
  return Tensor::from_vector<T>(to_nhwc ? Dims{d[0], d[2], d[3], d[1]} : Dims{d[0], d[3], d[1], d[2]}, out);
}

}  // namespace

TEST_CASE("fused_conv2d's relu and relu6 give 0 for a NaN on every route, as kiln.relu and oneDNN's post-ops",
          "[kernel][conv]") {
  // oneDNN (NHWC, 5x5, 3x3) and kiln's GEMM (NCHW 1x1, NHWC one-pixel
  // images); a NaN bias makes its channel NaN before the activation.
  const std::vector<Cfg> cfgs{{{2, 1, 28, 28}, {6, 1, 5, 5}, {1, 1}, {2, 2}, {1, 1}, 1},
                              {{2, 3, 7, 6}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
                              {{3, 2, 5, 5}, {5, 2, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1},
                              {{4, 24, 1, 1}, {6, 24, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1}};
  for (const auto& c : cfgs)
    for (const std::string act : {"relu", "relu6"})
      for (const std::string format : {"NCHW", "NHWC"}) {
        INFO("x " << Dims(c.x).to_string() << " " << act << " " << format);
        Tensor x = filled<float>(Dims(c.x), -2, 2, 1), w = filled<float>(Dims(c.w), -1, 1, 2);
        auto bv = filled<float>(Dims{c.w[0]}, -1, 1, 3).to_vector<float>();
        bv[1] = std::numeric_limits<float>::quiet_NaN();
        const Tensor bias = Tensor::from_vector<float>(Dims{c.w[0]}, bv);
        if (format == "NHWC") x = swap_channels<float>(x, true);
        Tensor y = run_op<FusedConv2dOp>({x, w, bias}, c.strides, c.paddings, c.dilations, c.groups, act, format).out();
        if (format == "NHWC") y = swap_channels<float>(y, false);
        const auto v = y.to_vector<float>();
        const std::int64_t per_channel = y.numel() / (y.dims()[0] * c.w[0]);
        for (std::size_t i = 0; i < v.size(); ++i) {
          const bool nan_channel = (std::int64_t(i) / per_channel) % c.w[0] == 1;
          CHECK(!std::isnan(v[i]));
          CHECK((nan_channel ? v[i] == 0.0f : (v[i] >= 0 && v[i] <= (act == "relu6" ? 6.0f : 1e9f))));
        }
      }
}

TEST_CASE("fused_conv2d in NHWC computes the NCHW result in NHWC for every geometry, f32 "
          "(oneDNN's channels-last primitive where built, kiln's direct kernel for one input channel) and f64 "
          "(through NCHW copies)",
          "[kernel][conv]") {
  const std::vector<Cfg> cfgs{{{2, 3, 7, 6}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
                              {{1, 8, 9, 9}, {8, 1, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 8},
                              {{1, 4, 9, 8}, {6, 2, 3, 2}, {2, 1}, {0, 1, 2, 0}, {1, 2}, 2},
                              {{3, 5, 5, 5}, {7, 5, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1},
                              // 3x3 stride 1, channels in blocks of 16: oneDNN's Winograd
                              {{2, 32, 10, 9}, {48, 32, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
                              // one input channel into at most 8 (LeNet-5's first): kiln's direct kernel
                              {{3, 1, 28, 28}, {6, 1, 5, 5}, {1, 1}, {0, 0}, {1, 1}, 1},
                              {{2, 1, 9, 7}, {8, 1, 3, 3}, {1, 1}, {1, 2, 0, 1}, {1, 1}, 1},
                              {{1, 1, 6, 40}, {1, 1, 3, 2}, {1, 1}, {1, 1}, {1, 1}, 1},  // 40 wide: oneDNN
                              // a one-pixel image (a squeeze-and-excitation layer): one GEMM
                              {{3, 40, 1, 1}, {12, 40, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1}};
  for (const auto& c : cfgs)
    for (const std::string act : {"none", "relu", "relu6", "silu"}) {
      INFO("x " << Dims(c.x).to_string() << " w " << Dims(c.w).to_string() << " " << act);
      Tensor x = filled<double>(Dims(c.x), -2, 2, 1), w = filled<double>(Dims(c.w), -1, 1, 2);
      Tensor bias = filled<double>(Dims{c.w[0]}, -1, 1, 3);
      Tensor want = run_op<FusedConv2dOp>({x, w, bias}, c.strides, c.paddings, c.dilations, c.groups, act).out();
      auto got = run_op<FusedConv2dOp>({swap_channels<double>(x, true), w, bias}, c.strides, c.paddings,
                                       c.dilations, c.groups, act, std::string("NHWC"));
      REQUIRE(got.out().dims() == swap_channels<double>(want, true).dims());
      check_close<double>(swap_channels<double>(got.out(), false), want.to_vector<double>(), 1e-12, 1e-12);
      Tensor x32 = filled<float>(Dims(c.x), -2, 2, 1), w32 = filled<float>(Dims(c.w), -1, 1, 2);
      auto got32 = run_op<FusedConv2dOp>({swap_channels<float>(x32, true), w32, filled<float>(Dims{c.w[0]}, -1, 1, 3)},
                                         c.strides, c.paddings, c.dilations, c.groups, act, std::string("NHWC"));
      const auto want32 = want.to_vector<double>();
      check_close<float>(swap_channels<float>(got32.out(), false), std::vector<float>(want32.begin(), want32.end()),
                         1e-4, 1e-4);
    }
}

TEST_CASE("a fused_conv2d's silu in NHWC gives kiln.sigmoid's and kiln.mul's bits over its convolution, "
          "depthwise and dense, f32",
          "[kernel][conv]") {
  const std::vector<Cfg> cfgs{{{2, 16, 9, 9}, {16, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 16},
                              {{1, 32, 8, 8}, {32, 1, 5, 5}, {2, 2}, {2, 2}, {1, 1}, 32},
                              {{2, 16, 6, 6}, {32, 16, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1}};
  for (const auto& c : cfgs) {
    INFO("x " << Dims(c.x).to_string() << " w " << Dims(c.w).to_string());
    const Tensor x = swap_channels<float>(filled<float>(Dims(c.x), -6, 6, 1), true);
    const Tensor w = filled<float>(Dims(c.w), -1, 1, 2), bias = filled<float>(Dims{c.w[0]}, -1, 1, 3);
    auto fused = [&](const std::string& act) {
      return run_op<FusedConv2dOp>({x, w, bias}, c.strides, c.paddings, c.dilations, c.groups, act,
                                   std::string("NHWC")).out();
    };
    const Tensor z = fused("none");
    const Tensor want = run_op<MulOp>({z, run_op<SigmoidOp>({z}).out()}).out();
    const auto got = fused("silu").to_vector<float>(), w_bits = want.to_vector<float>();
    REQUIRE(got.size() == w_bits.size());
    std::size_t differ = 0;
    for (std::size_t i = 0; i < got.size(); ++i) differ += got[i] != w_bits[i];
    if (c.groups > 1) CHECK(differ == 0);  // kiln's SiLU after oneDNN's depthwise convolution
    else check_close<float>(fused("silu"), w_bits, 1e-5, 1e-5);  // oneDNN's swish post-op
  }
}

TEST_CASE("conv2d and its gradient in NHWC compute the NCHW results in NHWC for every geometry, f32 "
          "(oneDNN's channels-last primitives) and f64 (through NCHW copies)",
          "[kernel][conv]") {
  const std::string nhwc = "NHWC";
  for (const Cfg& c : configs()) {
    INFO("x " << Dims(c.x).to_string() << " w " << Dims(c.w).to_string() << " groups " << c.groups);
    const Tensor x = filled<double>(Dims(c.x), -1, 1, 5), w = filled<double>(Dims(c.w), -1, 1, 6);
    const Tensor out = run_op<Conv2dOp>({x, w}, c.strides, c.paddings, c.dilations, c.groups).out();
    const Tensor dout = filled<double>(out.dims(), -1, 1, 7);
    auto want = run_op<GradOf<Conv2dOp>>({x, w, dout}, c.strides, c.paddings, c.dilations, c.groups);
    auto as_f32 = [](const Tensor& t) {
      const auto v = t.to_vector<double>();
      return Tensor::from_vector<float>(t.dims(), std::vector<float>(v.begin(), v.end()));
    };
    for (const bool f32 : {false, true}) {
      INFO((f32 ? "f32" : "f64"));
      const double tol = f32 ? 1e-4 : 1e-12;
      auto cast = [&](const Tensor& t) { return f32 ? as_f32(t) : t; };
      auto back = [&](const Tensor& t) { return f32 ? swap_channels<float>(t, false) : swap_channels<double>(t, false); };
      auto to_nhwc = [&](const Tensor& t) { return f32 ? swap_channels<float>(cast(t), true) : swap_channels<double>(t, true); };
      auto fwd = run_op<Conv2dOp>({to_nhwc(x), cast(w)}, c.strides, c.paddings, c.dilations, c.groups, nhwc);
      REQUIRE(fwd.out().dims() == Dims{out.dims()[0], out.dims()[2], out.dims()[3], out.dims()[1]});
      auto grad = run_op<GradOf<Conv2dOp>>({to_nhwc(x), cast(w), to_nhwc(dout)}, c.strides, c.paddings,
                                           c.dilations, c.groups, nhwc);
      REQUIRE(grad.out(0).dims() == Dims{c.x[0], c.x[2], c.x[3], c.x[1]});
      const auto widen = [&](const Tensor& t) {
        if (!f32) return t.to_vector<double>();
        const auto v = t.to_vector<float>();
        return std::vector<double>(v.begin(), v.end());
      };
      check_close<double>(Tensor::from_vector<double>(out.dims(), widen(back(fwd.out()))), out.to_vector<double>(), tol, tol);
      check_close<double>(Tensor::from_vector<double>(x.dims(), widen(back(grad.out(0)))), want.out(0).to_vector<double>(), tol, tol);
      check_close<double>(Tensor::from_vector<double>(w.dims(), widen(grad.out(1))), want.out(1).to_vector<double>(), tol, tol);
    }
  }
}

TEST_CASE("an NHWC conv2d and a fused_conv2d whose weights are trained convolve directly alike, where an "
          "inference fused_conv2d of the same 3x3 geometry may run Winograd",
          "[kernel][conv]") {
  // 3x3, stride 1, channels in blocks of 16: Winograd's geometry. A zero
  // bias adds nothing (-0 aside, which == ignores).
  const Tensor x = filled<float>(Dims{2, 10, 9, 32}, -1, 1, 1), w = filled<float>(Dims{48, 32, 3, 3}, -1, 1, 2);
  const Tensor zero = Tensor::zeros(Dims{48}, DataType::Float32);
  const std::string nhwc = "NHWC";
  const auto conv = run_op<Conv2dOp>({x, w}, V{1, 1}, V{1, 1}, V{1, 1}, std::int64_t{1}, nhwc).out().to_vector<float>();
  const auto trained = run_op<FusedConv2dOp>({x, w, zero}, V{1, 1}, V{1, 1}, V{1, 1}, std::int64_t{1},
                                             std::string("none"), nhwc, Value(), true)
                           .out()
                           .to_vector<float>();
  REQUIRE(conv.size() == trained.size());
  std::size_t differ = 0;
  for (std::size_t i = 0; i < conv.size(); ++i) differ += !(conv[i] == trained[i]);
  CHECK(differ == 0);
}

TEST_CASE("conv2d names an NHWC x that is not rank 4 and an unknown data_format", "[kernel][conv]") {
  const Tensor w = Tensor::zeros(Dims{2, 2, 1, 1}, DataType::Float32);
  CHECK_THROWS_WITH(run_op<Conv2dOp>({Tensor::zeros(Dims{1, 3, 3}, DataType::Float32), w}, V{1, 1}, V{0, 0},
                                     V{1, 1}, std::int64_t{1}, std::string("NHWC")),
                    Catch::Contains("kiln.conv2d"));
  CHECK_THROWS_WITH(run_op<Conv2dOp>({Tensor::zeros(Dims{1, 2, 3, 3}, DataType::Float32), w}, V{1, 1}, V{0, 0},
                                     V{1, 1}, std::int64_t{1}, std::string("NWHC")),
                    Catch::Contains("kiln.conv2d") && Catch::Contains("data_format 'NWHC'"));
}

namespace {

// fused_conv2d(x, w, bias, residual) in `layout` (x and residual given NCHW).
template <typename T>
Tensor fused_with_residual(const Cfg& c, const Tensor& x, const Tensor& w, const Tensor& bias,
                           const Tensor& residual, const std::string& act, const std::string& layout) {
  const bool nhwc = layout == "NHWC";
  const std::vector<Tensor> in{nhwc ? swap_channels<T>(x, true) : x, w, bias,
                               nhwc ? swap_channels<T>(residual, true) : residual};
  Tensor out = run_kernel(in, [&](Builder& b, const std::vector<Value>& v) {
                 return b.create<FusedConv2dOp>(v[0], v[1], v[2], c.strides, c.paddings, c.dilations, c.groups,
                                                act, layout, v[3])
                     .operation();
               }).out();
  return nhwc ? swap_channels<T>(out, false) : out;
}

}  // namespace

TEST_CASE("fused_conv2d with a residual adds it to the convolution before the activation, NCHW and "
          "NHWC, f32 (oneDNN's sum post-op where built) and f64",
          "[kernel][conv]") {
  const std::vector<Cfg> cfgs{{{2, 3, 7, 6}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
                              {{1, 8, 9, 9}, {8, 1, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 8},
                              {{3, 5, 5, 5}, {7, 5, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1},
                              {{2, 16, 6, 6}, {32, 16, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
                              // pointwise over 16 Ki pixels: NHWC f32 as row blocks of one GEMM each
                              {{1, 6, 130, 130}, {20, 6, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1}};
  for (const auto& c : cfgs)
    for (const std::string act : {"none", "relu", "relu6", "silu"})
      for (const std::string layout : {"NCHW", "NHWC"}) {
        INFO("x " << Dims(c.x).to_string() << " w " << Dims(c.w).to_string() << " " << act << " " << layout);
        Tensor x = filled<double>(Dims(c.x), -2, 2, 1), w = filled<double>(Dims(c.w), -1, 1, 2);
        Tensor bias = filled<double>(Dims{c.w[0]}, -1, 1, 3);
        const Tensor conv = run_op<FusedConv2dOp>({x, w, bias}, c.strides, c.paddings, c.dilations, c.groups,
                                                  std::string("none")).out();
        const Tensor residual = filled<double>(conv.dims(), -3, 3, 4);
        auto z = conv.to_vector<double>();
        const auto r = residual.to_vector<double>();
        for (std::size_t i = 0; i < z.size(); ++i) {
          z[i] += r[i];
          if (act == "relu") z[i] = std::max(z[i], 0.0);
          if (act == "relu6") z[i] = std::min(std::max(z[i], 0.0), 6.0);
          if (act == "silu") z[i] = z[i] / (1.0 + std::exp(-z[i]));
        }
        check_close<double>(fused_with_residual<double>(c, x, w, bias, residual, act, layout), z, 1e-12, 1e-12);
        auto f32 = [](const Tensor& t) {
          const auto v = t.to_vector<double>();
          return Tensor::from_vector<float>(t.dims(), std::vector<float>(v.begin(), v.end()));
        };
        check_close<float>(fused_with_residual<float>(c, f32(x), f32(w), f32(bias), f32(residual), act, layout),
                           std::vector<float>(z.begin(), z.end()), 1e-4, 1e-4);
      }
}

namespace {

// fused_conv2d in NHWC (f32, inference: Winograd where oneDNN has it) of x
// [n, h, w, 16] by w [16, 16, 3, 3], through relu, plus `residual` when given.
Tensor nhwc_conv3x3(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor* residual = nullptr) {
  std::vector<Tensor> in{x, w, bias};
  if (residual) in.push_back(*residual);
  return run_kernel(in, [&](Builder& b, const std::vector<Value>& v) {
           return b.create<FusedConv2dOp>(v[0], v[1], v[2], std::vector<std::int64_t>{1, 1},
                                          std::vector<std::int64_t>{1, 1}, std::vector<std::int64_t>{1, 1}, 1,
                                          "relu", "NHWC", residual ? v[3] : Value())
               .operation();
         }).out();
}

Tensor copy_of(const Tensor& t) { return Tensor::from_vector<float>(t.dims(), t.to_vector<float>()); }

}  // namespace

TEST_CASE("an NHWC convolution that reads the result of the one before gives the bits it gives on a copy "
          "of it, and sees that result written afterwards through data() or raw_data()",
          "[kernel][conv]") {
  // oneDNN's Winograd computes these in a blocked layout and keeps each
  // result's blocked copy for the next convolution that reads it unchanged.
  const Tensor x = filled<float>(Dims{2, 10, 9, 16}, -1, 1, 1), r = filled<float>(Dims{2, 10, 9, 16}, -1, 1, 2);
  const Tensor wa = filled<float>(Dims{16, 16, 3, 3}, -0.3, 0.3, 3), ba = filled<float>(Dims{16}, -1, 1, 4);
  const Tensor wb = filled<float>(Dims{16, 16, 3, 3}, -0.3, 0.3, 5), bb = filled<float>(Dims{16}, -1, 1, 6);
  for (const bool with_residual : {false, true}) {
    INFO("the first convolution " << (with_residual ? "adds a residual" : "has none"));
    auto first = [&] { return nhwc_conv3x3(x, wa, ba, with_residual ? &r : nullptr); };
    // Each result is compared with its copy's only after it is computed: a
    // convolution on the copy would take the kept slot.
    Tensor a = first();
    const Tensor b = nhwc_conv3x3(a, wb, bb);
    CHECK(b.to_vector<float>() == nhwc_conv3x3(copy_of(a), wb, bb).to_vector<float>());
    a = first();
    a.data<float>()[37] += 2.0f;  // as an in-place op writes
    const Tensor c = nhwc_conv3x3(a, wb, bb);
    CHECK(c.to_vector<float>() == nhwc_conv3x3(copy_of(a), wb, bb).to_vector<float>());
    CHECK(c.to_vector<float>() != b.to_vector<float>());
    a = first();
    std::vector<float> negated = a.to_vector<float>();
    for (float& v : negated) v = -v;
    std::memcpy(a.raw_data(), negated.data(), a.bytes());  // as a user's copy writes
    const Tensor d = nhwc_conv3x3(a, wb, bb);
    CHECK(d.to_vector<float>() == nhwc_conv3x3(copy_of(a), wb, bb).to_vector<float>());
    CHECK(d.to_vector<float>() != b.to_vector<float>());
  }
}

TEST_CASE("an NHWC convolution adding the result from two convolutions before gives the bits it gives on "
          "copies, and sees that result written afterwards",
          "[kernel][conv]") {
  // A residual block: a, then b from a, then c from b plus a (the sum
  // post-op reads a's kept blocked copy where it has one).
  const Tensor x = filled<float>(Dims{1, 12, 11, 16}, -1, 1, 7);
  const Tensor w = filled<float>(Dims{16, 16, 3, 3}, -0.3, 0.3, 8), bias = filled<float>(Dims{16}, -1, 1, 9);
  for (const bool written : {false, true}) {
    INFO((written ? "a written after b" : "a unchanged"));
    Tensor a = nhwc_conv3x3(x, w, bias);
    const Tensor b = nhwc_conv3x3(a, w, bias);
    if (written) a.data<float>()[11] -= 3.0f;
    const Tensor c = nhwc_conv3x3(b, w, bias, &a);
    const Tensor a_copy = copy_of(a);
    CHECK(c.to_vector<float>() == nhwc_conv3x3(copy_of(b), w, bias, &a_copy).to_vector<float>());
  }
}

TEST_CASE("fused_conv2d names a data_format other than NCHW or NHWC", "[kernel][conv]") {
  Tensor x = Tensor::zeros(Dims{1, 1, 3, 3}, DataType::Float32);
  Tensor w = Tensor::zeros(Dims{2, 1, 2, 2}, DataType::Float32);
  CHECK_THROWS_WITH(run_op<FusedConv2dOp>({x, w, Tensor::zeros(Dims{2}, DataType::Float32)}, V{1, 1},
                                          V{0, 0}, V{1, 1}, std::int64_t{1}, std::string("relu"),
                                          std::string("CHWN")),
                    Catch::Contains("kiln.fused_conv2d") && Catch::Contains("data_format 'CHWN'"));
}

TEST_CASE("fused_conv2d names a bias that is not one value per output channel and an unknown "
          "activation",
          "[kernel][conv]") {
  Tensor x = Tensor::zeros(Dims{1, 1, 3, 3}, DataType::Float32);
  Tensor w = Tensor::zeros(Dims{2, 1, 2, 2}, DataType::Float32);
  CHECK_THROWS_WITH(run_op<FusedConv2dOp>({x, w, Tensor::zeros(Dims{3}, DataType::Float32)}, V{1, 1},
                                          V{0, 0}, V{1, 1}, std::int64_t{1}, std::string("relu")),
                    Catch::Contains("kiln.fused_conv2d") && Catch::Contains("bias must be [2]"));
  CHECK_THROWS_WITH(run_op<FusedConv2dOp>({x, w, Tensor::zeros(Dims{2}, DataType::Float32)}, V{1, 1},
                                          V{0, 0}, V{1, 1}, std::int64_t{1}, std::string("gelu")),
                    Catch::Contains("activation 'gelu'"));
}

TEST_CASE("conv2d sees weights written between runs, through data() or raw_data(), and reuses "
          "them unchanged",
          "[kernel][conv]") {
  // 16 channels in and out: oneDNN keeps a reordered (blocked) copy of w.
  const Cfg c{{1, 16, 6, 6}, {16, 16, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1};
  Tensor x = filled<float>(Dims(c.x), -1, 1, 5), w = filled<float>(Dims(c.w), -1, 1, 6);
  auto expect = [&](const Tensor& got) {
    auto xd = x.to_vector<float>(), wd = w.to_vector<float>();
    Ref r = reference(c, std::vector<double>(xd.begin(), xd.end()),
                      std::vector<double>(wd.begin(), wd.end()), nullptr);
    check_close<float>(got, std::vector<float>(r.out.begin(), r.out.end()), 1e-4);
  };
  auto run = [&] { return run_op<Conv2dOp>({x, w}, c.strides, c.paddings, c.dilations, c.groups).out(); };
  const Tensor first = run();
  expect(first);
  const Tensor again = run();
  CHECK(again.to_vector<float>() == first.to_vector<float>());
  w.data<float>()[7] += 3.0f;  // as an optimizer's in-place step writes
  expect(run());
  std::vector<float> negated = w.to_vector<float>();
  for (float& v : negated) v = -v;
  std::memcpy(w.raw_data(), negated.data(), w.bytes());  // as a user's copy writes
  expect(run());
}

namespace {

// A per-channel factor tensor for x (NCHW dims c.x) in `layout`: [N, C, 1,
// 1] / [N, 1, 1, C], or with N = 1 when `shared`.
template <typename T>
Tensor channel_factors(const Cfg& c, const std::string& layout, bool shared, std::uint32_t seed) {
  const std::int64_t n = shared ? 1 : c.x[0];
  return filled<T>(layout == "NHWC" ? Dims{n, 1, 1, c.x[1]} : Dims{n, c.x[1], 1, 1}, 0.1, 1.5, seed);
}

// channel_scaled_conv2d(x, scale, w, bias[, residual]) in `layout` (x,
// scale and residual given in it), and the unfused ops' result: kiln.mul,
// then fused_conv2d.
template <typename T>
std::pair<Tensor, Tensor> scaled_and_unfused(const Cfg& c, const std::string& layout, const std::string& act,
                                             const std::vector<Tensor>& in) {
  const FusedConv2dOp::Attributes a{c.strides, c.paddings, c.dilations, c.groups, act, layout, false};
  const bool residual = in.size() == 5;
  Tensor got = run_kernel(in, [&](Builder& b, const std::vector<Value>& v) {
                 return b.create<ChannelScaledConv2dOp>(v[0], v[1], v[2], v[3], a, residual ? v[4] : Value())
                     .operation();
               }).out();
  const Tensor product = run_op<MulOp>({in[0], in[1]}).out();
  std::vector<Tensor> conv_in{product, in[2], in[3]};
  if (residual) conv_in.push_back(in[4]);
  Tensor want = run_kernel(conv_in, [&](Builder& b, const std::vector<Value>& v) {
                  return b.create<FusedConv2dOp>(v[0], v[1], v[2], c.strides, c.paddings, c.dilations, c.groups, act,
                                                 layout, residual ? v[3] : Value())
                      .operation();
                }).out();
  return {got, want};
}

}  // namespace

TEST_CASE("channel_scaled_conv2d gives fused_conv2d of x times its per-channel factors: folded into the "
          "weights within f32's rounding where it folds, the unfused ops' bits elsewhere",
          "[kernel][conv]") {
  const std::vector<Cfg> cfgs{// pointwise, 81 pixels an image >= 4 x 6 outputs: folds in NHWC f32
                              {{2, 8, 9, 9}, {6, 8, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1},
                              // pointwise over 200 pixels in two blocks an image, 17 channels
                              {{3, 17, 10, 20}, {5, 17, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1},
                              // pointwise, 16 pixels < 4 x 6: scales x first
                              {{2, 8, 4, 4}, {6, 8, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1},
                              // 3x3 and depthwise: scales x first
                              {{2, 8, 6, 6}, {6, 8, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
                              {{2, 8, 6, 6}, {8, 1, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 8}};
  for (const auto& c : cfgs) {
    Conv2dGeometry g = conv::geometry("test", Dims(c.x), Dims(c.w), c.strides, c.paddings, c.dilations, c.groups);
    for (const std::string layout : {"NCHW", "NHWC"})
      for (const bool shared : {false, true})
        for (const bool residual : {false, true})
          for (const std::string act : {"none", "relu6", "silu"}) {
            INFO("x " << Dims(c.x).to_string() << " w " << Dims(c.w).to_string() << " " << layout
                      << (shared ? ", one set of factors" : ", factors per image")
                      << (residual ? ", residual " : ", ") << act);
            auto inputs = [&]<typename T>(T) {
              Tensor x = filled<T>(Dims(c.x), -2, 2, 1);
              if (layout == "NHWC") x = swap_channels<T>(x, true);
              std::vector<Tensor> in{x, channel_factors<T>(c, layout, shared, 2), filled<T>(Dims(c.w), -1, 1, 3),
                                     filled<T>(Dims{c.w[0]}, -1, 1, 4)};
              if (residual) {
                const Tensor conv = run_op<FusedConv2dOp>({in[0], in[2], in[3]}, c.strides, c.paddings, c.dilations,
                                                          c.groups, std::string("none"), layout)
                                        .out();
                in.push_back(filled<T>(conv.dims(), -3, 3, 5));
              }
              return in;
            };
            const auto [got64, want64] = scaled_and_unfused<double>(c, layout, act, inputs(0.0));
            CHECK(same_bits(got64, want64));
            const auto [got, want] = scaled_and_unfused<float>(c, layout, act, inputs(0.0f));
            if (layout == "NHWC" && cpu_folds_channel_scale(g)) {
              check_close<float>(got, want.to_vector<float>(), 1e-5, 1e-5);
              check_close<float>(got, [&] {  // and the exact result
                const auto v = got64.to_vector<double>();
                return std::vector<float>(v.begin(), v.end());
              }(), 1e-5, 1e-5);
            } else {
              CHECK(same_bits(got, want));
            }
          }
  }
}

TEST_CASE("channel_scaled_conv2d names a bias that is not one per output channel, as fused_conv2d does",
          "[kernel][conv]") {
  const FusedConv2dOp::Attributes a{V{1, 1}, V{0, 0}, V{1, 1}, 1, "none", "NHWC", false};
  Tensor x = Tensor::zeros(Dims{2, 5, 5, 4}, DataType::Float32), w = Tensor::zeros(Dims{3, 4, 1, 1}, DataType::Float32);
  CHECK_THROWS_WITH(
      run_kernel({x, Tensor::zeros(Dims{2, 1, 1, 4}, DataType::Float32), w, Tensor::zeros(Dims{4}, DataType::Float32)},
                 [&](Builder& b, const std::vector<Value>& v) {
                   return b.create<ChannelScaledConv2dOp>(v[0], v[1], v[2], v[3], a).operation();
                 }),
      Catch::Contains("kiln.channel_scaled_conv2d") && Catch::Contains("bias must be [3]"));
}

namespace {

// One expansion + depthwise pair: x NHWC [N, H, W, C] to E channels, then
// a kh x kw depthwise convolution.
struct PairCfg {
  V x;
  std::int64_t e;
  V kernel, strides, paddings, dilations;
};

// pointwise_depthwise_conv2d(x, pw, pw_bias, dw, dw_bias), and the two
// fused_conv2d it stands for, run one after the other.
template <typename T>
std::pair<Tensor, Tensor> pair_and_unfused(const PairCfg& c, const std::string& pw_act, const std::string& act) {
  const std::vector<Tensor> in{filled<T>(Dims(c.x), -1, 1, 1), filled<T>(Dims{c.e, c.x[3], 1, 1}, -1, 1, 2),
                               filled<T>(Dims{c.e}, -1, 1, 3), filled<T>(Dims{c.e, 1, c.kernel[0], c.kernel[1]}, -1, 1, 4),
                               filled<T>(Dims{c.e}, -1, 1, 5)};
  const PointwiseDepthwiseConv2dOp::Attributes a{c.strides, c.paddings, c.dilations, pw_act, act};
  Tensor got = run_kernel(in, [&](Builder& b, const std::vector<Value>& v) {
                 return b.create<PointwiseDepthwiseConv2dOp>(v[0], v[1], v[2], v[3], v[4], a).operation();
               }).out();
  const Tensor mid = run_op<FusedConv2dOp>({in[0], in[1], in[2]}, V{1, 1}, V{0, 0}, V{1, 1}, std::int64_t{1}, pw_act,
                                           std::string("NHWC"))
                         .out();
  Tensor want = run_op<FusedConv2dOp>({mid, in[3], in[4]}, c.strides, c.paddings, c.dilations, c.e, act,
                                      std::string("NHWC"))
                    .out();
  return {got, want};
}

}  // namespace

TEST_CASE("pointwise_depthwise_conv2d gives the expansion's and the depthwise convolution's result, within f32's "
          "rounding where the kernel computes them in one pass and with their bits elsewhere",
          "[kernel][conv]") {
  const std::vector<PairCfg> cfgs{
      {{2, 9, 11, 8}, 32, {3, 3}, {1, 1}, {1, 1}, {1, 1}},
      {{1, 13, 10, 5}, 48, {3, 3}, {2, 2}, {1, 1}, {1, 1}},         // 3 vectors of channels
      {{2, 12, 12, 17}, 80, {5, 5}, {2, 2}, {2, 2}, {1, 1}},        // 4 + 1 vectors, 5x5
      {{1, 6, 19, 3}, 16, {3, 5}, {1, 2}, {0, 1, 2, 1}, {1, 1}},    // asymmetric
      {{1, 40, 48, 6}, 96, {3, 3}, {1, 1}, {1, 1}, {1, 1}},         // rows expanded into a ring of 3
      {{1, 40, 48, 6}, 96, {3, 3}, {2, 2}, {1, 1}, {1, 1}},         // the ring at stride 2
      {{1, 5, 5, 4}, 16, {7, 7}, {1, 1}, {3, 3}, {1, 1}},           // no pixel with every tap inside
      {{2, 7, 7, 8}, 24, {3, 3}, {1, 1}, {1, 1}, {1, 1}},           // 24 channels: two convolutions
      {{1, 9, 9, 8}, 32, {3, 3}, {1, 1}, {2, 2}, {2, 2}}};          // dilated: two convolutions
  for (const auto& c : cfgs) {
    const Conv2dGeometry g1 =
        conv::geometry("test", Dims{1, c.x[3], c.x[1], c.x[2]}, Dims{c.e, c.x[3], 1, 1}, V{1, 1}, V{0, 0}, V{1, 1}, 1);
    const Conv2dGeometry g2 = conv::geometry("test", Dims{1, c.e, c.x[1], c.x[2]}, Dims{c.e, 1, c.kernel[0], c.kernel[1]},
                                             c.strides, c.paddings, c.dilations, c.e);
    for (const auto& [pw_act, act] : std::vector<std::pair<std::string, std::string>>{
             {"relu6", "relu6"}, {"silu", "none"}, {"relu", "silu"}, {"none", "relu"}}) {
      INFO("x " << Dims(c.x).to_string() << " to " << c.e << " channels, " << Dims(c.kernel).to_string()
                << " depthwise, " << pw_act << " then " << act);
      const auto [got64, want64] = pair_and_unfused<double>(c, pw_act, act);
      CHECK(same_bits(got64, want64));
      const auto [got, want] = pair_and_unfused<float>(c, pw_act, act);
      REQUIRE(got.dims() == want.dims());
      if (cpu::pointwise_depthwise_fits(g1, g2)) {
        check_close<float>(got, want.to_vector<float>(), 1e-5, 1e-4);
        const auto exact = got64.to_vector<double>();
        check_close<float>(got, std::vector<float>(exact.begin(), exact.end()), 1e-5, 1e-4);
      } else {
        CHECK(same_bits(got, want));
      }
    }
  }
}

TEST_CASE("pointwise_depthwise_conv2d names a bias that is not one per expanded channel", "[kernel][conv]") {
  const PointwiseDepthwiseConv2dOp::Attributes a{V{1, 1}, V{1, 1}, V{1, 1}, "relu6", "relu6"};
  const Tensor x = Tensor::zeros(Dims{1, 5, 5, 4}, DataType::Float32);
  const Tensor pw = Tensor::zeros(Dims{16, 4, 1, 1}, DataType::Float32), dw = Tensor::zeros(Dims{16, 1, 3, 3}, DataType::Float32);
  for (const int bad : {2, 4}) {
    std::vector<Tensor> in{x, pw, Tensor::zeros(Dims{16}, DataType::Float32), dw, Tensor::zeros(Dims{16}, DataType::Float32)};
    in[std::size_t(bad)] = Tensor::zeros(Dims{8}, DataType::Float32);
    CHECK_THROWS_WITH(run_kernel(in,
                                 [&](Builder& b, const std::vector<Value>& v) {
                                   return b.create<PointwiseDepthwiseConv2dOp>(v[0], v[1], v[2], v[3], v[4], a)
                                       .operation();
                                 }),
                      Catch::Contains("kiln.pointwise_depthwise_conv2d") && Catch::Contains("bias must be [16]"));
  }
}

TEST_CASE("fused_conv2d_mean gives fused_conv2d's result and kiln.mean's over its pixels, bit for bit",
          "[kernel][conv]") {
  // x NCHW dims; NHWC below. Over 4096 elements an image: several chunks of rows.
  const std::vector<Cfg> cfgs{{{2, 8, 9, 9}, {6, 8, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1},
                              {{3, 16, 20, 20}, {16, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 16},
                              {{1, 24, 30, 30}, {24, 1, 5, 5}, {2, 2}, {2, 2}, {1, 1}, 24},
                              {{2, 5, 7, 3}, {17, 5, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1}};
  for (const auto& c : cfgs)
    for (const std::string act : {"none", "relu6", "silu"}) {
      INFO("x " << Dims(c.x).to_string() << " w " << Dims(c.w).to_string() << " " << act);
      const Tensor x = swap_channels<float>(filled<float>(Dims(c.x), -2, 2, 1), true);
      const Tensor w = filled<float>(Dims(c.w), -1, 1, 2), bias = filled<float>(Dims{c.w[0]}, -1, 1, 3);
      const FusedConv2dOp::Attributes a{c.strides, c.paddings, c.dilations, c.groups, act, "NHWC", false};
      const KernelRun fused = run_kernel({x, w, bias}, [&](Builder& b, const std::vector<Value>& v) {
        return b.create<FusedConv2dMeanOp>(v[0], v[1], v[2], a).operation();
      });
      const Tensor out = run_op<FusedConv2dOp>({x, w, bias}, c.strides, c.paddings, c.dilations, c.groups, act,
                                               std::string("NHWC"))
                             .out();
      const Tensor mean = run_op<MeanOp>({out}, V{1, 2}, true).out();
      CHECK(same_bits(fused.out(0), out));
      CHECK(fused.out(1).dims() == Dims{c.x[0], 1, 1, c.w[0]});
      CHECK(same_bits(fused.out(1), mean));
    }
}

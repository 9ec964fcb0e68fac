// Kernel tests of the ops of kiln/dialect/pool_ops.h: hand-computed values
// of each pool and its grad op; NHWC max pools and their grads against the
// NCHW kernels, bit for bit.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kernel/kernel_test_util.h"
#include "kiln/dialect/pool_window.h"

using namespace kiln;
using namespace kiln_test;

namespace {
using V = std::vector<std::int64_t>;

// 1, 2, 3, ... as T, in row-major order.
template <typename T>
Tensor from_one(const V& dims) {
  std::vector<T> v(static_cast<std::size_t>(Dims(dims).numel()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = T(i + 1);
  return Tensor::from_vector<T>(Dims(dims), v);
}
}  // namespace

TEST_CASE("max_pool2d 2x2 with stride 2 takes each block's maximum", "[kernel][pool]") {
  auto r = run_op<MaxPool2dOp>({from_one<float>({1, 2, 4, 4})}, V{2, 2});
  CHECK(r.out().dims().to_vector() == V{1, 2, 2, 2});
  check_close<float>(r.out(), {6, 8, 14, 16, 22, 24, 30, 32});
  auto d = run_op<MaxPool2dOp>({Tensor::from_vector<double>({1, 1, 2, 4}, {3, -1, 0, 7, 2, 5, -4, 1})},
                               V{2, 2});
  check_close<double>(d.out(), {5, 7});
}

namespace {

// [n, c, h, w] values as [n, h, w, c].
template <typename T>
Tensor to_nhwc(const Tensor& t) {
  const auto& d = t.dims();
  const auto v = t.to_vector<T>();
  std::vector<T> out(v.size());
  for (std::int64_t n = 0; n < d[0]; ++n)
    for (std::int64_t c = 0; c < d[1]; ++c)
      for (std::int64_t p = 0; p < d[2] * d[3]; ++p)
        out[std::size_t((n * d[2] * d[3] + p) * d[1] + c)] = v[std::size_t((n * d[1] + c) * d[2] * d[3] + p)];
  return Tensor::from_vector<T>(Dims{d[0], d[2], d[3], d[1]}, out);
}

template <typename T>
void check_nhwc_max_pool(const V& x_dims, const V& k, const V& s, const V& pad, bool ceil_mode) {
  std::vector<T> v(static_cast<std::size_t>(Dims(x_dims).numel()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = T(int((i * 37) % 29) - 14);
  if constexpr (std::is_floating_point_v<T>)  // one in channel 0, one in a middle channel
    v[5] = v[v.size() / 2 + 3] = std::numeric_limits<T>::quiet_NaN();
  const Tensor x = Tensor::from_vector<T>(Dims(x_dims), v);
  auto nchw = run_op<MaxPool2dOp>({x}, k, s, pad, ceil_mode);
  auto nhwc = run_op<MaxPool2dOp>({to_nhwc<T>(x)}, k, s, pad, ceil_mode, std::string("NHWC"));
  const Tensor want = to_nhwc<T>(nchw.out());
  REQUIRE(nhwc.out().dims() == want.dims());
  const auto got = nhwc.out().template to_vector<T>(), w = want.to_vector<T>();
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO(i);
    if constexpr (std::is_floating_point_v<T>)
      if (std::isnan(w[i])) {
        CHECK(std::isnan(got[i]));
        continue;
      }
    CHECK(got[i] == w[i]);
  }
}

}  // namespace

TEST_CASE("max_pool2d in NHWC gives the NCHW result's values in NHWC, NaN winning, for floats "
          "and integers",
          "[kernel][pool]") {
  check_nhwc_max_pool<float>({2, 5, 9, 8}, {3, 3}, {2, 2}, {1, 1}, false);
  check_nhwc_max_pool<float>({1, 3, 5, 5}, {2, 2}, {2, 2}, {0, 0}, true);
  check_nhwc_max_pool<double>({2, 4, 7, 6}, {3, 2}, {2, 1}, {1, 0, 1, 1}, false);
  check_nhwc_max_pool<std::int8_t>({1, 6, 6, 6}, {3, 3}, {1, 1}, {1, 1}, false);
  // 2x2 stride 2 (LeNet's own loop), the last row and column left over when odd.
  check_nhwc_max_pool<float>({2, 6, 8, 8}, {2, 2}, {2, 2}, {0, 0}, false);
  check_nhwc_max_pool<float>({1, 20, 7, 9}, {2, 2}, {2, 2}, {0, 0}, false);
  check_nhwc_max_pool<std::int32_t>({1, 3, 6, 4}, {2, 2}, {2, 2}, {0, 0}, false);
  // Channel counts past one SIMD vector, with a partial one (ShuffleNet's 24).
  check_nhwc_max_pool<float>({1, 24, 12, 12}, {3, 3}, {2, 2}, {1, 1}, false);
  check_nhwc_max_pool<float>({2, 37, 9, 8}, {3, 3}, {2, 2}, {1, 1}, false);
  check_nhwc_max_pool<double>({1, 19, 6, 6}, {2, 2}, {2, 2}, {0, 0}, false);
  KILN_CHECK_ERROR(run_op<MaxPool2dOp>({Tensor::zeros(Dims{2, 3, 4}, DataType::Float32)}, V{2, 2}, V{2, 2},
                                       V{0, 0}, false, std::string("NHWC")),
                   InvalidArgument, {"kiln.max_pool2d"});
}

namespace {
// x NCHW mostly -1, -0 and +0 (windows whose maximum is a tie of zeros,
// where only the row-major order of the comparisons picks the sign) with
// one NaN; the NHWC max pool of it must give the NCHW pool's bits.
void check_nhwc_pool_bits(std::int64_t c, const V& kernel, const V& stride, const V& pads) {
  INFO(c << " channels, window " << kernel[0] << "x" << kernel[1]);
  const float values[] = {-1.0f, -0.0f, 0.0f};
  std::mt19937 rng(static_cast<unsigned>(3 + c));
  const Dims d{2, c, 6, 10};
  std::vector<float> v(static_cast<std::size_t>(d.numel()));
  for (float& e : v) e = values[rng() % 3];
  v[v.size() / 3] = std::numeric_limits<float>::quiet_NaN();
  const Tensor x = Tensor::from_vector<float>(d, v);
  const Tensor want = to_nhwc<float>(run_op<MaxPool2dOp>({x}, kernel, stride, pads, false).out());
  const Tensor got = run_op<MaxPool2dOp>({to_nhwc<float>(x)}, kernel, stride, pads, false, std::string("NHWC")).out();
  REQUIRE(got.dims() == want.dims());
  CHECK(std::memcmp(got.raw_data(), want.raw_data(), want.bytes()) == 0);
}
}  // namespace

TEST_CASE("an NHWC 2x2 max pool of any channel count gives the NCHW pool's bits, signed zeros and NaN included",
          "[kernel][pool]") {
  for (std::int64_t c = 1; c <= 17; ++c) check_nhwc_pool_bits(c, V{2, 2}, V{2, 2}, V{0, 0});
}

TEST_CASE("an NHWC 3x3 padded max pool gives the NCHW pool's bits for channel counts filling every block "
          "width, signed zeros and NaN included",
          "[kernel][pool]") {
  // Blocks of 32, 16, 8 and single channels: 1, 7, 8, 15, 16, 24, 31, 32,
  // 33, 59 (32 + 16 + 8 + 3), 64 and 100 channels.
  for (std::int64_t c : {1, 7, 8, 15, 16, 24, 31, 32, 33, 59, 64, 100})
    check_nhwc_pool_bits(c, V{3, 3}, V{2, 2}, V{1, 1});
  check_nhwc_pool_bits(24, V{3, 2}, V{1, 2}, V{1, 0, 1, 1});
}

TEST_CASE("max_pool2d with padding ignores the padded border", "[kernel][pool]") {
  // All negative: a zero from the padding would win if it took part.
  std::vector<float> v(16);
  for (int i = 0; i < 16; ++i) v[i] = -float(i + 1);
  auto r = run_op<MaxPool2dOp>({Tensor::from_vector<float>({1, 1, 4, 4}, v)}, V{3, 3}, V{2, 2},
                               V{1, 1});
  CHECK(r.out().dims().to_vector() == V{1, 1, 2, 2});
  check_close<float>(r.out(), {-1, -2, -5, -6});
}

TEST_CASE("max_pool2d with ceil_mode keeps the partial last window", "[kernel][pool]") {
  auto floor_mode = run_op<MaxPool2dOp>({from_one<float>({1, 1, 5, 5})}, V{2, 2});
  CHECK(floor_mode.out().dims().to_vector() == V{1, 1, 2, 2});
  auto r = run_op<MaxPool2dOp>({from_one<float>({1, 1, 5, 5})}, V{2, 2}, V{2, 2}, V{0, 0}, true);
  CHECK(r.out().dims().to_vector() == V{1, 1, 3, 3});
  check_close<float>(r.out(), {7, 9, 10, 17, 19, 20, 22, 24, 25});
}

TEST_CASE("max_pool2d's grad routes dout to each window's first maximum", "[kernel][pool]") {
  MaxPool2dOp::Attributes a{V{2, 2}, V{2, 2}, V{0, 0}, false, "NCHW"};
  Tensor x = Tensor::from_vector<float>({1, 1, 2, 4}, {1, 4, 2, 2, 3, 2, 2, 2});
  Tensor dout = Tensor::from_vector<float>({1, 1, 1, 2}, {5, 7});
  auto r = run_op<GradOf<MaxPool2dOp>>({x, dout}, a.kernel_size, a.strides, a.paddings,
                                       a.ceil_mode);
  check_close<float>(r.out(), {0, 5, 7, 0, 0, 0, 0, 0});
  // Overlapping windows (stride 1) add their grads on a shared maximum.
  Tensor x2 = Tensor::from_vector<double>({1, 1, 1, 3}, {1, 9, 2});
  Tensor d2 = Tensor::from_vector<double>({1, 1, 1, 2}, {2, 3});
  auto r2 = run_op<GradOf<MaxPool2dOp>>({x2, d2}, V{1, 2}, V{1, 1}, V{0, 0}, false);
  check_close<double>(r2.out(), {0, 5, 0});
}

TEST_CASE("max_pool2d 2x2's grad lets NaN win, keeps the first of equal maxima and gives the "
          "uncovered last row and column nothing",
          "[kernel][pool]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // 3x5: windows cover rows 0-1 and columns 0-3; row 2 and column 4 get 0.
  Tensor x = Tensor::from_vector<float>({1, 1, 3, 5}, {1, 2, 3, 3, 9,   //
                                                       4, 0, 3, nan, 9,  //
                                                       9, 9, 9, 9, 9});
  Tensor dout = Tensor::from_vector<float>({1, 1, 1, 2}, {5, 7});
  auto r = run_op<GradOf<MaxPool2dOp>>({x, dout}, V{2, 2}, V{2, 2}, V{0, 0}, false);
  check_close<float>(r.out(), {0, 0, 0, 0, 0,  //
                               5, 0, 0, 7, 0,  //
                               0, 0, 0, 0, 0});
}

TEST_CASE("max_pool2d gives NaN for a window holding a NaN wherever it sits, as its grad does",
          "[kernel][pool]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int at = 0; at < 4; ++at) {
    INFO("NaN at window place " << at);
    std::vector<float> v = {1, 2, 3, 4, 5, 6, 7, 8};  // [1, 1, 2, 4]: two 2x2 windows
    v[(at / 2) * 4 + at % 2] = nan;
    Tensor x = Tensor::from_vector<float>({1, 1, 2, 4}, v);
    for (auto k : {V{2, 2}, V{2, 3}}) {  // 2x2 takes its own path; a 2x3 window the general one
      auto r = run_op<MaxPool2dOp>({x}, k, V{2, 2});
      auto out = r.out().to_vector<float>();
      CHECK(std::isnan(out[0]));
      if (k[1] == 2) CHECK(out[1] == 8.0f);
    }
  }
}

TEST_CASE("avg_pool2d divides by the elements inside the image unless padding counts",
          "[kernel][pool]") {
  Tensor x = Tensor::from_vector<float>({1, 1, 2, 2}, {1, 2, 3, 4});
  auto ex = run_op<AvgPool2dOp>({x}, V{3, 3}, V{1, 1}, V{1, 1});
  CHECK(ex.out().dims().to_vector() == V{1, 1, 2, 2});
  check_close<float>(ex.out(), {2.5f, 2.5f, 2.5f, 2.5f});
  auto inc = run_op<AvgPool2dOp>({x}, V{3, 3}, V{1, 1}, V{1, 1}, false, false);
  check_close<float>(inc.out(), {10.f / 9, 10.f / 9, 10.f / 9, 10.f / 9});
  auto plain = run_op<AvgPool2dOp>({from_one<double>({1, 1, 4, 4})}, V{2, 2});
  check_close<double>(plain.out(), {3.5, 5.5, 11.5, 13.5});
}

TEST_CASE("avg_pool2d's grad spreads dout evenly over each window", "[kernel][pool]") {
  Tensor x = Tensor::from_vector<double>({1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor dout = Tensor::from_vector<double>({1, 1, 2, 2}, {1, 1, 1, 1});
  auto ex = run_op<GradOf<AvgPool2dOp>>({x, dout}, V{3, 3}, V{1, 1}, V{1, 1}, false, true);
  check_close<double>(ex.out(), {1, 1, 1, 1});
  auto inc = run_op<GradOf<AvgPool2dOp>>({x, dout}, V{3, 3}, V{1, 1}, V{1, 1}, false, false);
  check_close<double>(inc.out(), {4.0 / 9, 4.0 / 9, 4.0 / 9, 4.0 / 9});
}

namespace {
// avg_pool2d and its grad as loops over each output's window (pool_window,
// avg_pool_count), in the window's row-major order and the outputs' order.
template <typename T>
std::vector<T> avg_pool_by_windows(const std::vector<T>& x, const Pool2dGeometry& g, bool exclusive) {
  std::vector<T> out(static_cast<std::size_t>(g.n * g.c * g.ho * g.wo));
  for (std::int64_t pl = 0; pl < g.n * g.c; ++pl)
    for (std::int64_t oh = 0; oh < g.ho; ++oh)
      for (std::int64_t ow = 0; ow < g.wo; ++ow) {
        const PoolWindow r = pool_window(g, oh, ow);
        T s = 0;
        for (std::int64_t ih = r.hs; ih < r.he; ++ih)
          for (std::int64_t iw = r.ws; iw < r.we; ++iw) s += x[(pl * g.h + ih) * g.w + iw];
        const std::int64_t cnt = avg_pool_count(g, oh, ow, exclusive);
        out[(pl * g.ho + oh) * g.wo + ow] = cnt > 0 ? s / T(cnt) : T(0);
      }
  return out;
}

template <typename T>
std::vector<T> avg_pool_grad_by_windows(const std::vector<T>& d, const Pool2dGeometry& g, bool exclusive) {
  std::vector<T> dx(static_cast<std::size_t>(g.n * g.c * g.h * g.w), T(0));
  for (std::int64_t pl = 0; pl < g.n * g.c; ++pl)
    for (std::int64_t oh = 0; oh < g.ho; ++oh)
      for (std::int64_t ow = 0; ow < g.wo; ++ow) {
        const PoolWindow r = pool_window(g, oh, ow);
        const std::int64_t cnt = avg_pool_count(g, oh, ow, exclusive);
        if (cnt == 0) continue;
        const T v = d[(pl * g.ho + oh) * g.wo + ow] / T(cnt);
        for (std::int64_t ih = r.hs; ih < r.he; ++ih)
          for (std::int64_t iw = r.ws; iw < r.we; ++iw) dx[(pl * g.h + ih) * g.w + iw] += v;
      }
  return dx;
}

template <typename T>
void check_avg_pool_against_windows() {
  struct Case {
    V kernel, strides, pads;
    bool ceil;
  };
  const std::vector<Case> cases = {{{3, 3}, {1, 1}, {1, 1}, false}, {{3, 3}, {2, 2}, {1, 1}, false},
                                   {{2, 2}, {2, 2}, {0, 0}, false}, {{3, 3}, {3, 3}, {0, 0}, true},
                                   {{5, 4}, {2, 3}, {2, 1}, true},  {{1, 1}, {1, 1}, {0, 0}, false},
                                   {{4, 3}, {3, 1}, {1, 2, 0, 1}, true}, {{7, 9}, {1, 1}, {0, 0}, false}};
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(-3, 3);
  for (const Case& c : cases)
    for (const bool exclusive : {true, false}) {
      INFO("kernel " << c.kernel[0] << "x" << c.kernel[1] << " strides " << c.strides[0] << "," << c.strides[1]
                     << " pads " << c.pads.size() << " ceil " << c.ceil << " exclusive " << exclusive);
      const V dims{2, 3, 7, 9};
      std::vector<T> xv(2 * 3 * 7 * 9);
      for (T& v : xv) v = T(u(rng));
      const Tensor x = Tensor::from_vector<T>(Dims(dims), xv);
      auto fwd = run_op<AvgPool2dOp>({x}, c.kernel, c.strides, c.pads, c.ceil, exclusive);
      Pool2dGeometry g;
      g.n = 2, g.c = 3, g.h = 7, g.w = 9, g.ho = fwd.out().dims()[2], g.wo = fwd.out().dims()[3];
      g.kh = c.kernel[0], g.kw = c.kernel[1], g.sh = c.strides[0], g.sw = c.strides[1];
      if (c.pads.size() == 2) g.pt = g.pb = c.pads[0], g.pl = g.pr = c.pads[1];
      else g.pt = c.pads[0], g.pb = c.pads[1], g.pl = c.pads[2], g.pr = c.pads[3];
      CHECK(fwd.out().template to_vector<T>() == avg_pool_by_windows(xv, g, exclusive));
      std::vector<T> dv(static_cast<std::size_t>(fwd.out().numel()));
      for (T& v : dv) v = T(u(rng));
      const Tensor dout = Tensor::from_vector<T>(fwd.out().dims(), dv);
      auto bwd = run_op<GradOf<AvgPool2dOp>>({x, dout}, c.kernel, c.strides, c.pads, c.ceil, exclusive);
      CHECK(bwd.out().template to_vector<T>() == avg_pool_grad_by_windows(dv, g, exclusive));
    }
}
}  // namespace

TEST_CASE("avg_pool2d and its grad equal loops over each window bit for bit, whatever the window, stride, "
          "padding and ceil mode",
          "[kernel][pool]") {
  check_avg_pool_against_windows<float>();
  check_avg_pool_against_windows<double>();
}

TEST_CASE("adaptive_avg_pool2d averages floor/ceil-bounded windows", "[kernel][pool]") {
  auto r = run_op<AdaptiveAvgPool2dOp>({from_one<float>({1, 1, 3, 3})}, V{2, 2});
  CHECK(r.out().dims().to_vector() == V{1, 1, 2, 2});
  check_close<float>(r.out(), {3, 4, 6, 7});
  auto g = run_op<AdaptiveAvgPool2dOp>({from_one<double>({2, 1, 5, 7})}, V{1, 1});
  check_close<double>(g.out(), {18, 53});
  auto up = run_op<AdaptiveAvgPool2dOp>({from_one<float>({1, 1, 1, 2})}, V{2, 4});
  check_close<float>(up.out(), {1, 1, 2, 2, 1, 1, 2, 2});
}

TEST_CASE("adaptive_avg_pool2d's grad gives each input its windows' shares", "[kernel][pool]") {
  Tensor x = from_one<double>({1, 1, 3, 3});
  Tensor dout = Tensor::from_vector<double>({1, 1, 2, 2}, {1, 1, 1, 1});
  auto r = run_op<GradOf<AdaptiveAvgPool2dOp>>({x, dout}, V{2, 2});
  check_close<double>(r.out(), {0.25, 0.5, 0.25, 0.5, 1, 0.5, 0.25, 0.5, 0.25});
}

TEST_CASE("max pooling takes the max of integer windows, padding never winning", "[kernel]") {
  auto x = Tensor::from_vector<std::uint8_t>({1, 1, 2, 3}, {0, 255, 7, 3, 4, 9});
  auto r = run_op<MaxPool2dOp>({x}, std::vector<std::int64_t>{2, 2}, std::vector<std::int64_t>{1, 1},
                               std::vector<std::int64_t>{0, 0});
  CHECK(r.out().dtype() == DataType::UInt8);
  CHECK(r.out().to_vector<std::uint8_t>() == std::vector<std::uint8_t>{255, 255});
  auto s = Tensor::from_vector<std::int64_t>({1, 1, 2, 2}, {-9, -5, -7, -6});
  auto p = run_op<MaxPool2dOp>({s}, std::vector<std::int64_t>{2, 2}, std::vector<std::int64_t>{2, 2},
                               std::vector<std::int64_t>{1, 1});
  // Every window holds one real element; the padding around it never wins.
  CHECK(p.out().to_vector<std::int64_t>() == std::vector<std::int64_t>{-9, -5, -7, -6});
}

namespace {

// Every window size, stride, padding and ceil_mode of the float max-pool
// tests, each with two fresh [h, w] planes drawn from one stream seeded by
// `seed` (NaN, -inf and -0 among the values): body(k, s, p, ceil_mode, v, next),
// next() drawing on from the same stream.
template <typename Body>
void for_each_pool_case(std::uint32_t seed, std::int64_t h, std::int64_t w, Body body) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::function<std::uint32_t()> next = [&] { return seed = seed * 1664525u + 1013904223u; };
  for (std::int64_t k : {1, 2, 3, 5})
    for (std::int64_t s : {1, 2, 3})
      for (std::int64_t p = 0; 2 * p <= k; ++p)
        for (bool ceil_mode : {false, true}) {
          std::vector<float> v(static_cast<std::size_t>(2 * h * w));
          for (auto& e : v) {
            const std::uint32_t r = next() >> 8;
            e = r % 41 == 0 ? nan : r % 37 == 0 ? -inf : r % 31 == 0 ? -0.0f : float(r % 19) - 9;
          }
          body(k, s, p, ceil_mode, v, next);
        }
}

}  // namespace

TEST_CASE("max_pool2d of floats equals each window's first maximum for any window, stride and "
          "padding",
          "[kernel][pool]") {
  const std::int64_t h = 7, w = 9;
  for_each_pool_case(12345, h, w, [&](std::int64_t k, std::int64_t s, std::int64_t p, bool ceil_mode,
                                      const std::vector<float>& v, const std::function<std::uint32_t()>&) {
    Tensor x = Tensor::from_vector<float>({1, 2, h, w}, v);
    auto r = run_op<MaxPool2dOp>({x}, V{k, k}, V{s, s}, V{p, p}, ceil_mode);
    const Pool2dGeometry g{1, 2, h, w, r.out().dims()[2], r.out().dims()[3], k, k, s, s, p, p, p, p};
    const auto out = r.out().to_vector<float>();
    for (std::int64_t pl = 0; pl < 2; ++pl)
      for (std::int64_t oh = 0; oh < g.ho; ++oh)
        for (std::int64_t ow = 0; ow < g.wo; ++ow) {
          const float* plane = v.data() + pl * h * w;
          const float want = plane[pool_argmax(plane, g, pool_window(g, oh, ow))];
          const float got = out[static_cast<std::size_t>((pl * g.ho + oh) * g.wo + ow)];
          INFO("k " << k << " s " << s << " p " << p << " ceil " << ceil_mode << " at " << pl << "," << oh
                    << "," << ow);
          if (std::isnan(want)) CHECK(std::isnan(got));
          else CHECK((got == want && std::signbit(got) == std::signbit(want)));
        }
  });
}

TEST_CASE("max_pool2d's grad adds each dout at its window's first maximum for any window, stride "
          "and padding, NaN, -inf and -0 among the values",
          "[kernel][pool]") {
  const std::int64_t h = 7, w = 10;
  for_each_pool_case(777, h, w, [&](std::int64_t k, std::int64_t s, std::int64_t p, bool ceil_mode,
                                    const std::vector<float>& v, const std::function<std::uint32_t()>& next) {
    Tensor x = Tensor::from_vector<float>({1, 2, h, w}, v);
    const auto out_dims = run_op<MaxPool2dOp>({x}, V{k, k}, V{s, s}, V{p, p}, ceil_mode).out().dims();
    const Pool2dGeometry g{1, 2, h, w, out_dims[2], out_dims[3], k, k, s, s, p, p, p, p};
    std::vector<float> d(static_cast<std::size_t>(out_dims.numel()));
    for (auto& e : d) e = float(next() >> 8 & 15) - 7;
    auto r = run_op<GradOf<MaxPool2dOp>>({x, Tensor::from_vector<float>(out_dims, d)}, V{k, k}, V{s, s}, V{p, p},
                                         ceil_mode);
    std::vector<float> want(v.size(), 0.0f);
    for (std::int64_t pl = 0; pl < 2; ++pl)
      for (std::int64_t oh = 0; oh < g.ho; ++oh)
        for (std::int64_t ow = 0; ow < g.wo; ++ow) {
          const float* plane = v.data() + pl * h * w;
          want[static_cast<std::size_t>(pl * h * w + pool_argmax(plane, g, pool_window(g, oh, ow)))] +=
              d[static_cast<std::size_t>((pl * g.ho + oh) * g.wo + ow)];
        }
    INFO("k " << k << " s " << s << " p " << p << " ceil " << ceil_mode);
    CHECK(r.out().to_vector<float>() == want);
  });
}

namespace {

// max_pool2d_grad NHWC against NCHW on x [n, c, h, w] of few distinct
// values (ties, signed zeros, NaN in two windows) and dout with -0 and ties:
// the NCHW gradient transposed, bit for bit.
void check_nhwc_max_pool_grad(const V& x_dims, const V& k, const V& s, const V& pad, bool ceil_mode,
                              std::uint32_t seed) {
  INFO("x " << Dims(x_dims).to_string() << " k " << k[0] << "x" << k[1] << " s " << s[0] << " p " << pad[0]
            << " ceil " << ceil_mode);
  const float values[] = {-1.0f, -0.0f, 0.0f, 2.0f, 2.0f, 3.0f};
  std::mt19937 rng(seed);
  std::vector<float> v(static_cast<std::size_t>(Dims(x_dims).numel()));
  for (float& e : v) e = values[rng() % 6];
  v[3] = v[v.size() / 2 + 5] = std::numeric_limits<float>::quiet_NaN();
  const Tensor x = Tensor::from_vector<float>(Dims(x_dims), v);
  const Dims od = run_op<MaxPool2dOp>({x}, k, s, pad, ceil_mode).out().dims();
  std::vector<float> d(static_cast<std::size_t>(od.numel()));
  for (float& e : d) e = values[rng() % 6];
  const Tensor dout = Tensor::from_vector<float>(od, d);
  const Tensor want = to_nhwc<float>(run_op<GradOf<MaxPool2dOp>>({x, dout}, k, s, pad, ceil_mode).out());
  const Tensor got = run_op<GradOf<MaxPool2dOp>>({to_nhwc<float>(x), to_nhwc<float>(dout)}, k, s, pad, ceil_mode,
                                                 std::string("NHWC"))
                         .out();
  REQUIRE(got.dims() == want.dims());
  CHECK(std::memcmp(got.raw_data(), want.raw_data(), want.bytes()) == 0);
}

}  // namespace

TEST_CASE("max_pool2d_grad in NHWC gives the NCHW gradient's bits in NHWC, ties, signed zeros and NaN "
          "included",
          "[kernel][pool]") {
  for (std::int64_t c : {1, 3, 16, 37, 64}) {
    // ResNet's 3x3 stride 2 pad 1 (overlapping windows add up), and 2x2 stride 2.
    check_nhwc_max_pool_grad({2, c, 12, 11}, {3, 3}, {2, 2}, {1, 1}, false, 1);
    check_nhwc_max_pool_grad({2, c, 8, 9}, {2, 2}, {2, 2}, {0, 0}, false, 2);
    check_nhwc_max_pool_grad({2, c, 8, 8}, {2, 2}, {2, 2}, {0, 0}, false, 5);  // windows cover dx: no zero fill
    check_nhwc_max_pool_grad({1, c, 7, 7}, {2, 2}, {2, 2}, {0, 0}, true, 3);
    check_nhwc_max_pool_grad({1, c, 6, 5}, {3, 2}, {1, 2}, {1, 0, 1, 1}, false, 4);
  }
  // f64, through the same kernel.
  const Tensor x = filled<double>(Dims{2, 6, 5, 5}, -1, 1, 5), dout = filled<double>(Dims{2, 6, 3, 3}, -1, 1, 6);
  const Tensor want = to_nhwc<double>(run_op<GradOf<MaxPool2dOp>>({x, dout}, V{3, 3}, V{2, 2}, V{1, 1}, false).out());
  const Tensor got = run_op<GradOf<MaxPool2dOp>>({to_nhwc<double>(x), to_nhwc<double>(dout)}, V{3, 3}, V{2, 2},
                                                 V{1, 1}, false, std::string("NHWC"))
                         .out();
  CHECK(same_bits(got, want));
}

TEST_CASE("max_pool2d_grad in NHWC rejects an x that is not rank 4 and a dout that is not [N, Ho, Wo, C], "
          "naming the op, at build time and in the kernel",
          "[kernel][pool]") {
  const Tensor x3 = Tensor::zeros(Dims{4, 4, 3}, DataType::Float32);
  const Tensor x = Tensor::zeros(Dims{1, 4, 4, 3}, DataType::Float32);
  const Tensor nchw_dout = Tensor::zeros(Dims{1, 3, 2, 2}, DataType::Float32);
  KILN_CHECK_ERROR(run_op<GradOf<MaxPool2dOp>>({x3, x3}, V{2, 2}, V{2, 2}, V{0, 0}, false, std::string("NHWC")),
                   InvalidArgument, {"kiln.max_pool2d_grad"});
  KILN_CHECK_ERROR(
      run_op<GradOf<MaxPool2dOp>>({x, nchw_dout}, V{2, 2}, V{2, 2}, V{0, 0}, false, std::string("NHWC")),
      InvalidArgument, {"kiln.max_pool2d_grad", "dout", "[1, 2, 2, 3]"});
  // The kernel alone: the op built on a valid x and dout, run on others.
  auto built_on_valid = [](Builder& b, const std::vector<Value>&) -> Operation* {
    const Value xv = b.create<DataOp>("x", V{1, 4, 4, 3}, DataType::Float32).result();
    const Value dv = b.create<DataOp>("d", V{1, 2, 2, 3}, DataType::Float32).result();
    return b.create<GradOf<MaxPool2dOp>>(MaxPool2dOp::Attributes{V{2, 2}, V{2, 2}, V{0, 0}, false, "NHWC"}, xv, dv)
        .operation();
  };
  KILN_CHECK_ERROR(run_kernel({x3, x3}, built_on_valid), InvalidArgument,
                   {"kiln.max_pool2d_grad", "[N, H, W, C]", "[4x4x3]"});
  KILN_CHECK_ERROR(run_kernel({x, nchw_dout}, built_on_valid), InvalidArgument,
                   {"kiln.max_pool2d_grad", "dout", "[1x3x2x2]"});
}

namespace {

// x [2, 2, 8, 10]: image b, channel c holds the plane f(y, x) = 2y + 3x +
// 10c + 100b, linear, so that bilinear sampling is exact and a bin's
// average is f at the bin's centre.
template <typename T = double>
Tensor roi_ramp() {
  std::vector<T> v;
  for (int b = 0; b < 2; ++b)
    for (int c = 0; c < 2; ++c)
      for (int y = 0; y < 8; ++y)
        for (int x = 0; x < 10; ++x) v.push_back(2 * y + 3 * x + 10 * c + 100 * b);
  return Tensor::from_vector<T>({2, 2, 8, 10}, v);
}

double roi_ramp_at(double y, double x, int c, int b) { return 2 * y + 3 * x + 10 * c + 100 * b; }

}  // namespace

TEST_CASE("roi_align averages each bin of a region of its image to the value at the bin's centre",
          "[kernel][pool]") {
  // Region (x1, y1, x2, y2) = (2.5, 1.5, 6.5, 5.5) of image 1, half-pixel
  // aligned: it starts at (y 1, x 2), 4 x 4, so 2 x 2 bins centre on y 2, 4
  // and x 3, 5; then the same region given at twice the scale, not aligned.
  const Tensor aligned_roi = Tensor::from_vector<double>({1, 4}, {2.5, 1.5, 6.5, 5.5});
  const Tensor image1 = Tensor::from_vector<std::int64_t>({1}, {1});
  std::vector<double> want;
  for (int c = 0; c < 2; ++c)
    for (double y : {2.0, 4.0})
      for (double x : {3.0, 5.0}) want.push_back(roi_ramp_at(y, x, c, 1));
  for (std::int64_t ratio : {0, 2, 3}) {
    INFO("sampling_ratio " << ratio);
    auto r = run_op<RoiAlignOp>({roi_ramp(), aligned_roi, image1}, V{2, 2}, 1.0, ratio, true);
    CHECK(r.out().dims().to_vector() == V{1, 2, 2, 2});
    check_close<double>(r.out(), want, 1e-12, 1e-12);
  }
  const Tensor scaled = Tensor::from_vector<double>({1, 4}, {4, 2, 12, 10});
  auto s = run_op<RoiAlignOp>({roi_ramp(), scaled, Tensor::from_vector<std::int32_t>({1}, {1})}, V{2, 2}, 0.5,
                              std::int64_t{2}, false);
  check_close<double>(s.out(), want, 1e-12, 1e-12);
  // Two regions of different images in one call, f32.
  const Tensor rois = Tensor::from_vector<float>({2, 4}, {2.5f, 1.5f, 6.5f, 5.5f, 4, 2, 10, 8});
  auto f = run_op<RoiAlignOp>({roi_ramp<float>(), rois, Tensor::from_vector<std::int64_t>({2}, {0, 1})}, V{1, 1},
                              1.0, std::int64_t{2}, true);
  CHECK(f.out().dims().to_vector() == V{2, 2, 1, 1});
  auto at = [](double y, double x, int c, int b) { return static_cast<float>(roi_ramp_at(y, x, c, b)); };
  check_close<float>(f.out(), {at(3, 4, 0, 0), at(3, 4, 1, 0), at(4.5, 6.5, 0, 1), at(4.5, 6.5, 1, 1)});
}

TEST_CASE("roi_align reads 0 for samples over a pixel outside the image, the edge within one, and counts both",
          "[kernel][pool]") {
  // 4 x 4 image of 4s; region x from -6 to 2, y from 0 to 8 (not aligned),
  // 1 x 2 bins of one sample: x -4 (outside: 0), x 0 (inside); y 4 (on the
  // far edge: the last row).
  const Tensor x = Tensor::from_vector<double>({1, 1, 4, 4}, std::vector<double>(16, 4.0));
  const Tensor bi = Tensor::from_vector<std::int64_t>({1}, {0});
  auto r = run_op<RoiAlignOp>({x, Tensor::from_vector<double>({1, 4}, {-6, 0, 2, 8}), bi}, V{1, 2}, 1.0,
                              std::int64_t{1}, false);
  check_close<double>(r.out(), {0.0, 4.0});
  // Two samples per bin, one outside: the average still divides by 2.
  auto half = run_op<RoiAlignOp>({x, Tensor::from_vector<double>({1, 4}, {-6, 0, 2, 8}), bi}, V{1, 1}, 1.0,
                                 std::int64_t{2}, false);
  // x samples -4 (out) and 0 (in); y samples 2 and 6 (6 > 4: out).
  check_close<double>(half.out(), {4.0 * 1 / 4});
  // Between -1 and 0 a sample reads the edge pixel.
  const Tensor ramp = Tensor::from_vector<double>({1, 1, 1, 3}, {7, 8, 9});
  auto edge = run_op<RoiAlignOp>({ramp, Tensor::from_vector<double>({1, 4}, {-1, 0, 0, 1}), bi}, V{1, 1}, 1.0,
                                 std::int64_t{1}, false);
  check_close<double>(edge.out(), {7.0});
}

TEST_CASE("roi_align's adaptive grid takes ceil(bin size) samples per axis and divides by all of them",
          "[kernel][pool]") {
  // A 1 x 4 row of 4s; region x from -3 to 2.5, one bin: 6 samples (5.5
  // rounded up), at -2.54, -1.63 (outside: 0), -0.71 (the edge), 0.21,
  // 1.13, 2.04: 4 · 4 / 6. A grid of floor(5.5) = 5 would give 3 · 4 / 5.
  const Tensor x = Tensor::from_vector<double>({1, 1, 1, 4}, {4, 4, 4, 4});
  const Tensor bi = Tensor::from_vector<std::int64_t>({1}, {0});
  for (std::int64_t ratio : {0, -1}) {
    auto r = run_op<RoiAlignOp>({x, Tensor::from_vector<double>({1, 4}, {-3, 0, 2.5, 1}), bi}, V{1, 1}, 1.0, ratio,
                                false);
    check_close<double>(r.out(), {16.0 / 6});
  }
  // An aligned region of no width samples nothing, however tall: its bins are 0.
  auto flat = run_op<RoiAlignOp>({x, Tensor::from_vector<double>({1, 4}, {1, 0, 1, 1e12}), bi}, V{1, 1}, 1.0,
                                 std::int64_t{0}, true);
  check_close<double>(flat.out(), {0.0});
}

TEST_CASE("roi_align places an f32 model's samples in f32, as ONNX Runtime and torchvision do", "[kernel][pool]") {
  // 20 · 0.1f is 2 in f32 (2.0000000298 in f64): a grid of 2 x 2 samples
  // at 0.5 and 1.5, each reading a quarter of the centre's 9.
  const Tensor x = Tensor::from_vector<float>({1, 1, 3, 3}, {0, 0, 0, 0, 9, 0, 0, 0, 0});
  auto r = run_op<RoiAlignOp>({x, Tensor::from_vector<float>({1, 4}, {0, 0, 20, 20}),
                               Tensor::from_vector<std::int64_t>({1}, {0})},
                              V{1, 1}, static_cast<double>(0.1f), std::int64_t{0}, false);
  check_close<float>(r.out(), {2.25f});
}

TEST_CASE("roi_align's max mode takes the largest weighted corner of any sample, as ONNX defines it",
          "[kernel][pool]") {
  const Tensor x = Tensor::from_vector<double>({1, 1, 6, 6}, std::vector<double>(36, 5.0));
  const Tensor roi = Tensor::from_vector<double>({1, 4}, {0, 0, 4, 4});
  const Tensor bi = Tensor::from_vector<std::int64_t>({1}, {0});
  // One sample per bin at (1, 1), (1, 3), ...: on pixels, weight 1.
  auto on = run_op<RoiAlignOp>({x, roi, bi}, V{2, 2}, 1.0, std::int64_t{1}, false, std::string("max"));
  check_close<double>(on.out(), {5, 5, 5, 5});
  // Samples at 0.5, 1.5: each corner weighs 1/4, so the max is 5 / 4.
  auto between = run_op<RoiAlignOp>({x, roi, bi}, V{2, 2}, 1.0, std::int64_t{2}, false, std::string("max"));
  check_close<double>(between.out(), {1.25, 1.25, 1.25, 1.25});
  // Past the last pixel a sample reads it with weight 1 (3.5 of 4 pixels).
  auto edge = run_op<RoiAlignOp>({Tensor::from_vector<double>({1, 1, 4, 4}, std::vector<double>(16, 5.0)), roi, bi},
                                 V{2, 2}, 1.0, std::int64_t{2}, false, std::string("max"));
  check_close<double>(edge.out(), {1.25, 2.5, 2.5, 5});
  auto mixed = run_op<RoiAlignOp>({from_one<double>({1, 1, 4, 4}), roi, bi}, V{1, 1}, 1.0, std::int64_t{1},
                                  false, std::string("max"));
  check_close<double>(mixed.out(), {11});  // one sample at (2, 2): x[2][2] = 11
}

TEST_CASE("roi_align's grad gives each pixel its weight in every sample that reads it", "[kernel][pool]") {
  // One bin over a 3 x 3 image, 2 x 2 samples at 0.5 and 1.5: each spreads a
  // quarter of its quarter of dout to four pixels; the centre is in all four.
  const Tensor x = from_one<double>({1, 1, 3, 3});
  const Tensor roi = Tensor::from_vector<double>({1, 4}, {0, 0, 2, 2});
  const Tensor bi = Tensor::from_vector<std::int64_t>({1}, {0});
  const Tensor dout = Tensor::from_vector<double>({1, 1, 1, 1}, {16});
  auto r = run_op<GradOf<RoiAlignOp>>({x, roi, bi, dout}, V{1, 1}, 1.0, std::int64_t{2}, false, std::string("avg"));
  check_close<double>(r.out(), {1, 2, 1, 2, 4, 2, 1, 2, 1});
  // max: the whole of dout to the winning term's pixel, times its weight.
  auto m = run_op<GradOf<RoiAlignOp>>({x, roi, bi, dout}, V{1, 1}, 1.0, std::int64_t{2}, false, std::string("max"));
  // samples' largest terms: 0.25·x at the far corner; the largest is x[2][2] = 9 at (1.5, 1.5).
  check_close<double>(m.out(), {0, 0, 0, 0, 0, 0, 0, 0, 4});
}

TEST_CASE("roi_align names a region whose image is not in x, a corner that is not finite, and a bin of too many "
          "samples",
          "[kernel][pool]") {
  const Tensor x = from_one<float>({2, 1, 4, 4});
  const Tensor roi = Tensor::from_vector<float>({2, 4}, {0, 0, 2, 2, 1, 1, 3, 3});
  KILN_CHECK_ERROR(run_op<RoiAlignOp>({x, roi, Tensor::from_vector<std::int64_t>({2}, {0, 2})}, V{2, 2}),
                   InvalidArgument, {"kiln.roi_align", "region 1", "image 2", "x's 2"});
  KILN_CHECK_ERROR(run_op<RoiAlignOp>({x, roi, Tensor::from_vector<std::int32_t>({2}, {-1, 0})}, V{2, 2}),
                   InvalidArgument, {"kiln.roi_align", "region 0", "image -1"});
  const float nan = std::numeric_limits<float>::quiet_NaN();
  KILN_CHECK_ERROR(run_op<RoiAlignOp>({x, Tensor::from_vector<float>({1, 4}, {0, nan, 2, 2}),
                                       Tensor::from_vector<std::int64_t>({1}, {0})},
                                      V{2, 2}),
                   InvalidArgument, {"kiln.roi_align", "region 0", "not finite"});
  KILN_CHECK_ERROR(run_op<RoiAlignOp>({x, Tensor::from_vector<float>({1, 4}, {0, 0, 1e7f, 1e7f}),
                                       Tensor::from_vector<std::int64_t>({1}, {0})},
                                      V{1, 1}),
                   InvalidArgument, {"kiln.roi_align", "region 0", "points per bin", "sampling_ratio"});
}

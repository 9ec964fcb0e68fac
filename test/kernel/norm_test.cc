// Reference tests of the fused layer_norm, rms_norm and batch_norm kernels
// and their gradient kernels: hand-computed values, and a slow double
// reference on rows of 128–512 elements (f32 and f64); batch_norm's running
// statistics updated in place (training) or passed through (is_test); NHWC
// batch_norm and its grad against the NCHW kernels on the transposed input.
#include <cmath>
#include <cstring>
#include <limits>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "kernel/kernel_test_util.h"

using namespace kiln;
using kiln_test::check_close;
using kiln_test::filled;
using kiln_test::run_op;

namespace {

// layer_norm / rms_norm of [m, n] rows, in double: y, mean, rstd.
struct RefNorm {
  std::vector<double> y, mean, rstd;
};
RefNorm ref_norm(const std::vector<double>& x, const std::vector<double>& w,
                 const std::vector<double>& b, std::int64_t m, std::int64_t n, double eps,
                 bool rms) {
  RefNorm r;
  for (std::int64_t i = 0; i < m; ++i) {
    double mu = 0, ss = 0;
    if (!rms) {
      for (std::int64_t j = 0; j < n; ++j) mu += x[i * n + j];
      mu /= double(n);
    }
    for (std::int64_t j = 0; j < n; ++j) ss += (x[i * n + j] - mu) * (x[i * n + j] - mu);
    const double rs = 1 / std::sqrt(ss / double(n) + eps);
    r.mean.push_back(mu);
    r.rstd.push_back(rs);
    for (std::int64_t j = 0; j < n; ++j)
      r.y.push_back((x[i * n + j] - mu) * rs * w[j] + (rms ? 0.0 : b[j]));
  }
  return r;
}

template <typename T>
std::vector<double> as_double(const Tensor& t) {
  auto v = t.to_vector<T>();
  return {v.begin(), v.end()};
}

}  // namespace

TEST_CASE("layer_norm normalizes each row to zero mean and unit variance, then scales and shifts",
          "[kernel][norm]") {
  const double eps = 1e-5;
  Tensor x = Tensor::from_vector<float>(Dims({2, 4}), {1, 2, 3, 4, -2, 0, 0, 2});
  Tensor w = Tensor::from_vector<float>(Dims({4}), {1, 2, 1, 0.5f});
  Tensor b = Tensor::from_vector<float>(Dims({4}), {0, 0, 1, -1});
  auto r = run_op<LayerNormOp>({x, w, b}, std::int64_t{1}, eps);
  // row 0: mean 2.5, var 1.25; row 1: mean 0, var 2.
  const double r0 = 1 / std::sqrt(1.25 + eps), r1 = 1 / std::sqrt(2.0 + eps);
  check_close<float>(r.out(0), {float(-1.5 * r0), float(-0.5 * r0 * 2), float(0.5 * r0 + 1),
                                float(1.5 * r0 * 0.5 - 1), float(-2 * r1), 0.0f, 1.0f,
                                float(2 * r1 * 0.5 - 1)});
  check_close<float>(r.out(1), {2.5f, 0.0f});
  check_close<float>(r.out(2), {float(r0), float(r1)});
}

TEST_CASE("layer_norm matches a double reference over the trailing axes, f32 and f64",
          "[kernel][norm]") {
  for (std::int64_t n : {128, 131, 512}) {
    INFO("row length " << n);
    Tensor x = filled<float>(Dims({3, 2, n}), -2, 3, 7);
    Tensor w = filled<float>(Dims({n}), 0.5, 1.5, 8), b = filled<float>(Dims({n}), -1, 1, 9);
    auto ref = ref_norm(as_double<float>(x), as_double<float>(w), as_double<float>(b), 6, n, 1e-5,
                        false);
    auto r = run_op<LayerNormOp>({x, w, b}, std::int64_t{-1}, 1e-5);
    check_close<float>(r.out(0), std::vector<float>(ref.y.begin(), ref.y.end()), 1e-4, 1e-5);
    check_close<float>(r.out(1), std::vector<float>(ref.mean.begin(), ref.mean.end()), 1e-5, 1e-6);
    check_close<float>(r.out(2), std::vector<float>(ref.rstd.begin(), ref.rstd.end()), 1e-5);
    Tensor xd = filled<double>(Dims({6, n}), -2, 3, 7);
    Tensor wd = filled<double>(Dims({n}), 0.5, 1.5, 8), bd = filled<double>(Dims({n}), -1, 1, 9);
    auto refd = ref_norm(xd.to_vector<double>(), wd.to_vector<double>(), bd.to_vector<double>(), 6,
                         n, 1e-5, false);
    auto rd = run_op<LayerNormOp>({xd, wd, bd}, std::int64_t{1}, 1e-5);
    check_close<double>(rd.out(0), refd.y, 1e-12, 1e-12);
  }
  // Normalizing the last two axes with a weight shaped like them.
  Tensor x = filled<float>(Dims({2, 3, 4}), -1, 1, 3);
  Tensor w = filled<float>(Dims({3, 4}), -1, 1, 4), b = filled<float>(Dims({3, 4}), -1, 1, 5);
  auto ref = ref_norm(as_double<float>(x), as_double<float>(w), as_double<float>(b), 2, 12, 1e-3,
                      false);
  auto r = run_op<LayerNormOp>({x, w, b}, std::int64_t{1}, 1e-3);
  check_close<float>(r.out(0), std::vector<float>(ref.y.begin(), ref.y.end()), 1e-4, 1e-5);
  CHECK(r.out(1).dims() == Dims({2}));
}

TEST_CASE("rms_norm divides each row by its root mean square, then scales", "[kernel][norm]") {
  const double eps = 1e-6;
  Tensor x = Tensor::from_vector<float>(Dims({2, 2}), {3, 4, 1, -1});
  Tensor w = Tensor::from_vector<float>(Dims({2}), {1, 2});
  auto r = run_op<RmsNormOp>({x, w}, std::int64_t{-1}, eps);
  // rms: sqrt(12.5) and 1.
  const double r0 = 1 / std::sqrt(12.5 + eps), r1 = 1 / std::sqrt(1 + eps);
  check_close<float>(r.out(0), {float(3 * r0), float(8 * r0), float(r1), float(-2 * r1)});
  check_close<float>(r.out(1), {float(r0), float(r1)});
  for (std::int64_t n : {128, 256}) {
    Tensor xd = filled<double>(Dims({5, n}), -2, 2, 11);
    Tensor wd = filled<double>(Dims({n}), 0.5, 1.5, 12);
    auto ref = ref_norm(xd.to_vector<double>(), wd.to_vector<double>(), {}, 5, n, eps, true);
    auto rd = run_op<RmsNormOp>({xd, wd}, std::int64_t{1}, eps);
    check_close<double>(rd.out(0), ref.y, 1e-12, 1e-12);
    check_close<double>(rd.out(1), ref.rstd, 1e-12, 1e-12);
  }
}

TEST_CASE("layer_norm_grad and rms_norm_grad match hand-derived gradients", "[kernel][norm]") {
  // One row x = [1, 3], weight [2, 1], eps 0: mean 2, rstd 1, x̂ = [-1, 1].
  // With dy = [1, 0]: g = dy·w = [2, 0]; mean(g) = 1, mean(g·x̂) = -1;
  // dx = rstd·(g - 1 + x̂) = [0, 0]; dweight = dy·x̂ = [-1, 0]; dbias = [1, 0].
  Tensor x = Tensor::from_vector<double>(Dims({1, 2}), {1, 3});
  Tensor w = Tensor::from_vector<double>(Dims({2}), {2, 1});
  Tensor mean = Tensor::from_vector<double>(Dims({1}), {2});
  Tensor rstd = Tensor::from_vector<double>(Dims({1}), {1});
  Tensor dy = Tensor::from_vector<double>(Dims({1, 2}), {1, 0});
  auto r = run_op<GradOf<LayerNormOp>>({x, w, mean, rstd, dy}, std::int64_t{1}, 1e-5);
  check_close<double>(r.out(0), {0, 0}, 1e-12, 1e-12);
  check_close<double>(r.out(1), {-1, 0});
  check_close<double>(r.out(2), {1, 0});
  // rms_norm, x = [1, 1], rstd 1 (x̂ = x), w = [2, 1], dy = [1, 0]:
  // g = [2, 0], mean(g·x̂) = 1, dx = g - x̂ = [1, -1]; dweight = [1, 0].
  Tensor xr = Tensor::from_vector<double>(Dims({1, 2}), {1, 1});
  auto rr = run_op<GradOf<RmsNormOp>>({xr, w, rstd, dy}, std::int64_t{1}, 1e-6);
  check_close<double>(rr.out(0), {1, -1});
  check_close<double>(rr.out(1), {1, 0});
}

TEST_CASE("batch_norm in training normalizes with batch statistics and updates the running ones "
          "in place",
          "[kernel][norm]") {
  // x [2, 2, 2]: channel 0 holds {1, 3, 5, 7} (mean 4, var 5, unbiased 20/3),
  // channel 1 holds {2, 2, 2, 2} (mean 2, var 0).
  Tensor x = Tensor::from_vector<float>(Dims({2, 2, 2}), {1, 3, 2, 2, 5, 7, 2, 2});
  Tensor scale = Tensor::from_vector<float>(Dims({2}), {2, 1});
  Tensor bias = Tensor::from_vector<float>(Dims({2}), {0, 0.5f});
  Tensor rm = Tensor::from_vector<float>(Dims({2}), {1, 0});
  Tensor rv = Tensor::from_vector<float>(Dims({2}), {1, 1});
  const double eps = 1e-5;
  auto r = run_op<BatchNormOp>({x, scale, bias, rm, rv}, 0.9, eps, false);
  const double k = 2 / std::sqrt(5 + eps);
  check_close<float>(r.out(0), {float(-3 * k), float(-k), 0.5f, 0.5f, float(k), float(3 * k),
                                0.5f, 0.5f});
  check_close<float>(r.out(1), {0.9f * 1 + 0.1f * 4, 0.1f * 2});
  check_close<float>(r.out(2), {float(0.9 + 0.1 * 20.0 / 3), 0.9f});
  check_close<float>(r.out(3), {4, 2});
  check_close<float>(r.out(4), {float(1 / std::sqrt(5 + eps)), float(1 / std::sqrt(eps))}, 1e-4);
  // In place: the running statistics' own buffers changed.
  check_close<float>(rm, {0.9f * 1 + 0.1f * 4, 0.1f * 2});
}

TEST_CASE("batch_norm in test mode normalizes with the running statistics and leaves them",
          "[kernel][norm]") {
  Tensor x = Tensor::from_vector<double>(Dims({1, 2, 3}), {1, 2, 3, 4, 5, 6});
  Tensor scale = Tensor::from_vector<double>(Dims({2}), {1, 2});
  Tensor bias = Tensor::from_vector<double>(Dims({2}), {0, 1});
  Tensor rm = Tensor::from_vector<double>(Dims({2}), {2, 0});
  Tensor rv = Tensor::from_vector<double>(Dims({2}), {4, 1});
  auto r = run_op<BatchNormOp>({x, scale, bias, rm, rv}, 0.9, 1e-12, true);
  check_close<double>(r.out(0), {-0.5, 0, 0.5, 9, 11, 13}, 1e-9, 1e-9);
  check_close<double>(r.out(1), {2, 0});
  check_close<double>(r.out(2), {4, 1});
  check_close<double>(r.out(3), {2, 0});
  check_close<double>(r.out(4), {0.5, 1}, 1e-9);
}

TEST_CASE("batch_norm_grad matches hand-derived gradients in training and test mode",
          "[kernel][norm]") {
  // One channel, x = [1, 3] (mean 2, invstd 1, x̂ = [-1, 1]), scale 2, dy = [1, 0]:
  // dbias = 1, dscale = Σ dy·x̂ = -1; training dx = 2·(dy - 0.5 - x̂·(-0.5)) = [0, 0];
  // test dx = 2·dy = [2, 0].
  Tensor x = Tensor::from_vector<double>(Dims({2, 1}), {1, 3});
  Tensor scale = Tensor::from_vector<double>(Dims({1}), {2});
  Tensor mean = Tensor::from_vector<double>(Dims({1}), {2});
  Tensor inv = Tensor::from_vector<double>(Dims({1}), {1});
  Tensor dy = Tensor::from_vector<double>(Dims({2, 1}), {1, 0});
  auto r = run_op<GradOf<BatchNormOp>>({x, scale, mean, inv, dy}, 0.9, 1e-5, false);
  check_close<double>(r.out(0), {0, 0}, 1e-12, 1e-12);
  check_close<double>(r.out(1), {-1});
  check_close<double>(r.out(2), {1});
  auto t = run_op<GradOf<BatchNormOp>>({x, scale, mean, inv, dy}, 0.9, 1e-5, true);
  check_close<double>(t.out(0), {2, 0});
  check_close<double>(t.out(1), {-1});
  check_close<double>(t.out(2), {1});
}

namespace {

// [n, c, h, w] values as [n, h, w, c], and back.
template <typename T>
Tensor nchw_to_nhwc(const Tensor& t) {
  const auto& d = t.dims();
  const auto v = t.to_vector<T>();
  std::vector<T> out(v.size());
  const std::int64_t s = d[2] * d[3];
  for (std::int64_t n = 0; n < d[0]; ++n)
    for (std::int64_t c = 0; c < d[1]; ++c)
      for (std::int64_t p = 0; p < s; ++p)
        out[std::size_t((n * s + p) * d[1] + c)] = v[std::size_t((n * d[1] + c) * s + p)];
  return Tensor::from_vector<T>(Dims{d[0], d[2], d[3], d[1]}, out);
}
template <typename T>
Tensor nhwc_to_nchw(const Tensor& t) {
  const auto& d = t.dims();
  const auto v = t.to_vector<T>();
  std::vector<T> out(v.size());
  const std::int64_t s = d[1] * d[2];
  for (std::int64_t n = 0; n < d[0]; ++n)
    for (std::int64_t c = 0; c < d[3]; ++c)
      for (std::int64_t p = 0; p < s; ++p)
        out[std::size_t((n * d[3] + c) * s + p)] = v[std::size_t((n * s + p) * d[3] + c)];
  return Tensor::from_vector<T>(Dims{d[0], d[3], d[1], d[2]}, out);
}

// The NHWC kernels sum each channel in the NCHW kernel's order, but are
// compiled per SIMD level (where a · b + c may become one FMA): within a
// few ulp of the NCHW results, not bit for bit.
template <typename T>
void check_like(const Tensor& got, const Tensor& want) {
  REQUIRE(got.dims() == want.dims());
  const double rtol = std::is_same_v<T, float> ? 2e-6 : 1e-14;
  check_close<T>(got, want.to_vector<T>(), rtol, rtol);
}

// batch_norm NHWC on x [n, c, h, w] transposed against NCHW on x: y, the
// running statistics updated in place, the saved ones.
template <typename T>
void check_nhwc_batch_norm(const Dims& d, bool is_test, std::uint32_t seed) {
  INFO("x [" << d.to_string() << "] is_test " << is_test);
  const Dims cd({d[1]});
  const Tensor x = filled<T>(d, -3, 5, seed), scale = filled<T>(cd, 0.5, 1.5, seed + 1);
  const Tensor bias = filled<T>(cd, -1, 1, seed + 2);
  Tensor rm = filled<T>(cd, -0.5, 0.5, seed + 3), rv = filled<T>(cd, 0.5, 2, seed + 4);
  Tensor rm2 = Tensor::from_vector<T>(cd, rm.to_vector<T>()), rv2 = Tensor::from_vector<T>(cd, rv.to_vector<T>());
  auto want = run_op<BatchNormOp>({x, scale, bias, rm, rv}, 0.9, 1e-5, is_test);
  auto got = run_op<BatchNormOp>({nchw_to_nhwc<T>(x), scale, bias, rm2, rv2}, 0.9, 1e-5, is_test,
                                 std::string("NHWC"));
  check_like<T>(nhwc_to_nchw<T>(got.out(0)), want.out(0));
  for (std::size_t i = 1; i < 5; ++i) {
    INFO("output #" << i);
    check_like<T>(got.out(i), want.out(i));
  }
  check_like<T>(rm2, rm);  // in place, as NCHW
  check_like<T>(rv2, rv);
}

}  // namespace

TEST_CASE("batch_norm in NHWC gives the NCHW op's y and statistics on the transposed input, running "
          "statistics updated alike, in training and test mode",
          "[kernel][norm]") {
  for (bool is_test : {false, true}) {
    // Rows per image: 63 (16-row lanes and a tail), 16 (no tail), 5 (tail only).
    check_nhwc_batch_norm<float>(Dims{2, 5, 7, 9}, is_test, 1);
    check_nhwc_batch_norm<float>(Dims{3, 20, 4, 4}, is_test, 2);
    check_nhwc_batch_norm<float>(Dims{4, 64, 1, 5}, is_test, 3);
    check_nhwc_batch_norm<float>(Dims{2, 67, 12, 11}, is_test, 4);
    check_nhwc_batch_norm<double>(Dims{2, 19, 6, 7}, is_test, 5);
  }
}

namespace {

template <typename T>
void check_nhwc_batch_norm_grad(const Dims& d, bool is_test, std::uint32_t seed) {
  INFO("x [" << d.to_string() << "] is_test " << is_test);
  const Dims cd({d[1]});
  const Tensor x = filled<T>(d, -3, 5, seed), dy = filled<T>(d, -1, 1, seed + 1);
  const Tensor scale = filled<T>(cd, 0.5, 1.5, seed + 2);
  const Tensor mean = filled<T>(cd, 0, 1, seed + 3), invstd = filled<T>(cd, 0.2, 0.6, seed + 4);
  auto want = run_op<GradOf<BatchNormOp>>({x, scale, mean, invstd, dy}, 0.9, 1e-5, is_test);
  auto got = run_op<GradOf<BatchNormOp>>({nchw_to_nhwc<T>(x), scale, mean, invstd, nchw_to_nhwc<T>(dy)}, 0.9,
                                         1e-5, is_test, std::string("NHWC"));
  check_like<T>(nhwc_to_nchw<T>(got.out(0)), want.out(0));
  check_like<T>(got.out(1), want.out(1));
  check_like<T>(got.out(2), want.out(2));
}

}  // namespace

TEST_CASE("batch_norm_grad in NHWC gives the NCHW op's dx, dscale and dbias on the transposed input",
          "[kernel][norm]") {
  for (bool is_test : {false, true}) {
    check_nhwc_batch_norm_grad<float>(Dims{2, 5, 7, 9}, is_test, 11);
    check_nhwc_batch_norm_grad<float>(Dims{3, 20, 4, 4}, is_test, 12);
    check_nhwc_batch_norm_grad<float>(Dims{4, 64, 1, 5}, is_test, 13);
    check_nhwc_batch_norm_grad<float>(Dims{2, 67, 12, 11}, is_test, 14);
    check_nhwc_batch_norm_grad<double>(Dims{2, 19, 6, 7}, is_test, 15);
  }
}

TEST_CASE("batch_norm and its grad in NHWC reject an x that is not rank 4, naming the op, at build "
          "time and in the kernel",
          "[kernel][norm]") {
  const Tensor x = filled<float>(Dims{2, 3, 4}, -1, 1, 1), c = filled<float>(Dims{4}, 0.5, 1, 2);
  KILN_CHECK_ERROR(run_op<BatchNormOp>({x, c, c, c, c}, 0.9, 1e-5, false, std::string("NHWC")), InvalidArgument,
                   {"kiln.batch_norm", "NHWC", "rank-4"});
  KILN_CHECK_ERROR(run_op<GradOf<BatchNormOp>>({x, c, c, c, x}, 0.9, 1e-5, false, std::string("NHWC")),
                   InvalidArgument, {"kiln.batch_norm_grad", "NHWC", "rank-4"});
  // The kernels alone: the op built on a rank-4 x, run on the rank-3 one.
  auto on_rank4 = [](bool grad) {
    return [grad](Builder& b, const std::vector<Value>& v) -> Operation* {
      const Value x4 = b.create<DataOp>("x4", std::vector<std::int64_t>{2, 3, 1, 4}, DataType::Float32).result();
      if (grad)
        return b.create<GradOf<BatchNormOp>>(BatchNormOp::Attributes{0.9, 1e-5, false, "NHWC"}, x4, v[1], v[2],
                                             v[3], x4).operation();
      return b.create<BatchNormOp>(x4, v[1], v[2], v[3], v[4], 0.9, 1e-5, false, std::string("NHWC")).operation();
    };
  };
  KILN_CHECK_ERROR(kiln_test::run_kernel({x, c, c, c, c}, on_rank4(false)), InvalidArgument,
                   {"kiln.batch_norm", "[N, H, W, C]", "[2x3x4]"});
  KILN_CHECK_ERROR(kiln_test::run_kernel({x, c, c, c, x}, on_rank4(true)), InvalidArgument,
                   {"kiln.batch_norm_grad", "[N, H, W, C]", "[2x3x4]"});
}

namespace {

// Equal bit for bit, or both NaN (a NaN's sign and payload depend on the
// operation that made it).
template <typename T>
void check_same_values(const Tensor& got, const Tensor& want) {
  REQUIRE(got.dims() == want.dims());
  const auto g = got.to_vector<T>(), w = want.to_vector<T>();
  for (std::size_t i = 0; i < g.size(); ++i) {
    INFO("element " << i << ": " << g[i] << " vs " << w[i]);
    CHECK(((std::isnan(g[i]) && std::isnan(w[i])) || std::memcmp(&g[i], &w[i], sizeof(T)) == 0));
  }
}

// x of dims d in `format` and its [C] operands: channel 0's pre-activation
// exactly 0 (scale 0, bias 0), channel 1's exactly 6 (scale 0, bias 6),
// channel 2 holding a NaN.
template <typename T>
struct FusedNormCase {
  Tensor x, scale, bias, rm, rv, dy;
  FusedNormCase(const Dims& d, bool nhwc, std::uint32_t seed) {
    const std::int64_t c = nhwc ? d[3] : d[1];
    auto xv = filled<T>(d, -3, 5, seed).template to_vector<T>();
    xv[static_cast<std::size_t>(nhwc ? 2 : 2 * d[2] * d[3])] = std::numeric_limits<T>::quiet_NaN();
    auto sv = filled<T>(Dims({c}), 0.5, 1.5, seed + 1).template to_vector<T>();
    auto bv = filled<T>(Dims({c}), -1, 1, seed + 2).template to_vector<T>();
    sv[0] = sv[1] = T(0);
    bv[0] = T(0);
    bv[1] = T(6);
    x = Tensor::from_vector<T>(d, xv);
    scale = Tensor::from_vector<T>(Dims({c}), sv);
    bias = Tensor::from_vector<T>(Dims({c}), bv);
    rm = filled<T>(Dims({c}), -0.5, 0.5, seed + 3);
    rv = filled<T>(Dims({c}), 0.5, 2, seed + 4);
    dy = filled<T>(d, -1, 1, seed + 5);
  }
};

template <typename T>
Tensor copy_of(const Tensor& t) {
  return Tensor::from_vector<T>(t.dims(), t.to_vector<T>());
}

// fused_batch_norm and its gradient against batch_norm, then relu or
// clip(0, 6), and batch_norm_grad of the activation's gradient: the same
// values in every output, the running statistics updated alike.
template <typename T>
void check_fused_batch_norm(const Dims& d, const std::string& format, const std::string& act, bool is_test,
                            std::uint32_t seed) {
  INFO("x [" << d.to_string() << "] " << format << " " << act << " is_test " << is_test);
  FusedNormCase<T> k(d, format == "NHWC", seed);
  Tensor rm2 = copy_of<T>(k.rm), rv2 = copy_of<T>(k.rv);
  auto bn = run_op<BatchNormOp>({k.x, k.scale, k.bias, k.rm, k.rv}, 0.9, 1e-5, is_test, format);
  const Tensor y = bn.out(0);
  const Tensor r = act == "relu" ? run_op<ReluOp>({y}).out() : run_op<ClipOp>({y}, 0.0, 6.0).out();
  auto fused = run_op<FusedBatchNormOp>({k.x, k.scale, k.bias, rm2, rv2}, 0.9, 1e-5, is_test, format, act);
  check_same_values<T>(fused.out(0), r);
  for (std::size_t i = 1; i < 5; ++i) check_same_values<T>(fused.out(i), bn.out(i));
  check_same_values<T>(rm2, k.rm);
  check_same_values<T>(rv2, k.rv);

  const Tensor dz = act == "relu" ? run_op<GradOf<ReluOp>>({r, k.dy}).out()
                                  : run_op<GradOf<ClipOp>>({y, k.dy}, 0.0, 6.0).out();
  auto want = run_op<GradOf<BatchNormOp>>({k.x, k.scale, bn.out(3), bn.out(4), dz}, 0.9, 1e-5, is_test, format);
  auto got = run_op<GradOf<FusedBatchNormOp>>({k.x, k.scale, k.bias, bn.out(3), bn.out(4), k.dy}, 0.9, 1e-5,
                                               is_test, format, act);
  for (std::size_t i = 0; i < 3; ++i) check_same_values<T>(got.out(i), want.out(i));
}

}  // namespace

TEST_CASE("fused_batch_norm gives batch_norm's y through relu or relu6, and its gradient batch_norm_grad's "
          "of the activation's gradient, the same bits in either layout, at 0, 6 and NaN",
          "[kernel][norm]") {
  for (const std::string act : {"relu", "relu6"})
    for (bool is_test : {false, true}) {
      check_fused_batch_norm<float>(Dims{2, 5, 7, 9}, "NCHW", act, is_test, 21);
      check_fused_batch_norm<float>(Dims{3, 20, 4, 4}, "NCHW", act, is_test, 22);
      check_fused_batch_norm<float>(Dims{2, 7, 9, 5}, "NHWC", act, is_test, 23);
      check_fused_batch_norm<float>(Dims{2, 6, 11, 37}, "NHWC", act, is_test, 24);
      check_fused_batch_norm<double>(Dims{2, 6, 5, 7}, "NCHW", act, is_test, 25);
      check_fused_batch_norm<double>(Dims{2, 6, 5, 7}, "NHWC", act, is_test, 26);
    }
}

TEST_CASE("fused_batch_norm and its gradient refuse an activation they do not fuse, naming the op",
          "[kernel][norm]") {
  const Tensor x = filled<float>(Dims{2, 3, 4, 4}, -1, 1, 1), c = filled<float>(Dims{3}, 0.5, 1, 2);
  KILN_CHECK_ERROR(run_op<FusedBatchNormOp>({x, c, c, c, c}, 0.9, 1e-5, false, std::string("NCHW"),
                                            std::string("gelu")),
                   InvalidArgument, {"kiln.fused_batch_norm", "'gelu'", "relu6"});
  KILN_CHECK_ERROR(run_op<GradOf<FusedBatchNormOp>>({x, c, c, c, c, x}, 0.9, 1e-5, false, std::string("NCHW"),
                                                    std::string("")),
                   InvalidArgument, {"kiln.fused_batch_norm_grad", "activation ''"});
  // dy not shaped like x; bias of the wrong size.
  const Tensor small = filled<float>(Dims{2, 3, 4, 2}, -1, 1, 3), c4 = filled<float>(Dims{4}, 0.5, 1, 4);
  KILN_CHECK_ERROR(run_op<GradOf<FusedBatchNormOp>>({x, c, c, c, c, small}, 0.9, 1e-5, false, std::string("NCHW"),
                                                    std::string("relu")),
                   InvalidArgument, {"kiln.fused_batch_norm_grad"});
  KILN_CHECK_ERROR(run_op<GradOf<FusedBatchNormOp>>({x, c, c4, c, c, x}, 0.9, 1e-5, false, std::string("NCHW"),
                                                    std::string("relu")),
                   InvalidArgument, {"kiln.fused_batch_norm_grad", "bias"});
}

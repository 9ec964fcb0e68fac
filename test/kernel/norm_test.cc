// Reference tests of the fused layer_norm, rms_norm and batch_norm kernels
// and their gradient kernels: hand-computed values, and a slow double
// reference on rows of 128–512 elements (f32 and f64); batch_norm's running
// statistics updated in place (training) or passed through (is_test).
#include <cmath>
#include <cstdint>
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

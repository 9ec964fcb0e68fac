// Kernel tests of kiln/dialect/signal_ops.h: stft of cosines and complex
// exponentials (their energy in one bin), frames and hops, windows; the
// mel filters' triangles; the errors naming the op and the value.
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernel/kernel_test_util.h"

using namespace kiln;
using kiln_test::run_op;

namespace {
using V = std::vector<std::int64_t>;

// A real signal [1, len, 1]: cos(2π·k·t / period).
Tensor cosine(std::int64_t len, double k, double period) {
  std::vector<double> v;
  for (std::int64_t t = 0; t < len; ++t) v.push_back(std::cos(2 * M_PI * k * static_cast<double>(t) / period));
  return Tensor::from_vector<double>({1, len, 1}, v);
}

Tensor step_of(std::int64_t s) { return Tensor::from_vector<std::int64_t>({}, {s}); }
Tensor ones(std::int64_t n, double v = 1.0) { return Tensor::from_vector<double>({n}, std::vector<double>(n, v)); }
}  // namespace

TEST_CASE("stft puts a cosine's energy in its bin of every frame, frames a hop apart", "[kernel][signal]") {
  // 24 samples, frames of 8 every 4: 5 frames; cos(2π·2t/8) lies in bin 2.
  auto r = run_op<StftOp>({cosine(24, 2, 8), step_of(4), ones(8)}, true);
  REQUIRE(r.out().dims().to_vector() == V{1, 5, 5, 2});
  const auto y = r.out().to_vector<double>();
  for (std::int64_t f = 0; f < 5; ++f)
    for (std::int64_t k = 0; k < 5; ++k) {
      INFO("frame " << f << " bin " << k);
      const double re = y[static_cast<std::size_t>((f * 5 + k) * 2)], im = y[static_cast<std::size_t>((f * 5 + k) * 2 + 1)];
      CHECK(re == Approx(k == 2 ? 4.0 : 0.0).margin(1e-9));
      CHECK(im == Approx(0.0).margin(1e-9));
    }
  // Two-sided: the mirror bin too; a window of 3s scales every bin.
  auto both = run_op<StftOp>({cosine(8, 2, 8), step_of(3), ones(8, 3.0)}, false);
  REQUIRE(both.out().dims().to_vector() == V{1, 1, 8, 2});
  const auto z = both.out().to_vector<double>();
  for (std::int64_t k = 0; k < 8; ++k) CHECK(z[static_cast<std::size_t>(k * 2)] == Approx(k == 2 || k == 6 ? 12.0 : 0.0).margin(1e-9));
}

TEST_CASE("stft of a complex exponential has one bin; a hop past the last frame start gives one frame",
          "[kernel][signal]") {
  std::vector<float> v;
  for (int t = 0; t < 6; ++t) {
    v.push_back(static_cast<float>(std::cos(2 * M_PI * t / 6)));
    v.push_back(static_cast<float>(std::sin(2 * M_PI * t / 6)));
  }
  auto r = run_op<StftOp>({Tensor::from_vector<float>({1, 6, 2}, v), Tensor::from_vector<std::int32_t>({1}, {9}),
                           Tensor::from_vector<float>({6}, std::vector<float>(6, 1.0f))},
                          false);
  REQUIRE(r.out().dims().to_vector() == V{1, 1, 6, 2});
  const auto y = r.out().to_vector<float>();
  for (std::int64_t k = 0; k < 6; ++k) {
    CHECK(y[static_cast<std::size_t>(k * 2)] == Approx(k == 1 ? 6.0 : 0.0).margin(1e-5));
    CHECK(y[static_cast<std::size_t>(k * 2 + 1)] == Approx(0.0).margin(1e-5));
  }
}

TEST_CASE("stft names a frame_step below 1, a window longer than the signal and a onesided complex signal",
          "[kernel][signal]") {
  KILN_CHECK_ERROR(run_op<StftOp>({cosine(8, 1, 8), step_of(0), ones(4)}, true), InvalidArgument,
                   {"kiln.stft", "frame_step", ">= 1"});
  KILN_CHECK_ERROR(run_op<StftOp>({cosine(8, 1, 8), step_of(2), ones(9)}, true), InvalidArgument,
                   {"kiln.stft", "9 points", "signal's 8"});
  KILN_CHECK_ERROR(run_op<StftOp>({Tensor::from_vector<double>({1, 2, 2}, {1, 0, 1, 0}), step_of(1), ones(2)}, true),
                   InvalidArgument, {"kiln.stft", "onesided"});
  KILN_CHECK_ERROR(run_op<StftOp>({cosine(8, 1, 8), step_of(1), Tensor::from_vector<float>({2}, {1, 1})}, true),
                   InvalidArgument, {"kiln.stft"});
}

TEST_CASE("mel_weight_matrix makes one triangle per mel bin, rising to 1 at its centre edge", "[kernel][signal]") {
  auto i64 = [](std::int64_t v) { return Tensor::from_vector<std::int64_t>({}, {v}); };
  auto f32 = [](float v) { return Tensor::from_vector<float>({}, {v}); };
  auto r = run_op<MelWeightMatrixOp>({i64(4), i64(64), i64(16000), f32(0), f32(8000)}, DataType::Float64);
  REQUIRE(r.out().dims().to_vector() == V{33, 4});
  const auto w = r.out().to_vector<double>();
  for (std::int64_t m = 0; m < 4; ++m) {
    INFO("mel bin " << m);
    std::int64_t peak = -1, nonzero = 0;
    double prev = 0;
    bool falling = false;
    for (std::int64_t j = 0; j < 33; ++j) {
      const double v = w[static_cast<std::size_t>(j * 4 + m)];
      CHECK(v >= 0);
      CHECK(v <= 1);
      if (v == 1) peak = j;
      if (v > 0) ++nonzero;
      if (v < prev) falling = true;
      if (falling) CHECK(v <= prev);  // one peak: never rises again
      prev = v;
    }
    CHECK(peak >= 0);
    CHECK(nonzero >= 1);
  }
  auto f = run_op<MelWeightMatrixOp>({i64(4), i64(64), i64(16000), f32(0), f32(8000)}, DataType::Float32);
  CHECK(f.out().dtype() == DataType::Float32);
  KILN_CHECK_ERROR(run_op<MelWeightMatrixOp>({i64(0), i64(64), i64(16000), f32(0), f32(8000)}, DataType::Float32),
                   InvalidArgument, {"kiln.mel_weight_matrix", "num_mel_bins (0)"});
  KILN_CHECK_ERROR(run_op<MelWeightMatrixOp>({i64(4), i64(64), i64(16000), f32(0), f32(30000)}, DataType::Float32),
                   InvalidArgument, {"kiln.mel_weight_matrix", "outside the 33 spectrogram bins"});
  KILN_CHECK_ERROR(run_op<MelWeightMatrixOp>({i64(4), i64(64), i64(16000), f32(900), f32(100)}, DataType::Float32),
                   InvalidArgument, {"kiln.mel_weight_matrix", "lower_edge_hertz"});
  KILN_CHECK_ERROR(run_op<MelWeightMatrixOp>({i64(4), i64(64), i64(16000), f32(0), f32(100)}, DataType::Int64),
                   InvalidArgument, {"kiln.mel_weight_matrix", "f32 or f64"});
}

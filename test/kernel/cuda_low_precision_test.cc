// Reduced precision on CUDA: kiln.matmul and kiln.cast in bf16 and f16
// against the CPU's kernels, f32 matmuls under TF32, and loss scaling's
// ops and the updates' skip flag (the CPU's bits). The matmul (cuBLAS GemmEx on tensor cores, f32 accumulation)
// differs from the CPU's (the f32 GEMM of the widened operands, rounded
// once) only in the order of its sums, so each element is within one unit
// in the last place of the CPU's plus what reordering an f32 sum can move
// it (a result near zero, the sum of products of either sign, can move
// several units); the casts give the CPU's bits.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernel/cuda_test_util.h"
#include "kernel/half_test_util.h"
#include "kiln/dialect/loss_scaling_ops.h"
#include "kiln/dialect/optimizer_ops.h"
#include "kiln/runtime/matmul_precision.h"
#include "kiln/support/half.h"

using namespace kiln;
using kiln_test::have_cuda;
using kiln_test::random_half;
using kiln_test::run_cuda_kernel;
using kiln_test::run_kernel;

namespace {

float widen(std::uint16_t v, DataType dt) { return kiln_test::from_half(v, dt); }

}  // namespace

TEST_CASE("a bf16 or f16 matmul on CUDA matches the CPU's to one unit in the last place and the f32 "
          "summation order's error, with any transposes and batch dims",
          "[kernel][half][cuda]") {
  if (!have_cuda()) return;
  for (DataType dt : {DataType::BFloat16, DataType::Float16}) {
    const int mantissa_bits = dt == DataType::BFloat16 ? 7 : 10;
    for (bool tx : {false, true})
      for (bool ty : {false, true}) {
        INFO(to_string(dt) << ", transposes " << tx << ty);
        constexpr std::int64_t M = 33, K = 70, N = 45;  // x [4, M, K], y [K, N] before transposes
        const Tensor x = random_half(tx ? Dims{4, K, M} : Dims{4, M, K}, dt, 1);
        const Tensor y = random_half(ty ? Dims{N, K} : Dims{K, N}, dt, 2);
        auto make = [&](Builder& b, const std::vector<Value>& v) {
          return b.create<MatmulOp>(v[0], v[1], tx, ty).operation();
        };
        const Tensor cpu = run_kernel({x, y}, make).out();
        const Tensor gpu = run_cuda_kernel({x, y}, make).out();
        REQUIRE(gpu.dtype() == dt);
        REQUIRE(gpu.dims() == cpu.dims());
        const auto* pc = static_cast<const std::uint16_t*>(cpu.raw_data());
        const auto* pg = static_cast<const std::uint16_t*>(gpu.raw_data());
        const auto* px = static_cast<const std::uint16_t*>(x.raw_data());
        const auto* py = static_cast<const std::uint16_t*>(y.raw_data());
        int off = 0;
        for (std::int64_t i = 0; i < cpu.numel(); ++i) {
          const std::int64_t batch = i / (M * N), r = i / N % M, col = i % N;
          // Two f32 sums of the same K products, in any orders, differ by at
          // most 2 (K - 1) 2^-24 Σ|x y|.
          double magnitude = 0;
          for (std::int64_t k = 0; k < K; ++k)
            magnitude += std::abs(widen(px[tx ? (batch * K + k) * M + r : (batch * M + r) * K + k], dt)) *
                         std::abs(widen(py[ty ? col * K + k : k * N + col], dt));
          const double order = 2.0 * (K - 1) * std::ldexp(1.0, -24) * magnitude;
          const float c = widen(pc[i], dt), g = widen(pg[i], dt);
          const float ulp =
              std::ldexp(1.0f, std::ilogb(std::max({std::abs(c), std::abs(g), 1e-3f})) - mantissa_bits);
          off += std::abs(c - g) > ulp + order;
        }
        CHECK(off == 0);
      }
  }
}

TEST_CASE("casts between f32 and bf16 / f16 on CUDA give the CPU's bits: ties to even, overflow, "
          "subnormals, NaN kept a NaN",
          "[kernel][half][cuda]") {
  if (!have_cuda()) return;
  std::vector<float> values{0.f, -0.f, 1.f, -2.5f, 1.00390625f, 1.01171875f, 65504.f, 65520.f, 1e30f,
                            -1e30f, 1e-40f, 6e-8f, 3.0e-5f, INFINITY, -INFINITY, NAN};
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-1e4f, 1e4f);
  for (int i = 0; i < 1000; ++i) values.push_back(u(rng));
  const Tensor f = Tensor::from_vector<float>(Dims{std::int64_t(values.size())}, values);
  for (DataType dt : {DataType::BFloat16, DataType::Float16}) {
    INFO(to_string(dt));
    auto down = [&](Builder& b, const std::vector<Value>& v) { return b.create<CastOp>(v[0], dt).operation(); };
    const Tensor cpu = run_kernel({f}, down).out(), gpu = run_cuda_kernel({f}, down).out();
    REQUIRE(gpu.dtype() == dt);
    const auto* pc = static_cast<const std::uint16_t*>(cpu.raw_data());
    const auto* pg = static_cast<const std::uint16_t*>(gpu.raw_data());
    for (std::int64_t i = 0; i < cpu.numel(); ++i) {
      INFO("value " << values[std::size_t(i)]);
      if (std::isnan(values[std::size_t(i)])) CHECK(std::isnan(widen(pg[i], dt)));
      else CHECK(pg[i] == pc[i]);
    }
    auto up = [&](Builder& b, const std::vector<Value>& v) {
      return b.create<CastOp>(v[0], DataType::Float32).operation();
    };
    const Tensor back = run_cuda_kernel({cpu}, up).out();
    for (std::int64_t i = 0; i < cpu.numel(); ++i)
      if (!std::isnan(values[std::size_t(i)])) CHECK(back.data<float>()[i] == widen(pc[i], dt));
  }
}

TEST_CASE("an f32 matmul on CUDA under MatmulPrecision::High (TF32) stays within TF32's rounding of "
          "the full-precision one, and Highest gives the same bits as before",
          "[kernel][cuda]") {
  if (!have_cuda()) return;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> xv(128 * 256), yv(256 * 96);
  for (float& v : xv) v = u(rng);
  for (float& v : yv) v = u(rng);
  const Tensor x = Tensor::from_vector<float>(Dims{128, 256}, xv), y = Tensor::from_vector<float>(Dims{256, 96}, yv);
  auto make = [](Builder& b, const std::vector<Value>& v) { return b.create<MatmulOp>(v[0], v[1]).operation(); };
  const Tensor full = run_cuda_kernel({x, y}, make).out();
  set_float32_matmul_precision(MatmulPrecision::High);
  const Tensor tf32 = run_cuda_kernel({x, y}, make).out();
  set_float32_matmul_precision(MatmulPrecision::Highest);
  const Tensor again = run_cuda_kernel({x, y}, make).out();
  CHECK(std::memcmp(full.raw_data(), again.raw_data(), full.bytes()) == 0);
  // Each product's operands lose up to 2^-11 relative each: |error| <= k * 2^-10 for |x|, |y| <= 1.
  const float bound = 256 * std::ldexp(1.0f, -10);
  float worst = 0;
  for (std::int64_t i = 0; i < full.numel(); ++i)
    worst = std::max(worst, std::abs(full.data<float>()[i] - tf32.data<float>()[i]));
  INFO("largest difference " << worst);
  CHECK(worst <= bound);
}

TEST_CASE("a bf16 add_n on CUDA gives the CPU's bits", "[kernel][half][cuda]") {
  if (!have_cuda()) return;
  const DataType dt = DataType::BFloat16;
  const std::vector<Tensor> in{random_half(Dims{3, 1000}, dt, 21), random_half(Dims{3, 1000}, dt, 22),
                               random_half(Dims{3, 1000}, dt, 23)};
  auto make = [](Builder& b, const std::vector<Value>& v) { return b.create<AddNOp>(v).operation(); };
  const Tensor cpu = run_kernel(in, make).out(), gpu = run_cuda_kernel(in, make).out();
  REQUIRE(gpu.dtype() == dt);
  CHECK(std::memcmp(cpu.raw_data(), gpu.raw_data(), cpu.bytes()) == 0);
}

TEST_CASE("loss scaling on CUDA: check_finite_and_unscale gives the CPU's bits and flag in every float dtype; "
          "update_loss_scaling_ steps the state as the CPU does; an update with skip set writes nothing",
          "[kernel][half][amp][cuda]") {
  if (!have_cuda()) return;
  auto unscale = [](Builder& b, const std::vector<Value>& v) {
    return b.create<CheckFiniteAndUnscaleOp>(v[0], std::vector<Value>(v.begin() + 1, v.end())).operation();
  };
  for (bool poison : {false, true}) {
    INFO("poisoned " << poison);
    Tensor a = kiln_test::filled<float>(Dims{1000}, -50, 50, 1);
    const Tensor b = kiln_test::filled<double>(Dims{33}, -50, 50, 2);
    Tensor c = random_half(Dims{7, 9}, DataType::BFloat16, 3);
    const Tensor d = random_half(Dims{4097}, DataType::Float16, 4);
    if (poison) static_cast<std::uint16_t*>(c.raw_data())[5] = kiln_test::to_half(INFINITY, DataType::BFloat16);
    const std::vector<Tensor> in{Tensor::from_vector<float>(Dims{1}, {96.f}), a, b, c, d};
    auto cpu = run_kernel(in, unscale);
    auto gpu = run_cuda_kernel(in, unscale);
    for (std::size_t i = 0; i < cpu.results.size(); ++i) {
      INFO("result " << i);
      REQUIRE(gpu.out(i).bytes() == cpu.out(i).bytes());
      CHECK(std::memcmp(gpu.out(i).raw_data(), cpu.out(i).raw_data(), cpu.out(i).bytes()) == 0);
    }
    CHECK(gpu.results.back().to_vector<bool>().at(0) == poison);
  }
  const UpdateLossScaling_Op::Attributes rule{2, 2, 2.0, 0.5};
  auto update = [&](Builder& bb, const std::vector<Value>& v) {
    return bb.create<UpdateLossScaling_Op>(v[0], v[1], v[2], v[3], rule).operation();
  };
  Tensor scale = Tensor::from_vector<float>(Dims{1}, {64.f});
  Tensor good = Tensor::from_vector<std::int32_t>(Dims{1}, {0}), bad = Tensor::from_vector<std::int32_t>(Dims{1}, {0});
  for (bool found : {false, false, true, true, false}) {
    const std::vector<Tensor> in{Tensor::from_vector<bool>(Dims{1}, {found}), scale, good, bad};
    auto gpu = run_cuda_kernel(in, update);
    auto cpu = run_kernel({in[0], scale.clone(), good.clone(), bad.clone()}, update);
    for (std::size_t i = 0; i < 3; ++i)
      CHECK(std::memcmp(gpu.out(i).raw_data(), cpu.out(i).raw_data(), 4) == 0);
    scale = gpu.out(0).clone();
    good = gpu.out(1).clone();
    bad = gpu.out(2).clone();
  }
  CHECK(scale.to_vector<float>().at(0) == 64.f);  // ×2 after two good steps, ×0.5 after two overflows
  const Tensor p = kiln_test::filled<float>(Dims{300}, -1, 1, 5), g = kiln_test::filled<float>(Dims{300}, -1, 1, 6);
  auto sgd = [](Builder& bb, const std::vector<Value>& v) {
    return bb.create<Sgd_Op>(v[0], v[1], v[2], v[3]).operation();
  };
  const Tensor lr = Tensor::from_vector<float>(Dims{1}, {0.5f});
  auto kept = run_cuda_kernel({p, g, lr, Tensor::from_vector<bool>(Dims{1}, {true})}, sgd);
  CHECK(kept.out(0).to_vector<float>() == p.to_vector<float>());
  auto moved = run_cuda_kernel({p, g, lr, Tensor::from_vector<bool>(Dims{1}, {false})}, sgd);
  auto cpu = run_kernel({p.clone(), g, lr, Tensor::from_vector<bool>(Dims{1}, {false})}, sgd);
  CHECK(moved.out(0).to_vector<float>() == cpu.out(0).to_vector<float>());
}

// CUDA's bf16 / f16 kernels, computed through its f32 kernels
// (kernels/cuda/half_via_f32.cc) or, for the unary and binary families,
// gelu (elementwise_half.cu) and reduce_as (reduce.cc), by kernels of their
// own (conv2d and its gradient have theirs too, cuDNN on tensor cores,
// tested to a tolerance in cuda_conv_test.cc): registered for exactly the listed ops that have an f32 CUDA kernel
// (checked without a device), in bf16 against the CPU's half_via_f32
// kernels on the same inputs ([cuda]), and the own kernels bit for bit
// against the f32 CUDA kernel on the widened inputs, rounded once ([cuda]).
// Tolerance: one bf16 unit (2^-7 relative) or 1e-3 absolute, an infinity
// only the same infinity (the gradients of asin, acos and acosh at ±1,
// atanh and its gradient there), NaN where the CPU has NaN: the results
// are the two places' f32 results rounded once, and the f32 kernels
// differ in summation order and in libm's last bits; bool outputs
// (dropout's mask) bit for bit.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iterator>
#include <vector>

#include "kernel/cuda_test_util.h"
#include "kernel/half_test_util.h"
#include "kiln/kernel/half_via_f32.h"

using namespace kiln;

// A named namespace: the unity build puts other test files' helpers beside these.
namespace half_via_f32_cuda_test {

using kiln_test::from_half;
using kiln_test::have_cuda;
using kiln_test::random_half;
using MakeOp = std::function<Operation*(Builder&, const std::vector<Value>&)>;

template <typename OpT>
bool cuda_kernel_for(DataType dt) {
  const auto have = KernelRegistry::instance().dtypes_for(TypeId::get<OpT>(), PlaceKind::Cuda);
  return std::find(have.begin(), have.end(), dt) != have.end();
}

template <typename OpT>
void check_registered() {
  INFO(OpT::name);
  const bool f32 = cuda_kernel_for<OpT>(DataType::Float32);
  CHECK(cuda_kernel_for<OpT>(DataType::BFloat16) == f32);
  CHECK(cuda_kernel_for<OpT>(DataType::Float16) == f32);
}

template <typename... OpTs>
void check_all_registered(OpTypeList<OpTs...>) {
  (check_registered<OpTs>(), ...);
}
template <typename... Maths>
void check_unaries_registered(MathList<Maths...>) {
  check_all_registered(OpTypeList<UnaryOp<Maths>..., GradOf<UnaryOp<Maths>>...>{});
}
template <typename... Maths>
void check_binaries_registered(BinaryMathList<Maths...>) {
  check_all_registered(OpTypeList<BinaryOp<Maths>...>{});
}

void check_close(const Tensor& got, const Tensor& want) {
  REQUIRE(got.dims() == want.dims());
  REQUIRE(got.dtype() == want.dtype());
  if (want.dtype() != DataType::BFloat16 && want.dtype() != DataType::Float16) {
    CHECK(kiln_test::same_bits(got, want));
    return;
  }
  const auto* g = static_cast<const std::uint16_t*>(got.raw_data());
  const auto* w = static_cast<const std::uint16_t*>(want.raw_data());
  std::int64_t bad = 0, first = -1;
  for (std::int64_t i = 0; i < want.numel(); ++i) {
    const double a = from_half(g[i], got.dtype()), b = from_half(w[i], want.dtype());
    const double tol = 0x1p-7 * std::max(std::abs(a), std::abs(b)) + 1e-3;
    const bool ok = std::isnan(b)                    ? std::isnan(a)
                    : std::isinf(a) || std::isinf(b) ? a == b
                                                     : std::abs(a - b) <= tol;
    if (!ok && bad++ == 0) first = i;
  }
  INFO(bad << " elements apart, the first at " << first);
  CHECK(bad == 0);
}

// The op `make` builds, in bf16 on CUDA and on the CPU.
void check_like_cpu(const std::vector<Tensor>& in, const MakeOp& make) {
  const auto cuda = kiln_test::run_cuda_kernel(in, make);
  const auto cpu = kiln_test::run_kernel(in, make);
  REQUIRE(cuda.results.size() == cpu.results.size());
  for (std::size_t r = 0; r < cpu.results.size(); ++r) {
    INFO("result #" << r);
    check_close(cuda.out(r), cpu.out(r));
  }
}

constexpr DataType kBf16 = DataType::BFloat16;

template <typename... Maths>
void check_unaries(MathList<Maths...>) {
  const Tensor x = random_half({33, 65}, kBf16, 1), d = random_half({33, 65}, kBf16, 2);
  const auto one = [&]<typename Math>(Math*) {
    INFO(Math::name);
    check_like_cpu({x}, [](Builder& b, const std::vector<Value>& v) {
      return b.create<UnaryOp<Math>>(v[0]).operation();
    });
    check_like_cpu({x, d}, [](Builder& b, const std::vector<Value>& v) {
      return b.create<GradOf<UnaryOp<Math>>>(v[0], v[1]).operation();
    });
  };
  (one(static_cast<Maths*>(nullptr)), ...);
}

template <typename... Maths>
void check_binaries(BinaryMathList<Maths...>) {
  const Tensor x = random_half({33, 65}, kBf16, 3), y = random_half({65}, kBf16, 4);
  const auto one = [&]<typename Math>(Math*) {
    if constexpr (!integer_only_math<Math>) {
      INFO(Math::name);
      check_like_cpu({x, y}, [](Builder& b, const std::vector<Value>& v) {
        return b.create<BinaryOp<Math>>(v[0], v[1]).operation();
      });
    }
  };
  (one(static_cast<Maths*>(nullptr)), ...);
}

TEST_CASE("CUDA has bf16 and f16 kernels for exactly the listed ops and families with an f32 CUDA kernel",
          "[kernel][half]") {
  if (!built_with_cuda()) return;
  check_all_registered(HalfViaF32Ops{});
  check_unaries_registered(UnaryFamily{});
  check_binaries_registered(BinaryFamily{});
}

TEST_CASE("CUDA's bf16 unary and binary families and their unary gradients follow the CPU's half_via_f32",
          "[kernel][half][cuda]") {
  if (!have_cuda()) return;
  check_unaries(UnaryFamily{});
  check_binaries(BinaryFamily{});
}

// `half` (bf16 / f16) widened to f32 on the host, exactly.
Tensor widened(const Tensor& half) {
  std::vector<float> v(static_cast<std::size_t>(half.numel()));
  const auto* p = static_cast<const std::uint16_t*>(half.raw_data());
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = from_half(p[i], half.dtype());
  return Tensor::from_vector<float>(half.dims(), v);
}

// The op `make` builds on CUDA in `dt`: every element the f32 CUDA kernel's
// on the widened inputs, rounded once (NaN where it is NaN).
void check_rounds_f32(const std::vector<Tensor>& in, DataType dt, const MakeOp& make) {
  std::vector<Tensor> wide;
  for (const Tensor& t : in) wide.push_back(widened(t));
  const Tensor want = kiln_test::run_cuda_kernel(wide, make).out();
  const Tensor got = kiln_test::run_cuda_kernel(in, make).out();
  REQUIRE(got.dtype() == dt);
  REQUIRE(got.dims() == want.dims());
  const std::vector<float> w = want.to_vector<float>();
  const auto* g = static_cast<const std::uint16_t*>(got.raw_data());
  std::int64_t bad = 0;
  for (std::size_t i = 0; i < w.size(); ++i)
    bad += std::isnan(w[i]) ? !std::isnan(from_half(g[i], dt)) : g[i] != kiln_test::to_half(w[i], dt);
  CHECK(bad == 0);
}

// t with its first elements NaN, +inf, -inf, -0, the dtype's smallest
// subnormal and its largest finite value (either sign): each kernel must
// treat them as the f32 kernel does.
Tensor with_special_values(Tensor t) {
  const bool f16 = t.dtype() == DataType::Float16;
  const std::uint16_t bits[] = {std::uint16_t(f16 ? 0x7E00 : 0x7FC0), std::uint16_t(f16 ? 0x7C00 : 0x7F80),
                                std::uint16_t(f16 ? 0xFC00 : 0xFF80), 0x8000, 0x0001, 0x8001,
                                std::uint16_t(f16 ? 0x7BFF : 0x7F7F), std::uint16_t(f16 ? 0xFBFF : 0xFF7F)};
  auto* p = static_cast<std::uint16_t*>(t.raw_data());
  for (std::size_t i = 0; i < std::size(bits) && std::int64_t(i) < t.numel(); ++i) p[i] = bits[i];
  return t;
}

template <typename... Maths>
void check_own_unaries(MathList<Maths...>, DataType dt) {
  const Tensor x = with_special_values(random_half({33, 65}, dt, 21)), d = random_half({33, 65}, dt, 22);
  const auto one = [&]<typename Math>(Math*) {
    INFO(Math::name);
    check_rounds_f32({x}, dt, [](Builder& b, const std::vector<Value>& v) {
      return b.create<UnaryOp<Math>>(v[0]).operation();
    });
    check_rounds_f32({x, d}, dt, [](Builder& b, const std::vector<Value>& v) {
      return b.create<GradOf<UnaryOp<Math>>>(v[0], v[1]).operation();
    });
  };
  (one(static_cast<Maths*>(nullptr)), ...);
}

template <typename... Maths>
void check_own_binaries(BinaryMathList<Maths...>, DataType dt) {
  const Tensor x = with_special_values(random_half({33, 65}, dt, 23)), y = random_half({33, 65}, dt, 24),
               row = with_special_values(random_half({65}, dt, 25));
  const auto one = [&]<typename Math>(Math*) {
    if constexpr (!integer_only_math<Math>) {
      INFO(Math::name);
      for (const Tensor* other : {&y, &row})
        check_rounds_f32({x, *other}, dt, [](Builder& b, const std::vector<Value>& v) {
          return b.create<BinaryOp<Math>>(v[0], v[1]).operation();
        });
    }
  };
  (one(static_cast<Maths*>(nullptr)), ...);
}

TEST_CASE("CUDA's own bf16 and f16 elementwise kernels give the f32 kernel's results on the widened inputs, "
          "rounded once",
          "[kernel][half][cuda]") {
  if (!have_cuda()) return;
  for (DataType dt : {DataType::BFloat16, DataType::Float16}) {
    INFO(to_string(dt));
    check_own_unaries(UnaryFamily{}, dt);
    check_own_binaries(BinaryFamily{}, dt);
    const Tensor x = random_half({33, 65}, dt, 26), d = random_half({33, 65}, dt, 27);
    // reduce_as: a bias gradient's sum over rows (read once), and a sum
    // over columns (through f32).
    const Tensor x3 = random_half({4, 33, 65}, dt, 28);
    for (const Dims& target : {Dims{65}, Dims{1, 65}, Dims{33, 1}}) {
      INFO("reduce_as to [" << target.to_string() << "]");
      check_rounds_f32({x3, random_half(target, dt, 29)}, dt, [](Builder& b, const std::vector<Value>& v) {
        return b.create<ReduceAsOp>(v[0], v[1]).operation();
      });
    }
    for (bool approximate : {false, true}) {
      INFO("gelu, approximate " << approximate);
      check_rounds_f32({x}, dt, [&](Builder& b, const std::vector<Value>& v) {
        return b.create<GeluOp>(v[0], approximate).operation();
      });
      check_rounds_f32({x, d}, dt, [&](Builder& b, const std::vector<Value>& v) {
        return b.create<GradOf<GeluOp>>(GradOf<GeluOp>::Attributes{approximate}, v[0], v[1]).operation();
      });
    }
  }
}

TEST_CASE("CUDA's bf16 gelu, scale, softmaxes, norms, reductions and dropout follow the CPU's half_via_f32",
          "[kernel][half][cuda]") {
  if (!have_cuda()) return;
  const Tensor x = random_half({33, 65}, kBf16, 5);
  const Tensor w = random_half({65}, kBf16, 6), bias = random_half({65}, kBf16, 7);
  const auto one = [&](const char* what, const std::vector<Tensor>& in, const MakeOp& make) {
    INFO(what);
    check_like_cpu(in, make);
  };
  for (bool approximate : {false, true})
    one("gelu", {x}, [&](Builder& b, const std::vector<Value>& v) {
      return b.create<GeluOp>(v[0], approximate).operation();
    });
  one("scale", {x}, [](Builder& b, const std::vector<Value>& v) {
    return b.create<ScaleOp>(v[0], 2.5, -0.5, true).operation();
  });
  one("softmax", {x}, [](Builder& b, const std::vector<Value>& v) {
    return b.create<SoftmaxOp>(v[0], std::int64_t{-1}).operation();
  });
  one("log_softmax", {x}, [](Builder& b, const std::vector<Value>& v) {
    return b.create<LogSoftmaxOp>(v[0], std::int64_t{0}).operation();
  });
  // The norms: y in bf16 as above. Their statistics (layer_norm's mean and
  // rstd, rms_norm's rstd) are f32 outputs, each place's f32 kernel's sums
  // over a row of n = 65 in its own order (the device's in 32 lanes, with
  // FMA), so not bit for bit. A sum in any order is within
  // (n - 1) · 2^-24 · Σ|terms| of the exact one: the means (|x| < 2) within
  // 64 · 2^-24 · 2 ≈ 7.6e-6 each, 1.6e-5 apart; the sums of squares have no
  // cancellation, 2 · 64 · 2^-24 ≈ 7.6e-6 relative apart, so rstd (their
  // -1/2 power, after a few roundings) about 4.3e-6: 1e-5 relative and
  // 2e-5 absolute.
  const auto norm = [&](const char* what, const std::vector<Tensor>& in, const MakeOp& make) {
    INFO(what);
    const auto cuda = kiln_test::run_cuda_kernel(in, make);
    const auto cpu = kiln_test::run_kernel(in, make);
    REQUIRE(cuda.results.size() == cpu.results.size());
    check_close(cuda.out(0), cpu.out(0));
    for (std::size_t r = 1; r < cpu.results.size(); ++r) {
      INFO("result #" << r);
      REQUIRE(cuda.out(r).dims() == cpu.out(r).dims());
      REQUIRE(cuda.out(r).dtype() == DataType::Float32);
      REQUIRE(cpu.out(r).dtype() == DataType::Float32);
      kiln_test::check_close<float>(cuda.out(r), cpu.out(r).to_vector<float>(), 1e-5, 2e-5);
    }
  };
  norm("layer_norm", {x, w, bias}, [](Builder& b, const std::vector<Value>& v) {
    return b.create<LayerNormOp>(v[0], v[1], v[2], std::int64_t{1}, 1e-5).operation();
  });
  norm("rms_norm", {x, w}, [](Builder& b, const std::vector<Value>& v) {
    return b.create<RmsNormOp>(v[0], v[1], std::int64_t{1}, 1e-6).operation();
  });
  one("sum", {x}, [](Builder& b, const std::vector<Value>& v) { return b.create<SumOp>(v[0]).operation(); });
  one("mean", {x}, [](Builder& b, const std::vector<Value>& v) { return b.create<MeanOp>(v[0]).operation(); });
  one("dropout", {x}, [](Builder& b, const std::vector<Value>& v) {
    return b.create<DropoutOp>(v[0], 0.3, false, std::int64_t{9}).operation();
  });
}

TEST_CASE("CUDA's bf16 conv2d, its gradient and the pools follow the CPU's half_via_f32",
          "[kernel][half][cuda]") {
  if (!have_cuda()) return;
  using V = std::vector<std::int64_t>;
  const Tensor x = random_half({2, 4, 9, 9}, kBf16, 11), w = random_half({6, 2, 3, 3}, kBf16, 12);
  const Tensor dout = random_half({2, 6, 5, 5}, kBf16, 13), pooled = random_half({2, 4, 4, 4}, kBf16, 14);
  const auto one = [&](const char* what, const std::vector<Tensor>& in, const MakeOp& make) {
    INFO(what);
    check_like_cpu(in, make);
  };
  one("conv2d", {x, w}, [](Builder& b, const std::vector<Value>& v) {
    return b.create<Conv2dOp>(v[0], v[1], V{2, 2}, V{1, 1}, V{1, 1}, std::int64_t{2}).operation();
  });
  one("conv2d_grad", {x, w, dout}, [](Builder& b, const std::vector<Value>& v) {
    return b.create<GradOf<Conv2dOp>>(Conv2dOp::Attributes{V{2, 2}, V{1, 1}, V{1, 1}, 2, "NCHW"}, v[0], v[1], v[2])
        .operation();
  });
  one("max_pool2d", {x}, [](Builder& b, const std::vector<Value>& v) {
    return b.create<MaxPool2dOp>(v[0], V{2, 2}).operation();
  });
  one("max_pool2d_grad", {x, pooled}, [](Builder& b, const std::vector<Value>& v) {
    return b.create<GradOf<MaxPool2dOp>>(MaxPool2dOp::Attributes{V{2, 2}, V{2, 2}, V{0, 0}, false, "NCHW"},
                                         v[0], v[1])
        .operation();
  });
  one("avg_pool2d", {x}, [](Builder& b, const std::vector<Value>& v) {
    return b.create<AvgPool2dOp>(v[0], V{3, 3}, V{2, 2}, V{1, 1}).operation();
  });
}

// max_pool2d / avg_pool2d and their gradients have 16-bit CUDA kernels of
// their own (pool.cu, computing in f32): the CPU's bits in bf16 and f16,
// with overlapping windows (ResNet's 3x3 stride-2 stem pool, padded; each
// dx element then sums up to four windows' douts in f32 before its one
// rounding), a 2x2 tile of the unrolled kernels, a 4x5 window of the
// general one, ties (a plane of few distinct values) and both avg
// divisors.
TEST_CASE("CUDA's 16-bit max and avg pools and their gradients give the CPU's bits in bf16 and f16",
          "[kernel][half][cuda]") {
  if (!have_cuda()) return;
  using V = std::vector<std::int64_t>;
  for (DataType dt : {DataType::BFloat16, DataType::Float16}) {
    INFO(to_string(dt));
    const Tensor x = random_half({2, 3, 13, 12}, dt, 21);
    Tensor ties = random_half({2, 3, 13, 12}, dt, 22);
    const auto* bits = static_cast<const std::uint16_t*>(x.raw_data());
    auto* tie_bits = static_cast<std::uint16_t*>(ties.raw_data());
    for (std::int64_t i = 0; i < ties.numel(); ++i) tie_bits[i] = bits[i % 3];  // three values: many equal maxima
    struct Window {
      V k, s, p;
    };
    for (const Window& wdw : {Window{V{3, 3}, V{2, 2}, V{1, 1}}, Window{V{2, 2}, V{2, 2}, V{0, 0}},
                              Window{V{4, 5}, V{1, 2}, V{1, 2}}}) {
      INFO("window " << wdw.k[0] << "x" << wdw.k[1] << " stride " << wdw.s[0] << "," << wdw.s[1]);
      const auto max_op = [&](Builder& b, const std::vector<Value>& v) {
        return b.create<MaxPool2dOp>(v[0], wdw.k, wdw.s, wdw.p).operation();
      };
      const Tensor pooled = kiln_test::run_kernel({x}, max_op).out(0);
      const Tensor dout = random_half(pooled.dims(), dt, 23);
      for (const Tensor& in : {x, ties}) {
        check_like_cpu({in}, max_op);
        check_like_cpu({in, dout}, [&](Builder& b, const std::vector<Value>& v) {
          return b.create<GradOf<MaxPool2dOp>>(MaxPool2dOp::Attributes{wdw.k, wdw.s, wdw.p, false, "NCHW"}, v[0],
                                               v[1])
              .operation();
        });
      }
      for (bool exclusive : {true, false}) {
        INFO("exclusive " << exclusive);
        check_like_cpu({x}, [&](Builder& b, const std::vector<Value>& v) {
          return b.create<AvgPool2dOp>(v[0], wdw.k, wdw.s, wdw.p, false, exclusive).operation();
        });
        check_like_cpu({x, dout}, [&](Builder& b, const std::vector<Value>& v) {
          return b.create<GradOf<AvgPool2dOp>>(AvgPool2dOp::Attributes{wdw.k, wdw.s, wdw.p, false, exclusive}, v[0],
                                               v[1])
              .operation();
        });
      }
    }
  }
}

TEST_CASE("CUDA's 16-bit clip (relu6, a bound between two 16-bit values) and its gradient give the f32 kernel's "
          "results on the widened inputs, rounded once, in bf16 and f16",
          "[kernel][half][cuda]") {
  if (!have_cuda()) return;
  struct Bounds {
    double lo, hi;
  };
  for (DataType dt : {DataType::BFloat16, DataType::Float16}) {
    INFO(to_string(dt));
    const Tensor x = with_special_values(random_half({33, 65}, dt, 31));
    const Tensor d = random_half({33, 65}, dt, 32);
    for (const Bounds bd : {Bounds{0, 6}, Bounds{-0.1, 0.3}, Bounds{0.5, -0.5}}) {
      INFO("bounds " << bd.lo << ", " << bd.hi);
      check_rounds_f32({x}, dt, [&](Builder& b, const std::vector<Value>& v) {
        return b.create<ClipOp>(v[0], bd.lo, bd.hi).operation();
      });
      check_rounds_f32({x, d}, dt, [&](Builder& b, const std::vector<Value>& v) {
        return b.create<GradOf<ClipOp>>(ClipOp::Attributes{bd.lo, bd.hi}, v[0], v[1]).operation();
      });
    }
  }
}

}  // namespace half_via_f32_cuda_test

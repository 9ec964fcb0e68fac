// The CUDA conv2d (cuDNN) and max / avg / adaptive-avg pool kernels and their gradients
// against the CPU's on the same inputs ([cuda]: skipped without a device):
// strides, symmetric and asymmetric paddings, dilations, groups, ceil_mode,
// exclusive and inclusive averages. Convolutions to 1e-5 in f32 and 1e-12 in
// f64 (cuDNN sums in other orders than the CPU's GEMMs); pools exactly (the
// same windows, the same order of additions). bf16 and f16 convolutions (on
// tensor cores, summed in f32) against the CPU's f32 convolution of the
// same values, which only the device's result rounds to 16 bits: within
// 2^-7 relative (one bf16 unit; two f16 units would be 2^-9, the f16
// bound) plus 1e-3 absolute for sums that cancel, where a correct kernel
// is off by half a unit and the sums' order.
#include <cmath>
#include <cstdint>
#include <vector>

#include "../../kernels/cuda/conv_key.h"
#include "kernel/cuda_test_util.h"
#include "kernel/half_test_util.h"
#include "kiln/dialect/conv_ops.h"
#include "kiln/dialect/pool_ops.h"
#include "kiln/runtime/conv_options.h"

using namespace kiln;
using kiln_test::filled;
using kiln_test::have_cuda;
using kiln_test::run_cuda_op;
using kiln_test::run_op;
using V = std::vector<std::int64_t>;

namespace {

template <typename T>
void check_conv(const Tensor& got, const Tensor& want, double tol) {
  kiln_test::check_same<T>(got, want, tol, tol);
}

struct ConvCase {
  Dims x, w;
  V strides, paddings, dilations;
  std::int64_t groups;
};

template <typename T>
void compare_conv(const ConvCase& c, double tol) {
  INFO("x [" << c.x.to_string() << "] w [" << c.w.to_string() << "] strides " << c.strides[0]
             << "," << c.strides[1] << " paddings " << c.paddings.size() << " groups " << c.groups
             << " " << to_string(data_type_of<T>));
  const Tensor x = filled<T>(c.x, -1, 1, 1), w = filled<T>(c.w, -1, 1, 2);
  const Tensor want = run_op<Conv2dOp>({x, w}, c.strides, c.paddings, c.dilations, c.groups).out();
  check_conv<T>(run_cuda_op<Conv2dOp>({x, w}, c.strides, c.paddings, c.dilations, c.groups).out(),
                want, tol);
  const Tensor dout = filled<T>(want.dims(), -1, 1, 3);
  auto gcpu = run_op<GradOf<Conv2dOp>>({x, w, dout}, c.strides, c.paddings, c.dilations, c.groups);
  auto gdev =
      run_cuda_op<GradOf<Conv2dOp>>({x, w, dout}, c.strides, c.paddings, c.dilations, c.groups);
  INFO("dx");
  check_conv<T>(gdev.results[0], gcpu.results[0], tol);
  INFO("dw");
  check_conv<T>(gdev.results[1], gcpu.results[1], tol);
}

}  // namespace

TEST_CASE("CUDA conv2d and its gradient (cuDNN) match the CPU's", "[cuda][kernel]") {
  if (!have_cuda()) return;
  const std::vector<ConvCase> cases = {
      {{2, 3, 8, 8}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
      {{1, 1, 8, 8}, {8, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
      {{2, 4, 9, 7}, {6, 2, 3, 2}, {2, 1}, {0, 1}, {1, 1}, 2},
      {{1, 3, 10, 10}, {2, 3, 3, 3}, {1, 2}, {1, 0}, {2, 2}, 1},
      {{2, 2, 7, 7}, {3, 2, 2, 3}, {1, 1}, {0, 1, 1, 2}, {1, 1}, 1},  // asymmetric
      {{1, 4, 6, 6}, {4, 1, 3, 3}, {2, 2}, {1, 2, 0, 1}, {1, 1}, 4},  // depthwise, asymmetric
      {{3, 8, 16, 16}, {16, 8, 5, 5}, {1, 1}, {2, 2}, {1, 1}, 1},
      // Two paddings with one output size: each its own cached algorithm.
      {{1, 2, 6, 6}, {3, 2, 1, 1}, {4, 4}, {1, 1}, {1, 1}, 1},
      {{1, 2, 6, 6}, {3, 2, 1, 1}, {4, 4}, {0, 0}, {1, 1}, 1},
  };
  for (const ConvCase& c : cases) {
    compare_conv<float>(c, 1e-5);
    compare_conv<double>(c, 1e-12);
  }
  KILN_CHECK_ERROR(run_cuda_op<Conv2dOp>({filled<float>({1, 3, 8, 8}), filled<float>({4, 2, 3, 3})},
                                         V{1, 1}, V{0, 0}, V{1, 1}, std::int64_t{1}),
                   InvalidArgument, {"kiln.conv2d"});
}

TEST_CASE("CUDA conv2d under benchmark search or TF32 stays near the CPU; the settings key the choice",
          "[cuda][kernel]") {
  if (!have_cuda()) return;
  // Shapes no other case runs, so that each setting below chooses afresh.
  const ConvCase tf32_first{{2, 16, 20, 20}, {32, 16, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1};
  const ConvCase timed{{4, 24, 18, 18}, {40, 24, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1};
  // TF32 rounds each operand to 10 mantissa bits: sums of 144 products of
  // [-1, 1] values stay within 2e-2 of f32's.
  set_float32_conv_precision(MatmulPrecision::High);
  compare_conv<float>(tf32_first, 2e-2);
  compare_conv<double>(tf32_first, 1e-12);
  // Back at Highest the same shape is chosen again in FMA math: f32's
  // tolerance, which a TF32 algorithm kept from the line above would miss.
  set_float32_conv_precision(MatmulPrecision::Highest);
  compare_conv<float>(tf32_first, 1e-5);
  // Timed algorithms (FFT and Winograd among them) sum in other orders, and
  // FFT's rounding scales with the summed terms, not the sum: dw's elements
  // add 4 * 18 * 18 products, and an H200's timed choice missed 1e-4 by
  // 0.8e-4 on an element of 0.085.
  set_conv_algorithm_search(ConvAlgorithmSearch::Benchmark);
  compare_conv<float>(timed, 1e-3);
  compare_conv<double>(timed, 1e-11);
  compare_conv<float>(tf32_first, 1e-4);
  set_conv_algorithm_search(ConvAlgorithmSearch::Heuristic);
  compare_conv<float>(timed, 1e-5);
}

// The algorithm cache's key and keep rule (kernels/cuda/conv_key.h): host
// logic, checked without a device.
TEST_CASE("a CUDA conv's cached algorithm is one per device, pass and setting, kept unless timing could "
          "not run",
          "[kernel][conv]") {
  Conv2dGeometry g;
  g.n = 2, g.c = 3, g.h = g.w = 8, g.o = 4, g.ho = g.wo = 8, g.kh = g.kw = 3;
  const auto key = [&](int device, int pass, DataType dt = DataType::Float32) {
    return cuda::conv_key(device, pass, dt, g, 10, 10, 0, 0);
  };
  const cuda::ConvKey first = key(0, 0);
  CHECK(key(0, 0) == first);
  CHECK(key(1, 0) != first);  // two GPUs of one process choose apart
  CHECK(key(0, 1) != first);
  CHECK(key(0, 0, DataType::Float64) != first);
  set_conv_algorithm_search(ConvAlgorithmSearch::Benchmark);
  CHECK(key(0, 0) != first);
  set_conv_algorithm_search(ConvAlgorithmSearch::Heuristic);
  set_float32_conv_precision(MatmulPrecision::High);
  CHECK(key(0, 0) != first);
  set_float32_conv_precision(MatmulPrecision::Highest);
  CHECK(key(0, 0) == first);
  CHECK(cuda::keep_conv_choice(/*benchmark=*/false, /*timing_ran=*/false));
  CHECK(cuda::keep_conv_choice(true, true));  // timed, or timing failed: not asked again
  CHECK_FALSE(cuda::keep_conv_choice(true, false));  // no timing during a capture: timed later
}

namespace {

// t's values (bf16 or f16) as an f32 tensor: exact.
Tensor widened_copy(const Tensor& t) {
  std::vector<float> v;
  const auto* p = static_cast<const std::uint16_t*>(t.raw_data());
  for (std::int64_t i = 0; i < t.numel(); ++i) v.push_back(kiln_test::from_half(p[i], t.dtype()));
  return Tensor::from_vector<float>(t.dims(), v);
}

// got (16-bit) against want (f32) rounded once, as the file header says.
void check_rounded_once(const Tensor& got, const Tensor& want) {
  REQUIRE(got.dims() == want.dims());
  const double unit = got.dtype() == DataType::BFloat16 ? 0x1p-7 : 0x1p-9;
  const std::vector<float> w = want.to_vector<float>();
  const std::vector<float> g = widened_copy(got).to_vector<float>();
  std::int64_t bad = 0, first = -1;
  for (std::size_t i = 0; i < w.size(); ++i)
    if (!(std::abs(g[i] - w[i]) <= unit * std::abs(w[i]) + 1e-3) && bad++ == 0) first = std::int64_t(i);
  INFO(bad << " of " << w.size() << " elements apart, the first at " << first);
  CHECK(bad == 0);
}

void compare_half_conv(const ConvCase& c, DataType dt) {
  INFO("x [" << c.x.to_string() << "] w [" << c.w.to_string() << "] groups " << c.groups << " "
             << to_string(dt));
  const Tensor x = kiln_test::random_half(c.x, dt, 1), w = kiln_test::random_half(c.w, dt, 2);
  const Tensor want = run_op<Conv2dOp>({widened_copy(x), widened_copy(w)}, c.strides, c.paddings, c.dilations, c.groups).out();
  const Tensor got = run_cuda_op<Conv2dOp>({x, w}, c.strides, c.paddings, c.dilations, c.groups).out();
  CHECK(got.dtype() == dt);
  check_rounded_once(got, want);
  const Tensor dout = kiln_test::random_half(want.dims(), dt, 3);
  auto gcpu = run_op<GradOf<Conv2dOp>>({widened_copy(x), widened_copy(w), widened_copy(dout)}, c.strides, c.paddings,
                                       c.dilations, c.groups);
  auto gdev = run_cuda_op<GradOf<Conv2dOp>>({x, w, dout}, c.strides, c.paddings, c.dilations, c.groups);
  {
    INFO("dx");
    check_rounded_once(gdev.results[0], gcpu.results[0]);
  }
  {
    INFO("dw");
    check_rounded_once(gdev.results[1], gcpu.results[1]);
  }
}

}  // namespace

TEST_CASE("CUDA bf16 and f16 conv2d and its gradient (cuDNN, tensor cores) are the f32 results rounded once",
          "[cuda][kernel][half]") {
  if (!have_cuda()) return;
  const std::vector<ConvCase> cases = {
      {{2, 16, 8, 8}, {32, 16, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},    // channels tensor cores take as they are
      {{2, 3, 9, 9}, {8, 3, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 1},       // an RGB stem: 3 channels
      {{1, 8, 7, 7}, {8, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 8},       // depthwise
      {{2, 2, 7, 7}, {3, 2, 2, 3}, {1, 1}, {0, 1, 1, 2}, {1, 1}, 1},  // asymmetric: the padded copy
  };
  for (const ConvCase& c : cases)
    for (DataType dt : {DataType::BFloat16, DataType::Float16}) compare_half_conv(c, dt);
}

namespace {

struct PoolCase {
  Dims x;
  V kernel, strides, paddings;
  bool ceil_mode;
};

template <typename T>
void compare_pools(const PoolCase& c) {
  INFO("x [" << c.x.to_string() << "] kernel " << c.kernel[0] << "x" << c.kernel[1]
             << " paddings " << c.paddings.size() << " ceil " << c.ceil_mode << " "
             << to_string(data_type_of<T>));
  const Tensor x = filled<T>(c.x, -1, 1, 4);
  const Tensor mx = run_op<MaxPool2dOp>({x}, c.kernel, c.strides, c.paddings, c.ceil_mode).out();
  check_conv<T>(run_cuda_op<MaxPool2dOp>({x}, c.kernel, c.strides, c.paddings, c.ceil_mode).out(),
                mx, 0);
  const Tensor d = filled<T>(mx.dims(), -1, 1, 5);
  check_conv<T>(
      run_cuda_op<GradOf<MaxPool2dOp>>({x, d}, c.kernel, c.strides, c.paddings, c.ceil_mode).out(),
      run_op<GradOf<MaxPool2dOp>>({x, d}, c.kernel, c.strides, c.paddings, c.ceil_mode).out(), 0);
  for (bool exclusive : {true, false}) {
    INFO("exclusive " << exclusive);
    check_conv<T>(
        run_cuda_op<AvgPool2dOp>({x}, c.kernel, c.strides, c.paddings, c.ceil_mode, exclusive).out(),
        run_op<AvgPool2dOp>({x}, c.kernel, c.strides, c.paddings, c.ceil_mode, exclusive).out(), 0);
    check_conv<T>(run_cuda_op<GradOf<AvgPool2dOp>>({x, d}, c.kernel, c.strides, c.paddings,
                                                    c.ceil_mode, exclusive)
                      .out(),
                  run_op<GradOf<AvgPool2dOp>>({x, d}, c.kernel, c.strides, c.paddings,
                                              c.ceil_mode, exclusive)
                      .out(),
                  0);
  }
}

}  // namespace

TEST_CASE("CUDA max and avg pools and their gradients give the CPU's values exactly",
          "[cuda][kernel]") {
  if (!have_cuda()) return;
  const std::vector<PoolCase> cases = {
      {{2, 3, 8, 8}, {2, 2}, {}, {0, 0}, false},
      {{1, 2, 9, 7}, {3, 3}, {2, 2}, {1, 1}, false},
      {{1, 2, 9, 7}, {3, 3}, {2, 2}, {1, 1}, true},
      {{2, 1, 10, 11}, {3, 2}, {1, 1}, {0, 1, 1, 0}, false},
      {{1, 1, 5, 5}, {2, 2}, {3, 3}, {0, 0}, true},
  };
  for (const PoolCase& c : cases) {
    compare_pools<float>(c);
    compare_pools<double>(c);
  }
  const Tensor xi = Tensor::from_vector<std::int64_t>({1, 1, 2, 2}, {3, -1, 7, 2});
  CHECK(run_cuda_op<MaxPool2dOp>({xi}, V{2, 2}).out().to_vector<std::int64_t>() ==
        std::vector<std::int64_t>{7});
  KILN_CHECK_ERROR(run_cuda_op<GradOf<MaxPool2dOp>>({filled<float>({1, 1, 4, 4}),
                                                     filled<float>({1, 1, 3, 3})},
                                                    V{2, 2}, V{}, V{0, 0}, false),
                   InvalidArgument, {"kiln.max_pool2d_grad", "dout [1, 1, 3, 3]", "[1, 1, 2, 2]"});
}

TEST_CASE("CUDA adaptive average pooling and its gradient give the CPU's values exactly, for windows that "
          "divide the input, overlap or repeat",
          "[cuda][kernel]") {
  if (!have_cuda()) return;
  struct Case {
    Dims x;
    V out;
  };
  const std::vector<Case> cases = {
      {{2, 3, 7, 7}, {1, 1}},   // a ResNet's global pool
      {{1, 2, 10, 9}, {3, 4}},  // overlapping windows of two sizes
      {{1, 2, 5, 3}, {7, 6}},   // more outputs than inputs: windows repeat
  };
  for (const Case& c : cases) {
    INFO("x [" << c.x.to_string() << "] → " << c.out[0] << "×" << c.out[1]);
    const auto one = [&]<typename T>(T*) {
      const Tensor x = filled<T>(c.x, -1, 1, 4);
      const Tensor want = run_op<AdaptiveAvgPool2dOp>({x}, c.out).out();
      CHECK(kiln_test::same_bits(run_cuda_op<AdaptiveAvgPool2dOp>({x}, c.out).out(), want));
      const Tensor dout = filled<T>(want.dims(), -1, 1, 5);
      CHECK(kiln_test::same_bits(run_cuda_op<GradOf<AdaptiveAvgPool2dOp>>({x, dout}, c.out).out(),
                                 run_op<GradOf<AdaptiveAvgPool2dOp>>({x, dout}, c.out).out()));
    };
    one(static_cast<float*>(nullptr));
    one(static_cast<double*>(nullptr));
  }
}

// The CUDA convolutions' settings (torch.backends.cudnn's benchmark and
// allow_tf32): heuristic search and full f32 precision by default, each
// settable and restorable; the CPU's convolutions give the same bits at
// every setting (both are CUDA matters).
#include <cstring>
#include <vector>

#include "kernel/kernel_test_util.h"
#include "kiln/dialect/conv_ops.h"
#include "kiln/runtime/conv_options.h"

using namespace kiln;

namespace {
Tensor cpu_conv() {
  std::vector<float> xv(2 * 3 * 9 * 9), wv(4 * 3 * 3 * 3);
  for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = float(i % 13) / 7.f - 0.9f;
  for (std::size_t i = 0; i < wv.size(); ++i) wv[i] = float(i % 11) / 5.f - 1.1f;
  const Tensor x = Tensor::from_vector<float>(Dims{2, 3, 9, 9}, xv);
  const Tensor w = Tensor::from_vector<float>(Dims{4, 3, 3, 3}, wv);
  using V = std::vector<std::int64_t>;
  return kiln_test::run_kernel({x, w}, [](Builder& b, const std::vector<Value>& v) {
           return b.create<Conv2dOp>(v[0], v[1], V{1, 1}, V{1, 1}, V{1, 1}, std::int64_t{1}).operation();
         }).out();
}
}  // namespace

TEST_CASE("conv settings default to heuristic search and full f32, and leave CPU convolutions unchanged",
          "[runtime]") {
  CHECK(conv_algorithm_search() == ConvAlgorithmSearch::Heuristic);
  CHECK(float32_conv_precision() == MatmulPrecision::Highest);
  const Tensor plain = cpu_conv();
  set_conv_algorithm_search(ConvAlgorithmSearch::Benchmark);
  set_float32_conv_precision(MatmulPrecision::High);
  CHECK(conv_algorithm_search() == ConvAlgorithmSearch::Benchmark);
  CHECK(float32_conv_precision() == MatmulPrecision::High);
  CHECK(float32_matmul_precision() == MatmulPrecision::Highest);  // a setting of its own
  const Tensor set = cpu_conv();
  set_conv_algorithm_search(ConvAlgorithmSearch::Heuristic);
  set_float32_conv_precision(MatmulPrecision::Highest);
  CHECK(conv_algorithm_search() == ConvAlgorithmSearch::Heuristic);
  CHECK(float32_conv_precision() == MatmulPrecision::Highest);
  REQUIRE(plain.bytes() == set.bytes());
  CHECK(std::memcmp(plain.raw_data(), set.raw_data(), plain.bytes()) == 0);
}

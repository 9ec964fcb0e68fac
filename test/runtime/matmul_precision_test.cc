// MatmulPrecision (torch.set_float32_matmul_precision): Highest by default,
// settable and restorable; the CPU's f32 matmul gives the same bits at
// either setting (TF32 is a CUDA matter).
#include <cstring>
#include <vector>

#include "kernel/kernel_test_util.h"
#include "kiln/runtime/matmul_precision.h"

using namespace kiln;

TEST_CASE("f32 matmul precision is Highest by default, is set process-wide, and leaves CPU products "
          "unchanged",
          "[runtime]") {
  CHECK(float32_matmul_precision() == MatmulPrecision::Highest);
  std::vector<float> xv(48 * 40), yv(40 * 24);
  for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = float(i % 13) / 7.f - 0.9f;
  for (std::size_t i = 0; i < yv.size(); ++i) yv[i] = float(i % 11) / 5.f - 1.1f;
  const Tensor x = Tensor::from_vector<float>(Dims{48, 40}, xv), y = Tensor::from_vector<float>(Dims{40, 24}, yv);
  auto product = [&] {
    return kiln_test::run_kernel({x, y}, [](Builder& b, const std::vector<Value>& v) {
             return b.create<MatmulOp>(v[0], v[1]).operation();
           }).out();
  };
  const Tensor full = product();
  set_float32_matmul_precision(MatmulPrecision::High);
  CHECK(float32_matmul_precision() == MatmulPrecision::High);
  const Tensor high = product();
  set_float32_matmul_precision(MatmulPrecision::Highest);
  CHECK(float32_matmul_precision() == MatmulPrecision::Highest);
  CHECK(std::memcmp(full.raw_data(), high.raw_data(), full.bytes()) == 0);
}

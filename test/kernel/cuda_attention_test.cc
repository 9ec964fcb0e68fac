// The CUDA scaled-dot-product attention and its gradient against the CPU's
// kernels on the same inputs ([cuda]: skipped without a device): causal and
// not, Lq != Lk, a given scale, attention dropout, f32 (the fused kernels)
// to 1e-5 and f64 (the cuBLAS path) to 1e-12 (the GPU sums in other orders;
// the CPU's f32 exp is a polynomial). cuda_flash_attention_test.cc covers
// the fused kernels' dims.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernel/cuda_test_util.h"
#include "kiln/dialect/attention_ops.h"

using namespace kiln;
using kiln_test::filled;
using kiln_test::have_cuda;
using kiln_test::run_cuda_op;
using kiln_test::run_op;

namespace {

template <typename T>
void check_attention(const Tensor& got, const Tensor& want, double tol) {
  kiln_test::check_same<T>(got, want, tol, tol);
}

struct Shape {
  std::int64_t b, h, lq, lk, d, dv;
};

// dropout > 0: attention dropout with that probability.
template <typename T>
void compare_attention(const Shape& s, bool causal, double scale, double tol, double dropout = 0) {
  INFO("B " << s.b << " H " << s.h << " Lq " << s.lq << " Lk " << s.lk << " D " << s.d << " Dv "
            << s.dv << " causal " << causal << " scale " << scale << " dropout " << dropout << " "
            << to_string(data_type_of<T>));
  const Tensor q = filled<T>({s.b, s.h, s.lq, s.d}, -1, 1, 1),
               k = filled<T>({s.b, s.h, s.lk, s.d}, -1, 1, 2),
               v = filled<T>({s.b, s.h, s.lk, s.dv}, -1, 1, 3);
  const std::string layout = "BHLD";
  std::vector<Tensor> fwd_in{q, k, v};
  if (dropout > 0) fwd_in.push_back(Tensor::from_vector<std::uint64_t>({1}, {0x5eedULL}));
  auto cpu = run_op<ScaledDotProductAttentionOp>(fwd_in, causal, scale, layout, dropout);
  auto dev = run_cuda_op<ScaledDotProductAttentionOp>(fwd_in, causal, scale, layout, dropout);
  check_attention<T>(dev.results[0], cpu.results[0], tol);
  if (s.lk > 0) check_attention<T>(dev.results[1], cpu.results[1], tol);
  const Tensor dout = filled<T>(cpu.results[0].dims(), -1, 1, 4);
  std::vector<Tensor> in{q, k, v, cpu.results[0], cpu.results[1], dout};
  in.insert(in.end(), fwd_in.begin() + 3, fwd_in.end());
  auto gcpu = run_op<GradOf<ScaledDotProductAttentionOp>>(in, causal, scale, layout, dropout);
  auto gdev = run_cuda_op<GradOf<ScaledDotProductAttentionOp>>(in, causal, scale, layout, dropout);
  for (int i = 0; i < 3; ++i) {
    INFO("gradient #" << i);
    check_attention<T>(gdev.results[i], gcpu.results[i], tol);
  }
}

}  // namespace

TEST_CASE("CUDA attention and its gradient match the CPU's, causal or not", "[cuda][kernel]") {
  if (!have_cuda()) return;
  const std::vector<Shape> shapes = {{2, 4, 16, 16, 8, 8},  {1, 2, 65, 65, 32, 32},
                                     {2, 1, 7, 19, 5, 3},   {1, 1, 19, 7, 4, 6},
                                     {1, 3, 1, 1, 2, 2},    {1, 1, 200, 200, 16, 16}};
  for (const Shape& s : shapes)
    for (bool causal : {false, true}) {
      compare_attention<float>(s, causal, 0, 1e-5);
      compare_attention<double>(s, causal, 0, 1e-12);
    }
  compare_attention<float>({2, 2, 9, 9, 4, 4}, true, 0.7, 1e-5);
}

// Layout BLHD ([B, L, H, D] operands; read in place by the fused kernels,
// staged through BHLD copies by the cuBLAS path) against the CPU's BLHD kernel.
template <typename T>
void compare_blhd(const Shape& s, bool causal, double tol) {
  INFO("BLHD: B " << s.b << " H " << s.h << " Lq " << s.lq << " Lk " << s.lk << " D " << s.d
                  << " Dv " << s.dv << " causal " << causal);
  const std::string layout = "BLHD";
  const Tensor q = filled<T>({s.b, s.lq, s.h, s.d}, -1, 1, 1),
               k = filled<T>({s.b, s.lk, s.h, s.d}, -1, 1, 2),
               v = filled<T>({s.b, s.lk, s.h, s.dv}, -1, 1, 3);
  auto cpu = run_op<ScaledDotProductAttentionOp>({q, k, v}, causal, 0.0, layout);
  auto dev = run_cuda_op<ScaledDotProductAttentionOp>({q, k, v}, causal, 0.0, layout);
  check_attention<T>(dev.results[0], cpu.results[0], tol);
  check_attention<T>(dev.results[1], cpu.results[1], tol);
  const Tensor dout = filled<T>(cpu.results[0].dims(), -1, 1, 4);
  const std::vector<Tensor> in{q, k, v, cpu.results[0], cpu.results[1], dout};
  auto gcpu = run_op<GradOf<ScaledDotProductAttentionOp>>(in, causal, 0.0, layout);
  auto gdev = run_cuda_op<GradOf<ScaledDotProductAttentionOp>>(in, causal, 0.0, layout);
  for (int i = 0; i < 3; ++i) {
    INFO("gradient #" << i);
    check_attention<T>(gdev.results[i], gcpu.results[i], tol);
  }
}

TEST_CASE("CUDA attention with dropout and its gradient match the CPU's, f32 on the fused kernels and f64 on "
          "cuBLAS",
          "[cuda][kernel][dropout]") {
  if (!have_cuda()) return;
  const std::vector<Shape> shapes = {{2, 4, 16, 16, 8, 8}, {1, 2, 65, 65, 32, 32}, {2, 1, 7, 19, 5, 3},
                                     {1, 1, 19, 7, 4, 6}, {1, 1, 200, 200, 16, 16}};
  for (const Shape& s : shapes)
    for (bool causal : {false, true}) {
      compare_attention<float>(s, causal, 0, 1e-5, 0.25);
      compare_attention<double>(s, causal, 0, 1e-12, 0.25);
    }
  compare_attention<double>({2, 2, 9, 9, 4, 4}, true, 0.7, 1e-12, 0.9);
}

TEST_CASE("CUDA attention in layout BLHD and its gradient match the CPU's", "[cuda][kernel]") {
  if (!have_cuda()) return;
  for (bool causal : {false, true}) {
    compare_blhd<float>({2, 4, 16, 16, 8, 8}, causal, 1e-5);
    compare_blhd<float>({1, 3, 7, 19, 5, 3}, causal, 1e-5);
    compare_blhd<double>({2, 2, 19, 7, 4, 6}, causal, 1e-12);
  }
}

TEST_CASE("CUDA attention with no keys, no queries or no head dims gives the CPU's results",
          "[cuda][kernel]") {
  if (!have_cuda()) return;
  compare_attention<float>({1, 2, 5, 0, 4, 4}, false, 0, 0);
  compare_attention<float>({1, 2, 0, 5, 4, 4}, true, 0, 0);
  compare_attention<float>({1, 2, 5, 5, 0, 4}, false, 0, 1e-6);
  compare_attention<double>({2, 1, 5, 5, 4, 0}, true, 0, 1e-12);  // lse from a GEMM
}

TEST_CASE("CUDA attention refuses operands that do not fit, naming the op and shapes",
          "[cuda][kernel]") {
  if (!have_cuda()) return;
  KILN_CHECK_ERROR(run_cuda_op<ScaledDotProductAttentionOp>(
                       {filled<float>({1, 2, 4, 8}), filled<float>({1, 2, 4, 7}),
                        filled<float>({1, 2, 4, 8})},
                       false, 0.0),
                   InvalidArgument, {"kiln.scaled_dot_product_attention"});
}

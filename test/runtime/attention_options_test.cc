// The CUDA attention gradient's dQ summation setting: deterministic by
// default, settable and restorable; the CPU's attention gradient gives the
// same bits at either setting (the setting is a CUDA matter).
#include <cstring>
#include <vector>

#include "kernel/kernel_test_util.h"
#include "kiln/dialect/attention_ops.h"
#include "kiln/runtime/attention_options.h"

using namespace kiln;

namespace {
// The CPU gradient of a small causal attention: dq, dk, dv.
std::vector<Tensor> cpu_attention_grad() {
  std::vector<float> x(2 * 3 * 5 * 4);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = float(i % 13) / 7.f - 0.9f;
  const Tensor q = Tensor::from_vector<float>(Dims{2, 3, 5, 4}, x);
  const auto fwd = kiln_test::run_op<ScaledDotProductAttentionOp>({q, q, q}, true);
  return kiln_test::run_op<GradOf<ScaledDotProductAttentionOp>>({q, q, q, fwd.out(0), fwd.out(1), q}, true,
                                                                0.0, std::string("BHLD"))
      .results;
}
}  // namespace

TEST_CASE("attention's dQ summation is deterministic by default and leaves the CPU's gradient unchanged",
          "[runtime]") {
  CHECK(attention_grad_sum() == AttentionGradSum::Deterministic);
  const std::vector<Tensor> plain = cpu_attention_grad();
  set_attention_grad_sum(AttentionGradSum::Atomic);
  CHECK(attention_grad_sum() == AttentionGradSum::Atomic);
  const std::vector<Tensor> set = cpu_attention_grad();
  set_attention_grad_sum(AttentionGradSum::Deterministic);
  CHECK(attention_grad_sum() == AttentionGradSum::Deterministic);
  REQUIRE(plain.size() == 3);
  REQUIRE(set.size() == 3);
  for (std::size_t i = 0; i < 3; ++i)
    CHECK(std::memcmp(plain[i].raw_data(), set[i].raw_data(), plain[i].bytes()) == 0);
}

TEST_CASE("f32 attention's kernels are chosen automatically by default, and settable", "[runtime]") {
  CHECK(attention_f32_kernels() == AttentionF32Kernels::Auto);
  set_attention_f32_kernels(AttentionF32Kernels::Fused);
  CHECK(attention_f32_kernels() == AttentionF32Kernels::Fused);
  set_attention_f32_kernels(AttentionF32Kernels::Materialized);
  CHECK(attention_f32_kernels() == AttentionF32Kernels::Materialized);
  set_attention_f32_kernels(AttentionF32Kernels::Auto);
  CHECK(attention_f32_kernels() == AttentionF32Kernels::Auto);
}

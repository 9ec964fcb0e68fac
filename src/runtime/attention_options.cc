#include "kiln/runtime/attention_options.h"

#include <atomic>

namespace kiln {
namespace {
// relaxed: a launch around the call may see either setting.
std::atomic<AttentionGradSum> g_attention_grad_sum{AttentionGradSum::Deterministic};
std::atomic<AttentionF32Kernels> g_attention_f32_kernels{AttentionF32Kernels::Auto};
}  // namespace

void set_attention_grad_sum(AttentionGradSum sum) noexcept {
  g_attention_grad_sum.store(sum, std::memory_order_relaxed);
}
AttentionGradSum attention_grad_sum() noexcept { return g_attention_grad_sum.load(std::memory_order_relaxed); }

void set_attention_f32_kernels(AttentionF32Kernels kernels) noexcept {
  g_attention_f32_kernels.store(kernels, std::memory_order_relaxed);
}
AttentionF32Kernels attention_f32_kernels() noexcept {
  return g_attention_f32_kernels.load(std::memory_order_relaxed);
}

}  // namespace kiln

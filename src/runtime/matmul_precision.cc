#include "kiln/runtime/matmul_precision.h"

#include <atomic>

namespace kiln {
namespace {
// relaxed: a GEMM launched around the call may use either setting.
std::atomic<MatmulPrecision> g_precision{MatmulPrecision::Highest};
}  // namespace

void set_float32_matmul_precision(MatmulPrecision precision) noexcept {
  g_precision.store(precision, std::memory_order_relaxed);
}

MatmulPrecision float32_matmul_precision() noexcept { return g_precision.load(std::memory_order_relaxed); }

}  // namespace kiln

#include "kiln/runtime/conv_options.h"

#include <atomic>

namespace kiln {
namespace {
// relaxed: a convolution chosen around the call may see either setting.
std::atomic<ConvAlgorithmSearch> g_conv_search{ConvAlgorithmSearch::Heuristic};
std::atomic<MatmulPrecision> g_conv_precision{MatmulPrecision::Highest};
}  // namespace

void set_conv_algorithm_search(ConvAlgorithmSearch search) noexcept {
  g_conv_search.store(search, std::memory_order_relaxed);
}
ConvAlgorithmSearch conv_algorithm_search() noexcept { return g_conv_search.load(std::memory_order_relaxed); }

void set_float32_conv_precision(MatmulPrecision precision) noexcept {
  g_conv_precision.store(precision, std::memory_order_relaxed);
}
MatmulPrecision float32_conv_precision() noexcept { return g_conv_precision.load(std::memory_order_relaxed); }

}  // namespace kiln

#include "kiln/exec/run_options.h"

#include <atomic>

namespace kiln {

std::int64_t new_step_id() noexcept {
  // Relaxed: ids need only be distinct.
  static std::atomic<std::int64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace kiln

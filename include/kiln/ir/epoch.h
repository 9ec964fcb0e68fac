// The IR mutation epoch: a process-wide counter bumped by every change to
// any op, block, value or program parameter. Caches keyed on a Program (the
// executor's content hash and value numbering) stay valid while it is
// unchanged, so a training loop pays for hashing once, not every step.
#pragma once

#include <atomic>
#include <cstdint>

namespace kiln {

namespace detail {
inline std::atomic<std::uint64_t> ir_epoch{1};
// Relaxed: the epoch orders nothing; callers compare it on one thread.
inline void bump_ir_epoch() { ir_epoch.fetch_add(1, std::memory_order_relaxed); }
}  // namespace detail

inline std::uint64_t ir_epoch() { return detail::ir_epoch.load(std::memory_order_relaxed); }

}  // namespace kiln

// Intra-op parallelism for kiln's own CPU kernels: a loop over independent
// items split across the OpenMP threads oneDNN's primitives also run on
// (one team per calling thread, no second pool), as many as the calling
// thread's limit allows (kernel_threads_on_this_thread, kiln/kernel/blas.h;
// without one, blas_num_threads()) — which the executor sets: the run's
// threads for a Blas plan's caller, 1 for everything else, so graph workers
// and one-thread runs never open teams.
//
// The split depends only on the item count and the thread count, never on
// timing, and each item is computed by exactly one call of the body: a
// kernel whose items do not depend on each other (elementwise ops, one
// reduction per output, rows of a copy) gives the same bits at any thread
// count. A body must not split one reduction across items.
#pragma once

#include <cstdint>
#include <type_traits>

namespace kiln::cpu {

// The threads a kernel may use now (>= 1).
int intra_op_threads();

// body(ctx, begin, end) over [0, n) in `parts` contiguous ranges, one per
// thread; rethrows the first exception a body threw.
void run_parallel_ranges(std::int64_t n, int parts,
                         void (*body)(void*, std::int64_t, std::int64_t), void* ctx);

// body(begin, end) over [0, n): on this thread when n < 2 · min_items or
// only one thread is allowed, else in up to intra_op_threads() ranges of at
// least min_items items each. Pick min_items so one range is worth ~10 µs
// (waking a team costs a few µs).
template <typename Body>
void parallel_for(std::int64_t n, std::int64_t min_items, Body&& body) {
  if (min_items < 1) min_items = 1;
  if (n < 2 * min_items) {
    if (n > 0) body(std::int64_t{0}, n);
    return;
  }
  const std::int64_t most = n / min_items;
  const int threads = intra_op_threads();
  const int parts = most < threads ? static_cast<int>(most) : threads;
  if (parts <= 1) return body(std::int64_t{0}, n);
  using B = std::remove_reference_t<Body>;
  run_parallel_ranges(
      n, parts,
      [](void* c, std::int64_t b, std::int64_t e) { (*static_cast<B*>(c))(b, e); },
      const_cast<void*>(static_cast<const void*>(&body)));
}

// Items of about `bytes_per_item` bytes of memory traffic: the fewest per
// range that makes a range worth its wake-up (~64 KiB).
constexpr std::int64_t items_per_range(std::int64_t bytes_per_item) {
  constexpr std::int64_t kBytes = 64 * 1024;
  return bytes_per_item >= kBytes ? 1 : kBytes / (bytes_per_item < 1 ? 1 : bytes_per_item);
}

}  // namespace kiln::cpu

// intra_op.h: the ranges run in one OpenMP parallel region (libgomp, the
// runtime oneDNN uses) when kiln is built with OpenMP, else one after the
// other on the calling thread.
#include "intra_op.h"

#include <exception>
#include <mutex>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "kiln/kernel/blas.h"

namespace kiln::cpu {

int intra_op_threads() {
#ifdef _OPENMP
  // The executor's limit for this thread (a Blas run's caller: the run's
  // threads, whether or not the plan has GEMMs); outside a run, BLAS's count.
  const int limit = kernel_threads_on_this_thread();
  const int n = limit > 0 ? limit : blas_num_threads();
  return n < 1 ? 1 : n;
#else
  return 1;
#endif
}

namespace {

// Range i of `parts` equal ranges over [0, n); the first n % parts ranges
// take one item more.
void range_of(std::int64_t n, int parts, int i, std::int64_t& begin, std::int64_t& end) {
  const std::int64_t q = n / parts, r = n % parts;
  begin = i * q + (i < r ? i : r);
  end = begin + q + (i < r ? 1 : 0);
}

}  // namespace

void run_parallel_ranges(std::int64_t n, int parts,
                         void (*body)(void*, std::int64_t, std::int64_t), void* ctx) {
  std::exception_ptr error;
  std::mutex error_mutex;
  auto run_range = [&](int i) {
    std::int64_t b = 0, e = 0;
    range_of(n, parts, i, b, e);
    try {
      body(ctx, b, e);
    } catch (...) {
      const std::lock_guard lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  };
#ifdef _OPENMP
  // A region nested in another gets one thread: that thread runs every range.
#pragma omp parallel num_threads(parts)
  {
    const int team = omp_get_num_threads();
    for (int i = omp_get_thread_num(); i < parts; i += team) run_range(i);
  }
#else
  for (int i = 0; i < parts; ++i) run_range(i);
#endif
  if (error) std::rethrow_exception(error);
}

}  // namespace kiln::cpu

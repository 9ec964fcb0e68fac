// kiln/kernel/blas.h over OpenBLAS.
#include "kiln/kernel/blas.h"

#include <atomic>

#include <cblas.h>

namespace kiln {

namespace {
// The count last set through kiln (0: not yet read from OpenBLAS). Relaxed:
// callers that need the count to stay put hold BlasThreadsGuard's lock.
std::atomic<int> g_threads{0};
}  // namespace

void blas_set_num_threads(int n) {
  if (n < 1) n = 1;
  openblas_set_num_threads(n);
  g_threads.store(n, std::memory_order_relaxed);
}

int blas_num_threads() {
  int n = g_threads.load(std::memory_order_relaxed);
  if (n == 0) {
    n = openblas_get_num_threads();
    g_threads.store(n, std::memory_order_relaxed);
  }
  return n;
}

}  // namespace kiln

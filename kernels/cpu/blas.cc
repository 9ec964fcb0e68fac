// kiln/kernel/blas.h and cpu_blas.h over OpenBLAS and, when kiln is built
// with it, oneDNN's sgemm (onednn.h).
#include "kiln/kernel/blas.h"

#include <atomic>
#include <cstring>
#include <string_view>

#include <cblas.h>

#include "cpu_blas.h"
#include "onednn.h"

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

namespace {
thread_local int t_kernel_threads = 0;  // this thread's limit; 0: none
}  // namespace

void set_kernel_threads_on_this_thread(int n) { t_kernel_threads = n < 0 ? 0 : n; }
int kernel_threads_on_this_thread() { return t_kernel_threads; }

int blas_num_threads() {
  int n = g_threads.load(std::memory_order_relaxed);
  if (n == 0) {
    n = openblas_get_num_threads();
    g_threads.store(n, std::memory_order_relaxed);
  }
  return n;
}

namespace cpu {
namespace {

// Whether OpenBLAS's kernel uses the widest vectors this CPU has (its core
// names for AVX-512 and AVX2 kernels).
bool openblas_matches_cpu() {
  const std::string_view core = openblas_get_corename();
  const bool avx512 = core == "SkylakeX" || core == "Cooperlake" || core == "SapphireRapids";
  const bool avx2 = avx512 || core == "Haswell" || core == "Zen";
#if defined(__x86_64__) || defined(__i386__)
  if (__builtin_cpu_supports("avx512f")) return avx512;
  if (__builtin_cpu_supports("avx2")) return avx2;
#endif
  return true;
}

bool sgemm_on_onednn() {
  static const bool onednn = onednn::available() && !openblas_matches_cpu();
  return onednn;
}

CBLAS_TRANSPOSE trans(bool t) { return t ? CblasTrans : CblasNoTrans; }

}  // namespace

const char* sgemm_library() { return sgemm_on_onednn() ? "onednn" : "openblas"; }

void gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
          const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
          std::int64_t ldc) {
  if (m * n * k >= kOnednnMinFlops && sgemm_on_onednn() &&
      onednn::sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc))
    return;
  cblas_sgemm(CblasRowMajor, trans(ta), trans(tb), int(m), int(n), int(k), alpha, a, int(lda), b,
              int(ldb), beta, c, int(ldc));
}

void gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
          const double* a, std::int64_t lda, const double* b, std::int64_t ldb, double beta,
          double* c, std::int64_t ldc) {
  cblas_dgemm(CblasRowMajor, trans(ta), trans(tb), int(m), int(n), int(k), alpha, a, int(lda), b,
              int(ldb), beta, c, int(ldc));
}

}  // namespace cpu
}  // namespace kiln

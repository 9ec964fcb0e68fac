// kiln/kernel/blas.h and cpu_blas.h over OpenBLAS and, when kiln is built
// with it, oneDNN's sgemm (onednn.h).
#include "kiln/kernel/blas.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

#include <cblas.h>

#include "cpu_blas.h"
#include "intra_op.h"
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
// This thread's limit; 0: none. Initial-exec: read and set on every run,
// and a shared library's default TLS model makes each access a call. A
// libkiln.so loaded by dlopen takes these 4 bytes from glibc's spare
// static TLS.
[[gnu::tls_model("initial-exec")]] thread_local int t_kernel_threads = 0;
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

// f32 GEMMs of kOnednnMinFlops or more go to oneDNN wherever kiln has it
// and its sgemm is compiled for the CPU (x86 with AVX2; elsewhere it may
// run its reference code): split by for_each_block, they give the same
// bits at any thread count, which OpenBLAS's own threading does not (it
// cuts a thin product's k, e.g. m 2, n 3072, k 1000, differently at 1, 2
// and 3 threads). oneDNN also picks its kernel by instruction set where
// Debian's OpenBLAS picks by CPU model (a virtual machine that hides the
// model gets its SSE3 fallback).
bool sgemm_on_onednn() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool onednn = onednn::available() && __builtin_cpu_supports("avx2");
#else
  static const bool onednn = false;
#endif
  return onednn;
}

CBLAS_TRANSPOSE trans(bool t) { return t ? CblasTrans : CblasNoTrans; }

void openblas_sgemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                    const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta,
                    float* c, std::int64_t ldc) {
  cblas_sgemm(CblasRowMajor, trans(ta), trans(tb), int(m), int(n), int(k), alpha, a, int(lda), b,
              int(ldb), beta, c, int(ldc));
}

// kiln's split of a product's C across the threads for oneDNN's GEMMs.
// oneDNN's own threaded sgemm cuts k into per-thread partial sums for some
// shapes (measured on 2.6: 48 of 640 shapes at 2 threads, e.g. m 16, n 512,
// k 1000 with b transposed: a linear layer's input gradient), and its
// one-thread sgemm sums in an order that depends on m and n (9 of the 640
// differ when C is cut into halves instead of one call). So C is cut into
// blocks of whole rows (or columns, when it has more of them) whose bounds
// depend on the shape and the machine alone, each a one-thread GEMM over
// all of k, and the threads share the blocks: the same calls, so the same
// bits, at any thread count. A block re-packs the other operand, so there
// are no more blocks than the machine has cores, and each is worth ~1 M
// multiply-adds, with m or n below 16 counted as 16: so thin a product
// streams the other operand for few multiply-adds (a linear layer at batch
// 1 reads its 1280 x 1000 weights, 5 MB, for 1.3 M), at ~16 times a
// GEMM's cost each. block(a, b, c, mb, nb) runs one block (a, b and c
// moved to its first row or column; mb x nb of C). Every block runs; false
// when any block's call returned false.
template <typename T, typename Block>
bool for_each_block(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const T* a,
                    std::int64_t lda, const T* b, std::int64_t ldb, T* c, std::int64_t ldc, Block block) {
  constexpr std::int64_t kMinBlock = 64, kBlockMacs = std::int64_t{1} << 20;
  static const std::int64_t max_blocks = std::clamp<std::int64_t>(std::thread::hardware_concurrency(), 1, 8);
  const bool by_rows = m >= n;
  const std::int64_t len = by_rows ? m : n;
  const std::int64_t work = std::max<std::int64_t>(m, 16) * std::max<std::int64_t>(n, 16) * k;
  const std::int64_t blocks = std::clamp(std::min(len / kMinBlock, work / kBlockMacs), std::int64_t{1}, max_blocks);
  auto bound = [&](std::int64_t i) { return i == blocks ? len : len * i / blocks / kMinBlock * kMinBlock; };
  std::atomic<bool> all{true};
  parallel_for(blocks, 1, [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) {
      const std::int64_t first = bound(i), size = bound(i + 1) - first;
      const T* ab = by_rows ? a + (ta ? first : first * lda) : a;
      const T* bb = by_rows ? b : b + (tb ? first * ldb : first);
      T* cb = c + (by_rows ? first * ldc : first);
      if (!block(ab, bb, cb, by_rows ? size : m, by_rows ? n : size)) all.store(false, std::memory_order_relaxed);
    }
  });
  return all.load(std::memory_order_relaxed);
}

// oneDNN's sgemm, split across the threads by for_each_block (OpenBLAS's
// for a block oneDNN did not run).
void onednn_sgemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                  const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta,
                  float* c, std::int64_t ldc) {
  for_each_block(ta, tb, m, n, k, a, lda, b, ldb, c, ldc,
                 [&](const float* ab, const float* bb, float* cb, std::int64_t mb, std::int64_t nb) {
                   if (!onednn::sgemm(ta, tb, mb, nb, k, alpha, ab, lda, bb, ldb, beta, cb, ldc))
                     openblas_sgemm(ta, tb, mb, nb, k, alpha, ab, lda, bb, ldb, beta, cb, ldc);
                   return true;
                 });
}

}  // namespace

void gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
          const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
          std::int64_t ldc) {
  if (m * n * k >= kOnednnMinFlops && sgemm_on_onednn())
    return onednn_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  openblas_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

bool native_bf16_gemm() { return onednn::native_bf16(); }

bool gemm_bf16(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const std::uint16_t* a,
               std::int64_t lda, const std::uint16_t* b, std::int64_t ldb, std::uint16_t* c, std::int64_t ldc) {
  if (!onednn::native_bf16()) return false;
  using Bits = std::uint16_t;
  return for_each_block(ta, tb, m, n, k, a, lda, b, ldb, c, ldc,
                        [&](const Bits* ab, const Bits* bb, Bits* cb, std::int64_t mb, std::int64_t nb) {
                          return onednn::bf16_gemm(ta, tb, mb, nb, k, ab, lda, bb, ldb, cb, ldc);
                        });
}

void gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
          const double* a, std::int64_t lda, const double* b, std::int64_t ldb, double beta,
          double* c, std::int64_t ldc) {
  cblas_dgemm(CblasRowMajor, trans(ta), trans(tb), int(m), int(n), int(k), alpha, a, int(lda), b,
              int(ldb), beta, c, int(ldc));
}

}  // namespace cpu
}  // namespace kiln

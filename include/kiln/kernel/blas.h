// The intra-op thread count of kiln's CPU kernels: the BLAS's (OpenBLAS's)
// and kiln's own splits (oneDNN's f32 GEMMs, kernels/cpu/cpu_blas.h). Kernels never change it; whoever decides between graph-level and
// GEMM-level parallelism (the executor) calls this once (DESIGN.md: two
// spinning pools, workers + BLAS, made PyTorch's MLP 3x slower).
#pragma once

namespace kiln {

// openblas_set_num_threads(n); n < 1 is taken as 1.
void blas_set_num_threads(int n);
// BLAS's thread count: the last set through blas_set_num_threads (no call
// into OpenBLAS), else openblas_get_num_threads(). A count set by calling
// OpenBLAS directly is not seen.
int blas_num_threads();

// The threads kiln's own CPU kernels may split a loop across on the
// calling thread (kernels/cpu/intra_op.h); 0, the default, means
// blas_num_threads(). The executor gives a
// run's caller the run's threads under the Blas plan and 1 under any other,
// and its pool workers 1: a kernel on a graph worker or in a one-thread
// run never opens a team, whatever BLAS's process-wide count is.
void set_kernel_threads_on_this_thread(int n);
int kernel_threads_on_this_thread();

// That limit for a scope, the previous one restored at its end.
class KernelThreadsScope {
 public:
  explicit KernelThreadsScope(int n) : previous_(kernel_threads_on_this_thread()) {
    set_kernel_threads_on_this_thread(n);
  }
  ~KernelThreadsScope() { set_kernel_threads_on_this_thread(previous_); }
  KernelThreadsScope(const KernelThreadsScope&) = delete;
  KernelThreadsScope& operator=(const KernelThreadsScope&) = delete;

 private:
  int previous_;
};

}  // namespace kiln

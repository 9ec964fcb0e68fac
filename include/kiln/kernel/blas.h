// The BLAS kiln's CPU kernels call (OpenBLAS): a thin handle on its thread
// count. Kernels never change it; whoever decides between graph-level and
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

}  // namespace kiln

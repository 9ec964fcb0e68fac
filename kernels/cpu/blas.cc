// kiln/kernel/blas.h over OpenBLAS.
#include "kiln/kernel/blas.h"

#include <cblas.h>

namespace kiln {

void blas_set_num_threads(int n) { openblas_set_num_threads(n < 1 ? 1 : n); }
int blas_num_threads() { return openblas_get_num_threads(); }

}  // namespace kiln

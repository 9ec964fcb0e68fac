// KILN_HOST_DEVICE marks a function that runs on the host and, compiled by
// nvcc, on a CUDA device too: the math of an op family (unary_math.h,
// binary_math.h) is written once and expanded into CPU and CUDA kernels.
#pragma once

#if defined(__CUDACC__)
#define KILN_HOST_DEVICE __host__ __device__
#else
#define KILN_HOST_DEVICE
#endif

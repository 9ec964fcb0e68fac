// Function markers for code nvcc compiles too. KILN_HOST_DEVICE marks a
// function that runs on the host and, compiled by nvcc, on a CUDA device
// too: the math of an op family (unary_math.h, binary_math.h) is written
// once and expanded into CPU and CUDA kernels. KILN_ALWAYS_INLINE (below)
// forces the inlining of kernels' per-run accessors in host compilers.
#pragma once

#if defined(__CUDACC__)
#define KILN_HOST_DEVICE __host__ __device__
#else
#define KILN_HOST_DEVICE
#endif

// KILN_ALWAYS_INLINE: accessors a kernel calls on every run (a tensor's data,
// a kernel's operands) inlined even where GCC's size heuristics would call
// them (through the PLT, from a shared library). Empty under nvcc, where the
// accessors stay plain inline functions.
#if defined(__CUDACC__)
#define KILN_ALWAYS_INLINE
#else
#define KILN_ALWAYS_INLINE [[gnu::always_inline]]
#endif

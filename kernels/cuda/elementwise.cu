// CUDA kernels of the elementwise families, expanded from the same math
// structs as the CPU's (kiln/dialect/unary_math.h, binary_math.h): the
// broadcasting binaries (numpy broadcasting through kiln/kernel/broadcast.h's
// plan, one thread per output element) and the unary family with its
// gradient ops; the comparison, logical and predicate families
// (compare_math.h, bool results); gelu and add_n. Launchers only (launch.h):
// the host halves that read the context are elementwise_kernels.h's, which
// register.cc registers.
//
// Differences from the CPU kernels: an integer division or remainder by
// zero gives 0 instead of an error (checking would cost a device-to-host
// sync per op).
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "grid_stride.cuh"
#include "kiln/dialect/binary_math.h"
#include "kiln/dialect/compare_math.h"
#include "launch.h"
#include "kiln/dialect/unary_math.h"
#include "kiln/kernel/broadcast.h"

namespace kiln::cuda {

namespace {

// Math::forward, with an integer divisor of 0 giving 0 (no trap on a GPU,
// but an undefined result).
template <typename Math, typename T>
__device__ auto apply_binary(T a, T b) {
  if constexpr (std::is_integral_v<T> && (std::is_same_v<Math, DivMath> ||
                                          std::is_same_v<Math, ModMath> ||
                                          std::is_same_v<Math, FmodMath>))
    if (b == T(0)) return decltype(Math::forward(a, b))(0);
  return Math::forward(a, b);
}

template <typename Math, typename T, typename U>
__global__ void binary_same_shape(const T* __restrict__ x, const T* __restrict__ y,
                                  U* __restrict__ out, std::int64_t n) {
  KILN_GRID_STRIDE(i, n) out[i] = apply_binary<Math>(x[i], y[i]);
}

// out[i] for the output index i decomposed along the plan's collapsed dims.
template <typename Math, typename T, typename U>
__global__ void binary_broadcast(const T* __restrict__ x, const T* __restrict__ y,
                                 U* __restrict__ out, std::int64_t n, BroadcastPlan p) {
  KILN_GRID_STRIDE(i, n) {
    std::int64_t xo, yo;
    broadcast_offsets(p, i, xo, yo);
    out[i] = apply_binary<Math>(x[xo], y[yo]);
  }
}

template <typename Math, typename T>
__global__ void unary_forward(const T* __restrict__ x, T* __restrict__ out, std::int64_t n) {
  KILN_GRID_STRIDE(i, n) out[i] = Math::forward(x[i]);
}

template <typename Math, typename T>
__global__ void unary_in_place(T* __restrict__ x, std::int64_t n) {
  KILN_GRID_STRIDE(i, n) x[i] = Math::forward(x[i]);
}

template <typename Math, typename T>
__global__ void unary_backward(const T* __restrict__ a, const T* __restrict__ d,
                               T* __restrict__ out, std::int64_t n) {
  KILN_GRID_STRIDE(i, n) out[i] = Math::backward(a[i], d[i]);
}

template <typename Math, typename T>
__global__ void predicate_map(const T* __restrict__ x, bool* __restrict__ out, std::int64_t n) {
  KILN_GRID_STRIDE(i, n) out[i] = Math::forward(x[i]);
}

__global__ void logical_not_map(const bool* __restrict__ x, bool* __restrict__ out,
                                std::int64_t n) {
  KILN_GRID_STRIDE(i, n) out[i] = !x[i];
}

// Up to kAddNInputs operands of add_n per launch, passed by value.
constexpr int kAddNInputs = 8;
template <typename T>
struct AddNOperands {
  const T* in[kAddNInputs];
  int count;
  bool accumulate;  // out += Σ in (a later group) rather than out = Σ in
};

// K operands, a compile-time count: the pointers stay in registers (a
// loop to a runtime count indexes the parameter array, which nvcc copies to
// local memory and reads per element). Sums in operand order.
template <int K, typename T>
__global__ void add_n_group(AddNOperands<T> ops, T* __restrict__ out, std::int64_t n) {
  KILN_GRID_STRIDE(i, n) {
    T acc = ops.accumulate ? out[i] + ops.in[0][i] : ops.in[0][i];
#pragma unroll
    for (int k = 1; k < K; ++k) acc += ops.in[k][i];
    out[i] = acc;
  }
}

template <int K = 1, typename T>
void launch_add_n_group(const AddNOperands<T>& ops, T* out, std::int64_t n, cudaStream_t s) {
  if constexpr (K < kAddNInputs)
    if (ops.count > K) return launch_add_n_group<K + 1>(ops, out, n, s);
  add_n_group<K><<<blocks_for(n), kThreads, 0, s>>>(ops, out, n);
}

}  // namespace

template <typename Math, typename T, typename U>
void launch_binary(const T* x, const T* y, U* out, std::int64_t n, const BroadcastPlan* plan,
                   cudaStream_t s) {
  if (n == 0) return;
  if (!plan)
    binary_same_shape<Math><<<blocks_for(n), kThreads, 0, s>>>(x, y, out, n);
  else
    binary_broadcast<Math><<<blocks_for(n), kThreads, 0, s>>>(x, y, out, n, *plan);
}

template <typename Math, typename T>
void launch_predicate(const T* x, bool* out, std::int64_t n, cudaStream_t s) {
  if (n) predicate_map<Math><<<blocks_for(n), kThreads, 0, s>>>(x, out, n);
}

void launch_logical_not(const bool* x, bool* out, std::int64_t n, cudaStream_t s) {
  if (n) logical_not_map<<<blocks_for(n), kThreads, 0, s>>>(x, out, n);
}

template <typename Math, typename T>
void launch_unary_in_place(T* x, std::int64_t n, cudaStream_t s) {
  if (n) unary_in_place<Math><<<blocks_for(n), kThreads, 0, s>>>(x, n);
}

template <typename Math, typename T>
void launch_unary_forward(const T* x, T* out, std::int64_t n, cudaStream_t s) {
  if (n) unary_forward<Math><<<blocks_for(n), kThreads, 0, s>>>(x, out, n);
}

template <typename Math, typename T>
void launch_unary_backward(const T* x, const T* d, T* out, std::int64_t n, cudaStream_t s) {
  if (n) unary_backward<Math><<<blocks_for(n), kThreads, 0, s>>>(x, d, out, n);
}

template <typename T>
void launch_add_n(const T* const* in, int k, T* out, std::int64_t n, cudaStream_t s) {
  if (n == 0) return;
  for (int first = 0; first < k; first += kAddNInputs) {
    AddNOperands<T> ops{};
    ops.count = std::min(kAddNInputs, k - first);
    ops.accumulate = first > 0;
    for (int j = 0; j < ops.count; ++j) ops.in[j] = in[first + j];
    launch_add_n_group(ops, out, n, s);
  }
}

// ---- explicit instantiations: the dtypes register.cc registers ----

#define KILN_FLOATS(F, M) F(M, float) F(M, double)
#define KILN_INTS(F, M)                                                                        \
  F(M, std::int8_t) F(M, std::int16_t) F(M, std::int32_t) F(M, std::int64_t) F(M, std::uint8_t) \
      F(M, std::uint16_t) F(M, std::uint32_t) F(M, std::uint64_t)
#define KILN_BINARY(M, T) \
  template void launch_binary<M, T, T>(const T*, const T*, T*, std::int64_t, const BroadcastPlan*, cudaStream_t);
#define KILN_UNARY(M, T)                                                             \
  template void launch_unary_forward<M, T>(const T*, T*, std::int64_t, cudaStream_t); \
  template void launch_unary_in_place<M, T>(T*, std::int64_t, cudaStream_t);
#define KILN_UNARY_GRAD(M, T) \
  template void launch_unary_backward<M, T>(const T*, const T*, T*, std::int64_t, cudaStream_t);

// Every member of BinaryFamily: floats unless integer-only, integers unless
// floating-only.
KILN_FLOATS(KILN_BINARY, AddMath) KILN_INTS(KILN_BINARY, AddMath)
KILN_FLOATS(KILN_BINARY, SubMath) KILN_INTS(KILN_BINARY, SubMath)
KILN_FLOATS(KILN_BINARY, MulMath) KILN_INTS(KILN_BINARY, MulMath)
KILN_FLOATS(KILN_BINARY, DivMath) KILN_INTS(KILN_BINARY, DivMath)
KILN_FLOATS(KILN_BINARY, MaximumMath) KILN_INTS(KILN_BINARY, MaximumMath)
KILN_FLOATS(KILN_BINARY, MinimumMath) KILN_INTS(KILN_BINARY, MinimumMath)
KILN_FLOATS(KILN_BINARY, PowMath)
KILN_FLOATS(KILN_BINARY, ModMath) KILN_INTS(KILN_BINARY, ModMath)
KILN_FLOATS(KILN_BINARY, FmodMath) KILN_INTS(KILN_BINARY, FmodMath)
KILN_INTS(KILN_BINARY, ShiftLeftMath)
KILN_INTS(KILN_BINARY, ShiftRightMath)

// Every member of UnaryFamily: f32 / f64, and i32 / i64 unless
// floating-only; their gradients in f32 / f64.
#define KILN_UNARY_ALL(M) KILN_FLOATS(KILN_UNARY, M) KILN_FLOATS(KILN_UNARY_GRAD, M)
#define KILN_UNARY_WITH_INTS(M) KILN_UNARY_ALL(M) KILN_UNARY(M, std::int32_t) KILN_UNARY(M, std::int64_t)
KILN_UNARY_WITH_INTS(ReluMath)
KILN_UNARY_ALL(TanhMath)
KILN_UNARY_ALL(SigmoidMath)
KILN_UNARY_ALL(ExpMath)
KILN_UNARY_ALL(LogMath)
KILN_UNARY_ALL(SqrtMath)
KILN_UNARY_WITH_INTS(SquareMath)
KILN_UNARY_WITH_INTS(AbsMath)
KILN_UNARY_WITH_INTS(NegMath)
KILN_UNARY_ALL(SinMath)
KILN_UNARY_ALL(CosMath)
KILN_UNARY_ALL(TanMath)
KILN_UNARY_ALL(AsinMath)
KILN_UNARY_ALL(AcosMath)
KILN_UNARY_ALL(AtanMath)
KILN_UNARY_ALL(SinhMath)
KILN_UNARY_ALL(CoshMath)
KILN_UNARY_ALL(AsinhMath)
KILN_UNARY_ALL(AcoshMath)
KILN_UNARY_ALL(AtanhMath)
KILN_UNARY_ALL(ErfMath)
KILN_UNARY_ALL(FloorMath)
KILN_UNARY_ALL(CeilMath)
KILN_UNARY_ALL(RoundMath)
KILN_UNARY_WITH_INTS(SignMath)

// The comparison, logical and predicate families (compare_math.h): the
// CPU's dtypes.
#define KILN_COMPARE(M, T) \
  template void launch_binary<M, T, bool>(const T*, const T*, bool*, std::int64_t, const BroadcastPlan*, cudaStream_t);
#define KILN_COMPARE_NUMERIC(M) \
  KILN_COMPARE(M, float) KILN_COMPARE(M, double) KILN_COMPARE(M, std::int32_t) KILN_COMPARE(M, std::int64_t)
KILN_COMPARE_NUMERIC(EqualMath) KILN_COMPARE(EqualMath, bool)
KILN_COMPARE_NUMERIC(NotEqualMath) KILN_COMPARE(NotEqualMath, bool)
KILN_COMPARE_NUMERIC(LessThanMath)
KILN_COMPARE_NUMERIC(LessEqualMath)
KILN_COMPARE_NUMERIC(GreaterThanMath)
KILN_COMPARE_NUMERIC(GreaterEqualMath)
KILN_COMPARE(LogicalAndMath, bool)
KILN_COMPARE(LogicalOrMath, bool)
KILN_COMPARE(LogicalXorMath, bool)
template void launch_predicate<IsNanMath, float>(const float*, bool*, std::int64_t, cudaStream_t);
template void launch_predicate<IsNanMath, double>(const double*, bool*, std::int64_t, cudaStream_t);
template void launch_predicate<IsFiniteMath, float>(const float*, bool*, std::int64_t, cudaStream_t);
template void launch_predicate<IsFiniteMath, double>(const double*, bool*, std::int64_t, cudaStream_t);

// gelu's two forms and add_n (their host halves read attributes: elementwise.cc).
#define KILN_GELU(M, T)                                                                   \
  template void launch_unary_forward<M, T>(const T*, T*, std::int64_t, cudaStream_t);   \
  template void launch_unary_backward<M, T>(const T*, const T*, T*, std::int64_t, cudaStream_t);
KILN_FLOATS(KILN_GELU, GeluErfMath)
KILN_FLOATS(KILN_GELU, GeluTanhMath)
#define KILN_ADD_N(T) template void launch_add_n<T>(const T* const*, int, T*, std::int64_t, cudaStream_t);
KILN_ADD_N(float) KILN_ADD_N(double) KILN_ADD_N(std::int32_t) KILN_ADD_N(std::int64_t)

}  // namespace kiln::cuda

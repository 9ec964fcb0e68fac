// CUDA kernels of the data-movement ops (launched by shape.cc, launch.h):
// a fill of 1-, 2-, 4- or 8-byte words (full, zeros_like), one strided copy
// of such words that serves transpose, slice and its gradient, concat, split
// and split_as (each op's layout becomes a walk over at most kMaxRank dims
// with a source and a destination stride per dim), cast between f32 and
// bf16 / f16, and between f32, f64,
// i32, i64, bool, u8 and i8 with the CPU's conversion rules, and clip
// (also bf16 / f16), its gradient and scale element by element.
//
// The copies move bytes only, so they are exact; casts follow the CPU's
// rules (float → integer saturates, NaN → 0); scale's products are rounded
// before the add (no FMA), as the CPU computes them.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <limits>
#include <type_traits>

#include "grid_stride.cuh"
#include "launch.h"
#include "widen.cuh"

namespace kiln::cuda {
namespace {

// ---- fill, strided copy ----

template <typename W>
__global__ void fill(W* out, std::int64_t n, W v) {
  KILN_GRID_STRIDE(i, n) out[i] = v;
}

template <typename W>
__global__ void strided_copy(const W* __restrict__ src, W* __restrict__ dst, CopyWalk w) {
  KILN_GRID_STRIDE(i, w.n) {
    std::int64_t rem = i, so = 0, d = 0;
    for (int k = w.rank - 1; k >= 0; --k) {
      const std::int64_t idx = rem % w.dims[k];
      rem /= w.dims[k];
      so += idx * w.src[k];
      d += idx * w.dst[k];
    }
    dst[d] = src[so];
  }
}

template <typename W>
void fill_words(void* out, std::int64_t n, std::uint64_t bits, cudaStream_t s) {
  fill<W><<<blocks_for(n), kThreads, 0, s>>>(static_cast<W*>(out), n, static_cast<W>(bits));
}

template <typename W>
void copy_words(const void* src, void* dst, const CopyWalk& w, cudaStream_t s) {
  strided_copy<W><<<blocks_for(w.n), kThreads, 0, s>>>(static_cast<const W*>(src),
                                                         static_cast<W*>(dst), w);
}

// ---- cast: the CPU's convert (kernels/cpu/unary.cc) for these dtypes ----

template <typename To, typename From>
__device__ To convert(From v) {
  if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    // [lo, hi) as on the CPU: lo is 0 or -2^(bits-1), hi 2^bits or 2^(bits-1).
    constexpr From lo = static_cast<From>(std::numeric_limits<To>::min());
    constexpr From hi = static_cast<From>(std::numeric_limits<To>::max() / 2 + 1) * From(2);
    if (!(v == v)) return To(0);
    if (v <= lo) return std::numeric_limits<To>::min();
    if (v >= hi) return std::numeric_limits<To>::max();
    return static_cast<To>(v);
  } else {
    return static_cast<To>(v);
  }
}

template <typename To, typename From>
__global__ void cast(const From* __restrict__ in, To* __restrict__ out, std::int64_t n) {
  KILN_GRID_STRIDE(i, n) out[i] = convert<To>(in[i]);
}

// f32 <-> the 16-bit floats (raw bits): rounded to nearest even, as the
// CPU's casts (kiln/support/half.h).
__global__ void f32_to_16bit(const float* __restrict__ in, std::uint16_t* __restrict__ out,
                             std::int64_t n, bool bf16) {
  KILN_GRID_STRIDE(i, n) {
    out[i] = bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(in[i])) : __half_as_ushort(__float2half_rn(in[i]));
  }
}

__global__ void f16bit_to_f32(const std::uint16_t* __restrict__ in, float* __restrict__ out,
                              std::int64_t n, bool bf16) {
  KILN_GRID_STRIDE(i, n) {
    out[i] = bf16 ? __bfloat162float(__ushort_as_bfloat16(in[i])) : __half2float(__ushort_as_half(in[i]));
  }
}

// f(T{}) for the element type of t; false when t is not one of the seven.
template <typename F>
bool with_type(DataType t, F&& f) {
  switch (t) {
    case DataType::Float32: f(float{}); return true;
    case DataType::Float64: f(double{}); return true;
    case DataType::Int32: f(std::int32_t{}); return true;
    case DataType::Int64: f(std::int64_t{}); return true;
    case DataType::Bool: f(bool{}); return true;
    case DataType::UInt8: f(std::uint8_t{}); return true;
    case DataType::Int8: f(std::int8_t{}); return true;
    default: return false;
  }
}

// ---- clip, clip_grad, scale ----

template <typename T>
__global__ void clip(const T* __restrict__ x, T* __restrict__ out, std::int64_t n, T lo, T hi) {
  KILN_GRID_STRIDE(i, n) {  // max first, then min, as on the CPU
    const T v = x[i] < lo ? lo : x[i];
    out[i] = v > hi ? hi : v;
  }
}

template <typename T>
__global__ void clip_grad(const T* __restrict__ x, const T* __restrict__ dout, T* __restrict__ dx,
                          std::int64_t n, T lo, T hi) {
  KILN_GRID_STRIDE(i, n) {  // dout where lo <= x <= hi, else (NaN too) +0, as on the CPU
    const T v = x[i];
    dx[i] = v >= lo && v <= hi ? dout[i] : T(0);
  }
}

template <typename S>
__global__ void clip_half(const S* __restrict__ x, S* __restrict__ out, std::int64_t n, float lo, float hi) {
  KILN_GRID_STRIDE(i, n) {
    const float xv = widened(x[i]);
    const float v = xv < lo ? lo : xv;
    out[i] = narrowed<S>(v > hi ? hi : v);
  }
}

template <typename S>
__global__ void clip_grad_half(const S* __restrict__ x, const S* __restrict__ dout, S* __restrict__ dx,
                               std::int64_t n, float lo, float hi) {
  KILN_GRID_STRIDE(i, n) {
    const float v = widened(x[i]);
    dx[i] = v >= lo && v <= hi ? dout[i] : narrowed<S>(0.f);
  }
}

__device__ inline float mul_round(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double mul_round(double a, double b) { return __dmul_rn(a, b); }

template <typename T>
__global__ void scale(const T* __restrict__ x, T* __restrict__ out, std::int64_t n, double s,
                      double b) {
  if constexpr (std::is_floating_point_v<T>) {
    const T ts = static_cast<T>(s), tb = static_cast<T>(b);
    KILN_GRID_STRIDE(i, n) out[i] = mul_round(ts, x[i]) + tb;
  } else {
    KILN_GRID_STRIDE(i, n) out[i] = static_cast<T>(mul_round(s, static_cast<double>(x[i])) + b);
  }
}

}  // namespace

void launch_fill(void* out, std::int64_t n, int width, std::uint64_t bits, cudaStream_t s) {
  switch (width) {
    case 1: return fill_words<std::uint8_t>(out, n, bits, s);
    case 2: return fill_words<std::uint16_t>(out, n, bits, s);
    case 4: return fill_words<std::uint32_t>(out, n, bits, s);
    default: return fill_words<std::uint64_t>(out, n, bits, s);
  }
}

void launch_strided_copy(const void* src, void* dst, int width, const CopyWalk& walk,
                         cudaStream_t s) {
  switch (width) {
    case 1: return copy_words<std::uint8_t>(src, dst, walk, s);
    case 2: return copy_words<std::uint16_t>(src, dst, walk, s);
    case 4: return copy_words<std::uint32_t>(src, dst, walk, s);
    default: return copy_words<std::uint64_t>(src, dst, walk, s);
  }
}

bool launch_cast(DataType from, DataType to, const void* in, void* out, std::int64_t n,
                 cudaStream_t s) {
  const auto is16 = [](DataType t) { return t == DataType::BFloat16 || t == DataType::Float16; };
  if (from == DataType::Float32 && is16(to)) {
    f32_to_16bit<<<blocks_for(n), kThreads, 0, s>>>(static_cast<const float*>(in),
                                                     static_cast<std::uint16_t*>(out), n,
                                                     to == DataType::BFloat16);
    return true;
  }
  if (is16(from) && to == DataType::Float32) {
    f16bit_to_f32<<<blocks_for(n), kThreads, 0, s>>>(static_cast<const std::uint16_t*>(in),
                                                     static_cast<float*>(out), n,
                                                     from == DataType::BFloat16);
    return true;
  }
  bool to_ok = false;
  const bool from_ok = with_type(from, [&](auto f) {
    to_ok = with_type(to, [&](auto t) {
      using From = decltype(f);
      using To = decltype(t);
      cast<To, From><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const From*>(in),
                                                         static_cast<To*>(out), n);
    });
  });
  return from_ok && to_ok;
}

template <typename T>
void launch_clip(const T* x, T* out, std::int64_t n, T lo, T hi, cudaStream_t s) {
  clip<<<blocks_for(n), kThreads, 0, s>>>(x, out, n, lo, hi);
}

template <typename T>
void launch_clip_grad(const T* x, const T* dout, T* dx, std::int64_t n, T lo, T hi,
                      cudaStream_t s) {
  clip_grad<<<blocks_for(n), kThreads, 0, s>>>(x, dout, dx, n, lo, hi);
}

void launch_clip_half(DataType dt, const void* x, void* out, std::int64_t n, float lo, float hi, cudaStream_t s) {
  if (dt == DataType::BFloat16)
    clip_half<<<blocks_for(n), kThreads, 0, s>>>(static_cast<const __nv_bfloat16*>(x),
                                                 static_cast<__nv_bfloat16*>(out), n, lo, hi);
  else
    clip_half<<<blocks_for(n), kThreads, 0, s>>>(static_cast<const __half*>(x), static_cast<__half*>(out), n, lo,
                                                 hi);
}

void launch_clip_grad_half(DataType dt, const void* x, const void* dout, void* dx, std::int64_t n, float lo,
                           float hi, cudaStream_t s) {
  if (dt == DataType::BFloat16)
    clip_grad_half<<<blocks_for(n), kThreads, 0, s>>>(static_cast<const __nv_bfloat16*>(x),
                                                      static_cast<const __nv_bfloat16*>(dout),
                                                      static_cast<__nv_bfloat16*>(dx), n, lo, hi);
  else
    clip_grad_half<<<blocks_for(n), kThreads, 0, s>>>(static_cast<const __half*>(x),
                                                      static_cast<const __half*>(dout), static_cast<__half*>(dx),
                                                      n, lo, hi);
}

template <typename T>
void launch_scale(const T* x, T* out, std::int64_t n, double scale_, double bias, cudaStream_t s) {
  scale<<<blocks_for(n), kThreads, 0, s>>>(x, out, n, scale_, bias);
}

#define KILN_CLIP(T) template void launch_clip<T>(const T*, T*, std::int64_t, T, T, cudaStream_t);
KILN_CLIP(float)
KILN_CLIP(double)
KILN_CLIP(std::int8_t)
KILN_CLIP(std::int16_t)
KILN_CLIP(std::int32_t)
KILN_CLIP(std::int64_t)
KILN_CLIP(std::uint8_t)
KILN_CLIP(std::uint16_t)
KILN_CLIP(std::uint32_t)
KILN_CLIP(std::uint64_t)
#define KILN_CLIP_GRAD(T)                                                              \
  template void launch_clip_grad<T>(const T*, const T*, T*, std::int64_t, T, T, cudaStream_t);
KILN_CLIP_GRAD(float)
KILN_CLIP_GRAD(double)
#define KILN_SCALE(T) \
  template void launch_scale<T>(const T*, T*, std::int64_t, double, double, cudaStream_t);
KILN_SCALE(float)
KILN_SCALE(double)
KILN_SCALE(std::int32_t)
KILN_SCALE(std::int64_t)

}  // namespace kiln::cuda

// The 16-bit floats in CPU kernels (private to kernels/cpu): a bf16 or f16
// tensor widened to f32 for the f32 arithmetic, and an f32 result rounded
// once to nearest even into the 16-bit output (PyTorch's CPU half kernels
// compute the same way).
#pragma once

#include <bit>
#include <cstdint>

#include "kiln/kernel/kernel_context.h"
#include "kiln/runtime/tensor.h"
#include "kiln/support/type_id.h"
#include "kiln/support/half.h"

namespace kiln::cpu {

// n bf16 values to f32 and n f32 values rounded to bf16 (bfloat16_to_float's
// and float_to_bfloat16's bits), vectorized, on the kernel's threads.
void bf16_to_f32(const std::uint16_t* in, float* out, std::int64_t n);
void f32_to_bf16(const float* in, std::uint16_t* out, std::int64_t n);
// The same on the calling thread only (inside a kernel's own parallel loop).
void bf16_to_f32_serial(const std::uint16_t* in, float* out, std::int64_t n);
void f32_to_bf16_serial(const float* in, std::uint16_t* out, std::int64_t n);

// The elements a 16-bit kernel widens at a time into its thread's f32 scratch.
inline constexpr std::int64_t kHalfChunk = 2048;

// One value of 16-bit dtype D as a float (exact), and a float rounded once
// to D: half_to_float's / bfloat16_to_float's and float_to_half's /
// float_to_bfloat16's bits, bf16's rounding as one select so that a loop
// over it vectorizes (float_to_bfloat16's early return for NaN kept such
// loops scalar).
template <DataType D>
float half_value(std::uint16_t bits) {
  static_assert(D == DataType::Float16 || D == DataType::BFloat16);
  return D == DataType::BFloat16 ? bfloat16_to_float(bits) : half_to_float(bits);
}
template <DataType D>
std::uint16_t rounded_half(float v) {
  static_assert(D == DataType::Float16 || D == DataType::BFloat16);
  if constexpr (D == DataType::Float16) {
    return float_to_half(v);
  } else {
    const std::uint32_t u = std::bit_cast<std::uint32_t>(v);
    const std::uint32_t nearest = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, quiet_nan = (u >> 16) | 0x40u;
    return static_cast<std::uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : nearest);
  }
}

// n values of 16-bit dtype D to f32, and n f32 values rounded to D, on the
// calling thread.
template <DataType D>
void widen_half_row(const std::uint16_t* in, float* out, std::int64_t n) {
  static_assert(D == DataType::Float16 || D == DataType::BFloat16);
  if constexpr (D == DataType::BFloat16) {
    bf16_to_f32_serial(in, out, n);
  } else {
    for (std::int64_t i = 0; i < n; ++i) out[i] = half_to_float(in[i]);
  }
}
template <DataType D>
void round_half_row(const float* in, std::uint16_t* out, std::int64_t n) {
  static_assert(D == DataType::Float16 || D == DataType::BFloat16);
  if constexpr (D == DataType::BFloat16) {
    f32_to_bf16_serial(in, out, n);
  } else {
    for (std::int64_t i = 0; i < n; ++i) out[i] = float_to_half(in[i]);
  }
}

template <DataType D>
Tensor widen_half(const Tensor& t) {
  static_assert(D == DataType::Float16 || D == DataType::BFloat16);
  Tensor f = Tensor::empty(t.dims(), DataType::Float32);
  const auto* p = static_cast<const std::uint16_t*>(t.raw_data());
  float* q = f.data<float>();
  if constexpr (D == DataType::BFloat16) {
    bf16_to_f32(p, q, t.numel());
  } else {
    for (std::int64_t i = 0, n = t.numel(); i < n; ++i) q[i] = half_to_float(p[i]);
  }
  return f;
}

// out (D, the dims of `f`) = `f` rounded.
template <DataType D>
void round_half(const Tensor& f, Tensor& out) {
  static_assert(D == DataType::Float16 || D == DataType::BFloat16);
  auto* po = static_cast<std::uint16_t*>(out.raw_data());
  const float* pf = f.data<float>();
  if constexpr (D == DataType::BFloat16) {
    f32_to_bf16(pf, po, f.numel());
  } else {
    for (std::int64_t i = 0, n = f.numel(); i < n; ++i) po[i] = float_to_half(pf[i]);
  }
}

// ctx's op (`op`) through its f32 CPU kernel: 16-bit inputs widened,
// 16-bit outputs rounded once (kiln/kernel/half_via_f32.h). What a 16-bit
// kernel of its own does where it cannot compute natively.
void run_cpu_half_via_f32(KernelContext& ctx, TypeId op);

}  // namespace kiln::cpu

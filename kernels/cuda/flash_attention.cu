// The host side of the shared-memory attention kernels
// (flash_attention_tiles.cuh, f32's, and bf16 / f16's under
// KILN_CUDA_FLASH=wmma or with a mask) and the dispatch between
// them and the register tiles (flash_attention_mma.cu): the shape checks,
// the launches.
#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <type_traits>

#include "flash_attention_tiles.cuh"

namespace kiln::cuda {
namespace {

using namespace flash;

// ---- host side ----

// Whether bf16 / f16 run flash_attention_mma.cu's register-tile kernels:
// yes unless the op has a mask (which only the shared-memory kernels apply:
// the register tiles have no registers to spare for it) or
// KILN_CUDA_FLASH=wmma asks for the shared-memory ones (read per call, so a
// test or benchmark can run both in one process).
bool register_tiles(DataType dt, const FlashAttentionShape& s) {
  if (dt == DataType::Float32 || s.mask.data) return false;
  const char* kernels = std::getenv("KILN_CUDA_FLASH");
  return kernels == nullptr || std::string_view(kernels) != "wmma";
}

// out[o, j, c] = Σ_r x[o, j, r, c] over r < group (n = outer · hk · inner
// outputs): E's elements summed in f32, or doubles in f64.
template <typename E>
__global__ void sum_head_groups(const E* x, E* out, std::int64_t n, std::int64_t group, std::int64_t inner) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(blockDim.x) * gridDim.x) {
    const E* src = x + i / inner * group * inner + i % inner;
    if constexpr (std::is_same_v<E, double>) {
      double acc = 0;
      for (std::int64_t r = 0; r < group; ++r) acc += src[r * inner];
      out[i] = acc;
    } else {
      float acc = 0.f;
      for (std::int64_t r = 0; r < group; ++r) acc += widen(src[r * inner]);
      out[i] = narrow<E>(acc);
    }
  }
}

}  // namespace

void launch_sum_head_groups(DataType dt, const void* x, void* out, std::int64_t outer, std::int64_t hk,
                            std::int64_t group, std::int64_t inner, cudaStream_t st) {
  const std::int64_t n = outer * hk * inner;
  if (n == 0) return;
  constexpr int kThreads = 256;
  const unsigned blocks = static_cast<unsigned>(std::min<std::int64_t>(tiles(n, kThreads), 65535LL * 16));
  const auto run = [&]<typename E>() {
    sum_head_groups<E><<<blocks, kThreads, 0, st>>>(static_cast<const E*>(x), static_cast<E*>(out), n, group, inner);
  };
  if (dt == DataType::BFloat16) run.template operator()<__nv_bfloat16>();
  else if (dt == DataType::Float16) run.template operator()<__half>();
  else if (dt == DataType::Float64) run.template operator()<double>();
  else run.template operator()<float>();
}

// The atomic kv kernel has no dropout form: with dropout dQ comes from the q kernel.
bool flash_attention_sums_dq(DataType dt, const FlashAttentionShape& s, const DropoutRef& dropout) {
  return register_tiles(dt, s) && !dropout.key;
}

const char* flash_attention_refusal(DataType dt, const FlashAttentionShape& s) {
  if (dt != DataType::Float32 && dt != DataType::BFloat16 && dt != DataType::Float16)
    return "dtypes other than f32, bf16 and f16";
  const int dh = tile_dim(s);
  if (dh == 0) return "head dims (D or Dv) above 128";
  std::size_t smem = 0;
  int rows = 0;
  with_types(dt, dh, [&]<typename E, int DH>() {
    smem = std::max({ForwardLayout<E, DH>::bytes, BackwardLayout<E, DH, true>::bytes,
                     BackwardLayout<E, DH, false>::bytes});
    rows = std::min(ForwardLayout<E, DH>::kRows, BackwardLayout<E, DH, true>::kRows);
  });
  if (dt != DataType::Float32) smem = std::max(smem, mma_shared_bytes(dh));
  if (s.bh > INT_MAX || tiles(std::max(s.lq, s.lk), rows) > 65535 ||
      tiles(s.bh * s.lq, kFlashWarps) > INT_MAX)
    return "more than 2^31 heads or 65535 tiles of rows";
  int device = 0, optin = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
          cudaSuccess ||
      static_cast<std::size_t>(optin) < smem)
    return "tiles larger than this device's shared memory per block";
  return nullptr;
}

void launch_flash_attention_forward(DataType dt, const FlashAttentionShape& s, const DropoutRef& dropout,
                                    const void* q, const void* k, const void* v, void* out, void* lse,
                                    cudaStream_t st) {
  if (register_tiles(dt, s)) return launch_mma_forward(dt, s, dropout, q, k, v, out, lse, st);
  with_types(dt, tile_dim(s), [&]<typename E, int DH>() {
    using L = ForwardLayout<E, DH>;
    using G = Global<E>;
    allow_shared_memory<flash_forward<E, DH>>(L::bytes);
    const dim3 grid(static_cast<unsigned>(s.bh), static_cast<unsigned>(tiles(s.lq, L::kRows)));
    flash_forward<E, DH><<<grid, kFlashThreads, L::bytes, st>>>(
        s, dropout, static_cast<const G*>(q), static_cast<const G*>(k), static_cast<const G*>(v),
        static_cast<G*>(out), static_cast<float*>(lse));
  });
}

void launch_flash_attention_backward(DataType dt, const FlashAttentionShape& s, const DropoutRef& dropout,
                                     const void* q, const void* k, const void* v, const void* out,
                                     const void* lse, const void* dout, void* dq, void* dk,
                                     void* dv, float* delta, float* dq_sum, cudaStream_t st) {
  with_types(dt, tile_dim(s), [&]<typename E, int DH>() {
    using G = Global<E>;
    const auto *gq = static_cast<const G*>(q), *gk = static_cast<const G*>(k),
               *gv = static_cast<const G*>(v), *gdo = static_cast<const G*>(dout);
    const auto* gl = static_cast<const float*>(lse);
    flash_delta<E><<<static_cast<unsigned>(tiles(s.bh * s.lq, kFlashWarps)), kFlashThreads, 0, st>>>(
        s, static_cast<const G*>(out), gdo, delta);
    if (register_tiles(dt, s)) {
      float* sum = dropout.key ? nullptr : dq_sum;  // the atomic kv kernel has no dropout form
      launch_mma_backward(dt, s, dropout, q, k, v, lse, dout, dq, dk, dv, delta, sum, st);
      if (sum) launch_cast(DataType::Float32, dt, sum, dq, s.bh * s.lq * s.d, st);
      return;
    }
    using KV = BackwardLayout<E, DH, true>;
    allow_shared_memory<flash_backward_kv<E, DH>>(KV::bytes);
    const dim3 kv_grid(static_cast<unsigned>(s.bh), static_cast<unsigned>(tiles(s.lk, KV::kRows)));
    flash_backward_kv<E, DH><<<kv_grid, kFlashThreads, KV::bytes, st>>>(
        s, dropout, gq, gk, gv, gl, gdo, delta, static_cast<G*>(dk), static_cast<G*>(dv));
    using Q = BackwardLayout<E, DH, false>;
    allow_shared_memory<flash_backward_q<E, DH>>(Q::bytes);
    const dim3 q_grid(static_cast<unsigned>(s.bh), static_cast<unsigned>(tiles(s.lq, Q::kRows)));
    flash_backward_q<E, DH><<<q_grid, kFlashThreads, Q::bytes, st>>>(s, dropout, gq, gk, gv, gl, gdo, delta,
                                                                     static_cast<G*>(dq));
  });
}

}  // namespace kiln::cuda

// CUDA kernels of the merged optimizer updates (kiln.merged_sgd_ …,
// kiln/dialect/merged_optimizer_ops.h): many parameters per launch. Each
// launch's kernel argument is a table of parameters (their pointers and
// sizes) and of work items, one per block: a chunk of kChunk elements of
// one parameter. The host fills tables in the parameters' order and
// launches one whenever it is full, so a merged op of any size takes as
// many launches as its tables, plus one for adam's beta powers.
//
// Each element gets the single kernel's math (train.cu, the same
// kiln/kernel/optimizer_math.h calls on the same per-parameter scalars),
// so a merged update gives the unmerged updates' bits.
#include <cstdint>

#include "gradient_in.cuh"
#include "grid_stride.cuh"
#include "kiln/kernel/optimizer_math.h"
#include "launch.h"

namespace kiln::cuda {
namespace {

constexpr int kChunkThreads = 512;
constexpr std::int64_t kChunk = 65536;  // elements of one work item
constexpr int kItems = 320;             // work items (blocks) per launch

// One launch's parameters: up to kTensors of them, each with L pointers
// (the gradient's as T*, read through its GradientType), its element count
// and its gradient's type, and the launch's work items (the parameter's
// slot and its chunk). 2 KiB of pointers, so that the whole stays under
// the 4 KiB of kernel arguments every CUDA device takes.
template <typename T, int L>
struct TensorTable {
  static constexpr int kTensors = 2048 / (L * sizeof(T*) + sizeof(std::int64_t) + sizeof(GradientType));
  T* ptr[L][kTensors];
  std::int64_t n[kTensors];
  GradientType grad_type[kTensors];
  std::int32_t chunk[kItems];
  std::uint8_t slot[kItems];
  int tensors = 0, items = 0;
};
static_assert(TensorTable<double, 6>::kTensors <= 256 && TensorTable<float, 2>::kTensors <= 256);
static_assert(sizeof(TensorTable<double, 2>) <= 4096 && sizeof(TensorTable<double, 6>) <= 4096);

// The elements [begin, end) of this block's work item, of the parameter in `slot`.
struct ChunkRange {
  int slot;
  std::int64_t begin, end;
};

template <typename T, int L>
__device__ __forceinline__ ChunkRange block_chunk(const TensorTable<T, L>& t) {
  const int k = t.slot[blockIdx.x];
  const std::int64_t begin = static_cast<std::int64_t>(t.chunk[blockIdx.x]) * kChunk;
  return {k, begin, begin + kChunk < t.n[k] ? begin + kChunk : t.n[k]};
}

#define KILN_CHUNK_STRIDE(i, range) \
  for (std::int64_t i = (range).begin + threadIdx.x; i < (range).end; i += blockDim.x)

__device__ inline bool skipped(const bool* skip) { return skip && *skip; }

template <typename T>
__global__ void __launch_bounds__(kChunkThreads)
    merged_sgd(const TensorTable<T, 2> t, const T* lr, const bool* skip) {
  if (skipped(skip)) return;
  const T rate = *lr;
  const ChunkRange r = block_chunk(t);
  T* p = t.ptr[0][r.slot];
  const T* g = t.ptr[1][r.slot];
  const GradientType gt = t.grad_type[r.slot];
  KILN_CHUNK_STRIDE(i, r) p[i] = sgd_step(p[i], gradient_at<T>(g, gt, i), rate);
}

template <typename T>
__global__ void __launch_bounds__(kChunkThreads)
    merged_momentum(const TensorTable<T, 3> t, const T* lr, const bool* skip, T mu, bool nesterov) {
  if (skipped(skip)) return;
  const T rate = *lr;
  const ChunkRange r = block_chunk(t);
  T* p = t.ptr[0][r.slot];
  T* v = t.ptr[1][r.slot];
  const T* g = t.ptr[2][r.slot];
  const GradientType gt = t.grad_type[r.slot];
  KILN_CHUNK_STRIDE(i, r) momentum_step(p[i], v[i], gradient_at<T>(g, gt, i), rate, mu, nesterov);
}

// Pointers: param, moment1, moment2, grad, beta1_pow, beta2_pow (the last
// two read, one element each).
template <typename T>
__global__ void __launch_bounds__(kChunkThreads)
    merged_adam(const TensorTable<T, 6> t, const T* lr, const bool* skip, T beta1, T beta2, T eps,
                T coeff, bool decay) {
  if (skipped(skip)) return;
  const T rate = *lr;
  const ChunkRange r = block_chunk(t);
  const AdamStep<T> step = adam_step_of(rate, *t.ptr[4][r.slot], *t.ptr[5][r.slot], beta1, beta2, eps);
  const T keep = T(1) - mul_rn(rate, coeff);  // adamw_: param -= lr · coeff · param
  T* p = t.ptr[0][r.slot];
  T* m1 = t.ptr[1][r.slot];
  T* m2 = t.ptr[2][r.slot];
  const T* g = t.ptr[3][r.slot];
  const GradientType gt = t.grad_type[r.slot];
  KILN_CHUNK_STRIDE(i, r) {
    T pi = p[i];
    if (decay) pi = mul_rn(pi, keep);
    adam_element(pi, m1[i], m2[i], gradient_at<T>(g, gt, i), step);
    p[i] = pi;
  }
}

// After merged_adam: each parameter's beta powers times beta, a thread per
// parameter (its results may be its operands' buffers).
template <typename T>
struct BetaPowTable {
  static constexpr int kTensors = 3072 / (4 * sizeof(T*));
  const T* in[2][kTensors];
  T* out[2][kTensors];
  int count = 0;
};

template <typename T>
__global__ void merged_advance_beta_pows(const BetaPowTable<T> t, T beta1, T beta2, const bool* skip) {
  if (skipped(skip)) return;
  const int k = static_cast<int>(threadIdx.x);
  if (k >= t.count) return;
  const T a = *t.in[0][k], b = *t.in[1][k];
  *t.out[0][k] = mul_rn(a, beta1);
  *t.out[1][k] = mul_rn(b, beta2);
}

// Calls launch(table) on tables that together hold every chunk of the
// `count` parameters, in order; set(table, slot, u) stores parameter u's
// pointers in the slot. A parameter of more chunks than a table has room
// for continues in the next table, in a slot of its own.
template <typename Table, typename T, typename Set, typename Launch>
void for_each_table(const ParameterUpdate<T>* u, int count, Set&& set, Launch&& launch) {
  Table t{};
  const auto flush = [&] {
    launch(t);
    t.tensors = t.items = 0;
  };
  for (int k = 0; k < count; ++k) {
    const std::int64_t chunks = (u[k].n + kChunk - 1) / kChunk;
    for (std::int64_t c = 0; c < chunks;) {
      if (t.tensors == Table::kTensors || t.items == kItems) flush();
      const int slot = t.tensors++;
      set(t, slot, u[k]);
      t.n[slot] = u[k].n;
      t.grad_type[slot] = u[k].g.type;
      for (; c < chunks && t.items < kItems; ++c, ++t.items) {
        t.slot[t.items] = static_cast<std::uint8_t>(slot);
        t.chunk[t.items] = static_cast<std::int32_t>(c);
      }
    }
  }
  if (t.items) flush();
}

}  // namespace

template <typename T>
void launch_merged_sgd(const ParameterUpdate<T>* u, int count, const T* lr, const bool* skip,
                       cudaStream_t s) {
  for_each_table<TensorTable<T, 2>>(
      u, count,
      [](TensorTable<T, 2>& t, int slot, const ParameterUpdate<T>& p) {
        t.ptr[0][slot] = p.p;
        t.ptr[1][slot] = static_cast<T*>(const_cast<void*>(p.g.data));
      },
      [&](const TensorTable<T, 2>& t) { merged_sgd<<<t.items, kChunkThreads, 0, s>>>(t, lr, skip); });
}

template <typename T>
void launch_merged_momentum(const ParameterUpdate<T>* u, int count, const T* lr, const bool* skip,
                            T mu, bool nesterov, cudaStream_t s) {
  for_each_table<TensorTable<T, 3>>(
      u, count,
      [](TensorTable<T, 3>& t, int slot, const ParameterUpdate<T>& p) {
        t.ptr[0][slot] = p.p;
        t.ptr[1][slot] = p.state[0];
        t.ptr[2][slot] = static_cast<T*>(const_cast<void*>(p.g.data));
      },
      [&](const TensorTable<T, 3>& t) {
        merged_momentum<<<t.items, kChunkThreads, 0, s>>>(t, lr, skip, mu, nesterov);
      });
}

template <typename T>
void launch_merged_adam(const ParameterUpdate<T>* u, int count, const T* lr, const bool* skip,
                        T beta1, T beta2, T eps, T coeff, bool decay, cudaStream_t s) {
  for_each_table<TensorTable<T, 6>>(
      u, count,
      [](TensorTable<T, 6>& t, int slot, const ParameterUpdate<T>& p) {
        t.ptr[0][slot] = p.p;
        t.ptr[1][slot] = p.state[0];
        t.ptr[2][slot] = p.state[1];
        t.ptr[3][slot] = static_cast<T*>(const_cast<void*>(p.g.data));
        t.ptr[4][slot] = const_cast<T*>(p.beta_pow[0]);
        t.ptr[5][slot] = const_cast<T*>(p.beta_pow[1]);
      },
      [&](const TensorTable<T, 6>& t) {
        merged_adam<<<t.items, kChunkThreads, 0, s>>>(t, lr, skip, beta1, beta2, eps, coeff, decay);
      });
  // Every parameter's powers, empty ones' too (as launch_adam advances them).
  BetaPowTable<T> t{};
  for (int k = 0; k < count; ++k) {
    for (int j = 0; j < 2; ++j) {
      t.in[j][t.count] = u[k].beta_pow[j];
      t.out[j][t.count] = u[k].beta_pow_out[j];
    }
    if (++t.count == BetaPowTable<T>::kTensors || k + 1 == count) {
      merged_advance_beta_pows<<<1, BetaPowTable<T>::kTensors, 0, s>>>(t, beta1, beta2, skip);
      t.count = 0;
    }
  }
}

#define KILN_MERGED(T)                                                                          \
  template void launch_merged_sgd<T>(const ParameterUpdate<T>*, int, const T*, const bool*,     \
                                     cudaStream_t);                                             \
  template void launch_merged_momentum<T>(const ParameterUpdate<T>*, int, const T*, const bool*, \
                                          T, bool, cudaStream_t);                               \
  template void launch_merged_adam<T>(const ParameterUpdate<T>*, int, const T*, const bool*, T, \
                                      T, T, T, bool, cudaStream_t);
KILN_MERGED(float)
KILN_MERGED(double)

}  // namespace kiln::cuda

// A CPU emulation of the CUDA execution model, enough to run kiln's
// register-tile kernels (kernels/cuda/*.cuh written against warp_mma.cuh's
// instructions) and the f32 shared-memory attention tiles in a test on a
// machine without a GPU:
//   - each thread of a block is an OS thread; blocks run one at a time, so
//     one static buffer (the includer's `smem`, filled with NaN bits before
//     each block) is shared memory;
//   - __syncthreads is a barrier over the block, __syncwarp over the warp
//     (every lane must reach it); a warp's collectives
//     (__shfl_xor_sync, mma, ldmatrix) exchange their operands through the
//     warp's arrays between two barriers over its 32 lanes;
//   - mma and ldmatrix give each lane what the PTX ISA's fragment layouts
//     give it (mma.m16n8k16 with .bf16 / .f16 operands and f32
//     accumulators; ldmatrix .m8n8 .x4, plain and .trans), with f32
//     products and sums;
//   - atomicAdd on f32 is std::atomic_ref's fetch_add;
//   - cp.async copies land either at the wait_group that covers their group
//     (CopyTiming::AtWait, the latest the hardware may land them: a read
//     that no wait and barrier order after its copy sees the NaN fill) or
//     as they are issued (CopyTiming::AtIssue, the earliest: a copy into a
//     buffer that other threads may still read, with no barrier between,
//     corrupts what they read).
// Misaligned ldmatrix rows or cp.async addresses, and copies still pending
// when a thread ends, are recorded as faults (faults()).
//
// Include this before the kernel header, in a file of its own (it defines
// threadIdx, blockIdx, gridDim, __syncthreads and __shfl_xor_sync as
// macros).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <barrier>
#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace kiln_test::warp_emulation {

inline thread_local uint3 thread_idx{}, block_idx{};
inline dim3 grid_dim;

enum class CopyTiming { AtWait, AtIssue };
inline CopyTiming copy_timing = CopyTiming::AtWait;

struct Warp {
  std::barrier<> sync{32};
  float floats[32] = {};
  std::uint32_t words[32][6] = {};
  const void* rows[32] = {};
};

struct Block {
  explicit Block(int threads) : sync(threads), warps(static_cast<std::size_t>(threads / 32)) {}
  std::barrier<> sync;
  std::deque<Warp> warps;
};
inline Block* current_block = nullptr;

inline std::mutex fault_mutex;
inline std::vector<std::string> fault_log;
inline void fault(const std::string& what) {
  const std::lock_guard<std::mutex> lock(fault_mutex);
  fault_log.push_back(what);
}
// What went wrong since the last call (and forgets it).
inline std::vector<std::string> faults() {
  const std::lock_guard<std::mutex> lock(fault_mutex);
  return std::exchange(fault_log, {});
}

inline int lane() { return static_cast<int>(thread_idx.x % 32); }
inline Warp& warp() { return current_block->warps[thread_idx.x / 32]; }
inline void sync_threads() { current_block->sync.arrive_and_wait(); }
inline void sync_warp() { warp().sync.arrive_and_wait(); }

inline float shfl_xor(float x, int offset) {
  Warp& w = warp();
  w.floats[lane()] = x;
  w.sync.arrive_and_wait();
  const float y = w.floats[lane() ^ offset];
  w.sync.arrive_and_wait();
  return y;
}

template <typename E>
float widen_bits(std::uint16_t bits) {
  if constexpr (std::is_same_v<E, __half>) {
    return __half2float(__ushort_as_half(bits));
  } else {
    const std::uint32_t word = static_cast<std::uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &word, 4);
    return f;
  }
}
inline std::uint16_t half_word(std::uint32_t w, int high) {
  return static_cast<std::uint16_t>(high ? w >> 16 : w & 0xFFFFu);
}

// d += a · b, each lane's fragments as mma.m16n8k16.row.col lays them out.
template <typename E>
void mma(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
  Warp& w = warp();
  const int l = lane();
  for (int i = 0; i < 4; ++i) w.words[l][i] = a[i];
  w.words[l][4] = b0;
  w.words[l][5] = b1;
  w.sync.arrive_and_wait();
  // A (row r, column c): lane (r % 8)·4 + (c % 8) / 2, register
  // (r >= 8) + 2·(c >= 8), half c % 2. B (k, n): lane n·4 + (k % 8) / 2,
  // register 4 + (k >= 8), half k % 2.
  const auto a_at = [&](int r, int c) {
    return widen_bits<E>(half_word(w.words[(r % 8) * 4 + (c % 8) / 2][(r >= 8) + 2 * (c >= 8)], c % 2));
  };
  const auto b_at = [&](int k, int n) {
    return widen_bits<E>(half_word(w.words[n * 4 + (k % 8) / 2][4 + (k >= 8)], k % 2));
  };
  const int g = l / 4, t = l % 4;
  float out[4];
  for (int i = 0; i < 4; ++i) {
    const int row = g + 8 * (i / 2), col = 2 * t + i % 2;
    float sum = 0;
    for (int k = 0; k < 16; ++k) sum += a_at(row, k) * b_at(k, col);
    out[i] = d[i] + sum;
  }
  w.sync.arrive_and_wait();
  for (int i = 0; i < 4; ++i) d[i] = out[i];
}

// Element (row r, column c) of ldmatrix's matrix m: its row's address came
// from lane m·8 + r.
inline std::uint32_t row_elem(const Warp& w, int m, int r, int c) {
  std::uint16_t v;
  std::memcpy(&v, static_cast<const unsigned char*>(w.rows[m * 8 + r]) + 2 * c, 2);
  return v;
}

// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: matrix m's row r at
// lane m·8 + r's address; lane l gets (g, 2t) low and (g, 2t + 1) high of
// each, or with .trans (2t, g) low and (2t + 1, g) high.
template <bool trans>
void load_matrix_x4(std::uint32_t (&regs)[4], const void* row) {
  Warp& w = warp();
  const int l = lane();
  if (reinterpret_cast<std::uintptr_t>(row) % 16 != 0) fault("ldmatrix row not 16-byte aligned");
  w.rows[l] = row;
  w.sync.arrive_and_wait();
  const int g = l / 4, t = l % 4;
  for (int m = 0; m < 4; ++m)
    regs[m] = trans ? row_elem(w, m, 2 * t, g) | row_elem(w, m, 2 * t + 1, g) << 16
                    : row_elem(w, m, g, 2 * t) | row_elem(w, m, g, 2 * t + 1) << 16;
  w.sync.arrive_and_wait();
}

struct Copy {
  void* dst;
  const void* src;
  int bytes;
  bool valid;
  void land() const {
    if (valid) std::memcpy(dst, src, static_cast<std::size_t>(bytes));
    else std::memset(dst, 0, static_cast<std::size_t>(bytes));
  }
};
inline thread_local std::vector<Copy> open_copies;
inline thread_local std::deque<std::vector<Copy>> copy_groups;

inline void start_copy(void* dst, const void* src, int bytes, bool valid) {
  if (reinterpret_cast<std::uintptr_t>(dst) % bytes != 0 ||
      (valid && reinterpret_cast<std::uintptr_t>(src) % bytes != 0))
    fault("cp.async of " + std::to_string(bytes) + " bytes misaligned");
  const Copy copy{dst, src, bytes, valid};
  if (copy_timing == CopyTiming::AtIssue) copy.land();
  else open_copies.push_back(copy);
}
inline void commit_copies() { copy_groups.push_back(std::exchange(open_copies, {})); }
inline void wait_copies(int pending) {
  while (static_cast<int>(copy_groups.size()) > pending) {
    for (const Copy& c : copy_groups.front()) c.land();
    copy_groups.pop_front();
  }
}

// Runs kernel() on every thread of every block of `grid`, `threads` (a
// multiple of 32) to a block; shared memory `smem` of `smem_bytes` is
// filled with NaN bits before each block.
template <typename F>
void launch(dim3 grid, int threads, unsigned char* smem, std::size_t smem_bytes, F&& kernel) {
  grid_dim = grid;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        std::memset(smem, 0xFF, smem_bytes);
        Block block(threads);
        current_block = &block;
        std::vector<std::thread> team;
        for (int i = 0; i < threads; ++i)
          team.emplace_back([&, i] {
            thread_idx = {static_cast<unsigned>(i), 0, 0};
            block_idx = {x, y, z};
            kernel();
            if (!open_copies.empty() || !copy_groups.empty()) fault("cp.async still pending at exit");
            open_copies.clear();
            copy_groups.clear();
          });
        for (std::thread& t : team) t.join();
        current_block = nullptr;
      }
}

}  // namespace kiln_test::warp_emulation

// warp_mma.cuh's functions, emulated, where the kernels look them up.
namespace kiln::cuda {
template <typename E>
void mma(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
  kiln_test::warp_emulation::mma<E>(d, a, b0, b1);
}
inline void load_matrix_x4(std::uint32_t (&r)[4], const void* row) {
  kiln_test::warp_emulation::load_matrix_x4<false>(r, row);
}
inline void load_matrix_x4_trans(std::uint32_t (&r)[4], const void* row) {
  kiln_test::warp_emulation::load_matrix_x4<true>(r, row);
}
inline void copy_async16(void* dst, const void* src, bool valid) {
  kiln_test::warp_emulation::start_copy(dst, src, 16, valid);
}
inline void copy_async4(void* dst, const void* src, bool valid) {
  kiln_test::warp_emulation::start_copy(dst, src, 4, valid);
}
inline void commit_copies() { kiln_test::warp_emulation::commit_copies(); }
template <int pending>
void wait_copies() {
  kiln_test::warp_emulation::wait_copies(pending);
}
}  // namespace kiln::cuda

// CUDA's atomicAdd on f32, where the kernels look it up.
inline float atomicAdd(float* address, float value) {
  return std::atomic_ref<float>(*address).fetch_add(value);
}

#define threadIdx ::kiln_test::warp_emulation::thread_idx
#define blockIdx ::kiln_test::warp_emulation::block_idx
#define gridDim ::kiln_test::warp_emulation::grid_dim
#define __syncthreads() ::kiln_test::warp_emulation::sync_threads()
#define __syncwarp() ::kiln_test::warp_emulation::sync_warp()
#define __shfl_xor_sync(mask, x, offset) ::kiln_test::warp_emulation::shfl_xor(x, offset)
#define __launch_bounds__(...)

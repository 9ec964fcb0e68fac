// The register-tile attention kernels (kernels/cuda/flash_attention_mma.cuh)
// run on the CPU under warp_emulation.h, against attention computed in f64
// from the same 16-bit inputs: the kernels' indexing, fragment layouts,
// masks, online softmax and copy pipeline checked on any machine (the
// [cuda] tests check them on a device too).
//
// Tolerance per element: |got - want| <= tol·|want| + tol·max(1, max|want|),
// tol 2e-2 for bf16 and 5e-3 for f16 (P and dS are rounded to the operand
// dtype for their products, results rounded once; as
// cuda_flash_attention_test.cc). The gradients are bounded by their largest
// element across dq, dk and dv (dq and dk are sums of terms that cancel).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernel/flash_emulation_util.h"
#include "flash_attention_mma.cuh"
#include "kiln/kernel/attention_dropout.h"

namespace {

using kiln::cuda::FlashAttentionShape;
namespace flash = kiln::cuda::flash;
namespace emu = kiln_test::warp_emulation;
using kiln_test::flash_emulation::at;
using kiln_test::flash_emulation::at_kv;

template <typename E>
std::uint16_t to_bits(float x) {
  if constexpr (std::is_same_v<E, __half>) return __half_as_ushort(__float2half_rn(x));
  else return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}
template <typename E>
double from_bits(std::uint16_t b) {
  return emu::widen_bits<E>(b);
}

// One attention call's tensors in either layout, 16-bit bits, its dropout
// (as the kernels get it and as the reference draws it) and the
// reference's f64 results.
struct Problem {
  FlashAttentionShape s;
  std::vector<std::uint64_t> key;
  kiln::cuda::DropoutRef dropout;
  kiln::AttentionDropout drop;
  std::vector<std::uint16_t> q, k, v, dout;
  std::vector<double> out, dq, dk, dv;
  std::vector<float> lse, delta;
};

template <typename E>
std::vector<std::uint16_t> random_bits(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-2.f, 2.f);
  std::vector<std::uint16_t> out(n);
  for (auto& b : out) b = to_bits<E>(dist(gen));
  return out;
}

// The keys head i's rows see before a causal mask: its batch's key_lengths
// entry (int32 or int64; clamped to [0, Lk]) or Lk.
std::int64_t head_key_count(const FlashAttentionShape& s, std::int64_t i) {
  if (!s.keys.lengths) return s.lk;
  const std::int64_t b = i / s.h;
  const std::int64_t n = s.keys.wide ? static_cast<const std::int64_t*>(s.keys.lengths)[b]
                                     : static_cast<const std::int32_t*>(s.keys.lengths)[b];
  return std::clamp<std::int64_t>(n, 0, s.lk);
}

// Forward and gradient in f64 (top-left causal alignment; a row without
// keys: out 0, lse -inf); Δ from out rounded to E, as the device computes
// it from the stored out. dk and dv per query head (shaped like q's heads),
// as the kv kernel writes them under grouped-query attention. Under
// dropout, probability (r, j) of head i weighs V and dP by the keep mask
// times the scale at dropout row i · Lq + r.
template <typename E>
void reference(Problem& p) {
  const FlashAttentionShape& s = p.s;
  const auto Q = [&](auto i, auto r, auto c) { return from_bits<E>(p.q[at(s, i, r, c, s.lq, s.d)]); };
  const auto K = [&](auto i, auto r, auto c) { return from_bits<E>(p.k[at_kv(s, i, r, c, s.lk, s.d)]); };
  const auto V = [&](auto i, auto r, auto c) { return from_bits<E>(p.v[at_kv(s, i, r, c, s.lk, s.dv)]); };
  const auto dO = [&](auto i, auto r, auto c) { return from_bits<E>(p.dout[at(s, i, r, c, s.lq, s.dv)]); };
  p.out.assign(p.dout.size(), 0);
  p.dq.assign(p.q.size(), 0);
  p.dk.assign(static_cast<std::size_t>(s.bh * s.lk * s.d), 0);  // each query head's share
  p.dv.assign(static_cast<std::size_t>(s.bh * s.lk * s.dv), 0);
  p.lse.assign(static_cast<std::size_t>(s.bh * s.lq), 0);
  p.delta.assign(p.lse.size(), 0);
  for (std::int64_t i = 0; i < s.bh; ++i)
    for (std::int64_t r = 0; r < s.lq; ++r) {
      const std::int64_t keys = head_key_count(s, i), seen = s.causal ? std::min(r + 1, keys) : keys;
      std::vector<double> prob(static_cast<std::size_t>(seen)), z(prob.size(), 1.0);
      for (std::int64_t j = 0; j < seen && p.drop.active(); ++j)
        z[j] = p.drop.keep(i * s.lq + r, j) ? p.drop.scale : 0.0;
      double mx = -INFINITY;
      for (std::int64_t j = 0; j < seen; ++j) {
        double dot = 0;
        for (std::int64_t c = 0; c < s.d; ++c) dot += Q(i, r, c) * K(i, j, c);
        prob[j] = s.scale * dot;
        mx = std::max(mx, prob[j]);
      }
      double sum = 0;
      for (double& x : prob) sum += (x = std::exp(x - mx));
      for (double& x : prob) x /= sum;
      p.lse[i * s.lq + r] = seen ? static_cast<float>(mx + std::log(sum)) : -INFINITY;
      double delta = 0;
      for (std::int64_t c = 0; c < s.dv; ++c) {
        double o = 0;
        for (std::int64_t j = 0; j < seen; ++j) o += prob[j] * z[j] * V(i, j, c);
        p.out[at(s, i, r, c, s.lq, s.dv)] = o;
        delta += from_bits<E>(to_bits<E>(static_cast<float>(o))) * dO(i, r, c);
      }
      p.delta[i * s.lq + r] = static_cast<float>(delta);
      for (std::int64_t j = 0; j < seen; ++j) {
        double dp = 0;
        for (std::int64_t c = 0; c < s.dv; ++c) dp += dO(i, r, c) * V(i, j, c);
        const double ds = s.scale * prob[j] * (z[j] * dp - delta);
        for (std::int64_t c = 0; c < s.d; ++c) {
          p.dq[at(s, i, r, c, s.lq, s.d)] += ds * K(i, j, c);
          p.dk[at(s, i, j, c, s.lk, s.d)] += ds * Q(i, r, c);
        }
        for (std::int64_t c = 0; c < s.dv; ++c) p.dv[at(s, i, j, c, s.lk, s.dv)] += prob[j] * z[j] * dO(i, r, c);
      }
    }
}

template <typename E>
std::vector<double> widened(const std::vector<std::uint16_t>& bits) {
  std::vector<double> out(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) out[i] = from_bits<E>(bits[i]);
  return out;
}

double peak_of(const std::vector<double>& x, double floor = 1) {
  for (double v : x) floor = std::max(floor, std::abs(v));
  return floor;
}

void check_near(const std::string& what, const std::vector<double>& got, const std::vector<double>& want,
                double tol, double peak) {
  REQUIRE(got.size() == want.size());
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(got[i] == want[i] || std::abs(got[i] - want[i]) <= tol * std::abs(want[i]) + tol * peak)) {
      if (bad++ == 0) first = i;
    }
  INFO(what << ": " << bad << " of " << got.size() << " elements differ; the first, #" << first
            << ": got " << (bad ? got[first] : 0) << ", want " << (bad ? want[first] : 0));
  CHECK(bad == 0);
}

// Which loads the kernels are told to use: 16-byte vectors where the head
// dims allow them (as the launcher decides), or element by element always.
enum class Loads { AsLauncher, Scalar };
// How dQ is summed: by the q kernel, or by the kv kernel's atomic adds
// into f32 (AttentionGradSum::Atomic), rounded once after.
enum class DqSum { QKernel, Atomic };
// What the keys and values past a head's key_lengths count hold: random
// values, or NaN (which must reach no result).
enum class Padding { Random, NaN };

// The copy timing for one scope, restored when it ends (also by a failed
// REQUIRE).
struct CopyTimingScope {
  explicit CopyTimingScope(emu::CopyTiming t) : saved(emu::copy_timing) { emu::copy_timing = t; }
  ~CopyTimingScope() { emu::copy_timing = saved; }
  emu::CopyTiming saved;
};

// The three kernels' launches on p under the emulation, dropout's form or not.
template <typename E, int DH, bool kDropout>
void launch_kernels(const Problem& p, bool vec, DqSum dq_sum, std::vector<std::uint16_t>& out,
                    std::vector<float>& lse, std::vector<std::uint16_t>& dq, std::vector<std::uint16_t>& dk,
                    std::vector<std::uint16_t>& dv) {
  const FlashAttentionShape& s = p.s;
  const auto tiles = [](std::int64_t n) { return static_cast<unsigned>((n + 63) / 64); };
  const dim3 q_grid(static_cast<unsigned>(s.bh), tiles(s.lq)), kv_grid(static_cast<unsigned>(s.bh), tiles(s.lk));
  emu::launch(q_grid, flash::kMmaThreads, flash::smem, flash::kForwardBytes<E, DH>, [&] {
    flash::mma_forward<E, DH, kDropout>(s, p.dropout, vec, p.q.data(), p.k.data(), p.v.data(), out.data(),
                                        lse.data());
  });
  if (dq_sum == DqSum::Atomic) {
    std::vector<float> sum(dq.size(), 0.f);
    emu::launch(kv_grid, flash::kMmaThreads, flash::smem, flash::kKvAtomicBytes<E, DH>, [&] {
      flash::mma_backward_kv<E, DH, true>(s, p.dropout, vec, p.q.data(), p.k.data(), p.v.data(), p.lse.data(),
                                          p.dout.data(), p.delta.data(), dk.data(), dv.data(), sum.data());
    });
    for (std::size_t i = 0; i < dq.size(); ++i) dq[i] = to_bits<E>(sum[i]);
    return;
  }
  emu::launch(kv_grid, flash::kMmaThreads, flash::smem, flash::kKvBytes<E, DH>, [&] {
    flash::mma_backward_kv<E, DH, false, kDropout>(s, p.dropout, vec, p.q.data(), p.k.data(), p.v.data(),
                                                   p.lse.data(), p.dout.data(), p.delta.data(), dk.data(),
                                                   dv.data(), nullptr);
  });
  emu::launch(q_grid, flash::kMmaThreads, flash::smem, flash::kQBytes<E, DH>, [&] {
    flash::mma_backward_q<E, DH, kDropout>(s, p.dropout, vec, p.q.data(), p.k.data(), p.v.data(), p.lse.data(),
                                           p.dout.data(), p.delta.data(), dq.data());
  });
}

// The three kernels on one problem under the emulation, against the
// reference; dropout > 0: attention dropout with that probability under a
// fixed key (never with DqSum::Atomic: the atomic kv kernel has no dropout
// form).
template <typename E, int DH>
void check_kernels(const FlashAttentionShape& s, double tol, Loads loads = Loads::AsLauncher,
                   DqSum dq_sum = DqSum::QKernel, Padding padding = Padding::Random, double dropout = 0) {
  INFO((std::is_same_v<E, __half> ? "f16" : "bf16")
       << (s.heads_inner ? " BLHD" : " BHLD") << " BH " << s.bh << " Lq " << s.lq << " Lk " << s.lk
       << " Hk " << s.hk << " D " << s.d << " Dv " << s.dv << " causal " << s.causal
       << (s.keys.lengths ? " key_lengths" : "")
       << (loads == Loads::Scalar ? " scalar loads" : "") << (dq_sum == DqSum::Atomic ? " atomic dQ" : "")
       << (padding == Padding::NaN ? " NaN padding" : "") << " dropout " << dropout);
  REQUIRE((dropout == 0 || dq_sum == DqSum::QKernel));
  Problem p;
  p.s = s;
  if (dropout > 0) {
    p.key = {0x5eed5eedu + static_cast<std::uint64_t>(dropout * 1000)};
    const kiln::AttentionDropout rule = kiln::attention_dropout(dropout, 0, s.lk);
    p.dropout = {.key = p.key.data(), .threshold = rule.threshold, .row_words = rule.row_words, .scale = rule.scale};
    p.drop = kiln::attention_dropout(dropout, p.key[0], s.lk);
  }
  p.q = random_bits<E>(static_cast<std::size_t>(s.bh * s.lq * s.d), 1);
  const std::int64_t kv_heads = s.bh / s.h * s.hk;
  p.k = random_bits<E>(static_cast<std::size_t>(kv_heads * s.lk * s.d), 2);
  p.v = random_bits<E>(static_cast<std::size_t>(kv_heads * s.lk * s.dv), 3);
  p.dout = random_bits<E>(static_cast<std::size_t>(s.bh * s.lq * s.dv), 4);
  if (padding == Padding::NaN)
    for (std::int64_t i = 0; i < s.bh; ++i)
      for (std::int64_t j = head_key_count(s, i); j < s.lk; ++j) {
        for (std::int64_t c = 0; c < s.d; ++c) p.k[at_kv(s, i, j, c, s.lk, s.d)] = to_bits<E>(NAN);
        for (std::int64_t c = 0; c < s.dv; ++c) p.v[at_kv(s, i, j, c, s.lk, s.dv)] = to_bits<E>(NAN);
      }
  reference<E>(p);
  // std::vector's data is 16-byte aligned
  const bool vec = loads == Loads::AsLauncher && s.d % 8 == 0 && s.dv % 8 == 0;
  std::vector<std::uint16_t> out(p.dout.size()), dq(p.q.size()), dk(p.dk.size()), dv(p.dv.size());
  std::vector<float> lse(p.lse.size());
  if (dropout > 0) launch_kernels<E, DH, true>(p, vec, dq_sum, out, lse, dq, dk, dv);
  else launch_kernels<E, DH, false>(p, vec, dq_sum, out, lse, dq, dk, dv);
  const std::vector<std::string> faults = emu::faults();
  INFO((faults.empty() ? std::string("no faults") : faults.front()));
  CHECK(faults.empty());
  check_near("out", widened<E>(out), p.out, tol, peak_of(p.out));
  check_near("lse", std::vector<double>(lse.begin(), lse.end()),
             std::vector<double>(p.lse.begin(), p.lse.end()), tol, 1);
  const double grad_peak = peak_of(p.dv, peak_of(p.dk, peak_of(p.dq)));
  check_near("dq", widened<E>(dq), p.dq, tol, grad_peak);
  check_near("dk", widened<E>(dk), p.dk, tol, grad_peak);
  check_near("dv", widened<E>(dv), p.dv, tol, grad_peak);
}

// hk: k and v's heads (0: h).
FlashAttentionShape shape(std::int64_t b, std::int64_t h, std::int64_t lq, std::int64_t lk, std::int64_t d,
                          std::int64_t dv, bool heads_inner, bool causal, std::int64_t hk = 0) {
  return {.bh = b * h, .h = h, .lq = lq, .lk = lk, .d = d, .dv = dv, .hk = hk ? hk : h, .heads_inner = heads_inner,
          .causal = causal, .scale = static_cast<float>(1 / std::sqrt(static_cast<double>(d ? d : 1))), .keys = {},
          .mask = {}};
}

}  // namespace

TEST_CASE("emulated register-tile attention matches f64 attention at head dim 64, causal or not",
          "[kernel][attention][emulated]") {
  for (bool causal : {false, true}) {
    check_kernels<__nv_bfloat16, 64>(shape(1, 2, 130, 130, 64, 64, false, causal), 2e-2);
    check_kernels<__half, 64>(shape(1, 2, 70, 150, 64, 64, true, causal), 5e-3);
  }
}

TEST_CASE("emulated register-tile attention is right with copies landing as they are issued",
          "[kernel][attention][emulated]") {
  const CopyTimingScope at_issue(emu::CopyTiming::AtIssue);
  for (bool causal : {false, true})
    check_kernels<__nv_bfloat16, 64>(shape(1, 2, 200, 200, 64, 64, false, causal), 2e-2);
}

TEST_CASE("emulated register-tile attention at head dim 128 is right whenever its copies land",
          "[kernel][attention][emulated]") {
  for (emu::CopyTiming timing : {emu::CopyTiming::AtWait, emu::CopyTiming::AtIssue}) {
    const CopyTimingScope scope(timing);
    INFO("copies land " << (timing == emu::CopyTiming::AtWait ? "at the wait" : "as issued"));
    check_kernels<__half, 128>(shape(1, 1, 200, 130, 128, 128, false, true), 5e-3);
    check_kernels<__nv_bfloat16, 128>(shape(1, 1, 130, 200, 128, 128, true, false), 2e-2);
  }
}

TEST_CASE("emulated register-tile attention loading element by element matches f64 attention",
          "[kernel][attention][emulated]") {
  for (bool causal : {false, true}) {
    check_kernels<__nv_bfloat16, 64>(shape(1, 2, 130, 100, 64, 64, false, causal), 2e-2, Loads::Scalar);
    check_kernels<__half, 128>(shape(1, 1, 70, 90, 128, 128, true, causal), 5e-3, Loads::Scalar);
  }
}

TEST_CASE("emulated register-tile attention handles Lq != Lk, D != Dv and unaligned head dims",
          "[kernel][attention][emulated]") {
  for (bool causal : {false, true}) {
    check_kernels<__nv_bfloat16, 32>(shape(2, 1, 17, 70, 24, 32, false, causal), 2e-2);
    check_kernels<__half, 128>(shape(1, 1, 80, 33, 100, 72, true, causal), 5e-3);
    check_kernels<__half, 32>(shape(1, 2, 7, 19, 5, 3, false, causal), 5e-3);
  }
}

TEST_CASE("emulated register-tile attention with one query or one key matches f64 attention",
          "[kernel][attention][emulated]") {
  for (bool causal : {false, true}) {
    check_kernels<__nv_bfloat16, 64>(shape(1, 3, 1, 64, 64, 64, true, causal), 2e-2);
    check_kernels<__nv_bfloat16, 64>(shape(1, 3, 64, 1, 64, 64, false, causal), 2e-2);
  }
}

TEST_CASE("emulated register-tile attention summing dQ by atomic adds matches f64 attention",
          "[kernel][attention][emulated]") {
  for (bool causal : {false, true}) {
    check_kernels<__nv_bfloat16, 64>(shape(1, 2, 200, 130, 64, 64, false, causal), 2e-2, Loads::AsLauncher,
                                     DqSum::Atomic);
    check_kernels<__half, 128>(shape(1, 1, 130, 200, 128, 128, true, causal), 5e-3, Loads::AsLauncher,
                               DqSum::Atomic);
    check_kernels<__half, 32>(shape(2, 1, 17, 70, 24, 32, false, causal), 5e-3, Loads::AsLauncher,
                              DqSum::Atomic);
  }
}

TEST_CASE("emulated register-tile attention sees only each batch's key_lengths keys",
          "[kernel][attention][emulated]") {
  // Batches: keys cut inside a tile, at a tile's end, none, more than Lk (clamped).
  const std::vector<std::int32_t> counts32 = {70, 64, 0, 500};
  const std::vector<std::int64_t> counts64 = {1, 129};
  for (bool causal : {false, true}) {
    FlashAttentionShape s = shape(4, 1, 100, 130, 64, 64, false, causal);
    s.keys = {.lengths = counts32.data(), .wide = false};
    check_kernels<__nv_bfloat16, 64>(s, 2e-2);
    check_kernels<__nv_bfloat16, 64>(s, 2e-2, Loads::AsLauncher, DqSum::Atomic);
    FlashAttentionShape t = shape(2, 1, 90, 140, 128, 128, true, causal);
    t.keys = {.lengths = counts64.data(), .wide = true};
    check_kernels<__half, 128>(t, 5e-3);
    check_kernels<__half, 128>(t, 5e-3, Loads::AsLauncher, DqSum::Atomic);  // 32-row query tiles
  }
}

TEST_CASE("emulated register-tile attention never reads a NaN past a batch's key_lengths into a result",
          "[kernel][attention][emulated]") {
  const std::vector<std::int32_t> counts = {70, 64, 0, 1};
  for (bool causal : {false, true}) {
    FlashAttentionShape s = shape(4, 1, 40, 130, 64, 64, true, causal);
    s.keys = {.lengths = counts.data(), .wide = false};
    for (DqSum sum : {DqSum::QKernel, DqSum::Atomic})
      check_kernels<__nv_bfloat16, 64>(s, 2e-2, Loads::AsLauncher, sum, Padding::NaN);
    check_kernels<__half, 64>(s, 5e-3, Loads::Scalar, DqSum::QKernel, Padding::NaN);
  }
}

TEST_CASE("emulated register-tile attention reads each query head's k / v head under grouped-query attention",
          "[kernel][attention][emulated][gqa]") {
  const std::vector<std::int32_t> counts = {70, 130};
  for (bool causal : {false, true}) {
    check_kernels<__nv_bfloat16, 64>(shape(2, 4, 130, 100, 64, 64, true, causal, 2), 2e-2);
    check_kernels<__half, 64>(shape(1, 3, 70, 130, 64, 64, false, causal, 1), 5e-3);  // multi-query
    FlashAttentionShape s = shape(2, 4, 100, 130, 128, 128, true, causal, 1);
    s.keys = {.lengths = counts.data(), .wide = false};
    check_kernels<__half, 128>(s, 5e-3, Loads::AsLauncher, DqSum::Atomic, Padding::NaN);
  }
}

TEST_CASE("emulated register-tile attention drops out the probabilities the dropout rule drops",
          "[kernel][attention][emulated][dropout]") {
  const std::vector<std::int32_t> counts = {70, 130};
  for (bool causal : {false, true}) {
    check_kernels<__nv_bfloat16, 64>(shape(1, 2, 130, 130, 64, 64, false, causal), 2e-2, Loads::AsLauncher,
                                     DqSum::QKernel, Padding::Random, 0.3);
    check_kernels<__half, 128>(shape(2, 1, 90, 75, 128, 128, true, causal), 5e-3, Loads::AsLauncher,
                               DqSum::QKernel, Padding::Random, 0.2);
    check_kernels<__half, 32>(shape(1, 2, 17, 37, 24, 32, false, causal), 5e-3, Loads::Scalar, DqSum::QKernel,
                              Padding::Random, 0.6);
    FlashAttentionShape s = shape(2, 4, 100, 130, 64, 64, true, causal, 2);  // GQA, key lengths, NaN padding
    s.keys = {.lengths = counts.data(), .wide = false};
    check_kernels<__nv_bfloat16, 64>(s, 2e-2, Loads::AsLauncher, DqSum::QKernel, Padding::NaN, 0.5);
  }
}

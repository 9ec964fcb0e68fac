// The shared-memory attention kernels (kernels/cuda/flash_attention_tiles.cuh)
// in f32 run on the CPU under warp_emulation.h, against attention computed in
// f64 from the same inputs: their tiles, online softmax, causal, key_lengths
// and mask handling (bool and float masks broadcast over batches, heads,
// rows or keys, rows the mask leaves without keys) and attention dropout
// (the reference keeps what kiln/kernel/attention_dropout.h's rule keeps)
// checked on any machine;
// the [cuda] tests check them on a device, bf16 and f16 too (whose
// tensor-core products the emulation does not run).
//
// Tolerance per element: |got - want| <= 2e-4·|want| + 2e-4·max(1, max|want|)
// (f32 sums in another order; the gradients bounded by their largest
// element across dq, dk and dv, as dq and dk are sums of terms that cancel).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernel/flash_emulation_util.h"
#include "flash_attention_tiles.cuh"
#include "kiln/kernel/attention_dropout.h"

namespace {

using kiln::cuda::FlashAttentionShape;
namespace flash = kiln::cuda::flash;
namespace emu = kiln_test::warp_emulation;
using kiln_test::flash_emulation::at;
using kiln_test::flash_emulation::at_kv;

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-2.f, 2.f);
  std::vector<float> out(n);
  for (float& x : out) x = dist(gen);
  return out;
}

// The dropout row of score (i, j) of head bh: bh · Lq + i.
std::int64_t dropout_row(const FlashAttentionShape& s, std::int64_t bh, std::int64_t i) { return bh * s.lq + i; }

// One call's f32 tensors, the mask's elements (bool as bytes or f32), the
// dropout key and rule (with the row the reference draws a score's bits
// for) and the f64 results.
struct Problem {
  FlashAttentionShape s;
  std::vector<float> q, k, v, dout, fmask;
  std::vector<std::uint8_t> bmask;
  std::vector<std::int32_t> lengths;
  std::vector<std::uint64_t> key;
  kiln::cuda::DropoutRef dropout;  // as the kernels get it
  kiln::AttentionDropout drop;     // as the reference draws it
  std::int64_t (*row_of)(const FlashAttentionShape&, std::int64_t, std::int64_t) = dropout_row;
  std::vector<double> out, lse, dq, dk, dv;
};

// What the reference multiplies probability (i, j) of head bh by: 1
// without dropout, else the scale where the rule keeps it and 0 where not.
double keep_weight(const Problem& p, std::int64_t bh, std::int64_t i, std::int64_t j) {
  if (!p.drop.active()) return 1;
  return p.drop.keep(p.row_of(p.s, bh, i), j) ? p.drop.scale : 0;
}

// What the mask adds to score (i, j) of head bh: 0 without one, -inf where
// a bool one is false.
double bias(const Problem& p, std::int64_t bh, std::int64_t i, std::int64_t j) {
  const kiln::cuda::ScoreMaskRef& m = p.s.mask;
  if (!m.data) return 0;
  const auto e = static_cast<std::size_t>(bh / p.s.h * m.sb + bh % p.s.h * m.sh + i * m.si + j * m.sj);
  return m.boolean ? (p.bmask[e] ? 0.0 : -INFINITY) : p.fmask[e];
}

// Head bh's row r in f64: its probabilities over keys [0, seen) (empty
// when none is seen or the mask leaves it none) and lse.
std::vector<double> probabilities(const Problem& p, std::int64_t bh, std::int64_t r, double& lse) {
  const FlashAttentionShape& s = p.s;
  const std::int64_t keys =
      p.lengths.empty() ? s.lk : std::clamp<std::int64_t>(p.lengths[static_cast<std::size_t>(bh / s.h)], 0, s.lk);
  const std::int64_t seen = s.causal ? std::min(r + 1, keys) : keys;
  std::vector<double> x(static_cast<std::size_t>(seen));
  double mx = -INFINITY, sum = 0;
  for (std::int64_t j = 0; j < seen; ++j) {
    double dot = 0;
    for (std::int64_t c = 0; c < s.d; ++c) dot += double(p.q[at(s, bh, r, c, s.lq, s.d)]) * p.k[at_kv(s, bh, j, c, s.lk, s.d)];
    x[j] = s.scale * dot + bias(p, bh, r, j);
    mx = std::max(mx, x[j]);
  }
  lse = -INFINITY;
  if (mx == -INFINITY) return {};
  for (double& e : x) sum += (e = std::exp(e - mx));
  for (double& e : x) e = e == 0 ? 0 : e / sum;  // a masked key's probability is 0, also in a NaN row
  lse = mx + std::log(sum);
  return x;
}

void reference(Problem& p) {
  const FlashAttentionShape& s = p.s;
  p.out.assign(p.dout.size(), 0);
  p.dq.assign(p.q.size(), 0);
  p.dk.assign(static_cast<std::size_t>(s.bh * s.lk * s.d), 0);  // each query head's share, as the kernel writes it
  p.dv.assign(static_cast<std::size_t>(s.bh * s.lk * s.dv), 0);
  p.lse.assign(static_cast<std::size_t>(s.bh * s.lq), 0);
  for (std::int64_t i = 0; i < s.bh; ++i)
    for (std::int64_t r = 0; r < s.lq; ++r) {
      const std::vector<double> prob = probabilities(p, i, r, p.lse[static_cast<std::size_t>(i * s.lq + r)]);
      std::vector<double> z(prob.size());
      for (std::size_t j = 0; j < prob.size(); ++j) z[j] = keep_weight(p, i, r, std::int64_t(j));
      double delta = 0;
      for (std::int64_t c = 0; c < s.dv; ++c) {
        double o = 0;
        for (std::size_t j = 0; j < prob.size(); ++j) o += prob[j] * z[j] * p.v[at_kv(s, i, std::int64_t(j), c, s.lk, s.dv)];
        p.out[at(s, i, r, c, s.lq, s.dv)] = o;
        delta += o * p.dout[at(s, i, r, c, s.lq, s.dv)];
      }
      for (std::size_t jj = 0; jj < prob.size(); ++jj) {
        const auto j = static_cast<std::int64_t>(jj);
        double dp = 0;
        for (std::int64_t c = 0; c < s.dv; ++c) dp += double(p.dout[at(s, i, r, c, s.lq, s.dv)]) * p.v[at_kv(s, i, j, c, s.lk, s.dv)];
        const double ds = s.scale * prob[jj] * (z[jj] * dp - delta);
        for (std::int64_t c = 0; c < s.d; ++c) {
          p.dq[at(s, i, r, c, s.lq, s.d)] += ds * p.k[at_kv(s, i, j, c, s.lk, s.d)];
          p.dk[at(s, i, j, c, s.lk, s.d)] += ds * p.q[at(s, i, r, c, s.lq, s.d)];
        }
        for (std::int64_t c = 0; c < s.dv; ++c)
          p.dv[at(s, i, j, c, s.lk, s.dv)] += prob[jj] * z[jj] * p.dout[at(s, i, r, c, s.lq, s.dv)];
      }
    }
}

double peak_of(const std::vector<double>& x, double floor = 1) {
  for (double v : x)
    if (std::isfinite(v)) floor = std::max(floor, std::abs(v));
  return floor;
}

// How many elements of got lie beyond the tolerance from want; the first's index in *first.
std::size_t mismatches(const std::vector<float>& got, const std::vector<double>& want, double peak,
                       std::size_t* first = nullptr) {
  constexpr double kTol = 2e-4;
  REQUIRE(got.size() == want.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i])) ||
          std::abs(got[i] - want[i]) <= kTol * std::abs(want[i]) + kTol * peak))
      if (bad++ == 0 && first) *first = i;
  return bad;
}

void check_near(const std::string& what, const std::vector<float>& got, const std::vector<double>& want,
                double peak) {
  std::size_t first = 0;
  const std::size_t bad = mismatches(got, want, peak, &first);
  INFO(what << ": " << bad << " of " << got.size() << " elements differ; the first, #" << first << ": got "
            << (bad ? got[first] : 0) << ", want " << (bad ? want[first] : 0));
  CHECK(bad == 0);
}

// What the kernels wrote.
struct Outputs {
  std::vector<float> out, lse, dq, dk, dv;
};

// The forward, Δ and the two gradient kernels (or, not `gradients`, the
// forward alone) on p under the emulation, against the reference; what
// they wrote.
template <int DH>
Outputs check_tiles(Problem& p, bool gradients = true) {
  const FlashAttentionShape& s = p.s;
  INFO((s.heads_inner ? "BLHD" : "BHLD") << " BH " << s.bh << " Hk " << s.hk << " Lq " << s.lq << " Lk " << s.lk << " D " << s.d
                                        << " Dv " << s.dv << " causal " << s.causal
                                        << (p.lengths.empty() ? "" : " key_lengths")
                                        << (!s.mask.data ? "" : s.mask.boolean ? " bool mask" : " float mask")
                                        << (p.drop.active() ? " dropout" : ""));
  reference(p);
  using Fwd = flash::ForwardLayout<float, DH>;
  using Kv = flash::BackwardLayout<float, DH, true>;
  using Q = flash::BackwardLayout<float, DH, false>;
  const auto grid = [&](std::int64_t n, int rows) {
    return dim3(static_cast<unsigned>(s.bh), static_cast<unsigned>((n + rows - 1) / rows));
  };
  std::vector<float> out(p.dout.size()), lse(p.lse.size()), delta(p.lse.size()), dq(p.q.size()), dk(p.dk.size()),
      dv(p.dv.size());
  emu::launch(grid(s.lq, Fwd::kRows), flash::kFlashThreads, flash::smem, Fwd::bytes,
              [&] { flash::flash_forward<float, DH>(s, p.dropout, p.q.data(), p.k.data(), p.v.data(), out.data(), lse.data()); });
  check_near("out", out, p.out, peak_of(p.out));
  check_near("lse", lse, p.lse, 1);
  if (!gradients) return {out, lse, {}, {}, {}};
  const auto rows = static_cast<unsigned>((s.bh * s.lq + flash::kFlashWarps - 1) / flash::kFlashWarps);
  emu::launch(dim3(rows), flash::kFlashThreads, flash::smem, 0,
              [&] { flash::flash_delta<float>(s, out.data(), p.dout.data(), delta.data()); });
  emu::launch(grid(s.lk, Kv::kRows), flash::kFlashThreads, flash::smem, Kv::bytes, [&] {
    flash::flash_backward_kv<float, DH>(s, p.dropout, p.q.data(), p.k.data(), p.v.data(), lse.data(), p.dout.data(),
                                        delta.data(), dk.data(), dv.data());
  });
  emu::launch(grid(s.lq, Q::kRows), flash::kFlashThreads, flash::smem, Q::bytes, [&] {
    flash::flash_backward_q<float, DH>(s, p.dropout, p.q.data(), p.k.data(), p.v.data(), lse.data(), p.dout.data(),
                                       delta.data(), dq.data());
  });
  const std::vector<std::string> faults = emu::faults();
  INFO((faults.empty() ? std::string("no faults") : faults.front()));
  CHECK(faults.empty());
  const double grad_peak = peak_of(p.dv, peak_of(p.dk, peak_of(p.dq)));
  check_near("dq", dq, p.dq, grad_peak);
  check_near("dk", dk, p.dk, grad_peak);
  check_near("dv", dv, p.dv, grad_peak);
  return {out, lse, dq, dk, dv};
}

// hk: k and v's heads (0: h).
Problem problem(std::int64_t b, std::int64_t h, std::int64_t lq, std::int64_t lk, std::int64_t d, std::int64_t dv,
                bool heads_inner, bool causal, std::int64_t hk = 0) {
  Problem p;
  hk = hk ? hk : h;
  p.s = {.bh = b * h, .h = h, .lq = lq, .lk = lk, .d = d, .dv = dv, .hk = hk, .heads_inner = heads_inner,
         .causal = causal, .scale = static_cast<float>(1 / std::sqrt(static_cast<double>(d))), .keys = {},
         .mask = {}};
  p.q = random_floats(static_cast<std::size_t>(b * h * lq * d), 1);
  p.k = random_floats(static_cast<std::size_t>(b * hk * lk * d), 2);
  p.v = random_floats(static_cast<std::size_t>(b * hk * lk * dv), 3);
  p.dout = random_floats(static_cast<std::size_t>(b * h * lq * dv), 4);
  return p;
}

// Elements past a mask's end, which no kernel may read: NaN for a float
// mask, false for a bool one (either would change a result).
constexpr std::size_t kGuard = 4096;

// A mask over dims {nb, nh, ni, nj} (each 1 or the scores'), its strides
// those of that row-major shape with 0 along a dim of 1: float values in
// [-2, 2] with every seventh -inf, or bool with every fifth false.
void set_mask(Problem& p, std::int64_t nb, std::int64_t nh, std::int64_t ni, std::int64_t nj, bool boolean) {
  const auto n = static_cast<std::size_t>(nb * nh * ni * nj);
  if (boolean) {
    p.bmask.assign(n + kGuard, 0);
    for (std::size_t e = 0; e < n; ++e) p.bmask[e] = e % 5 != 2;
  } else {
    p.fmask = random_floats(n, 9);
    for (std::size_t e = 3; e < n; e += 7) p.fmask[e] = -INFINITY;
    p.fmask.resize(n + kGuard, NAN);
  }
  auto& m = p.s.mask;
  m = {.data = boolean ? static_cast<const void*>(p.bmask.data()) : p.fmask.data(), .boolean = boolean,
       .sb = nb > 1 ? nh * ni * nj : 0, .sh = nh > 1 ? ni * nj : 0, .si = ni > 1 ? nj : 0, .sj = nj > 1 ? 1 : 0};
}

void set_lengths(Problem& p, std::vector<std::int32_t> lengths) {
  p.lengths = std::move(lengths);
  p.s.keys = {.lengths = p.lengths.data(), .wide = false};
}

// Dropout with probability `prob` under `key`: the kernels get the rule as
// the CUDA host passes it (attention_dropout(prob, 0, Lk), the key's
// address), the reference the rule with the key.
void set_dropout(Problem& p, double prob, std::uint64_t key) {
  p.key = {key};
  const kiln::AttentionDropout rule = kiln::attention_dropout(prob, 0, p.s.lk);
  p.dropout = {.key = p.key.data(), .threshold = rule.threshold, .row_words = rule.row_words,
               .scale = rule.scale};
  p.drop = kiln::attention_dropout(prob, key, p.s.lk);
}

// The fraction of p's scores (every row against every key) that its
// dropout keeps.
double kept_fraction(const Problem& p) {
  std::int64_t kept = 0;
  for (std::int64_t bh = 0; bh < p.s.bh; ++bh)
    for (std::int64_t i = 0; i < p.s.lq; ++i)
      for (std::int64_t j = 0; j < p.s.lk; ++j) kept += p.drop.keep(dropout_row(p.s, bh, i), j);
  return static_cast<double>(kept) / static_cast<double>(p.s.bh * p.s.lq * p.s.lk);
}

}  // namespace

TEST_CASE("the f32 shared-memory attention tiles match f64 attention under the emulation, causal or not, "
          "either layout",
          "[kernel][attention][emulation]") {
  for (bool heads_inner : {false, true})
    for (bool causal : {false, true}) {
      Problem p = problem(2, 2, 70, 75, 20, 32, heads_inner, causal);  // two tiles each way, D < Dv
      check_tiles<32>(p);
    }
}

TEST_CASE("the f32 shared-memory attention tiles apply a float or bool mask, with causal and key_lengths, under "
          "the emulation",
          "[kernel][attention][emulation][mask]") {
  {  // a float bias per head and (query, key), with -inf entries
    Problem p = problem(2, 2, 70, 75, 32, 32, true, true);
    set_mask(p, 1, 2, 70, 75, false);
    check_tiles<32>(p);
  }
  {  // a bool mask per batch and key, with key_lengths cutting inside a tile
    Problem p = problem(2, 2, 70, 75, 32, 16, false, false);
    set_mask(p, 2, 1, 1, 75, true);
    set_lengths(p, {75, 40});
    check_tiles<32>(p);
  }
  {  // a bool mask per batch and query row: every fifth row sees no key
    Problem p = problem(2, 2, 70, 75, 32, 32, false, true);
    set_mask(p, 2, 1, 70, 1, true);
    check_tiles<32>(p);
  }
  {  // one float mask for every head, head dim 64
    Problem p = problem(1, 2, 66, 70, 64, 64, true, false);
    set_mask(p, 1, 1, 66, 70, false);
    check_tiles<64>(p);
  }
  {  // causal, key_lengths and a float mask per head together, head dim 128 (32-row tiles), head 0's row 40
     // all -inf (no key left)
    Problem p = problem(2, 2, 70, 75, 128, 128, false, true);
    set_mask(p, 1, 2, 70, 75, false);
    set_lengths(p, {75, 60});
    for (std::size_t j = 0; j < 75; ++j) p.fmask[40 * 75 + j] = -INFINITY;
    check_tiles<128>(p);
    // A NaN in head 1's row 50 makes that row's out and lse NaN (not an empty row's 0), as on the CPU;
    // the other rows keep their values.
    p.fmask[(70 + 50) * 75 + 7] = NAN;
    check_tiles<128>(p, false);
    CHECK(std::isnan(p.lse[70 + 50]));
  }
}

TEST_CASE("the f32 shared-memory attention tiles read each query head's k / v head under grouped-query "
          "attention, under the emulation",
          "[kernel][attention][emulation][gqa]") {
  for (bool causal : {false, true}) {
    Problem p = problem(2, 4, 70, 75, 32, 32, true, causal, 2);
    check_tiles<32>(p);
    Problem m = problem(1, 3, 40, 70, 20, 16, false, causal, 1);  // multi-query, with a mask and key_lengths
    set_mask(m, 1, 3, 40, 70, false);
    set_lengths(m, {50});
    check_tiles<32>(m);
  }
}

TEST_CASE("the f32 shared-memory attention tiles drop out the probabilities the dropout rule drops, with causal, "
          "key_lengths, a mask and grouped-query attention, under the emulation",
          "[kernel][attention][emulation][dropout]") {
  for (bool heads_inner : {false, true}) {  // causal, key_lengths cutting inside a tile
    Problem p = problem(2, 2, 70, 75, 20, 32, heads_inner, true);
    set_lengths(p, {75, 50});
    set_dropout(p, 0.3, 0x5eed0001u);
    CHECK(std::abs(kept_fraction(p) - 0.7) < 0.02);  // a real mask, not one that keeps everything
    check_tiles<32>(p);
  }
  {  // head dim 128 (32-row tiles) with a float mask per head
    Problem p = problem(1, 2, 70, 75, 128, 128, false, false);
    set_mask(p, 1, 2, 70, 75, false);
    set_dropout(p, 0.2, 0x5eed0002u);
    check_tiles<128>(p);
  }
  for (bool causal : {false, true}) {  // two query heads per k / v head
    Problem p = problem(2, 4, 70, 75, 32, 32, true, causal, 2);
    set_dropout(p, 0.5, 0x5eed0003u);
    CHECK(std::abs(kept_fraction(p) - 0.5) < 0.02);
    check_tiles<32>(p);
  }
  {  // Lk not a multiple of 4 (a row's last random word covers fewer keys), most scores dropped
    Problem p = problem(1, 3, 9, 7, 8, 8, true, false);
    set_dropout(p, 0.85, 0x5eed0004u);
    check_tiles<32>(p);
  }
}

TEST_CASE("the f32 shared-memory attention tiles' dropout would not match a rule drawn at another row, under "
          "the emulation",
          "[kernel][attention][emulation][dropout]") {
  Problem p = problem(2, 4, 70, 75, 32, 32, true, false, 2);
  set_dropout(p, 0.3, 0x5eed0005u);
  const Outputs got = check_tiles<32>(p);
  // Rows counted in keys, in BLHD's memory order, or by k / v head: each
  // draws other bits, so the kernels' results are far from that reference.
  using RowOf = std::int64_t (*)(const FlashAttentionShape&, std::int64_t, std::int64_t);
  const RowOf wrong[] = {
      [](const FlashAttentionShape& s, std::int64_t bh, std::int64_t i) { return bh * s.lk + i; },
      [](const FlashAttentionShape& s, std::int64_t bh, std::int64_t i) {
        return (bh / s.h * s.lq + i) * s.h + bh % s.h;
      },
      [](const FlashAttentionShape& s, std::int64_t bh, std::int64_t i) { return bh / (s.h / s.hk) * s.lq + i; }};
  for (RowOf row_of : wrong) {
    p.row_of = row_of;
    reference(p);
    CHECK(mismatches(got.out, p.out, peak_of(p.out)) > got.out.size() / 2);
    CHECK(mismatches(got.dv, p.dv, peak_of(p.dv)) > got.dv.size() / 2);
  }
}

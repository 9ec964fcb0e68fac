// Which attention probabilities dropout keeps: the rule every kernel of
// kiln.scaled_dot_product_attention and its gradients shares, CPU and CUDA,
// so that the backward drops exactly what the forward dropped and the
// devices agree bit for bit on the mask.
//
// Score (row, j), row = (batch · H + head) · Lq + i, draws 16 bits: bits
// 16 · (j % 4) .. +15 of random_bits(key, row · ⌈Lk / 4⌉ + j / 4)
// (kiln/kernel/random.h), so four neighbouring keys of one row share a draw
// (a CUDA thread holding keys 2t and 2t + 1 hashes once). The score is kept
// when those bits are at least threshold = round(p · 65536) (at most
// 65535), and a kept probability is scaled by the inverse keep rate,
// 65536 / (65536 - threshold) (PyTorch's "upscale in train": 1 / (1 - p)
// when p is a multiple of 2⁻¹⁶, and unbiased always). The drop rate is p to
// within 2⁻¹⁷ (FlashAttention's 8-bit rule is within 2⁻⁹); a p below 2⁻¹⁷
// drops nothing (the rule is inactive).
#pragma once

#include <cmath>
#include <cstdint>

#include "kiln/kernel/random.h"
#include "kiln/support/host_device.h"

namespace kiln {

struct AttentionDropout {
  std::uint64_t key = 0;
  std::uint32_t threshold = 0;    // 0: every score kept (no dropout)
  std::int64_t row_words = 0;     // ⌈Lk / 4⌉: draws per row
  double scale = 1;               // 1 / the keep rate

  KILN_HOST_DEVICE bool active() const { return threshold != 0; }
  // The 64 random bits of keys 4w .. 4w + 3 of `row` (w = j / 4).
  KILN_HOST_DEVICE std::uint64_t word(std::int64_t row, std::int64_t w) const {
    return random_bits(key, static_cast<std::uint64_t>(row * row_words + w));
  }
  // Whether key j's share of `bits` (word(row, j / 4)) keeps its score.
  KILN_HOST_DEVICE bool keeps(std::uint64_t bits, std::int64_t j) const {
    return ((bits >> (16 * (j & 3))) & 0xffffu) >= threshold;
  }
  KILN_HOST_DEVICE bool keep(std::int64_t row, std::int64_t j) const { return keeps(word(row, j >> 2), j); }
};

// The rule for dropout probability p (in [0, 1)) over Lk keys under `key`;
// inactive when p rounds to no 16-bit threshold (p below 2⁻¹⁷, or 0).
inline AttentionDropout attention_dropout(double p, std::uint64_t key, std::int64_t lk) {
  const double t = std::floor(p * 65536.0 + 0.5);
  if (!(t >= 1)) return {};
  const std::uint32_t threshold = static_cast<std::uint32_t>(t > 65535.0 ? 65535.0 : t);
  return {.key = key, .threshold = threshold, .row_words = (lk + 3) / 4,
          .scale = 65536.0 / static_cast<double>(65536 - threshold)};
}

}  // namespace kiln

// The device side of KeyLengths and DropoutRef (launch.h): how many keys
// a batch's rows see and which probabilities dropout keeps, shared by the
// fused attention kernels and the cuBLAS path's row passes.
#pragma once

#include <cstdint>

#include "kiln/kernel/attention_dropout.h"
#include "launch.h"

namespace kiln::cuda {

// Batch b's key count: key_lengths[b] clamped to [0, lk], or lk without
// key_lengths.
inline __device__ std::int64_t key_count(const KeyLengths& keys, std::int64_t b, std::int64_t lk) {
  if (!keys.lengths) return lk;
  const std::int64_t n = keys.wide ? static_cast<const std::int64_t*>(keys.lengths)[b]
                                   : static_cast<const std::int32_t*>(keys.lengths)[b];
  return n < 0 ? 0 : n < lk ? n : lk;
}

// How many keys query row i sees among a batch's `keys` (top-left causal
// alignment: keys 0..i).
inline __device__ std::int64_t keys_seen(bool causal, std::int64_t keys, std::int64_t i) {
  return causal ? (i + 1 < keys ? i + 1 : keys) : keys;
}

// The dropout's rule with its key read from device memory (inactive
// without a key).
inline __device__ AttentionDropout dropout_rule(const DropoutRef& d) {
  if (!d.key) return {};
  return {.key = *d.key, .threshold = d.threshold, .row_words = d.row_words, .scale = d.scale};
}

}  // namespace kiln::cuda

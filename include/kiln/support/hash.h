// xxHash (XXH64) wrappers: content hashes of programs and weight checksums,
// and hash combining for the uniquing tables of the IrContext.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kiln {

// XXH64 of a byte range; stable across runs, processes and machines.
std::uint64_t xxh64(const void* data, std::size_t size, std::uint64_t seed = 0);
inline std::uint64_t xxh64(std::string_view s, std::uint64_t seed = 0) {
  return xxh64(s.data(), s.size(), seed);
}

inline std::size_t hash_combine(std::size_t seed, std::size_t v) {
  // 64-bit variant of boost::hash_combine's mixing.
  return seed ^ (v + 0x9e3779b97f4a7c15ULL + (seed << 12) + (seed >> 4));
}

}  // namespace kiln

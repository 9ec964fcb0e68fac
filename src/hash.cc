#include "kiln/support/hash.h"

#include <xxhash.h>

namespace kiln {

std::uint64_t xxh64(const void* data, std::size_t size, std::uint64_t seed) {
  return XXH64(data, size, seed);
}

}  // namespace kiln

// A user's program linking kiln: throws and catches a kiln::Error and checks
// that xxh64 (compiled into libkiln) gives the reference XXH64 value.
#include <cstdint>
#include <cstdio>

#include "kiln/support/error.h"
#include "kiln/support/hash.h"

int main() {
  try {
    kiln::throw_error(kiln::ErrorKind::NotFound, "op '", "host.op", "' is not registered");
  } catch (const kiln::Error& e) {
    if (e.kind() != kiln::ErrorKind::NotFound || e.message() != "op 'host.op' is not registered") {
      std::fprintf(stderr, "host_app: unexpected kiln::Error: %s\n", e.what());
      return 1;
    }
  }
  const std::uint64_t h = kiln::xxh64("abc");
  if (h != 0x44bc2cf5ad770999ULL) {
    std::fprintf(stderr, "host_app: xxh64(\"abc\") = %016llx, expected 44bc2cf5ad770999\n",
                 static_cast<unsigned long long>(h));
    return 1;
  }
  std::printf("host_app: kiln links and works\n");
  return 0;
}

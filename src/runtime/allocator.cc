// The process-wide CPU allocator (one instance across the library and users).
#include "kiln/runtime/cpu_allocator.h"

namespace kiln {

CpuAllocator& cpu_allocator() {
  // Never destroyed: buffers may be released during static destruction.
  static CpuAllocator* const allocator = new CpuAllocator();
  return *allocator;
}

}  // namespace kiln

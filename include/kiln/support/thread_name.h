// Names the calling thread (Linux: what top -H, gdb and /proc/<pid>/task/*/comm
// show; at most 15 characters kept). kiln names its own threads "kiln-…",
// so a user (or a test counting live threads) can tell them from others.
#pragma once

#include <pthread.h>

namespace kiln {

inline void name_this_thread(const char* name) noexcept {
#if defined(__linux__)
  pthread_setname_np(pthread_self(), name);
#else
  (void)name;
#endif
}

}  // namespace kiln

// Unique names (Paddle's `unique_name`, seed 001 §1.2): unique_name("linear")
// gives "linear_0", "linear_1", …; parameters are named from their layer's
// name, Paddle-style: "linear_0.w_0", "linear_0.b_0". UniqueNameGuard
// (Paddle's unique_name.guard()) starts fresh counters for its scope and
// restores the previous ones after, so programs built in tests are named
// deterministically. Counters are per thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>

namespace kiln {

// "<prefix>_<n>" with n counting per prefix from 0 in the current scope.
std::string unique_name(std::string_view prefix);

// The current scope's counters (prefix → next n), and putting them back:
// what undoes the names given while building something that is discarded.
using UniqueNameCounters = std::map<std::string, std::int64_t, std::less<>>;
UniqueNameCounters unique_name_counters();
void restore_unique_name_counters(UniqueNameCounters counters);

class UniqueNameGuard {
 public:
  UniqueNameGuard();
  ~UniqueNameGuard();
  UniqueNameGuard(const UniqueNameGuard&) = delete;
  UniqueNameGuard& operator=(const UniqueNameGuard&) = delete;
};

}  // namespace kiln

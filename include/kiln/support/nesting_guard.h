// NestingGuard: bounds how deep a loader recurses into nested input (types,
// attributes, regions), so that hostile input — a JSON program or the text
// form — is rejected with a kiln::Error instead of overflowing the stack.
#pragma once

#include <string_view>

#include "kiln/support/error.h"

namespace kiln {

// Nesting deeper than this is rejected; real programs stay far below it.
inline constexpr int kMaxInputNesting = 64;

class NestingGuard {
 public:
  // Throws kiln::Error(InvalidArgument) "<what> nesting is deeper than 64"
  // when `depth` (the caller's counter) is already at the limit.
  NestingGuard(int& depth, std::string_view what);
  ~NestingGuard() { --depth_; }
  NestingGuard(const NestingGuard&) = delete;
  NestingGuard& operator=(const NestingGuard&) = delete;

 private:
  int& depth_;
};

inline NestingGuard::NestingGuard(int& depth, std::string_view what) : depth_(depth) {
  if (depth_ >= kMaxInputNesting)
    throw_error(ErrorKind::InvalidArgument, what, " nesting is deeper than ", kMaxInputNesting);
  ++depth_;
}

}  // namespace kiln

// Dims' members that build messages or throw: out of line, so that a file
// that makes a Dims does not instantiate their messages.
#include "kiln/support/dims.h"

namespace kiln {

void Dims::throw_rank(std::size_t n) {
  throw_error(ErrorKind::InvalidArgument, "dims: rank ", n, " exceeds the maximum rank ", kMaxRank);
}

std::int64_t Dims::at(int i) const {
  if (i < 0 || i >= rank_)
    throw_error(ErrorKind::OutOfRange, "dims [", to_string(), "]: index ", i, " is out of range for rank ",
                static_cast<int>(rank_));
  return dims_[i];
}

std::string Dims::to_string() const {
  std::string s;
  for (int i = 0; i < rank_; ++i) {
    if (i) s += 'x';
    s += std::to_string(dims_[i]);
  }
  return s;
}

}  // namespace kiln

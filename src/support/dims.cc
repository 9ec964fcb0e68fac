// Dims' members that build messages or throw: out of line, so that a file
// that makes a Dims does not instantiate their messages.
#include "kiln/support/dims.h"

namespace kiln {

void Dims::assign(const std::int64_t* first, std::size_t n) {
  if (n > static_cast<std::size_t>(kMaxRank))
    throw_error(ErrorKind::InvalidArgument, "dims: rank ", n, " exceeds the maximum rank ", kMaxRank);
  for (std::size_t i = 0; i < n; ++i) dims_[i] = first[i];
  rank_ = static_cast<std::uint8_t>(n);
}

Dims::Dims(std::initializer_list<std::int64_t> dims) { assign(dims.begin(), dims.size()); }

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

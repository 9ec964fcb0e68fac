// Dims: a tensor's shape, up to kMaxRank (9, as Paddle's DDim) int64 extents
// stored inline, so copying a Tensor never allocates (seed 001 §4.2: the run
// path allocates nothing but tensor buffers). Rank 0 is a scalar (numel 1).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/support/error.h"

namespace kiln {

class Dims {
 public:
  static constexpr int kMaxRank = 9;

  Dims() = default;
  Dims(std::initializer_list<std::int64_t> dims);
  // Any contiguous range of int64 (std::vector, std::span, std::array).
  template <typename R>
    requires std::is_convertible_v<const R&, std::span<const std::int64_t>> &&
             (!std::is_same_v<std::remove_cvref_t<R>, Dims>)
  Dims(const R& dims);  // NOLINT(google-explicit-constructor)

  int rank() const noexcept { return rank_; }
  std::size_t size() const noexcept { return rank_; }
  bool empty() const noexcept { return rank_ == 0; }
  std::int64_t operator[](int i) const noexcept { return dims_[i]; }
  std::int64_t& operator[](int i) noexcept { return dims_[i]; }
  // Bounds-checked; kiln::Error (OutOfRange) naming the index and the rank.
  std::int64_t at(int i) const;

  const std::int64_t* data() const noexcept { return dims_.data(); }
  const std::int64_t* begin() const noexcept { return dims_.data(); }
  const std::int64_t* end() const noexcept { return dims_.data() + rank_; }

  // Product of the extents; 1 for rank 0. Negative extents are not checked here.
  std::int64_t numel() const noexcept;
  // Product of extents 1..rank-1: elements per index of dim 0.
  std::int64_t row_numel() const noexcept;

  std::vector<std::int64_t> to_vector() const { return {begin(), end()}; }
  // "2x3"; "" for rank 0.
  std::string to_string() const;

  friend bool operator==(const Dims& a, const Dims& b) noexcept;

 private:
  void assign(const std::int64_t* first, std::size_t n);

  std::array<std::int64_t, kMaxRank> dims_{};
  std::uint8_t rank_ = 0;
};

inline std::ostream& operator<<(std::ostream& os, const Dims& d) { return os << '[' << d.to_string() << ']'; }

inline void Dims::assign(const std::int64_t* first, std::size_t n) {
  if (n > static_cast<std::size_t>(kMaxRank))
    throw_error(ErrorKind::InvalidArgument, "dims: rank ", n, " exceeds the maximum rank ", kMaxRank);
  for (std::size_t i = 0; i < n; ++i) dims_[i] = first[i];
  rank_ = static_cast<std::uint8_t>(n);
}

inline Dims::Dims(std::initializer_list<std::int64_t> dims) { assign(dims.begin(), dims.size()); }

template <typename R>
  requires std::is_convertible_v<const R&, std::span<const std::int64_t>> &&
           (!std::is_same_v<std::remove_cvref_t<R>, Dims>)
inline Dims::Dims(const R& dims) {
  const std::span<const std::int64_t> extents = dims;
  assign(extents.data(), extents.size());
}

inline std::int64_t Dims::at(int i) const {
  if (i < 0 || i >= rank_)
    throw_error(ErrorKind::OutOfRange, "dims [", to_string(), "]: index ", i, " is out of range for rank ",
                static_cast<int>(rank_));
  return dims_[i];
}

inline std::int64_t Dims::numel() const noexcept {
  std::int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

inline std::int64_t Dims::row_numel() const noexcept {
  std::int64_t n = 1;
  for (int i = 1; i < rank_; ++i) n *= dims_[i];
  return n;
}

inline std::string Dims::to_string() const {
  std::string s;
  for (int i = 0; i < rank_; ++i) {
    if (i) s += 'x';
    s += std::to_string(dims_[i]);
  }
  return s;
}

inline bool operator==(const Dims& a, const Dims& b) noexcept {
  if (a.rank_ != b.rank_) return false;
  for (int i = 0; i < a.rank_; ++i)
    if (a.dims_[i] != b.dims_[i]) return false;
  return true;
}

}  // namespace kiln

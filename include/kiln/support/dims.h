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
    requires(!std::is_same_v<std::remove_cvref_t<R>, Dims>) &&
            std::is_convertible_v<const R&, std::span<const std::int64_t>>
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

  // Hidden friends, found for a Dims argument only: an `a == b` or `os << x`
  // of other types does not weigh converting them to a Dims (a check of
  // std::span's range constructor per call).
  friend bool operator==(const Dims& a, const Dims& b) noexcept {
    if (a.rank_ != b.rank_) return false;
    for (int i = 0; i < a.rank_; ++i)
      if (a.dims_[i] != b.dims_[i]) return false;
    return true;
  }
  friend std::ostream& operator<<(std::ostream& os, const Dims& d) {
    return os << '[' << d.to_string() << ']';
  }

 private:
  // Inline (kernels make a Dims per output they allocate); the rank check's
  // message is built out of line, in throw_rank.
  void assign(const std::int64_t* first, std::size_t n);
  [[noreturn, gnu::cold]] static void throw_rank(std::size_t n);

  std::array<std::int64_t, kMaxRank> dims_{};
  std::uint8_t rank_ = 0;
};

inline void Dims::assign(const std::int64_t* first, std::size_t n) {
  if (n > static_cast<std::size_t>(kMaxRank)) [[unlikely]]
    throw_rank(n);
  for (std::size_t i = 0; i < n; ++i) dims_[i] = first[i];
  rank_ = static_cast<std::uint8_t>(n);
}

inline Dims::Dims(std::initializer_list<std::int64_t> dims) { assign(dims.begin(), dims.size()); }

template <typename R>
  requires(!std::is_same_v<std::remove_cvref_t<R>, Dims>) &&
          std::is_convertible_v<const R&, std::span<const std::int64_t>>
inline Dims::Dims(const R& dims) {
  const std::span<const std::int64_t> extents = dims;
  assign(extents.data(), extents.size());
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

}  // namespace kiln

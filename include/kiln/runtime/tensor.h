// Tensor: a typed, shaped window on a ref-counted Buffer — dims, dtype, place
// and a byte offset into the buffer (seed 001 §3.1/§4.2: the DenseTensor a
// Variable holds; ShareBufferWith for in-place ops). Copies and views share
// the buffer; the memory goes back to its allocator when the last one drops.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/runtime/allocator.h"
#include "kiln/runtime/buffer.h"
#include "kiln/support/dims.h"
#include "kiln/support/data_type.h"
#include "kiln/support/error.h"
#include "kiln/support/host_device.h"
#include "kiln/support/place.h"

namespace kiln {

// The allocator a tensor on `place` gets by default: cpu_allocator() for cpu
// and host_stream places, the device's caching allocator for cuda:N (errors
// as Tensor::empty's).
Allocator& allocator_for(Place place);

class Tensor {
 public:
  // Uninitialized: no buffer, rank 0, DataType::Undefined.
  Tensor() = default;

  // Uninitialized contents. `allocator` defaults to the place's
  // (allocator_for). kiln::Error (InvalidArgument) for negative dims, an
  // undefined dtype, a size beyond the allocator's maximum, or a cuda place
  // without such a device; (Unimplemented) for a cuda place in a build
  // without CUDA.
  static Tensor empty(const Dims& dims, DataType dtype, Place place = Place::cpu(),
                      Allocator* allocator = nullptr);
  // Like empty(), every byte zero.
  static Tensor zeros(const Dims& dims, DataType dtype, Place place = Place::cpu(),
                      Allocator* allocator = nullptr);
  // A tensor on `place` holding `values` (row-major; a device's copied there
  // from the host and waited for). kiln::Error (InvalidArgument) when dims'
  // element count differs from values.size().
  template <typename T>
  static Tensor from_vector(const Dims& dims, const std::vector<T>& values, Place place = Place::cpu());
  // A tensor over external memory of `bytes` bytes; `deleter` (may be empty)
  // is called with `data` when the last tensor using it drops. kiln::Error
  // (InvalidArgument) when dims x dtype need more than `bytes`.
  static Tensor from_external(void* data, std::size_t bytes, const Dims& dims, DataType dtype,
                              Place place = Place::cpu(), Buffer::Deleter deleter = {});

  bool is_initialized() const noexcept { return static_cast<bool>(buffer_); }
  const Dims& dims() const noexcept { return dims_; }
  int rank() const noexcept { return dims_.rank(); }
  // Checked: kiln::Error (OutOfRange) naming the tensor.
  std::int64_t dim(int i) const;
  DataType dtype() const noexcept { return dtype_; }
  Place place() const noexcept { return place_; }
  // Byte offset of element 0 in the buffer.
  std::size_t offset() const noexcept { return offset_; }
  std::int64_t numel() const noexcept { return dims_.numel(); }
  // numel() x element size.
  std::size_t bytes() const noexcept;

  // Element 0. kiln::Error: (PreconditionNotMet) on an uninitialized tensor,
  // (InvalidArgument) when T's dtype is not dtype(), naming both. The
  // non-const forms (data<T>(), raw_data()) count a write of the buffer
  // (Buffer::writes()): write through them, and read through const ones.
  template <typename T>
  T* data();
  template <typename T>
  const T* data() const;
  // Element 0 as bytes; kiln::Error (PreconditionNotMet) when uninitialized.
  void* raw_data();
  const void* raw_data() const;

  // Same buffer and offset, new dims with the same element count; one extent
  // may be -1 (inferred). kiln::Error (InvalidArgument) otherwise.
  Tensor reshape(const Dims& dims) const;
  // Same buffer and offset, reinterpreted as dims x dtype; needs no more bytes
  // than the buffer holds past the offset. kiln::Error (InvalidArgument) otherwise.
  Tensor view(const Dims& dims, DataType dtype) const;
  Tensor view(const Dims& dims) const { return view(dims, dtype_); }
  // Rows [begin, end) along dim 0, sharing the buffer (offset moves).
  // kiln::Error: (InvalidArgument) for rank 0, (OutOfRange) for bad bounds.
  Tensor slice(std::int64_t begin, std::int64_t end) const;
  // A deep copy in a new buffer (same dims, dtype, place).
  Tensor clone() const;
  // The elements, row-major; a device tensor's are copied to the host first
  // (and waited for). kiln::Error as data<T>().
  template <typename T>
  std::vector<T> to_vector() const;

  // Makes this tensor use `other`'s buffer and offset, keeping its own dims
  // and dtype (Paddle's ShareBufferWith, for in-place ops). kiln::Error
  // (InvalidArgument) when this tensor needs more bytes than `other` provides,
  // (PreconditionNotMet) when `other` is uninitialized.
  void share_buffer_from(const Tensor& other);
  bool shares_buffer_with(const Tensor& other) const noexcept;
  // Drops the buffer and all metadata (back to uninitialized).
  void reset() noexcept;
  // Back to uninitialized, handing the buffer (with its reference) to the
  // caller. For buffer recycling (Variable::recycle).
  BufferRef release_buffer() noexcept;
  // Makes this tensor dims x dtype at `place` over `buffer` from offset 0.
  // False (the tensor unchanged) when the buffer holds fewer bytes than that.
  bool adopt_buffer(BufferRef& buffer, const Dims& dims, DataType dtype, Place place) noexcept;

  // Stream-safe freeing (seed 001 §4.2): see Buffer::record_stream.
  // kiln::Error (PreconditionNotMet) when uninitialized.
  void record_stream(Stream& stream, DeferredFreeQueue* queue = nullptr) const;

  const BufferRef& buffer() const noexcept { return buffer_; }
  // References to the buffer (tensors and views sharing it); 0 when uninitialized.
  long use_count() const noexcept { return buffer_ ? buffer_->use_count() : 0; }

  // The type alone, for naming a tensor in messages: "tensor<2x3xf32>@cpu",
  // "tensor<f32>@cpu" for rank 0, "tensor<uninitialized>".
  std::string type_string() const;
  // The type and the values, as numpy / PyTorch print them: nested brackets
  // per dim, entries right-aligned to one width, rows of a rank-2 tensor on
  // their own lines (a blank line between rank-2 blocks, and so on), lines
  // wrapped at 80 columns. A body of one line follows the type after a space,
  // a longer one starts on the next line:
  //   tensor<f32>@cpu 1.5
  //   tensor<3xi64>@cpu [ 1, -2, 30]
  //   tensor<2x2xf32>@cpu
  //   [[ 1., 0.5],
  //    [-2.,  3.]]
  // Floats (f16 and bf16 too) print with up to 6 significant digits (std's
  // %g), a '.' added to whole numbers; bool as true / false. Past 1000
  // elements only the first and last 3 entries of each dim print, with "..."
  // between. An uninitialized tensor prints as type_string(); one whose
  // memory is not on the host (cuda) prints its type and says its values are
  // not shown, without reading the memory.
  std::string to_string() const;

 private:
  void require_initialized(const char* what) const;
  template <typename T>
  void check_dtype(const char* what) const;
  // The error check_dtype throws: uninitialized, or not of dtype `want`.
  [[noreturn, gnu::cold, gnu::noinline]] void fail_dtype(const char* what, DataType want) const;
  std::size_t available_bytes() const noexcept;
  // A device tensor's values in a new host tensor (copied and waited for).
  Tensor host_copy() const;
  // `host`'s values in a new tensor on the device `place` (copied and waited for).
  static Tensor device_copy(const Tensor& host, Place place);

  BufferRef buffer_;
  Dims dims_;
  std::size_t offset_ = 0;
  DataType dtype_ = DataType::Undefined;
  Place place_ = Place::cpu();
};

// Writes t.to_string() (type and values).
inline std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.to_string(); }

// ---------------------------------------------------------------------------

inline std::size_t Tensor::bytes() const noexcept {
  return static_cast<std::size_t>(dims_.numel()) * size_of(dtype_);
}

inline std::size_t Tensor::available_bytes() const noexcept {
  return buffer_ ? buffer_->size() - offset_ : 0;
}

inline std::string Tensor::type_string() const {
  if (!buffer_) return "tensor<uninitialized>";
  std::string s = "tensor<" + dims_.to_string();
  if (dims_.rank() > 0) s += 'x';
  s += kiln::to_string(dtype_);
  s += ">@";
  s += place_.to_string();
  return s;
}

inline void Tensor::require_initialized(const char* what) const {
  if (!buffer_) throw_error(ErrorKind::PreconditionNotMet, what, " on an uninitialized tensor");
}

// Inline and two compares: kernels call data<T>() several times per run.
template <typename T>
KILN_ALWAYS_INLINE inline void Tensor::check_dtype(const char* what) const {
  constexpr DataType want = data_type_of<std::remove_cv_t<T>>;
  if (!buffer_ || dtype_ != want) [[unlikely]]
    fail_dtype(what, want);
}

template <typename T>
KILN_ALWAYS_INLINE inline T* Tensor::data() {
  check_dtype<T>("data");
  buffer_->note_write();
  return reinterpret_cast<T*>(static_cast<char*>(buffer_->data()) + offset_);
}

template <typename T>
KILN_ALWAYS_INLINE inline const T* Tensor::data() const {
  check_dtype<T>("data");
  return reinterpret_cast<const T*>(static_cast<const char*>(buffer_->data()) + offset_);
}

inline void* Tensor::raw_data() {
  require_initialized("raw_data()");
  buffer_->note_write();
  return static_cast<char*>(buffer_->data()) + offset_;
}

inline const void* Tensor::raw_data() const {
  require_initialized("raw_data()");
  return static_cast<const char*>(buffer_->data()) + offset_;
}

inline std::int64_t Tensor::dim(int i) const {
  if (i < 0 || i >= dims_.rank())
    throw_error(ErrorKind::OutOfRange, type_string(), ": dim(", i, ") is out of range for rank ",
                dims_.rank());
  return dims_[i];
}

template <typename T>
Tensor Tensor::from_vector(const Dims& dims, const std::vector<T>& values, Place place) {
  constexpr DataType dtype = data_type_of<T>;
  const bool device = place.kind == PlaceKind::Cuda;
  Tensor t = empty(dims, dtype, device ? Place::cpu() : place);
  if (static_cast<std::size_t>(t.numel()) != values.size())
    throw_error(ErrorKind::InvalidArgument, "Tensor::from_vector: dims [", dims.to_string(), "] hold ",
                t.numel(), " elements, given ", values.size(), " values");
  T* out = t.data<T>();
  if constexpr (std::is_same_v<T, bool>) {
    for (std::size_t i = 0; i < values.size(); ++i) out[i] = values[i];
  } else if (!values.empty()) {
    std::memcpy(out, values.data(), values.size() * sizeof(T));
  }
  return device ? device_copy(t, place) : t;
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  if (place_.kind == PlaceKind::Cuda) return host_copy().to_vector<T>();
  const T* in = data<T>();
  return std::vector<T>(in, in + numel());
}

// from_vector and to_vector for the element types data_type_of names are
// compiled once, in libkiln (src/runtime/tensor.cc).
extern template Tensor Tensor::from_vector<float>(const Dims&, const std::vector<float>&, Place);
extern template std::vector<float> Tensor::to_vector<float>() const;
extern template Tensor Tensor::from_vector<double>(const Dims&, const std::vector<double>&, Place);
extern template std::vector<double> Tensor::to_vector<double>() const;
extern template Tensor Tensor::from_vector<std::int8_t>(const Dims&, const std::vector<std::int8_t>&, Place);
extern template std::vector<std::int8_t> Tensor::to_vector<std::int8_t>() const;
extern template Tensor Tensor::from_vector<std::int16_t>(const Dims&, const std::vector<std::int16_t>&, Place);
extern template std::vector<std::int16_t> Tensor::to_vector<std::int16_t>() const;
extern template Tensor Tensor::from_vector<std::int32_t>(const Dims&, const std::vector<std::int32_t>&, Place);
extern template std::vector<std::int32_t> Tensor::to_vector<std::int32_t>() const;
extern template Tensor Tensor::from_vector<std::int64_t>(const Dims&, const std::vector<std::int64_t>&, Place);
extern template std::vector<std::int64_t> Tensor::to_vector<std::int64_t>() const;
extern template Tensor Tensor::from_vector<std::uint8_t>(const Dims&, const std::vector<std::uint8_t>&, Place);
extern template std::vector<std::uint8_t> Tensor::to_vector<std::uint8_t>() const;
extern template Tensor Tensor::from_vector<std::uint16_t>(const Dims&, const std::vector<std::uint16_t>&, Place);
extern template std::vector<std::uint16_t> Tensor::to_vector<std::uint16_t>() const;
extern template Tensor Tensor::from_vector<std::uint32_t>(const Dims&, const std::vector<std::uint32_t>&, Place);
extern template std::vector<std::uint32_t> Tensor::to_vector<std::uint32_t>() const;
extern template Tensor Tensor::from_vector<std::uint64_t>(const Dims&, const std::vector<std::uint64_t>&, Place);
extern template std::vector<std::uint64_t> Tensor::to_vector<std::uint64_t>() const;
extern template Tensor Tensor::from_vector<bool>(const Dims&, const std::vector<bool>&, Place);
extern template std::vector<bool> Tensor::to_vector<bool>() const;

inline BufferRef Tensor::release_buffer() noexcept {
  BufferRef b = std::move(buffer_);
  reset();
  return b;
}

inline bool Tensor::adopt_buffer(BufferRef& buffer, const Dims& dims, DataType dtype,
                                 Place place) noexcept {
  if (!buffer || dtype == DataType::Undefined) return false;
  // bytes = elem x dims, checked against the capacity without overflowing.
  const std::size_t cap = buffer->size();
  std::size_t bytes = size_of(dtype);
  for (std::int64_t d : dims) {
    if (d < 0) return false;
    if (d == 0) {
      bytes = 0;
      break;
    }
    if (bytes > cap / static_cast<std::size_t>(d)) return false;
    bytes *= static_cast<std::size_t>(d);
  }
  if (bytes > cap) return false;
  buffer_ = std::move(buffer);
  dims_ = dims;
  offset_ = 0;
  dtype_ = dtype;
  place_ = place;
  return true;
}

inline bool Tensor::shares_buffer_with(const Tensor& other) const noexcept {
  return buffer_ && buffer_ == other.buffer_;
}

inline void Tensor::reset() noexcept {
  buffer_.reset();
  dims_ = Dims{};
  offset_ = 0;
  dtype_ = DataType::Undefined;
  place_ = Place::cpu();
}

inline void Tensor::record_stream(Stream& stream, DeferredFreeQueue* queue) const {
  require_initialized("record_stream()");
  buffer_->record_stream(stream, queue);
}

}  // namespace kiln

// Tensor: allocation, views and copies.
#include "kiln/runtime/tensor.h"

#include <cstring>
#include <limits>

namespace kiln {

namespace {

Allocator* default_allocator(Place place) {
  switch (place.kind) {
    case PlaceKind::Cpu:
    case PlaceKind::HostStream: return &cpu_allocator();
    case PlaceKind::Cuda:
      throw_error(ErrorKind::Unimplemented, "Tensor: no allocator for place ", place.to_string(),
                  " (CUDA is not built)");
    case PlaceKind::Undefined: break;
  }
  throw_error(ErrorKind::InvalidArgument, "Tensor: undefined place");
}

// Element count of `dims`, checking every extent is >= 0 and the byte size fits.
std::size_t checked_bytes(const Dims& dims, DataType dtype, const char* who) {
  if (dtype == DataType::Undefined)
    throw_error(ErrorKind::InvalidArgument, who, ": dtype is undefined (dims [", dims.to_string(), "])");
  const std::size_t elem = size_of(dtype);
  std::size_t n = 1;
  bool zero = false;
  for (std::int64_t d : dims) {
    if (d < 0)
      throw_error(ErrorKind::InvalidArgument, who, ": dims [", dims.to_string(),
                  "] have a negative extent (expected >= 0, given ", d, ")");
    if (d == 0) zero = true;
  }
  if (zero) return 0;
  for (std::int64_t d : dims) {
    if (n > CpuAllocator::kMaxBytes / static_cast<std::size_t>(d))
      throw_error(ErrorKind::InvalidArgument, who, ": dims [", dims.to_string(), "] x ", to_string(dtype),
                  " exceed the maximum of ", CpuAllocator::kMaxBytes, " bytes");
    n *= static_cast<std::size_t>(d);
  }
  if (n > CpuAllocator::kMaxBytes / elem)
    throw_error(ErrorKind::InvalidArgument, who, ": dims [", dims.to_string(), "] x ", to_string(dtype),
                " exceed the maximum of ", CpuAllocator::kMaxBytes, " bytes");
  return n * elem;
}

}  // namespace

Tensor Tensor::empty(const Dims& dims, DataType dtype, Place place, Allocator* allocator) {
  const std::size_t bytes = checked_bytes(dims, dtype, "Tensor::empty");
  if (!allocator) allocator = default_allocator(place);
  Tensor t;
  t.buffer_ = BufferRef::adopt(Buffer::create(allocator->allocate(bytes), allocator));
  t.dims_ = dims;
  t.dtype_ = dtype;
  t.place_ = place;
  return t;
}

Tensor Tensor::zeros(const Dims& dims, DataType dtype, Place place, Allocator* allocator) {
  Tensor t = empty(dims, dtype, place, allocator);
  if (t.bytes()) std::memset(t.raw_data(), 0, t.bytes());
  return t;
}

Tensor Tensor::from_external(void* data, std::size_t bytes, const Dims& dims, DataType dtype, Place place,
                             Buffer::Deleter deleter) {
  const std::size_t need = checked_bytes(dims, dtype, "Tensor::from_external");
  if (need > bytes)
    throw_error(ErrorKind::InvalidArgument, "Tensor::from_external: dims [", dims.to_string(), "] x ",
                kiln::to_string(dtype), " need ", need, " bytes (expected <= the ", bytes, " bytes given)");
  if (!data && bytes)
    throw_error(ErrorKind::InvalidArgument, "Tensor::from_external: null data for ", bytes, " bytes");
  Tensor t;
  t.buffer_ = BufferRef::adopt(Buffer::wrap(data, bytes, place, std::move(deleter)));
  t.dims_ = dims;
  t.dtype_ = dtype;
  t.place_ = place;
  return t;
}

Tensor Tensor::reshape(const Dims& dims) const {
  require_initialized("reshape()");
  int infer = -1;
  std::int64_t known = 1;
  for (int i = 0; i < dims.rank(); ++i) {
    if (dims[i] == -1) {
      if (infer >= 0)
        throw_error(ErrorKind::InvalidArgument, "reshape of ", to_string(), " to [", dims.to_string(),
                    "]: more than one -1 extent");
      infer = i;
    } else if (dims[i] < 0) {
      throw_error(ErrorKind::InvalidArgument, "reshape of ", to_string(), " to [", dims.to_string(),
                  "]: negative extent ", dims[i]);
    } else {
      known *= dims[i];
    }
  }
  Dims out = dims;
  if (infer >= 0) {
    if (known == 0 || numel() % known != 0)
      throw_error(ErrorKind::InvalidArgument, "reshape of ", to_string(), " to [", dims.to_string(),
                  "]: cannot infer the -1 extent from ", numel(), " elements");
    out[infer] = numel() / known;
  } else if (known != numel()) {
    throw_error(ErrorKind::InvalidArgument, "reshape of ", to_string(), " to [", dims.to_string(),
                "]: element count differs (expected ", numel(), ", given ", known, ")");
  }
  Tensor t = *this;
  t.dims_ = out;
  return t;
}

Tensor Tensor::view(const Dims& dims, DataType dtype) const {
  require_initialized("view()");
  const std::size_t need = checked_bytes(dims, dtype, "Tensor::view");
  if (need > available_bytes())
    throw_error(ErrorKind::InvalidArgument, "view of ", to_string(), " as [", dims.to_string(), "] x ",
                kiln::to_string(dtype), ": needs ", need, " bytes (expected <= the ", available_bytes(),
                " bytes past the offset)");
  Tensor t = *this;
  t.dims_ = dims;
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::slice(std::int64_t begin, std::int64_t end) const {
  require_initialized("slice()");
  if (rank() == 0)
    throw_error(ErrorKind::InvalidArgument, "slice of ", to_string(), ": a rank-0 tensor has no dim 0");
  if (begin < 0 || end > dims_[0] || begin > end)
    throw_error(ErrorKind::OutOfRange, "slice [", begin, ", ", end, ") of ", to_string(),
                ": expected 0 <= begin <= end <= ", dims_[0]);
  Tensor t = *this;
  t.offset_ += static_cast<std::size_t>(begin * dims_.row_numel()) * size_of(dtype_);
  t.dims_[0] = end - begin;
  return t;
}

Tensor Tensor::clone() const {
  require_initialized("clone()");
  Allocator* allocator = buffer_->allocator();
  Tensor t = empty(dims_, dtype_, place_, allocator ? allocator : nullptr);
  if (bytes()) std::memcpy(t.raw_data(), raw_data(), bytes());
  return t;
}

void Tensor::share_buffer_from(const Tensor& other) {
  if (!other.buffer_)
    throw_error(ErrorKind::PreconditionNotMet, "share_buffer_from: the source tensor is uninitialized");
  if (bytes() > other.available_bytes())
    throw_error(ErrorKind::InvalidArgument, "share_buffer_from: ", to_string(), " needs ", bytes(),
                " bytes, ", other.to_string(), " provides ", other.available_bytes());
  buffer_ = other.buffer_;
  offset_ = other.offset_;
  place_ = other.place_;
}

}  // namespace kiln

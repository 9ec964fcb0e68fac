// Tensor: allocation, views and copies.
#include "kiln/runtime/tensor.h"

#include "kiln/runtime/cpu_allocator.h"
#include "kiln/runtime/cuda_context.h"
#include "kiln/support/half.h"

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace kiln {

namespace {

Allocator* default_allocator(Place place) {
  switch (place.kind) {
    case PlaceKind::Cpu:
    case PlaceKind::HostStream: return &cpu_allocator();
    // kiln::Error without a device (InvalidArgument) or without CUDA (Unimplemented).
    case PlaceKind::Cuda: return &cuda_context(place.device).allocator();
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

Allocator& allocator_for(Place place) { return *default_allocator(place); }

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
  if (!t.bytes()) return t;
  if (place.kind != PlaceKind::Cuda) {
    std::memset(t.raw_data(), 0, t.bytes());
    return t;
  }
  // Device memory: zeros from the host, copied on the device's compute
  // stream and waited for.
  const std::vector<std::byte> host(t.bytes());
  copy_between_places(t.raw_data(), place, host.data(), Place::cpu(), t.bytes());
  return t;
}

Tensor Tensor::host_copy() const { return copy_to_place(*this, Place::cpu()); }

Tensor Tensor::device_copy(const Tensor& host, Place place) { return copy_to_place(host, place); }

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
        throw_error(ErrorKind::InvalidArgument, "reshape of ", type_string(), " to [", dims.to_string(),
                    "]: more than one -1 extent");
      infer = i;
    } else if (dims[i] < 0) {
      throw_error(ErrorKind::InvalidArgument, "reshape of ", type_string(), " to [", dims.to_string(),
                  "]: negative extent ", dims[i]);
    } else {
      known *= dims[i];
    }
  }
  Dims out = dims;
  if (infer >= 0) {
    if (known == 0 || numel() % known != 0)
      throw_error(ErrorKind::InvalidArgument, "reshape of ", type_string(), " to [", dims.to_string(),
                  "]: cannot infer the -1 extent from ", numel(), " elements");
    out[infer] = numel() / known;
  } else if (known != numel()) {
    throw_error(ErrorKind::InvalidArgument, "reshape of ", type_string(), " to [", dims.to_string(),
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
    throw_error(ErrorKind::InvalidArgument, "view of ", type_string(), " as [", dims.to_string(), "] x ",
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
    throw_error(ErrorKind::InvalidArgument, "slice of ", type_string(), ": a rank-0 tensor has no dim 0");
  if (begin < 0 || end > dims_[0] || begin > end)
    throw_error(ErrorKind::OutOfRange, "slice [", begin, ", ", end, ") of ", type_string(),
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
  if (place_.kind == PlaceKind::Cuda) copy_between_places(t.raw_data(), place_, raw_data(), place_, bytes());
  else if (bytes()) std::memcpy(t.raw_data(), raw_data(), bytes());
  return t;
}

void Tensor::fail_dtype(const char* what, DataType want) const {
  require_initialized(what);
  throw_error(ErrorKind::InvalidArgument, type_string(), ": ", what, "<", kiln::to_string(want),
              "> on a tensor of dtype ", kiln::to_string(dtype_), " (expected ", kiln::to_string(dtype_),
              ", given ", kiln::to_string(want), ")");
}

void Tensor::share_buffer_from(const Tensor& other) {
  if (!other.buffer_)
    throw_error(ErrorKind::PreconditionNotMet, "share_buffer_from: the source tensor is uninitialized");
  if (bytes() > other.available_bytes())
    throw_error(ErrorKind::InvalidArgument, "share_buffer_from: ", type_string(), " needs ", bytes(),
                " bytes, ", other.type_string(), " provides ", other.available_bytes());
  buffer_ = other.buffer_;
  offset_ = other.offset_;
  place_ = other.place_;
}

// --- printing -----------------------------------------------------------------

namespace {

constexpr std::int64_t kPrintThreshold = 1000;  // numpy's threshold
constexpr std::int64_t kEdgeItems = 3;          // numpy's edgeitems
constexpr std::size_t kLineWidth = 80;

// Up to 6 significant digits (%g); a '.' marks a whole number as a float.
std::string format_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general, 6);
  std::string s(buf, end);
  if (s.find_first_of(".e") == std::string::npos) s += '.';
  return s;
}

std::string format_element(const char* base, std::int64_t i, DataType dtype) {
  auto load = [&](auto zero) {
    decltype(zero) v;
    std::memcpy(&v, base + static_cast<std::size_t>(i) * sizeof v, sizeof v);
    return v;
  };
  switch (dtype) {
    case DataType::Float16: return format_float(half_to_float(load(std::uint16_t{})));
    case DataType::BFloat16: return format_float(bfloat16_to_float(load(std::uint16_t{})));
    case DataType::Float32: return format_float(load(float{}));
    case DataType::Float64: return format_float(load(double{}));
    case DataType::Int8: return std::to_string(load(std::int8_t{}));
    case DataType::Int32: return std::to_string(load(std::int32_t{}));
    case DataType::Int64: return std::to_string(load(std::int64_t{}));
    case DataType::Bool: return load(std::uint8_t{}) ? "true" : "false";
    case DataType::UInt8: return std::to_string(load(std::uint8_t{}));
    case DataType::Int16: return std::to_string(load(std::int16_t{}));
    case DataType::UInt16: return std::to_string(load(std::uint16_t{}));
    case DataType::UInt32: return std::to_string(load(std::uint32_t{}));
    case DataType::UInt64: return std::to_string(load(std::uint64_t{}));
    case DataType::Undefined: break;
  }
  return "?";
}

// Lays out the values of a host tensor of rank >= 1. `shown[d]` lists the
// indices of dim d that print, -1 standing for "...".
class ValuePrinter {
 public:
  ValuePrinter(const char* base, const Dims& dims, DataType dtype, bool summarize)
      : base_(base), dims_(dims), dtype_(dtype), rank_(dims.rank()) {
    strides_.assign(static_cast<std::size_t>(rank_), 1);
    for (int d = rank_ - 2; d >= 0; --d) strides_[d] = strides_[d + 1] * dims_[d + 1];
    for (int d = 0; d < rank_; ++d) {
      std::vector<std::int64_t> idx;
      const std::int64_t n = dims_[d];
      if (summarize && n > 2 * kEdgeItems) {
        for (std::int64_t i = 0; i < kEdgeItems; ++i) idx.push_back(i);
        idx.push_back(-1);
        for (std::int64_t i = n - kEdgeItems; i < n; ++i) idx.push_back(i);
      } else {
        for (std::int64_t i = 0; i < n; ++i) idx.push_back(i);
      }
      shown_.push_back(std::move(idx));
    }
  }

  std::string print() {
    collect(0, 0);
    for (const auto& e : elements_) width_ = std::max(width_, e.size());
    next_ = 0;
    std::string out;
    layout(0, out);
    return out;
  }

 private:
  void collect(int d, std::int64_t offset) {
    for (std::int64_t i : shown_[d]) {
      if (i < 0) continue;
      if (d == rank_ - 1) elements_.push_back(format_element(base_, offset + i * strides_[d], dtype_));
      else collect(d + 1, offset + i * strides_[d]);
    }
  }

  // Dim d starts at column d (each level of brackets one column in).
  void layout(int d, std::string& out) {
    out += '[';
    const auto& idx = shown_[d];
    if (d == rank_ - 1) {
      std::size_t column = static_cast<std::size_t>(rank_);
      for (std::size_t k = 0; k < idx.size(); ++k) {
        std::string entry = idx[k] < 0 ? std::string("...") : padded(elements_[next_++]);
        if (k > 0) {
          if (column + 2 + entry.size() > kLineWidth) {
            out += ",\n";
            out.append(static_cast<std::size_t>(rank_), ' ');
            column = static_cast<std::size_t>(rank_);
          } else {
            out += ", ";
            column += 2;
          }
        }
        out += entry;
        column += entry.size();
      }
    } else {
      // Rows of a rank-2 block on their own lines; one blank line more per
      // level above that.
      std::string separator = ",";
      separator.append(static_cast<std::size_t>(rank_ - d - 1), '\n');
      separator.append(static_cast<std::size_t>(d + 1), ' ');
      for (std::size_t k = 0; k < idx.size(); ++k) {
        if (k > 0) out += separator;
        if (idx[k] < 0) out += "...";
        else layout(d + 1, out);
      }
    }
    out += ']';
  }

  std::string padded(const std::string& e) const {
    return std::string(width_ - e.size(), ' ') + e;
  }

  const char* base_;
  const Dims& dims_;
  DataType dtype_;
  int rank_;
  std::vector<std::int64_t> strides_;
  std::vector<std::vector<std::int64_t>> shown_;
  std::vector<std::string> elements_;
  std::size_t width_ = 0;
  std::size_t next_ = 0;
};

}  // namespace

std::string Tensor::to_string() const {
  std::string type = type_string();
  if (!buffer_) return type;
  if (place_.kind != PlaceKind::Cpu && place_.kind != PlaceKind::HostStream)
    return type + " (values on " + place_.to_string() + " are not shown)";
  const char* base = static_cast<const char*>(buffer_->data()) + offset_;
  if (rank() == 0) return type + " " + format_element(base, 0, dtype_);
  std::string body = ValuePrinter(base, dims_, dtype_, numel() > kPrintThreshold).print();
  return type + (body.find('\n') == std::string::npos ? " " : "\n") + body;
}

// The copies tensor.h declares extern.
template Tensor Tensor::from_vector<float>(const Dims&, const std::vector<float>&, Place);
template std::vector<float> Tensor::to_vector<float>() const;
template Tensor Tensor::from_vector<double>(const Dims&, const std::vector<double>&, Place);
template std::vector<double> Tensor::to_vector<double>() const;
template Tensor Tensor::from_vector<std::int8_t>(const Dims&, const std::vector<std::int8_t>&, Place);
template std::vector<std::int8_t> Tensor::to_vector<std::int8_t>() const;
template Tensor Tensor::from_vector<std::int16_t>(const Dims&, const std::vector<std::int16_t>&, Place);
template std::vector<std::int16_t> Tensor::to_vector<std::int16_t>() const;
template Tensor Tensor::from_vector<std::int32_t>(const Dims&, const std::vector<std::int32_t>&, Place);
template std::vector<std::int32_t> Tensor::to_vector<std::int32_t>() const;
template Tensor Tensor::from_vector<std::int64_t>(const Dims&, const std::vector<std::int64_t>&, Place);
template std::vector<std::int64_t> Tensor::to_vector<std::int64_t>() const;
template Tensor Tensor::from_vector<std::uint8_t>(const Dims&, const std::vector<std::uint8_t>&, Place);
template std::vector<std::uint8_t> Tensor::to_vector<std::uint8_t>() const;
template Tensor Tensor::from_vector<std::uint16_t>(const Dims&, const std::vector<std::uint16_t>&, Place);
template std::vector<std::uint16_t> Tensor::to_vector<std::uint16_t>() const;
template Tensor Tensor::from_vector<std::uint32_t>(const Dims&, const std::vector<std::uint32_t>&, Place);
template std::vector<std::uint32_t> Tensor::to_vector<std::uint32_t>() const;
template Tensor Tensor::from_vector<std::uint64_t>(const Dims&, const std::vector<std::uint64_t>&, Place);
template std::vector<std::uint64_t> Tensor::to_vector<std::uint64_t>() const;
template Tensor Tensor::from_vector<bool>(const Dims&, const std::vector<bool>&, Place);
template std::vector<bool> Tensor::to_vector<bool>() const;

}  // namespace kiln

// TensorAttribute (kiln/ir/tensor_attribute.h): uniquing, printing, JSON.
#include "kiln/ir/tensor_attribute.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>

#include "kiln/ir/ir_json.h"
#include "kiln/ir/text_form.h"
#include "kiln/support/error.h"
#include "kiln/support/hash.h"
#include "tensor_storage_type.h"

namespace kiln {

std::size_t TensorAttributeStorage::hash_key(const KeyTy& k) {
  if (k.held_id) return std::hash<std::uint64_t>()(k.held_id);
  std::size_t h = static_cast<std::size_t>(xxh64(k.bytes));
  h = hash_combine(h, static_cast<std::size_t>(k.dtype));
  for (auto d : k.dims) h = hash_combine(h, std::hash<std::int64_t>()(d));
  return h;
}

bool TensorAttributeStorage::add_holder() const {
  std::uint32_t n = holders.load(std::memory_order_relaxed);
  do {
    if (n == kReleased) return false;
  } while (!holders.compare_exchange_weak(n, n + 1, std::memory_order_acq_rel));
  return true;
}

// The last holder frees the bytes, unless another op took the attribute
// between its count reaching 0 and the exchange (then that op holds them).
void TensorAttributeStorage::drop_holder() const {
  if (holders.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  std::uint32_t zero = 0;
  if (holders.compare_exchange_strong(zero, kReleased, std::memory_order_acq_rel))
    std::string().swap(const_cast<std::string&>(key.bytes));
}

namespace {

std::int64_t checked_numel(const std::vector<std::int64_t>& dims) {
  std::int64_t n = 1;
  for (auto d : dims) {
    if (d < 0)
      throw_error(ErrorKind::InvalidArgument, "tensor attribute dim ", d, " (expected >= 0)");
    if (d && n > std::numeric_limits<std::int64_t>::max() / d)
      throw_error(ErrorKind::OutOfRange, "tensor attribute has too many elements");
    n *= d;
  }
  return n;
}

template <typename T>
T element(std::string_view bytes, std::int64_t i) {
  T v;
  std::memcpy(&v, bytes.data() + static_cast<std::size_t>(i) * sizeof(T), sizeof(T));
  return v;
}

void check_tensor_bytes(DataType dtype, const std::vector<std::int64_t>& dims,
                        const std::string& bytes) {
  if (dtype == DataType::Undefined)
    throw_error(ErrorKind::InvalidArgument, "tensor attribute of an undefined dtype");
  const std::int64_t n = checked_numel(dims);
  if (bytes.size() != static_cast<std::size_t>(n) * size_of(dtype))
    throw_error(ErrorKind::InvalidArgument, "tensor attribute of ", n, " ", kiln::to_string(dtype),
                " elements needs ", static_cast<std::size_t>(n) * size_of(dtype), " bytes, got ",
                bytes.size());
}

}  // namespace

TensorAttribute TensorAttribute::get(DataType dtype, std::vector<std::int64_t> dims,
                                     std::string bytes) {
  check_tensor_bytes(dtype, dims, bytes);
  return get_uniqued(TensorAttributeStorage::KeyTy{dtype, std::move(dims), std::move(bytes)});
}

TensorAttribute TensorAttribute::get_held(DataType dtype, std::vector<std::int64_t> dims,
                                          std::string bytes) {
  static std::atomic<std::uint64_t> last_id{0};
  check_tensor_bytes(dtype, dims, bytes);
  const std::uint64_t id = last_id.fetch_add(1, std::memory_order_relaxed) + 1;
  return get_uniqued(TensorAttributeStorage::KeyTy{dtype, std::move(dims), std::move(bytes), id});
}

TensorAttribute TensorAttribute::get_or_hold(DataType dtype, std::vector<std::int64_t> dims,
                                             std::string bytes) {
  return (checked_numel(dims) > kMaxUniquedElements ? get_held : get)(dtype, std::move(dims),
                                                                      std::move(bytes));
}

void TensorAttribute::throw_released() const {
  std::ostringstream os;
  print(os);
  throw_error(ErrorKind::PreconditionNotMet, "the bytes of ", os.str(),
              " were freed when the last op carrying it was destroyed");
}

std::int64_t TensorAttribute::numel() const {
  std::int64_t n = 1;
  for (auto d : dims()) n *= d;
  return n;
}

void TensorAttribute::print(std::ostream& os) const {
  os << "tensor<";
  for (auto d : dims()) os << d << 'x';
  os << kiln::to_string(dtype()) << ">";
  if (released()) {
    os << " <released>";
    return;
  }
  const std::string_view b = bytes();
  os << " [";
  // Every value, floats in their shortest round-trip form: the text form of
  // a program must read back to the same constant (kiln/ir/parser.h).
  detail::with_storage_type(dtype(), [&](auto tag) {
    using T = decltype(tag);
    for (std::int64_t i = 0; i < numel(); ++i) {
      if (i) os << ", ";
      const T v = element<T>(b, i);
      if constexpr (std::is_same_v<T, bool>) os << (v ? "true" : "false");
      else if constexpr (std::is_floating_point_v<T>) print_shortest_float(os, v);
      else if constexpr (sizeof(T) == 1) os << static_cast<int>(v);
      else os << v;
    }
  });
  os << ']';
}

void TensorAttribute::save(nlohmann::json& j) const {
  j = nlohmann::json::object();
  j["dtype"] = std::string(kiln::to_string(dtype()));
  j["dims"] = dims();
  nlohmann::json values = nlohmann::json::array();
  const std::string_view b = bytes();
  detail::with_storage_type(dtype(), [&](auto tag) {
    using T = decltype(tag);
    for (std::int64_t i = 0; i < numel(); ++i) {
      const T v = element<T>(b, i);
      if constexpr (std::is_floating_point_v<T>) {
        // JSON has no NaN or infinity (nlohmann writes them as null): the
        // text form's spelling, as a string, as float attributes do.
        if (!std::isfinite(v)) {
          std::ostringstream os;
          print_shortest_float(os, v);
          values.push_back(os.str());
          continue;
        }
      }
      values.push_back(v);
    }
  });
  j["values"] = std::move(values);
}

TensorAttribute TensorAttribute::load(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("dtype") || !j["dtype"].is_string() || !j.contains("dims") ||
      !j["dims"].is_array() || !j.contains("values") || !j["values"].is_array())
    throw_error(ErrorKind::InvalidArgument, "tensor attribute needs {\"dtype\": string, \"dims\": "
                "[int...], \"values\": [...]}, got ", json_brief(j));
  const auto dtype = parse_data_type(j["dtype"].get<std::string>());
  if (!dtype)
    throw_error(ErrorKind::InvalidArgument, "tensor attribute has unknown dtype ",
                json_brief(j["dtype"]));
  std::vector<std::int64_t> dims;
  for (const auto& d : j["dims"]) {
    if (!d.is_number_integer())
      throw_error(ErrorKind::InvalidArgument, "tensor attribute dim must be an integer, got ",
                  json_brief(d));
    dims.push_back(d.get<std::int64_t>());
  }
  const std::int64_t n = checked_numel(dims);
  const auto& values = j["values"];
  if (static_cast<std::int64_t>(values.size()) != n)
    throw_error(ErrorKind::InvalidArgument, "tensor attribute with dims ", json_brief(j["dims"]),
                " needs ", n, " values, got ", values.size());
  std::string bytes(static_cast<std::size_t>(n) * size_of(*dtype), '\0');
  detail::with_storage_type(*dtype, [&](auto tag) {
    using T = decltype(tag);
    for (std::int64_t i = 0; i < n; ++i) {
      const auto& v = values[static_cast<std::size_t>(i)];
      if constexpr (std::is_floating_point_v<T>) {
        if (v.is_string()) {
          auto special = parse_special_float<T>(v.template get_ref<const std::string&>());
          if (!special)
            throw_error(ErrorKind::InvalidArgument, "tensor attribute value #", i, " ",
                        json_brief(v), " is not a ", kiln::to_string(*dtype));
          std::memcpy(bytes.data() + static_cast<std::size_t>(i) * sizeof(T), &*special, sizeof(T));
          continue;
        }
      }
      const bool ok = std::is_same_v<T, bool> ? v.is_boolean()
                      : std::is_floating_point_v<T> ? v.is_number()
                                                    : v.is_number_integer();
      if (!ok)
        throw_error(ErrorKind::InvalidArgument, "tensor attribute value #", i, " ",
                    json_brief(v), " is not a ", kiln::to_string(*dtype));
      const T x = v.get<T>();
      std::memcpy(bytes.data() + static_cast<std::size_t>(i) * sizeof(T), &x, sizeof(T));
    }
  });
  return get_or_hold(*dtype, std::move(dims), std::move(bytes));
}

}  // namespace kiln

// ONNX data sets: numbered files, ONNX's comparison, TensorProto writing.
#include "kiln/onnx/test_data.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <sstream>
#include <type_traits>

#include "kiln/io/file.h"
#include "kiln/support/error.h"
#include "kiln/support/half.h"
#include "model_proto.h"

namespace kiln::onnx {

namespace fs = std::filesystem;

std::vector<fs::path> numbered_entries(const fs::path& dir, std::string_view prefix) {
  std::vector<fs::path> v;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return v;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().rfind(prefix, 0) == 0) v.push_back(e.path());
  auto number = [&](const fs::path& p) -> long {
    const std::string s = p.stem().string().substr(prefix.size());
    if (s.empty() || !std::isdigit(static_cast<unsigned char>(s[0]))) return -1;
    return std::strtol(s.c_str(), nullptr, 10);
  };
  std::sort(v.begin(), v.end(), [&](const fs::path& a, const fs::path& b) {
    const long x = number(a), y = number(b);
    if ((x < 0) != (y < 0)) return y < 0;  // unnumbered names last
    return x != y ? x < y : a < b;
  });
  return v;
}

namespace {

template <typename T>
void compare_elements(const Tensor& got, const Tensor& want, double rtol, double atol, Comparison& c) {
  const T* a = got.data<T>();
  const T* b = want.data<T>();
  for (std::int64_t i = 0; i < got.numel(); ++i) {
    const double x = static_cast<double>(a[i]), y = static_cast<double>(b[i]);
    bool ok;
    if constexpr (std::is_floating_point_v<T>) {
      const bool nan_x = std::isnan(x), nan_y = std::isnan(y);
      ok = (nan_x && nan_y) || x == y || std::abs(x - y) <= atol + rtol * std::abs(y);
      if (!nan_x && !nan_y && x != y) {
        const double d = std::abs(x - y);
        c.max_abs = std::max(c.max_abs, d);
        if (y != 0) c.max_rel = std::max(c.max_rel, d / std::abs(y));
      }
    } else {
      ok = x == y;
      if (!ok) {
        c.max_abs = std::max(c.max_abs, std::abs(x - y));
        if (y != 0) c.max_rel = std::max(c.max_rel, std::abs(x - y) / std::abs(y));
      }
    }
    if (ok) continue;
    ++c.mismatched;
    if (c.first.empty()) {
      std::ostringstream s;
      s.precision(9);
      s << "element " << i << ": " << x << ", expected " << y;
      c.first = s.str();
    }
  }
  c.matches = c.mismatched == 0;
}

}  // namespace

Tensor as_declared(const Tensor& t, DataType declared) {
  if (!(t.dtype() == DataType::UInt16 && declared == DataType::BFloat16)) return t;
  Tensor bits = Tensor::empty(t.dims(), DataType::BFloat16);
  if (t.bytes()) std::memcpy(bits.raw_data(), t.raw_data(), t.bytes());
  return bits;
}

Comparison compare_tensors(const Tensor& got, const Tensor& want, double rtol, double atol) {
  Comparison c;
  auto differ = [&](std::string what) {
    c.matches = false;
    c.first = std::move(what);
    return c;
  };
  if (got.dtype() != want.dtype())
    return differ("dtype " + std::string(to_string(got.dtype())) + ", expected " +
                  std::string(to_string(want.dtype())));
  if (got.dims() != want.dims())
    return differ("dims [" + got.dims().to_string() + "], expected [" + want.dims().to_string() + "]");
  switch (got.dtype()) {
    case DataType::Float32: compare_elements<float>(got, want, rtol, atol, c); break;
    case DataType::Float64: compare_elements<double>(got, want, rtol, atol, c); break;
    case DataType::Float16:
    case DataType::BFloat16: {
      // Compared as floats: ONNX's runner compares float16 outputs by value.
      const auto widen = [](const Tensor& t) {
        Tensor f = Tensor::empty(t.dims(), DataType::Float32);
        const auto* p = static_cast<const std::uint16_t*>(t.raw_data());
        for (std::int64_t i = 0; i < t.numel(); ++i)
          f.data<float>()[i] = t.dtype() == DataType::Float16 ? half_to_float(p[i])
                                                               : bfloat16_to_float(p[i]);
        return f;
      };
      compare_elements<float>(widen(got), widen(want), rtol, atol, c);
      break;
    }
    case DataType::Int8: compare_elements<std::int8_t>(got, want, rtol, atol, c); break;
    case DataType::Int16: compare_elements<std::int16_t>(got, want, rtol, atol, c); break;
    case DataType::Int32: compare_elements<std::int32_t>(got, want, rtol, atol, c); break;
    case DataType::Int64: compare_elements<std::int64_t>(got, want, rtol, atol, c); break;
    case DataType::UInt8: compare_elements<std::uint8_t>(got, want, rtol, atol, c); break;
    case DataType::UInt16: compare_elements<std::uint16_t>(got, want, rtol, atol, c); break;
    case DataType::UInt32: compare_elements<std::uint32_t>(got, want, rtol, atol, c); break;
    case DataType::UInt64: compare_elements<std::uint64_t>(got, want, rtol, atol, c); break;
    case DataType::Bool: compare_elements<bool>(got, want, rtol, atol, c); break;
    case DataType::Undefined: return differ("dtype undefined is not compared");
  }
  return c;
}

std::string tensor_proto_bytes(const Tensor& t, std::string_view name) {
  ::onnx::TensorProto tp;
  tp.set_name(std::string(name));
  const auto elem_type = detail::onnx_elem_type(t.dtype());
  if (!elem_type)
    throw_error(ErrorKind::Unimplemented, "tensor '", name, "' is ", to_string(t.dtype()),
                ", which ONNX has no element type for");
  tp.set_data_type(*elem_type);
  for (std::int64_t d : t.dims().to_vector()) tp.add_dims(d);
  if (t.bytes()) tp.set_raw_data(t.raw_data(), t.bytes());
  return tp.SerializeAsString();
}

void write_tensor_proto(const Tensor& t, std::string_view name, const std::string& path) {
  write_file_atomic(path, tensor_proto_bytes(t, name), "ONNX tensor");
}

}  // namespace kiln::onnx

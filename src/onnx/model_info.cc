// Reading an ONNX model's declarations (kiln/onnx/model_info.h) with the
// protobuf classes of Debian's libonnx-dev.
#include "kiln/onnx/model_info.h"

#include <fcntl.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <limits>
#include <new>
#include <sstream>
#include <unordered_set>
#include <utility>

#include "kiln/support/error.h"
#include "model_proto.h"

namespace kiln::onnx {

namespace detail {

namespace {

constexpr auto kMaxModelBytes = static_cast<std::size_t>(std::numeric_limits<int>::max());

[[noreturn]] void model_too_large(std::string_view what, std::size_t bytes) {
  throw_error(ErrorKind::InvalidArgument, "ONNX model ", what, " is ", bytes,
              " bytes; a ModelProto holds at most 2 GiB (store weights as external data)");
}

// `model` as parsing `bytes` bytes of it left it (`parsed`: protobuf took
// them), or the error naming `what`.
::onnx::ModelProto checked_model(::onnx::ModelProto model, bool parsed, std::size_t bytes,
                                 std::string_view what) {
  if (!parsed && bytes >= kMaxModelBytes) model_too_large(what, bytes);
  if (!parsed)
    throw_error(ErrorKind::InvalidArgument, "ONNX model ", what,
                " is not a valid ONNX ModelProto (not protobuf, or truncated; ", bytes, " bytes)");
  if (!model.has_graph())
    throw_error(ErrorKind::InvalidArgument, "ONNX model ", what,
                " has no graph (not an ONNX model, or truncated)");
  return model;
}

// An open file descriptor, closed on every path out.
struct OpenFile {
  int fd;
  ~OpenFile() {
    if (fd >= 0) ::close(fd);
  }
};

[[noreturn]] void read_failed(const std::string& path, std::string_view noun, int err) {
  throw_error(ErrorKind::DataLoss, "cannot read ", noun, " '", path, "': ", std::strerror(err));
}

// `path` opened for reading, and what fstat says of it; FileBytes's errors.
OpenFile open_file(const std::string& path, std::string_view noun, struct stat& st) {
  OpenFile f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) {
    const int err = errno;
    throw_error(err == ENOENT || err == ENOTDIR ? ErrorKind::NotFound : ErrorKind::Unavailable, "cannot open ",
                noun, " '", path, "': ", std::strerror(err));
  }
  if (::fstat(f.fd, &st) != 0) read_failed(path, noun, errno);
  if (S_ISDIR(st.st_mode)) throw_error(ErrorKind::InvalidArgument, "'", path, "' is a folder, not an ", noun);
  return f;
}

}  // namespace

::onnx::ModelProto parse_model(std::string_view bytes, std::string_view what) {
  if (bytes.size() > kMaxModelBytes) model_too_large(what, bytes.size());
  ::onnx::ModelProto model;
  const bool parsed = model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
  return checked_model(std::move(model), parsed, bytes.size(), what);
}

::onnx::ModelProto parse_model_file(const std::string& path) {
  constexpr std::string_view kNoun = "ONNX model file";
  const std::string what = "'" + path + "'";
  struct stat st {};
  const OpenFile f = open_file(path, kNoun, st);
  if (S_ISREG(st.st_mode) && static_cast<std::size_t>(st.st_size) > kMaxModelBytes)
    model_too_large(what, static_cast<std::size_t>(st.st_size));
  google::protobuf::io::FileInputStream in(f.fd, 1 << 20);
  ::onnx::ModelProto model;
  const bool parsed = model.ParseFromZeroCopyStream(&in);
  if (in.GetErrno() != 0) read_failed(path, kNoun, in.GetErrno());
  return checked_model(std::move(model), parsed, static_cast<std::size_t>(in.ByteCount()), what);
}

FileBytes::FileBytes(const std::string& path, std::string_view noun) {
  struct stat st {};
  const OpenFile f = open_file(path, noun, st);
  if (S_ISREG(st.st_mode) && st.st_size > 0) {  // (procfs files say 0: read as a stream)
    const auto want = static_cast<std::size_t>(st.st_size);
    file_.reset(new (std::nothrow) char[want]);
    if (!file_)
      throw_error(ErrorKind::OutOfRange, noun, " '", path, "' is ", want, " bytes, more than can be held");
    while (size_ < want) {
      const ssize_t n = ::pread(f.fd, file_.get() + size_, want - size_, static_cast<off_t>(size_));
      if (n > 0) size_ += static_cast<std::size_t>(n);
      else if (n == 0) break;  // shrunk since fstat
      else if (errno != EINTR) read_failed(path, noun, errno);
    }
    return;
  }
  constexpr std::size_t kChunk = 1 << 16;
  for (;;) {
    const std::size_t had = stream_.size();
    stream_.resize(had + kChunk);
    const ssize_t n = ::read(f.fd, stream_.data() + had, kChunk);
    stream_.resize(had + static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
    if (n == 0) return;
    if (n < 0 && errno != EINTR) read_failed(path, noun, errno);
  }
}

std::string elem_type_name(std::int32_t elem_type) {
  if (elem_type == 0 || !::onnx::TensorProto_DataType_IsValid(elem_type)) return "undefined";
  std::string s = ::onnx::TensorProto_DataType_Name(
      static_cast<::onnx::TensorProto_DataType>(elem_type));
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

constexpr std::pair<DataType, ::onnx::TensorProto_DataType> kElemTypes[] = {
    {DataType::Float32, ::onnx::TensorProto_DataType_FLOAT},
    {DataType::Float64, ::onnx::TensorProto_DataType_DOUBLE},
    {DataType::Float16, ::onnx::TensorProto_DataType_FLOAT16},
    {DataType::BFloat16, ::onnx::TensorProto_DataType_BFLOAT16},
    {DataType::Int8, ::onnx::TensorProto_DataType_INT8},
    {DataType::Int16, ::onnx::TensorProto_DataType_INT16},
    {DataType::Int32, ::onnx::TensorProto_DataType_INT32},
    {DataType::Int64, ::onnx::TensorProto_DataType_INT64},
    {DataType::UInt8, ::onnx::TensorProto_DataType_UINT8},
    {DataType::UInt16, ::onnx::TensorProto_DataType_UINT16},
    {DataType::UInt32, ::onnx::TensorProto_DataType_UINT32},
    {DataType::UInt64, ::onnx::TensorProto_DataType_UINT64},
    {DataType::Bool, ::onnx::TensorProto_DataType_BOOL},
};

std::optional<DataType> kiln_data_type(std::int32_t elem_type) {
  for (auto [k, o] : kElemTypes)
    if (o == elem_type) return k;
  return std::nullopt;
}

std::optional<std::int32_t> onnx_elem_type(DataType dtype) {
  for (auto [k, o] : kElemTypes)
    if (k == dtype) return o;
  return std::nullopt;
}

}  // namespace detail

std::optional<DataType> data_type_of(const TensorInfo& t) {
  for (auto [k, o] : detail::kElemTypes)
    if (detail::elem_type_name(o) == t.elem_type) return k;
  return std::nullopt;
}

namespace {

TensorInfo tensor_info(const ::onnx::ValueInfoProto& v) {
  TensorInfo t;
  t.name = v.name();
  t.elem_type = "undefined";
  if (!v.has_type() || !v.type().has_tensor_type()) return t;
  const auto& tt = v.type().tensor_type();
  t.elem_type = detail::elem_type_name(tt.elem_type());
  if (!tt.has_shape()) return t;
  t.has_shape = true;
  for (const auto& d : tt.shape().dim()) {
    t.dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
    t.dim_params.push_back(d.has_dim_param() ? d.dim_param() : std::string());
  }
  return t;
}

void count_ops(const ::onnx::GraphProto& g, ModelInfo& info) {
  for (const auto& n : g.node()) {
    ++info.num_nodes;
    const std::string key = n.domain().empty() || n.domain() == "ai.onnx"
                                ? n.op_type()
                                : n.domain() + ":" + n.op_type();
    ++info.op_counts[key];
    for (const auto& a : n.attribute()) {
      if (a.has_g()) count_ops(a.g(), info);
      for (const auto& sub : a.graphs()) count_ops(sub, info);
    }
  }
}

}  // namespace

ModelInfo detail::model_info_of(const ::onnx::ModelProto& model) {
  ModelInfo info;
  info.ir_version = model.ir_version();
  if (!model.producer_name().empty())
    info.producer = model.producer_name() +
                    (model.producer_version().empty() ? "" : " " + model.producer_version());
  for (const auto& o : model.opset_import())
    info.opsets[o.domain() == "ai.onnx" ? std::string() : o.domain()] = o.version();
  const auto& g = model.graph();
  std::unordered_set<std::string> initializers;
  for (const auto& t : g.initializer()) initializers.insert(t.name());
  info.num_initializers = initializers.size();
  for (const auto& v : g.input())
    if (!initializers.count(v.name())) info.inputs.push_back(tensor_info(v));
  for (const auto& v : g.output()) info.outputs.push_back(tensor_info(v));
  count_ops(g, info);
  return info;
}

ModelInfo read_model_info_from_bytes(std::string_view bytes, std::string_view what) {
  return detail::model_info_of(detail::parse_model(bytes, what));
}

ModelInfo read_model_info(const std::string& path) { return detail::model_info_of(detail::parse_model_file(path)); }

std::string to_string(const ModelInfo& info) {
  std::ostringstream os;
  os << "ir_version " << info.ir_version;
  if (!info.producer.empty()) os << ", producer " << info.producer;
  os << "\nopsets:";
  for (const auto& [domain, version] : info.opsets)
    os << ' ' << (domain.empty() ? "ai.onnx" : domain) << ' ' << version;
  auto tensor = [&](const char* kind, const TensorInfo& t) {
    os << '\n' << kind << ' ' << t.name << ": " << t.elem_type;
    if (!t.has_shape) return;
    os << " [";
    for (std::size_t i = 0; i < t.dims.size(); ++i) {
      if (i) os << ", ";
      if (!t.dim_params[i].empty()) os << t.dim_params[i];
      else if (t.dims[i] < 0) os << '?';
      else os << t.dims[i];
    }
    os << ']';
  };
  for (const auto& t : info.inputs) tensor("input", t);
  for (const auto& t : info.outputs) tensor("output", t);
  os << '\n' << info.num_nodes << " nodes, " << info.num_initializers << " initializers";
  std::vector<std::pair<std::string, std::size_t>> ops(info.op_counts.begin(), info.op_counts.end());
  std::stable_sort(ops.begin(), ops.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  for (const auto& [op, n] : ops) os << "\n  " << op << ' ' << n;
  os << '\n';
  return os.str();
}

}  // namespace kiln::onnx

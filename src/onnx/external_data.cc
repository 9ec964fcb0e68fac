// ONNX's external data (external_data.h): side files read into raw_data.
#include "external_data.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>

#include "kiln/support/error.h"

namespace kiln::onnx::detail {

namespace {

namespace fs = std::filesystem;

// Bytes per element of an ONNX element type; 0 when it has no fixed size
// (string, undefined), and then the length is not checked here (the
// importer rejects those dtypes itself).
std::uint64_t element_size(std::int32_t t) {
  switch (t) {
    case ::onnx::TensorProto_DataType_BOOL:
    case ::onnx::TensorProto_DataType_INT8:
    case ::onnx::TensorProto_DataType_UINT8: return 1;
    case ::onnx::TensorProto_DataType_INT16:
    case ::onnx::TensorProto_DataType_UINT16:
    case ::onnx::TensorProto_DataType_FLOAT16:
    case ::onnx::TensorProto_DataType_BFLOAT16: return 2;
    case ::onnx::TensorProto_DataType_FLOAT:
    case ::onnx::TensorProto_DataType_INT32:
    case ::onnx::TensorProto_DataType_UINT32: return 4;
    case ::onnx::TensorProto_DataType_DOUBLE:
    case ::onnx::TensorProto_DataType_INT64:
    case ::onnx::TensorProto_DataType_UINT64:
    case ::onnx::TensorProto_DataType_COMPLEX64: return 8;
    case ::onnx::TensorProto_DataType_COMPLEX128: return 16;
    default: return 0;
  }
}

// One external tensor: where its bytes are and what it is called in errors.
class SideFileReader {
 public:
  SideFileReader(const std::string& base_dir, std::string_view what) : base_(base_dir), what_(what) {}

  void load(::onnx::TensorProto& t, const std::string& desc) const {
    std::string location;
    std::optional<std::string> offset_text, length_text;
    for (const auto& e : t.external_data()) {
      if (e.key() == "location") location = e.value();
      else if (e.key() == "offset") offset_text = e.value();
      else if (e.key() == "length") length_text = e.value();
    }
    const std::string head = "ONNX model " + std::string(what_) + ": " + desc;
    if (location.empty())
      throw_error(ErrorKind::InvalidArgument, head,
                  " keeps its data in an external file but names none (no 'location' entry)");
    const std::string side = "'" + location + "'";
    if (base_.empty())
      throw_error(ErrorKind::InvalidArgument, head, " keeps its data in the external file ", side,
                  ", and the model's folder is unknown (import it with import_model(path), or pass "
                  "the folder to import_model_from_bytes)");
    const fs::path loc(location);
    if (loc.has_root_name() || loc.has_root_directory())
      throw_error(ErrorKind::InvalidArgument, head, " keeps its data in ", side,
                  ", an absolute path; external data must lie in the model's folder");
    for (const auto& part : loc)
      if (part == "..")
        throw_error(ErrorKind::InvalidArgument, head, " keeps its data in ", side,
                    ", which leaves the model's folder ('..'); external data must lie in it");
    const fs::path path = fs::path(base_) / loc;
    std::error_code ec;
    if (!fs::exists(path, ec))
      throw_error(ErrorKind::NotFound, head, " keeps its data in ", side, ", and there is no file ",
                  path.string());
    if (!fs::is_regular_file(path, ec))
      throw_error(ErrorKind::InvalidArgument, head, " keeps its data in ", side,
                  ", which is not a regular file");
    // A link inside the folder may still point outside it.
    const fs::path real = fs::canonical(path, ec), root = fs::canonical(base_, ec);
    if (ec || std::mismatch(root.begin(), root.end(), real.begin(), real.end()).first != root.end())
      throw_error(ErrorKind::InvalidArgument, head, " keeps its data in ", side,
                  ", which resolves outside the model's folder");
    const std::uint64_t size = fs::file_size(path, ec);
    if (ec) throw_error(ErrorKind::NotFound, head, ": cannot read the size of ", side);

    const std::uint64_t offset = offset_text ? number(*offset_text, "offset", head, side) : 0;
    if (offset > size)
      throw_error(ErrorKind::OutOfRange, head, " starts at offset ", offset, " of ", side,
                  ", a file of ", size, " bytes");
    const std::uint64_t length =
        length_text ? number(*length_text, "length", head, side) : size - offset;
    if (length > size - offset)
      throw_error(ErrorKind::OutOfRange, head, " takes ", length, " bytes at offset ", offset,
                  " of ", side, ", a file of ", size, " bytes");
    if (const std::uint64_t want = byte_size(t, head); want != kUnknown && want != length)
      throw_error(ErrorKind::InvalidArgument, head, " takes ", length, " bytes of ", side,
                  ", its dims and element type need ", want);
    if (length > static_cast<std::uint64_t>(std::numeric_limits<int>::max()))
      throw_error(ErrorKind::Unimplemented, head, " takes ", length, " bytes of ", side,
                  "; kiln reads at most 2 GiB per tensor");

    std::string bytes(static_cast<std::size_t>(length), '\0');
    std::ifstream in(path, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(offset));
    if (!in || !in.read(bytes.data(), static_cast<std::streamsize>(length)))
      throw_error(ErrorKind::DataLoss, head, ": cannot read ", length, " bytes at offset ", offset,
                  " of ", side);
    t.set_raw_data(std::move(bytes));
    t.clear_external_data();
    t.set_data_location(::onnx::TensorProto_DataLocation_DEFAULT);
  }

 private:
  static constexpr std::uint64_t kUnknown = std::numeric_limits<std::uint64_t>::max();

  static std::uint64_t number(const std::string& text, const char* key, const std::string& head,
                              const std::string& side) {
    std::uint64_t v = 0;
    const char* end = text.data() + text.size();
    auto [p, ec] = std::from_chars(text.data(), end, v);
    if (text.empty() || ec != std::errc() || p != end)
      throw_error(ErrorKind::InvalidArgument, head, ": the ", key, " '", text, "' of ", side,
                  " is not a byte count");
    return v;
  }

  // dims × element size; kUnknown for element types without a fixed size.
  static std::uint64_t byte_size(const ::onnx::TensorProto& t, const std::string& head) {
    std::uint64_t n = element_size(t.data_type());
    if (n == 0) return kUnknown;
    for (auto d : t.dims()) {
      if (d < 0) throw_error(ErrorKind::InvalidArgument, head, " has dim ", d);
      const auto u = static_cast<std::uint64_t>(d);
      if (u != 0 && n > std::numeric_limits<std::uint64_t>::max() / u)
        throw_error(ErrorKind::InvalidArgument, head, " has dims too large to hold");
      n *= u;
    }
    return n;
  }

  std::string base_;
  std::string_view what_;
};

struct Walker {
  const SideFileReader& reader;
  std::vector<std::string>* problems;
  std::unordered_set<std::string>* failed;

  // false when it failed (and was recorded).
  bool tensor(::onnx::TensorProto& t, const std::string& desc) const {
    if (t.data_location() != ::onnx::TensorProto_DataLocation_EXTERNAL) return true;
    if (!problems) {
      reader.load(t, desc);
      return true;
    }
    try {
      reader.load(t, desc);
      return true;
    } catch (const Error& e) {
      problems->push_back(e.message());
      return false;
    }
  }

  void graph(::onnx::GraphProto& g, bool top) const {
    for (auto& init : *g.mutable_initializer())
      if (!tensor(init, "initializer '" + init.name() + "'") && top && failed)
        failed->insert(init.name());
    for (auto& node : *g.mutable_node())
      for (auto& a : *node.mutable_attribute()) {
        const std::string desc = "attribute '" + a.name() + "' of node '" + node.name() + "' (" +
                                 node.op_type() + ")";
        if (a.has_t()) tensor(*a.mutable_t(), desc);
        for (auto& t : *a.mutable_tensors()) tensor(t, desc);
        if (a.has_g()) graph(*a.mutable_g(), false);
        for (auto& sub : *a.mutable_graphs()) graph(sub, false);
      }
  }
};

}  // namespace

void load_external_data(::onnx::ModelProto& model, const std::string& base_dir,
                        std::string_view what, std::vector<std::string>* problems,
                        std::unordered_set<std::string>* failed) {
  const SideFileReader reader(base_dir, what);
  Walker{reader, problems, failed}.graph(*model.mutable_graph(), true);
}

}  // namespace kiln::onnx::detail

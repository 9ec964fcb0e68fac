// The weights file (kiln/io/weights.h): encoding, a validating decoder that
// reads the whole file before touching the scope, and the file wrappers.
#include "kiln/io/weights.h"

#include <bit>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kiln/io/file.h"
#include "kiln/ir/builtin_types.h"
#include "kiln/runtime/cuda_context.h"
#include "kiln/support/hash.h"
#include "kiln/support/warning.h"

namespace kiln {

static_assert(std::endian::native == std::endian::little,
              "the weights format stores tensor data little-endian as in memory");

namespace {

// The smallest record: name length, dtype, rank, data size, checksum.
constexpr std::size_t kMinRecord = 4 + 1 + 1 + 8 + 8;

template <typename T>
void put(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

std::string dims_text(const std::vector<std::int64_t>& d) {
  std::string s = "[";
  for (std::size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

bool dims_match(const std::vector<std::int64_t>& program, const std::vector<std::int64_t>& data) {
  if (program.size() != data.size()) return false;
  for (std::size_t i = 0; i < data.size(); ++i)
    if (program[i] != -1 && program[i] != data[i]) return false;
  return true;
}

bool valid_dtype(std::uint8_t code) {
  return code >= static_cast<std::uint8_t>(DataType::Float16) &&
         code <= static_cast<std::uint8_t>(DataType::UInt64);
}

// The program's parameter type as a tensor type; kiln::Error otherwise.
Type tensor_type_of(const std::string& name, const Parameter& p, std::string_view context) {
  if (!p.type || !is_shaped(p.type))
    throw_error(ErrorKind::InvalidArgument, context, "parameter '", name, "' has type ",
                p.type ? p.type.to_string() : std::string("<null>"),
                ", but a weights file holds tensors only");
  return p.type;
}

struct Record {
  std::string name;
  DataType dtype = DataType::Undefined;
  std::vector<std::int64_t> dims;
  std::string_view data;
};

// Reads the records of `bytes` front to back; every error names `source`.
class Reader {
 public:
  Reader(std::string_view bytes, std::string_view source) : b_(bytes), src_(source) {}

  std::vector<Record> read_all() {
    header();
    std::vector<Record> records;
    records.reserve(count_);
    std::map<std::string, std::size_t> seen;  // owns its keys: records may move
    for (std::uint64_t i = 0; i < count_; ++i) {
      records.push_back(record(i));
      auto [it, fresh] = seen.emplace(records.back().name, i);
      if (!fresh)
        throw_error(ErrorKind::DataLoss, "weights file '", src_, "' holds tensor '",
                    records.back().name, "' twice (tensors #", it->second, " and #", i, ")");
    }
    if (pos_ != b_.size())
      throw_error(ErrorKind::DataLoss, "weights file '", src_, "' is corrupt: ", b_.size() - pos_,
                  " unexpected bytes follow the last of its ", count_, " tensors (at offset ",
                  pos_, ")");
    return records;
  }

 private:
  void header() {
    const std::size_t n = std::min(b_.size(), kWeightsMagic.size());
    if (b_.substr(0, n) != kWeightsMagic.substr(0, n))
      throw_error(ErrorKind::InvalidArgument, "'", src_,
                  "' is not a kiln weights file (bad magic: expected \"KILNWTS\\0\")");
    need(kWeightsMagic.size(), "the magic number", "the header");
    pos_ = kWeightsMagic.size();
    const auto version = get<std::uint32_t>("the format version", "the header");
    if (version != kWeightsFormatVersion)
      throw_error(ErrorKind::Unimplemented, "weights file '", src_, "' has format version ",
                  version, "; this build reads version ", kWeightsFormatVersion);
    count_ = get<std::uint64_t>("the tensor count", "the header");
    const std::size_t left = b_.size() - pos_;
    if (count_ > left / kMinRecord)
      throw_error(ErrorKind::DataLoss, "weights file '", src_, "' is truncated: it declares ",
                  count_, " tensors but only ", left, " bytes follow the header");
  }

  Record record(std::uint64_t index) {
    Record r;
    const std::string where = "tensor #" + std::to_string(index);
    const std::size_t start = pos_;
    const auto name_len = get<std::uint32_t>("the name length", where);
    need(name_len, "the name", where);
    r.name.assign(b_.substr(pos_, name_len));
    pos_ += name_len;
    const std::string named = where + " ('" + r.name + "')";
    const auto dtype = get<std::uint8_t>("the dtype", named);
    const auto rank = get<std::uint8_t>("the rank", named);
    if (rank > Dims::kMaxRank)
      throw_error(ErrorKind::DataLoss, "weights file '", src_, "' is corrupt: ", named, " has rank ",
                  int{rank}, ", more than the maximum ", Dims::kMaxRank);
    for (int k = 0; k < rank; ++k) r.dims.push_back(get<std::int64_t>("the shape", named));
    const auto size = get<std::uint64_t>("the data size", named);
    need(size, "the data", named);
    r.data = b_.substr(pos_, size);
    pos_ += size;
    const std::uint64_t computed = xxh64(b_.data() + start, pos_ - start);
    const auto stored = get<std::uint64_t>("the checksum", named);
    if (stored != computed)
      throw_error(ErrorKind::DataLoss, "weights file '", src_, "' is corrupt: the checksum of ",
                  named, " does not match its bytes (stored ", stored, ", computed ", computed, ")");
    // The checksum holds: these are the bytes that were saved; check they make sense.
    if (!valid_dtype(dtype))
      throw_error(ErrorKind::DataLoss, "weights file '", src_, "': ", named,
                  " has an unknown dtype code ", int{dtype});
    r.dtype = static_cast<DataType>(dtype);
    std::uint64_t numel = 1;
    for (auto d : r.dims) {
      if (d < 0)
        throw_error(ErrorKind::DataLoss, "weights file '", src_, "': ", named, " has shape ",
                    dims_text(r.dims), " with a negative dim");
      if (d != 0 && numel > std::numeric_limits<std::uint64_t>::max() / static_cast<std::uint64_t>(d))
        throw_error(ErrorKind::DataLoss, "weights file '", src_, "': ", named, " has shape ",
                    dims_text(r.dims), " whose element count overflows");
      numel *= static_cast<std::uint64_t>(d);
    }
    if (numel > std::numeric_limits<std::uint64_t>::max() / size_of(r.dtype) ||
        numel * size_of(r.dtype) != size)
      throw_error(ErrorKind::DataLoss, "weights file '", src_, "': ", named, " of shape ",
                  dims_text(r.dims), " and dtype ", to_string(r.dtype), " holds ", size,
                  " data bytes, expected ", numel, " × ", size_of(r.dtype));
    return r;
  }

  void need(std::uint64_t n, std::string_view what, std::string_view where) const {
    const std::size_t left = b_.size() - pos_;
    if (n > left)
      throw_error(ErrorKind::DataLoss, "weights file '", src_, "' is truncated: ", what, " of ",
                  where, " needs ", n, " bytes at offset ", pos_, ", only ", left, " remain");
  }

  template <typename T>
  T get(std::string_view what, std::string_view where) {
    need(sizeof(T), what, where);
    T v;
    std::memcpy(&v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string_view b_;
  std::string_view src_;
  std::size_t pos_ = 0;
  std::uint64_t count_ = 0;
};

}  // namespace

std::string save_weights_bytes(const Scope& scope, const Program& program) {
  std::string out;
  out.append(kWeightsMagic);
  put<std::uint32_t>(out, kWeightsFormatVersion);
  put<std::uint64_t>(out, program.parameters().size());
  for (const auto& [name, param] : program.parameters()) {
    Type type = tensor_type_of(name, param, "cannot save weights: ");
    const Variable* var = scope.find_var(name);
    if (!var || !var->is<Tensor>() || !var->get<Tensor>().is_initialized())
      throw_error(ErrorKind::NotFound, "cannot save weights: parameter '", name,
                  "' has no initialized tensor in the scope (",
                  !var ? std::string("no variable of that name")
                       : "the variable holds " + std::string(to_string(var->kind())),
                  "; run the startup program first)");
    // A device's tensor is saved from a host copy (waited for).
    const Tensor& held = var->get<Tensor>();
    const Tensor t = held.place().kind == PlaceKind::Cuda ? copy_to_place(held, Place::cpu()) : held;
    const DataType want = shaped_data_type(type);
    const auto& want_dims = shaped_dims(type);
    const auto dims = t.dims().to_vector();
    if (t.dtype() != want)
      throw_error(ErrorKind::InvalidArgument, "cannot save weights: parameter '", name,
                  "' holds a ", to_string(t.dtype()), " tensor, the program declares ",
                  to_string(want));
    if (!dims_match(want_dims, dims))
      throw_error(ErrorKind::InvalidArgument, "cannot save weights: parameter '", name,
                  "' holds a tensor of shape ", dims_text(dims), ", the program declares ",
                  dims_text(want_dims));
    if (name.size() > std::numeric_limits<std::uint32_t>::max())
      throw_error(ErrorKind::InvalidArgument, "cannot save weights: parameter name too long");
    const std::size_t start = out.size();
    put<std::uint32_t>(out, static_cast<std::uint32_t>(name.size()));
    out.append(name);
    put<std::uint8_t>(out, static_cast<std::uint8_t>(t.dtype()));
    put<std::uint8_t>(out, static_cast<std::uint8_t>(dims.size()));
    for (auto d : dims) put<std::int64_t>(out, d);
    put<std::uint64_t>(out, t.bytes());
    if (t.bytes()) out.append(static_cast<const char*>(t.raw_data()), t.bytes());
    put<std::uint64_t>(out, xxh64(out.data() + start, out.size() - start));
  }
  return out;
}

void load_weights_bytes(std::string_view bytes, Scope& scope, const Program& program,
                        std::string_view source) {
  // 1. The file on its own: structure, sizes, checksums.
  std::vector<Record> records = Reader(bytes, source).read_all();

  // 2. Against the program, and the scope's variables we will write.
  // Tensors the program does not have are skipped (a warning names them
  // once the load succeeds).
  std::map<std::string_view, const Record*> by_name;
  std::vector<const Record*> loaded;
  std::vector<std::string_view> extras;
  for (const Record& r : records) {
    const Parameter* p = program.get_parameter(r.name);
    if (!p) {
      extras.push_back(r.name);
      continue;
    }
    Type type = tensor_type_of(r.name, *p, "weights file '" + std::string(source) + "': ");
    if (shaped_data_type(type) != r.dtype)
      throw_error(ErrorKind::InvalidArgument, "weights file '", source, "': tensor '", r.name,
                  "' has dtype ", to_string(r.dtype), ", the program declares ",
                  to_string(shaped_data_type(type)));
    if (!dims_match(shaped_dims(type), r.dims))
      throw_error(ErrorKind::InvalidArgument, "weights file '", source, "': tensor '", r.name,
                  "' has shape ", dims_text(r.dims), ", the program declares ",
                  dims_text(shaped_dims(type)));
    const Variable* existing = scope.find_var(r.name);
    if (existing && existing->is_initialized() && !existing->is<Tensor>())
      throw_error(ErrorKind::PreconditionNotMet, "cannot load weights file '", source,
                  "': the scope's variable '", r.name, "' holds a ",
                  to_string(existing->kind()), ", not a tensor");
    by_name.emplace(r.name, &r);
    loaded.push_back(&r);
  }
  for (const auto& [name, param] : program.parameters())
    if (!by_name.count(name))
      throw_error(ErrorKind::NotFound, "weights file '", source, "' has no tensor '", name,
                  "' (a parameter of the program)");

  // 3. Every tensor made before the scope changes, so a failed allocation
  // leaves it as it was; one replacing a device's tensor is copied there
  // (as PyTorch's load_state_dict keeps each parameter's device).
  std::vector<Tensor> tensors;
  tensors.reserve(loaded.size());
  for (const Record* r : loaded) {
    Tensor t = Tensor::empty(Dims(r->dims), r->dtype);
    if (!r->data.empty()) std::memcpy(t.raw_data(), r->data.data(), r->data.size());
    const Variable* existing = scope.find_var(r->name);
    if (existing && existing->is<Tensor>() && existing->get<Tensor>().is_initialized() &&
        existing->get<Tensor>().place().kind == PlaceKind::Cuda)
      t = copy_to_place(t, existing->get<Tensor>().place());
    tensors.push_back(std::move(t));
  }
  std::vector<Variable*> vars;
  vars.reserve(loaded.size());
  for (const Record* r : loaded) {
    Variable* v = scope.find_var(r->name);
    vars.push_back(v ? v : &scope.var(r->name));
  }
  for (std::size_t i = 0; i < loaded.size(); ++i) vars[i]->set(std::move(tensors[i]));

  if (!extras.empty()) {
    std::string names;
    for (std::size_t i = 0; i < extras.size(); ++i)
      names += (i ? ", '" : "'") + std::string(extras[i]) + "'";
    warn(detail::str_cat("weights file '", source, "' holds ", extras.size(),
                         extras.size() == 1 ? " tensor" : " tensors",
                         " that the program does not have, not loaded: ", names));
  }
}

void save_weights(const std::string& path, const Scope& scope, const Program& program) {
  std::string bytes;
  try {
    bytes = save_weights_bytes(scope, program);  // nothing is written yet
  } catch (const Error& e) {
    throw Error(e.kind(), "weights file '" + path + "': " + e.message());
  }
  write_file_atomic(path, bytes, "weights file");
}

void load_weights(const std::string& path, Scope& scope, const Program& program) {
  const std::string bytes = read_whole_file(path, "weights file");
  load_weights_bytes(bytes, scope, program, path);
}

}  // namespace kiln

#include <limits>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>

#include "kiln/ir/builtin_attributes.h"
#include "kiln/ir/builtin_types.h"
#include "kiln/ir/tensor_array_type.h"
#include "kiln/ir/ir_json.h"

namespace kiln {

void Type::print(std::ostream& os) const {
  if (!impl_) {
    os << "<<null type>>";
    return;
  }
  if (impl_->kind->print) impl_->kind->print(impl_, os);
  else os << impl_->kind->name;
}

std::string Type::to_string() const {
  std::ostringstream os;
  print(os);
  return os.str();
}

std::ostream& operator<<(std::ostream& os, Type t) {
  t.print(os);
  return os;
}

Type scalar_type(DataType dtype) {
  switch (dtype) {
    case DataType::Float16: return Float16Type::get();
    case DataType::BFloat16: return BFloat16Type::get();
    case DataType::Float32: return Float32Type::get();
    case DataType::Float64: return Float64Type::get();
    case DataType::Int8: return Int8Type::get();
    case DataType::Int32: return Int32Type::get();
    case DataType::Int64: return Int64Type::get();
    case DataType::Bool: return BoolType::get();
    case DataType::UInt8: return UInt8Type::get();
    case DataType::Int16: return Int16Type::get();
    case DataType::UInt16: return UInt16Type::get();
    case DataType::UInt32: return UInt32Type::get();
    case DataType::UInt64: return UInt64Type::get();
    case DataType::Undefined: break;
  }
  throw_error(ErrorKind::InvalidArgument, "no scalar type for data type '", to_string(dtype), "'");
}

std::optional<DataType> to_data_type(Type t) {
  if (!t) return std::nullopt;
  if (t.isa<Float32Type>()) return DataType::Float32;
  if (t.isa<Float64Type>()) return DataType::Float64;
  if (t.isa<Int64Type>()) return DataType::Int64;
  if (t.isa<Int32Type>()) return DataType::Int32;
  if (t.isa<BoolType>()) return DataType::Bool;
  if (t.isa<Float16Type>()) return DataType::Float16;
  if (t.isa<BFloat16Type>()) return DataType::BFloat16;
  if (t.isa<Int8Type>()) return DataType::Int8;
  if (t.isa<UInt8Type>()) return DataType::UInt8;
  if (t.isa<Int16Type>()) return DataType::Int16;
  if (t.isa<UInt16Type>()) return DataType::UInt16;
  if (t.isa<UInt32Type>()) return DataType::UInt32;
  if (t.isa<UInt64Type>()) return DataType::UInt64;
  return std::nullopt;
}

// The builtin types' get(): out of line, so that a file including
// builtin_types.h does not instantiate the uniquing templates for each.
#define KILN_SCALAR_TYPE_GET(Class) \
  Class Class::get() { return get_singleton(); }
KILN_SCALAR_TYPE_GET(Float16Type)
KILN_SCALAR_TYPE_GET(BFloat16Type)
KILN_SCALAR_TYPE_GET(Float32Type)
KILN_SCALAR_TYPE_GET(Float64Type)
KILN_SCALAR_TYPE_GET(Int8Type)
KILN_SCALAR_TYPE_GET(Int32Type)
KILN_SCALAR_TYPE_GET(Int64Type)
KILN_SCALAR_TYPE_GET(BoolType)
KILN_SCALAR_TYPE_GET(UInt8Type)
KILN_SCALAR_TYPE_GET(Int16Type)
KILN_SCALAR_TYPE_GET(UInt16Type)
KILN_SCALAR_TYPE_GET(UInt32Type)
KILN_SCALAR_TYPE_GET(UInt64Type)
#undef KILN_SCALAR_TYPE_GET

bool ShapedTypeStorage::operator==(const KeyTy& k) const {
  return element == k.first && dims == k.second;
}
bool VectorTypeStorage::operator==(const KeyTy& k) const { return elements == k; }
VectorType VectorType::get(std::vector<Type> elements) {
  return get_uniqued(std::move(elements));
}

std::size_t ShapedTypeStorage::hash_key(const KeyTy& k) {
  std::size_t h = std::hash<Type>()(k.first);
  for (auto d : k.second) h = hash_combine(h, std::hash<std::int64_t>()(d));
  return h;
}

std::size_t VectorTypeStorage::hash_key(const KeyTy& k) {
  std::size_t h = k.size();
  for (auto t : k) h = hash_combine(h, std::hash<Type>()(t));
  return h;
}

// ---- tensor / vtensor ----

template <typename C>
void ShapedTypeBase<C>::print(std::ostream& os) const {
  os << C::name << '<';
  for (auto d : dims()) os << d << 'x';
  element_type().print(os);
  os << '>';
}


template <typename C>
void ShapedTypeBase<C>::save(nlohmann::json& j) const {
  j["dtype"] = std::string(element_type().kind_name());
  j["dims"] = dims();
}

template <typename C>
C ShapedTypeBase<C>::load(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("dtype") || !j.contains("dims") || !j["dtype"].is_string() ||
      !j["dims"].is_array())
    throw_error(ErrorKind::InvalidArgument, C::name,
                " type needs {\"dtype\": string, \"dims\": [int...]}, got ", json_brief(j));
  auto dt = parse_data_type(j["dtype"].get<std::string>());
  if (!dt)
    throw_error(ErrorKind::InvalidArgument, C::name, " type has unknown dtype ", json_brief(j["dtype"]));
  std::vector<std::int64_t> dims;
  for (const auto& d : j["dims"]) {
    if (!d.is_number_integer())
      throw_error(ErrorKind::InvalidArgument, C::name, " dim must be an integer, got ", json_brief(d));
    // An unsigned above INT64_MAX would wrap (2^64-1 to -1, "unknown").
    if (d.is_number_unsigned() &&
        d.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      throw_error(ErrorKind::OutOfRange, C::name, " dim ", d.get<std::uint64_t>(),
                  " is out of range");
    dims.push_back(d.get<std::int64_t>());
  }
  return get(*dt, std::move(dims));
}

template class ShapedTypeBase<TensorType>;
template class ShapedTypeBase<VTensorType>;
template class ShapedTypeBase<TensorArrayType>;

DataType shaped_data_type(Type t) {
  if (auto tt = t.dyn_cast<TensorType>()) return tt.data_type();
  if (auto vt = t.dyn_cast<VTensorType>()) return vt.data_type();
  throw_error(ErrorKind::InvalidArgument, "expected a tensor type, got ", t.to_string());
}

const std::vector<std::int64_t>& shaped_dims(Type t) {
  if (auto tt = t.dyn_cast<TensorType>()) return tt.dims();
  if (auto vt = t.dyn_cast<VTensorType>()) return vt.dims();
  throw_error(ErrorKind::InvalidArgument, "expected a tensor type, got ", t.to_string());
}

// ---- vector ----

void VectorType::print(std::ostream& os) const {
  os << "vector<";
  for (std::size_t i = 0; i < size(); ++i) {
    if (i) os << ", ";
    elements()[i].print(os);
  }
  os << '>';
}

void VectorType::save(nlohmann::json& j) const {
  auto arr = nlohmann::json::array();
  for (auto t : elements()) arr.push_back(type_to_json(t));
  j["elements"] = std::move(arr);
}

VectorType VectorType::load(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("elements") || !j["elements"].is_array())
    throw_error(ErrorKind::InvalidArgument, "vector type needs {\"elements\": [type...]}, got ",
                json_brief(j));
  std::vector<Type> elems;
  for (const auto& e : j["elements"]) elems.push_back(type_from_json(e));
  return get(std::move(elems));
}

}  // namespace kiln

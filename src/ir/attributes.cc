#include <algorithm>
#include <bit>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>

#include "kiln/ir/ir_json.h"
#include "kiln/ir/attribute_struct.h"
#include "kiln/ir/builtin_attributes.h"
#include "kiln/ir/builtin_types.h"
#include "kiln/ir/text_form.h"

namespace kiln {

void Attribute::print(std::ostream& os) const {
  if (!impl_) {
    os << "<<null attribute>>";
    return;
  }
  if (impl_->kind->print) impl_->kind->print(impl_, os);
  else os << impl_->kind->name;
}

std::string Attribute::to_string() const {
  std::ostringstream os;
  print(os);
  return os.str();
}

std::ostream& operator<<(std::ostream& os, Attribute a) {
  a.print(os);
  return os;
}

// ---- text-form helpers (shared with the printer and the parser) ----

void print_quoted_string(std::ostream& os, std::string_view s) {
  os << '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': os << "\\\""; break;
      case '\\': os << "\\\\"; break;
      case '\n': os << "\\n"; break;
      case '\t': os << "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          const char* hex = "0123456789abcdef";
          os << "\\x" << hex[c >> 4] << hex[c & 15];
        } else {
          os << c;
        }
    }
  }
  os << '"';
}

bool is_bare_name(std::string_view s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (unsigned char c : s)
    if (!(std::isalnum(c) || c == '_' || c == '.')) return false;
  return true;
}

namespace {
template <typename F>
using FloatBits = std::conditional_t<sizeof(F) == 4, std::uint32_t, std::uint64_t>;
}  // namespace

template <typename F>
void print_shortest_float(std::ostream& os, F v) {
  if (std::isnan(v)) {
    using Bits = FloatBits<F>;
    const Bits bits = std::bit_cast<Bits>(v);
    const Bits sign = Bits(1) << (8 * sizeof(Bits) - 1);
    if ((bits & ~sign) == std::bit_cast<Bits>(std::numeric_limits<F>::quiet_NaN())) {
      os << (bits & sign ? "-nan" : "nan");
    } else {
      char buf[32];
      auto r = std::to_chars(buf, buf + sizeof buf, bits, 16);
      os << "nan(0x" << std::string_view(buf, static_cast<std::size_t>(r.ptr - buf)) << ')';
    }
    return;
  }
  if (std::isinf(v)) {
    os << (v < 0 ? "-inf" : "inf");
    return;
  }
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);  // shortest round-trip form
  os << std::string_view(buf, static_cast<std::size_t>(r.ptr - buf));
}
template void print_shortest_float<float>(std::ostream&, float);
template void print_shortest_float<double>(std::ostream&, double);

template <typename F>
std::optional<F> parse_special_float(std::string_view s) {
  if (s == "inf") return std::numeric_limits<F>::infinity();
  if (s == "-inf") return -std::numeric_limits<F>::infinity();
  if (s == "nan") return std::numeric_limits<F>::quiet_NaN();
  if (s == "-nan") return -std::numeric_limits<F>::quiet_NaN();
  if (s.starts_with("nan(0x") && s.ends_with(')')) {
    using Bits = FloatBits<F>;
    const std::string_view hex = s.substr(6, s.size() - 7);
    Bits bits = 0;
    auto r = std::from_chars(hex.data(), hex.data() + hex.size(), bits, 16);
    if (r.ec != std::errc() || r.ptr != hex.data() + hex.size() || hex.empty()) return std::nullopt;
    const F v = std::bit_cast<F>(bits);
    if (!std::isnan(v)) return std::nullopt;  // nan(0x3f800000) would be 1.0
    return v;
  }
  return std::nullopt;
}
template std::optional<float> parse_special_float<float>(std::string_view);
template std::optional<double> parse_special_float<double>(std::string_view);

namespace {

// A float attribute's value: shortest round-trip digits, with ".0" on whole
// numbers so that the text reads as a float, not an i64.
template <typename F>
void print_float(std::ostream& os, F v) {
  std::ostringstream s;
  print_shortest_float(s, v);
  const std::string t = s.str();
  os << t;
  if (std::isfinite(v) && t.find_first_of(".e") == std::string::npos) os << ".0";
}

template <typename F>
nlohmann::json float_to_json(F v) {
  if (std::isfinite(v)) return static_cast<double>(v);
  // The text form's spelling: keeps a NaN's sign and payload.
  std::ostringstream os;
  print_shortest_float(os, v);
  return os.str();
}

template <typename F>
F float_from_json(const nlohmann::json& j, std::string_view kind) {
  if (j.is_string()) {
    if (auto v = parse_special_float<F>(j.get_ref<const std::string&>())) return *v;
  }
  if (!j.is_number())
    throw_error(ErrorKind::InvalidArgument, kind, " attribute needs a number, got ", json_brief(j));
  double d = j.get<double>();
  if constexpr (sizeof(F) == 4) {
    if (std::isfinite(d) && std::fabs(d) > std::numeric_limits<float>::max())
      throw_error(ErrorKind::OutOfRange, "f32 attribute value ", d, " is out of range");
  }
  return static_cast<F>(d);
}

template <typename I>
I int_from_json(const nlohmann::json& j, std::string_view kind) {
  if (!j.is_number_integer())
    throw_error(ErrorKind::InvalidArgument, kind, " attribute needs an integer, got ",
                json_brief(j));
  if (j.is_number_unsigned()) {
    auto u = j.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<I>::max()))
      throw_error(ErrorKind::OutOfRange, kind, " attribute value ", u, " is out of range");
    return static_cast<I>(u);
  }
  auto v = j.get<std::int64_t>();
  if (v < std::numeric_limits<I>::min() || v > std::numeric_limits<I>::max())
    throw_error(ErrorKind::OutOfRange, kind, " attribute value ", v, " is out of range");
  return static_cast<I>(v);
}

}  // namespace

// ---- scalar attributes ----

void BoolAttribute::print(std::ostream& os) const { os << (value() ? "true" : "false"); }
void BoolAttribute::save(nlohmann::json& j) const { j = value(); }
BoolAttribute BoolAttribute::load(const nlohmann::json& j) {
  if (!j.is_boolean())
    throw_error(ErrorKind::InvalidArgument, "bool attribute needs true/false, got ", json_brief(j));
  return get(j.get<bool>());
}

void Int32Attribute::print(std::ostream& os) const { os << value() << " : i32"; }
void Int32Attribute::save(nlohmann::json& j) const { j = value(); }
Int32Attribute Int32Attribute::load(const nlohmann::json& j) {
  return get(int_from_json<std::int32_t>(j, "i32"));
}

void Int64Attribute::print(std::ostream& os) const { os << value(); }
void Int64Attribute::save(nlohmann::json& j) const { j = value(); }
Int64Attribute Int64Attribute::load(const nlohmann::json& j) {
  return get(int_from_json<std::int64_t>(j, "i64"));
}

void Float32Attribute::print(std::ostream& os) const {
  print_float(os, value());
  os << " : f32";
}
void Float32Attribute::save(nlohmann::json& j) const { j = float_to_json(value()); }
Float32Attribute Float32Attribute::load(const nlohmann::json& j) {
  return get(float_from_json<float>(j, "f32"));
}

void Float64Attribute::print(std::ostream& os) const { print_float(os, value()); }
void Float64Attribute::save(nlohmann::json& j) const { j = float_to_json(value()); }
Float64Attribute Float64Attribute::load(const nlohmann::json& j) {
  return get(float_from_json<double>(j, "f64"));
}

void StrAttribute::print(std::ostream& os) const { print_quoted_string(os, value()); }
void StrAttribute::save(nlohmann::json& j) const { j = value(); }
StrAttribute StrAttribute::load(const nlohmann::json& j) {
  if (!j.is_string())
    throw_error(ErrorKind::InvalidArgument, "str attribute needs a string, got ", json_brief(j));
  return get(j.get<std::string>());
}

void TypeAttribute::print(std::ostream& os) const { value().print(os); }
void TypeAttribute::save(nlohmann::json& j) const { j = type_to_json(value()); }
TypeAttribute TypeAttribute::load(const nlohmann::json& j) { return get(type_from_json(j)); }

void DataTypeAttribute::print(std::ostream& os) const { os << "dtype<" << kiln::to_string(value()) << '>'; }
void DataTypeAttribute::save(nlohmann::json& j) const { j = std::string(kiln::to_string(value())); }
DataTypeAttribute DataTypeAttribute::load(const nlohmann::json& j) {
  std::optional<DataType> dt;
  if (j.is_string()) dt = parse_data_type(j.get<std::string>());
  if (!dt)
    throw_error(ErrorKind::InvalidArgument,
                "dtype attribute needs one of f16, bf16, f32, f64, i8, i32, i64, bool; got ",
                json_brief(j));
  return get(*dt);
}

void PlaceAttribute::print(std::ostream& os) const { os << "place<" << value().to_string() << '>'; }
void PlaceAttribute::save(nlohmann::json& j) const { j = value().to_string(); }
PlaceAttribute PlaceAttribute::load(const nlohmann::json& j) {
  std::optional<Place> p;
  if (j.is_string()) p = Place::parse(j.get<std::string>());
  if (!p)
    throw_error(ErrorKind::InvalidArgument,
                "place attribute needs \"cpu\", \"host_stream:N\" or \"cuda:N\", got ",
                json_brief(j));
  return get(*p);
}

// ---- array ----

// The builtin attributes' get(): out of line, so that a file including
// builtin_attributes.h does not instantiate the uniquing templates for each.
#define KILN_SCALAR_ATTRIBUTE_GET(Class, T) \
  Class Class::get(T v) { return get_uniqued(std::move(v)); }
KILN_SCALAR_ATTRIBUTE_GET(BoolAttribute, bool)
KILN_SCALAR_ATTRIBUTE_GET(Int32Attribute, std::int32_t)
KILN_SCALAR_ATTRIBUTE_GET(Int64Attribute, std::int64_t)
KILN_SCALAR_ATTRIBUTE_GET(Float32Attribute, float)
KILN_SCALAR_ATTRIBUTE_GET(Float64Attribute, double)
KILN_SCALAR_ATTRIBUTE_GET(StrAttribute, std::string)
KILN_SCALAR_ATTRIBUTE_GET(TypeAttribute, Type)
KILN_SCALAR_ATTRIBUTE_GET(DataTypeAttribute, DataType)
#undef KILN_SCALAR_ATTRIBUTE_GET

PlaceAttribute PlaceAttribute::get(Place p) { return get_uniqued(p); }
ArrayAttribute ArrayAttribute::get(std::vector<Attribute> elements) {
  return get_uniqued(std::move(elements));
}

bool ArrayAttributeStorage::operator==(const KeyTy& k) const { return elements == k; }
bool DictionaryAttributeStorage::operator==(const KeyTy& k) const { return entries == k; }

std::size_t ArrayAttributeStorage::hash_key(const KeyTy& k) {
  std::size_t h = k.size();
  for (auto a : k) h = hash_combine(h, std::hash<Attribute>()(a));
  return h;
}

void ArrayAttribute::print(std::ostream& os) const {
  os << '[';
  for (std::size_t i = 0; i < size(); ++i) {
    if (i) os << ", ";
    value()[i].print(os);
  }
  os << ']';
}

void ArrayAttribute::save(nlohmann::json& j) const {
  j = nlohmann::json::array();
  for (auto a : value()) j.push_back(attribute_to_json(a));
}

ArrayAttribute ArrayAttribute::load(const nlohmann::json& j) {
  if (!j.is_array())
    throw_error(ErrorKind::InvalidArgument, "array attribute needs a JSON array, got ",
                json_brief(j));
  std::vector<Attribute> elems;
  for (const auto& e : j) elems.push_back(attribute_from_json(e));
  return get(std::move(elems));
}

ArrayAttribute make_i64_array(const std::vector<std::int64_t>& values) {
  std::vector<Attribute> elems;
  elems.reserve(values.size());
  for (auto v : values) elems.push_back(Int64Attribute::get(v));
  return ArrayAttribute::get(std::move(elems));
}

std::vector<std::int64_t> to_i64_vector(ArrayAttribute a) {
  std::vector<std::int64_t> out;
  out.reserve(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    auto e = a[i].dyn_cast<Int64Attribute>();
    if (!e)
      throw_error(ErrorKind::InvalidArgument, "array element #", i, " should be i64, got ",
                  a[i] ? a[i].kind_name() : std::string_view("null"));
    out.push_back(e.value());
  }
  return out;
}

// ---- dictionary ----

std::size_t DictionaryAttributeStorage::hash_key(const KeyTy& k) {
  std::size_t h = k.size();
  for (const auto& [name, a] : k)
    h = hash_combine(hash_combine(h, std::hash<std::string>()(name)), std::hash<Attribute>()(a));
  return h;
}

DictionaryAttribute DictionaryAttribute::get(std::vector<NamedAttribute> entries) {
  std::stable_sort(entries.begin(), entries.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (!entries[i].second)
      throw_error(ErrorKind::InvalidArgument, "attribute '", entries[i].first, "' is null");
    if (i && entries[i].first == entries[i - 1].first)
      throw_error(ErrorKind::InvalidArgument, "attribute '", entries[i].first,
                  "' is given twice");
  }
  return get_uniqued(std::move(entries));
}

Attribute DictionaryAttribute::find(std::string_view key) const {
  const auto& e = value();
  auto it = std::lower_bound(e.begin(), e.end(), key,
                             [](const NamedAttribute& a, std::string_view k) { return a.first < k; });
  return it != e.end() && it->first == key ? it->second : Attribute();
}

DictionaryAttribute DictionaryAttribute::with(std::string_view key, Attribute v) const {
  if (!v) throw_error(ErrorKind::InvalidArgument, "attribute '", key, "' is null");
  auto e = value();
  auto it = std::lower_bound(e.begin(), e.end(), key,
                             [](const NamedAttribute& a, std::string_view k) { return a.first < k; });
  if (it != e.end() && it->first == key) it->second = v;
  else e.insert(it, {std::string(key), v});
  return get_uniqued(std::move(e));
}

DictionaryAttribute DictionaryAttribute::without(std::string_view key) const {
  auto e = value();
  std::erase_if(e, [&](const NamedAttribute& a) { return a.first == key; });
  return get_uniqued(std::move(e));
}

void DictionaryAttribute::print(std::ostream& os) const {
  os << '{';
  bool first = true;
  for (const auto& [name, a] : value()) {
    if (!first) os << ", ";
    first = false;
    // A key that is not a plain name (spaces, '=', quotes, empty) is quoted.
    if (is_bare_name(name)) os << name;
    else print_quoted_string(os, name);
    os << " = ";
    a.print(os);
  }
  os << '}';
}

void DictionaryAttribute::save(nlohmann::json& j) const {
  j = nlohmann::json::object();
  for (const auto& [name, a] : value()) j[name] = attribute_to_json(a);
}

DictionaryAttribute DictionaryAttribute::load(const nlohmann::json& j) {
  if (!j.is_object())
    throw_error(ErrorKind::InvalidArgument, "dict attribute needs a JSON object, got ",
                json_brief(j));
  std::vector<NamedAttribute> entries;
  for (const auto& [k, v] : j.items()) entries.emplace_back(k, attribute_from_json(v));
  return get(std::move(entries));
}

// ---- reflected-struct helpers ----

namespace detail {
void attribute_kind_error(std::string_view owner, std::string_view attr, std::string_view expected,
                          Attribute got) {
  if (!got)
    throw_error(ErrorKind::InvalidArgument, "op '", owner, "' is missing attribute '", attr,
                "' (", expected, ")");
  throw_error(ErrorKind::InvalidArgument, "op '", owner, "' attribute '", attr, "' should be ",
              expected, ", got ", got.kind_name(), " ", got.to_string());
}

bool is_i64_array(Attribute a) {
  auto arr = a ? a.dyn_cast<ArrayAttribute>() : ArrayAttribute();
  if (!arr) return false;
  for (auto e : arr.value())
    if (!e.isa<Int64Attribute>()) return false;
  return true;
}
}  // namespace detail

}  // namespace kiln

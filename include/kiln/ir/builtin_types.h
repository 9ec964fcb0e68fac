// The builtin types (seed 002 §2.1 / §2.5): scalar element types f16, bf16, f32, f64, i8,
// i32, i64, bool, storage types u8, i16, u16, u32, u64; `tensor<dims x dtype>` (may alias
// other tensors), `vtensor<…>` (value semantics, never aliased) and `vector<T…>`.
// A dim of -1 is unknown (e.g. the batch dimension of a data op).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "kiln/ir/dialect.h"
#include "kiln/support/data_type.h"

namespace kiln {

#define KILN_SCALAR_TYPE(Class, text)                                  \
  class Class : public TypeBase<Class> {                               \
   public:                                                             \
    using TypeBase::TypeBase;                                          \
    static constexpr std::string_view name = text;                     \
    static Class get();                                                \
  };
KILN_SCALAR_TYPE(Float16Type, "f16")
KILN_SCALAR_TYPE(BFloat16Type, "bf16")
KILN_SCALAR_TYPE(Float32Type, "f32")
KILN_SCALAR_TYPE(Float64Type, "f64")
KILN_SCALAR_TYPE(Int8Type, "i8")
KILN_SCALAR_TYPE(Int32Type, "i32")
KILN_SCALAR_TYPE(Int64Type, "i64")
KILN_SCALAR_TYPE(BoolType, "bool")
KILN_SCALAR_TYPE(UInt8Type, "u8")
KILN_SCALAR_TYPE(Int16Type, "i16")
KILN_SCALAR_TYPE(UInt16Type, "u16")
KILN_SCALAR_TYPE(UInt32Type, "u32")
KILN_SCALAR_TYPE(UInt64Type, "u64")
#undef KILN_SCALAR_TYPE

// The scalar type of a DataType, and back (nullopt for non-scalar types).
Type scalar_type(DataType dtype);
std::optional<DataType> to_data_type(Type scalar);

struct ShapedTypeStorage : TypeStorage {
  using KeyTy = std::pair<Type, std::vector<std::int64_t>>;
  explicit ShapedTypeStorage(const KeyTy& k) : element(k.first), dims(k.second) {}
  bool operator==(const KeyTy& k) const;
  static std::size_t hash_key(const KeyTy& k);

  Type element;
  std::vector<std::int64_t> dims;
};

// Shared interface of tensor and vtensor.
template <typename Concrete>
class ShapedTypeBase : public TypeBase<Concrete, ShapedTypeStorage> {
 public:
  using TypeBase<Concrete, ShapedTypeStorage>::TypeBase;
  using Base = TypeBase<Concrete, ShapedTypeStorage>;

  // Throws kiln::Error(InvalidArgument) when `element` is not a scalar type or
  // a dim is below -1.
  static Concrete get(Type element, std::vector<std::int64_t> dims);
  static Concrete get(DataType dtype, std::vector<std::int64_t> dims) {
    return get(scalar_type(dtype), std::move(dims));
  }

  Type element_type() const { return this->storage()->element; }
  DataType data_type() const { return *to_data_type(element_type()); }
  const std::vector<std::int64_t>& dims() const { return this->storage()->dims; }
  std::size_t rank() const { return dims().size(); }
  bool has_static_shape() const;
  std::int64_t numel() const;  // -1 when a dim is unknown

  void print(std::ostream& os) const;
  void save(nlohmann::json& j) const;
  static Concrete load(const nlohmann::json& j);
};

class TensorType : public ShapedTypeBase<TensorType> {
 public:
  using ShapedTypeBase::ShapedTypeBase;
  static constexpr std::string_view name = "tensor";
};

class VTensorType : public ShapedTypeBase<VTensorType> {
 public:
  using ShapedTypeBase::ShapedTypeBase;
  static constexpr std::string_view name = "vtensor";
};

struct VectorTypeStorage : TypeStorage {
  using KeyTy = std::vector<Type>;
  explicit VectorTypeStorage(const KeyTy& k) : elements(k) {}
  bool operator==(const KeyTy& k) const;
  static std::size_t hash_key(const KeyTy& k);
  std::vector<Type> elements;
};

class VectorType : public TypeBase<VectorType, VectorTypeStorage> {
 public:
  using TypeBase::TypeBase;
  static constexpr std::string_view name = "vector";
  static VectorType get(std::vector<Type> elements);

  const std::vector<Type>& elements() const { return storage()->elements; }
  std::size_t size() const { return elements().size(); }
  Type operator[](std::size_t i) const { return elements()[i]; }

  void print(std::ostream& os) const;
  void save(nlohmann::json& j) const;
  static VectorType load(const nlohmann::json& j);
};

// True for tensor and vtensor types.
inline bool is_shaped(Type t) { return t.isa<TensorType>() || t.isa<VTensorType>(); }
// Element dtype / dims of a tensor or vtensor type; throws for other types.
DataType shaped_data_type(Type t);
const std::vector<std::int64_t>& shaped_dims(Type t);

// ---- template definitions ----

template <typename C>
C ShapedTypeBase<C>::get(Type element, std::vector<std::int64_t> dims) {
  if (!element || !to_data_type(element))
    throw_error(ErrorKind::InvalidArgument, C::name, " element type must be a scalar type, got ",
                element ? element.to_string() : std::string("<null>"));
  for (auto d : dims)
    if (d < -1)
      throw_error(ErrorKind::InvalidArgument, C::name, " dim must be >= -1 (-1 = unknown), got ",
                  d);
  return Base::get_uniqued(ShapedTypeStorage::KeyTy{element, std::move(dims)});
}

template <typename C>
bool ShapedTypeBase<C>::has_static_shape() const {
  for (auto d : dims())
    if (d < 0) return false;
  return true;
}

template <typename C>
std::int64_t ShapedTypeBase<C>::numel() const {
  std::int64_t n = 1;
  for (auto d : dims()) {
    if (d < 0) return -1;
    n *= d;
  }
  return n;
}

// Compiled once, in libkiln (src/ir/types.cc).
extern template class ShapedTypeBase<TensorType>;
extern template class ShapedTypeBase<VTensorType>;

}  // namespace kiln

// TypeId: a unique, comparable id per C++ type, without RTTI. The IR keys op
// infos, traits, interfaces, types and attributes by it (seed 002 §2.2.1,
// "using TraitId = TypeID").
#pragma once

#include <cstddef>
#include <functional>

namespace kiln {

class TypeId {
 public:
  TypeId() = default;

  template <typename T>
  static TypeId get();

  bool operator==(const TypeId&) const = default;
  auto operator<=>(const TypeId& o) const { return storage_ <=> o.storage_; }
  explicit operator bool() const { return storage_ != nullptr; }
  const void* as_opaque_pointer() const { return storage_; }

 private:
  explicit TypeId(const void* s) : storage_(s) {}
  const void* storage_ = nullptr;
};

namespace detail {
// One byte per type; its address is the id. An inline variable has a single
// definition across the program and the shared library (default visibility).
template <typename T>
inline constexpr char type_id_anchor = 0;
}  // namespace detail

template <typename T>
inline TypeId TypeId::get() {
  return TypeId(&detail::type_id_anchor<T>);
}

}  // namespace kiln

template <>
struct std::hash<kiln::TypeId> {
  std::size_t operator()(kiln::TypeId id) const noexcept {
    return std::hash<const void*>()(id.as_opaque_pointer());
  }
};

// Type: a handle to a uniqued TypeStorage (seed 002 §2.1.1 / §3.1). Types say
// what a Value is (f32, tensor<16x16xf32>, vtensor<…>, vector<…>); they carry
// no values. `TypeBase` ties a concrete type class to its storage.
#pragma once

#include <cstddef>
#include <functional>
#include <ostream>
#include <string>
#include <string_view>

#include "kiln/ir/storage.h"

namespace kiln {

class Type {
 public:
  using ImplType = TypeStorage;

  Type() = default;
  Type(const TypeStorage* impl) : impl_(impl) {}  // NOLINT: handles convert implicitly

  explicit operator bool() const { return impl_ != nullptr; }
  bool operator==(const Type& o) const { return impl_ == o.impl_; }
  bool operator!=(const Type& o) const { return impl_ != o.impl_; }

  const TypeStorage* storage() const { return impl_; }
  TypeId type_id() const { return impl_->kind->id; }
  std::string_view kind_name() const { return impl_->kind->name; }
  Dialect* dialect() const { return impl_->kind->dialect; }

  template <typename T> bool isa() const { return impl_ && T::classof(*this); }
  template <typename T> T dyn_cast() const { return isa<T>() ? T(impl_) : T(); }
  // Unchecked conversion; use after isa<T>().
  template <typename T> T cast() const { return T(impl_); }

  void print(std::ostream& os) const;
  std::string to_string() const;

 protected:
  const TypeStorage* impl_ = nullptr;
};

std::ostream& operator<<(std::ostream& os, Type t);

// CRTP base of concrete types:
//   class MyType : public TypeBase<MyType, MyStorage> {
//    public:
//     using TypeBase::TypeBase;
//     static constexpr std::string_view name = "my.type";
//     static MyType get(int a) { return get_uniqued(MyStorage::KeyTy{a}); }
//     void print(std::ostream&) const;                     // parametric types
//     void save(nlohmann::json& params) const;             // parametric types
//     static MyType load(const nlohmann::json& params);    // parametric types
//   };
template <typename Concrete, typename Storage = TypeStorage>
class TypeBase : public Type {
 public:
  using ImplType = Storage;
  using Type::Type;

  static bool classof(Type t) { return t.type_id() == TypeId::get<Concrete>(); }
  const Storage* storage() const { return static_cast<const Storage*>(impl_); }

 protected:
  // Parametric: the uniqued instance for `key`. Singleton: the one instance.
  template <typename Key>
  static Concrete get_uniqued(Key&& key);
  static Concrete get_singleton();
};

}  // namespace kiln

template <>
struct std::hash<kiln::Type> {
  std::size_t operator()(kiln::Type t) const noexcept {
    return std::hash<const void*>()(t.storage());
  }
};

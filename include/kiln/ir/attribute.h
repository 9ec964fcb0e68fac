// Attribute: a handle to a uniqued, immutable compile-time constant (seed 002
// §2.1.1): bool, i32, i64, f32, f64, string, array, dictionary, type, data
// type, place, or a user-defined kind. `AttrBase` ties a concrete class to its
// storage, like TypeBase for types.
#pragma once

#include <cstddef>
#include <functional>
#include <ostream>
#include <string>
#include <string_view>

#include "kiln/ir/storage.h"

namespace kiln {

class Attribute {
 public:
  using ImplType = AttributeStorage;

  Attribute() = default;
  Attribute(const AttributeStorage* impl) : impl_(impl) {}  // NOLINT

  explicit operator bool() const { return impl_ != nullptr; }
  bool operator==(const Attribute& o) const { return impl_ == o.impl_; }
  bool operator!=(const Attribute& o) const { return impl_ != o.impl_; }

  const AttributeStorage* storage() const { return impl_; }
  TypeId type_id() const { return impl_->kind->id; }
  std::string_view kind_name() const { return impl_->kind->name; }
  Dialect* dialect() const { return impl_->kind->dialect; }

  template <typename T> bool isa() const { return impl_ && T::classof(*this); }
  template <typename T> T dyn_cast() const { return isa<T>() ? T(impl_) : T(); }
  template <typename T> T cast() const { return T(impl_); }

  void print(std::ostream& os) const;
  std::string to_string() const;

 protected:
  const AttributeStorage* impl_ = nullptr;
};

std::ostream& operator<<(std::ostream& os, Attribute a);

template <typename Concrete, typename Storage = AttributeStorage>
class AttrBase : public Attribute {
 public:
  using ImplType = Storage;
  using Attribute::Attribute;

  static bool classof(Attribute a) { return a.type_id() == TypeId::get<Concrete>(); }
  const Storage* storage() const { return static_cast<const Storage*>(impl_); }

 protected:
  template <typename Key>
  static Concrete get_uniqued(Key&& key);
};

}  // namespace kiln

template <>
struct std::hash<kiln::Attribute> {
  std::size_t operator()(kiln::Attribute a) const noexcept {
    return std::hash<const void*>()(a.storage());
  }
};

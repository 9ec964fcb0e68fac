// Dialect: a named, pluggable group of types, attributes and ops (seed 002
// §3.1.3) — "builtin", "kiln", or a user's own. Also holds the template
// definitions that register kinds and unique storages in the IrContext.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "kiln/ir/ir_context.h"

namespace kiln {

class Dialect {
 public:
  Dialect(std::string name, TypeId id) : name_(std::move(name)), id_(id) {}
  virtual ~Dialect() = default;

  const std::string& name() const { return name_; }
  TypeId id() const { return id_; }
  IrContext* context() const { return IrContext::instance(); }

  template <typename... Ts> void register_types() { (context()->type_kind<Ts>(), ...); }
  template <typename... As> void register_attributes() { (context()->attribute_kind<As>(), ...); }

 private:
  std::string name_;
  TypeId id_;
};

namespace detail {
// "kiln.matmul" → "kiln"; "f32" → "builtin".
inline std::string_view dialect_prefix(std::string_view name) {
  auto dot = name.find('.');
  return dot == std::string_view::npos ? std::string_view("builtin") : name.substr(0, dot);
}

template <typename T, typename Storage, typename Base>
AbstractKind make_kind(IrContext* ctx) {
  AbstractKind k;
  k.id = TypeId::get<T>();
  k.name = std::string(T::name);
  k.dialect = ctx->get_or_create_dialect(dialect_prefix(T::name));
  k.parametric = !std::is_same_v<Storage, Base>;
  if constexpr (!std::is_same_v<Storage, Base>) {
    k.print = [](const void* s, std::ostream& os) { T(static_cast<const Storage*>(s)).print(os); };
    k.save = [](const void* s, nlohmann::json& j) { T(static_cast<const Storage*>(s)).save(j); };
    k.load = [](const nlohmann::json& j) -> const void* { return T::load(j).storage(); };
  } else {
    k.load = [](const nlohmann::json&) -> const void* { return T::get().storage(); };
  }
  return k;
}
}  // namespace detail

template <typename T>
const detail::AbstractKind* IrContext::type_kind() {
  // Registered once per process (kiln has one context); thread-safe static init.
  static const detail::AbstractKind* kind =
      add_kind(true, detail::make_kind<T, typename T::ImplType, TypeStorage>(this));
  return kind;
}

template <typename T>
const detail::AbstractKind* IrContext::attribute_kind() {
  static const detail::AbstractKind* kind =
      add_kind(false, detail::make_kind<T, typename T::ImplType, AttributeStorage>(this));
  return kind;
}

template <typename D>
D* IrContext::get_or_register_dialect() {
  if (Dialect* d = dialect(TypeId::get<D>())) return static_cast<D*>(d);
  return static_cast<D*>(add_dialect(std::make_unique<D>()));
}

namespace detail {
// A new storage moves its key in when the caller hands it over (a tensor
// attribute's bytes are not copied again), else copies it.
template <typename Concrete, typename Storage, typename Key>
const Storage* unique_storage(const AbstractKind* kind, Key&& key) {
  using K = std::remove_cvref_t<Key>;
  static constexpr IrContext::UniqueFns fns{
      [](const void* s, const void* k) {
        return *static_cast<const Storage*>(s) == *static_cast<const K*>(k);
      },
      [](void* k, const AbstractKind* kind) -> void* {
        auto* s = new Storage(std::forward<Key>(*static_cast<K*>(k)));
        s->kind = kind;
        return s;
      },
      [](void* s) { delete static_cast<Storage*>(s); }};
  return static_cast<const Storage*>(IrContext::instance()->unique(
      kind, Storage::hash_key(key), const_cast<K*>(std::addressof(key)), fns));
}

template <typename Storage>
const Storage* unique_singleton(const AbstractKind* kind) {
  static constexpr IrContext::UniqueFns fns{
      [](const void*, const void*) { return true; },
      [](void*, const AbstractKind* kind) -> void* {
        auto* s = new Storage();
        s->kind = kind;
        return s;
      },
      [](void* s) { delete static_cast<Storage*>(s); }};
  return static_cast<const Storage*>(IrContext::instance()->unique(kind, 0, nullptr, fns));
}
}  // namespace detail

template <typename Concrete, typename Storage>
template <typename Key>
Concrete TypeBase<Concrete, Storage>::get_uniqued(Key&& key) {
  auto* kind = IrContext::instance()->type_kind<Concrete>();
  return Concrete(detail::unique_storage<Concrete, Storage>(kind, std::forward<Key>(key)));
}

template <typename Concrete, typename Storage>
Concrete TypeBase<Concrete, Storage>::get_singleton() {
  static const Storage* s =
      detail::unique_singleton<Storage>(IrContext::instance()->type_kind<Concrete>());
  return Concrete(s);
}

template <typename Concrete, typename Storage>
template <typename Key>
Concrete AttrBase<Concrete, Storage>::get_uniqued(Key&& key) {
  auto* kind = IrContext::instance()->attribute_kind<Concrete>();
  return Concrete(detail::unique_storage<Concrete, Storage>(kind, std::forward<Key>(key)));
}

}  // namespace kiln

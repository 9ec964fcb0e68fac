#include "kiln/ir/ir_context.h"

#include <algorithm>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "kiln/ir/dialect.h"
#include "kiln/support/error.h"

namespace kiln {

std::string detail::OpInfoImpl::operand_count() const {
  std::string s = std::to_string(num_operands);
  if (num_optional_operands > 0) s += " to " + std::to_string(num_operands + num_optional_operands);
  return s;
}

void register_builtin_dialect(IrContext* ctx);  // dialect/builtin.cc
void register_kiln_dialect(IrContext* ctx);     // dialect/kiln_dialect.cc

struct IrContext::Impl {
  struct Entry {
    const detail::AbstractKind* kind;
    void* storage;
    void (*destroy)(void*);
  };
  // Uniquing table. Readers share the lock; creation takes it exclusively.
  mutable std::shared_mutex storage_mutex;
  std::unordered_multimap<std::size_t, Entry> storages;

  // Registries. Registration is rare; lookups by name happen when loading.
  mutable std::shared_mutex registry_mutex;
  std::vector<std::unique_ptr<detail::AbstractKind>> kinds;
  std::unordered_map<std::string, const detail::AbstractKind*> type_kinds, attribute_kinds;
  std::unordered_map<TypeId, const detail::AbstractKind*> kinds_by_id;
  std::vector<std::unique_ptr<Dialect>> dialects;
  std::unordered_map<std::string, Dialect*> dialects_by_name;
  std::unordered_map<TypeId, Dialect*> dialects_by_id;
  std::vector<std::unique_ptr<detail::OpInfoImpl>> ops;
  std::unordered_map<std::string, const detail::OpInfoImpl*> ops_by_name;
  std::unordered_map<TypeId, const detail::OpInfoImpl*> ops_by_id;

  ~Impl() {
    for (auto& [h, e] : storages) e.destroy(e.storage);
  }
};

IrContext::IrContext() : impl_(std::make_unique<Impl>()) {}
IrContext::~IrContext() = default;

IrContext* IrContext::instance() {
  // Never destroyed: programs held by other statics may outlive any
  // destruction order we could pick.
  static IrContext* ctx = new IrContext();
  // Registering the builtin and kiln dialects calls instance() again on this
  // thread; those nested calls must not wait for the registration itself.
  static std::once_flag once;
  thread_local bool registering = false;
  if (!registering) {
    std::call_once(once, [] {
      registering = true;
      register_builtin_dialect(ctx);
      register_kiln_dialect(ctx);
      registering = false;
    });
  }
  return ctx;
}

const void* IrContext::unique(const detail::AbstractKind* kind, std::size_t key_hash,
                              void* key, const UniqueFns& fns) {
  std::size_t h = hash_combine(std::hash<const void*>()(kind), key_hash);
  {
    std::shared_lock lock(impl_->storage_mutex);
    auto [b, e] = impl_->storages.equal_range(h);
    for (auto it = b; it != e; ++it)
      if (it->second.kind == kind && fns.equal(it->second.storage, key)) return it->second.storage;
  }
  std::unique_lock lock(impl_->storage_mutex);
  auto [b, e] = impl_->storages.equal_range(h);  // another thread may have won
  for (auto it = b; it != e; ++it)
    if (it->second.kind == kind && fns.equal(it->second.storage, key)) return it->second.storage;
  void* s = fns.create(key, kind);
  impl_->storages.emplace(h, Impl::Entry{kind, s, fns.destroy});
  return s;
}

const detail::AbstractKind* IrContext::add_kind(bool is_type, detail::AbstractKind kind) {
  std::unique_lock lock(impl_->registry_mutex);
  if (auto it = impl_->kinds_by_id.find(kind.id); it != impl_->kinds_by_id.end()) return it->second;
  auto& by_name = is_type ? impl_->type_kinds : impl_->attribute_kinds;
  if (by_name.count(kind.name))
    throw_error(ErrorKind::AlreadyExists, is_type ? "type" : "attribute", " kind '", kind.name,
                "' is already registered by another class");
  impl_->kinds.push_back(std::make_unique<detail::AbstractKind>(std::move(kind)));
  const auto* k = impl_->kinds.back().get();
  by_name.emplace(k->name, k);
  impl_->kinds_by_id.emplace(k->id, k);
  return k;
}

const detail::AbstractKind* IrContext::find_type_kind(std::string_view name) const {
  std::shared_lock lock(impl_->registry_mutex);
  auto it = impl_->type_kinds.find(std::string(name));
  return it == impl_->type_kinds.end() ? nullptr : it->second;
}

const detail::AbstractKind* IrContext::find_attribute_kind(std::string_view name) const {
  std::shared_lock lock(impl_->registry_mutex);
  auto it = impl_->attribute_kinds.find(std::string(name));
  return it == impl_->attribute_kinds.end() ? nullptr : it->second;
}

Dialect* IrContext::add_dialect(std::unique_ptr<Dialect> dialect) {
  std::unique_lock lock(impl_->registry_mutex);
  if (auto it = impl_->dialects_by_id.find(dialect->id()); it != impl_->dialects_by_id.end())
    return it->second;
  if (auto it = impl_->dialects_by_name.find(dialect->name()); it != impl_->dialects_by_name.end()) {
    // A plain dialect created implicitly (by a type or op named "x.…") is
    // replaced by the real class registered later under the same name.
    Dialect* old = it->second;
    if (old->id() != TypeId::get<Dialect>())
      throw_error(ErrorKind::AlreadyExists, "dialect '", dialect->name(),
                  "' is already registered by another class");
    Dialect* d = dialect.get();
    impl_->dialects.push_back(std::move(dialect));
    for (auto& k : impl_->kinds)
      if (k->dialect == old) k->dialect = d;
    for (auto& op : impl_->ops)
      if (op->dialect == old) op->dialect = d;
    it->second = d;
    impl_->dialects_by_id[d->id()] = d;
    return d;
  }
  Dialect* d = dialect.get();
  impl_->dialects.push_back(std::move(dialect));
  impl_->dialects_by_name.emplace(d->name(), d);
  impl_->dialects_by_id.emplace(d->id(), d);
  return d;
}

Dialect* IrContext::get_or_create_dialect(std::string_view name) {
  if (Dialect* d = dialect(name)) return d;
  std::unique_lock lock(impl_->registry_mutex);
  if (auto it = impl_->dialects_by_name.find(std::string(name)); it != impl_->dialects_by_name.end())
    return it->second;
  impl_->dialects.push_back(std::make_unique<Dialect>(std::string(name), TypeId::get<Dialect>()));
  Dialect* d = impl_->dialects.back().get();
  impl_->dialects_by_name.emplace(d->name(), d);
  return d;
}

Dialect* IrContext::dialect(std::string_view name) const {
  std::shared_lock lock(impl_->registry_mutex);
  auto it = impl_->dialects_by_name.find(std::string(name));
  return it == impl_->dialects_by_name.end() ? nullptr : it->second;
}

Dialect* IrContext::dialect(TypeId id) const {
  std::shared_lock lock(impl_->registry_mutex);
  auto it = impl_->dialects_by_id.find(id);
  return it == impl_->dialects_by_id.end() ? nullptr : it->second;
}

std::vector<Dialect*> IrContext::dialects() const {
  std::shared_lock lock(impl_->registry_mutex);
  std::vector<Dialect*> out;
  for (auto& [name, d] : impl_->dialects_by_name) out.push_back(d);
  return out;
}

namespace detail {
void add_op_entry(OpInfoImpl& info, TypeId id, const void* model, void (*verifier)(Operation*)) {
  if (model) {
    info.interfaces.emplace_back(id, model);
  } else {
    info.traits.push_back(id);
    if (verifier) info.trait_verifiers.push_back(verifier);
  }
}

void finish_op_info(OpInfoImpl& info) {
  std::sort(info.traits.begin(), info.traits.end());
  std::sort(info.interfaces.begin(), info.interfaces.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
}
}  // namespace detail

OpInfo IrContext::add_op(std::unique_ptr<detail::OpInfoImpl> info) {
  std::unique_lock lock(impl_->registry_mutex);
  if (auto it = impl_->ops_by_id.find(info->id); it != impl_->ops_by_id.end())
    return OpInfo(it->second);
  if (impl_->ops_by_name.count(info->name))
    throw_error(ErrorKind::AlreadyExists, "op '", info->name,
                "' is already registered by another class");
  impl_->ops.push_back(std::move(info));
  const auto* p = impl_->ops.back().get();
  impl_->ops_by_name.emplace(p->name, p);
  impl_->ops_by_id.emplace(p->id, p);
  return OpInfo(p);
}

OpInfo IrContext::find_op(std::string_view name) const {
  std::shared_lock lock(impl_->registry_mutex);
  auto it = impl_->ops_by_name.find(std::string(name));
  return it == impl_->ops_by_name.end() ? OpInfo() : OpInfo(it->second);
}

OpInfo IrContext::find_op(TypeId id) const {
  std::shared_lock lock(impl_->registry_mutex);
  auto it = impl_->ops_by_id.find(id);
  return it == impl_->ops_by_id.end() ? OpInfo() : OpInfo(it->second);
}

OpInfo IrContext::op_info(std::string_view name) const {
  OpInfo info = find_op(name);
  if (!info)
    throw_error(ErrorKind::NotFound, "op '", name,
                "' is not registered (define its class and register it with "
                "KILN_REGISTER_OP or a dialect)");
  return info;
}

std::vector<OpInfo> IrContext::registered_ops() const {
  std::shared_lock lock(impl_->registry_mutex);
  std::vector<OpInfo> out;
  for (auto& op : impl_->ops) out.emplace_back(op.get());
  return out;
}

}  // namespace kiln

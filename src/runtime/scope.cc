// Scope: the variable tree (seed 001 §3.1).
#include "kiln/runtime/scope.h"

#include <algorithm>
#include <mutex>
#include <shared_mutex>

namespace kiln {

class Scope::Mutex : public std::shared_mutex {};

Scope::Scope() : mutex_(std::make_unique<Mutex>()), alive_(std::make_shared<char>()) {}

Scope::Scope(Scope* parent)
    : parent_(parent), mutex_(std::make_unique<Mutex>()), alive_(std::make_shared<char>()) {}

Scope::~Scope() = default;

Scope& Scope::new_scope() {
  auto kid = std::unique_ptr<Scope>(new Scope(this));
  Scope& ref = *kid;
  std::unique_lock<std::shared_mutex> lock(*mutex_);
  kids_.push_back(std::move(kid));
  return ref;
}

void Scope::drop_kids() {
  std::vector<std::unique_ptr<Scope>> kids;
  {
    std::unique_lock<std::shared_mutex> lock(*mutex_);
    kids.swap(kids_);
  }
  // Destroyed outside the lock: a variable's destructor may free buffers.
}

bool Scope::drop_kid(Scope& kid) {
  std::unique_ptr<Scope> owned;
  {
    std::unique_lock<std::shared_mutex> lock(*mutex_);
    auto it = std::find_if(kids_.begin(), kids_.end(), [&](const auto& k) { return k.get() == &kid; });
    if (it == kids_.end()) return false;
    owned = std::move(*it);
    kids_.erase(it);
  }
  return true;  // destroyed here, outside the lock
}

Scope& Scope::root() noexcept {
  Scope* s = this;
  while (s->parent_) s = s->parent_;
  return *s;
}

std::size_t Scope::kid_count() const {
  std::shared_lock<std::shared_mutex> lock(*mutex_);
  return kids_.size();
}

Variable& Scope::var(std::string_view name) {
  if (name.empty()) throw_error(ErrorKind::InvalidArgument, "Scope::var: empty variable name");
  {
    std::shared_lock<std::shared_mutex> lock(*mutex_);
    if (auto it = vars_.find(name); it != vars_.end()) return *it->second;
  }
  std::unique_lock<std::shared_mutex> lock(*mutex_);
  auto [it, inserted] = vars_.try_emplace(std::string(name), nullptr);
  if (inserted) it->second = std::make_unique<Variable>(std::string(name));
  return *it->second;
}

Variable* Scope::find_local_var(std::string_view name) const {
  std::shared_lock<std::shared_mutex> lock(*mutex_);
  auto it = vars_.find(name);
  return it == vars_.end() ? nullptr : it->second.get();
}

Variable* Scope::find_var(std::string_view name) const {
  for (const Scope* s = this; s; s = s->parent_)
    if (Variable* v = s->find_local_var(name)) return v;
  return nullptr;
}

const Scope* Scope::find_scope(std::string_view name) const {
  for (const Scope* s = this; s; s = s->parent_)
    if (s->find_local_var(name)) return s;
  return nullptr;
}

std::size_t Scope::erase_one(std::string_view name) {
  auto it = vars_.find(name);
  if (it == vars_.end()) return 0;
  vars_.erase(it);
  return 1;
}

std::size_t Scope::erase_vars(std::span<const std::string> names) {
  std::unique_lock<std::shared_mutex> lock(*mutex_);
  std::size_t n = 0;
  for (const auto& name : names) n += erase_one(name);
  return n;
}

std::size_t Scope::erase_vars(std::initializer_list<std::string_view> names) {
  std::unique_lock<std::shared_mutex> lock(*mutex_);
  std::size_t n = 0;
  for (auto name : names) n += erase_one(name);
  return n;
}

std::vector<std::string> Scope::local_var_names() const {
  std::vector<std::string> names;
  {
    std::shared_lock<std::shared_mutex> lock(*mutex_);
    names.reserve(vars_.size());
    for (const auto& [name, var] : vars_) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::size_t Scope::local_var_count() const {
  std::shared_lock<std::shared_mutex> lock(*mutex_);
  return vars_.size();
}

}  // namespace kiln

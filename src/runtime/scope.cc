// Scope: the variable tree (seed 001 §3.1).
#include "kiln/runtime/scope.h"

#include <algorithm>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

namespace kiln {

struct Scope::State {
  struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept {
      return std::hash<std::string_view>{}(s);
    }
  };
  std::shared_mutex mutex;  // guards vars and kids
  std::unordered_map<std::string, std::unique_ptr<Variable>, StringHash, std::equal_to<>> vars;
  std::vector<std::unique_ptr<Scope>> kids;
  std::shared_ptr<const void> alive = std::make_shared<char>();
};

Scope::Scope() : state_(std::make_unique<State>()) {}

Scope::Scope(Scope* parent) : parent_(parent), state_(std::make_unique<State>()) {}

Scope::~Scope() = default;

std::weak_ptr<const void> Scope::lifetime() const { return state_->alive; }

Scope& Scope::new_scope() {
  auto kid = std::unique_ptr<Scope>(new Scope(this));
  Scope& ref = *kid;
  std::unique_lock<std::shared_mutex> lock(state_->mutex);
  state_->kids.push_back(std::move(kid));
  return ref;
}

void Scope::drop_kids() {
  std::vector<std::unique_ptr<Scope>> kids;
  {
    std::unique_lock<std::shared_mutex> lock(state_->mutex);
    kids.swap(state_->kids);
  }
  // Destroyed outside the lock: a variable's destructor may free buffers.
}

bool Scope::drop_kid(Scope& kid) {
  std::unique_ptr<Scope> owned;
  {
    std::unique_lock<std::shared_mutex> lock(state_->mutex);
    auto it = std::find_if(state_->kids.begin(), state_->kids.end(), [&](const auto& k) { return k.get() == &kid; });
    if (it == state_->kids.end()) return false;
    owned = std::move(*it);
    state_->kids.erase(it);
  }
  return true;  // destroyed here, outside the lock
}

Scope& Scope::root() noexcept {
  Scope* s = this;
  while (s->parent_) s = s->parent_;
  return *s;
}

std::size_t Scope::kid_count() const {
  std::shared_lock<std::shared_mutex> lock(state_->mutex);
  return state_->kids.size();
}

Variable& Scope::var(std::string_view name) {
  if (name.empty()) throw_error(ErrorKind::InvalidArgument, "Scope::var: empty variable name");
  {
    std::shared_lock<std::shared_mutex> lock(state_->mutex);
    if (auto it = state_->vars.find(name); it != state_->vars.end()) return *it->second;
  }
  std::unique_lock<std::shared_mutex> lock(state_->mutex);
  auto [it, inserted] = state_->vars.try_emplace(std::string(name), nullptr);
  if (inserted) it->second = std::make_unique<Variable>(std::string(name));
  return *it->second;
}

Variable* Scope::find_local_var(std::string_view name) const {
  std::shared_lock<std::shared_mutex> lock(state_->mutex);
  auto it = state_->vars.find(name);
  return it == state_->vars.end() ? nullptr : it->second.get();
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
  auto it = state_->vars.find(name);
  if (it == state_->vars.end()) return 0;
  state_->vars.erase(it);
  return 1;
}

std::size_t Scope::erase_vars(std::span<const std::string> names) {
  std::unique_lock<std::shared_mutex> lock(state_->mutex);
  std::size_t n = 0;
  for (const auto& name : names) n += erase_one(name);
  return n;
}

std::size_t Scope::erase_vars(std::initializer_list<std::string_view> names) {
  std::unique_lock<std::shared_mutex> lock(state_->mutex);
  std::size_t n = 0;
  for (auto name : names) n += erase_one(name);
  return n;
}

std::vector<std::string> Scope::local_var_names() const {
  std::vector<std::string> names;
  {
    std::shared_lock<std::shared_mutex> lock(state_->mutex);
    names.reserve(state_->vars.size());
    for (const auto& [name, var] : state_->vars) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::size_t Scope::local_var_count() const {
  std::shared_lock<std::shared_mutex> lock(state_->mutex);
  return state_->vars.size();
}

}  // namespace kiln

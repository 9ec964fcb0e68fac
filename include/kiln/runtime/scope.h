// Scope: the tree of named Variables (seed 001 §3.1 BuildVariableScope): the
// root holds parameters (persistable), the executor's local kid scope holds
// temporaries; find_var looks through parents. Lookups and creations are
// thread-safe; the executor resolves names once, at pre-analysis, so its run
// path never touches a Scope.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/runtime/variable.h"

namespace kiln {

class Scope {
 public:
  // A root scope.
  Scope();
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

  // A new kid, owned by this scope (alive until drop_kids() or destruction).
  Scope& new_scope();
  // Destroys every kid (and their variables). Pointers into them dangle.
  void drop_kids();
  // Destroys one kid (and its variables); false when `kid` is not a kid of this scope.
  bool drop_kid(Scope& kid);
  const Scope* parent() const noexcept { return parent_; }
  Scope* parent() noexcept { return parent_; }
  // The ancestor-most scope (parameters live there).
  Scope& root() noexcept;
  std::size_t kid_count() const;
  // Expires when this scope is destroyed: a holder of a kid it made (an
  // executor's run state) checks it before giving the kid back, and an
  // executor before reusing a core built for this scope.
  std::weak_ptr<const void> lifetime() const;

  // The variable `name` in this scope, created empty if absent here (a
  // parent's variable of the same name is shadowed, not returned).
  // kiln::Error (InvalidArgument) for an empty name.
  Variable& var(std::string_view name);
  // The variable `name` here or in the nearest ancestor; nullptr when absent.
  Variable* find_var(std::string_view name) const;
  // The variable `name` in this scope only; nullptr when absent.
  Variable* find_local_var(std::string_view name) const;
  // The scope (this or an ancestor) holding `name`; nullptr when absent.
  const Scope* find_scope(std::string_view name) const;

  // Erases the named variables of this scope; absent names are ignored.
  // Returns how many were erased. Pointers to them dangle.
  std::size_t erase_vars(std::span<const std::string> names);
  std::size_t erase_vars(std::initializer_list<std::string_view> names);
  // Names of this scope's variables, sorted.
  std::vector<std::string> local_var_names() const;
  std::size_t local_var_count() const;

 private:
  // The variables, the kids, their lock (a std::shared_mutex) and the
  // lifetime token, defined in scope.cc: kept out of this header so that
  // its includers neither read <shared_mutex> nor instantiate the maps.
  struct State;
  explicit Scope(Scope* parent);
  std::size_t erase_one(std::string_view name);  // caller holds the lock exclusively

  Scope* parent_ = nullptr;
  std::unique_ptr<State> state_;
};

}  // namespace kiln

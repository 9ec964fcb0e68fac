// IrContext: owns and uniques every type and attribute storage (equal ⇔ same
// pointer; get is thread-safe), the dialect registry and the op registry
// (OpInfo by name and by TypeId). Seed 002 §二 ("IRContext 负责 OpInfoImpl 的
// 创建和回收"). kiln uses one process-wide context: IrContext::instance().
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>
#include <vector>

#include "kiln/ir/attribute.h"
#include "kiln/ir/op_info.h"
#include "kiln/ir/type.h"
#include "kiln/support/hash.h"

namespace kiln {

class IrContext {
 public:
  ~IrContext();
  IrContext(const IrContext&) = delete;
  IrContext& operator=(const IrContext&) = delete;

  // The process-wide context; builtin and kiln dialects are registered in it.
  static IrContext* instance();

  // ---- uniquing (thread-safe) -------------------------------------------
  struct UniqueFns {
    bool (*equal)(const void* storage, const void* key);
    void* (*create)(void* key, const detail::AbstractKind* kind);  // may move from key
    void (*destroy)(void* storage);
  };
  // The storage of kind `kind` whose key equals `key`, created on first use
  // (fns.create may then move from `key`).
  const void* unique(const detail::AbstractKind* kind, std::size_t key_hash, void* key,
                     const UniqueFns& fns);

  // ---- kinds -------------------------------------------------------------
  // Registers (once) the kind for a concrete type / attribute class; the
  // dialect is named by the prefix of T::name before '.', "builtin" if none.
  template <typename T> const detail::AbstractKind* type_kind();
  template <typename T> const detail::AbstractKind* attribute_kind();
  const detail::AbstractKind* find_type_kind(std::string_view name) const;
  const detail::AbstractKind* find_attribute_kind(std::string_view name) const;

  // ---- dialects ----------------------------------------------------------
  template <typename D> D* get_or_register_dialect();
  Dialect* dialect(std::string_view name) const;
  Dialect* dialect(TypeId id) const;
  // The dialect named `name`, created as a plain Dialect if absent.
  Dialect* get_or_create_dialect(std::string_view name);
  std::vector<Dialect*> dialects() const;

  // ---- ops ---------------------------------------------------------------
  template <typename OpT> OpInfo register_op();
  // The OpInfo of OpT, registering it on first use (cached after that).
  template <typename OpT> OpInfo op_info();
  OpInfo find_op(std::string_view name) const;  // null OpInfo if unknown
  OpInfo find_op(TypeId id) const;
  // Like find_op but throws kiln::Error(NotFound) naming the op.
  OpInfo op_info(std::string_view name) const;
  std::vector<OpInfo> registered_ops() const;

  // Internal: registration primitives used by the templates above.
  const detail::AbstractKind* add_kind(bool is_type, detail::AbstractKind kind);
  Dialect* add_dialect(std::unique_ptr<Dialect> dialect);
  OpInfo add_op(std::unique_ptr<detail::OpInfoImpl> info);

 private:
  IrContext();  // only instance(): kiln's caches assume one context
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln

// Storage behind Type and Attribute handles (seed 002 §二, "Pimpl": a handle
// is one pointer; the storage is uniqued and owned by the IrContext, so equal
// types or attributes are the same pointer and compare in O(1)).
#pragma once

#include <iosfwd>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "kiln/support/error.h"
#include "kiln/support/type_id.h"

namespace kiln {

class Dialect;
class IrContext;
class Type;
class Attribute;

namespace detail {

// What every type (or attribute) kind shares: its id, name, dialect and the
// functions that print it and move it to and from JSON. One per kind,
// created when a dialect registers the kind.
struct AbstractKind {
  TypeId id;
  std::string name;  // "tensor", "f32", "i64", "dict", ...
  Dialect* dialect = nullptr;
  bool parametric = false;
  void (*print)(const void* storage, std::ostream& os) = nullptr;
  void (*save)(const void* storage, nlohmann::json& params) = nullptr;
  // Rebuilds a handle's storage from its JSON parameters (null for singletons).
  const void* (*load)(const nlohmann::json& params) = nullptr;
};

}  // namespace detail

// Base of every uniqued type storage. Parametric types derive from it and add
// `KeyTy`, `operator==(const KeyTy&)`, `static size_t hash_key(const KeyTy&)`
// and a constructor from `KeyTy`.
struct TypeStorage {
  const detail::AbstractKind* kind = nullptr;
};

struct AttributeStorage {
  const detail::AbstractKind* kind = nullptr;
};

}  // namespace kiln

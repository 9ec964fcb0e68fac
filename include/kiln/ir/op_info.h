// OpInfo: what all ops of one type share (seed 002 §2.2.2) — name, dialect,
// the sorted trait ids, the sorted interface id → concept table, declared
// attribute names, operand/result/region counts, verify hooks and the inplace
// alias map. Built once per op type at registration; looked up by binary
// search, never by string compare.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/support/type_id.h"

namespace kiln {

class Dialect;
class DictionaryAttribute;
class Operation;

namespace detail {

struct OpInfoImpl {
  TypeId id;
  std::string name;  // "kiln.matmul"
  Dialect* dialect = nullptr;
  std::vector<TypeId> traits;                               // sorted
  std::vector<std::pair<TypeId, const void*>> interfaces;   // sorted by id
  // Declared attributes with their expected kind name ("bool", "i64", ...).
  std::vector<std::pair<std::string, std::string>> attributes;
  // The attributes given plus the op's defaults for those missing (an op
  // declaring attribute_defaults(), for attributes added after programs
  // were saved without them); null when it declares none.
  DictionaryAttribute (*with_attribute_defaults)(const DictionaryAttribute&) = nullptr;
  int num_operands = -1;  // -1: variadic
  // Trailing operands an op may leave out (MLIR's Optional<>): it takes
  // num_operands .. num_operands + num_optional_operands of them.
  int num_optional_operands = 0;
  bool takes_operands(std::size_t n) const {
    return num_operands < 0 || (n >= std::size_t(num_operands) &&
                                n <= std::size_t(num_operands + num_optional_operands));
  }
  // "3" or "3 or 4": for errors.
  std::string operand_count() const;
  int num_results = -1;
  int num_regions = 0;
  // (output index, input index) pairs of an Inplace op.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> inplace_map;
  // (output index, input index) pairs of a ViewLike op.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> view_map;
  // Declared-attribute check, trait verifiers, then the op's own verify().
  void (*verify)(Operation*) = nullptr;
  std::vector<void (*)(Operation*)> trait_verifiers;
};

}  // namespace detail

class OpInfo {
 public:
  OpInfo() = default;
  explicit OpInfo(const detail::OpInfoImpl* impl) : impl_(impl) {}

  explicit operator bool() const { return impl_ != nullptr; }
  bool operator==(const OpInfo&) const = default;

  TypeId id() const { return impl_->id; }
  const std::string& name() const { return impl_->name; }
  Dialect* dialect() const { return impl_->dialect; }
  const detail::OpInfoImpl* impl() const { return impl_; }

  bool has_trait(TypeId trait) const;
  template <typename Trait> bool has_trait() const { return has_trait(TypeId::get<Trait>()); }
  bool has_interface(TypeId iface) const { return interface_concept(iface) != nullptr; }
  template <typename I> bool has_interface() const { return has_interface(TypeId::get<I>()); }
  // The interface's concept table for this op type, or null.
  const void* interface_concept(TypeId iface) const;

 private:
  const detail::OpInfoImpl* impl_ = nullptr;
};

inline bool OpInfo::has_trait(TypeId trait) const {
  const auto& t = impl_->traits;
  std::size_t lo = 0, hi = t.size();
  while (lo < hi) {
    std::size_t mid = (lo + hi) / 2;
    if (t[mid] < trait) lo = mid + 1;
    else hi = mid;
  }
  return lo < t.size() && t[lo] == trait;
}

inline const void* OpInfo::interface_concept(TypeId iface) const {
  const auto& t = impl_->interfaces;
  std::size_t lo = 0, hi = t.size();
  while (lo < hi) {
    std::size_t mid = (lo + hi) / 2;
    if (t[mid].first < iface) lo = mid + 1;
    else hi = mid;
  }
  return lo < t.size() && t[lo].first == iface ? t[lo].second : nullptr;
}

}  // namespace kiln

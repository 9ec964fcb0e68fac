// OpBase, OpTraitBase, OpInterfaceBase: the handles that give an Operation*
// a typed face (seed 002 §2.1.3, §2.2.1). A trait is a marker that needs no
// per-op code (ReadOnly, Inplace, …); an interface is a concept table of
// function pointers filled per op type by its Model<ConcreteOp> (the
// concept/model idiom), so a missing method is a compile error.
#pragma once

#include "kiln/ir/operation.h"

namespace kiln {

namespace detail {
struct OpTraitTag {};
struct OpInterfaceTag {};
}  // namespace detail

class OpBase {
 public:
  explicit OpBase(Operation* op = nullptr) : op_(op) {}

  Operation* operation() const { return op_; }
  operator Operation*() const { return op_; }  // NOLINT: an op handle is an Operation*
  Operation* operator->() const { return op_; }
  explicit operator bool() const { return op_ != nullptr; }

  OpResult result(std::uint32_t i = 0) const { return op_->result(i); }
  Value operand(std::uint32_t i) const { return op_->operand_source(i); }

 protected:
  Operation* op_;
};

template <typename ConcreteTrait>
class OpTraitBase : public OpBase, public detail::OpTraitTag {
 public:
  using OpBase::OpBase;
  static TypeId trait_id() { return TypeId::get<ConcreteTrait>(); }
};

template <typename ConcreteInterface>
class OpInterfaceBase : public OpBase, public detail::OpInterfaceTag {
 public:
  OpInterfaceBase(Operation* op = nullptr, const void* concept_table = nullptr)
      : OpBase(concept_table ? op : nullptr), concept_(concept_table) {}
  static TypeId interface_id() { return TypeId::get<ConcreteInterface>(); }

 protected:
  template <typename Concept>
  const Concept* concept_table() const {
    return static_cast<const Concept*>(concept_);
  }

 private:
  const void* concept_;
};

template <typename T>
inline constexpr bool is_interface_v = std::is_base_of_v<detail::OpInterfaceTag, T>;
template <typename T>
inline constexpr bool is_trait_v = std::is_base_of_v<detail::OpTraitTag, T>;

}  // namespace kiln

// The interfaces every pass and the executor rely on: InferMeta (result
// types from operand types and attributes) and Vjp (builds an op's gradient
// ops; used by autodiff). Interface = Concept (function pointers) + Model<Op>
// (fills them from the op's static methods), seed 002 §2.2.1.
#pragma once

#include <vector>

#include "kiln/ir/op_base.h"

namespace kiln {

class Builder;

// An op with InferMeta declares
//   static std::vector<Type> infer_meta(const std::vector<Type>& operand_types,
//                                       DictionaryAttribute attributes);
// and throws kiln::Error(InvalidArgument) for operands it cannot take.
class InferMetaInterface : public OpInterfaceBase<InferMetaInterface> {
 public:
  struct Concept {
    std::vector<Type> (*infer_meta)(const std::vector<Type>&, DictionaryAttribute);
  };
  template <typename ConcreteOp>
  struct Model : Concept {
    static_assert(requires(const std::vector<Type>& t, DictionaryAttribute a) {
      { ConcreteOp::infer_meta(t, a) } -> std::same_as<std::vector<Type>>;
    }, "an op with InferMetaInterface must define static std::vector<Type> "
       "infer_meta(const std::vector<Type>&, DictionaryAttribute)");
    constexpr Model() : Concept{&ConcreteOp::infer_meta} {}
  };

  using OpInterfaceBase::OpInterfaceBase;
  std::vector<Type> infer_meta(const std::vector<Type>& operand_types,
                               DictionaryAttribute attributes) const {
    return concept_table<Concept>()->infer_meta(operand_types, attributes);
  }
  // Re-infers this op's result types from its current operands.
  std::vector<Type> infer_meta() const {
    return infer_meta(op_->operand_types(), op_->attributes());
  }
};

// An op with Vjp declares
//   static std::vector<Value> vjp(Builder& b, Operation* op,
//                                 const std::vector<Value>& out_grads);
// returning one gradient per operand (a null Value where there is none);
// out_grads has one entry per result (null where no gradient flows).
class VjpInterface : public OpInterfaceBase<VjpInterface> {
 public:
  struct Concept {
    std::vector<Value> (*vjp)(Builder&, Operation*, const std::vector<Value>&);
  };
  template <typename ConcreteOp>
  struct Model : Concept {
    static_assert(requires(Builder& b, Operation* op, const std::vector<Value>& g) {
      { ConcreteOp::vjp(b, op, g) } -> std::same_as<std::vector<Value>>;
    }, "an op with VjpInterface must define static std::vector<Value> "
       "vjp(Builder&, Operation*, const std::vector<Value>&)");
    constexpr Model() : Concept{&ConcreteOp::vjp} {}
  };

  using OpInterfaceBase::OpInterfaceBase;
  std::vector<Value> vjp(Builder& b, const std::vector<Value>& out_grads) const {
    return concept_table<Concept>()->vjp(b, op_, out_grads);
  }
};

}  // namespace kiln

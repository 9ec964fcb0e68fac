// The two conversions between kiln's tensor types (seed 002 §2.5): a
// `tensor` may have aliases and be written in place; a `vtensor` has value
// semantics — read-only, never aliased, never changed once made — so ops
// over vtensors may be reordered, merged or fused freely.
//   vt = kiln.to_vtensor(t)   tensor  → vtensor, a deep copy
//   t  = kiln.to_tensor(vt)   vtensor → tensor,  a deep copy
// The "vtensor" pass (kiln/passes/value_semantics.h) inserts them around
// value-semantics ops and removes the pairs it proves unneeded.
#pragma once

#include <string_view>
#include <vector>

#include "kiln/ir/builder.h"
#include "kiln/ir/builtin_types.h"
#include "kiln/ir/interfaces.h"
#include "kiln/ir/op.h"
#include "kiln/ir/traits.h"

namespace kiln {

struct ToVTensorOp : Op<ToVTensorOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.to_vtensor";
  static constexpr int num_operands = 1, num_results = 1;
  static void build(Builder&, OperationArgument& arg, Value t) { arg.add_operand(t); }
  // kiln::Error naming the op when the operand is not a tensor.
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

struct ToTensorOp : Op<ToTensorOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.to_tensor";
  static constexpr int num_operands = 1, num_results = 1;
  static void build(Builder&, OperationArgument& arg, Value vt) { arg.add_operand(vt); }
  // kiln::Error naming the op when the operand is not a vtensor.
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

}  // namespace kiln

// The builtin dialect (seed 002 §2.1.4): its types and attributes (see
// ir/builtin_types.h, ir/builtin_attributes.h) and the ops that tie a Program
// to its named parameters — `builtin.parameter` reads one, and
// `builtin.set_parameter` writes one (what a startup program does).
#pragma once

#include "kiln/ir/builder.h"
#include "kiln/ir/builtin_types.h"
#include "kiln/ir/interfaces.h"

namespace kiln {

class BuiltinDialect : public Dialect {
 public:
  BuiltinDialect() : Dialect("builtin", TypeId::get<BuiltinDialect>()) {}
};

// %w = builtin.parameter() {parameter_name = "linear_0.w_0"} : () -> tensor<…>
struct ParameterOp : Op<ParameterOp, ReadOnly> {
  using Op::Op;
  static constexpr std::string_view name = "builtin.parameter";
  static constexpr int num_operands = 0, num_results = 1;
  KILN_ATTRIBUTES((std::string, parameter_name));
  static void build(Builder& b, OperationArgument& arg, const std::string& name, Type type);
  std::string parameter_name() const { return attrs().parameter_name; }
};

// builtin.set_parameter(%v) {parameter_name = "linear_0.w_0"} : (tensor<…>) -> ()
struct SetParameterOp : Op<SetParameterOp, SideEffect> {
  using Op::Op;
  static constexpr std::string_view name = "builtin.set_parameter";
  static constexpr int num_operands = 1, num_results = 0;
  KILN_ATTRIBUTES((std::string, parameter_name));
  static void build(Builder& b, OperationArgument& arg, Value value, const std::string& name);
  std::string parameter_name() const { return attrs().parameter_name; }
};

// %c = builtin.constant() {value = 1.0} : () -> f64 — a compile-time scalar
// as a value (seed 002 §2.1: "ConstOp").
struct ConstantOp : Op<ConstantOp, ReadOnly> {
  using Op::Op;
  static constexpr std::string_view name = "builtin.constant";
  static constexpr int num_operands = 0, num_results = 1;
  static void build(Builder& b, OperationArgument& arg, Attribute value, Type type);
  void verify() const;
  Attribute value() const { return op_->attribute("value"); }
};

}  // namespace kiln

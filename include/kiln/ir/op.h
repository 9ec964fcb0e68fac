// Op<ConcreteOp, TraitsAndInterfaces…>: the CRTP base of every op class
// (seed 002 §2.3). The list is split into traits and interfaces with a plain
// fold at registration (no type-list metaprogramming: DESIGN.md measured
// hana::partition at ~25× the compile time), giving a sorted trait-id array
// and a sorted interface-id → concept table in the OpInfo.
//
//   struct MatmulOp : Op<MatmulOp, ReadOnly, InferMetaInterface> {
//     using Op::Op;
//     static constexpr std::string_view name = "kiln.matmul";
//     static constexpr int num_operands = 2, num_results = 1;
//     KILN_ATTRIBUTES((bool, transpose_y));
//     static void build(Builder&, OperationArgument&, Value x, Value y, bool ty = false);
//     static std::vector<Type> infer_meta(const std::vector<Type>&, DictionaryAttribute);
//   };
#pragma once

#include <memory>
#include <type_traits>

#include "kiln/ir/attribute_struct.h"
#include "kiln/ir/dialect.h"
#include "kiln/ir/op_base.h"
#include "kiln/ir/traits.h"

namespace kiln {

template <typename ConcreteOp, typename... TraitsAndInterfaces>
class Op : public OpBase {
 public:
  using OpBase::OpBase;

  template <typename T>
  static constexpr bool declares = (std::is_same_v<T, TraitsAndInterfaces> || ...);

  static bool classof(const Operation* op) {
    return op && op->info().id() == TypeId::get<ConcreteOp>();
  }
  static ConcreteOp dyn_cast(Operation* op) {
    return classof(op) ? ConcreteOp(op) : ConcreteOp(nullptr);
  }

  // The op's attributes as its reflected struct (ops that declare one).
  template <typename C = ConcreteOp>
  typename C::Attributes attrs() const {
    return from_attributes<typename C::Attributes>(op_->attributes(), C::name);
  }

  static std::unique_ptr<detail::OpInfoImpl> make_info();

 private:
  static void verify_declared(Operation* op);
};

namespace detail {
template <typename I, typename ConcreteOp>
inline constexpr typename I::template Model<ConcreteOp> interface_model{};

// The interface's Model<ConcreteOp> as the OpInfo stores it; null for a trait.
template <typename T, typename ConcreteOp, bool = is_interface_v<T>>
inline constexpr const void* model_of = nullptr;
template <typename T, typename ConcreteOp>
inline constexpr const void* model_of<T, ConcreteOp, true> = &interface_model<T, ConcreteOp>;

// Compile time: everything per op type that does not need the op type lives
// out of line (src/ir/ir_context.cc) or in templates of the trait/interface
// alone (instantiated once per trait, not once per op).
void add_op_entry(OpInfoImpl& info, TypeId id, const void* model, void (*verifier)(Operation*));
void finish_op_info(OpInfoImpl& info);  // sorts the trait and interface tables

template <typename T>
void add_op_part(OpInfoImpl& info, const void* model) {
  static_assert(is_interface_v<T> || is_trait_v<T>, "Op<> arguments must be traits or interfaces");
  void (*verifier)(Operation*) = nullptr;
  if constexpr (!is_interface_v<T>)
    if constexpr (requires { &T::verify_trait; }) verifier = &T::verify_trait;
  add_op_entry(info, TypeId::get<T>(), model, verifier);
}

template <typename C>
void copy_alias_map(const C& map, std::vector<std::pair<std::uint32_t, std::uint32_t>>& out) {
  for (const auto& [o, i] : map) out.emplace_back(o, i);
}
}  // namespace detail

namespace detail {
// `attrs` plus each of Op::attribute_defaults() it lacks.
template <typename ConcreteOp>
DictionaryAttribute with_attribute_defaults(const DictionaryAttribute& attrs) {
  DictionaryAttribute out = attrs;
  for (const auto& [key, value] : ConcreteOp::attribute_defaults())
    if (!out.contains(key)) out = out.with(key, value);
  return out;
}
}  // namespace detail

// What the text parser and the JSON loader give an op of `info`: `attrs`
// with the op's default for each declared attribute they lack (MLIR's
// DefaultValuedAttr), so that programs saved before an attribute existed
// still load; `attrs` itself for an op without defaults.
inline DictionaryAttribute with_attribute_defaults(OpInfo info, const DictionaryAttribute& attrs) {
  const auto fill = info.impl()->with_attribute_defaults;
  return fill ? fill(attrs) : attrs;
}

template <typename ConcreteOp, typename... Ts>
std::unique_ptr<detail::OpInfoImpl> Op<ConcreteOp, Ts...>::make_info() {
  static_assert(sizeof(ConcreteOp) == sizeof(OpBase),
                "op classes carry no data members: everything lives in the Operation");
  static_assert(requires { ConcreteOp::name; }, "an op needs `static constexpr std::string_view name`");
  static_assert(ConcreteOp::name.data()[ConcreteOp::name.size()] == '\0',
                "an op's name ends in a NUL, as a literal's does, so name.data() is a C string");
  auto info = std::make_unique<detail::OpInfoImpl>();
  info->id = TypeId::get<ConcreteOp>();
  info->name = std::string(ConcreteOp::name);
  (detail::add_op_part<Ts>(*info, detail::model_of<Ts, ConcreteOp>), ...);
  if constexpr (requires { ConcreteOp::num_operands; }) info->num_operands = ConcreteOp::num_operands;
  if constexpr (requires { ConcreteOp::num_optional_operands; })
    info->num_optional_operands = ConcreteOp::num_optional_operands;
  if constexpr (requires { ConcreteOp::num_results; }) info->num_results = ConcreteOp::num_results;
  if constexpr (requires { ConcreteOp::num_regions; }) info->num_regions = ConcreteOp::num_regions;
  if constexpr (requires { typename ConcreteOp::Attributes; })
    info->attributes = attribute_schema<typename ConcreteOp::Attributes>();
  if constexpr (requires { ConcreteOp::attribute_defaults(); })
    info->with_attribute_defaults = &detail::with_attribute_defaults<ConcreteOp>;
  if constexpr (declares<Inplace>) {
    static_assert(requires { ConcreteOp::inplace_map; },
                  "an Inplace op must declare static constexpr inplace_map {{out, in}, ...}");
    detail::copy_alias_map(ConcreteOp::inplace_map, info->inplace_map);
  }
  if constexpr (declares<ViewLike>) {
    static_assert(requires { ConcreteOp::view_map; },
                  "a ViewLike op must declare static constexpr view_map {{out, in}, ...}");
    detail::copy_alias_map(ConcreteOp::view_map, info->view_map);
  }
  info->verify = &verify_declared;
  detail::finish_op_info(*info);
  return info;
}

template <typename ConcreteOp, typename... Ts>
void Op<ConcreteOp, Ts...>::verify_declared(Operation* op) {
  if constexpr (requires { typename ConcreteOp::Attributes; })
    (void)from_attributes<typename ConcreteOp::Attributes>(op->attributes(), ConcreteOp::name);
  if constexpr (requires(ConcreteOp o) { o.verify(); }) ConcreteOp(op).verify();
}

// ---- registration (IrContext templates that need Op<>) ----

template <typename OpT>
OpInfo IrContext::register_op() {
  std::unique_ptr<detail::OpInfoImpl> info = OpT::make_info();
  info->dialect = get_or_create_dialect(detail::dialect_prefix(OpT::name));
  return add_op(std::move(info));
}

template <typename OpT>
OpInfo IrContext::op_info() {
  static const OpInfo info = register_op<OpT>();  // once per process
  return info;
}

// ---- Operation templates that need Op<> ----

template <typename T>
T Operation::dyn_cast() {
  if constexpr (is_interface_v<T>) return T(this, info_.interface_concept(TypeId::get<T>()));
  else return T::dyn_cast(this);
}

template <typename OpT>
bool Operation::isa() const {
  return OpT::classof(this);
}

// Registers ops in the process-wide context when the library or program
// that defines them loads, so that programs naming them (JSON) find them:
//   KILN_REGISTER_OP(MyOp);
//   KILN_REGISTER_OP(MyOp, GradOf<MyOp>);
// An op is also registered on its first Builder::create; this is the one
// way to register it ahead of that.
template <typename... Ops>
struct OpRegistrar {
  OpRegistrar() { (IrContext::instance()->op_info<Ops>(), ...); }
};

#define KILN_OP_CAT2(a, b) a##b
#define KILN_OP_CAT(a, b) KILN_OP_CAT2(a, b)
#define KILN_REGISTER_OP(...) \
  static const ::kiln::OpRegistrar<__VA_ARGS__> KILN_OP_CAT(kiln_registered_ops_, __COUNTER__)

}  // namespace kiln

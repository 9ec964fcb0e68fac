// GradOf<Fwd>: the gradient op of a forward op, from one template instead of
// a hand-written class per op (seed 001 §1.2.2.1: the *_grad ops
// append_backward adds). A forward op declares only what its gradient op
// looks like, next to its Vjp:
//
//   struct TanhOp : Op<TanhOp, …, VjpInterface> {
//     …
//     // tanh_grad(out, dout) -> dx, dx typed like operand 0
//     struct Grad : GradSpec<2, 0> {};
//   };
//   // in TanhOp::vjp:  b.create<GradOf<TanhOp>>(op, out, dout)
//
// GradOf<Fwd> is then the op "<fwd name>_grad": ReadOnly and ValueSemantics,
// with Fwd's attributes (copied from the forward op it is built from, so its
// kernel decodes them as Fwd::Attributes), Grad::num_operands operands and
// one result per index in GradSpec's list, each typed like that operand. A
// Grad may add `static void check(std::string_view op, const
// std::vector<Type>& in, DictionaryAttribute attrs)` for shape checks beyond
// that. Register it beside its forward op: KILN_REGISTER_OP(TanhOp,
// GradOf<TanhOp>). Also here: the helpers every Vjp uses.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "kiln/dialect/builtin.h"
#include "kiln/dialect/infer_meta_util.h"

namespace kiln {

// Result i of the gradient op takes the type of operand ResultsLike[i].
template <int NumOperands, int... ResultsLike>
struct GradSpec {
  static constexpr int num_operands = NumOperands;
  static constexpr std::array<int, sizeof...(ResultsLike)> results_like{ResultsLike...};
};

namespace detail {

// "kiln.tanh" + "_grad", as a constant. The characters end in a NUL, as a
// literal's do, so name.data() is a C string for a gradient op too.
template <typename Fwd>
struct GradName {
  static constexpr std::string_view suffix = "_grad";
  static constexpr auto chars = [] {
    std::array<char, Fwd::name.size() + suffix.size() + 1> a{};
    for (std::size_t i = 0; i < Fwd::name.size(); ++i) a[i] = Fwd::name[i];
    for (std::size_t i = 0; i < suffix.size(); ++i) a[Fwd::name.size() + i] = suffix[i];
    return a;
  }();
  static constexpr std::string_view value{chars.data(), chars.size() - 1};
};

// Fwd's Attributes, when it declares any.
template <typename Fwd>
struct GradAttributes {};
template <typename Fwd>
  requires requires { typename Fwd::Attributes; }
struct GradAttributes<Fwd> {
  using Attributes = typename Fwd::Attributes;
};
template <typename Fwd>
inline constexpr bool has_attributes_v = requires { typename Fwd::Attributes; };
// Whether A is Fwd's Attributes (false when Fwd has none). A template of A,
// so that a constraint using it is checked only when build() is called.
template <typename A, typename Fwd>
inline constexpr bool is_attributes_of_v = false;
template <typename A, typename Fwd>
  requires requires { typename Fwd::Attributes; }
inline constexpr bool is_attributes_of_v<A, Fwd> = std::is_same_v<A, typename Fwd::Attributes>;

// The shared InferMeta of gradient ops: operand count, every operand a
// tensor, result i typed like operand results_like[i].
std::vector<Type> infer_grad(std::string_view op, const std::vector<Type>& in,
                             int num_operands, const int* results_like, std::size_t num_results);

}  // namespace detail

template <typename Fwd>
struct GradOf : Op<GradOf<Fwd>, ReadOnly, ValueSemantics, InferMetaInterface>,
                detail::GradAttributes<Fwd> {
  using Spec = typename Fwd::Grad;
  using Op<GradOf<Fwd>, ReadOnly, ValueSemantics, InferMetaInterface>::Op;
  static constexpr std::string_view name = detail::GradName<Fwd>::value;
  static constexpr int num_operands = Spec::num_operands;
  static constexpr int num_results = static_cast<int>(Spec::results_like.size());

  // From a Vjp: the forward op (its attributes are copied) and the operands.
  template <typename... V>
    requires(std::is_convertible_v<V, Value> && ...)
  static void build(Builder&, OperationArgument& arg, Operation* fwd, V... operands) {
    (arg.add_operand(operands), ...);
    for (const auto& [k, v] : fwd->attributes()) arg.add_attribute(k, v);
  }
  // Directly, with the attributes given as the forward op's struct.
  template <typename A, typename... V>
    requires(detail::is_attributes_of_v<A, Fwd> && (std::is_convertible_v<V, Value> && ...))
  static void build(Builder&, OperationArgument& arg, const A& attrs, V... operands) {
    (arg.add_operand(operands), ...);
    arg.attributes = to_named_attributes(attrs);
  }
  // The same two with the operands in a vector (a run-time count: a Grad
  // whose num_operands is -1).
  static void build(Builder&, OperationArgument& arg, Operation* fwd, const std::vector<Value>& operands) {
    for (Value v : operands) arg.add_operand(v);
    for (const auto& [k, v] : fwd->attributes()) arg.add_attribute(k, v);
  }
  template <typename A>
    requires detail::is_attributes_of_v<A, Fwd>
  static void build(Builder&, OperationArgument& arg, const A& attrs, const std::vector<Value>& operands) {
    for (Value v : operands) arg.add_operand(v);
    arg.attributes = to_named_attributes(attrs);
  }
  // Directly, for a forward op without attributes.
  template <typename... V>
    requires(!detail::has_attributes_v<Fwd> && (std::is_convertible_v<V, Value> && ...))
  static void build(Builder&, OperationArgument& arg, V... operands) {
    (arg.add_operand(operands), ...);
  }

  // The forward op's attribute defaults, when it declares some.
  static std::vector<NamedAttribute> attribute_defaults()
    requires requires { Fwd::attribute_defaults(); }
  {
    return Fwd::attribute_defaults();
  }

  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
    auto out = detail::infer_grad(name, in, num_operands, Spec::results_like.data(),
                                  Spec::results_like.size());
    if constexpr (requires { Spec::check(name, in, attrs); }) Spec::check(name, in, attrs);
    return out;
  }
};

// ---- helpers the Vjps share (usable by user ops' Vjps too) ----
namespace vjp {

// Whether gradients flow through a value: a tensor or tensor_array of a
// floating dtype.
bool differentiable(Value v);
// Whether every out_grad is null (then every input grad is null).
bool all_null(const std::vector<Value>& out_grads);
// kiln::Error unless out_grads has one entry per result of `op`.
void check_out_grads(Operation* op, const std::vector<Value>& out_grads);
// The single out_grad of a one-result op (null when none flows), checked.
Value single_grad(Operation* op, const std::vector<Value>& out_grads);
// `grad` (shaped like the broadcast result of a binary op) reduced to the
// shape of `operand`; `other` is the binary op's other operand. No op is
// added when the shapes are equal for certain at build time.
Value reduce_to_operand(Builder& b, Value grad, Value operand, Value other);
// `grad` reduced to `operand`'s shape unless both static shapes are equal
// and fully known.
Value reduce_to(Builder& b, Value grad, Value operand);
// Zeros shaped like `like`: kiln.full when its static shape is fully known,
// kiln.zeros_like otherwise; an empty array (kiln.array_create) for an array.
Value zeros(Builder& b, Value like);

}  // namespace vjp

}  // namespace kiln

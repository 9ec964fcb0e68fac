// Ops that the fusion passes build (kiln/passes/fusion.h); a user may build
// them too. Each runs as one kernel what several ops ran as several.
//
// kiln.fused_elementwise: a chain of elementwise ops over one shape, run as
// one loop. Its body is a list of steps over registers: $0 … $(n-1) are its
// operands, step i defines $(n+i):
//   $2 = kiln.sub($0, $1); $3 = kiln.square($2); $4 = const(0.0625);
//   $5 = kiln.square_grad($2, $4)
// and `outputs` names the registers its results are ([3, 5]). A step is
//   kiln.<unary>($a)               an op of the unary family (unary_math.h)
//   kiln.<unary>_grad($a, $d)      its gradient op (a = x or y, as the op reads)
//   kiln.<binary>($a, $b)          add, sub, mul, div, maximum, minimum, pow
//   kiln.scale($a){s, b}           s·a + b (bias already after the scale)
//   const(v)                       a constant
//   kiln.mean_grad($d)             d / numel: the gradient of a mean over all
//                                  elements, d one element
// Operand 0 has the result shape; every other operand has that shape or one
// element (broadcast). f32 and f64. Each step computes what its op's kernel
// computes, element for element, so results are bit-identical to the
// unfused ops'.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/ir/builder.h"
#include "kiln/ir/interfaces.h"
#include "kiln/ir/op.h"
#include "kiln/ir/traits.h"

namespace kiln {

struct FusedStep {
  enum class Kind : std::uint8_t { Unary, UnaryGrad, Binary, Scale, Const, MeanAllGrad };
  Kind kind = Kind::Const;
  std::uint16_t fn = 0;  // the op's index in its family (fused_step_names)
  std::int32_t a = -1, b = -1;  // operand registers (-1: none)
  double c0 = 0, c1 = 0;  // scale and bias, or the constant
};

// A fused_elementwise body, parsed from (and printed back to) its text; a
// bad text is a kiln::Error naming the step. Kept as an attribute of type
// str, parsed once when the op's attributes are decoded.
class FusedBody {
 public:
  FusedBody() = default;
  FusedBody(const std::string& text);  // NOLINT(google-explicit-constructor): decoded from str
  operator std::string() const { return text(); }  // NOLINT: encoded as str

  std::string text() const;
  const std::vector<FusedStep>& steps() const { return steps_; }
  // $first is the first step's register: the op's operand count.
  std::int32_t first_register() const { return first_; }
  void add(const FusedStep& s);
  void set_first_register(std::int32_t n) { first_ = n; }
  bool operator==(const FusedBody& o) const { return text() == o.text(); }

 private:
  std::vector<FusedStep> steps_;
  std::int32_t first_ = 0;
};

// The op names a step of each kind may take, in family order (fn indexes them).
const std::vector<std::string_view>& fused_unary_names();
const std::vector<std::string_view>& fused_binary_names();
// The step a fusable op of that name is (kind and fn), or false.
bool fused_step_for(std::string_view op_name, FusedStep& out);

template <>
struct AttributeFor<FusedBody> {
  using type = StrAttribute;
};

struct FusedElementwiseOp : Op<FusedElementwiseOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.fused_elementwise";
  static constexpr int num_operands = -1, num_results = -1;
  KILN_ATTRIBUTES((FusedBody, body), (std::vector<std::int64_t>, outputs));
  static void build(Builder& b, OperationArgument& arg, const std::vector<Value>& inputs,
                    const FusedBody& body, const std::vector<std::int64_t>& outputs);
  // Every result has operand 0's type.
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  // Registers in range and defined before use, outputs defined by steps.
  void verify() const;
};

// kiln.fused_matmul(x, y[, bias]) {transpose_x, transpose_y, activation,
// keep_pre_activation}: matmul's product, then bias added along the last
// dim (bias has that dim's size, or one element), then `activation`, in
// one kernel: the epilogue runs on the product while it is in cache.
// Bit-identical to matmul, add and the activation run one after another on
// the CPU; CUDA rounds a 16-bit sum once and may apply gelu's tanh form
// with cuBLASLt's own tanh (kernels/cuda/fused_matmul.cc). keep_pre_activation (default
// false; an activation needed): a second result, the biased product the
// activation read — what a gradient that reads the activation's input
// (gelu_grad) reads in a training program, cuBLASLt's GELU "aux" output.
//
// Its activation: "" (none), an op of the unary family ("kiln.relu",
// "kiln.tanh", …; `index` its place in fused_unary_names()), "kiln.gelu"
// (gelu's exact erf form) or "kiln.gelu_tanh" (gelu's tanh approximation,
// kiln.gelu{approximate = true}); resolved once, when the op's attributes
// are decoded. Kept as an attribute of type str; an unknown name is a
// kiln::Error.
struct EpilogueActivation {
  enum class Gelu : std::uint8_t { None, Erf, Tanh };
  std::string name;
  int index = -1;  // in the unary family
  Gelu gelu = Gelu::None;
  EpilogueActivation() = default;
  EpilogueActivation(const std::string& n);  // NOLINT(google-explicit-constructor): decoded from str
  operator std::string() const { return name; }  // NOLINT: encoded as str
  bool empty() const { return index < 0 && gelu == Gelu::None; }
};
template <>
struct AttributeFor<EpilogueActivation> {
  using type = StrAttribute;
};
// The name kiln.fused_matmul gives gelu's form (above).
inline std::string gelu_activation_name(bool approximate) {
  return approximate ? "kiln.gelu_tanh" : "kiln.gelu";
}

// Whether a bias of dims `bias` is a row of a product of dims `product`,
// as a linear layer adds it: no more dims, every dim known, and one
// element or the product's (known) last dim with every other dim 1 — the
// bias kiln.fused_matmul takes (and amp lowers with its matmul).
bool is_row_bias(const std::vector<std::int64_t>& bias, const std::vector<std::int64_t>& product);

struct FusedMatmulOp : Op<FusedMatmulOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.fused_matmul";
  static constexpr int num_operands = -1, num_results = -1;
  KILN_ATTRIBUTES((bool, transpose_x), (bool, transpose_y), (EpilogueActivation, activation),
                  (bool, keep_pre_activation));
  // A program saved before keep_pre_activation existed loads with one result.
  static std::vector<NamedAttribute> attribute_defaults() {
    return {{"keep_pre_activation", BoolAttribute::get(false)}};
  }
  static void build(Builder& b, OperationArgument& arg, Value x, Value y, Value bias, bool transpose_x,
                    bool transpose_y, const std::string& activation, bool keep_pre_activation = false);
  // The product's type; twice with keep_pre_activation. kiln::Error: an
  // operand count other than 2 or 3, a bias of another dtype or size,
  // keep_pre_activation without an activation.
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

}  // namespace kiln

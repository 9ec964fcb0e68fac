// Definitions of the fused ops declared in kiln/dialect/fused_ops.h: the
// fused_elementwise body's text form (parse and print), build, InferMeta
// and verification.
#include "kiln/dialect/fused_ops.h"

#include <charconv>
#include <cstdlib>

#include "kiln/dialect/binary_math.h"
#include "kiln/dialect/infer_meta_util.h"
#include "kiln/dialect/linalg_ops.h"
#include "kiln/dialect/unary_math.h"
#include "kiln/support/error.h"

namespace kiln {

KILN_REGISTER_OP(FusedElementwiseOp, FusedMatmulOp);

namespace {

template <typename... Maths>
std::vector<std::string_view> names_of(MathList<Maths...>) {
  return {Maths::name...};
}

constexpr std::string_view kBody = "kiln.fused_elementwise body";

[[noreturn]] void body_error(std::string_view text, std::size_t pos, std::string_view what) {
  throw_error(ErrorKind::InvalidArgument, kBody, " \"", text, "\": ", what, " at offset ", pos);
}

// A cursor over the body text.
struct Reader {
  std::string_view text;
  std::size_t pos = 0;

  void skip_space() {
    while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\n' || text[pos] == '\t')) ++pos;
  }
  bool at_end() {
    skip_space();
    return pos >= text.size();
  }
  bool take(char c) {
    skip_space();
    if (pos < text.size() && text[pos] == c) {
      ++pos;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!take(c)) body_error(text, pos, std::string("expected '") + c + "'");
  }
  std::int32_t reg() {
    expect('$');
    std::int32_t r = -1;
    auto [end, ec] = std::from_chars(text.data() + pos, text.data() + text.size(), r);
    if (ec != std::errc() || r < 0) body_error(text, pos, "expected a register number after '$'");
    pos = static_cast<std::size_t>(end - text.data());
    return r;
  }
  double number() {
    skip_space();
    double v = 0;
    auto [end, ec] = std::from_chars(text.data() + pos, text.data() + text.size(), v);
    if (ec != std::errc()) body_error(text, pos, "expected a number");
    pos = static_cast<std::size_t>(end - text.data());
    return v;
  }
  std::string_view word() {
    skip_space();
    const std::size_t start = pos;
    while (pos < text.size() && (std::isalnum(static_cast<unsigned char>(text[pos])) || text[pos] == '_' ||
                                 text[pos] == '.'))
      ++pos;
    if (pos == start) body_error(text, pos, "expected an op name");
    return text.substr(start, pos - start);
  }
};

void append_number(std::string& out, double v) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);  // shortest round-trip form
  out.append(buf, end);
}

}  // namespace

const std::vector<std::string_view>& fused_unary_names() {
  static const std::vector<std::string_view> names = names_of(UnaryFamily{});
  return names;
}

const std::vector<std::string_view>& fused_binary_names() {
  // The floating binaries (no mod / fmod: their integer checks; no shifts).
  static const std::vector<std::string_view> names = {AddMath::name,     SubMath::name,
                                                      MulMath::name,     DivMath::name,
                                                      MaximumMath::name, MinimumMath::name,
                                                      PowMath::name};
  return names;
}

bool fused_step_for(std::string_view op_name, FusedStep& out) {
  auto find = [&](const std::vector<std::string_view>& names, std::string_view n) -> int {
    for (std::size_t k = 0; k < names.size(); ++k)
      if (names[k] == n) return static_cast<int>(k);
    return -1;
  };
  if (int k = find(fused_unary_names(), op_name); k >= 0) {
    out.kind = FusedStep::Kind::Unary;
    out.fn = static_cast<std::uint16_t>(k);
    return true;
  }
  constexpr std::string_view kGrad = "_grad";
  if (op_name.size() > kGrad.size() && op_name.ends_with(kGrad)) {
    const std::string_view fwd = op_name.substr(0, op_name.size() - kGrad.size());
    if (fwd == "kiln.mean") {
      out.kind = FusedStep::Kind::MeanAllGrad;
      return true;
    }
    if (int k = find(fused_unary_names(), fwd); k >= 0) {
      out.kind = FusedStep::Kind::UnaryGrad;
      out.fn = static_cast<std::uint16_t>(k);
      return true;
    }
  }
  if (int k = find(fused_binary_names(), op_name); k >= 0) {
    out.kind = FusedStep::Kind::Binary;
    out.fn = static_cast<std::uint16_t>(k);
    return true;
  }
  if (op_name == "kiln.scale") {
    out.kind = FusedStep::Kind::Scale;
    return true;
  }
  return false;
}

FusedBody::FusedBody(const std::string& text) {
  Reader r{text};
  if (r.at_end()) return;
  for (std::size_t i = 0;; ++i) {
    const std::int32_t def = r.reg();
    if (i == 0) first_ = def;
    else if (def != first_ + static_cast<std::int32_t>(i))
      body_error(text, r.pos, "step " + std::to_string(i) + " must define $" +
                                  std::to_string(first_ + static_cast<std::int32_t>(i)));
    r.expect('=');
    FusedStep s;
    const std::string_view op = r.word();
    if (op == "const") {
      s.kind = FusedStep::Kind::Const;
      r.expect('(');
      s.c0 = r.number();
      r.expect(')');
    } else {
      if (!fused_step_for(op, s)) body_error(text, r.pos, "'" + std::string(op) + "' is not a fusable op");
      r.expect('(');
      s.a = r.reg();
      const bool two = s.kind == FusedStep::Kind::UnaryGrad || s.kind == FusedStep::Kind::Binary;
      if (two) {
        r.expect(',');
        s.b = r.reg();
      }
      r.expect(')');
      if (s.kind == FusedStep::Kind::Scale) {
        r.expect('{');
        s.c0 = r.number();
        r.expect(',');
        s.c1 = r.number();
        r.expect('}');
      }
      if (s.a >= def || (two && s.b >= def))
        body_error(text, r.pos, "a step reads a register defined later");
    }
    steps_.push_back(s);
    if (r.at_end()) break;
    r.expect(';');
  }
}

void FusedBody::add(const FusedStep& s) { steps_.push_back(s); }

std::string FusedBody::text() const {
  std::string out;
  for (std::size_t i = 0; i < steps_.size(); ++i) {
    const FusedStep& s = steps_[i];
    if (i) out += "; ";
    out += '$' + std::to_string(first_ + static_cast<std::int32_t>(i)) + " = ";
    switch (s.kind) {
      case FusedStep::Kind::Const:
        out += "const(";
        append_number(out, s.c0);
        out += ')';
        continue;
      case FusedStep::Kind::Unary: out += fused_unary_names()[s.fn]; break;
      case FusedStep::Kind::UnaryGrad:
        out += fused_unary_names()[s.fn];
        out += "_grad";
        break;
      case FusedStep::Kind::Binary: out += fused_binary_names()[s.fn]; break;
      case FusedStep::Kind::Scale: out += "kiln.scale"; break;
      case FusedStep::Kind::MeanAllGrad: out += "kiln.mean_grad"; break;
    }
    out += "($" + std::to_string(s.a);
    if (s.b >= 0) out += ", $" + std::to_string(s.b);
    out += ')';
    if (s.kind == FusedStep::Kind::Scale) {
      out += '{';
      append_number(out, s.c0);
      out += ", ";
      append_number(out, s.c1);
      out += '}';
    }
  }
  return out;
}

void FusedElementwiseOp::build(Builder&, OperationArgument& arg, const std::vector<Value>& inputs,
                               const FusedBody& body, const std::vector<std::int64_t>& outputs) {
  if (inputs.empty())
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' needs at least one operand");
  arg.add_operands(inputs);
  arg.attributes = to_named_attributes(Attributes{body, outputs});
}

std::vector<Type> FusedElementwiseOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  const Attributes a = from_attributes<Attributes>(attrs, name);
  if (in.empty())
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' needs at least one operand");
  Type x0 = meta::tensor_operand(name, in, 0);
  const DataType dt = shaped_data_type(x0);
  if (dt != DataType::Float32 && dt != DataType::Float64)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' runs on f32 or f64, operand #0 is ",
                to_string(dt));
  for (std::size_t i = 1; i < in.size(); ++i)
    meta::require_same_dtype(name, dt, shaped_data_type(meta::tensor_operand(name, in, i)), 0, i);
  return std::vector<Type>(a.outputs.size(), meta::result_like(in, dt, shaped_dims(x0)));
}

void FusedElementwiseOp::verify() const {
  const Attributes a = from_attributes<Attributes>(op_->attributes(), name);
  const auto n = static_cast<std::int32_t>(op_->num_operands());
  const auto& steps = a.body.steps();
  if (!steps.empty() && a.body.first_register() != n)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' has ", n,
                " operands, its body's first step must define $", n, ", not $",
                a.body.first_register());
  const auto total = n + static_cast<std::int32_t>(steps.size());
  if (a.outputs.size() != op_->num_results())
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' has ", op_->num_results(),
                " results but ", a.outputs.size(), " outputs");
  for (std::int64_t o : a.outputs)
    if (o < n || o >= total)
      throw_error(ErrorKind::InvalidArgument, "op '", name, "' output $", o,
                  " is not a register its body defines ($", n, " … $", total - 1, ")");
}

EpilogueActivation::EpilogueActivation(const std::string& n) : name(n) {
  if (n.empty()) return;
  if (n == gelu_activation_name(false) || n == gelu_activation_name(true)) {
    gelu = n == gelu_activation_name(true) ? Gelu::Tanh : Gelu::Erf;
    return;
  }
  FusedStep s;
  if (!fused_step_for(n, s) || s.kind != FusedStep::Kind::Unary)
    throw_error(ErrorKind::InvalidArgument, "op 'kiln.fused_matmul' activation '", n,
                "' is not an op of the unary family, kiln.gelu or kiln.gelu_tanh");
  index = s.fn;
}

void FusedMatmulOp::build(Builder&, OperationArgument& arg, Value x, Value y, Value bias,
                          bool transpose_x, bool transpose_y, const std::string& activation,
                          bool keep_pre_activation) {
  arg.add_operand(x);
  arg.add_operand(y);
  if (bias) arg.add_operand(bias);
  arg.attributes =
      to_named_attributes(Attributes{transpose_x, transpose_y, activation, keep_pre_activation});
}

std::vector<Type> FusedMatmulOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  const Attributes a = from_attributes<Attributes>(attrs, name);
  if (in.size() != 2 && in.size() != 3)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' takes x, y and an optional bias, got ",
                in.size(), " operands");
  DictionaryAttribute mm = DictionaryAttribute::get(
      to_named_attributes(MatmulOp::Attributes{a.transpose_x, a.transpose_y}));
  std::vector<Type> out = MatmulOp::infer_meta({in[0], in[1]}, mm);
  if (in.size() == 3) {
    Type b = meta::tensor_operand(name, in, 2);
    meta::require_same_dtype(name, shaped_data_type(out[0]), shaped_data_type(b), 0, 2);
    const auto& od = shaped_dims(out[0]);
    std::int64_t bn = 1;
    bool known = true;
    for (std::int64_t d : shaped_dims(b)) {
      if (d < 0) known = false;
      else bn *= d;
    }
    const std::int64_t last = od.empty() ? 1 : od.back();
    if (known && bn != 1 && last >= 0 && bn != last)
      throw_error(ErrorKind::InvalidArgument, "op '", name, "' bias has ", bn,
                  " elements: it must have the product's last dim (", last, ") or one");
  }
  if (a.keep_pre_activation && a.activation.empty())
    throw_error(ErrorKind::InvalidArgument, "op '", name,
                "' keeps its pre-activation, but has no activation: it would be the product itself");
  if (a.keep_pre_activation) out.push_back(out[0]);
  return out;
}

bool is_row_bias(const std::vector<std::int64_t>& bias, const std::vector<std::int64_t>& product) {
  if (bias.size() > product.size()) return false;
  std::int64_t n = 1;
  for (std::int64_t d : bias) {
    if (d < 0) return false;
    n *= d;
  }
  if (n == 1) return true;
  for (std::size_t k = 0; k + 1 < bias.size(); ++k)
    if (bias[k] != 1) return false;
  return product.back() >= 0 && bias.back() == product.back();
}

}  // namespace kiln

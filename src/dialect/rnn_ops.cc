// The ops of kiln/dialect/rnn_ops.h: the shared config (direction,
// activations, which optional operands are there), InferMeta, the Vjps
// building each op's RecurrentGradOp, that op's InferMeta, and registration.
#include "kiln/dialect/rnn_ops.h"

#include <cmath>
#include <sstream>

#include "kiln/dialect/infer_meta_util.h"

namespace kiln {

KILN_REGISTER_OP(RnnOp, RecurrentGradOp<RnnOp>);
KILN_REGISTER_OP(GruOp, RecurrentGradOp<GruOp>);
KILN_REGISTER_OP(LstmOp, RecurrentGradOp<LstmOp>);

namespace rnn {

namespace {

struct ActivationName {
  std::string_view name;
  Activation::Kind kind;
  double alpha, beta;  // ONNX's defaults
};
constexpr ActivationName kActivations[] = {
    {"Sigmoid", Activation::Kind::Sigmoid, 0, 0},
    {"Tanh", Activation::Kind::Tanh, 0, 0},
    {"Relu", Activation::Kind::Relu, 0, 0},
    {"HardSigmoid", Activation::Kind::HardSigmoid, 0.2, 0.5},
    {"LeakyRelu", Activation::Kind::LeakyRelu, 0.01, 0},
    {"Affine", Activation::Kind::Affine, 1, 0},
    {"ScaledTanh", Activation::Kind::ScaledTanh, 1, 1},
    {"Elu", Activation::Kind::Elu, 1, 0},
    {"ThresholdedRelu", Activation::Kind::ThresholdedRelu, 1, 0},
    {"Softsign", Activation::Kind::Softsign, 0, 0},
    {"Softplus", Activation::Kind::Softplus, 0, 0},
};

std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

[[noreturn]] void activation_error(std::string_view op, std::string_view spec,
                                   std::string_view what) {
  throw_error(ErrorKind::InvalidArgument, "op '", op, "' activations \"", spec, "\": ", what,
              " (expected comma-separated names among Sigmoid, Tanh, Relu, HardSigmoid, "
              "LeakyRelu, Affine, ScaledTanh, Elu, ThresholdedRelu, Softsign, Softplus, "
              "with optional (alpha[, beta]))");
}

double parse_number(std::string_view op, std::string_view spec, std::string_view s) {
  s = trim(s);
  // std::from_chars for double is not in every standard library kiln builds with.
  std::string str(s);
  std::istringstream in(str);
  in.imbue(std::locale::classic());
  double v = 0;
  if (str.empty() || !(in >> v) || !in.eof() || !std::isfinite(v))
    activation_error(op, spec, "'" + str + "' is not a number");
  return v;
}

const char* direction_names = "\"forward\", \"reverse\" or \"bidirectional\"";

template <typename A>
Config common_config(std::string_view op, Cell cell, const A& a) {
  Config c;
  c.cell = cell;
  c.hidden_size = a.hidden_size;
  if (a.hidden_size <= 0)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' hidden_size must be > 0, got ",
                a.hidden_size);
  if (a.direction == "forward") c.num_directions = 1;
  else if (a.direction == "reverse") c.num_directions = 1, c.reverse_only = true;
  else if (a.direction == "bidirectional") c.num_directions = 2;
  else
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' direction must be ", direction_names,
                ", got \"", a.direction, "\"");
  if (!std::isfinite(a.clip) || a.clip < 0)
    throw_error(ErrorKind::InvalidArgument, "op '", op,
                "' clip must be finite and >= 0 (0: no clipping), got ", a.clip);
  c.clip = a.clip;
  const std::size_t per_cell = cell == Cell::Rnn ? 1 : cell == Cell::Gru ? 2 : 3;
  std::vector<Activation> acts;
  if (a.activations.empty()) {
    const char* defaults = cell == Cell::Rnn ? "Tanh" : cell == Cell::Gru ? "Sigmoid,Tanh"
                                                                          : "Sigmoid,Tanh,Tanh";
    acts = parse_activations(op, defaults);
  } else {
    acts = parse_activations(op, a.activations);
  }
  if (acts.size() == per_cell && c.num_directions == 2) {
    const auto once = acts;
    acts.insert(acts.end(), once.begin(), once.end());
  }
  if (acts.size() != per_cell * static_cast<std::size_t>(c.num_directions))
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' activations \"", a.activations,
                "\" name ", acts.size(), " functions; the cell takes ", per_cell,
                " per direction (", cell == Cell::Rnn ? "f" : cell == Cell::Gru ? "f, g" : "f, g, h",
                "), given once or once per direction");
  c.activations = std::move(acts);
  c.has_bias = a.has_bias;
  c.has_sequence_lens = a.has_sequence_lens;
  c.has_initial_h = a.has_initial_h;
  return c;
}

void number_operands(Config& c) {
  int i = 3;
  if (c.has_bias) c.b = i++;
  if (c.has_sequence_lens) c.sequence_lens = i++;
  if (c.has_initial_h) c.initial_h = i++;
  if (c.has_initial_c) c.initial_c = i++;
  if (c.has_peepholes) c.p = i++;
  c.num_operands = i;
}

}  // namespace

bool activation_named(std::string_view name, Activation* out) {
  for (const auto& n : kActivations)
    if (n.name == name) {
      *out = Activation{n.kind, n.alpha, n.beta};
      return true;
    }
  return false;
}

bool uses_alpha(Activation::Kind k) {
  using K = Activation::Kind;
  return k == K::HardSigmoid || k == K::LeakyRelu || k == K::Affine || k == K::ScaledTanh ||
         k == K::Elu || k == K::ThresholdedRelu;
}
bool uses_beta(Activation::Kind k) {
  using K = Activation::Kind;
  return k == K::HardSigmoid || k == K::Affine || k == K::ScaledTanh;
}

std::vector<Activation> parse_activations(std::string_view op, std::string_view spec) {
  std::vector<Activation> out;
  std::string_view rest = spec;
  while (true) {
    // One entry: Name or Name(a[, b]); entries split by commas outside parentheses.
    std::size_t end = 0;
    int depth = 0;
    while (end < rest.size() && !(depth == 0 && rest[end] == ',')) {
      if (rest[end] == '(') ++depth;
      if (rest[end] == ')') --depth;
      ++end;
    }
    std::string_view entry = trim(rest.substr(0, end));
    if (entry.empty()) activation_error(op, spec, "an empty entry");
    std::string_view fname = entry;
    std::vector<double> params;
    if (auto open = entry.find('('); open != std::string_view::npos) {
      if (entry.back() != ')') activation_error(op, spec, "unbalanced parentheses");
      fname = trim(entry.substr(0, open));
      std::string_view args = entry.substr(open + 1, entry.size() - open - 2);
      while (true) {
        auto comma = args.find(',');
        params.push_back(parse_number(op, spec, args.substr(0, comma)));
        if (comma == std::string_view::npos) break;
        args.remove_prefix(comma + 1);
      }
    }
    Activation a;
    if (!activation_named(fname, &a))
      activation_error(op, spec, "unknown activation '" + std::string(fname) + "'");
    const std::size_t takes = uses_beta(a.kind) ? 2 : uses_alpha(a.kind) ? 1 : 0;
    if (params.size() > takes)
      activation_error(op, spec, std::string(fname) + " takes " + std::to_string(takes) +
                                     " parameter(s), got " + std::to_string(params.size()));
    if (params.size() > 0) a.alpha = params[0];
    if (params.size() > 1) a.beta = params[1];
    out.push_back(a);
    if (end == rest.size()) break;
    rest.remove_prefix(end + 1);
  }
  return out;
}

std::string activation_string(const Activation& a) {
  std::string s;
  for (const auto& n : kActivations)
    if (n.kind == a.kind) s = n.name;
  std::ostringstream o;
  o.imbue(std::locale::classic());
  o.precision(17);
  if (uses_beta(a.kind)) o << '(' << a.alpha << ',' << a.beta << ')';
  else if (uses_alpha(a.kind)) o << '(' << a.alpha << ')';
  return s + o.str();
}

Config config_of(std::string_view op, const RnnOp::Attributes& a) {
  Config c = common_config(op, Cell::Rnn, a);
  number_operands(c);
  return c;
}
Config config_of(std::string_view op, const GruOp::Attributes& a) {
  Config c = common_config(op, Cell::Gru, a);
  c.linear_before_reset = a.linear_before_reset;
  number_operands(c);
  return c;
}
Config config_of(std::string_view op, const LstmOp::Attributes& a) {
  Config c = common_config(op, Cell::Lstm, a);
  c.has_initial_c = a.has_initial_c;
  c.has_peepholes = a.has_peepholes;
  c.input_forget = a.input_forget;
  number_operands(c);
  return c;
}

}  // namespace rnn

namespace {


// Checks operand i's rank and each known dim against `want` (-1: any).
void require_dims(std::string_view op, const std::vector<Type>& in, int i, const char* what,
                  const char* layout, const std::vector<std::int64_t>& want) {
  const auto& d = shaped_dims(in[static_cast<std::size_t>(i)]);
  bool ok = d.size() == want.size();
  for (std::size_t k = 0; ok && k < d.size(); ++k) ok = meta::dim_fits(d[k], want[k]);
  if (!ok)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' ", what, " (operand #", i,
                ") must be ", layout, " = ", meta::dims_string(want), ", got ",
                meta::dims_string(d));
}

std::vector<Type> infer(std::string_view op, const rnn::Config& c, const std::vector<Type>& in) {
  if (in.size() != static_cast<std::size_t>(c.num_operands)) {
    std::string list = "X, W, R";
    if (c.has_bias) list += ", B";
    if (c.has_sequence_lens) list += ", sequence_lens";
    if (c.has_initial_h) list += ", initial_h";
    if (c.has_initial_c) list += ", initial_c";
    if (c.has_peepholes) list += ", P";
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' needs ", c.num_operands,
                " operands (", list, ", as its has_* attributes say), got ", in.size());
  }
  for (std::size_t i = 0; i < in.size(); ++i) (void)meta::tensor_operand(op, in, i);
  const DataType dt = shaped_data_type(in[0]);
  meta::require_floating(op, dt, 0);
  for (int i : {1, 2, c.b, c.initial_h, c.initial_c, c.p})
    if (i >= 0) meta::require_same_dtype(op, dt, shaped_data_type(in[static_cast<std::size_t>(i)]), 0,
                                         static_cast<std::size_t>(i));
  if (c.sequence_lens >= 0 &&
      !meta::is_index_dtype(shaped_data_type(in[static_cast<std::size_t>(c.sequence_lens)])))
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' sequence_lens (operand #",
                c.sequence_lens, ") must be int32 or int64, got ",
                to_string(shaped_data_type(in[static_cast<std::size_t>(c.sequence_lens)])));
  const auto& xd = shaped_dims(in[0]);
  if (xd.size() != 3)
    throw_error(ErrorKind::InvalidArgument, "op '", op,
                "' X (operand #0) must have rank 3 ([seq, batch, input]), got ",
                meta::dims_string(xd));
  const std::int64_t dirs = c.num_directions, h = c.hidden_size, g = c.gates();
  const std::int64_t seq = xd[0];
  std::int64_t batch = xd[1];
  const std::int64_t input = xd[2];
  require_dims(op, in, 1, "W", "[dirs, gates·hidden, input]", {dirs, g * h, input});
  require_dims(op, in, 2, "R", "[dirs, gates·hidden, hidden]", {dirs, g * h, h});
  if (c.b >= 0) require_dims(op, in, c.b, "B", "[dirs, 2·gates·hidden]", {dirs, 2 * g * h});
  if (c.sequence_lens >= 0) {
    require_dims(op, in, c.sequence_lens, "sequence_lens", "[batch]", {batch});
    batch = meta::known_dim(batch, shaped_dims(in[static_cast<std::size_t>(c.sequence_lens)])[0]);
  }
  for (auto [i, what] : {std::pair{c.initial_h, "initial_h"}, std::pair{c.initial_c, "initial_c"}})
    if (i >= 0) {
      require_dims(op, in, i, what, "[dirs, batch, hidden]", {dirs, batch, h});
      batch = meta::known_dim(batch, shaped_dims(in[static_cast<std::size_t>(i)])[1]);
    }
  if (c.p >= 0) require_dims(op, in, c.p, "P", "[dirs, 3·hidden]", {dirs, 3 * h});
  std::vector<Type> out{meta::result_like(in, dt, {seq, dirs, batch, h}),
                        meta::result_like(in, dt, {dirs, batch, h})};
  if (c.cell == rnn::Cell::Lstm) out.push_back(meta::result_like(in, dt, {dirs, batch, h}));
  return out;
}

template <typename A>
void add_recurrent_operands(OperationArgument& arg, const RecurrentInputs& in, A& a,
                            std::string_view op) {
  if (!in.x || !in.w || !in.r)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' needs X, W and R");
  arg.add_operand(in.x);
  arg.add_operand(in.w);
  arg.add_operand(in.r);
  a.has_bias = bool(in.b);
  a.has_sequence_lens = bool(in.sequence_lens);
  a.has_initial_h = bool(in.initial_h);
  for (Value v : {in.b, in.sequence_lens, in.initial_h})
    if (v) arg.add_operand(v);
}

// The config of a recurrent op named `op` (kiln.rnn, kiln.gru or kiln.lstm)
// from its attributes.
rnn::Config grad_config(std::string_view op, DictionaryAttribute attrs) {
  if (op == RnnOp::name) return rnn::config_of(op, from_attributes<RnnOp::Attributes>(attrs, op));
  if (op == GruOp::name) return rnn::config_of(op, from_attributes<GruOp::Attributes>(attrs, op));
  return rnn::config_of(op, from_attributes<LstmOp::Attributes>(attrs, op));
}

std::vector<Value> recurrent_vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  vjp::check_out_grads(op, g);
  std::vector<Value> grads(op->num_operands());
  if (vjp::all_null(g)) return grads;
  Operation* gop = nullptr;
  if (op->name() == RnnOp::name) gop = b.create<RecurrentGradOp<RnnOp>>(op, g).operation();
  else if (op->name() == GruOp::name) gop = b.create<RecurrentGradOp<GruOp>>(op, g).operation();
  else gop = b.create<RecurrentGradOp<LstmOp>>(op, g).operation();
  // The grad op's results follow the floating operands: all but sequence_lens.
  const rnn::Config c = grad_config(op->name(), op->attributes());
  std::uint32_t k = 0;
  for (std::uint32_t i = 0; i < op->num_operands(); ++i)
    if (static_cast<int>(i) != c.sequence_lens) grads[i] = gop->result(k++);
  return grads;
}

}  // namespace

void RnnOp::build(Builder&, OperationArgument& arg, const RecurrentInputs& in, Attributes a) {
  if (in.initial_c || in.p)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' takes no initial_c or P (LSTM only)");
  add_recurrent_operands(arg, in, a, name);
  arg.attributes = to_named_attributes(a);
}

void GruOp::build(Builder&, OperationArgument& arg, const RecurrentInputs& in, Attributes a) {
  if (in.initial_c || in.p)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' takes no initial_c or P (LSTM only)");
  add_recurrent_operands(arg, in, a, name);
  arg.attributes = to_named_attributes(a);
}

void LstmOp::build(Builder&, OperationArgument& arg, const RecurrentInputs& in, Attributes a) {
  add_recurrent_operands(arg, in, a, name);
  a.has_initial_c = bool(in.initial_c);
  a.has_peepholes = bool(in.p);
  if (in.initial_c) arg.add_operand(in.initial_c);
  if (in.p) arg.add_operand(in.p);
  arg.attributes = to_named_attributes(a);
}

std::vector<Type> RnnOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  return infer(name, rnn::config_of(name, from_attributes<Attributes>(attrs, name)), in);
}
std::vector<Type> GruOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  return infer(name, rnn::config_of(name, from_attributes<Attributes>(attrs, name)), in);
}
std::vector<Type> LstmOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  return infer(name, rnn::config_of(name, from_attributes<Attributes>(attrs, name)), in);
}

std::vector<Value> RnnOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  return recurrent_vjp(b, op, g);
}
std::vector<Value> GruOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  return recurrent_vjp(b, op, g);
}
std::vector<Value> LstmOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  return recurrent_vjp(b, op, g);
}

template <typename Fwd>
void RecurrentGradOp<Fwd>::build(Builder& b, OperationArgument& arg, Operation* fwd,
                                 const std::vector<Value>& out_grads) {
  if (!fwd || fwd->name() != Fwd::name)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' is built from a '", Fwd::name,
                "' op, got ", fwd ? "'" + std::string(fwd->name()) + "'" : std::string("none"));
  vjp::check_out_grads(fwd, out_grads);
  for (std::uint32_t i = 0; i < fwd->num_operands(); ++i) arg.add_operand(fwd->operand_source(i));
  for (std::uint32_t k = 0; k < fwd->num_results(); ++k)
    arg.add_operand(out_grads[k] ? out_grads[k] : vjp::zeros(b, fwd->result(k)));
  for (const auto& [key, v] : fwd->attributes()) arg.add_attribute(key, v);
}

template <typename Fwd>
std::vector<Type> RecurrentGradOp<Fwd>::infer_meta(const std::vector<Type>& in,
                                                   DictionaryAttribute attrs) {
  const rnn::Config c = rnn::config_of(name, from_attributes<Attributes>(attrs, name));
  const std::size_t fwd_operands = static_cast<std::size_t>(c.num_operands);
  const std::size_t results = c.cell == rnn::Cell::Lstm ? 3 : 2;
  if (in.size() != fwd_operands + results)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' needs ", fwd_operands + results,
                " operands (the forward's ", fwd_operands, ", then the gradients of its ",
                results, " results), got ", in.size());
  const std::vector<Type> fwd_in(in.begin(),
                                 in.begin() + static_cast<std::ptrdiff_t>(fwd_operands));
  const std::vector<Type> fwd_out = infer(name, c, fwd_in);
  static constexpr const char* kResults[] = {"dY", "dY_h", "dY_c"};
  for (std::size_t k = 0; k < results; ++k) {
    const std::size_t i = fwd_operands + k;
    Type t = meta::tensor_operand(name, in, i);
    meta::require_same_dtype(name, shaped_data_type(fwd_out[k]), shaped_data_type(t), 0, i);
    const auto& want = shaped_dims(fwd_out[k]);
    const auto& got = shaped_dims(t);
    bool ok = got.size() == want.size();
    for (std::size_t j = 0; ok && j < got.size(); ++j) ok = meta::dim_fits(got[j], want[j]);
    if (!ok)
      throw_error(ErrorKind::InvalidArgument, "op '", name, "' ", kResults[k], " (operand #", i,
                  ") must be shaped like the forward's result #", k, " ",
                  meta::dims_string(want), ", got ", meta::dims_string(got));
  }
  std::vector<Type> out;
  for (std::size_t i = 0; i < fwd_operands; ++i)
    if (static_cast<int>(i) != c.sequence_lens) out.push_back(in[i]);
  return out;
}

template struct RecurrentGradOp<RnnOp>;
template struct RecurrentGradOp<GruOp>;
template struct RecurrentGradOp<LstmOp>;

}  // namespace kiln

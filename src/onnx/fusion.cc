// Import-time fusion (fusion.h): the chains PyTorch's exporter (and kiln's)
// writes for a layer norm, an exact GELU and a (masked, causal,
// grouped-query) scaled dot-product attention, each built as kiln's fused op.
#include "fusion.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/frontend/fold_batch_norm.h"
#include "kiln/ir/builtin_types.h"
#include "kiln/support/half.h"
#include "op_table.h"
#include "shape_values.h"

namespace kiln::onnx::detail {

GraphUses::GraphUses(const ::onnx::GraphProto& g) {
  for (int i = 0; i < g.node_size(); ++i) {
    for (const auto& in : g.node(i).input())
      if (!in.empty()) consumers[in].push_back(i);
    for (const auto& out : g.node(i).output())
      if (!out.empty()) producer[out] = i;
  }
  for (const auto& o : g.output()) graph_outputs.insert(o.name());
}

namespace {

std::int64_t int_attr(const ::onnx::NodeProto& n, const std::string& name, std::int64_t fallback) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return a.i();
  return fallback;
}

// The matching state of one attempt: the graph, who reads what, and the
// nodes covered so far.
class Chain {
 public:
  Chain(const ::onnx::GraphProto& g, const GraphUses& uses, const FusionScope& scope)
      : g_(g), uses_(uses), scope_(scope) {}

  const ::onnx::NodeProto& node(int i) const { return g_.node(i); }
  // Node i's input k and output k; "" where a malformed node has none
  // (no node reads or makes "").
  const std::string& in(int i, int k) const {
    return k < node(i).input_size() ? node(i).input(k) : none_;
  }
  const std::string& out(int i, int k = 0) const {
    return k < node(i).output_size() ? node(i).output(k) : none_;
  }
  void cover(int i) { nodes_.push_back(i); }
  const std::vector<int>& nodes() const { return nodes_; }

  // The one node reading `name`, when `name` is read by exactly one node
  // of type `op` and is no graph output (an intermediate value only the
  // chain sees); -1 otherwise.
  int sole_reader(const std::string& name, std::string_view op) const {
    const auto* readers = readers_of(name);
    if (!readers || readers->size() != 1) return -1;
    const int r = readers->front();
    return node(r).op_type() == op && node(r).domain().empty() ? r : -1;
  }
  // Every reader of `name` (null when none or when it is a graph output).
  const std::vector<int>* readers_of(const std::string& name) const {
    if (uses_.graph_outputs.count(name)) return nullptr;
    auto it = uses_.consumers.find(name);
    return it == uses_.consumers.end() ? nullptr : &it->second;
  }

  // `name`'s value when known at import: an initializer, a folded value,
  // or a Constant node's value (imported yet or not).
  std::optional<Tensor> known(const std::string& name) const {
    if (const Tensor* t = scope_.constant(name)) return *t;
    auto p = uses_.producer.find(name);
    if (p == uses_.producer.end()) return std::nullopt;
    const auto& n = node(p->second);
    if (n.op_type() != "Constant" || n.attribute_size() != 1 || n.attribute(0).name() != "value")
      return std::nullopt;
    try {
      return tensor_of(n.attribute(0).t(), "Constant");
    } catch (const Error&) {
      return std::nullopt;
    }
  }

  // `name`'s value when it is a one-element float constant, as a double.
  std::optional<double> scalar(const std::string& name) const {
    const std::optional<Tensor> t = known(name);
    if (!t || t->numel() != 1 || t->dims().rank() > 1) return std::nullopt;  // no rank it would add
    switch (t->dtype()) {
      case DataType::Float32: return static_cast<double>(t->data<float>()[0]);
      case DataType::Float64: return t->data<double>()[0];
      default: return std::nullopt;
    }
  }
  // `name`'s one value where import can compute it: a float constant, an
  // integer entry known at import (a dim read by Shape), or a Cast,
  // Identity, Sqrt, Reciprocal, Mul or Div of those (PyTorch's exported
  // 1 / sqrt(head dim)); integers only as far as a Cast to a float type.
  std::optional<double> computed_scalar(const std::string& name) const {
    const auto n = computed_number(name, 8);
    return n && !n->integer ? std::optional(n->value) : std::nullopt;
  }
  // The node making `name` (of type `op` when given, in the default domain); null when none.
  const ::onnx::NodeProto* made_by(const std::string& name, std::string_view op = {}) const {
    const int i = producer(name);
    return i >= 0 && node(i).domain().empty() && (op.empty() || node(i).op_type() == op) ? &node(i) : nullptr;
  }
  // The index of the node making `name`; -1 when none.
  int producer(const std::string& name) const {
    auto p = uses_.producer.find(name);
    return p == uses_.producer.end() ? -1 : p->second;
  }
  struct Number {
    double value;
    bool integer;
  };
  std::optional<Number> computed_number(const std::string& name, int depth) const {
    if (auto v = scalar(name)) return Number{*v, false};
    if (Value x = value(name)) {
      const auto e = shape_values(x);
      if (e.size() == 1 && e[0]) return Number{static_cast<double>(*e[0]), true};
    }
    const ::onnx::NodeProto* n = made_by(name);
    if (!n || depth <= 0 || n->input_size() < 1 || n->input_size() > 2) return std::nullopt;
    const auto a = computed_number(n->input(0), depth - 1);
    const std::string& op = n->op_type();
    if (!a) return std::nullopt;
    if (op == "Identity") return a;
    if (op == "Cast") return cast_number(a->value, int_attr(*n, "to", 0));
    if (a->integer) return std::nullopt;  // ONNX's Div of integers truncates: not followed
    if (op == "Sqrt" && a->value >= 0) return Number{std::sqrt(a->value), false};
    if (op == "Reciprocal" && a->value != 0) return Number{1 / a->value, false};
    const auto b = n->input_size() == 2 ? computed_number(n->input(1), depth - 1) : std::nullopt;
    if (!b || b->integer) return std::nullopt;
    if (op == "Mul") return Number{a->value * b->value, false};
    if (op == "Div" && b->value != 0) return Number{a->value / b->value, false};
    return std::nullopt;
  }
  // v cast to ONNX element type `to`, when that is a float type (rounded to it).
  static std::optional<Number> cast_number(double v, std::int64_t to) {
    switch (to) {
      case ::onnx::TensorProto_DataType_DOUBLE: return Number{v, false};
      case ::onnx::TensorProto_DataType_FLOAT: return Number{static_cast<float>(v), false};
      case ::onnx::TensorProto_DataType_FLOAT16: return Number{half_to_float(double_to_half(v)), false};
      case ::onnx::TensorProto_DataType_BFLOAT16:
        return Number{bfloat16_to_float(float_to_bfloat16(static_cast<float>(v))), false};
      default: return std::nullopt;
    }
  }
  bool scalar_is(const std::string& name, double want, double tol) const {
    auto v = scalar(name);
    return v && std::abs(*v - want) <= tol;
  }

  // The input of a binary node that is not `known` (null when `known` is
  // neither or both).
  const std::string* other_input(int i, const std::string& known) const {
    const auto& n = node(i);
    if (n.input_size() != 2) return nullptr;
    if (n.input(0) == known && n.input(1) != known) return &n.input(1);
    if (n.input(1) == known && n.input(0) != known) return &n.input(0);
    return nullptr;
  }

  Value value(const std::string& name) const { return scope_.value(name); }
  const Tensor* constant(const std::string& name) const { return scope_.constant(name); }
  Value parameter(const std::string& name, Tensor t) const { return scope_.parameter(name, std::move(t)); }
  std::int64_t opset() const { return scope_.opset; }

 private:
  const ::onnx::GraphProto& g_;
  const GraphUses& uses_;
  const FusionScope& scope_;
  std::vector<int> nodes_;
  const std::string none_;
};

// A ReduceMean over the last axis of a rank-`rank` input, keeping it (its
// axes an attribute, or since opset 18 a constant input).
bool mean_over_last(const Chain& c, const ::onnx::NodeProto& n, std::size_t rank) {
  if (n.op_type() != "ReduceMean" || n.input_size() < 1 || n.input_size() > 2 || int_attr(n, "keepdims", 1) != 1)
    return false;
  std::vector<std::int64_t> axes;
  if (n.input_size() == 2) {
    const auto t = c.known(n.input(1));
    if (!t || t->dtype() != DataType::Int64) return false;
    axes = t->to_vector<std::int64_t>();
  } else {
    for (const auto& a : n.attribute())
      if (a.name() == "axes") axes.assign(a.ints().begin(), a.ints().end());
  }
  return axes.size() == 1 && (axes[0] == -1 || axes[0] == static_cast<std::int64_t>(rank) - 1);
}

bool is_float_tensor(Value v) {
  if (!v || !is_shaped(v.type())) return false;
  const DataType dt = shaped_data_type(v.type());
  return dt == DataType::Float32 || dt == DataType::Float64;
}

// y = (x - mean) / sqrt(var + eps) [* gamma] [+ beta] over the last axis:
//   m = ReduceMean(x), d = Sub(x, m), p = Pow(d, 2), v = ReduceMean(p),
//   e = Add(v, eps), s = Sqrt(e), n = Div(d, s), Mul(n, gamma), Add(., beta)
// -> kiln.layer_norm(x, gamma or ones, beta or zeros).
std::optional<Fused> layer_norm(Chain& c, int first, Builder& b) {
  const auto& mean = c.node(first);
  if (mean.op_type() != "ReduceMean" || mean.input_size() < 1) return std::nullopt;
  const std::string& x = mean.input(0);
  Value xv = c.value(x);
  if (!is_float_tensor(xv)) return std::nullopt;
  const auto& dims = shaped_dims(xv.type());
  if (dims.empty() || dims.back() <= 0 || !mean_over_last(c, mean, dims.size())) return std::nullopt;
  c.cover(first);
  const int sub = c.sole_reader(c.out(first), "Sub");
  if (sub < 0 || c.in(sub, 0) != x || c.in(sub, 1) != mean.output(0))
    return std::nullopt;
  c.cover(sub);
  const std::string& d = c.out(sub);
  const auto* d_readers = c.readers_of(d);
  if (!d_readers || d_readers->size() != 2) return std::nullopt;
  int square = -1, div = -1;
  for (int r : *d_readers) {
    const auto& n = c.node(r);
    if (n.op_type() == "Pow" && n.input(0) == d && c.scalar_is(c.in(r, 1), 2.0, 0)) square = r;
    else if (n.op_type() == "Mul" && n.input_size() == 2 && n.input(0) == d && n.input(1) == d) square = r;
    else if (n.op_type() == "Div" && n.input(0) == d) div = r;
  }
  if (square < 0 || div < 0) return std::nullopt;
  c.cover(square);
  const int var = c.sole_reader(c.out(square), "ReduceMean");
  if (var < 0 || !mean_over_last(c, c.node(var), dims.size())) return std::nullopt;
  c.cover(var);
  const int add_eps = c.sole_reader(c.out(var), "Add");
  if (add_eps < 0) return std::nullopt;
  const std::string* eps_name = c.other_input(add_eps, c.out(var));
  const auto eps = eps_name ? c.scalar(*eps_name) : std::nullopt;
  if (!eps || !(*eps > 0)) return std::nullopt;
  c.cover(add_eps);
  const int sqrt = c.sole_reader(c.out(add_eps), "Sqrt");
  if (sqrt < 0 || c.sole_reader(c.out(sqrt), "Div") != div ||
      c.in(div, 1) != c.out(sqrt))
    return std::nullopt;
  c.cover(sqrt);
  c.cover(div);
  // Optional affine part: a gamma and a beta of x's last dim, defined already.
  const DataType dt = shaped_data_type(xv.type());
  const std::vector<std::int64_t> last{dims.back()};
  auto per_feature = [&](const std::string* name) -> Value {
    if (!name) return {};
    Value v = c.value(*name);
    if (!v || !is_shaped(v.type()) || shaped_data_type(v.type()) != dt || shaped_dims(v.type()) != last)
      return {};
    return v;
  };
  std::string out = c.out(div);
  Value gamma, beta;
  if (int mul = c.sole_reader(out, "Mul"); mul >= 0) {
    if ((gamma = per_feature(c.other_input(mul, out)))) {
      c.cover(mul);
      out = c.out(mul);
      if (int add = c.sole_reader(out, "Add"); add >= 0) {
        if ((beta = per_feature(c.other_input(add, out)))) {
          c.cover(add);
          out = c.out(add);
        }
      }
    }
  }
  if (!gamma) gamma = b.create<FullOp>(last, 1.0, dt).result();
  if (!beta) beta = b.create<FullOp>(last, 0.0, dt).result();
  Value y = b.create<LayerNormOp>(xv, gamma, beta, -1, *eps).result(0);
  return Fused{c.nodes(), out, y};
}

// Whether v can be the x of an elementwise chain the matchers fuse: a float
// tensor of rank 1 or more (the chains' scalars may be [1], which would
// make a rank-0 x's result [1]).
bool is_elementwise_operand(Value v) { return is_float_tensor(v) && !shaped_dims(v.type()).empty(); }

// y = x * 0.5 * (1 + erf(x / sqrt(2))):
//   a = Div(x, sqrt 2) (or Mul(x, 1/sqrt 2)), e = Erf(a), p = Add(e, 1),
//   m = Mul(x, p), y = Mul(m, 0.5)  -> kiln.gelu(x) (exact).
std::optional<Fused> gelu(Chain& c, int first, Builder& b) {
  const auto& scale = c.node(first);
  if (scale.input_size() != 2 || !scale.domain().empty()) return std::nullopt;
  const std::string& x = scale.input(0);
  const bool div = scale.op_type() == "Div" && c.scalar_is(scale.input(1), std::sqrt(2.0), 1e-4);
  const bool mul = scale.op_type() == "Mul" && c.scalar_is(scale.input(1), std::sqrt(0.5), 1e-5);
  Value xv = c.value(x);
  if ((!div && !mul) || !is_elementwise_operand(xv)) return std::nullopt;
  c.cover(first);
  const int erf = c.sole_reader(c.out(first), "Erf");
  if (erf < 0) return std::nullopt;
  c.cover(erf);
  const int plus = c.sole_reader(c.out(erf), "Add");
  const std::string* one = plus < 0 ? nullptr : c.other_input(plus, c.out(erf));
  if (!one || !c.scalar_is(*one, 1.0, 0)) return std::nullopt;
  c.cover(plus);
  const int times_x = c.sole_reader(c.out(plus), "Mul");
  const std::string* other = times_x < 0 ? nullptr : c.other_input(times_x, c.out(plus));
  if (!other || *other != x) return std::nullopt;
  c.cover(times_x);
  const int half = c.sole_reader(c.out(times_x), "Mul");
  const std::string* h = half < 0 ? nullptr : c.other_input(half, c.out(times_x));
  if (!h || !c.scalar_is(*h, 0.5, 0)) return std::nullopt;
  c.cover(half);
  return Fused{c.nodes(), c.out(half), b.create<GeluOp>(xv, false).result()};
}

// The output of the sole reader of `at`, an `op` node whose other input
// is a scalar within `tol` of `want` (covered); nullopt otherwise.
std::optional<std::string> by_scalar(Chain& c, const std::string& at, const char* op, double want, double tol) {
  const int r = c.sole_reader(at, op);
  const std::string* other = r < 0 ? nullptr : c.other_input(r, at);
  if (!other || !c.scalar_is(*other, want, tol)) return std::nullopt;
  c.cover(r);
  return c.out(r);
}

// x³ where the chain starts: Pow(x, 3), or Mul(x, x) read only by a Mul
// with x (covered); nullopt otherwise.
std::optional<std::string> cube_of(Chain& c, int first, const std::string& x) {
  const auto& n = c.node(first);
  if (n.op_type() == "Pow" && c.scalar_is(n.input(1), 3.0, 0)) {
    c.cover(first);
    return c.out(first);
  }
  if (n.op_type() != "Mul" || n.input(1) != x) return std::nullopt;
  c.cover(first);
  const int m = c.sole_reader(c.out(first), "Mul");
  const std::string* other = m < 0 ? nullptr : c.other_input(m, c.out(first));
  if (!other || *other != x) return std::nullopt;
  c.cover(m);
  return c.out(m);
}

// 0.5 · x · p where p is read: (x · p) · 0.5, x · (0.5 · p) or (0.5 · x) · p
// (the half of x covered when it is made later and read only here); the
// product's name, or nullopt.
std::optional<std::string> half_x_times(Chain& c, const std::string& p, const std::string& x) {
  const int m = c.sole_reader(p, "Mul");
  const std::string* f = m < 0 ? nullptr : c.other_input(m, p);
  if (!f) return std::nullopt;
  c.cover(m);
  if (*f == x) return by_scalar(c, c.out(m), "Mul", 0.5, 0);
  if (c.scalar_is(*f, 0.5, 0)) {
    const int mx = c.sole_reader(c.out(m), "Mul");
    const std::string* other = mx < 0 ? nullptr : c.other_input(mx, c.out(m));
    if (!other || *other != x) return std::nullopt;
    c.cover(mx);
    return c.out(mx);
  }
  const auto* h = c.made_by(*f, "Mul");
  if (!h || h->input_size() != 2 ||
      !((h->input(0) == x && c.scalar_is(h->input(1), 0.5, 0)) ||
        (h->input(1) == x && c.scalar_is(h->input(0), 0.5, 0))))
    return std::nullopt;
  if (!c.value(*f) && c.sole_reader(*f, "Mul") == m) c.cover(c.producer(*f));
  return c.out(m);
}

// y = 0.5 · x · (1 + tanh(sqrt(2/π) · (x + 0.044715 · x³))), GPT-2's GELU,
// from x³ (cube_of) as PyTorch writes F.gelu(approximate="tanh") and
// Hugging Face's gelu_new: Mul(x³, 0.044715), Add(x, .), Mul(., sqrt(2/π)),
// Tanh, Add(., 1), then 0.5 · x · that (half_x_times)
// -> kiln.gelu(x, approximate).
std::optional<Fused> gelu_tanh(Chain& c, int first, Builder& b) {
  const auto& n = c.node(first);
  if (n.input_size() != 2 || !n.domain().empty()) return std::nullopt;
  const std::string& x = n.input(0);
  Value xv = c.value(x);
  if (!is_elementwise_operand(xv)) return std::nullopt;
  const auto cube = cube_of(c, first, x);
  const auto inner = cube ? by_scalar(c, *cube, "Mul", 0.044715, 1e-6) : std::nullopt;
  const int sum = inner ? c.sole_reader(*inner, "Add") : -1;
  const std::string* other = sum < 0 ? nullptr : c.other_input(sum, *inner);
  if (!other || *other != x) return std::nullopt;
  c.cover(sum);
  const auto arg = by_scalar(c, c.out(sum), "Mul", std::sqrt(2.0 / std::numbers::pi), 1e-6);
  const int tanh = arg ? c.sole_reader(*arg, "Tanh") : -1;
  if (tanh < 0) return std::nullopt;
  c.cover(tanh);
  const auto p = by_scalar(c, c.out(tanh), "Add", 1.0, 0);
  const auto y = p ? half_x_times(c, *p, x) : std::nullopt;
  if (!y) return std::nullopt;
  return Fused{c.nodes(), *y, b.create<GeluOp>(xv, true).result()};
}

// Whether `t` is a causal mask for an [L, L] score matrix: 0 on and below
// the diagonal, -inf above it.
bool is_causal_mask(const Tensor& t) {
  if (t.dtype() != DataType::Float32 || t.dims().rank() != 2 || t.dims()[0] != t.dims()[1])
    return false;
  const std::int64_t l = t.dims()[0];
  const float* p = t.data<float>();
  for (std::int64_t i = 0; i < l; ++i)
    for (std::int64_t j = 0; j < l; ++j) {
      const float v = p[i * l + j];
      if (j <= i ? v != 0.0f : !(std::isinf(v) && v < 0)) return false;
    }
  return true;
}

// Whether `t` is a bool [lq, lk] mask true where key j <= row i (kiln's
// causal rule, top-left aligned).
bool is_causal_bool(const Tensor& t, std::int64_t lq, std::int64_t lk) {
  if (t.dtype() != DataType::Bool || t.dims().to_vector() != std::vector<std::int64_t>{lq, lk}) return false;
  for (std::int64_t i = 0; i < lq; ++i)
    for (std::int64_t j = 0; j < lk; ++j)
      if (t.data<bool>()[i * lk + j] != (j <= i)) return false;
  return true;
}

// Whether node n is ConstantOfShape filled with bool true.
bool fills_true(const ::onnx::NodeProto& n) {
  if (n.attribute_size() != 1 || n.attribute(0).name() != "value") return false;
  try {
    const Tensor t = tensor_of(n.attribute(0).t(), "ConstantOfShape");
    return t.dtype() == DataType::Bool && t.numel() == 1 && t.data<bool>()[0];
  } catch (const Error&) {
    return false;
  }
}

// The scores s made causal as kiln's exporter writes it: Where(tril, s,
// -inf), tril a constant bool lower triangle [lq, lk], or, lengths known
// only at run time, Trilu(ConstantOfShape(Shape(s, start -2), true),
// upper 0). Covers those nodes and returns the Where's result; nullopt
// (nothing covered) when s has other readers or a part differs.
std::optional<std::string> causal_where(Chain& c, const std::string& s, std::int64_t lq, std::int64_t lk) {
  const auto* readers = c.readers_of(s);
  if (!readers || readers->empty() || readers->size() > 2) return std::nullopt;
  int where = -1, shape = -1;
  for (int r : *readers) {
    const auto& n = c.node(r);
    if (!n.domain().empty()) return std::nullopt;
    if (n.op_type() == "Where" && n.input_size() == 3 && n.input(1) == s && n.input(0) != s) where = r;
    else if (n.op_type() == "Shape" && n.attribute_size() == 1 && int_attr(n, "start", 0) == -2) shape = r;
  }
  if (where < 0 || (readers->size() == 2) != (shape >= 0)) return std::nullopt;
  const auto& w = c.node(where);
  const auto fill = c.scalar(w.input(2));
  if (!fill || !std::isinf(*fill) || *fill > 0) return std::nullopt;
  if (shape < 0) {
    const std::optional<Tensor> m = c.known(w.input(0));
    if (!m || !is_causal_bool(*m, lq, lk)) return std::nullopt;
  } else {
    const int ones = c.sole_reader(c.out(shape), "ConstantOfShape");
    const int tri = ones < 0 ? -1 : c.sole_reader(c.out(ones), "Trilu");
    if (tri < 0 || !fills_true(c.node(ones)) || c.node(tri).input_size() != 1 ||
        int_attr(c.node(tri), "upper", 1) != 0 || c.sole_reader(c.out(tri), "Where") != where ||
        w.input(0) != c.out(tri))
      return std::nullopt;
    for (int n : {shape, ones, tri}) c.cover(n);
  }
  c.cover(where);
  return c.out(where);
}

// Whether `mask` can be attention's float mask over the scores of q
// [B, H, Lq, D] and lk keys: q's dtype, rank 2 to 4, each dim 1 or the
// scores' (or unknown).
bool fits_scores(Value mask, Value q, std::int64_t lk) {
  if (!is_float_tensor(mask) || shaped_data_type(mask.type()) != shaped_data_type(q.type())) return false;
  const auto& md = shaped_dims(mask.type());
  const auto& qd = shaped_dims(q.type());
  const std::int64_t full[] = {qd[0], qd[1], qd[2], lk};
  if (md.size() < 2 || md.size() > 4) return false;
  for (std::size_t i = 0; i < md.size(); ++i) {
    const std::int64_t m = md[i], f = full[4 - md.size() + i];
    if (m != 1 && m != f && m >= 0 && f >= 0) return false;
  }
  return true;
}

// One entry of the shape a kiln.expand / expand_by or reshape / reshape_by
// gives its result: its value where known at import, else (the run-time
// ops) which dim of which value it is, where that is known.
struct ShapeEntry {
  std::optional<std::int64_t> value;
  std::optional<DimOrigin> origin;
};

// The target shape of `op` (one of those four; empty for any other op, and
// for a reshape_by whose 0 is a 0 dim).
std::vector<ShapeEntry> target_shape(Operation* op) {
  std::vector<ShapeEntry> out;
  if (op->isa<ExpandOp>() || op->isa<ReshapeOp>()) {
    const std::vector<std::int64_t> s = op->isa<ExpandOp>() ? ExpandOp(op).attrs().shape : ReshapeOp(op).attrs().shape;
    for (std::int64_t v : s) out.push_back({v, std::nullopt});
  } else if (op->isa<ExpandByOp>() || (op->isa<ReshapeByOp>() && !ReshapeByOp(op).attrs().allowzero)) {
    const auto known = shape_values(op->operand_source(1));
    const auto origins = shape_origins(op->operand_source(1), 16);
    if (origins.size() != known.size()) return {};
    for (std::size_t i = 0; i < known.size(); ++i) out.push_back({known[i], origins[i]});
  }
  return out;
}

// Whether entry `e` is x's dim d at run time: a positive value equal to
// that dim known at import, or the same origin.
bool is_dim_of(const ShapeEntry& e, Value x, std::int64_t d) {
  if (e.origin && *e.origin == dim_origin(x, d)) return true;
  const std::int64_t xd = shaped_dims(x.type())[static_cast<std::size_t>(d)];
  return e.value && *e.value > 0 && *e.value == xd;
}

// The op defining v when it is one of Ops; null otherwise.
template <typename... Ops>
Operation* made_by(Value v) {
  Operation* op = v ? v.defining_op() : nullptr;
  return op && (op->isa<Ops>() || ...) ? op : nullptr;
}

// r = Reshape(Expand(Unsqueeze(x, [2]), [B, Hk, n, L, D]), [B, Hk·n, L, D])
// for x [B, Hk, L, D] (Hk known): each head of x n times in a row, what
// HF Llama's repeat_kv and kiln's own grouped-query export write. The dims
// are checked by value where known at import and by origin where not, so
// a batch or length of 1 that Expand would stretch never matches.
struct RepeatedHeads {
  Value x;
  std::int64_t n = 0;
};
std::optional<RepeatedHeads> repeated_heads(Value r) {
  Operation* reshape = made_by<ReshapeOp, ReshapeByOp>(r);
  Operation* expand = reshape ? made_by<ExpandOp, ExpandByOp>(reshape->operand_source(0)) : nullptr;
  Operation* unsqueeze = expand ? made_by<UnsqueezeOp>(expand->operand_source(0)) : nullptr;
  if (!unsqueeze || UnsqueezeOp(unsqueeze).attrs().axes != std::vector<std::int64_t>{2}) return std::nullopt;
  const Value x = unsqueeze->operand_source(0);
  const auto to = target_shape(expand), as = target_shape(reshape);
  if (!x || !is_shaped(x.type()) || shaped_dims(x.type()).size() != 4 || to.size() != 5 || as.size() != 4)
    return std::nullopt;
  const std::int64_t hk = shaped_dims(x.type())[1];
  if (hk < 1 || !to[2].value || *to[2].value < 1) return std::nullopt;
  const std::int64_t n = *to[2].value;
  // Expand keeps x's dims but the new one: a 1 (expand's -1), or x's dim.
  for (auto [i, xi] : {std::pair{0, 0}, {1, 1}, {3, 2}, {4, 3}}) {
    const auto& e = to[static_cast<std::size_t>(i)];
    const bool keeps = e.value && (*e.value == 1 || (*e.value == -1 && expand->isa<ExpandOp>()));
    if (!keeps && !is_dim_of(e, x, xi)) return std::nullopt;
  }
  // Reshape to [B, Hk·n, L, D]: one entry may be -1 (then inferred right),
  // the first may be 0 (it copies B).
  int inferred = 0;
  for (std::int64_t i = 0; i < 4; ++i) {
    const auto& e = as[static_cast<std::size_t>(i)];
    if (e.value == -1) ++inferred;
    else if (i == 1 ? e.value != hk * n : !(i == 0 && e.value == 0) && !is_dim_of(e, x, i)) return std::nullopt;
  }
  if (inferred > 1) return std::nullopt;
  return RepeatedHeads{x, n};
}

// k and v as attention reads them: where both are the same repeat of
// Hk-headed values to q's heads, those values (grouped-query attention,
// no repeated copy at run time); else k and v.
std::pair<Value, Value> grouped_kv(Value q, Value k, Value v) {
  const auto rk = repeated_heads(k), rv = repeated_heads(v);
  if (!rk || !rv || rk->n != rv->n) return {k, v};
  const std::int64_t h = shaped_dims(q.type())[1], hk = shaped_dims(rk->x.type())[1];
  if (shaped_dims(rv->x.type())[1] != hk || h != hk * rk->n) return {k, v};
  return {rk->x, rv->x};
}

// The operand of a Mul node that is not a scalar import can compute, and
// that scalar (factor); nullopt when neither operand is one.
std::optional<std::pair<std::string, double>> scaled_operand(const Chain& c, const ::onnx::NodeProto& mul) {
  if (mul.op_type() != "Mul" || mul.input_size() != 2) return std::nullopt;
  for (int i : {1, 0})
    if (auto f = c.computed_scalar(mul.input(i))) return std::pair{mul.input(1 - i), *f};
  return std::nullopt;
}

// The scaled scores of an attention chain starting at a Transpose of k
// (its last two axes swapped; or k [B, L, H, D] taken straight to
// [B, H, D, L], the one Transpose PyTorch writes for Hugging Face's
// `transpose_for_scores(k).transpose(-1, -2)`): q·kᵀ, then a Mul or Div by
// a scalar, or (PyTorch's SDPA export) q and kᵀ each multiplied by
// sqrt(scale) first.
struct Scores {
  Value q, k;
  std::string q_name, k_name, s;  // s: the scaled scores' name
  double scale = 1.0;
  bool k_blhd = false;  // k is [B, L, H, D]
  std::int64_t keys() const { return shaped_dims(k.type())[k_blhd ? 1 : 2]; }
};
std::optional<Scores> scaled_scores(Chain& c, int first) {
  const auto& tr = c.node(first);
  if (tr.op_type() != "Transpose" || tr.input_size() != 1 || tr.attribute_size() != 1) return std::nullopt;
  const auto& perm = tr.attribute(0);
  if (perm.name() != "perm" || perm.ints_size() != 4 || perm.ints(0) != 0) return std::nullopt;
  const std::vector<std::int64_t> p(perm.ints().begin(), perm.ints().end());
  if (p != std::vector<std::int64_t>{0, 1, 3, 2} && p != std::vector<std::int64_t>{0, 2, 3, 1}) return std::nullopt;
  Scores r{{}, c.value(tr.input(0)), {}, tr.input(0), {}, 1.0, p[1] == 2};
  if (!is_float_tensor(r.k) || shaped_dims(r.k.type()).size() != 4) return std::nullopt;
  c.cover(first);
  std::string kt = c.out(first);
  if (const int m = c.sole_reader(kt, "Mul"); m >= 0) {  // kᵀ · sqrt(scale)
    const auto f = scaled_operand(c, c.node(m));
    if (!f || f->first != kt) return std::nullopt;
    r.scale = f->second;
    c.cover(m);
    kt = c.out(m);
  }
  const int qk = c.sole_reader(kt, "MatMul");
  if (qk < 0 || c.in(qk, 1) != kt) return std::nullopt;
  c.cover(qk);
  r.q_name = c.in(qk, 0);
  if (const auto* m = c.made_by(r.q_name, "Mul"); m && !c.value(r.q_name)) {  // q · sqrt(scale), made after kᵀ
    const auto f = scaled_operand(c, *m);
    if (!f || c.sole_reader(r.q_name, "MatMul") != qk) return std::nullopt;
    c.cover(c.producer(r.q_name));
    r.q_name = f->first;
    r.scale *= f->second;
  }
  r.q = c.value(r.q_name);
  if (!is_float_tensor(r.q) || shaped_dims(r.q.type()).size() != 4 ||
      shaped_data_type(r.q.type()) != shaped_data_type(r.k.type()))
    return std::nullopt;
  r.s = c.out(qk);
  const auto* readers = c.readers_of(r.s);
  if (!readers || readers->size() != 1) return std::nullopt;
  if (const auto& n = c.node(readers->front()); n.op_type() == "Mul" || n.op_type() == "Div") {
    const std::string* f = c.other_input(readers->front(), r.s);
    const auto v = f ? c.computed_scalar(*f) : std::nullopt;
    if (!v || *v == 0 || (n.op_type() == "Div" && n.input(0) != r.s)) return std::nullopt;
    r.scale *= n.op_type() == "Mul" ? *v : 1.0 / *v;
    c.cover(readers->front());
    r.s = c.out(readers->front());
  }
  // kiln reads scale 0 as 1/sqrt(D): a zero factor does not fuse.
  if (r.scale == 0 || !std::isfinite(r.scale)) return std::nullopt;
  return r;
}

// Whether `name` is the causal mask PyTorch's SDPA export builds from q's
// and k's shapes: Where(Equal(Trilu(Expand(1, Concat(Slice(Shape(q), -2,
// -1), Slice(Shape(k), -2, -1))), upper 0), 0), -inf, 0).
bool is_exported_causal_mask(const Chain& c, const std::string& name, const std::string& q, const std::string& k) {
  auto is = [&](const std::string& x, double want) {
    const auto v = c.scalar(x);
    return v && (*v == want || (std::isinf(want) && std::isinf(*v) && (*v < 0) == (want < 0)));
  };
  auto ints_are = [&](const std::string& x, std::int64_t want) {
    const auto t = c.known(x);
    return t && t->dtype() == DataType::Int64 && t->numel() == 1 && t->data<std::int64_t>()[0] == want;
  };
  auto length_of = [&](const std::string& x, const std::string& of) {
    const auto* sl = c.made_by(x, "Slice");
    const auto* sh = sl && sl->input_size() >= 3 ? c.made_by(sl->input(0), "Shape") : nullptr;
    return sh && sh->input_size() == 1 && sh->input(0) == of && sh->attribute_size() == 0 && ints_are(sl->input(1), -2) &&
           ints_are(sl->input(2), -1) && (sl->input_size() < 4 || ints_are(sl->input(3), 0));
  };
  const auto* where = c.made_by(name, "Where");
  if (!where || where->input_size() != 3 || !is(where->input(1), -INFINITY) || !is(where->input(2), 0)) return false;
  const auto* eq = c.made_by(where->input(0), "Equal");
  const auto* tri = eq && eq->input_size() == 2 && is(eq->input(1), 0) ? c.made_by(eq->input(0), "Trilu") : nullptr;
  const auto* ex = tri && tri->input_size() == 1 && int_attr(*tri, "upper", 1) == 0 ? c.made_by(tri->input(0), "Expand")
                                                                                    : nullptr;
  const auto* cat = ex && ex->input_size() == 2 && is(ex->input(0), 1) ? c.made_by(ex->input(1), "Concat") : nullptr;
  return cat && cat->input_size() == 2 && length_of(cat->input(0), q) && length_of(cat->input(1), k);
}

// out = softmax(scaled scores [+ mask]) · v (scaled_scores):
//   [c = Add(s, mask)], [Where(causal, ., -inf)], p = Softmax(., axis -1),
//   o = MatMul(p, v)
// -> kiln.scaled_dot_product_attention(q, k, v[, mask]) {causal, scale}
// for rank-4 [B, H, L, D] operands (k also [B, L, H, D]: scaled_scores;
// it is then swapped to BHLD, a swap the fuse pass folds with q's and
// v's into the op's BLHD layout): a constant causal mask, kiln's
// exported causal Where (causal_where) and PyTorch's exported causal mask
// are the causal attribute, any other float mask that broadcasts to the
// scores (a BERT's padding mask, a bias) the op's mask operand. A row the
// mask leaves all -inf gives 0 where ONNX's Softmax gives NaN. k and v
// repeated to q's heads (repeated_heads) are read as they were before the
// repeat.
std::optional<Fused> attention(Chain& c, int first, Builder& b) {
  auto sc = scaled_scores(c, first);
  if (!sc) return std::nullopt;
  Value q = sc->q, k = sc->k, mask;
  std::string s = sc->s;
  bool causal = false;
  const std::int64_t lq = shaped_dims(q.type())[2], lk = sc->keys();
  if (auto w = causal_where(c, s, lq, lk)) {
    causal = true;
    s = *w;
  } else if (int add = c.sole_reader(s, "Add"); add >= 0) {
    const std::string* name = c.other_input(add, s);
    if (!name) return std::nullopt;
    const Tensor* m = c.constant(*name);
    // PyTorch's SDPA export reads Lk from a BHLD k's shape (dim -2).
    if ((m && is_causal_mask(*m) && lq == m->dims()[0] && lk == m->dims()[0]) ||
        (!sc->k_blhd && is_exported_causal_mask(c, *name, sc->q_name, sc->k_name))) {
      causal = true;
    } else {
      mask = c.value(*name);
      if (!mask || !fits_scores(mask, q, lk)) return std::nullopt;
    }
    c.cover(add);
    s = c.out(add);
    if (auto w = causal ? std::nullopt : causal_where(c, s, lq, lk)) {
      causal = true;
      s = *w;
    }
  }
  const int softmax = c.sole_reader(s, "Softmax");
  if (softmax < 0) return std::nullopt;
  const std::int64_t axis = int_attr(c.node(softmax), "axis", c.opset() >= 13 ? -1 : 1);
  if (axis != -1 && axis != 3) return std::nullopt;
  c.cover(softmax);
  const int pv = c.sole_reader(c.out(softmax), "MatMul");
  if (pv < 0 || c.in(pv, 0) != c.out(softmax)) return std::nullopt;
  Value v = c.value(c.in(pv, 1));
  if (!is_float_tensor(v) || shaped_dims(v.type()).size() != 4 ||
      shaped_data_type(v.type()) != shaped_data_type(q.type()))
    return std::nullopt;
  c.cover(pv);
  if (sc->k_blhd) k = b.create<TransposeOp>(k, std::vector<std::int64_t>{0, 2, 1, 3}).result();
  std::tie(k, v) = grouped_kv(q, k, v);
  Value out = b.create<ScaledDotProductAttentionOp>(q, k, v, causal, sc->scale, "BHLD", Value(), mask).result(0);
  return Fused{c.nodes(), c.out(pv), out};
}

float float_attr(const ::onnx::NodeProto& n, const std::string& name, float fallback) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return a.f();
  return fallback;
}

// An inference BatchNormalization's (scale, bias, mean, var) when all four
// are known at import, [o] and of dtype dt; empty otherwise.
std::vector<const Tensor*> batch_norm_constants(const Chain& c, const ::onnx::NodeProto& bn, std::int64_t o,
                                                DataType dt) {
  if (bn.input_size() != 5 || int_attr(bn, "training_mode", 0) != 0 || int_attr(bn, "spatial", 1) != 1 ||
      (c.opset() < 7 && int_attr(bn, "is_test", 0) == 0))
    return {};
  for (int k = 1; k < bn.output_size(); ++k)
    if (!bn.output(k).empty()) return {};
  std::vector<const Tensor*> p;
  for (int k = 1; k < 5; ++k) {
    const Tensor* t = c.constant(bn.input(k));
    if (!t || t->dtype() != dt || t->dims() != Dims{o}) return {};
    p.push_back(t);
  }
  return p;
}

// Conv (weight and bias known at import) whose result only an inference
// BatchNormalization with known statistics reads -> the Conv with the
// normalization folded into new weight and bias initializers (ONNX
// Runtime's Conv + BatchNormalization fusion, done while importing).
std::optional<Fused> conv_batch_norm(Chain& c, int first, Builder& b) {
  const auto& conv = c.node(first);
  if (conv.op_type() != "Conv" || !conv.domain().empty() || conv.input_size() < 2 || conv.output_size() != 1)
    return std::nullopt;
  const int bn_at = c.sole_reader(conv.output(0), "BatchNormalization");
  const bool has_bias = conv.input_size() > 2 && !conv.input(2).empty();
  const Tensor* w = c.constant(conv.input(1));
  const Tensor* bias = has_bias ? c.constant(conv.input(2)) : nullptr;
  Value x = c.value(conv.input(0));
  if (bn_at < 0 || !w || (has_bias && !bias) || !x || w->dims().rank() < 3 || w->dims()[0] < 1 ||
      (w->dtype() != DataType::Float32 && w->dtype() != DataType::Float64) ||
      (bias && (bias->dtype() != w->dtype() || bias->dims() != Dims{w->dims()[0]})))
    return std::nullopt;
  const auto& bn = c.node(bn_at);
  const auto stats = batch_norm_constants(c, bn, w->dims()[0], w->dtype());
  const std::string wname = c.out(bn_at) + "/folded_weight", bname = c.out(bn_at) + "/folded_bias";
  if (stats.empty() || c.out(bn_at).empty() || bn.input(0) != conv.output(0) || c.value(wname) || c.value(bname))
    return std::nullopt;
  const double eps = float_attr(bn, "epsilon", 1e-5f);
  FoldedConv f = fold_batch_norm(*w, bias, *stats[0], *stats[1], *stats[2], *stats[3], eps);
  NodeContext ctx{b, conv, c.opset(), {x, c.parameter(wname, f.weight), c.parameter(bname, f.bias)}, {}, {}, {}, {}, {}, {}};
  for (const Tensor* t : {static_cast<const Tensor*>(nullptr), c.constant(wname), c.constant(bname)})
    ctx.constants.push_back(t);
  c.cover(first);
  c.cover(bn_at);
  return Fused{c.nodes(), c.out(bn_at), op_table().at("Conv").build(ctx).at(0)};
}

}  // namespace

std::optional<Fused> fuse_at(const ::onnx::GraphProto& g, const GraphUses& uses, int first,
                             Builder& b, const FusionScope& scope) {
  using Matcher = std::optional<Fused> (*)(Chain&, int, Builder&);
  for (Matcher m : {&layer_norm, &gelu, &gelu_tanh, &attention, &conv_batch_norm}) {
    Chain chain(g, uses, scope);
    std::optional<Fused> f;
    Operation* const last = b.block()->back();
    try {
      f = m(chain, first, b);
    } catch (const Error&) {  // a fused op's own checks: import node by node instead,
      f.reset();              // without the ops the matcher had built (at the block's end)
      if (!b.insertion_point())
        while (b.block()->back() != last) b.block()->back()->erase();
    }
    if (f) return f;
  }
  return std::nullopt;
}

}  // namespace kiln::onnx::detail

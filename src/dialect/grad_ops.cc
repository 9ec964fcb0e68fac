// Definitions of the gradient ops of kiln/dialect/grad_ops.h (build and
// InferMeta) and of the helpers the Vjps share.
#include "kiln/dialect/grad_ops.h"

#include <algorithm>

#include "kiln/dialect/math_ops.h"
#include "kiln/dialect/nn_ops.h"
#include "kiln/dialect/reduce_ops.h"
#include "kiln/dialect/tensor_ops.h"
#include "op_helpers.h"

namespace kiln {

using dialect_detail::dims_str;
using dialect_detail::expect_tensor;
using dialect_detail::is_index_dtype;
using dialect_detail::make_like;
using dialect_detail::normalize_axis;

KILN_REGISTER_OP(ReduceAsOp);
KILN_REGISTER_OP(ReshapeAsOp);
KILN_REGISTER_OP(ZerosLikeOp);
KILN_REGISTER_OP(SplitAsOp);
KILN_REGISTER_OP(ReluGradOp);
KILN_REGISTER_OP(TanhGradOp);
KILN_REGISTER_OP(SigmoidGradOp);
KILN_REGISTER_OP(AbsGradOp);
KILN_REGISTER_OP(GeluGradOp);
KILN_REGISTER_OP(MaximumGradOp);
KILN_REGISTER_OP(MinimumGradOp);
KILN_REGISTER_OP(SumGradOp);
KILN_REGISTER_OP(MeanGradOp);
KILN_REGISTER_OP(MaxGradOp);
KILN_REGISTER_OP(SoftmaxGradOp);
KILN_REGISTER_OP(LogSoftmaxGradOp);
KILN_REGISTER_OP(SoftmaxWithCrossEntropyGradOp);
KILN_REGISTER_OP(SliceGradOp);
KILN_REGISTER_OP(GatherGradOp);
KILN_REGISTER_OP(EmbeddingGradOp);
KILN_REGISTER_OP(DropoutGradOp);

namespace {

void expect_count(std::string_view op, const std::vector<Type>& in, std::size_t n) {
  if (in.size() != n)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' takes ", n, " operands, got ",
                in.size());
}

// Two static dims that may be equal at run time (-1 matches anything).
bool compatible(std::int64_t a, std::int64_t b) { return a == b || a < 0 || b < 0; }

bool compatible(const std::vector<std::int64_t>& a, const std::vector<std::int64_t>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!compatible(a[i], b[i])) return false;
  return true;
}

// Operand i: a tensor of a floating dtype (the gradient ops' float operands).
Type float_operand(std::string_view op, const std::vector<Type>& in, std::size_t i) {
  Type t = expect_tensor(op, in, i);
  meta::require_floating(op, shaped_data_type(t), i);
  return t;
}

// Operand j has operand i's dtype and (possibly unknown) dims.
void require_like(std::string_view op, const std::vector<Type>& in, std::size_t i, std::size_t j) {
  Type a = expect_tensor(op, in, i), b = expect_tensor(op, in, j);
  meta::require_same_dtype(op, shaped_data_type(a), shaped_data_type(b), i, j);
  if (!compatible(shaped_dims(a), shaped_dims(b)))
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' operands #", i, " and #", j,
                " must have one shape, got ", dims_str(shaped_dims(a)), " and ",
                dims_str(shaped_dims(b)));
}

}  // namespace

// ---- reduce_as ----

void ReduceAsOp::build(Builder&, OperationArgument& arg, Value x, Value target) {
  arg.add_operand(x);
  arg.add_operand(target);
}

std::vector<Type> ReduceAsOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
  expect_count(name, in, 2);
  Type x = float_operand(name, in, 0), t = expect_tensor(name, in, 1);
  const auto& xs = shaped_dims(x);
  const auto& ts = shaped_dims(t);
  bool ok = ts.size() <= xs.size();
  for (std::size_t i = 0; ok && i < ts.size(); ++i) {
    std::int64_t xd = xs[xs.size() - ts.size() + i];
    ok = compatible(xd, ts[i]) || ts[i] == 1;
  }
  if (!ok)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' cannot sum ", dims_str(xs),
                " down to ", dims_str(ts),
                " (the target must be a shape x broadcasts from: x's trailing dims equal or 1)");
  return {make_like({in[0]}, shaped_data_type(x), ts)};
}

// ---- reshape_as ----

void ReshapeAsOp::build(Builder&, OperationArgument& arg, Value x, Value target) {
  arg.add_operand(x);
  arg.add_operand(target);
}

std::vector<Type> ReshapeAsOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
  expect_count(name, in, 2);
  Type x = expect_tensor(name, in, 0), t = expect_tensor(name, in, 1);
  auto count = [](const std::vector<std::int64_t>& d) {
    std::int64_t n = 1;
    for (auto v : d) {
      if (v < 0) return std::int64_t{-1};
      if (__builtin_mul_overflow(n, v, &n)) return std::int64_t{-1};
    }
    return n;
  };
  std::int64_t nx = count(shaped_dims(x)), nt = count(shaped_dims(t));
  if (nx >= 0 && nt >= 0 && nx != nt)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' cannot view ",
                dims_str(shaped_dims(x)), " (", nx, " elements) as ", dims_str(shaped_dims(t)),
                " (", nt, " elements)");
  return {make_like({in[0]}, shaped_data_type(x), shaped_dims(t))};
}

// ---- zeros_like ----

void ZerosLikeOp::build(Builder&, OperationArgument& arg, Value x) { arg.add_operand(x); }

std::vector<Type> ZerosLikeOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
  expect_count(name, in, 1);
  return {expect_tensor(name, in, 0)};
}

// ---- split_as ----

void SplitAsOp::build(Builder&, OperationArgument& arg, Value x, const std::vector<Value>& refs,
                      std::int64_t axis) {
  if (refs.empty())
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' needs at least one ref operand");
  arg.add_operand(x);
  arg.add_operands(refs);
  arg.attributes = to_named_attributes(Attributes{axis});
}

std::vector<Type> SplitAsOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  if (in.size() < 2)
    throw_error(ErrorKind::InvalidArgument, "op '", name,
                "' takes x and at least one ref operand, got ", in.size(), " operands");
  Type x = expect_tensor(name, in, 0);
  const auto& xs = shaped_dims(x);
  auto rank = static_cast<std::int64_t>(xs.size());
  std::int64_t axis = normalize_axis(name, a.axis, rank);
  std::vector<Type> out;
  std::int64_t total = 0;
  for (std::size_t i = 1; i < in.size(); ++i) {
    const auto& rs = shaped_dims(expect_tensor(name, in, i));
    bool ok = static_cast<std::int64_t>(rs.size()) == rank;
    for (std::int64_t k = 0; ok && k < rank; ++k)
      if (k != axis) ok = compatible(rs[k], xs[k]);
    if (!ok)
      throw_error(ErrorKind::InvalidArgument, "op '", name, "' ref #", i, " ", dims_str(rs),
                  " must match x ", dims_str(xs), " in every dim but axis ", axis);
    if (total >= 0) total = rs[axis] < 0 ? -1 : total + rs[axis];
    std::vector<std::int64_t> dims = rs;
    for (std::int64_t k = 0; k < rank; ++k)
      if (k != axis && dims[k] < 0) dims[k] = xs[k];
    out.push_back(make_like({in[0]}, shaped_data_type(x), std::move(dims)));
  }
  if (total >= 0 && xs[axis] >= 0 && total != xs[axis])
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' refs' dims along axis ", axis,
                " add up to ", total, ", x has ", xs[axis]);
  return out;
}

// ---- activations ----

std::vector<Type> infer_unary_grad(std::string_view op, const std::vector<Type>& in) {
  expect_count(op, in, 2);
  Type a = float_operand(op, in, 0);
  require_like(op, in, 0, 1);
  return {make_like(in, shaped_data_type(a), shaped_dims(a))};
}

void GeluGradOp::build(Builder&, OperationArgument& arg, Value x, Value dout, bool approximate) {
  arg.add_operand(x);
  arg.add_operand(dout);
  arg.attributes = to_named_attributes(Attributes{approximate});
}
std::vector<Type> GeluGradOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  (void)from_attributes<Attributes>(attrs, name);
  return infer_unary_grad(name, in);
}

// ---- maximum / minimum ----

namespace {
std::vector<Type> infer_minmax_grad(std::string_view op, const std::vector<Type>& in) {
  expect_count(op, in, 3);
  Type x = float_operand(op, in, 0), y = expect_tensor(op, in, 1), d = expect_tensor(op, in, 2);
  meta::require_same_dtype(op, shaped_data_type(x), shaped_data_type(y), 0, 1);
  meta::require_same_dtype(op, shaped_data_type(x), shaped_data_type(d), 0, 2);
  auto out = broadcast_shapes(op, shaped_dims(x), shaped_dims(y));
  if (!compatible(out, shaped_dims(d)))
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' dout ", dims_str(shaped_dims(d)),
                " must have the broadcast shape of x and y, ", dims_str(out));
  Type t = make_like(in, shaped_data_type(x), shaped_dims(d));
  return {t, t};
}
}  // namespace

void MaximumGradOp::build(Builder&, OperationArgument& arg, Value x, Value y, Value dout) {
  arg.add_operands({x, y, dout});
}
std::vector<Type> MaximumGradOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
  return infer_minmax_grad(name, in);
}
void MinimumGradOp::build(Builder&, OperationArgument& arg, Value x, Value y, Value dout) {
  arg.add_operands({x, y, dout});
}
std::vector<Type> MinimumGradOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
  return infer_minmax_grad(name, in);
}

// ---- reductions ----

std::vector<Type> infer_reduction_grad(std::string_view op, const std::vector<Type>& in,
                                       const std::vector<std::int64_t>& axis, bool keepdim) {
  Type x = float_operand(op, in, 0);
  Type dout = expect_tensor(op, in, in.size() - 1);
  meta::require_same_dtype(op, shaped_data_type(x), shaped_data_type(dout), 0, in.size() - 1);
  // dout must have the reduced shape of x.
  auto reduced = infer_reduce(op, {x}, axis, keepdim, true);
  if (!compatible(shaped_dims(reduced[0]), shaped_dims(dout)))
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' dout ", dims_str(shaped_dims(dout)),
                " must have x's reduced shape ", dims_str(shaped_dims(reduced[0])));
  for (std::size_t i = 1; i + 1 < in.size(); ++i) {  // max_grad's `out`
    Type o = expect_tensor(op, in, i);
    meta::require_same_dtype(op, shaped_data_type(x), shaped_data_type(o), 0, i);
    if (!compatible(shaped_dims(reduced[0]), shaped_dims(o)))
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' out ", dims_str(shaped_dims(o)),
                  " must have x's reduced shape ", dims_str(shaped_dims(reduced[0])));
  }
  return {make_like(in, shaped_data_type(x), shaped_dims(x))};
}

void SumGradOp::build(Builder&, OperationArgument& arg, Value x, Value dout,
                      const std::vector<std::int64_t>& axis, bool keepdim) {
  arg.add_operands({x, dout});
  arg.attributes = to_named_attributes(Attributes{axis, keepdim});
}
std::vector<Type> SumGradOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  expect_count(name, in, 2);
  return infer_reduction_grad(name, in, a.axis, a.keepdim);
}

void MeanGradOp::build(Builder&, OperationArgument& arg, Value x, Value dout,
                       const std::vector<std::int64_t>& axis, bool keepdim) {
  arg.add_operands({x, dout});
  arg.attributes = to_named_attributes(Attributes{axis, keepdim});
}
std::vector<Type> MeanGradOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  expect_count(name, in, 2);
  return infer_reduction_grad(name, in, a.axis, a.keepdim);
}

void MaxGradOp::build(Builder&, OperationArgument& arg, Value x, Value out, Value dout,
                      const std::vector<std::int64_t>& axis, bool keepdim) {
  arg.add_operands({x, out, dout});
  arg.attributes = to_named_attributes(Attributes{axis, keepdim});
}
std::vector<Type> MaxGradOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  expect_count(name, in, 3);
  return infer_reduction_grad(name, in, a.axis, a.keepdim);
}

// ---- softmax family ----

namespace {
std::vector<Type> infer_softmax_grad(std::string_view op, const std::vector<Type>& in,
                                     std::int64_t axis) {
  expect_count(op, in, 2);
  Type out = float_operand(op, in, 0);
  require_like(op, in, 0, 1);
  auto rank = static_cast<std::int64_t>(shaped_dims(out).size());
  if (rank == 0)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' needs operands of rank >= 1");
  (void)normalize_axis(op, axis, rank);
  return {make_like(in, shaped_data_type(out), shaped_dims(out))};
}
}  // namespace

void SoftmaxGradOp::build(Builder&, OperationArgument& arg, Value out, Value dout,
                          std::int64_t axis) {
  arg.add_operands({out, dout});
  arg.attributes = to_named_attributes(Attributes{axis});
}
std::vector<Type> SoftmaxGradOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  return infer_softmax_grad(name, in, from_attributes<Attributes>(attrs, name).axis);
}

void LogSoftmaxGradOp::build(Builder&, OperationArgument& arg, Value out, Value dout,
                             std::int64_t axis) {
  arg.add_operands({out, dout});
  arg.attributes = to_named_attributes(Attributes{axis});
}
std::vector<Type> LogSoftmaxGradOp::infer_meta(const std::vector<Type>& in,
                                               DictionaryAttribute attrs) {
  return infer_softmax_grad(name, in, from_attributes<Attributes>(attrs, name).axis);
}

void SoftmaxWithCrossEntropyGradOp::build(Builder&, OperationArgument& arg, Value softmax,
                                          Value label, Value dloss, std::int64_t ignore_index) {
  arg.add_operands({softmax, label, dloss});
  arg.attributes = to_named_attributes(Attributes{ignore_index});
}
std::vector<Type> SoftmaxWithCrossEntropyGradOp::infer_meta(const std::vector<Type>& in,
                                                            DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  expect_count(name, in, 3);
  // The forward op's checks give the shapes: (softmax, loss) from (logits, label).
  std::vector<Type> fwd = SoftmaxWithCrossEntropyOp::infer_meta(
      {in[0], in[1]}, DictionaryAttribute::get(
                          to_named_attributes(SoftmaxWithCrossEntropyOp::Attributes{a.ignore_index})));
  Type dloss = expect_tensor(name, in, 2);
  meta::require_same_dtype(name, shaped_data_type(in[0]), shaped_data_type(dloss), 0, 2);
  if (!compatible(shaped_dims(fwd[1]), shaped_dims(dloss)))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' dloss ", dims_str(shaped_dims(dloss)),
                " must have the loss's shape ", dims_str(shaped_dims(fwd[1])));
  return {make_like({in[0], in[2]}, shaped_data_type(in[0]), shaped_dims(in[0]))};
}

// ---- indexing ----

void SliceGradOp::build(Builder&, OperationArgument& arg, Value x, Value dout,
                        const std::vector<std::int64_t>& axes, const std::vector<std::int64_t>& starts,
                        const std::vector<std::int64_t>& ends) {
  arg.add_operands({x, dout});
  arg.attributes = to_named_attributes(Attributes{axes, starts, ends});
}
std::vector<Type> SliceGradOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  expect_count(name, in, 2);
  Type x = float_operand(name, in, 0), dout = expect_tensor(name, in, 1);
  meta::require_same_dtype(name, shaped_data_type(x), shaped_data_type(dout), 0, 1);
  auto sliced = SliceOp::infer_meta(
      {x}, DictionaryAttribute::get(to_named_attributes(SliceOp::Attributes{a.axes, a.starts, a.ends})));
  if (!compatible(shaped_dims(sliced[0]), shaped_dims(dout)))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' dout ", dims_str(shaped_dims(dout)),
                " must have the slice's shape ", dims_str(shaped_dims(sliced[0])));
  return {make_like({in[0], in[1]}, shaped_data_type(x), shaped_dims(x))};
}

void GatherGradOp::build(Builder&, OperationArgument& arg, Value x, Value index, Value dout,
                         std::int64_t axis) {
  arg.add_operands({x, index, dout});
  arg.attributes = to_named_attributes(Attributes{axis});
}
std::vector<Type> GatherGradOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  expect_count(name, in, 3);
  Type x = float_operand(name, in, 0), dout = expect_tensor(name, in, 2);
  auto gathered = GatherOp::infer_meta(
      {in[0], in[1]}, DictionaryAttribute::get(to_named_attributes(GatherOp::Attributes{a.axis})));
  meta::require_same_dtype(name, shaped_data_type(x), shaped_data_type(dout), 0, 2);
  if (!compatible(shaped_dims(gathered[0]), shaped_dims(dout)))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' dout ", dims_str(shaped_dims(dout)),
                " must have the gather's shape ", dims_str(shaped_dims(gathered[0])));
  return {make_like({in[0], in[2]}, shaped_data_type(x), shaped_dims(x))};
}

void EmbeddingGradOp::build(Builder&, OperationArgument& arg, Value weight, Value ids, Value dout,
                            std::int64_t padding_idx) {
  arg.add_operands({weight, ids, dout});
  arg.attributes = to_named_attributes(Attributes{padding_idx});
}
std::vector<Type> EmbeddingGradOp::infer_meta(const std::vector<Type>& in,
                                              DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  expect_count(name, in, 3);
  Type w = float_operand(name, in, 0), dout = expect_tensor(name, in, 2);
  auto looked = EmbeddingOp::infer_meta(
      {in[0], in[1]},
      DictionaryAttribute::get(to_named_attributes(EmbeddingOp::Attributes{a.padding_idx})));
  meta::require_same_dtype(name, shaped_data_type(w), shaped_data_type(dout), 0, 2);
  if (!compatible(shaped_dims(looked[0]), shaped_dims(dout)))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' dout ", dims_str(shaped_dims(dout)),
                " must have the lookup's shape ", dims_str(shaped_dims(looked[0])));
  return {make_like({in[0], in[2]}, shaped_data_type(w), shaped_dims(w))};
}

void DropoutGradOp::build(Builder&, OperationArgument& arg, Value dout, Value mask, double p,
                          bool is_test) {
  arg.add_operands({dout, mask});
  arg.attributes = to_named_attributes(Attributes{p, is_test});
}
std::vector<Type> DropoutGradOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  expect_count(name, in, 2);
  Type dout = float_operand(name, in, 0), mask = expect_tensor(name, in, 1);
  if (shaped_data_type(mask) != DataType::Bool)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' mask (operand #1) must be bool, got ",
                to_string(shaped_data_type(mask)));
  if (!compatible(shaped_dims(dout), shaped_dims(mask)))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' dout ", dims_str(shaped_dims(dout)),
                " and mask ", dims_str(shaped_dims(mask)), " must have one shape");
  if (!(a.p >= 0.0 && a.p < 1.0))
    throw_error(ErrorKind::InvalidArgument, "op '", name,
                "' needs a drop probability p in [0, 1), got ", a.p);
  return {make_like({in[0]}, shaped_data_type(dout), shaped_dims(dout))};
}

// ---- Vjp helpers ----

namespace vjp {

bool differentiable(Value v) {
  if (!v) return false;
  Type t = v.type();
  return t && is_shaped(t) && is_floating(shaped_data_type(t));
}

bool all_null(const std::vector<Value>& out_grads) {
  return std::none_of(out_grads.begin(), out_grads.end(), [](Value v) { return bool(v); });
}

void check_out_grads(Operation* op, const std::vector<Value>& out_grads) {
  if (out_grads.size() != op->num_results())
    throw_error(ErrorKind::InvalidArgument, "vjp of op '", op->name(), "' needs one output ",
                "gradient (or a null Value) per result: ", op->num_results(), " results, got ",
                out_grads.size());
}

namespace {
bool fully_known(const std::vector<std::int64_t>& d) {
  return std::all_of(d.begin(), d.end(), [](std::int64_t v) { return v >= 0; });
}
}  // namespace

Value reduce_to(Builder& b, Value grad, Value operand) {
  const auto& g = shaped_dims(grad.type());
  const auto& x = shaped_dims(operand.type());
  if (g == x && fully_known(x)) return grad;
  return b.create<ReduceAsOp>(grad, operand).result();
}

Value reduce_to_operand(Builder& b, Value grad, Value operand, Value other) {
  const auto& g = shaped_dims(grad.type());
  const auto& x = shaped_dims(operand.type());
  const auto& y = shaped_dims(other.type());
  // grad has the broadcast shape of x and y. It is x's shape for certain
  // when every dim of x is known and equal to grad's, or unknown with y's
  // aligned dim 1 or absent (then the result's dim is x's at run time).
  bool same = g.size() == x.size();
  for (std::size_t i = 0; same && i < x.size(); ++i) {
    std::size_t from_end = x.size() - i;
    std::int64_t yd = from_end <= y.size() ? y[y.size() - from_end] : 1;
    if (x[i] >= 0) same = g[i] == x[i];
    else same = yd == 1;
  }
  if (same) return grad;
  return b.create<ReduceAsOp>(grad, operand).result();
}

Value zeros(Builder& b, Value like) {
  Type t = like.type();
  const auto& d = shaped_dims(t);
  if (fully_known(d)) return b.create<FullOp>(d, 0.0, shaped_data_type(t)).result();
  return b.create<ZerosLikeOp>(like).result();
}

}  // namespace vjp

}  // namespace kiln

// ONNX's elementwise ops → kiln's unary, binary (numpy broadcasting, as ONNX
// since opset 7), comparison and logic ops; the variadic Sum / Max / Min as
// chains of binary ops; Gemm, MatMul, Softmax / LogSoftmax, Cast, Where,
// Clip, ArgMax / ArgMin, Trilu, Mod (kiln.mod / kiln.fmod); activations composed of kiln ops
// (LeakyRelu, PRelu, Elu, Selu, HardSigmoid, Softplus, Softsign).
#include <limits>

#include "kiln/dialect/kiln_dialect.h"
#include "model_proto.h"
#include "node_helpers.h"
#include "op_table.h"

namespace kiln::onnx::detail {

namespace {

template <typename OpT>
std::vector<Value> binary(NodeContext& c) {
  return {c.b.create<OpT>(c.input(0), c.input(1)).result()};
}

// Add / Sub / Mul / Div / Pow before opset 7: without `broadcast`, equal
// shapes (numpy broadcasting agrees); with broadcast = 1, B's dims line up
// with A's from `axis` on (default: A's trailing dims, numpy's rule), so B
// gets trailing 1s to make numpy broadcasting do the same.
Value legacy_broadcast_operand(NodeContext& c) {
  Value b = c.input(1);
  if (c.opset >= 7 || c.int_attr("broadcast", 0) == 0 || !c.has_attr("axis")) return b;
  const auto rank_a = static_cast<std::int64_t>(shaped_dims(c.input(0).type()).size());
  std::vector<std::int64_t> d = shaped_dims(b.type());
  std::int64_t axis = c.int_attr("axis", 0);
  if (axis < 0) axis += rank_a;
  const auto rank_b = static_cast<std::int64_t>(d.size());
  if (axis < 0 || axis + rank_b > rank_a) c.unsupported("broadcast axis out of range");
  for (auto e : d)
    if (e < 0) c.unsupported("a broadcast operand with a dim known only at run time");
  d.resize(static_cast<std::size_t>(rank_a - axis), 1);
  return c.b.create<ReshapeOp>(b, d).result();
}

template <typename OpT>
std::vector<Value> broadcasting_binary(NodeContext& c) {
  return {c.b.create<OpT>(c.input(0), legacy_broadcast_operand(c)).result()};
}

// Sum / Max / Min over any number of inputs, broadcasting.
template <typename OpT>
std::vector<Value> variadic(NodeContext& c) {
  Value acc = c.input(0);
  for (std::size_t i = 1; i < c.inputs.size(); ++i) acc = c.b.create<OpT>(acc, c.input(i)).result();
  return {acc};
}

// x itself; known at import when x is (the same tensor, not a copy: an
// exporter's Identity of a large constant, such as each block's causal
// mask, stays one).
std::vector<Value> identity(NodeContext& c) {
  if (!c.constants.empty() && c.constants[0]) c.known_outputs = {*c.constants[0]};
  return {c.input(0)};
}

std::vector<Value> reciprocal(NodeContext& c) {
  Value x = c.input(0);
  Value one = c.b.create<FullOp>(std::vector<std::int64_t>{}, 1.0, shaped_data_type(x.type())).result();
  return {c.b.create<DivOp>(one, x).result()};
}

// Y = alpha · A' · B' + beta · C (C broadcast to [M, N]).
std::vector<Value> gemm(NodeContext& c) {
  Value y = c.b.create<MatmulOp>(c.input(0), c.input(1), c.int_attr("transA", 0) != 0,
                                 c.int_attr("transB", 0) != 0)
                .result();
  const double alpha = c.float_attr("alpha", 1.0f), beta = c.float_attr("beta", 1.0f);
  if (alpha != 1.0) y = c.b.create<ScaleOp>(y, alpha, 0.0).result();
  if (c.inputs.size() > 2 && c.inputs[2] && beta != 0.0) {
    Value bias = c.inputs[2];
    if (beta != 1.0) bias = c.b.create<ScaleOp>(bias, beta, 0.0).result();
    y = c.b.create<AddOp>(y, bias).result();
  }
  return {y};
}

// numpy matmul for operands of rank >= 2 (a 1-D operand is not promoted yet).
std::vector<Value> matmul(NodeContext& c) {
  for (std::size_t i = 0; i < 2; ++i)
    if (shaped_dims(c.input(i).type()).size() < 2)
      c.unsupported("MatMul of a 1-D operand (#" + std::to_string(i) + ") is not imported yet");
  return {c.b.create<MatmulOp>(c.input(0), c.input(1)).result()};
}

// Softmax / LogSoftmax: opset 13 normalizes along `axis` alone; before,
// the input was coerced to 2-D at `axis` (default 1), the same thing only
// when axis is the last dim.
template <typename OpT>
std::vector<Value> softmax(NodeContext& c) {
  Value x = c.input(0);
  const auto rank = static_cast<std::int64_t>(shaped_dims(x.type()).size());
  std::int64_t axis = c.int_attr("axis", c.opset >= 13 ? -1 : 1);
  if (axis < 0) axis += rank;
  if (c.opset < 13 && axis != rank - 1)
    c.unsupported(c.node.op_type() + " before opset 13 with axis " + std::to_string(axis) +
                  " (not the last dim) flattens its input; not imported yet");
  return {c.b.create<OpT>(x, axis).result()};
}

std::vector<Value> cast(NodeContext& c) {
  const std::int64_t to = c.int_attr("to", 0);
  const auto dt = detail::kiln_data_type(static_cast<std::int32_t>(to));
  if (!dt)
    c.unsupported("Cast to element type " + detail::elem_type_name(static_cast<std::int32_t>(to)) +
                  "; kiln has " + std::string(detail::kImportedElemTypes));
  return {c.b.create<CastOp>(c.input(0), *dt).result()};
}

Value scalar_like(NodeContext& c, Value x, double v) {
  return c.b.create<FullOp>(std::vector<std::int64_t>{}, v, shaped_data_type(x.type())).result();
}

std::vector<Value> where(NodeContext& c) {
  return {c.b.create<WhereOp>(c.input(0), c.input(1), c.input(2)).result()};
}

// Bounds: attributes before opset 11, optional inputs since: constants
// become kiln.clip's, bounds computed at run time kiln.maximum / kiln.minimum.
std::vector<Value> clip(NodeContext& c) {
  if (c.opset >= 11 && ((c.inputs.size() > 1 && c.inputs[1] && !c.constants[1]) ||
                        (c.inputs.size() > 2 && c.inputs[2] && !c.constants[2]))) {
    Value y = c.input(0);
    if (c.inputs.size() > 1 && c.inputs[1]) y = c.b.create<MaximumOp>(y, c.inputs[1]).result();
    if (c.inputs.size() > 2 && c.inputs[2]) y = c.b.create<MinimumOp>(y, c.inputs[2]).result();
    return {y};
  }
  double lo = -std::numeric_limits<double>::infinity(), hi = std::numeric_limits<double>::infinity();
  if (c.opset < 11) {
    lo = c.float_attr("min", -std::numeric_limits<float>::infinity());
    hi = c.float_attr("max", std::numeric_limits<float>::infinity());
  } else {
    for (std::size_t i : {1u, 2u}) {
      if (i >= c.inputs.size() || !c.inputs[i]) continue;
      if (!c.constants[i]) c.unsupported("Clip's bound (input #" + std::to_string(i) + ") computed at run time");
      const Tensor& t = *c.constants[i];
      if (t.numel() != 1)
        throw_error(ErrorKind::InvalidArgument, "ONNX ", c.where(), ": Clip's bound (input #", i,
                    ") holds ", t.numel(), " values, expected one");
      double v;
      switch (t.dtype()) {
        case DataType::Float32: v = t.to_vector<float>().at(0); break;
        case DataType::Float64: v = t.to_vector<double>().at(0); break;
        case DataType::Int32: v = t.to_vector<std::int32_t>().at(0); break;
        case DataType::Int64: v = static_cast<double>(t.to_vector<std::int64_t>().at(0)); break;
        default: c.unsupported("Clip's bound of dtype " + std::string(to_string(t.dtype())));
      }
      (i == 1 ? lo : hi) = v;
    }
  }
  return {c.b.create<ClipOp>(c.input(0), lo, hi).result()};
}

// ArgMax / ArgMin: the first index on ties; select_last_index = 1: the
// last, as n - 1 - the first index in x reversed along the axis (a gather
// of n - 1 … 0: the axis's extent must be known at import).
template <typename OpT>
std::vector<Value> arg_reduce(NodeContext& c) {
  Value x = c.input(0);
  const bool keep = c.int_attr("keepdims", 1) != 0;
  std::int64_t axis = c.int_attr("axis", 0);
  if (c.int_attr("select_last_index", 0) == 0) return {c.b.create<OpT>(x, axis, keep).result()};
  const auto& d = shaped_dims(x.type());
  const auto rank = static_cast<std::int64_t>(d.size());
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) c.unsupported("axis out of range");
  const std::int64_t n = d[static_cast<std::size_t>(axis)];
  if (n < 0) c.unsupported("select_last_index = 1 along a dim known only at run time");
  std::vector<std::int64_t> reversed(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) reversed[static_cast<std::size_t>(i)] = n - 1 - i;
  Value idx = constant_value(c.b, Tensor::from_vector<std::int64_t>(Dims{n}, reversed));
  Value first = c.b.create<OpT>(c.b.create<GatherOp>(x, idx, axis).result(), axis, keep).result();
  return {c.b.create<ScaleOp>(first, -1.0, static_cast<double>(n - 1)).result()};
}

// max(x, 0) + alpha · min(x, 0)
std::vector<Value> leaky_relu(NodeContext& c) {
  Value x = c.input(0), zero = scalar_like(c, x, 0.0);
  Value neg = c.b.create<ScaleOp>(c.b.create<MinimumOp>(x, zero).result(), c.float_attr("alpha", 0.01f), 0.0).result();
  return {c.b.create<AddOp>(c.b.create<MaximumOp>(x, zero).result(), neg).result()};
}

// gamma · (max(x, 0) + min(alpha · (exp(x) - 1), 0)): Elu (gamma 1) and
// Selu; exact for alpha >= 0.
Value elu_like(NodeContext& c, double alpha, double gamma) {
  if (alpha < 0) c.unsupported("a negative alpha");
  Value x = c.input(0), zero = scalar_like(c, x, 0.0);
  Value em1 = c.b.create<ScaleOp>(c.b.create<ExpOp>(x).result(), alpha, -alpha).result();
  Value y = c.b.create<AddOp>(c.b.create<MaximumOp>(x, zero).result(),
                              c.b.create<MinimumOp>(em1, zero).result())
                .result();
  return gamma == 1.0 ? y : c.b.create<ScaleOp>(y, gamma, 0.0).result();
}
std::vector<Value> elu(NodeContext& c) { return {elu_like(c, c.float_attr("alpha", 1.0f), 1.0)}; }
std::vector<Value> selu(NodeContext& c) {
  return {elu_like(c, c.float_attr("alpha", 1.67326319217681884765625f),
                   c.float_attr("gamma", 1.05070102214813232421875f))};
}

// max(0, min(1, alpha · x + beta))
std::vector<Value> hard_sigmoid(NodeContext& c) {
  Value x = c.input(0);
  Value lin = c.b.create<ScaleOp>(x, c.float_attr("alpha", 0.2f), c.float_attr("beta", 0.5f)).result();
  return {c.b.create<ClipOp>(lin, 0.0, 1.0).result()};
}

// log(1 + exp(x)), as x where exp(-x) is below the type's precision (x > 20
// in f32, 40 in f64: PyTorch's threshold form), exp read at min(x, that):
// no exp overflows, into the result or its gradient (the sigmoid, 0.5 at
// 0). 16-bit inputs in f32 (exp(12) is inf in f16), rounded once.
Value softplus_of(NodeContext& c, Value x) {
  const DataType dt = shaped_data_type(x.type());
  const bool widen = dt == DataType::Float16 || dt == DataType::BFloat16;
  const DataType ct = widen ? DataType::Float32 : dt;
  Value xs = widen ? c.b.create<CastOp>(x, ct).result() : x;
  Value edge = c.b.create<FullOp>(std::vector<std::int64_t>{}, dt == DataType::Float64 ? 40.0 : 20.0, ct).result();
  Value e = c.b.create<ExpOp>(c.b.create<MinimumOp>(xs, edge).result()).result();
  Value soft = c.b.create<LogOp>(c.b.create<ScaleOp>(e, 1.0, 1.0).result()).result();
  Value y = c.b.create<WhereOp>(c.b.create<GreaterThanOp>(xs, edge).result(), xs, soft).result();
  return widen ? c.b.create<CastOp>(y, dt).result() : y;
}
std::vector<Value> softplus(NodeContext& c) { return {softplus_of(c, c.input(0))}; }

// Mish (opset 18): x · tanh(softplus(x)).
std::vector<Value> mish(NodeContext& c) {
  Value x = c.input(0);
  return {c.b.create<MulOp>(x, c.b.create<TanhOp>(softplus_of(c, x)).result()).result()};
}

// Swish (opset 24): x · sigmoid(alpha · x).
std::vector<Value> swish(NodeContext& c) {
  Value x = c.input(0);
  Value gate = c.b.create<SigmoidOp>(c.b.create<ScaleOp>(x, c.float_attr("alpha", 1.0f)).result()).result();
  return {c.b.create<MulOp>(x, gate).result()};
}

// Gelu (opset 20): approximate none (erf) or tanh, kiln.gelu's two forms.
std::vector<Value> gelu(NodeContext& c) {
  const auto* a = c.attribute("approximate");
  const std::string form = a ? a->s() : "none";
  if (form != "none" && form != "tanh") c.unsupported("approximate '" + form + "'");
  return {c.b.create<GeluOp>(c.input(0), form == "tanh").result()};
}

// x / (1 + |x|)
std::vector<Value> softsign(NodeContext& c) {
  Value x = c.input(0);
  Value d = c.b.create<ScaleOp>(c.b.create<AbsOp>(x).result(), 1.0, 1.0).result();
  return {c.b.create<DivOp>(x, d).result()};
}

// Pow's exponent may have another dtype than its base: cast to the base's.
// An integer base (kiln.pow is float-only) is raised in f64 and the result
// cast back, exact while it fits in 2^53.
std::vector<Value> pow(NodeContext& c) {
  Value x = c.input(0), y = legacy_broadcast_operand(c);
  const DataType dt = shaped_data_type(x.type());
  if (is_integer(dt)) {
    Value xf = c.b.create<CastOp>(x, DataType::Float64).result();
    Value yf = c.b.create<CastOp>(y, DataType::Float64).result();
    return {c.b.create<CastOp>(c.b.create<PowOp>(xf, yf).result(), dt).result()};
  }
  if (shaped_data_type(y.type()) != dt) y = c.b.create<CastOp>(y, dt).result();
  return {c.b.create<PowOp>(x, y).result()};
}

std::vector<Value> cast_like(NodeContext& c) {
  return {c.b.create<CastOp>(c.input(0), shaped_data_type(c.input(1).type())).result()};
}

// Trilu: the upper (or lower) triangle of the last two dims from diagonal k
// (an input, default 0). A k computed at run time: x where (col - row >= k)
// (<= k for the lower), the col - row table a constant of the last two
// dims, which must be known.
std::vector<Value> trilu(NodeContext& c) {
  const bool upper = c.int_attr("upper", 1) != 0;
  if (c.inputs.size() > 1 && c.inputs[1] && !c.constants[1]) {
    Value x = c.input(0), k = c.input(1);
    const auto& d = shaped_dims(x.type());
    if (d.size() < 2 || d[d.size() - 2] < 0 || d.back() < 0)
      c.unsupported("Trilu with k computed at run time of an input whose last two dims are not known");
    const std::int64_t rows = d[d.size() - 2], cols = d.back();
    const DataType kt = shaped_data_type(k.type());
    if (kt != DataType::Int64) c.unsupported("Trilu's k of dtype " + std::string(to_string(kt)));
    std::vector<std::int64_t> diff;
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < cols; ++j) diff.push_back(j - i);
    Value table = constant_value(c.b, Tensor::from_vector<std::int64_t>(Dims{rows, cols}, diff));
    Value keep = upper ? c.b.create<GreaterEqualOp>(table, k).result()
                       : c.b.create<LessEqualOp>(table, k).result();
    return {c.b.create<WhereOp>(keep, x, scalar_like(c, x, 0.0)).result()};
  }
  std::int64_t k = 0;
  if (c.inputs.size() > 1 && c.inputs[1]) k = c.constant_int(1, "Trilu's k");
  if (upper) return {c.b.create<TriuOp>(c.input(0), k).result()};
  return {c.b.create<TrilOp>(c.input(0), k).result()};
}

// max(x, 0) + slope · min(x, 0), slope broadcast to x. Before opset 7 a
// slope of one dim [C] is per channel (x's dim 1): it gets trailing 1s.
std::vector<Value> prelu(NodeContext& c) {
  Value x = c.input(0), zero = scalar_like(c, x, 0.0), slope = c.input(1);
  const std::vector<std::int64_t> xd = shaped_dims(x.type()), sd = shaped_dims(slope.type());
  if (c.opset < 7 && sd.size() == 1 && sd[0] > 1 && xd.size() > 2 && xd[1] == sd[0]) {
    std::vector<std::int64_t> per_channel(xd.size() - 1, 1);
    per_channel[0] = sd[0];
    slope = c.b.create<ReshapeOp>(slope, per_channel).result();
  }
  Value neg = c.b.create<MulOp>(c.b.create<MinimumOp>(x, zero).result(), slope).result();
  return {c.b.create<AddOp>(c.b.create<MaximumOp>(x, zero).result(), neg).result()};
}

// The remainder with the divisor's sign (fmod = 0) or the dividend's
// (fmod = 1).
std::vector<Value> mod(NodeContext& c) {
  return c.int_attr("fmod", 0) != 0 ? binary<FmodOp>(c) : binary<ModOp>(c);
}

// x << y or x >> y (the `direction` attribute, LEFT or RIGHT) on unsigned
// integers.
std::vector<Value> bit_shift(NodeContext& c) {
  const ::onnx::AttributeProto* a = c.attribute("direction");
  const std::string direction = a ? a->s() : "";
  if (direction == "LEFT") return binary<ShiftLeftOp>(c);
  if (direction == "RIGHT") return binary<ShiftRightOp>(c);
  throw_error(ErrorKind::InvalidArgument, "ONNX ", c.where(), " has direction '", direction,
              "', expected LEFT or RIGHT");
}

// Mean of the inputs (broadcasting): their sum / n.
std::vector<Value> mean(NodeContext& c) {
  Value sum = variadic<AddOp>(c)[0];
  const double n = static_cast<double>(c.inputs.size());
  return {n == 1 ? sum : c.b.create<ScaleOp>(sum, 1.0 / n, 0.0).result()};
}

// Running sum along the axis (input #1), exclusive and reverse as kiln's.
// An axis computed at run time: the running sum along each dim, the one
// the axis names selected (kiln.where on axis == i, a negative axis counted
// from the end).
std::vector<Value> cumsum(NodeContext& c) {
  const bool exclusive = c.int_attr("exclusive", 0) != 0, reverse = c.int_attr("reverse", 0) != 0;
  Value x = c.input(0);
  if (c.constants[1]) {
    const std::int64_t axis = c.constant_int(1, "CumSum's axis");
    return {c.b.create<CumsumOp>(x, axis, exclusive, reverse).result()};
  }
  Value axis = c.input(1);
  const auto rank = static_cast<std::int64_t>(shaped_dims(x.type()).size());
  if (rank == 0) c.unsupported("CumSum of a rank-0 input");
  auto scalar = [&](std::int64_t v) { return scalar_like(c, axis, static_cast<double>(v)); };
  // axis < 0 ? axis + rank : axis
  Value wrapped = c.b.create<AddOp>(axis, scalar(rank)).result();
  axis = c.b.create<WhereOp>(c.b.create<LessThanOp>(axis, scalar(0)).result(), wrapped, axis).result();
  Value y = c.b.create<CumsumOp>(x, 0, exclusive, reverse).result();
  for (std::int64_t i = 1; i < rank; ++i) {
    Value yi = c.b.create<CumsumOp>(x, i, exclusive, reverse).result();
    y = c.b.create<WhereOp>(c.b.create<EqualOp>(axis, scalar(i)).result(), yi, y).result();
  }
  return {y};
}

}  // namespace

void add_elementwise_ops(OpTable& t) {
  t["Mean"] = {&mean, 6};  // equal shapes before opset 8: numpy agrees
  t["CumSum"] = {&cumsum, 11};
  t["PRelu"] = {&prelu, 6};
  t["Trilu"] = {&trilu, 14};
  t["Where"] = {&where, 9};
  t["Clip"] = {&clip, 6};
  t["ArgMax"] = {&arg_reduce<ArgMaxOp>, 1};
  t["ArgMin"] = {&arg_reduce<ArgMinOp>, 1};
  t["LeakyRelu"] = {&leaky_relu, 1};
  t["Elu"] = {&elu, 1};
  t["Selu"] = {&selu, 1};
  t["HardSigmoid"] = {&hard_sigmoid, 1};
  t["Softplus"] = {&softplus, 1};
  t["Mish"] = {&mish, 18};
  t["Gelu"] = {&gelu, 20};
  t["Swish"] = {&swish, 24};
  t["Softsign"] = {&softsign, 1};
  // Numpy broadcasting from opset 7 (before: the `broadcast` and `axis`
  // attributes, legacy_broadcast_operand).
  t["Add"] = {&broadcasting_binary<AddOp>, 1};
  t["Sub"] = {&broadcasting_binary<SubOp>, 1};
  t["Mul"] = {&broadcasting_binary<MulOp>, 1};
  t["Div"] = {&broadcasting_binary<DivOp>, 1};
  t["Pow"] = {&pow, 1};
  t["Mod"] = {&mod, 10};
  t["BitShift"] = {&bit_shift, 11};
  t["Sum"] = {&variadic<AddOp>, 6};
  t["Max"] = {&variadic<MaximumOp>, 6};
  t["Min"] = {&variadic<MinimumOp>, 6};
  // Opsets 1 to 5 add only consumed_inputs (a legacy hint) to the unary ops.
  t["Relu"] = {&unary<ReluOp>, 1};
  t["Tanh"] = {&unary<TanhOp>, 1};
  t["Sigmoid"] = {&unary<SigmoidOp>, 1};
  t["Exp"] = {&unary<ExpOp>, 1};
  t["Log"] = {&unary<LogOp>, 1};
  t["Sqrt"] = {&unary<SqrtOp>, 1};
  t["Abs"] = {&unary<AbsOp>, 1};
  t["Neg"] = {&unary<NegOp>, 1};
  t["Reciprocal"] = {&reciprocal, 1};
  t["Identity"] = {&identity, 1};
  t["Equal"] = {&binary<EqualOp>, 11};
  t["Less"] = {&binary<LessThanOp>, 9};
  t["Greater"] = {&binary<GreaterThanOp>, 9};
  t["LessOrEqual"] = {&binary<LessEqualOp>, 12};
  t["GreaterOrEqual"] = {&binary<GreaterEqualOp>, 12};
  t["And"] = {&binary<LogicalAndOp>, 7};
  t["Or"] = {&binary<LogicalOrOp>, 7};
  t["Xor"] = {&binary<LogicalXorOp>, 7};
  t["Not"] = {&unary<LogicalNotOp>, 1};
  t["Gemm"] = {&gemm, 6};  // C broadcast one way (numpy-compatible) in every version
  t["MatMul"] = {&matmul, 1};
  t["Softmax"] = {&softmax<SoftmaxOp>, 1};
  t["LogSoftmax"] = {&softmax<LogSoftmaxOp>, 1};
  t["Cast"] = {&cast, 6};
  t["CastLike"] = {&cast_like, 15};  // `to` an enum since opset 6
}

}  // namespace kiln::onnx::detail

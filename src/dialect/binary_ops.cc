// The broadcasting binary ops and add_n of kiln/dialect/binary_ops.h: their
// InferMeta, Vjp and gradient ops, and their registration.
#include "kiln/dialect/binary_ops.h"

#include "kiln/dialect/unary_ops.h"

namespace kiln {

namespace {
template <typename... Maths>
struct RegisterBinaryFamily;
template <typename... Maths>
struct RegisterBinaryFamily<BinaryMathList<Maths...>> {
  OpRegistrar<BinaryOp<Maths>...> ops;
};
const RegisterBinaryFamily<BinaryFamily> binary_family;
}  // namespace

KILN_REGISTER_OP(GradOf<MaximumOp>, GradOf<MinimumOp>, AddNOp);

namespace detail {

std::vector<Type> infer_binary(std::string_view op, const std::vector<Type>& in,
                               bool floating_only, bool integer_only) {
  meta::require_count(op, in, 2);
  Type x = meta::tensor_operand(op, in, 0), y = meta::tensor_operand(op, in, 1);
  DataType dx = shaped_data_type(x), dy = shaped_data_type(y);
  meta::require_same_dtype(op, dx, dy);
  if (floating_only) meta::require_floating(op, dx);
  if (integer_only && !is_integer(dx))
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' shifts integers, got ", to_string(dx));
  return {meta::result_like(in, dx, broadcast_shapes(op, shaped_dims(x), shaped_dims(y)))};
}

// Null grads when no gradient flows or no operand is a float tensor; else
// the Math's grads, summed back to each operand's shape.
std::vector<Value> binary_vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads,
                              BinaryGrads (*grads)(Builder&, Operation*, Value)) {
  Value d = vjp::single_grad(op, out_grads);
  Value x = op->operand_source(0), y = op->operand_source(1);
  std::vector<Value> out(2);
  if (!d || (!vjp::differentiable(x) && !vjp::differentiable(y))) return out;
  auto [gx, gy] = grads(b, op, d);
  if (vjp::differentiable(x) && gx) out[0] = vjp::reduce_to_operand(b, gx, x, y);
  if (vjp::differentiable(y) && gy) out[1] = vjp::reduce_to_operand(b, gy, y, x);
  return out;
}

void MinMaxGradSpec::check(std::string_view op, const std::vector<Type>& in, DictionaryAttribute) {
  Type x = in[0], y = in[1], d = in[2];
  meta::require_same_dtype(op, shaped_data_type(x), shaped_data_type(y), 0, 1);
  meta::require_same_dtype(op, shaped_data_type(x), shaped_data_type(d), 0, 2);
  auto out = broadcast_shapes(op, shaped_dims(x), shaped_dims(y));
  if (!meta::compatible_dims(out, shaped_dims(d)))
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' dout ",
                meta::dims_string(shaped_dims(d)), " must have the broadcast shape of x and y, ",
                meta::dims_string(out));
}

}  // namespace detail

// ---- gradients in the broadcast shape ----

BinaryGrads AddMath::grads(Builder&, Operation*, Value d) { return {d, d}; }

BinaryGrads SubMath::grads(Builder& b, Operation*, Value d) {
  return {d, b.create<NegOp>(d).result()};
}

BinaryGrads MulMath::grads(Builder& b, Operation* op, Value d) {
  Value x = op->operand_source(0), y = op->operand_source(1);
  return {b.create<MulOp>(d, y).result(), b.create<MulOp>(d, x).result()};
}

// d/dx x/y = 1/y; d/dy x/y = -x/y² = -out/y.
BinaryGrads DivMath::grads(Builder& b, Operation* op, Value d) {
  Value y = op->operand_source(1), out = op->result(0);
  Value dx = b.create<DivOp>(d, y).result();
  Value t = b.create<DivOp>(b.create<MulOp>(d, out).result(), y).result();
  return {dx, b.create<NegOp>(t).result()};
}

namespace {
template <typename MinMaxOp>
BinaryGrads minmax_grads(Builder& b, Operation* op, Value d) {
  auto split = b.create<GradOf<MinMaxOp>>(op, op->operand_source(0), op->operand_source(1), d);
  return {split.operation()->result(0), split.operation()->result(1)};
}
}  // namespace

BinaryGrads MaximumMath::grads(Builder& b, Operation* op, Value d) {
  return minmax_grads<MaximumOp>(b, op, d);
}
BinaryGrads MinimumMath::grads(Builder& b, Operation* op, Value d) {
  return minmax_grads<MinimumOp>(b, op, d);
}

// d/dx x^y = y·x^(y-1); d/dy x^y = x^y·ln x.
BinaryGrads PowMath::grads(Builder& b, Operation* op, Value d) {
  Value x = op->operand_source(0), y = op->operand_source(1), out = op->result(0);
  Value ym1 = b.create<ScaleOp>(y, 1.0, -1.0).result();
  Value p = b.create<PowOp>(x, ym1).result();
  Value dx = b.create<MulOp>(d, b.create<MulOp>(y, p).result()).result();
  Value lx = b.create<LogOp>(x).result();
  Value dy = b.create<MulOp>(b.create<MulOp>(d, out).result(), lx).result();
  return {dx, dy};
}

// out = x - q·y with q = trunc(x / y) or floor(x / y), constant almost
// everywhere: dx = dout, dy = -dout·q = -dout·(x - out) / y.
namespace {
BinaryGrads remainder_grads(Builder& b, Operation* op, Value d) {
  Value x = op->operand_source(0), y = op->operand_source(1), out = op->result(0);
  Value q = b.create<DivOp>(b.create<SubOp>(x, out).result(), y).result();
  return {d, b.create<NegOp>(b.create<MulOp>(d, q).result()).result()};
}
}  // namespace

BinaryGrads ModMath::grads(Builder& b, Operation* op, Value d) { return remainder_grads(b, op, d); }
// Integers only: nothing to differentiate.
BinaryGrads ShiftLeftMath::grads(Builder&, Operation*, Value) { return {}; }
BinaryGrads ShiftRightMath::grads(Builder&, Operation*, Value) { return {}; }
BinaryGrads FmodMath::grads(Builder& b, Operation* op, Value d) {
  return remainder_grads(b, op, d);
}

// ---- add_n ----

void AddNOp::build(Builder&, OperationArgument& arg, const std::vector<Value>& xs) {
  if (xs.empty())
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' needs at least one operand");
  arg.add_operands(xs);
}

std::vector<Type> AddNOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
  if (in.empty())
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' needs at least one operand");
  Type x0 = meta::tensor_operand(name, in, 0);
  DataType dt = shaped_data_type(x0);
  std::vector<std::int64_t> dims = shaped_dims(x0);
  for (std::size_t i = 1; i < in.size(); ++i) {
    Type xi = meta::tensor_operand(name, in, i);
    meta::require_same_dtype(name, dt, shaped_data_type(xi), 0, i);
    const auto& di = shaped_dims(xi);
    bool ok = di.size() == dims.size();
    for (std::size_t k = 0; ok && k < di.size(); ++k) {
      if (dims[k] == -1) dims[k] = di[k];  // an unknown dim takes a known one
      else if (di[k] != -1 && di[k] != dims[k]) ok = false;
    }
    if (!ok)
      throw_error(ErrorKind::InvalidArgument, "op '", name,
                  "' operands must have one shape (no broadcasting), got ",
                  meta::dims_string(shaped_dims(x0)), " (operand #0) and ", meta::dims_string(di),
                  " (operand #", i, ")");
  }
  return {meta::result_like(in, dt, std::move(dims))};
}

std::vector<Value> AddNOp::vjp(Builder&, Operation* op, const std::vector<Value>& g) {
  Value d = vjp::single_grad(op, g);
  std::vector<Value> out(op->num_operands());
  if (!d) return out;
  for (std::uint32_t i = 0; i < op->num_operands(); ++i)
    if (vjp::differentiable(op->operand_source(i))) out[i] = d;
  return out;
}

}  // namespace kiln

// The softmax family of kiln/dialect/nn_ops.h: InferMeta, Vjp, gradient ops
// and registration.
#include "kiln/dialect/nn_ops.h"

#include "kiln/dialect/binary_ops.h"
#include "kiln/dialect/unary_ops.h"

namespace kiln {

KILN_REGISTER_OP(SoftmaxOp, GradOf<SoftmaxOp>, LogSoftmaxOp, GradOf<LogSoftmaxOp>,
                 SoftmaxWithCrossEntropyOp, GradOf<SoftmaxWithCrossEntropyOp>, CrossEntropyOp,
                 GradOf<CrossEntropyOp>, CrossEntropyGradInplaceOp);

namespace {
std::vector<Type> infer_softmax(std::string_view op, const std::vector<Type>& in,
                                std::int64_t axis) {
  Type x = meta::tensor_operand(op, in, 0);
  meta::require_floating(op, shaped_data_type(x));
  auto rank = static_cast<std::int64_t>(shaped_dims(x).size());
  if (rank == 0)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' needs an operand of rank >= 1, got ",
                x.to_string());
  if (axis < -rank || axis >= rank)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' axis ", axis,
                " is out of range for rank ", rank, " (expected [", -rank, ", ", rank, "))");
  return {x};
}
}  // namespace

void SoftmaxOp::build(Builder&, OperationArgument& arg, Value x, std::int64_t axis) {
  arg.add_operand(x);
  arg.attributes = to_named_attributes(Attributes{axis});
}
std::vector<Type> SoftmaxOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  return infer_softmax(name, in, from_attributes<Attributes>(attrs, name).axis);
}

void LogSoftmaxOp::build(Builder&, OperationArgument& arg, Value x, std::int64_t axis) {
  arg.add_operand(x);
  arg.attributes = to_named_attributes(Attributes{axis});
}
std::vector<Type> LogSoftmaxOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  return infer_softmax(name, in, from_attributes<Attributes>(attrs, name).axis);
}

void SoftmaxWithCrossEntropyOp::build(Builder&, OperationArgument& arg, Value logits, Value label,
                                      std::int64_t ignore_index) {
  arg.add_operand(logits);
  arg.add_operand(label);
  arg.attributes = to_named_attributes(Attributes{ignore_index});
}

namespace {
// The loss's type ([..., 1]; the logits' dtype, f32 for 16-bit logits when
// `f32_for_half`) of logits [..., C] against a label of the leading dims,
// with or without a trailing 1.
Type cross_entropy_loss_type(std::string_view name, const std::vector<Type>& in, bool f32_for_half) {
  Type logits = meta::tensor_operand(name, in, 0), label = meta::tensor_operand(name, in, 1);
  DataType dt = shaped_data_type(logits), lt = shaped_data_type(label);
  meta::require_floating(name, dt, 0);
  if (lt != DataType::Int64 && lt != DataType::Int32)
    throw_error(ErrorKind::InvalidArgument, "op '", name,
                "' label (operand #1) must be i64 or i32, got ", to_string(lt));
  const auto& ls = shaped_dims(logits);
  const auto& ys = shaped_dims(label);
  if (ls.size() < 2)
    throw_error(ErrorKind::InvalidArgument, "op '", name,
                "' logits (operand #0) must have rank >= 2 ([N, C]), got ", meta::dims_string(ls));
  std::vector<std::int64_t> lead(ls.begin(), ls.end() - 1);
  auto matches = [](const std::vector<std::int64_t>& a, const std::vector<std::int64_t>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
      if (a[i] != b[i] && a[i] != -1 && b[i] != -1) return false;
    return true;
  };
  std::vector<std::int64_t> lead1 = lead;
  lead1.push_back(1);
  if (!matches(ys, lead) && !matches(ys, lead1))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' label shape ",
                meta::dims_string(ys), " does not fit logits ", meta::dims_string(ls),
                " (expected ", meta::dims_string(lead), " or ", meta::dims_string(lead1), ")");
  const bool half = dt == DataType::BFloat16 || dt == DataType::Float16;
  return meta::result_like(in, half && f32_for_half ? DataType::Float32 : dt, lead1);
}
}  // namespace

std::vector<Type> SoftmaxWithCrossEntropyOp::infer_meta(const std::vector<Type>& in,
                                                        DictionaryAttribute attrs) {
  (void)from_attributes<Attributes>(attrs, name);
  Type loss = cross_entropy_loss_type(name, in, false);
  return {meta::result_like(in, shaped_data_type(in[0]), shaped_dims(in[0])), loss};
}

void CrossEntropyOp::build(Builder&, OperationArgument& arg, Value logits, Value label,
                           std::int64_t ignore_index) {
  arg.add_operand(logits);
  arg.add_operand(label);
  arg.attributes = to_named_attributes(Attributes{ignore_index});
}

std::vector<Type> CrossEntropyOp::infer_meta(const std::vector<Type>& in,
                                             DictionaryAttribute attrs) {
  (void)from_attributes<Attributes>(attrs, name);
  Type loss = cross_entropy_loss_type(name, in, true);
  return {loss, loss};
}

// ---- gradients ----

namespace {
void check_softmax_grad(std::string_view op, const std::vector<Type>& in,
                        DictionaryAttribute attrs) {
  std::int64_t axis = from_attributes<SoftmaxOp::Attributes>(attrs, op).axis;
  Type out = meta::float_operand(op, in, 0);
  meta::require_like(op, in, 0, 1);
  auto rank = static_cast<std::int64_t>(shaped_dims(out).size());
  if (rank == 0)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' needs operands of rank >= 1");
  if (axis < -rank || axis >= rank)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' axis ", axis,
                " is out of range for rank ", rank, " (expected [", -rank, ", ", rank, "))");
}
}  // namespace


void SoftmaxOp::Grad::check(std::string_view op, const std::vector<Type>& in,
                            DictionaryAttribute attrs) {
  check_softmax_grad(op, in, attrs);
}
void LogSoftmaxOp::Grad::check(std::string_view op, const std::vector<Type>& in,
                               DictionaryAttribute attrs) {
  check_softmax_grad(op, in, attrs);
}

void SoftmaxWithCrossEntropyOp::Grad::check(std::string_view name, const std::vector<Type>& in,
                                            DictionaryAttribute attrs) {
  // The forward op's checks give the shapes: (softmax, loss) from (logits, label).
  std::vector<Type> fwd = SoftmaxWithCrossEntropyOp::infer_meta(
      {in[0], in[1]}, attrs);
  Type dloss = meta::tensor_operand(name, in, 2);
  meta::require_same_dtype(name, shaped_data_type(in[0]), shaped_data_type(dloss), 0, 2);
  if (!meta::compatible_dims(shaped_dims(fwd[1]), shaped_dims(dloss)))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' dloss ", meta::dims_string(shaped_dims(dloss)),
                " must have the loss's shape ", meta::dims_string(shaped_dims(fwd[1])));
}

void CrossEntropyOp::Grad::check(std::string_view name, const std::vector<Type>& in,
                                 DictionaryAttribute attrs) {
  // (logits, lse, label, dloss): lse and dloss typed like the forward's loss.
  const Type loss = CrossEntropyOp::infer_meta({in[0], in[2]}, attrs)[0];
  for (std::uint32_t i : {1u, 3u}) {
    Type t = meta::tensor_operand(name, in, i);
    if (shaped_data_type(t) != shaped_data_type(loss))
      throw_error(ErrorKind::InvalidArgument, "op '", name, "' ", i == 1 ? "lse" : "dloss", " is ",
                  to_string(shaped_data_type(t)), ", the loss's dtype is ", to_string(shaped_data_type(loss)),
                  " (f32 for bf16 / f16 logits)");
    if (!meta::compatible_dims(shaped_dims(loss), shaped_dims(t)))
      throw_error(ErrorKind::InvalidArgument, "op '", name, "' ", i == 1 ? "lse " : "dloss ",
                  meta::dims_string(shaped_dims(t)), " must have the loss's shape ",
                  meta::dims_string(shaped_dims(loss)));
  }
}

std::vector<Type> CrossEntropyGradInplaceOp::infer_meta(const std::vector<Type>& in,
                                                        DictionaryAttribute attrs) {
  CrossEntropyOp::Grad::check(name, in, attrs);
  return {in[0]};
}

// ---- softmax family ----

std::vector<Value> SoftmaxOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = vjp::single_grad(op, g);
  if (!d || !vjp::differentiable(op->operand_source(0))) return {Value()};
  return {b.create<GradOf<SoftmaxOp>>(op, op->result(0), d).result()};
}

std::vector<Value> LogSoftmaxOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = vjp::single_grad(op, g);
  if (!d || !vjp::differentiable(op->operand_source(0))) return {Value()};
  return {b.create<GradOf<LogSoftmaxOp>>(op, op->result(0), d).result()};
}

// Results (softmax, loss): the loss's grad gives (softmax - onehot)·dloss;
// a grad of the softmax result adds softmax_grad along the class axis. The
// label gets none.
std::vector<Value> SoftmaxWithCrossEntropyOp::vjp(Builder& b, Operation* op,
                                                  const std::vector<Value>& g) {
  vjp::check_out_grads(op, g);
  std::vector<Value> grads(2);
  if (vjp::all_null(g) || !vjp::differentiable(op->operand_source(0))) return grads;
  Value softmax = op->result(0);
  Value dx;
  if (g[1])
    dx = b.create<GradOf<SoftmaxWithCrossEntropyOp>>(op, softmax, op->operand_source(1), g[1]).result();
  if (g[0]) {
    Value ds = b.create<GradOf<SoftmaxOp>>(SoftmaxOp::Attributes{-1}, softmax, g[0]).result();
    dx = dx ? Value(b.create<AddOp>(dx, ds).result()) : ds;
  }
  grads[0] = dx;
  return grads;
}

// Results (loss, lse): the loss's grad from the logits and lse (the
// softmax recomputed); a grad of lse adds softmax · dlse. The label gets
// none.
std::vector<Value> CrossEntropyOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  vjp::check_out_grads(op, g);
  std::vector<Value> grads(2);
  if (vjp::all_null(g) || !vjp::differentiable(op->operand_source(0))) return grads;
  Value logits = op->operand_source(0), lse = op->result(1);
  Value dx;
  if (g[0])
    dx = b.create<GradOf<CrossEntropyOp>>(op, logits, lse, op->operand_source(1), g[0]).result();
  if (g[1]) {
    // softmax · dlse in the loss's dtype (f32 for 16-bit logits), then in
    // the logits' dtype.
    const DataType ldt = shaped_data_type(logits.type()), acc = shaped_data_type(lse.type());
    Value wide = ldt == acc ? logits : Value(b.create<CastOp>(logits, acc).result());
    Value softmax = b.create<ExpOp>(b.create<SubOp>(wide, lse).result()).result();
    Value ds = b.create<MulOp>(softmax, g[1]).result();
    if (ldt != acc) ds = b.create<CastOp>(ds, ldt).result();
    dx = dx ? Value(b.create<AddOp>(dx, ds).result()) : ds;
  }
  grads[0] = dx;
  return grads;
}

}  // namespace kiln

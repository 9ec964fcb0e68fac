// kiln.matmul and kiln.det (kiln/dialect/linalg_ops.h): InferMeta, Vjp,
// registration.
#include "kiln/dialect/linalg_ops.h"
#include "kiln/dialect/tensor_ops.h"

#include <utility>

namespace kiln {

KILN_REGISTER_OP(MatmulOp, DetOp);

void MatmulOp::build(Builder&, OperationArgument& arg, Value x, Value y, bool tx, bool ty) {
  arg.add_operand(x);
  arg.add_operand(y);
  arg.attributes = to_named_attributes(Attributes{tx, ty});
}

std::vector<Type> MatmulOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  meta::require_count(name, in, 2);
  Type x = meta::tensor_operand(name, in, 0), y = meta::tensor_operand(name, in, 1);
  DataType dx = shaped_data_type(x), dy = shaped_data_type(y);
  meta::require_same_dtype(name, dx, dy);
  auto xs = shaped_dims(x), ys = shaped_dims(y);
  if (xs.size() < 2 || ys.size() < 2)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' operands must have rank >= 2, got ",
                xs.size(), " and ", ys.size());
  std::int64_t m = xs[xs.size() - 2], kx = xs.back();
  if (a.transpose_x) std::swap(m, kx);
  std::int64_t ky = ys[ys.size() - 2], n = ys.back();
  if (a.transpose_y) std::swap(ky, n);
  if (kx >= 0 && ky >= 0 && kx != ky)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' contraction dims differ: ", kx,
                " vs ", ky);
  std::vector<std::int64_t> bx(xs.begin(), xs.end() - 2), by(ys.begin(), ys.end() - 2);
  auto dims = broadcast_shapes(name, bx, by);
  dims.push_back(m);
  dims.push_back(n);
  return {meta::result_like(in, dx, std::move(dims))};
}

// out = op(x) @ op(y) with op = transpose of the last two dims when flagged.
// Each grad is one matmul of dout with the other operand (flags chosen so
// no explicit transpose is needed), then reduce_as over broadcast batches.
std::vector<Value> MatmulOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = vjp::single_grad(op, g);
  Value x = op->operand_source(0), y = op->operand_source(1);
  std::vector<Value> grads(2);
  if (!d) return grads;
  auto a = MatmulOp(op).attrs();
  auto mm = [&](Value p, Value q, bool tp, bool tq) {
    return b.create<MatmulOp>(p, q, tp, tq).result();
  };
  // Rank-2 operands have no batch dims to broadcast: their grads have their
  // shape already.
  const bool plain = shaped_dims(x.type()).size() == 2 && shaped_dims(y.type()).size() == 2;
  auto fit = [&](Value grad, Value operand) {
    return plain ? grad : vjp::reduce_to(b, grad, operand);
  };
  // x [..., M, K] (batch dims, not transposed) times one matrix y: the
  // batch rows fold into M. dx = d · yᵀ has x's shape as it is, and dy is
  // one GEMM over all rows, x as [rows, K] against d as [rows, N] — not a
  // batched product summed over the batch afterwards.
  const auto& xd = shaped_dims(x.type());
  const auto& dd = shaped_dims(d.type());
  if (xd.size() > 2 && shaped_dims(y.type()).size() == 2 && !a.transpose_x && xd.back() >= 0 &&
      dd.back() >= 0) {
    if (vjp::differentiable(x)) grads[0] = mm(d, y, false, !a.transpose_y);
    if (vjp::differentiable(y)) {
      Value x2 = b.create<ReshapeOp>(x, std::vector<std::int64_t>{-1, xd.back()}).result();
      Value d2 = b.create<ReshapeOp>(d, std::vector<std::int64_t>{-1, dd.back()}).result();
      grads[1] = a.transpose_y ? mm(d2, x2, true, false) : mm(x2, d2, true, false);
    }
    return grads;
  }
  if (vjp::differentiable(x)) {
    Value dx;
    if (!a.transpose_x) dx = a.transpose_y ? mm(d, y, false, false) : mm(d, y, false, true);
    else dx = a.transpose_y ? mm(y, d, true, true) : mm(y, d, false, true);
    grads[0] = fit(dx, x);
  }
  if (vjp::differentiable(y)) {
    Value dy;
    if (!a.transpose_y) dy = a.transpose_x ? mm(x, d, false, false) : mm(x, d, true, false);
    else dy = a.transpose_x ? mm(d, x, true, true) : mm(d, x, true, false);
    grads[1] = fit(dy, y);
  }
  return grads;
}

void DetOp::build(Builder&, OperationArgument& arg, Value x) { arg.add_operand(x); }

std::vector<Type> DetOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
  meta::require_count(name, in, 1);
  Type x = meta::tensor_operand(name, in, 0);
  const DataType dt = shaped_data_type(x);
  if (dt != DataType::Float32 && dt != DataType::Float64)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' takes f32 or f64, got ",
                to_string(dt));
  std::vector<std::int64_t> d = shaped_dims(x);
  if (d.size() < 2)
    throw_error(ErrorKind::InvalidArgument, "op '", name,
                "' needs square matrices [..., n, n], got ", meta::dims_string(d));
  const std::int64_t m = d[d.size() - 2], n = d[d.size() - 1];
  if (m >= 0 && n >= 0 && m != n)
    throw_error(ErrorKind::InvalidArgument, "op '", name,
                "' needs square matrices [..., n, n], got ", meta::dims_string(d));
  d.resize(d.size() - 2);
  return {meta::result_like(in, dt, std::move(d))};
}

}  // namespace kiln

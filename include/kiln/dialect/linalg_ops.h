// Linear algebra: matmul (numpy matmul for rank >= 2 with transpose flags on
// the last two dims; batch dims broadcast, so it is also the batched matmul)
// and det.
#pragma once

#include "kiln/dialect/grad_op.h"

namespace kiln {

// out[..., m, n] = op(x)[..., m, k] · op(y)[..., k, n], op = transpose of the
// last two dims when its flag is set. f32, f64 (BLAS).
struct MatmulOp : Op<MatmulOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.matmul";
  static constexpr int num_operands = 2, num_results = 1;
  KILN_ATTRIBUTES((bool, transpose_x), (bool, transpose_y));
  static void build(Builder& b, OperationArgument& arg, Value x, Value y, bool transpose_x = false,
                    bool transpose_y = false);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
};

// kiln.det(x [..., n, n]) -> [...]: the determinants of square matrices
// (LU with partial pivoting, in double). f32, f64. No grad.
struct DetOp : Op<DetOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.det";
  static constexpr int num_operands = 1, num_results = 1;
  static void build(Builder& b, OperationArgument& arg, Value x);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

}  // namespace kiln

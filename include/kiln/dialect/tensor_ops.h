// Tensor-making and shape ops: full (a constant-filled tensor), reshape
// (ViewLike: the output views its input's buffer), transpose, concat, split,
// slice, gather and embedding lookup. All but full and reshape are pure
// (ReadOnly, ValueSemantics). Random ops live in random_ops.h. Also the
// shape plumbing gradients use (reduce_as, reshape_as, zeros_like, split_as).
#pragma once

#include "kiln/dialect/grad_op.h"

namespace kiln {

struct FullOp : Op<FullOp, ReadOnly, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.full";
  static constexpr int num_operands = 0, num_results = 1;
  KILN_ATTRIBUTES((std::vector<std::int64_t>, shape), (double, value), (DataType, dtype), (Place, place));
  static void build(Builder& b, OperationArgument& arg, const std::vector<std::int64_t>& shape,
                    double value, DataType dtype = DataType::Float32, Place place = Place::cpu());
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// shape: 0 copies the input dim, one -1 is inferred from the element count.
struct ReshapeOp : Op<ReshapeOp, ViewLike, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.reshape";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 1, num_results = 1;
  static constexpr std::array<std::pair<std::uint32_t, std::uint32_t>, 1> view_map{{{0, 0}}};
  KILN_ATTRIBUTES((std::vector<std::int64_t>, shape));
  static void build(Builder& b, OperationArgument& arg, Value x, const std::vector<std::int64_t>& shape);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// The [begin, end) a slice with these start/end takes from a dim of size
// `dim` (>= 0): negative start/end count from the end, then both clamp to
// [0, dim], and end >= begin.
std::pair<std::int64_t, std::int64_t> slice_range(std::int64_t start, std::int64_t end,
                                                  std::int64_t dim);

// out.dims[i] = x.dims[perm[i]]; perm is a permutation of [0, rank)
// (negative entries count from the end).
struct TransposeOp : Op<TransposeOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.transpose";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 1, num_results = 1;
  KILN_ATTRIBUTES((std::vector<std::int64_t>, perm));
  static void build(Builder& b, OperationArgument& arg, Value x, const std::vector<std::int64_t>& perm);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// Joins one or more tensors (variadic operands) along `axis` (negative counts
// from the end); every other dim and the dtype must agree.
struct ConcatOp : Op<ConcatOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.concat";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = -1, num_results = 1;  // variadic: at least one operand
  KILN_ATTRIBUTES((std::int64_t, axis));
  static void build(Builder& b, OperationArgument& arg, const std::vector<Value>& xs,
                    std::int64_t axis = 0);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// Splits x along `axis` into `num` equal parts (sections empty), or into parts
// of the sizes in `sections` (num 0; one entry may be -1: the rest). Results:
// variadic, one per part.
struct SplitOp : Op<SplitOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.split";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 1, num_results = -1;  // variadic: one result per part
  KILN_ATTRIBUTES((std::int64_t, num), (std::vector<std::int64_t>, sections), (std::int64_t, axis));
  // `num` equal parts.
  static void build(Builder& b, OperationArgument& arg, Value x, std::int64_t num,
                    std::int64_t axis = 0);
  // Parts of the given sizes.
  static void build(Builder& b, OperationArgument& arg, Value x,
                    const std::vector<std::int64_t>& sections, std::int64_t axis = 0);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// x[starts[k]:ends[k]] along each axes[k] (step 1), numpy/Paddle style: a
// negative start/end counts from the end of the dim, then both are clamped
// to [0, dim]; end <= start gives an empty dim. Other dims are kept whole.
struct SliceOp : Op<SliceOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.slice";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 1, num_results = 1;
  KILN_ATTRIBUTES((std::vector<std::int64_t>, axes), (std::vector<std::int64_t>, starts), (std::vector<std::int64_t>, ends));
  static void build(Builder& b, OperationArgument& arg, Value x, const std::vector<std::int64_t>& axes,
                    const std::vector<std::int64_t>& starts, const std::vector<std::int64_t>& ends);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  // slice_grad(x, dout): zeros like x with dout written where the slice took
  // its elements from.
  struct Grad : GradSpec<2, 0> {
    static void check(std::string_view op, const std::vector<Type>& in, DictionaryAttribute attrs);
  };
};

// gather(x, index) along `axis` (numpy `take`): index is i32 or i64 of any
// shape, out.dims = x.dims[:axis] + index.dims + x.dims[axis+1:]. An index
// outside [0, x.dims[axis]) is a kiln::Error (OutOfRange) naming the op and
// the index. The kernel is chosen by x's dtype (operand 0).
struct GatherOp : Op<GatherOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.gather";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 2, num_results = 1;
  KILN_ATTRIBUTES((std::int64_t, axis));
  static void build(Builder& b, OperationArgument& arg, Value x, Value index, std::int64_t axis = 0);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  // gather_grad(x, index, dout): zeros like x, dout scatter-added at the
  // gathered positions (repeated indices add up).
  struct Grad : GradSpec<3, 0> {
    static void check(std::string_view op, const std::vector<Type>& in, DictionaryAttribute attrs);
  };
};

// Embedding lookup: operands (weight [V, D], ids i32/i64 of any shape) ->
// [ids.dims..., D] (Paddle's lookup_table_v2 order, W first, so the kernel is
// chosen by the weight's dtype like every other op: by operand 0).
// padding_idx in [0, V) gives zero rows for that id; -1 = no padding. An id
// outside [0, V) is a kiln::Error (OutOfRange) naming the op and the id.
struct EmbeddingOp : Op<EmbeddingOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.embedding";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 2, num_results = 1;
  KILN_ATTRIBUTES((std::int64_t, padding_idx));
  static void build(Builder& b, OperationArgument& arg, Value weight, Value ids,
                    std::int64_t padding_idx = -1);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  // embedding_grad(weight, ids, dout): zeros like weight, each row of dout
  // added into row ids[k]; the padding row gets nothing.
  struct Grad : GradSpec<3, 0> {
    static void check(std::string_view op, const std::vector<Type>& in, DictionaryAttribute attrs);
  };
};

// ---- shape plumbing for gradients ----

// kiln.reduce_as(x, target): x summed down to target's run-time shape (the
// inverse of numpy broadcasting: leading dims of x beyond target's rank and
// dims where target has 1 are summed). What broadcasting binary ops' Vjps
// use (Paddle's reduce_as; TensorFlow's BroadcastGradientArgs + reduce_sum).
// Result: x's dtype, target's dims. Only target's dims are read.
struct ReduceAsOp : Op<ReduceAsOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.reduce_as";
  static constexpr int num_operands = 2, num_results = 1;
  static void build(Builder& b, OperationArgument& arg, Value x, Value target);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// kiln.reshape_as(x, target): x's elements with target's run-time dims (a
// view of x's buffer, like reshape). Element counts must agree.
struct ReshapeAsOp : Op<ReshapeAsOp, ViewLike, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.reshape_as";
  static constexpr int num_operands = 2, num_results = 1;
  static constexpr std::array<std::pair<std::uint32_t, std::uint32_t>, 1> view_map{{{0, 0}}};
  static void build(Builder& b, OperationArgument& arg, Value x, Value target);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// kiln.zeros_like(x): zeros of x's run-time dims and dtype (x's data unread).
struct ZerosLikeOp : Op<ZerosLikeOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.zeros_like";
  static constexpr int num_operands = 1, num_results = 1;
  static void build(Builder& b, OperationArgument& arg, Value x);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// kiln.split_as(x, ref0, ref1, …) {axis}: x cut along `axis` into pieces
// shaped like the refs at run time (concat's gradient). Variadic: one result
// per ref; the refs' dims along `axis` must add up to x's.
struct SplitAsOp : Op<SplitAsOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.split_as";
  static constexpr int num_operands = -1, num_results = -1;
  KILN_ATTRIBUTES((std::int64_t, axis));
  static void build(Builder& b, OperationArgument& arg, Value x, const std::vector<Value>& refs,
                    std::int64_t axis);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

}  // namespace kiln

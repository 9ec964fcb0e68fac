// Tensor arrays (kiln/ir/tensor_array_type.h): Paddle's create_array /
// array_write / array_read / array_length / stack, and the unstack that
// turns a tensor into an array of its slices — how a loop reads its input
// step by step and collects its per-step outputs.
//
//   %a  = kiln.array_create {dtype, dims}        an empty array
//   %a1 = kiln.array_write(%a, %i, %x)           a[i] = x (grows the array)
//   %x  = kiln.array_read(%a1, %i)               a[i]
//   %n  = kiln.array_length(%a1)                 tensor<1xi64>
//   %y  = kiln.array_stack(%a1) {axis}           the elements stacked
//   %b  = kiln.array_from_tensor(%y) {axis}      y's slices along axis
//
// An index is an i32 or i64 tensor of one element. array_write is Inplace,
// as Paddle's write_to_array: its result is its operand's variable, so a
// loop that carries an array appends to it without copying it; read the
// array through the write's result. Elements share their tensors' buffers
// (the executor copies an element before an in-place op writes it).
//
// An element is either a tensor or missing (the write that grows an array
// to index i leaves the indices skipped missing). Gradients use that: a
// missing element of a gradient array is zero. The gradient ops
// array_add, array_erase, array_read_or_zeros and array_stack_like read and
// write such arrays; no forward array op's gradient reads the forward
// array's contents, so in-place writes to arrays on the path to a loss are
// safe for the backward pass.
#pragma once

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "kiln/dialect/grad_op.h"
#include "kiln/ir/tensor_array_type.h"

namespace kiln {

// %a = kiln.array_create {dtype, dims}: an empty tensor_array<dims x dtype>.
// (Each run makes a new array: passes must not merge two of them.)
struct ArrayCreateOp : Op<ArrayCreateOp, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.array_create";
  static constexpr int num_operands = 0, num_results = 1;
  KILN_ATTRIBUTES((DataType, dtype), (std::vector<std::int64_t>, dims));
  static void build(Builder& b, OperationArgument& arg, DataType dtype,
                    const std::vector<std::int64_t>& element_dims);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// %n = kiln.array_length(%a): the number of elements (missing ones count),
// as tensor<1xi64>.
struct ArrayLengthOp : Op<ArrayLengthOp, ReadOnly, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.array_length";
  static constexpr int num_operands = 1, num_results = 1;
  static void build(Builder& b, OperationArgument& arg, Value array);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// %a1 = kiln.array_write(%a, %i, %x): element i = x; i may be the length
// (append) or past it (the elements between are missing). x must fit the
// array's element type (dims equal where the type knows them).
struct ArrayWriteOp : Op<ArrayWriteOp, Inplace, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.array_write";
  static constexpr int num_operands = 3, num_results = 1;
  static constexpr std::array<std::pair<std::uint32_t, std::uint32_t>, 1> inplace_map{{{0, 0}}};
  static void build(Builder& b, OperationArgument& arg, Value array, Value index, Value x);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  // dx = array_read_or_zeros(da1, i, x); da = array_erase(da1, i).
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
};

// %x = kiln.array_read(%a, %i): element i; kiln::Error naming the op when i
// is negative, at or past the length, or a missing element.
struct ArrayReadOp : Op<ArrayReadOp, ReadOnly, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.array_read";
  static constexpr int num_operands = 2, num_results = 1;
  static void build(Builder& b, OperationArgument& arg, Value array, Value index);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  // da = an array holding dx at i only.
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
};

// %y = kiln.array_stack(%a) {axis}: the n elements (same dims and dtype,
// none missing) stacked along a new axis `axis` in [-(r+1), r+1). An empty
// array stacks to a tensor with extent 0 there when the element type's dims
// are all known; otherwise it is a kiln::Error.
struct ArrayStackOp : Op<ArrayStackOp, ReadOnly, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.array_stack";
  static constexpr int num_operands = 1, num_results = 1;
  KILN_ATTRIBUTES((std::int64_t, axis));
  static void build(Builder& b, OperationArgument& arg, Value array, std::int64_t axis = 0);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  // da = array_from_tensor(dy).
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
};

// %a = kiln.array_from_tensor(%x) {axis}: one element per index of x along
// `axis`, that axis removed (along axis 0 the elements are views of x).
struct ArrayFromTensorOp : Op<ArrayFromTensorOp, ReadOnly, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.array_from_tensor";
  static constexpr int num_operands = 1, num_results = 1;
  KILN_ATTRIBUTES((std::int64_t, axis));
  static void build(Builder& b, OperationArgument& arg, Value x, std::int64_t axis = 0);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  // dx = array_stack_like(da, x).
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
};

// ---- gradient arrays (a missing element is zero) ----

// %a1 = kiln.array_add(%a, %b): a[k] += b[k] for every element b holds (a
// missing a[k] becomes b[k]); the length is the larger one. Inplace on a.
struct ArrayAddOp : Op<ArrayAddOp, Inplace, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.array_add";
  static constexpr int num_operands = 2, num_results = 1;
  static constexpr std::array<std::pair<std::uint32_t, std::uint32_t>, 1> inplace_map{{{0, 0}}};
  static void build(Builder& b, OperationArgument& arg, Value a, Value other);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// %a1 = kiln.array_erase(%a, %i): element i becomes missing (nothing when i
// is past the length). Inplace on a.
struct ArrayEraseOp : Op<ArrayEraseOp, Inplace, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.array_erase";
  static constexpr int num_operands = 2, num_results = 1;
  static constexpr std::array<std::pair<std::uint32_t, std::uint32_t>, 1> inplace_map{{{0, 0}}};
  static void build(Builder& b, OperationArgument& arg, Value array, Value index);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// %x = kiln.array_read_or_zeros(%a, %i, %like): element i, or zeros shaped
// like `like` when a has none there.
struct ArrayReadOrZerosOp : Op<ArrayReadOrZerosOp, ReadOnly, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.array_read_or_zeros";
  static constexpr int num_operands = 3, num_results = 1;
  static void build(Builder& b, OperationArgument& arg, Value array, Value index, Value like);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// %y = kiln.array_stack_like(%a, %like) {axis}: a stacked along `axis` into
// like's shape (its extent there = the number of elements; missing ones
// and those past a's length are zeros; a longer array is a kiln::Error).
// (Also a forward op: the stack of an array that may be empty, whose
// element dims are known only at run time, shaped by a tensor that has them.)
struct ArrayStackLikeOp : Op<ArrayStackLikeOp, ReadOnly, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.array_stack_like";
  static constexpr int num_operands = 2, num_results = 1;
  KILN_ATTRIBUTES((std::int64_t, axis));
  static void build(Builder& b, OperationArgument& arg, Value array, Value like,
                    std::int64_t axis = 0);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  // da = array_from_tensor(dy); `like` gives only a shape.
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
};

// Whether `t` is a tensor_array type.
inline bool is_tensor_array(Type t) { return t && t.isa<TensorArrayType>(); }

}  // namespace kiln

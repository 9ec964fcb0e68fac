// Arithmetic, comparisons, logic and constants (Paddle's paddle.add …
// paddle.matmul, paddle.equal … paddle.logical_not, paddle.full /
// fill_constant and paddle.increment), then shapes, dtypes and reductions
// (paddle.reshape, transpose, concat, split, slice, squeeze, unsqueeze,
// stack, cast, sum, mean, max) and elementwise exp, log, sqrt, square and
// abs. Each builds its op at the current block (main_builder(): the block
// being filled — a control-flow region while its function runs) and
// returns its result(s). Operands broadcast numpy-style and must share a
// dtype; a number in place of an operand becomes a 0-d kiln.full of the
// other operand's dtype (a whole number when that dtype is an integer one:
// kiln::Error otherwise, since kiln does not promote dtypes). Comparisons
// and logic give bool tensors (no gradient). Axes count from the end when
// negative; a shape that does not fit is the op's InferMeta error (a
// kiln::Error naming the op, the operand's type and what it takes), raised
// while the program is built.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/ir/value.h"
#include "kiln/support/data_type.h"

namespace kiln {

// x + y, x - y, x * y, x / y, max(x, y), min(x, y) (numeric
// dtypes; gradients flow to both operands, summed over broadcast axes).
Value add(Value x, Value y);
Value subtract(Value x, Value y);
Value multiply(Value x, Value y);
Value divide(Value x, Value y);
Value maximum(Value x, Value y);
Value minimum(Value x, Value y);
Value add(Value x, double y);
Value subtract(Value x, double y);
Value multiply(Value x, double y);
Value divide(Value x, double y);
Value maximum(Value x, double y);
Value minimum(Value x, double y);

// x @ y (paddle.matmul): the last two axes multiply, the leading ones
// broadcast; a 1-d operand is a vector. transpose_x / transpose_y swap an
// operand's last two axes first.
Value matmul(Value x, Value y, bool transpose_x = false, bool transpose_y = false);

// x == y, x != y, x < y, x <= y, x > y, x >= y (f32, f64, i32, i64; equal /
// not_equal take bool too).
Value equal(Value x, Value y);
Value not_equal(Value x, Value y);
Value less_than(Value x, Value y);
Value less_equal(Value x, Value y);
Value greater_than(Value x, Value y);
Value greater_equal(Value x, Value y);
Value equal(Value x, double y);
Value not_equal(Value x, double y);
Value less_than(Value x, double y);
Value less_equal(Value x, double y);
Value greater_than(Value x, double y);
Value greater_equal(Value x, double y);

// Elementwise logic of bool tensors.
Value logical_and(Value x, Value y);
Value logical_or(Value x, Value y);
Value logical_xor(Value x, Value y);
Value logical_not(Value x);

// A tensor of `shape` (empty: a 0-d scalar) filled with `value`.
Value full(const std::vector<std::int64_t>& shape, double value,
           DataType dtype = DataType::Float32);
// Paddle's fill_constant: full with the arguments in Paddle's order.
Value fill_constant(const std::vector<std::int64_t>& shape, DataType dtype, double value);
// x + step, of x's dtype and shape (one kiln.scale op).
Value increment(Value x, double step = 1.0);

// ---- shapes, dtypes, reductions ----

// x's elements in `shape` (a view): 0 keeps x's dim, one -1 is inferred.
Value reshape(Value x, const std::vector<std::int64_t>& shape);
// out.dims[i] = x.dims[perm[i]].
Value transpose(Value x, const std::vector<std::int64_t>& perm);
// The tensors joined along `axis`; every other dim and the dtype agree.
Value concat(const std::vector<Value>& xs, std::int64_t axis = 0);
// x cut along `axis` into `num` equal parts.
std::vector<Value> split(Value x, std::int64_t num, std::int64_t axis = 0);
// x cut along `axis` into parts of these sizes (one may be -1: the rest).
// Spell one size as std::vector<std::int64_t>{n}: a braced {n} reads as the
// count of equal parts above.
std::vector<Value> split(Value x, const std::vector<std::int64_t>& sections, std::int64_t axis);
// x[starts[k]:ends[k]] along each axes[k] (numpy's clamping of the bounds).
Value slice(Value x, const std::vector<std::int64_t>& axes, const std::vector<std::int64_t>& starts,
            const std::vector<std::int64_t>& ends);
// x without the size-1 dims among `axes` (a listed dim that is not 1 stays,
// as in PyTorch and Paddle; empty: every size-1 dim).
Value squeeze(Value x, const std::vector<std::int64_t>& axes = {});
// x with size-1 dims inserted at `axes` (positions in the result).
Value unsqueeze(Value x, const std::vector<std::int64_t>& axes);
// The tensors (one shape, one dtype) stacked along a new dim `axis`.
Value stack(const std::vector<Value>& xs, std::int64_t axis = 0);
// x's values in `dtype` (rounded to nearest even; to an integer dtype,
// truncated).
Value cast(Value x, DataType dtype);

// Σ, mean and max over `axis` (empty: all of them), keeping the reduced
// dims as 1 when `keepdim`.
Value sum(Value x, const std::vector<std::int64_t>& axis = {}, bool keepdim = false);
Value mean(Value x, const std::vector<std::int64_t>& axis = {}, bool keepdim = false);
Value max(Value x, const std::vector<std::int64_t>& axis = {}, bool keepdim = false);

// Elementwise, of x's dtype (floating) and shape.
Value exp(Value x);
Value log(Value x);
Value sqrt(Value x);
Value square(Value x);
Value abs(Value x);


}  // namespace kiln

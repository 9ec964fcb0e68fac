// The tensor functions of kiln/frontend/math.h: arithmetic, comparisons,
// logic, constants, shapes, dtypes and reductions.
#include "kiln/frontend/math.h"

#include <cmath>
#include <string>
#include <string_view>
#include <utility>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/frontend/program_guard.h"
#include "kiln/support/error.h"

namespace kiln {

namespace {

// kiln::Error naming `fn` unless `v` is a tensor the current block may use.
Value checked(std::string_view fn, std::string_view arg, Value v) {
  if (!v) throw_error(ErrorKind::InvalidArgument, fn, ": ", arg, " is a null value");
  if (!in_current_program(v))
    throw_error(ErrorKind::InvalidArgument, fn, ": ", arg,
                " is not a value of the current main program or of a block being built "
                "(a value of a finished control-flow region, or made under another "
                "ProgramGuard?)");
  if (!is_shaped(v.type()))
    throw_error(ErrorKind::InvalidArgument, fn, ": ", arg, " must be a tensor, got ",
                v.type().to_string());
  return v;
}

template <typename OpT>
Value binary(std::string_view fn, Value x, Value y) {
  checked(fn, "x", x);
  checked(fn, "y", y);
  return main_builder().create<OpT>(x, y).result();
}

// y as a 0-d constant of x's dtype; kiln::Error naming `fn` when x is an
// integer tensor and y no whole number (kiln does not promote dtypes).
template <typename OpT>
Value with_scalar(std::string_view fn, Value x, double y) {
  checked(fn, "x", x);
  const DataType dt = shaped_data_type(x.type());
  if (is_integer(dt) && y != std::trunc(y))
    throw_error(ErrorKind::InvalidArgument, fn, ": ", y, " is not a whole number, and x is ",
                to_string(dt), " (cast x to a floating dtype first)");
  Builder b = main_builder();
  Value c = b.create<FullOp>(std::vector<std::int64_t>{}, y, dt).result();
  return b.create<OpT>(x, c).result();
}

}  // namespace

Value add(Value x, Value y) { return binary<AddOp>("add", x, y); }
Value subtract(Value x, Value y) { return binary<SubOp>("subtract", x, y); }
Value multiply(Value x, Value y) { return binary<MulOp>("multiply", x, y); }
Value divide(Value x, Value y) { return binary<DivOp>("divide", x, y); }
Value maximum(Value x, Value y) { return binary<MaximumOp>("maximum", x, y); }
Value minimum(Value x, Value y) { return binary<MinimumOp>("minimum", x, y); }
Value add(Value x, double y) { return with_scalar<AddOp>("add", x, y); }
Value subtract(Value x, double y) { return with_scalar<SubOp>("subtract", x, y); }
Value multiply(Value x, double y) { return with_scalar<MulOp>("multiply", x, y); }
Value divide(Value x, double y) { return with_scalar<DivOp>("divide", x, y); }
Value maximum(Value x, double y) { return with_scalar<MaximumOp>("maximum", x, y); }
Value minimum(Value x, double y) { return with_scalar<MinimumOp>("minimum", x, y); }

Value matmul(Value x, Value y, bool transpose_x, bool transpose_y) {
  checked("matmul", "x", x);
  checked("matmul", "y", y);
  return main_builder().create<MatmulOp>(x, y, transpose_x, transpose_y).result();
}

Value equal(Value x, Value y) { return binary<EqualOp>("equal", x, y); }
Value not_equal(Value x, Value y) { return binary<NotEqualOp>("not_equal", x, y); }
Value less_than(Value x, Value y) { return binary<LessThanOp>("less_than", x, y); }
Value less_equal(Value x, Value y) { return binary<LessEqualOp>("less_equal", x, y); }
Value greater_than(Value x, Value y) { return binary<GreaterThanOp>("greater_than", x, y); }
Value greater_equal(Value x, Value y) { return binary<GreaterEqualOp>("greater_equal", x, y); }

Value equal(Value x, double y) { return with_scalar<EqualOp>("equal", x, y); }
Value not_equal(Value x, double y) { return with_scalar<NotEqualOp>("not_equal", x, y); }
Value less_than(Value x, double y) { return with_scalar<LessThanOp>("less_than", x, y); }
Value less_equal(Value x, double y) { return with_scalar<LessEqualOp>("less_equal", x, y); }
Value greater_than(Value x, double y) { return with_scalar<GreaterThanOp>("greater_than", x, y); }
Value greater_equal(Value x, double y) {
  return with_scalar<GreaterEqualOp>("greater_equal", x, y);
}

Value logical_and(Value x, Value y) { return binary<LogicalAndOp>("logical_and", x, y); }
Value logical_or(Value x, Value y) { return binary<LogicalOrOp>("logical_or", x, y); }
Value logical_xor(Value x, Value y) { return binary<LogicalXorOp>("logical_xor", x, y); }

Value logical_not(Value x) {
  checked("logical_not", "x", x);
  return main_builder().create<LogicalNotOp>(x).result();
}

Value full(const std::vector<std::int64_t>& shape, double value, DataType dtype) {
  for (auto d : shape)
    if (d < 0)
      throw_error(ErrorKind::InvalidArgument, "full: dim ", d, " in shape ",
                  meta::dims_string(shape), " (expected >= 0)");
  return main_builder().create<FullOp>(shape, value, dtype).result();
}

Value fill_constant(const std::vector<std::int64_t>& shape, DataType dtype, double value) {
  return full(shape, value, dtype);
}

Value increment(Value x, double step) {
  checked("increment", "x", x);
  return main_builder().create<ScaleOp>(x, 1.0, step).result();
}

// ---- shapes, dtypes, reductions ----

namespace {

// One op of one operand x and its arguments, built after x is checked.
template <typename OpT, typename... Args>
Value unary(std::string_view fn, Value x, Args&&... args) {
  checked(fn, "x", x);
  return main_builder().create<OpT>(x, std::forward<Args>(args)...).result();
}

// One op over the tensors xs (at least one).
template <typename OpT>
Value of_all(std::string_view fn, const std::vector<Value>& xs, std::int64_t axis) {
  if (xs.empty()) throw_error(ErrorKind::InvalidArgument, fn, ": no tensors given");
  for (std::size_t k = 0; k < xs.size(); ++k) checked(fn, "xs[" + std::to_string(k) + "]", xs[k]);
  return main_builder().create<OpT>(xs, axis).result();
}

std::vector<Value> results_of(Operation* op) {
  std::vector<Value> out;
  for (Value r : op->results()) out.push_back(r);
  return out;
}

}  // namespace

Value reshape(Value x, const std::vector<std::int64_t>& shape) {
  return unary<ReshapeOp>("reshape", x, shape);
}
Value transpose(Value x, const std::vector<std::int64_t>& perm) {
  return unary<TransposeOp>("transpose", x, perm);
}
Value concat(const std::vector<Value>& xs, std::int64_t axis) { return of_all<ConcatOp>("concat", xs, axis); }
Value stack(const std::vector<Value>& xs, std::int64_t axis) { return of_all<StackOp>("stack", xs, axis); }

std::vector<Value> split(Value x, std::int64_t num, std::int64_t axis) {
  checked("split", "x", x);
  if (num < 1) throw_error(ErrorKind::InvalidArgument, "split: ", num, " parts (expected >= 1)");
  return results_of(main_builder().create<SplitOp>(x, num, axis).operation());
}

std::vector<Value> split(Value x, const std::vector<std::int64_t>& sections, std::int64_t axis) {
  checked("split", "x", x);
  if (sections.empty()) throw_error(ErrorKind::InvalidArgument, "split: no section sizes given");
  return results_of(main_builder().create<SplitOp>(x, sections, axis).operation());
}

Value slice(Value x, const std::vector<std::int64_t>& axes, const std::vector<std::int64_t>& starts,
            const std::vector<std::int64_t>& ends) {
  if (axes.size() != starts.size() || axes.size() != ends.size())
    throw_error(ErrorKind::InvalidArgument, "slice: ", axes.size(), " axes, ", starts.size(), " starts and ",
                ends.size(), " ends (expected one of each per axis)");
  return unary<SliceOp>("slice", x, axes, starts, ends);
}

Value squeeze(Value x, const std::vector<std::int64_t>& axes) { return unary<SqueezeOp>("squeeze", x, axes); }
Value unsqueeze(Value x, const std::vector<std::int64_t>& axes) {
  return unary<UnsqueezeOp>("unsqueeze", x, axes);
}
Value cast(Value x, DataType dtype) { return unary<CastOp>("cast", x, dtype); }

Value sum(Value x, const std::vector<std::int64_t>& axis, bool keepdim) {
  return unary<SumOp>("sum", x, axis, keepdim);
}
Value mean(Value x, const std::vector<std::int64_t>& axis, bool keepdim) {
  return unary<MeanOp>("mean", x, axis, keepdim);
}
Value max(Value x, const std::vector<std::int64_t>& axis, bool keepdim) {
  return unary<MaxOp>("max", x, axis, keepdim);
}

Value exp(Value x) { return unary<ExpOp>("exp", x); }
Value log(Value x) { return unary<LogOp>("log", x); }
Value sqrt(Value x) { return unary<SqrtOp>("sqrt", x); }
Value square(Value x) { return unary<SquareOp>("square", x); }
Value abs(Value x) { return unary<AbsOp>("abs", x); }

}  // namespace kiln

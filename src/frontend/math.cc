// The arithmetic, comparison, logic and constant helpers of kiln/frontend/math.h.
#include "kiln/frontend/math.h"

#include <cmath>
#include <string_view>

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

}  // namespace kiln

// The tensor-array helpers of kiln/frontend/tensor_array.h.
#include "kiln/frontend/tensor_array.h"

#include <string_view>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/frontend/program_guard.h"
#include "kiln/support/error.h"

namespace kiln {

namespace {

// kiln::Error naming `fn` unless `v` is a value the current block may use
// and, per `array`, a tensor_array or a tensor.
Value checked(std::string_view fn, std::string_view arg, Value v, bool array) {
  if (!v) throw_error(ErrorKind::InvalidArgument, fn, ": ", arg, " is a null value");
  if (!in_current_program(v))
    throw_error(ErrorKind::InvalidArgument, fn, ": ", arg,
                " is not a value of the current main program or of a block being built");
  if (array ? !is_tensor_array(v.type()) : !is_shaped(v.type()))
    throw_error(ErrorKind::InvalidArgument, fn, ": ", arg, " must be a ",
                array ? "tensor_array" : "tensor", ", got ", v.type().to_string());
  return v;
}

}  // namespace

Value create_array(DataType dtype, const std::vector<std::int64_t>& element_dims) {
  return main_builder().create<ArrayCreateOp>(dtype, element_dims).result();
}

Value array_write(Value array, Value i, Value x) {
  checked("array_write", "array", array, true);
  checked("array_write", "i", i, false);
  checked("array_write", "x", x, false);
  return main_builder().create<ArrayWriteOp>(array, i, x).result();
}

Value array_read(Value array, Value i) {
  checked("array_read", "array", array, true);
  checked("array_read", "i", i, false);
  return main_builder().create<ArrayReadOp>(array, i).result();
}

Value array_length(Value array) {
  checked("array_length", "array", array, true);
  return main_builder().create<ArrayLengthOp>(array).result();
}

Value array_stack(Value array, std::int64_t axis) {
  checked("array_stack", "array", array, true);
  return main_builder().create<ArrayStackOp>(array, axis).result();
}

Value array_from_tensor(Value x, std::int64_t axis) {
  checked("array_from_tensor", "x", x, false);
  return main_builder().create<ArrayFromTensorOp>(x, axis).result();
}

}  // namespace kiln

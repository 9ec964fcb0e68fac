// Tensor arrays as paddle.tensor builds them (create_array, array_write,
// array_read, array_length) plus stack / unstack: what a while_loop body
// writes its per-step outputs to and reads its per-step inputs from. Each
// function adds one op (kiln/dialect/tensor_array_ops.h) to the current
// block and checks its arguments, naming itself in a kiln::Error.
//
//   Value xs = array_from_tensor(x);                  // x [T, B, I] → T x [B, I]
//   Value out = create_array(DataType::Float32, {-1, H});
//   auto r = while_loop(cond, [&](auto v) {           // v = {t, h, out}
//     Value h = tanh(... array_read(xs, v[0]) ...);
//     return std::vector<Value>{increment(v[0]), h, array_write(v[2], v[0], h)};
//   }, {t0, h0, out});
//   Value hs = array_stack(r[2]);                     // [T, B, H]
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/ir/value.h"
#include "kiln/support/data_type.h"

namespace kiln {

// An empty array of dtype elements with dims `element_dims` (-1: known at
// run time only).
Value create_array(DataType dtype, const std::vector<std::int64_t>& element_dims);
// array with element i = x (i: an i32 / i64 tensor of one element; i may be
// the length, to append). The array is updated in place (Paddle's
// array_write): use the returned value from then on.
Value array_write(Value array, Value i, Value x);
// Element i.
Value array_read(Value array, Value i);
// The number of elements, as an i64 tensor of shape [1].
Value array_length(Value array);
// The elements stacked along a new axis `axis`.
Value array_stack(Value array, std::int64_t axis = 0);
// x's slices along `axis` (views of x along axis 0).
Value array_from_tensor(Value x, std::int64_t axis = 0);

}  // namespace kiln

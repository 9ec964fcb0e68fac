// tensor_array<dims x dtype>: a list of tensors that grows at run time
// (Paddle's LoDTensorArray, TensorFlow's TensorArray) — what a loop writes
// its per-iteration outputs to, and what the gradient of a loop reads the
// forward iterations' values back from. The type names the elements' dtype
// and dims (-1 where they are known only at run time); the length is a run
// time property. At run time a Variable holds it as a TensorArray.
#pragma once

#include "kiln/ir/builtin_types.h"

namespace kiln {

class TensorArrayType : public ShapedTypeBase<TensorArrayType> {
 public:
  using ShapedTypeBase::ShapedTypeBase;
  static constexpr std::string_view name = "tensor_array";
};

// Compiled once, in libkiln (src/ir/types.cc).
extern template class ShapedTypeBase<TensorArrayType>;

// The element type of an array: tensor<dims x dtype>.
inline TensorType array_element_type(TensorArrayType t) {
  return TensorType::get(t.element_type(), t.dims());
}

}  // namespace kiln

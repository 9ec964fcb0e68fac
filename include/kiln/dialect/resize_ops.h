// kiln.resize: a tensor resized by interpolation along every axis (ONNX
// Resize and Upsample), with the scales or sizes (and the crop box) as
// operands read on the host at run time, so the result's dims are -1.
// Nearest (four rounding rules), linear and cubic interpolation, applied
// separably, the last axis first.
#pragma once

#include "kiln/dialect/grad_op.h"

namespace kiln {

// kiln.resize(x, roi, scales, sizes) -> y (x's dtype, f32 or f64; x's rank).
// Operands, 1-D: roi f32/f64 of 2·rank (starts, then ends; read only for
// tf_crop_and_resize, may be empty otherwise), scales f32/f64 of rank
// entries or empty, sizes i32/i64 of rank entries or empty; exactly one of
// scales and sizes is non-empty at run time. Output dim i = sizes[i], or
// floor(scales[i]·dim) with scales[i] > 0.
// Attributes (ONNX's names and values): mode nearest / linear / cubic;
// coordinate_transformation_mode half_pixel / pytorch_half_pixel /
// align_corners / asymmetric / tf_half_pixel_for_nn / tf_crop_and_resize /
// half_pixel_symmetric (ONNX opset 19: half_pixel shifted by
// in/2 · (1 − out / (scale·in)), centring a floored output);
// nearest_mode round_prefer_floor / round_prefer_ceil / floor / ceil;
// cubic_coeff_a; exclude_outside (weights of points outside x set to 0, the
// rest renormalized); extrapolation_value (tf_crop_and_resize's value for
// positions outside x). No gradient.
struct ResizeOp : Op<ResizeOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.resize";
  static constexpr int num_operands = 4, num_results = 1;
  KILN_ATTRIBUTES((std::string, mode), (std::string, coordinate_transformation_mode),
                  (std::string, nearest_mode), (double, cubic_coeff_a), (bool, exclude_outside),
                  (double, extrapolation_value));
  static void build(Builder& b, OperationArgument& arg, Value x, Value roi, Value scales,
                    Value sizes, const Attributes& attrs);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

}  // namespace kiln

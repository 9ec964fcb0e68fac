// Max_pool2d, avg_pool2d, adaptive_avg_pool2d (NCHW): x [N, C, H, W] ->
// [N, C, Ho, Wo]. f32, f64. Each has a gradient op (x, dout) -> dx. Also
// roi_align: bins of regions of x, read by bilinear sampling.
//
// max_pool2d / avg_pool2d attributes: kernel_size [kh, kw] (> 0), strides
// [sh, sw] (> 0; empty = kernel_size, as PyTorch), paddings [ph, pw] or
// [top, bottom, left, right] (each at most half the kernel), ceil_mode
// (round the output extent up; a window starting in the bottom / right
// padding is dropped). Ho = (H + pt + pb - kh [+ sh - 1 with ceil_mode]) / sh + 1.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "kiln/dialect/grad_op.h"
#include "kiln/dialect/pool_window.h"
#include "kiln/support/dims.h"

namespace kiln {

// The max over each window (padding never wins); floats and integers. Its grad routes each
// dout to the window's first maximum (row-major), recomputed from x.
// data_format "NCHW" (default) or "NHWC" (x [N, H, W, C] -> [N, Ho, Wo,
// C]; CPU only, what the channels_last pass writes; the gradient op takes
// the same layout).
struct MaxPool2dOp : Op<MaxPool2dOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.max_pool2d";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 1, num_results = 1;
  KILN_ATTRIBUTES((std::vector<std::int64_t>, kernel_size), (std::vector<std::int64_t>, strides),
                  (std::vector<std::int64_t>, paddings), (bool, ceil_mode),
                  (std::string, data_format));
  // A program saved before `data_format` existed loads as NCHW.
  static std::vector<NamedAttribute> attribute_defaults() {
    return {{"data_format", StrAttribute::get("NCHW")}};
  }
  static void build(Builder& b, OperationArgument& arg, Value x,
                    std::vector<std::int64_t> kernel_size, std::vector<std::int64_t> strides = {},
                    std::vector<std::int64_t> paddings = {0, 0}, bool ceil_mode = false,
                    std::string data_format = "NCHW");
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  // max_pool2d_grad(x, dout) -> dx
  struct Grad : GradSpec<2, 0> {
    static void check(std::string_view op, const std::vector<Type>& in, DictionaryAttribute attrs);
  };
};

// The mean over each window. exclusive (default true, PyTorch's
// count_include_pad = false) divides by the number of input elements in the
// window; otherwise by the window's size clipped to the padded input.
struct AvgPool2dOp : Op<AvgPool2dOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.avg_pool2d";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 1, num_results = 1;
  KILN_ATTRIBUTES((std::vector<std::int64_t>, kernel_size), (std::vector<std::int64_t>, strides),
                  (std::vector<std::int64_t>, paddings), (bool, ceil_mode), (bool, exclusive));
  static void build(Builder& b, OperationArgument& arg, Value x,
                    std::vector<std::int64_t> kernel_size, std::vector<std::int64_t> strides = {},
                    std::vector<std::int64_t> paddings = {0, 0}, bool ceil_mode = false,
                    bool exclusive = true);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  // avg_pool2d_grad(x, dout) -> dx
  struct Grad : GradSpec<2, 0> {
    static void check(std::string_view op, const std::vector<Type>& in, DictionaryAttribute attrs);
  };
};

// The mean over adaptive windows: output row i covers input rows
// [floor(i·H / Ho), ceil((i + 1)·H / Ho)) (columns alike), as PyTorch.
// output_size [Ho, Wo], each >= 1.
struct AdaptiveAvgPool2dOp
    : Op<AdaptiveAvgPool2dOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.adaptive_avg_pool2d";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 1, num_results = 1;
  KILN_ATTRIBUTES((std::vector<std::int64_t>, output_size));
  static void build(Builder& b, OperationArgument& arg, Value x,
                    std::vector<std::int64_t> output_size);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  // adaptive_avg_pool2d_grad(x, dout) -> dx
  struct Grad : GradSpec<2, 0> {
    static void check(std::string_view op, const std::vector<Type>& in, DictionaryAttribute attrs);
  };
};

// Region pooling by bilinear sampling (ONNX RoiAlign, torchvision's
// roi_align, Paddle's vision.ops.roi_align): x [N, C, H, W] (f32, f64),
// rois [R, 4] (x's dtype) as (x1, y1, x2, y2) in input-image units,
// batch_indices [R] (i32 / i64: the image of each region) -> [R, C, oh, ow].
// A region, scaled by spatial_scale (and shifted by -0.5 when aligned,
// ONNX's half_pixel; not aligned, its sides are at least 1), is cut into
// oh x ow bins; each bin samples a grid of sampling_ratio x sampling_ratio
// points (<= 0, torchvision's and Paddle's -1 too: ceil(bin size) points
// per axis, adaptively; 0 along both axes when either has none) at the centres of
// the grid's cells, read by bilinear interpolation (a point more than one
// pixel outside x reads 0; between -1 and 0, the edge). mode "avg" averages
// a bin's samples; "max" takes the largest weighted corner term (w · x) of
// any sample (ONNX's definition). The grad op takes (x, rois,
// batch_indices, dout) -> dx: each sample's share back to its four pixels
// (max: only the winning term's pixel). rois and batch_indices get none.
struct RoiAlignOp : Op<RoiAlignOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.roi_align";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 3, num_results = 1;
  KILN_ATTRIBUTES((std::vector<std::int64_t>, output_size), (double, spatial_scale),
                  (std::int64_t, sampling_ratio), (bool, aligned), (std::string, mode));
  static void build(Builder& b, OperationArgument& arg, Value x, Value rois, Value batch_indices,
                    std::vector<std::int64_t> output_size, double spatial_scale = 1.0,
                    std::int64_t sampling_ratio = 0, bool aligned = true, std::string mode = "avg");
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  // roi_align_grad(x, rois, batch_indices, dout) -> dx
  struct Grad : GradSpec<4, 0> {
    static void check(std::string_view op, const std::vector<Type>& in, DictionaryAttribute attrs);
  };
};

namespace pool {
// The geometry of a pool over x dims [N, C, H, W] (-1 entries give -1
// extents); kiln::Error naming `op` for bad attributes or a window larger
// than the padded input.
Pool2dGeometry geometry(std::string_view op, const std::vector<std::int64_t>& x,
                        const std::vector<std::int64_t>& kernel_size,
                        const std::vector<std::int64_t>& strides,
                        const std::vector<std::int64_t>& paddings, bool ceil_mode);
// The geometry from a max / avg pool op's (or its gradient's) attributes.
template <typename Attrs>
Pool2dGeometry geometry(std::string_view op, const Dims& x, const Attrs& a) {
  return geometry(op, x.to_vector(), a.kernel_size, a.strides, a.paddings, a.ceil_mode);
}
// kiln::Error naming `op` unless a gradient's dout is the forward's result
// shape [N, C, Ho, Wo].
void check_dout(std::string_view op, const Dims& dout, const Pool2dGeometry& g);
// adaptive_avg_pool2d's n, c, h, w, ho, wo for a tensor x at run time;
// kiln::Error naming `op` unless x is [N, C, H, W] and output_size two
// sizes >= 1.
Pool2dGeometry adaptive_geometry(std::string_view op, const Dims& x, const std::vector<std::int64_t>& output_size);
// roi_align's attributes checked: output_size two sizes >= 1, a finite
// spatial_scale > 0, mode avg or max; kiln::Error
// naming `op` otherwise.
void check_roi_align(std::string_view op, const RoiAlignOp::Attributes& a);
}  // namespace pool

}  // namespace kiln

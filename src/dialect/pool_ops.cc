// The ops of kiln/dialect/pool_ops.h: InferMeta, Vjp, gradient ops and
// registration.
#include "kiln/dialect/pool_ops.h"

#include "kiln/dialect/conv_ops.h"
#include "kiln/dialect/data_format.h"

#include <algorithm>
#include <cmath>

namespace kiln {

KILN_REGISTER_OP(MaxPool2dOp, GradOf<MaxPool2dOp>, AvgPool2dOp, GradOf<AvgPool2dOp>,
                 AdaptiveAvgPool2dOp, GradOf<AdaptiveAvgPool2dOp>, RoiAlignOp, GradOf<RoiAlignOp>);

namespace pool {

namespace {
void require_pair(std::string_view op, std::string_view what, const std::vector<std::int64_t>& v,
                  std::int64_t min) {
  if (v.size() != 2 || v[0] < min || v[1] < min)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' ", what,
                " must be two entries, each >= ", min, ", got ", meta::dims_string(v));
}

std::int64_t pool_out(std::string_view op, std::string_view axis, std::int64_t in, std::int64_t k,
                      std::int64_t s, std::int64_t p0, std::int64_t p1, bool ceil_mode) {
  if (in < 0) return -1;
  const std::int64_t padded = in + p0 + p1;
  if (k > padded)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' pool window ", k, " along ", axis,
                " is larger than the padded input (", in, " + ", p0, " + ", p1, " = ", padded, ")");
  std::int64_t out = (padded - k + (ceil_mode ? s - 1 : 0)) / s + 1;
  // The last window must start inside the input or its top / left padding.
  if (ceil_mode && (out - 1) * s >= in + p0) --out;
  return out;
}
}  // namespace

Pool2dGeometry geometry(std::string_view op, const std::vector<std::int64_t>& x,
                        const std::vector<std::int64_t>& kernel_size,
                        const std::vector<std::int64_t>& strides,
                        const std::vector<std::int64_t>& paddings, bool ceil_mode) {
  if (x.size() != 4)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' x must be [N, C, H, W] (rank 4), got ",
                meta::dims_string(x));
  require_pair(op, "kernel_size", kernel_size, 1);
  const std::vector<std::int64_t>& s = strides.empty() ? kernel_size : strides;
  require_pair(op, "strides", s, 1);
  Pool2dGeometry g;
  if (paddings.size() == 2) g.pt = g.pb = paddings[0], g.pl = g.pr = paddings[1];
  else if (paddings.size() == 4) g.pt = paddings[0], g.pb = paddings[1], g.pl = paddings[2], g.pr = paddings[3];
  else
    throw_error(ErrorKind::InvalidArgument, "op '", op,
                "' paddings must have 2 ([ph, pw]) or 4 ([top, bottom, left, right]) entries, got ",
                meta::dims_string(paddings));
  g.kh = kernel_size[0], g.kw = kernel_size[1], g.sh = s[0], g.sw = s[1];
  if (g.pt < 0 || g.pb < 0 || g.pl < 0 || g.pr < 0 || 2 * std::max(g.pt, g.pb) > g.kh ||
      2 * std::max(g.pl, g.pr) > g.kw)
    throw_error(ErrorKind::InvalidArgument, "op '", op,
                "' paddings must be >= 0 and at most half the kernel, got paddings ",
                meta::dims_string(paddings), " for kernel_size ", meta::dims_string(kernel_size));
  g.n = x[0], g.c = x[1], g.h = x[2], g.w = x[3];
  g.ho = pool_out(op, "H", g.h, g.kh, g.sh, g.pt, g.pb, ceil_mode);
  g.wo = pool_out(op, "W", g.w, g.kw, g.sw, g.pl, g.pr, ceil_mode);
  return g;
}

void check_dout(std::string_view op, const Dims& dout, const Pool2dGeometry& g) {
  conv::check_dout(op, dout, Dims{g.n, g.c, g.ho, g.wo});
}

Pool2dGeometry adaptive_geometry(std::string_view op, const Dims& x, const std::vector<std::int64_t>& output_size) {
  if (x.rank() != 4 || output_size.size() != 2 || output_size[0] < 1 || output_size[1] < 1)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' needs x [N, C, H, W] and two output sizes >= 1, got x [",
                x.to_string(), "]");
  return Pool2dGeometry{.n = x[0], .c = x[1], .h = x[2], .w = x[3], .ho = output_size[0], .wo = output_size[1]};
}

}  // namespace pool

namespace {

using data_format::channels_last;

// An NHWC operand's type with its dims as NCHW.
// An NHWC x as the NCHW type the pool geometry reads; kiln::Error naming
// `op` unless x is rank 4.
Type as_nchw(std::string_view op, Type x) {
  const Type t = meta::tensor_operand(op, {x}, 0);
  if (shaped_dims(t).size() != 4)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' x must be [N, H, W, C] (rank 4, data_format NHWC), got ",
                meta::dims_string(shaped_dims(t)));
  return meta::result_like({t}, shaped_data_type(t), data_format::nhwc_to_nchw(shaped_dims(t)));
}

std::vector<std::int64_t> pool_dims(std::string_view op, const std::vector<Type>& in,
                                    const std::vector<std::int64_t>& kernel_size,
                                    const std::vector<std::int64_t>& strides,
                                    const std::vector<std::int64_t>& paddings, bool ceil_mode,
                                    bool floating_only = true) {
  Type x = floating_only ? meta::float_operand(op, in, 0) : meta::tensor_operand(op, in, 0);
  if (!floating_only && shaped_data_type(x) == DataType::Bool)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' pools numbers, got bool");
  Pool2dGeometry g = pool::geometry(op, shaped_dims(x), kernel_size, strides, paddings, ceil_mode);
  return {g.n, g.c, g.ho, g.wo};
}

std::vector<std::int64_t> adaptive_dims(std::string_view op, const std::vector<Type>& in,
                                        const std::vector<std::int64_t>& output_size) {
  Type x = meta::float_operand(op, in, 0);
  const auto& d = shaped_dims(x);
  if (d.size() != 4)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' x must be [N, C, H, W] (rank 4), got ",
                meta::dims_string(d));
  if (output_size.size() != 2 || output_size[0] < 1 || output_size[1] < 1)
    throw_error(ErrorKind::InvalidArgument, "op '", op,
                "' output_size must be two entries, each >= 1, got ",
                meta::dims_string(output_size));
  return {d[0], d[1], output_size[0], output_size[1]};
}

// The grad op's dout (operand 1): x's dtype, the forward result's shape.
void check_dout(std::string_view op, const std::vector<Type>& in,
                const std::vector<std::int64_t>& want) {
  Type d = meta::tensor_operand(op, in, 1);
  meta::require_same_dtype(op, shaped_data_type(in[0]), shaped_data_type(d), 0, 1);
  if (!meta::compatible_dims(shaped_dims(d), want))
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' dout ",
                meta::dims_string(shaped_dims(d)), " must have the forward result's shape ",
                meta::dims_string(want));
}

template <typename Fwd>
std::vector<Value> pool_vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = vjp::single_grad(op, g);
  if (!d || !vjp::differentiable(op->operand_source(0))) return {Value()};
  return {b.create<GradOf<Fwd>>(op, op->operand_source(0), d).result()};
}

}  // namespace

void MaxPool2dOp::build(Builder&, OperationArgument& arg, Value x,
                        std::vector<std::int64_t> kernel_size, std::vector<std::int64_t> strides,
                        std::vector<std::int64_t> paddings, bool ceil_mode,
                        std::string data_format) {
  arg.add_operand(x);
  if (strides.empty()) strides = kernel_size;
  arg.attributes = to_named_attributes(Attributes{std::move(kernel_size), std::move(strides),
                                                  std::move(paddings), ceil_mode,
                                                  std::move(data_format)});
}
std::vector<Type> MaxPool2dOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  meta::require_count(name, in, 1);
  auto a = from_attributes<Attributes>(attrs, name);
  const bool nhwc = channels_last(name, a.data_format);
  // The max of integers is exact: max pooling takes them too (ONNX's u8 / i8).
  std::vector<Type> x = in;
  if (nhwc) x[0] = as_nchw(name, in[0]);
  auto dims = pool_dims(name, x, a.kernel_size, a.strides, a.paddings, a.ceil_mode, false);
  if (nhwc) dims = data_format::nchw_to_nhwc(dims);
  return {meta::result_like(in, shaped_data_type(in[0]), dims)};
}
void MaxPool2dOp::Grad::check(std::string_view op, const std::vector<Type>& in,
                              DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, op);
  if (!channels_last(op, a.data_format))
    return check_dout(op, in, pool_dims(op, in, a.kernel_size, a.strides, a.paddings, a.ceil_mode));
  // NHWC: x [N, H, W, C], dout [N, Ho, Wo, C].
  std::vector<Type> x = in;
  x[0] = as_nchw(op, in[0]);
  check_dout(op, in, data_format::nchw_to_nhwc(pool_dims(op, x, a.kernel_size, a.strides, a.paddings, a.ceil_mode)));
}
// The gradient op takes the forward op's attributes, its data_format
// included: an NHWC op's gradient is NHWC, with no transposes.
std::vector<Value> MaxPool2dOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  return pool_vjp<MaxPool2dOp>(b, op, g);
}

void AvgPool2dOp::build(Builder&, OperationArgument& arg, Value x,
                        std::vector<std::int64_t> kernel_size, std::vector<std::int64_t> strides,
                        std::vector<std::int64_t> paddings, bool ceil_mode, bool exclusive) {
  arg.add_operand(x);
  if (strides.empty()) strides = kernel_size;
  arg.attributes = to_named_attributes(Attributes{std::move(kernel_size), std::move(strides),
                                                  std::move(paddings), ceil_mode, exclusive});
}
std::vector<Type> AvgPool2dOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  meta::require_count(name, in, 1);
  auto a = from_attributes<Attributes>(attrs, name);
  auto dims = pool_dims(name, in, a.kernel_size, a.strides, a.paddings, a.ceil_mode);
  return {meta::result_like(in, shaped_data_type(in[0]), dims)};
}
void AvgPool2dOp::Grad::check(std::string_view op, const std::vector<Type>& in,
                              DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, op);
  check_dout(op, in, pool_dims(op, in, a.kernel_size, a.strides, a.paddings, a.ceil_mode));
}
std::vector<Value> AvgPool2dOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  return pool_vjp<AvgPool2dOp>(b, op, g);
}

void AdaptiveAvgPool2dOp::build(Builder&, OperationArgument& arg, Value x,
                                std::vector<std::int64_t> output_size) {
  arg.add_operand(x);
  arg.attributes = to_named_attributes(Attributes{std::move(output_size)});
}
std::vector<Type> AdaptiveAvgPool2dOp::infer_meta(const std::vector<Type>& in,
                                                  DictionaryAttribute attrs) {
  meta::require_count(name, in, 1);
  auto dims = adaptive_dims(name, in, from_attributes<Attributes>(attrs, name).output_size);
  return {meta::result_like(in, shaped_data_type(in[0]), dims)};
}
void AdaptiveAvgPool2dOp::Grad::check(std::string_view op, const std::vector<Type>& in,
                                      DictionaryAttribute attrs) {
  check_dout(op, in, adaptive_dims(op, in, from_attributes<Attributes>(attrs, op).output_size));
}
std::vector<Value> AdaptiveAvgPool2dOp::vjp(Builder& b, Operation* op,
                                            const std::vector<Value>& g) {
  return pool_vjp<AdaptiveAvgPool2dOp>(b, op, g);
}

void pool::check_roi_align(std::string_view op, const RoiAlignOp::Attributes& a) {
  if (a.output_size.size() != 2 || a.output_size[0] < 1 || a.output_size[1] < 1)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' output_size must be two entries, each >= 1, got ",
                meta::dims_string(a.output_size));
  if (!std::isfinite(a.spatial_scale) || a.spatial_scale <= 0)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' spatial_scale must be finite and > 0, got ",
                a.spatial_scale);
  if (a.mode != "avg" && a.mode != "max")
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' mode must be 'avg' or 'max', got '", a.mode, "'");
}

namespace {
// roi_align's result dims [R, C, oh, ow] from x, rois and batch_indices.
std::vector<std::int64_t> roi_align_dims(std::string_view op, const std::vector<Type>& in,
                                         const RoiAlignOp::Attributes& a) {
  pool::check_roi_align(op, a);
  Type x = meta::float_operand(op, in, 0);
  const auto& xd = shaped_dims(x);
  const auto& rd = shaped_dims(meta::tensor_operand(op, in, 1));
  Type bi = meta::tensor_operand(op, in, 2);
  const auto& bd = shaped_dims(bi);
  if (xd.size() != 4)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' x must be [N, C, H, W] (rank 4), got ",
                meta::dims_string(xd));
  meta::require_same_dtype(op, shaped_data_type(x), shaped_data_type(in[1]), 0, 1);
  if (rd.size() != 2 || (rd[1] >= 0 && rd[1] != 4))
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' rois must be [R, 4] (x1, y1, x2, y2), got ",
                meta::dims_string(rd));
  if (!meta::is_index_dtype(shaped_data_type(bi)) || bd.size() != 1 ||
      !meta::compatible_dims({bd[0]}, {rd[0]}))
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' batch_indices must be i32 or i64 [R] for rois ",
                meta::dims_string(rd), ", got ", to_string(shaped_data_type(bi)), " ", meta::dims_string(bd));
  return {rd[0] >= 0 ? rd[0] : bd[0], xd[1], a.output_size[0], a.output_size[1]};
}
}  // namespace

void RoiAlignOp::build(Builder&, OperationArgument& arg, Value x, Value rois, Value batch_indices,
                       std::vector<std::int64_t> output_size, double spatial_scale,
                       std::int64_t sampling_ratio, bool aligned, std::string mode) {
  arg.add_operands({x, rois, batch_indices});
  arg.attributes = to_named_attributes(
      Attributes{std::move(output_size), spatial_scale, sampling_ratio, aligned, std::move(mode)});
}
std::vector<Type> RoiAlignOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  meta::require_count(name, in, 3);
  auto dims = roi_align_dims(name, in, from_attributes<Attributes>(attrs, name));
  return {meta::result_like(in, shaped_data_type(in[0]), dims)};
}
void RoiAlignOp::Grad::check(std::string_view op, const std::vector<Type>& in,
                             DictionaryAttribute attrs) {
  const auto dims = roi_align_dims(op, in, from_attributes<Attributes>(attrs, op));
  Type d = meta::tensor_operand(op, in, 3);
  meta::require_same_dtype(op, shaped_data_type(in[0]), shaped_data_type(d), 0, 3);
  if (!meta::compatible_dims(shaped_dims(d), dims))
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' dout ", meta::dims_string(shaped_dims(d)),
                " must have the forward result's shape ", meta::dims_string(dims));
}
// Only x gets a gradient: a region's corners move the sampling grid, which
// torchvision and Paddle do not differentiate either.
std::vector<Value> RoiAlignOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = vjp::single_grad(op, g);
  if (!d || !vjp::differentiable(op->operand_source(0))) return {Value(), Value(), Value()};
  return {b.create<GradOf<RoiAlignOp>>(op, op->operand_source(0), op->operand_source(1),
                                       op->operand_source(2), d)
              .result(),
          Value(), Value()};
}

}  // namespace kiln

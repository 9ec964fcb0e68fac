// The ops of kiln/dialect/conv_ops.h: InferMeta, Vjp, gradient ops and
// registration.
#include "kiln/dialect/conv_ops.h"

#include <cmath>
#include <limits>

#include "kiln/dialect/binary_ops.h"
#include "kiln/dialect/compare_ops.h"
#include "kiln/dialect/data_format.h"
#include "kiln/dialect/reduce_ops.h"
#include "kiln/dialect/tensor_ops.h"
#include "kiln/dialect/unary_ops.h"

namespace kiln {

KILN_REGISTER_OP(Conv2dOp, GradOf<Conv2dOp>, Conv2dTransposeOp, GradOf<Conv2dTransposeOp>,
                 FusedConv2dOp, ChannelScaledConv2dOp, FusedConv2dMeanOp, PointwiseDepthwiseConv2dOp);

namespace conv {

std::array<std::int64_t, 4> paddings4(std::string_view op, const std::vector<std::int64_t>& p) {
  std::array<std::int64_t, 4> r{};
  if (p.size() == 2) r = {p[0], p[0], p[1], p[1]};
  else if (p.size() == 4) r = {p[0], p[1], p[2], p[3]};
  else
    throw_error(ErrorKind::InvalidArgument, "op '", op,
                "' paddings must have 2 ([ph, pw]) or 4 ([top, bottom, left, right]) entries, got ",
                meta::dims_string(p));
  for (auto v : r)
    if (v < 0)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' paddings must be >= 0, got ",
                  meta::dims_string(p));
  return r;
}

void require_pair(std::string_view op, std::string_view what, const std::vector<std::int64_t>& v,
                  std::int64_t min) {
  if (v.size() != 2 || v[0] < min || v[1] < min)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' ", what,
                " must be two entries, each >= ", min, ", got ", meta::dims_string(v));
}

Conv2dGeometry geometry(std::string_view op, const Dims& x, const Dims& w,
                        const std::vector<std::int64_t>& strides,
                        const std::vector<std::int64_t>& paddings,
                        const std::vector<std::int64_t>& dilations, std::int64_t groups) {
  auto bad = [&](const char* why) {
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' ", why, ": x is [", x.to_string(),
                "], w is [", w.to_string(), "]");
  };
  if (x.rank() != 4 || w.rank() != 4) bad("needs rank-4 x and w");
  Conv2dGeometry g;
  g.n = x[0], g.c = x[1], g.h = x[2], g.w = x[3];
  g.o = w[0], g.kh = w[2], g.kw = w[3];
  g.groups = groups;
  if (g.groups < 1 || w[1] * g.groups != g.c || g.o % g.groups != 0)
    bad("has channels that do not fit the groups");
  const auto p = paddings4(op, paddings);
  g.pt = p[0], g.pb = p[1], g.pl = p[2], g.pr = p[3];
  g.sh = strides.at(0), g.sw = strides.at(1), g.dh = dilations.at(0), g.dw = dilations.at(1);
  g.ho = conv_out(op, "H", g.h, g.kh, g.sh, g.pt, g.pb, g.dh);
  g.wo = conv_out(op, "W", g.w, g.kw, g.sw, g.pl, g.pr, g.dw);
  return g;
}

void check_dout(std::string_view op, const Dims& dout, const Dims& want) {
  if (dout != want)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' dout is [", dout.to_string(),
                "], the forward result is [", want.to_string(), "]");
}

std::int64_t conv_out(std::string_view op, std::string_view axis, std::int64_t in, std::int64_t k,
                      std::int64_t s, std::int64_t p0, std::int64_t p1, std::int64_t d) {
  if (in < 0) return -1;
  const std::int64_t span = d * (k - 1) + 1, padded = in + p0 + p1;
  if (span > padded)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' kernel extent ", span, " along ", axis,
                " is larger than the padded input (", in, " + ", p0, " + ", p1, " = ", padded, ")");
  return (padded - span) / s + 1;
}

}  // namespace conv

namespace {

struct Checked {
  DataType dtype;
  std::vector<std::int64_t> x, w;
};

// Operands x, w: rank-4 tensors of one floating dtype.
Checked check_xw(std::string_view op, const std::vector<Type>& in) {
  Type x = meta::float_operand(op, in, 0), w = meta::float_operand(op, in, 1);
  meta::require_same_dtype(op, shaped_data_type(x), shaped_data_type(w));
  Checked c{shaped_data_type(x), shaped_dims(x), shaped_dims(w)};
  if (c.x.size() != 4)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' x must be [N, C, H, W] (rank 4), got ",
                meta::dims_string(c.x));
  if (c.w.size() != 4)
    throw_error(ErrorKind::InvalidArgument, "op '", op,
                "' w must be rank 4 ([out, in / groups, kh, kw]), got ", meta::dims_string(c.w));
  return c;
}

void check_common(std::string_view op, const std::vector<std::int64_t>& strides,
                  const std::vector<std::int64_t>& dilations, std::int64_t groups) {
  conv::require_pair(op, "strides", strides, 1);
  conv::require_pair(op, "dilations", dilations, 1);
  if (groups < 1)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' groups must be >= 1, got ", groups);
}

std::vector<std::int64_t> conv2d_shape(std::string_view op, const std::vector<Type>& in,
                                       const Conv2dOp::Attributes& a, DataType* dtype) {
  Checked c = check_xw(op, in);
  *dtype = c.dtype;
  check_common(op, a.strides, a.dilations, a.groups);
  auto p = conv::paddings4(op, a.paddings);
  const std::int64_t C = c.x[1], O = c.w[0], Cg = c.w[1];
  if (O >= 0 && O % a.groups != 0)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' groups (", a.groups,
                ") must divide the output channels w[0] = ", O);
  if (C >= 0 && C % a.groups != 0)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' groups (", a.groups,
                ") must divide the input channels x[1] = ", C);
  if (C >= 0 && Cg >= 0 && Cg * a.groups != C)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' channels mismatch: x has C = ", C,
                ", w ", meta::dims_string(c.w), " expects C = w[1] * groups = ", Cg * a.groups);
  if (c.w[2] == 0 || c.w[3] == 0)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' kernel must not be empty, w is ",
                meta::dims_string(c.w));
  std::int64_t ho = c.w[2] < 0 ? -1
                               : conv::conv_out(op, "H", c.x[2], c.w[2], a.strides[0], p[0], p[1],
                                                a.dilations[0]);
  std::int64_t wo = c.w[3] < 0 ? -1
                               : conv::conv_out(op, "W", c.x[3], c.w[3], a.strides[1], p[2], p[3],
                                                a.dilations[1]);
  return {c.x[0], O, ho, wo};
}

// -1 when the extent is unknown; an empty output is an error naming the axis.
std::int64_t transpose_out(std::string_view op, std::string_view axis, std::int64_t in,
                           std::int64_t k, std::int64_t s, std::int64_t p0, std::int64_t p1,
                           std::int64_t out_pad, std::int64_t d) {
  if (in < 0 || k < 0) return -1;
  const std::int64_t out = (in - 1) * s - p0 - p1 + d * (k - 1) + out_pad + 1;
  if (out < 1)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' output would be empty along ", axis,
                ": ", out, " (paddings ", p0, " + ", p1, " too large)");
  return out;
}

std::vector<std::int64_t> transpose_shape(std::string_view op, const std::vector<Type>& in,
                                          const Conv2dTransposeOp::Attributes& a,
                                          DataType* dtype) {
  Checked c = check_xw(op, in);
  *dtype = c.dtype;
  check_common(op, a.strides, a.dilations, a.groups);
  auto p = conv::paddings4(op, a.paddings);
  conv::require_pair(op, "output_padding", a.output_padding, 0);
  for (int i = 0; i < 2; ++i)
    if (a.output_padding[i] >= a.strides[i] && a.output_padding[i] >= a.dilations[i])
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' output_padding ",
                  meta::dims_string(a.output_padding),
                  " must be smaller than the stride or the dilation along each axis");
  const std::int64_t C = c.x[1], Cin = c.w[0], Cog = c.w[1];
  if (Cin >= 0 && Cin % a.groups != 0)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' groups (", a.groups,
                ") must divide the input channels w[0] = ", Cin);
  if (C >= 0 && Cin >= 0 && C != Cin)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' channels mismatch: x has C = ", C,
                ", w ", meta::dims_string(c.w), " expects C = w[0] = ", Cin);
  if (c.w[2] == 0 || c.w[3] == 0)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' kernel must not be empty, w is ",
                meta::dims_string(c.w));
  std::int64_t ho = transpose_out(op, "H", c.x[2], c.w[2], a.strides[0], p[0], p[1],
                                  a.output_padding[0], a.dilations[0]);
  std::int64_t wo = transpose_out(op, "W", c.x[3], c.w[3], a.strides[1], p[2], p[3],
                                  a.output_padding[1], a.dilations[1]);
  return {c.x[0], Cog < 0 ? -1 : Cog * a.groups, ho, wo};
}

// dout (operand 2) has the forward result's dtype and shape.
void check_dout(std::string_view op, const std::vector<Type>& in, DataType dt,
                const std::vector<std::int64_t>& want) {
  Type d = meta::tensor_operand(op, in, 2);
  meta::require_same_dtype(op, dt, shaped_data_type(d), 0, 2);
  if (!meta::compatible_dims(shaped_dims(d), want))
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' dout ",
                meta::dims_string(shaped_dims(d)), " must have the forward result's shape ",
                meta::dims_string(want));
}

}  // namespace

void Conv2dOp::build(Builder&, OperationArgument& arg, Value x, Value w,
                     std::vector<std::int64_t> strides, std::vector<std::int64_t> paddings,
                     std::vector<std::int64_t> dilations, std::int64_t groups,
                     std::string data_format) {
  arg.add_operand(x);
  arg.add_operand(w);
  arg.attributes = to_named_attributes(Attributes{std::move(strides), std::move(paddings),
                                                  std::move(dilations), groups,
                                                  std::move(data_format)});
}

namespace {

// The result dims of conv2d (or its gradient's forward) in the op's layout:
// an NHWC x is read as NCHW and the result given back as NHWC.
std::vector<std::int64_t> conv2d_dims(std::string_view op, const std::vector<Type>& in,
                                      const Conv2dOp::Attributes& a, DataType* dt) {
  if (!data_format::channels_last(op, a.data_format)) return conv2d_shape(op, in, a, dt);
  const Type x = meta::float_operand(op, in, 0);
  std::vector<Type> xw{meta::result_like({x}, shaped_data_type(x), data_format::nhwc_to_nchw(shaped_dims(x))),
                       in[1]};
  return data_format::nchw_to_nhwc(conv2d_shape(op, xw, a, dt));
}

}  // namespace

std::vector<Type> Conv2dOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  meta::require_count(name, in, 2);
  DataType dt;
  auto dims = conv2d_dims(name, in, from_attributes<Attributes>(attrs, name), &dt);
  return {meta::result_like(in, dt, dims)};
}

void Conv2dOp::Grad::check(std::string_view op, const std::vector<Type>& in,
                           DictionaryAttribute attrs) {
  DataType dt;
  auto dims = conv2d_dims(op, {in[0], in[1]}, from_attributes<Attributes>(attrs, op), &dt);
  check_dout(op, in, dt, dims);
}

std::vector<Value> Conv2dOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = vjp::single_grad(op, g);
  if (!d) return {Value(), Value()};
  auto grad = b.create<GradOf<Conv2dOp>>(op, op->operand_source(0), op->operand_source(1), d);
  return {grad.operation()->result(0), grad.operation()->result(1)};
}

void FusedConv2dOp::build(Builder&, OperationArgument& arg, Value x, Value w, Value bias,
                          std::vector<std::int64_t> strides, std::vector<std::int64_t> paddings,
                          std::vector<std::int64_t> dilations, std::int64_t groups,
                          std::string activation, std::string data_format, Value residual,
                          bool weights_trained) {
  arg.add_operand(x);
  arg.add_operand(w);
  arg.add_operand(bias);
  if (residual) arg.add_operand(residual);
  arg.attributes = to_named_attributes(Attributes{std::move(strides), std::move(paddings),
                                                  std::move(dilations), groups,
                                                  std::move(activation), std::move(data_format),
                                                  weights_trained});
}

using data_format::channels_last;
using data_format::nchw_to_nhwc;
using data_format::nhwc_to_nchw;

namespace {

// kiln::Error naming `op` unless its residual is typed like its result.
void check_residual(std::string_view op, Type residual, Type out) {
  const Type r = meta::tensor_operand(op, {residual}, 0);
  const auto& rd = shaped_dims(r);
  const auto& od = shaped_dims(out);
  bool fits = shaped_data_type(r) == shaped_data_type(out) && rd.size() == od.size();
  for (std::size_t i = 0; fits && i < rd.size(); ++i) fits = rd[i] < 0 || od[i] < 0 || rd[i] == od[i];
  if (!fits)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' residual must be ",
                meta::dims_string(od), " of ", to_string(shaped_data_type(out)), " (the result's type), got ",
                meta::dims_string(rd), " of ", to_string(shaped_data_type(r)));
}

// fused_conv2d's result type from (x, w, bias[, residual]); errors name `op`.
std::vector<Type> fused_conv_meta(std::string_view op, const std::vector<Type>& in,
                                  const FusedConv2dOp::Attributes& a) {
  if (a.activation != "none" && a.activation != "relu" && a.activation != "relu6" &&
      a.activation != "silu")
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' activation '", a.activation,
                "' is not one of none, relu, relu6, silu");
  const bool nhwc = channels_last(op, a.data_format);
  std::vector<Type> xw{in[0], in[1]};
  if (nhwc) {
    const Type x = meta::float_operand(op, in, 0);
    xw[0] = meta::result_like({x}, shaped_data_type(x), nhwc_to_nchw(shaped_dims(x)));
  }
  DataType dt;
  auto dims = conv2d_shape(op, xw, Conv2dOp::Attributes{a.strides, a.paddings, a.dilations, a.groups, "NCHW"}, &dt);
  const Type bias_type = meta::tensor_operand(op, in, 2);
  const auto& bias = shaped_dims(bias_type);
  if (shaped_data_type(bias_type) != dt || bias.size() != 1 ||
      (bias[0] >= 0 && dims[1] >= 0 && bias[0] != dims[1]))
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' bias must be [", dims[1], "] of ",
                to_string(dt), " (one per output channel), got ", meta::dims_string(bias), " of ",
                to_string(shaped_data_type(bias_type)));
  Type out = meta::result_like(in, dt, nhwc ? nchw_to_nhwc(dims) : dims);
  if (in.size() == 4) check_residual(op, in[3], out);
  return {out};
}

}  // namespace

std::vector<Type> FusedConv2dOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  if (in.size() != 4) meta::require_count(name, in, 3);
  return fused_conv_meta(name, in, from_attributes<Attributes>(attrs, name));
}

namespace {

// The gradient at the pre-activation z of y = z·sigmoid(z), given dy: y
// does not determine z, so z is computed again (a fused_conv2d without
// activation); dz = dy·s + sigmoid'(dy·z) with s = sigmoid(z).
Value silu_grad(Builder& b, Operation* op, const FusedConv2dOp::Attributes& a, Value dy) {
  const Value residual = op->num_operands() == 4 ? op->operand_source(3) : Value();
  Value z = b.create<FusedConv2dOp>(op->operand_source(0), op->operand_source(1),
                                    op->operand_source(2), a.strides, a.paddings, a.dilations,
                                    a.groups, "none", a.data_format, residual, a.weights_trained)
                .result();
  Value s = b.create<SigmoidOp>(z).result();
  Value through_s = b.create<GradOf<SigmoidOp>>(s, b.create<MulOp>(dy, z).result())
                        .operation()
                        ->result(0);
  return b.create<AddOp>(b.create<MulOp>(dy, s).result(), through_s).result();
}

}  // namespace

std::vector<Value> FusedConv2dOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = vjp::single_grad(op, g);
  if (!d) return std::vector<Value>(op->num_operands());
  const auto a = FusedConv2dOp(op).attrs();
  if (a.activation == "silu") d = silu_grad(b, op, a, d);
  if (a.activation == "relu" || a.activation == "relu6")  // y > 0 where the pre-activation is
    d = b.create<GradOf<ReluOp>>(op->result(0), d).operation()->result(0);
  if (a.activation == "relu6") {
    // y < 6 exactly where the pre-activation is: clip's gradient passes
    // y <= max, so max is the largest value below 6 in y's dtype.
    const bool f32 = shaped_data_type(op->result(0).type()) == DataType::Float32;
    const double below_6 = f32 ? double(std::nextafter(6.0f, 0.0f)) : std::nextafter(6.0, 0.0);
    d = b.create<GradOf<ClipOp>>(ClipOp::Attributes{-std::numeric_limits<double>::infinity(), below_6},
                                 op->result(0), d)
            .operation()
            ->result(0);
  }
  const bool nhwc = channels_last(FusedConv2dOp::name, a.data_format);
  const Value d_pre = d;  // at the pre-activation z, in the op's layout
  Value dbias = b.create<SumOp>(d, nhwc ? std::vector<std::int64_t>{0, 1, 2}
                                        : std::vector<std::int64_t>{0, 2, 3},
                                false)
                    .result();
  auto grad = b.create<GradOf<Conv2dOp>>(
      Conv2dOp::Attributes{a.strides, a.paddings, a.dilations, a.groups, a.data_format}, op->operand_source(0),
      op->operand_source(1), d);
  Value dx = grad.operation()->result(0);
  if (op->num_operands() == 4) return {dx, grad.operation()->result(1), dbias, d_pre};  // residual: as z
  return {dx, grad.operation()->result(1), dbias};
}

void ChannelScaledConv2dOp::build(Builder&, OperationArgument& arg, Value x, Value scale, Value w, Value bias,
                                  Attributes attrs, Value residual) {
  for (Value v : {x, scale, w, bias}) arg.add_operand(v);
  if (residual) arg.add_operand(residual);
  arg.attributes = to_named_attributes(std::move(attrs));
}

// fused_conv2d's result over (x, w, bias[, residual]), once scale is
// [N, C, 1, 1] (NCHW) or [N, 1, 1, C] (NHWC) of x's dtype.
std::vector<Type> ChannelScaledConv2dOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  if (in.size() != 5) meta::require_count(name, in, 4);
  const auto a = from_attributes<Attributes>(attrs, name);
  const bool nhwc = channels_last(name, a.data_format);
  const Type x = meta::float_operand(name, in, 0), scale = meta::tensor_operand(name, in, 1);
  const auto& xd = shaped_dims(x);
  const auto& sd = shaped_dims(scale);
  const std::size_t c = nhwc ? 3 : 1;
  bool fits = xd.size() == 4 && sd.size() == 4 && shaped_data_type(scale) == shaped_data_type(x);
  for (std::size_t i = 0; fits && i < 4; ++i) {
    const std::int64_t want = i == 0 || i == c ? xd[i] : 1;
    fits = sd[i] < 0 || want < 0 || sd[i] == want || (i == 0 && sd[i] == 1);
  }
  if (!fits) {
    using D = std::vector<std::int64_t>;
    const D want = xd.size() != 4 ? D{} : nhwc ? D{xd[0], 1, 1, xd[3]} : D{xd[0], xd[1], 1, 1};
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' scale must be ", meta::dims_string(want), " of ",
                to_string(shaped_data_type(x)), " (one factor per channel, per image or for all, of x ",
                meta::dims_string(xd), "), got ", meta::dims_string(sd), " of ",
                to_string(shaped_data_type(scale)));
  }
  std::vector<Type> conv_in{in[0], in[2], in[3]};
  if (in.size() == 5) conv_in.push_back(in[4]);
  return fused_conv_meta(name, conv_in, a);
}

void FusedConv2dMeanOp::build(Builder&, OperationArgument& arg, Value x, Value w, Value bias, Attributes attrs) {
  for (Value v : {x, w, bias}) arg.add_operand(v);
  arg.attributes = to_named_attributes(std::move(attrs));
}

// fused_conv2d's result, NHWC only, and its [N, 1, 1, O] mean.
std::vector<Type> FusedConv2dMeanOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  meta::require_count(name, in, 3);
  const auto a = from_attributes<Attributes>(attrs, name);
  if (!channels_last(name, a.data_format))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' takes NHWC data only (its mean is over axes 1 and 2)");
  const Type out = fused_conv_meta(name, in, a)[0];
  const auto& d = shaped_dims(out);
  return {out, meta::result_like({out}, shaped_data_type(out), {d[0], 1, 1, d[3]})};
}

void PointwiseDepthwiseConv2dOp::build(Builder&, OperationArgument& arg, Value x, Value pw, Value pw_bias, Value dw,
                                       Value dw_bias, Attributes attrs) {
  for (Value v : {x, pw, pw_bias, dw, dw_bias}) arg.add_operand(v);
  arg.attributes = to_named_attributes(std::move(attrs));
}

FusedConv2dOp::Attributes PointwiseDepthwiseConv2dOp::pointwise_attrs(const Attributes& a) {
  return {{1, 1}, {0, 0}, {1, 1}, 1, a.pointwise_activation, "NHWC", false};
}

FusedConv2dOp::Attributes PointwiseDepthwiseConv2dOp::depthwise_attrs(const Attributes& a, std::int64_t channels) {
  return {a.strides, a.paddings, a.dilations, channels, a.activation, "NHWC", false};
}

// The second fused_conv2d's result over the first's: pw [E, C, 1, 1] with
// E known, dw [E, 1, kh, kw].
std::vector<Type> PointwiseDepthwiseConv2dOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  meta::require_count(name, in, 5);
  const auto a = from_attributes<Attributes>(attrs, name);
  const auto& pw = shaped_dims(meta::tensor_operand(name, in, 1));
  if (pw.size() != 4 || pw[0] < 0 || pw[2] != 1 || pw[3] != 1)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' pw must be [E, C, 1, 1] with E known (the 1x1 ",
                "expansion's weights), got ", meta::dims_string(pw));
  const Type mid = fused_conv_meta(name, {in[0], in[1], in[2]}, pointwise_attrs(a))[0];
  const auto& dw = shaped_dims(meta::tensor_operand(name, in, 3));
  if (dw.size() != 4 || (dw[0] >= 0 && dw[0] != pw[0]) || (dw[1] >= 0 && dw[1] != 1))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' dw must be [", pw[0], ", 1, kh, kw] (one filter ",
                "per expanded channel), got ", meta::dims_string(dw));
  return fused_conv_meta(name, {mid, in[3], in[4]}, depthwise_attrs(a, pw[0]));
}

void Conv2dTransposeOp::build(Builder&, OperationArgument& arg, Value x, Value w,
                              std::vector<std::int64_t> strides,
                              std::vector<std::int64_t> paddings,
                              std::vector<std::int64_t> output_padding,
                              std::vector<std::int64_t> dilations, std::int64_t groups) {
  arg.add_operand(x);
  arg.add_operand(w);
  arg.attributes = to_named_attributes(Attributes{std::move(strides), std::move(paddings),
                                                  std::move(output_padding),
                                                  std::move(dilations), groups});
}

std::vector<Type> Conv2dTransposeOp::infer_meta(const std::vector<Type>& in,
                                                DictionaryAttribute attrs) {
  meta::require_count(name, in, 2);
  DataType dt;
  auto dims = transpose_shape(name, in, from_attributes<Attributes>(attrs, name), &dt);
  return {meta::result_like(in, dt, dims)};
}

void Conv2dTransposeOp::Grad::check(std::string_view op, const std::vector<Type>& in,
                                    DictionaryAttribute attrs) {
  DataType dt;
  auto dims = transpose_shape(op, {in[0], in[1]}, from_attributes<Attributes>(attrs, op), &dt);
  check_dout(op, in, dt, dims);
}

std::vector<Value> Conv2dTransposeOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = vjp::single_grad(op, g);
  if (!d) return {Value(), Value()};
  auto grad =
      b.create<GradOf<Conv2dTransposeOp>>(op, op->operand_source(0), op->operand_source(1), d);
  return {grad.operation()->result(0), grad.operation()->result(1)};
}

}  // namespace kiln

// ONNX's elementwise math beyond the basic family: the trigonometric and
// hyperbolic functions, Erf, Floor / Ceil / Round / Sign (kiln's unary ops);
// IsNaN / IsInf; activations composed of kiln ops (Celu, HardSwish, Shrink,
// ThresholdedRelu); Hardmax (one-hot of the first maximum); EyeLike (a
// constant: its input's dims must be known at import); Det (kiln.det);
// Einsum (composed: see einsum below); the Hann, Hamming and Blackman
// windows (cosines of a kiln.range); DFT (products with constant cosine and
// sine tables); STFT and MelWeightMatrix (kiln.stft, kiln.mel_weight_matrix:
// their sizes are read at run time).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "kiln/dialect/kiln_dialect.h"
#include "node_helpers.h"
#include "op_table.h"

namespace kiln::onnx::detail {

namespace {

std::vector<Value> is_nan(NodeContext& c) { return {c.b.create<IsNanOp>(c.input(0)).result()}; }

// ±inf: neither finite nor NaN; detect_positive / detect_negative pick the signs.
std::vector<Value> is_inf(NodeContext& c) {
  Value x = c.input(0);
  Value inf = c.b.create<LogicalNotOp>(
                     c.b.create<LogicalOrOp>(c.b.create<IsFiniteOp>(x).result(),
                                             c.b.create<IsNanOp>(x).result())
                         .result())
                  .result();
  const bool pos = c.int_attr("detect_positive", 1) != 0, neg = c.int_attr("detect_negative", 1) != 0;
  if (pos && neg) return {inf};
  Value zero = scalar(c, dtype_of(x), 0.0);
  if (!pos && !neg)  // neither sign: all false (an infinity is never NaN)
    return {c.b.create<LogicalAndOp>(inf, c.b.create<IsNanOp>(x).result()).result()};
  Value sign = pos ? c.b.create<GreaterThanOp>(x, zero).result() : c.b.create<LessThanOp>(x, zero).result();
  return {c.b.create<LogicalAndOp>(inf, sign).result()};
}

// max(0, x) + min(0, alpha · (exp(x / alpha) - 1))
std::vector<Value> celu(NodeContext& c) {
  Value x = c.input(0), zero = scalar(c, dtype_of(x), 0.0);
  const double alpha = c.float_attr("alpha", 1.0f);
  if (alpha == 0.0) c.unsupported("alpha = 0");
  Value e = c.b.create<ExpOp>(c.b.create<ScaleOp>(x, 1.0 / alpha, 0.0).result()).result();
  Value neg = c.b.create<MinimumOp>(c.b.create<ScaleOp>(e, alpha, -alpha).result(), zero).result();
  return {c.b.create<AddOp>(c.b.create<MaximumOp>(x, zero).result(), neg).result()};
}

// x · max(0, min(1, x / 6 + 1/2))
std::vector<Value> hard_swish(NodeContext& c) {
  Value x = c.input(0);
  Value gate = c.b.create<ClipOp>(c.b.create<ScaleOp>(x, 1.0 / 6.0, 0.5).result(), 0.0, 1.0).result();
  return {c.b.create<MulOp>(x, gate).result()};
}

// x < -lambd: x + bias; x > lambd: x - bias; else 0.
std::vector<Value> shrink(NodeContext& c) {
  Value x = c.input(0);
  const DataType dt = dtype_of(x);
  const double lambd = c.float_attr("lambd", 0.5f), bias = c.float_attr("bias", 0.0f);
  Value zero = scalar(c, dt, 0.0);
  Value below = c.b.create<LessThanOp>(x, scalar(c, dt, -lambd)).result();
  Value above = c.b.create<GreaterThanOp>(x, scalar(c, dt, lambd)).result();
  Value up = c.b.create<AddOp>(x, scalar(c, dt, bias)).result();
  Value down = c.b.create<SubOp>(x, scalar(c, dt, bias)).result();
  Value y = c.b.create<WhereOp>(above, down, zero).result();
  return {c.b.create<WhereOp>(below, up, y).result()};
}

// x > alpha: x; else 0.
std::vector<Value> thresholded_relu(NodeContext& c) {
  Value x = c.input(0);
  const DataType dt = dtype_of(x);
  Value above = c.b.create<GreaterThanOp>(x, scalar(c, dt, c.float_attr("alpha", 1.0f))).result();
  return {c.b.create<WhereOp>(above, x, scalar(c, dt, 0.0)).result()};
}

// 1 at the first maximum along `axis`, 0 elsewhere (x's dtype). Opset 13
// works along `axis` alone; before, the input was coerced to 2-D at `axis`.
std::vector<Value> hardmax(NodeContext& c) {
  Value x = c.input(0);
  std::vector<std::int64_t> d = known_dims(c, x, "Hardmax");
  const auto rank = static_cast<std::int64_t>(d.size());
  std::int64_t axis = c.int_attr("axis", c.opset >= 13 ? -1 : 1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) c.unsupported("axis out of range");
  Value in = x;
  std::int64_t along = axis;
  if (c.opset < 13) {  // [d0 … d(axis-1)] × [d(axis) …]
    std::int64_t outer = 1, inner = 1;
    for (std::int64_t i = 0; i < rank; ++i) (i < axis ? outer : inner) *= d[static_cast<std::size_t>(i)];
    in = c.b.create<ReshapeOp>(x, std::vector<std::int64_t>{outer, inner}).result();
    along = 1;
  }
  const std::vector<std::int64_t> in_dims = shaped_dims(in.type());
  const std::int64_t n = in_dims[static_cast<std::size_t>(along)];
  Value arg = c.b.create<ArgMaxOp>(in, along, true).result();  // i64, extent 1 at `along`
  std::vector<std::int64_t> iota_dims(in_dims.size(), 1), iota(static_cast<std::size_t>(n));
  iota_dims[static_cast<std::size_t>(along)] = n;
  for (std::int64_t i = 0; i < n; ++i) iota[static_cast<std::size_t>(i)] = i;
  Value positions = constant_value(c.b, Tensor::from_vector<std::int64_t>(Dims(iota_dims), iota));
  Value y = c.b.create<CastOp>(c.b.create<EqualOp>(arg, positions).result(), dtype_of(x)).result();
  if (c.opset < 13) y = c.b.create<ReshapeOp>(y, d).result();
  return {y};
}

// A 2-D constant with ones on diagonal k, of the input's dims and of the
// `dtype` attribute's type (default: the input's).
std::vector<Value> eye_like(NodeContext& c) {
  std::vector<std::int64_t> d = known_dims(c, c.input(0), "EyeLike");
  if (d.size() != 2) c.unsupported("EyeLike of an input of rank " + std::to_string(d.size()));
  DataType dt = dtype_of(c.input(0));
  if (c.has_attr("dtype")) {
    switch (c.int_attr("dtype", 0)) {
      case ::onnx::TensorProto_DataType_FLOAT: dt = DataType::Float32; break;
      case ::onnx::TensorProto_DataType_DOUBLE: dt = DataType::Float64; break;
      case ::onnx::TensorProto_DataType_INT32: dt = DataType::Int32; break;
      case ::onnx::TensorProto_DataType_INT64: dt = DataType::Int64; break;
      case ::onnx::TensorProto_DataType_BOOL: dt = DataType::Bool; break;
      default: c.unsupported("EyeLike dtype " + std::to_string(c.int_attr("dtype", 0)));
    }
  }
  const std::int64_t k = c.int_attr("k", 0);
  std::vector<double> v(static_cast<std::size_t>(d[0] * d[1]), 0.0);
  for (std::int64_t i = 0; i < d[0]; ++i)
    if (i + k >= 0 && i + k < d[1]) v[static_cast<std::size_t>(i * d[1] + i + k)] = 1.0;
  Tensor t = Tensor::from_vector<double>(Dims(d), v);
  if (dt != DataType::Float64) {
    Tensor converted = Tensor::empty(Dims(d), dt);
    for (std::size_t i = 0; i < v.size(); ++i) {
      switch (dt) {
        case DataType::Float32: converted.data<float>()[i] = static_cast<float>(v[i]); break;
        case DataType::Int32: converted.data<std::int32_t>()[i] = static_cast<std::int32_t>(v[i]); break;
        case DataType::Int64: converted.data<std::int64_t>()[i] = static_cast<std::int64_t>(v[i]); break;
        default: converted.data<bool>()[i] = v[i] != 0.0; break;
      }
    }
    t = converted;
  }
  c.known_outputs = {t};
  return {constant_value(c.b, t)};
}

std::vector<Value> det(NodeContext& c) { return {c.b.create<DetOp>(c.input(0)).result()}; }

// Einsum composed at import (the inputs' dims must be known then). Every
// operand's subscripts become one label per dim ("..." expands to labels
// of its own); a label repeated within an operand takes the diagonal (the
// operand times an identity mask over the two dims, summed over the
// second); each operand is transposed to the labels' order of first
// appearance and given 1s for the labels it lacks; the operands are
// multiplied (broadcasting), summed over the labels not in the output and
// transposed to the output's order.
// An Einsum equation read against its inputs' dims: each operand's labels
// with "..." expanded to ellipsis labels ('0' … '9'), every label in order
// of first appearance, and the output's labels.
struct EinsumSpec {
  std::vector<std::string> terms;
  std::vector<std::vector<std::int64_t>> dims;
  std::string order, out;
};

EinsumSpec parse_einsum(NodeContext& c) {
  const auto* eq_attr = c.attribute("equation");
  if (!eq_attr) c.unsupported("Einsum without an equation");
  std::string eq;
  for (char ch : eq_attr->s())
    if (ch != ' ') eq += ch;
  const auto arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  EinsumSpec e;
  for (std::size_t start = 0;;) {
    const auto comma = lhs.find(',', start);
    e.terms.push_back(
        lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (e.terms.size() != c.inputs.size())
    c.unsupported("an equation with " + std::to_string(e.terms.size()) + " operands for " +
                  std::to_string(c.inputs.size()) + " inputs");
  // "..." of an operand of rank r with m labels covers its last r - m
  // ellipsis labels, aligned to the right as numpy broadcasts.
  std::size_t ellipsis = 0;
  for (std::size_t k = 0; k < e.terms.size(); ++k) {
    e.dims.push_back(shaped_dims(c.input(k).type()));
    for (auto d : e.dims.back())
      if (d < 0) c.unsupported("Einsum of an input with a dim known only at run time");
    const auto dots = e.terms[k].find("...");
    const std::size_t named = e.terms[k].size() - (dots == std::string::npos ? 0 : 3);
    if (dots != std::string::npos) {
      if (e.dims[k].size() < named)
        c.unsupported("subscripts '" + e.terms[k] + "' for an input of rank " +
                      std::to_string(e.dims[k].size()));
      ellipsis = std::max(ellipsis, e.dims[k].size() - named);
    }
  }
  if (ellipsis > 10) c.unsupported("an ellipsis of more than 10 dims");
  std::string ell_labels;
  for (std::size_t i = 0; i < ellipsis; ++i) ell_labels += static_cast<char>('0' + i);
  auto expand = [&](const std::string& term, std::size_t rank) {
    const auto dots = term.find("...");
    if (dots == std::string::npos) return term;
    const std::size_t covered = rank - (term.size() - 3);
    return term.substr(0, dots) + ell_labels.substr(ellipsis - covered) + term.substr(dots + 3);
  };
  std::map<char, int> uses;
  for (std::size_t k = 0; k < e.terms.size(); ++k) {
    e.terms[k] = expand(e.terms[k], e.dims[k].size());
    if (e.terms[k].size() != e.dims[k].size())
      c.unsupported("subscripts '" + e.terms[k] + "' for an input of rank " +
                    std::to_string(e.dims[k].size()));
    for (char ch : e.terms[k]) {
      if (e.order.find(ch) == std::string::npos) e.order += ch;
      ++uses[ch];
    }
  }
  if (arrow != std::string::npos) {
    e.out = eq.substr(arrow + 2);
    const auto dots = e.out.find("...");
    if (dots != std::string::npos) e.out = e.out.substr(0, dots) + ell_labels + e.out.substr(dots + 3);
  } else {  // implicit: the ellipsis, then the labels used once, sorted
    std::string once;
    for (char ch : e.order)
      if (uses[ch] == 1 && (ch < '0' || ch > '9')) once += ch;
    std::sort(once.begin(), once.end());
    e.out = ell_labels + once;
  }
  for (char ch : e.out)
    if (e.order.find(ch) == std::string::npos)
      c.unsupported("output label '" + std::string(1, ch) + "' not in any input");
  return e;
}

Value transpose_unless_identity(NodeContext& c, Value x, const std::vector<std::int64_t>& perm) {
  for (std::size_t i = 0; i < perm.size(); ++i)
    if (perm[i] != static_cast<std::int64_t>(i)) return c.b.create<TransposeOp>(x, perm).result();
  return x;
}

// Operand x with `labels` (dims d) as a tensor over every label of `order`:
// its diagonals taken (a label twice: times an identity mask, summed over
// the second), transposed to `order`, 1s for the labels it lacks.
Value einsum_operand(NodeContext& c, Value x, std::string labels, std::vector<std::int64_t> d,
                     const std::string& order) {
  for (std::size_t i = 0; i < labels.size(); ++i) {
    for (std::size_t j = labels.size() - 1; j > i; --j) {
      if (labels[j] != labels[i]) continue;
      if (d[i] != d[j])
        c.unsupported("a diagonal over dims of extents " + std::to_string(d[i]) + " and " +
                      std::to_string(d[j]));
      std::vector<std::int64_t> mask_dims(labels.size(), 1);
      mask_dims[i] = mask_dims[j] = d[i];
      std::vector<double> eye(static_cast<std::size_t>(d[i] * d[i]), 0.0);
      for (std::int64_t p = 0; p < d[i]; ++p) eye[static_cast<std::size_t>(p * d[i] + p)] = 1.0;
      Value mask = constant_value(c.b, Tensor::from_vector<double>(Dims(mask_dims), eye));
      if (dtype_of(x) != DataType::Float64) mask = c.b.create<CastOp>(mask, dtype_of(x)).result();
      x = c.b.create<SumOp>(c.b.create<MulOp>(x, mask).result(),
                            std::vector<std::int64_t>{static_cast<std::int64_t>(j)}, false)
              .result();
      labels.erase(j, 1);
      d.erase(d.begin() + static_cast<std::ptrdiff_t>(j));
    }
  }
  std::vector<std::int64_t> perm, full;
  for (char ch : order) {
    const auto at = labels.find(ch);
    if (at != std::string::npos) perm.push_back(static_cast<std::int64_t>(at));
    full.push_back(at == std::string::npos ? 1 : d[at]);
  }
  x = transpose_unless_identity(c, x, perm);
  if (full.size() != labels.size()) x = c.b.create<ReshapeOp>(x, full).result();
  return x;
}

std::vector<Value> einsum(NodeContext& c) {
  const EinsumSpec e = parse_einsum(c);
  Value product;
  for (std::size_t k = 0; k < e.terms.size(); ++k) {
    Value x = einsum_operand(c, c.input(k), e.terms[k], e.dims[k], e.order);
    product = product ? c.b.create<MulOp>(product, x).result() : x;
  }
  std::vector<std::int64_t> summed;
  std::string kept;
  for (std::size_t i = 0; i < e.order.size(); ++i) {
    if (e.out.find(e.order[i]) == std::string::npos)
      summed.push_back(static_cast<std::int64_t>(i));
    else
      kept += e.order[i];
  }
  if (!summed.empty()) product = c.b.create<SumOp>(product, summed, false).result();
  std::vector<std::int64_t> perm;  // the kept labels to the output's order
  for (char ch : e.out) perm.push_back(static_cast<std::int64_t>(kept.find(ch)));
  return {transpose_unless_identity(c, product, perm)};
}

// HannWindow, HammingWindow, BlackmanWindow (opset 17): a0 - a1·cos(2πn/N)
// + a2·cos(4πn/N) for n < size, N = size (periodic, the default) or
// size - 1 (symmetric); the size may be computed at run time (kiln.range).
struct WindowCoefficients {
  double a0, a1, a2;
};
template <const WindowCoefficients& W>
std::vector<Value> window(NodeContext& c) {
  DataType dt = DataType::Float32;
  switch (c.int_attr("output_datatype", ::onnx::TensorProto_DataType_FLOAT)) {
    case ::onnx::TensorProto_DataType_FLOAT:
      break;
    case ::onnx::TensorProto_DataType_DOUBLE:
      dt = DataType::Float64;
      break;
    default:
      c.unsupported("output_datatype " + std::to_string(c.int_attr("output_datatype", 0)));
  }
  Value size =
      c.b.create<CastOp>(c.b.create<ReshapeOp>(c.input(0), std::vector<std::int64_t>{}).result(),
                         DataType::Float64)
          .result();
  Value n = c.b.create<RangeOp>(scalar(c, DataType::Float64, 0.0), size,
                                scalar(c, DataType::Float64, 1.0))
                .result();
  Value period =
      c.int_attr("periodic", 1) != 0 ? size : c.b.create<ScaleOp>(size, 1.0, -1.0).result();
  Value phase =
      c.b.create<MulOp>(n,
                        c.b.create<DivOp>(scalar(c, DataType::Float64, 2 * M_PI), period).result())
          .result();
  Value w = c.b.create<ScaleOp>(c.b.create<CosOp>(phase).result(), -W.a1, W.a0).result();
  if (W.a2 != 0) {
    Value second = c.b.create<CosOp>(c.b.create<ScaleOp>(phase, 2.0, 0.0).result()).result();
    w = c.b.create<AddOp>(w, c.b.create<ScaleOp>(second, W.a2, 0.0).result()).result();
  }
  return {dt == DataType::Float64 ? w : c.b.create<CastOp>(w, dt).result()};
}
constexpr WindowCoefficients kHann{0.5, 0.5, 0.0}, kHamming{25.0 / 46, 21.0 / 46, 0.0},
    kBlackman{0.42, 0.5, 0.08};

// DFT (opset 17; since 20 the axis is an input, default -2) along `axis`
// of x [..., n, ..., 1 or 2] (real or complex), as matrix products with
// constant cosine and sine tables: the
// axis moved last, Re' = re·C + im·S and Im' = im·C - re·S (inverse: the
// signs of the S terms flipped and the result / N), with C[j][k] = cos(2πjk/N),
// S[j][k] = sin(2πjk/N) for the N = dft_length points (the input cut or
// padded with zeros to it) and the k < N (onesided: N/2 + 1) outputs.
std::vector<Value> dft(NodeContext& c) {
  Value x = c.input(0);
  const std::vector<std::int64_t> d = shaped_dims(x.type());
  const auto rank = static_cast<std::int64_t>(d.size());
  const std::int64_t given = c.opset < 20                              ? c.int_attr("axis", 1)
                             : c.inputs.size() > 2 && c.inputs[2] ? c.constant_int(2, "DFT's axis")
                                                                    : -2;
  const std::int64_t axis = given < 0 ? given + rank : given;
  if (rank < 3 || axis < 1 || axis > rank - 2)
    c.unsupported("axis " + std::to_string(given) + " for an input of rank " + std::to_string(rank));
  const std::int64_t n = d[static_cast<std::size_t>(axis)], parts = d.back();
  if (n < 1 || (parts != 1 && parts != 2)) c.unsupported("DFT of an input " + meta::dims_string(d));
  std::int64_t len = n;
  if (c.inputs.size() > 1 && c.inputs[1]) len = c.constant_int(1, "DFT's dft_length");
  if (len < 1) c.unsupported("dft_length " + std::to_string(len));
  const bool inverse = c.int_attr("inverse", 0) != 0, onesided = c.int_attr("onesided", 0) != 0;
  if (inverse && onesided) c.unsupported("an inverse onesided DFT");
  const std::int64_t outs = onesided ? len / 2 + 1 : len;
  const DataType dt = dtype_of(x);
  std::vector<double> cs(static_cast<std::size_t>(n * outs), 0.0), sn(cs.size(), 0.0);
  for (std::int64_t j = 0; j < std::min(n, len); ++j)
    for (std::int64_t k = 0; k < outs; ++k) {
      const double theta = 2 * M_PI * static_cast<double>((j * k) % len) / static_cast<double>(len);
      cs[static_cast<std::size_t>(j * outs + k)] = std::cos(theta);
      sn[static_cast<std::size_t>(j * outs + k)] = std::sin(theta);
    }
  auto table = [&](const std::vector<double>& v) {
    Value t = constant_value(c.b, Tensor::from_vector<double>(Dims{n, outs}, v));
    return dt == DataType::Float64 ? t : c.b.create<CastOp>(t, dt).result();
  };
  Value cos_t = table(cs), sin_t = table(sn);
  // the complex parts [..., n, ...] with the axis moved last
  std::vector<std::int64_t> perm;
  for (std::int64_t i = 0; i < rank - 1; ++i)
    if (i != axis) perm.push_back(i);
  perm.push_back(axis);
  auto part = [&](std::int64_t k) {
    Value v =
        c.b.create<GatherOp>(x, constant_value(c.b, Tensor::from_vector<std::int64_t>(Dims{}, {k})),
                             rank - 1)
            .result();
    return c.b.create<TransposeOp>(v, perm).result();
  };
  auto mm = [&](Value a, Value t) { return c.b.create<MatmulOp>(a, t).result(); };
  auto scaled = [&](Value v, double f) { return c.b.create<ScaleOp>(v, f, 0.0).result(); };
  // (re + i·im)(cos θ + σ·i·sin θ), σ = -1 forward, +1 inverse
  const double sigma = inverse ? 1.0 : -1.0;
  Value re = part(0);
  Value out_re = mm(re, cos_t), out_im = scaled(mm(re, sin_t), sigma);
  if (parts == 2) {
    Value im = part(1);
    out_re = c.b.create<AddOp>(out_re, scaled(mm(im, sin_t), -sigma)).result();
    out_im = c.b.create<AddOp>(out_im, mm(im, cos_t)).result();
  }
  if (inverse) {
    out_re = scaled(out_re, 1.0 / static_cast<double>(len));
    out_im = scaled(out_im, 1.0 / static_cast<double>(len));
  }
  // back: the axis to its place, the parts stacked last
  std::vector<std::int64_t> back(static_cast<std::size_t>(rank - 1));
  for (std::size_t i = 0; i < perm.size(); ++i)
    back[static_cast<std::size_t>(perm[i])] = static_cast<std::int64_t>(i);
  out_re = c.b.create<TransposeOp>(out_re, back).result();
  out_im = c.b.create<TransposeOp>(out_im, back).result();
  return {c.b.create<StackOp>(std::vector<Value>{out_re, out_im}, rank - 1).result()};
}

// STFT (opset 17): kiln.stft. Without a window, a window of ones of
// frame_length points (read at run time); with one, frame_length is its
// length.
std::vector<Value> stft(NodeContext& c) {
  Value signal = c.input(0);
  const bool onesided = c.int_attr("onesided", 1) != 0;
  Value window = c.inputs.size() > 2 ? c.inputs[2] : Value();
  if (!window) {
    if (c.inputs.size() < 4 || !c.inputs[3]) c.unsupported("an STFT with neither a window nor a frame_length");
    Value length = c.b.create<ReshapeOp>(c.inputs[3], std::vector<std::int64_t>{1}).result();
    window = c.b.create<FullByOp>(length, 1.0, dtype_of(signal)).result();
  }
  return {c.b.create<StftOp>(signal, c.input(1), window, onesided).result()};
}

// MelWeightMatrix (opset 17): kiln.mel_weight_matrix, in f32 or f64 (other
// output_datatypes: f32 cast to them).
std::vector<Value> mel_weight_matrix(NodeContext& c) {
  const auto want = c.int_attr("output_datatype", ::onnx::TensorProto_DataType_FLOAT);
  const DataType dt = want == ::onnx::TensorProto_DataType_DOUBLE ? DataType::Float64 : DataType::Float32;
  Value m = c.b.create<MelWeightMatrixOp>(c.input(0), c.input(1), c.input(2), c.input(3), c.input(4), dt).result();
  switch (want) {
    case ::onnx::TensorProto_DataType_FLOAT:
    case ::onnx::TensorProto_DataType_DOUBLE: return {m};
    case ::onnx::TensorProto_DataType_FLOAT16: return {c.b.create<CastOp>(m, DataType::Float16).result()};
    case ::onnx::TensorProto_DataType_BFLOAT16: return {c.b.create<CastOp>(m, DataType::BFloat16).result()};
    default: c.unsupported("output_datatype " + std::to_string(want));
  }
}

}  // namespace

void add_math_ops(OpTable& t) {
  t["STFT"] = {&stft, 17};
  t["MelWeightMatrix"] = {&mel_weight_matrix, 17};
  t["DFT"] = {&dft, 17};
  t["HannWindow"] = {&window<kHann>, 17};
  t["HammingWindow"] = {&window<kHamming>, 17};
  t["BlackmanWindow"] = {&window<kBlackman>, 17};
  t["Det"] = {&det, 11};
  t["Einsum"] = {&einsum, 12};
  t["Sin"] = {&unary<SinOp>, 7};
  t["Cos"] = {&unary<CosOp>, 7};
  t["Tan"] = {&unary<TanOp>, 7};
  t["Asin"] = {&unary<AsinOp>, 7};
  t["Acos"] = {&unary<AcosOp>, 7};
  t["Atan"] = {&unary<AtanOp>, 7};
  t["Sinh"] = {&unary<SinhOp>, 9};
  t["Cosh"] = {&unary<CoshOp>, 9};
  t["Asinh"] = {&unary<AsinhOp>, 9};
  t["Acosh"] = {&unary<AcoshOp>, 9};
  t["Atanh"] = {&unary<AtanhOp>, 9};
  t["Erf"] = {&unary<ErfOp>, 9};
  t["Floor"] = {&unary<FloorOp>, 1};
  t["Ceil"] = {&unary<CeilOp>, 1};
  t["Round"] = {&unary<RoundOp>, 11};
  t["Sign"] = {&unary<SignOp>, 9};
  t["IsNaN"] = {&is_nan, 9};
  t["IsInf"] = {&is_inf, 10};
  t["Celu"] = {&celu, 12};
  t["HardSwish"] = {&hard_swish, 14};
  t["Shrink"] = {&shrink, 9};
  t["ThresholdedRelu"] = {&thresholded_relu, 10};
  t["Hardmax"] = {&hardmax, 1};
  t["EyeLike"] = {&eye_like, 9};
}

}  // namespace kiln::onnx::detail

// ONNX's 1-D and 2-D convolution, transposed convolution and pooling (NCW,
// NCHW) → kiln.conv2d / kiln.conv2d_transpose (+ a broadcast bias add; 3-D
// convolutions, transposed too, composed of those), kiln.max_pool2d,
// kiln.avg_pool2d; the global pools as reductions over the spatial dims;
// MaxPool's Indices output and MaxUnpool (composed); LayerNormalization
// (composed, with its Mean and InvStdDev outputs); BatchNormalization (at
// inference, or in training mode with its running statistics outputs) and
// Dropout at inference.
#include <algorithm>
#include <limits>

#include "kiln/dialect/kiln_dialect.h"
#include "op_table.h"

namespace kiln::onnx::detail {

namespace {

std::vector<std::int64_t> ints_or(const NodeContext& c, const std::string& name,
                                  std::vector<std::int64_t> fallback) {
  std::vector<std::int64_t> v = c.ints_attr(name);
  return v.empty() ? fallback : v;
}

// The node's window attributes for a 2-D (NCHW) or 1-D (NCW) input,
// checked: pads (explicit, or computed for auto_pad SAME_UPPER / SAME_LOWER /
// VALID from the known dims), as kiln's [top,
// bottom, left, right]. A 1-D window is run as a 2-D one of height 1: its
// input (and a conv's weight) gets a dim of extent 1 at axis 2, which the
// result drops again.
struct Window2d {
  std::vector<std::int64_t> kernel, strides, pads, dilations;
  bool one_d = false;
};
Window2d window2d(NodeContext& c, bool has_kernel_attr) {
  const std::vector<std::int64_t> xd = shaped_dims(c.input(0).type());
  const auto rank = xd.size();
  if (rank != 4 && rank != 3)
    c.unsupported("only 1-D and 2-D (NCW, NCHW) inputs are imported, got rank " + std::to_string(rank));
  const auto* auto_pad = c.attribute("auto_pad");
  const std::string mode = auto_pad && !auto_pad->s().empty() ? auto_pad->s() : "NOTSET";
  Window2d w;
  w.one_d = rank == 3;
  const std::size_t n = w.one_d ? 1 : 2;
  if (has_kernel_attr) {
    w.kernel = c.ints_attr("kernel_shape");
  } else {  // a conv's kernel: the weight's spatial dims
    const std::vector<std::int64_t> wd = shaped_dims(c.input(1).type());
    if (wd.size() == rank) w.kernel.assign(wd.begin() + 2, wd.end());
  }
  if (w.kernel.size() != n) c.unsupported("kernel_shape must have " + std::to_string(n) + " dims");
  w.strides = ints_or(c, "strides", std::vector<std::int64_t>(n, 1));
  w.dilations = ints_or(c, "dilations", std::vector<std::int64_t>(n, 1));
  std::vector<std::int64_t> p = ints_or(c, "pads", std::vector<std::int64_t>(2 * n, 0));
  if (p.size() != 2 * n || w.strides.size() != n || w.dilations.size() != n)
    c.unsupported("pads / strides / dilations of the window");
  if (mode == "VALID") {
    p.assign(2 * n, 0);
  } else if (mode == "SAME_UPPER" || mode == "SAME_LOWER") {
    // out = ceil(in / stride); the padding that needs, its odd half at the
    // end (SAME_UPPER) or the start (SAME_LOWER).
    for (std::size_t i = 0; i < n; ++i) {
      const std::int64_t in = xd[2 + i], s = w.strides[i];
      if (in < 0) c.unsupported("auto_pad " + mode + " of a dim known only at run time");
      const std::int64_t out = (in + s - 1) / s;
      const std::int64_t total =
          std::max<std::int64_t>(0, (out - 1) * s + (w.kernel[i] - 1) * w.dilations[i] + 1 - in);
      p[i] = mode == "SAME_UPPER" ? total / 2 : total - total / 2;
      p[i + n] = total - p[i];
    }
  } else if (mode != "NOTSET") {
    c.unsupported("auto_pad " + mode);
  }
  if (w.one_d) {  // [w0, w1] → height 1, no vertical padding
    w.kernel.insert(w.kernel.begin(), 1);
    w.strides.insert(w.strides.begin(), 1);
    w.dilations.insert(w.dilations.begin(), 1);
    w.pads = {0, 0, p[0], p[1]};
  } else {  // [h0, w0, h1, w1]
    w.pads = {p[0], p[2], p[1], p[3]};
  }
  return w;
}

// kiln's pools take pads up to half the kernel; larger ones (ONNX allows
// any) are applied first by kiln.pad, with `value`, and the pool then runs
// unpadded. Returns x, padded when that was needed.
bool pads_exceed_half_kernel(const Window2d& w) {
  return 2 * w.pads[0] > w.kernel[0] || 2 * w.pads[1] > w.kernel[0] ||
         2 * w.pads[2] > w.kernel[1] || 2 * w.pads[3] > w.kernel[1];
}
Value pad_explicitly(NodeContext& c, Window2d& w, Value x2d, double value) {
  // kiln.pad's order: last dim first.
  Value y = c.b.create<PadOp>(x2d, std::vector<std::int64_t>{w.pads[2], w.pads[3], w.pads[0], w.pads[1]},
                              value)
                .result();
  w.pads = {0, 0, 0, 0};
  return y;
}

// A 1-D window's operand with height 1 inserted; the result with it dropped.
Value to_2d(NodeContext& c, const Window2d& w, Value v) {
  return w.one_d ? c.b.create<UnsqueezeOp>(v, std::vector<std::int64_t>{2}).result() : v;
}
Value from_2d(NodeContext& c, const Window2d& w, Value v) {
  return w.one_d ? c.b.create<SqueezeOp>(v, std::vector<std::int64_t>{2}).result() : v;
}

// A [C] bias as a broadcast add to an N, C, … result.
Value add_channel_bias(NodeContext& c, Value y, Value bias) {
  std::vector<std::int64_t> shape(shaped_dims(y.type()).size(), 1);
  shape[1] = -1;
  return c.b.create<AddOp>(y, c.b.create<ReshapeOp>(bias, shape).result()).result();
}

// A 3-D convolution as kd 2-D ones: for each depth tap j, the padded
// input's depth slices o·sd + j·dd (a gather) are folded into the batch
// ([N·OD, C, H, W]) and convolved with the weight's tap j; the sum over j is
// unfolded back to [N, O, OD, OH, OW]. Dims must be known at import.
Value conv3d(NodeContext& c) {
  Value x = c.input(0), wt = c.input(1);
  const std::vector<std::int64_t> xd = shaped_dims(x.type()), wd = shaped_dims(wt.type());
  for (auto e : xd)
    if (e < 0) c.unsupported("a 3-D Conv with a dim known only at run time");
  if (wd.size() != 5) c.unsupported("a 3-D Conv whose weight has rank " + std::to_string(wd.size()));
  std::vector<std::int64_t> strides = ints_or(c, "strides", {1, 1, 1});
  std::vector<std::int64_t> dil = ints_or(c, "dilations", {1, 1, 1});
  std::vector<std::int64_t> pads = ints_or(c, "pads", {0, 0, 0, 0, 0, 0});
  if (strides.size() != 3 || dil.size() != 3 || pads.size() != 6)
    c.unsupported("pads / strides / dilations of a 3-D window");
  const auto* auto_pad = c.attribute("auto_pad");
  const std::string mode = auto_pad && !auto_pad->s().empty() ? auto_pad->s() : "NOTSET";
  if (mode == "VALID") pads.assign(6, 0);
  else if (mode != "NOTSET") c.unsupported("auto_pad " + mode + " of a 3-D Conv");
  const std::int64_t n = xd[0], ch = xd[1], depth = xd[2], h = xd[3], w = xd[4], o = wd[0], kd = wd[2];
  const std::int64_t padded = depth + pads[0] + pads[3], span = (kd - 1) * dil[0] + 1;
  if (padded < span) c.unsupported("a kernel deeper than the padded input");
  const std::int64_t od = (padded - span) / strides[0] + 1;
  Value xp = c.b.create<PadOp>(x, std::vector<std::int64_t>{0, 0, 0, 0, pads[0], pads[3]}, 0.0).result();
  Value sum;
  for (std::int64_t j = 0; j < kd; ++j) {
    std::vector<std::int64_t> idx(static_cast<std::size_t>(od));
    for (std::int64_t k = 0; k < od; ++k) idx[static_cast<std::size_t>(k)] = k * strides[0] + j * dil[0];
    Value xj = c.b.create<GatherOp>(xp, constant_value(c.b, Tensor::from_vector<std::int64_t>(Dims{od}, idx)), 2)
                   .result();
    xj = c.b.create<TransposeOp>(xj, std::vector<std::int64_t>{0, 2, 1, 3, 4}).result();
    xj = c.b.create<ReshapeOp>(xj, std::vector<std::int64_t>{n * od, ch, h, w}).result();
    Value wj = c.b.create<GatherOp>(wt, constant_value(c.b, Tensor::from_vector<std::int64_t>(Dims{}, {j})), 2)
                   .result();
    Value yj = c.b.create<Conv2dOp>(xj, wj, std::vector<std::int64_t>{strides[1], strides[2]},
                                    std::vector<std::int64_t>{pads[1], pads[4], pads[2], pads[5]},
                                    std::vector<std::int64_t>{dil[1], dil[2]}, c.int_attr("group", 1))
                   .result();
    sum = sum ? c.b.create<AddOp>(sum, yj).result() : yj;
  }
  const std::vector<std::int64_t> yd = shaped_dims(sum.type());  // [N·OD, O, OH, OW]
  Value y = c.b.create<ReshapeOp>(sum, std::vector<std::int64_t>{n, od, o, yd[2], yd[3]}).result();
  return c.b.create<TransposeOp>(y, std::vector<std::int64_t>{0, 2, 1, 3, 4}).result();
}

std::vector<Value> conv(NodeContext& c) {
  if (shaped_dims(c.input(0).type()).size() == 5) {
    Value y = conv3d(c);
    if (c.inputs.size() > 2 && c.inputs[2]) y = add_channel_bias(c, y, c.inputs[2]);
    return {y};
  }
  Window2d w = window2d(c, false);
  Value y = c.b.create<Conv2dOp>(to_2d(c, w, c.input(0)), to_2d(c, w, c.input(1)), w.strides,
                                 w.pads, w.dilations, c.int_attr("group", 1))
                .result();
  y = from_2d(c, w, y);
  if (c.inputs.size() > 2 && c.inputs[2]) y = add_channel_bias(c, y, c.inputs[2]);
  return {y};
}

// A 3-D ConvTranspose as kd 2-D ones: the input's depth folded into the
// batch ([N·D, C, H, W]) is transposed-convolved with the weight's depth tap
// j; output depth q takes from tap j the input depth i with
// i·sd + j·dd = q + pad_front (a gather of those i, masked to 0 where no i
// fits); the taps are summed. Pads, strides, dilations and output_padding
// as attributes; dims known at import.
Value conv_transpose3d(NodeContext& c) {
  Value x = c.input(0), wt = c.input(1);
  const std::vector<std::int64_t> xd = shaped_dims(x.type()), wd = shaped_dims(wt.type());
  for (auto e : xd)
    if (e < 0) c.unsupported("a 3-D ConvTranspose with a dim known only at run time");
  if (wd.size() != 5)
    c.unsupported("a 3-D ConvTranspose whose weight has rank " + std::to_string(wd.size()));
  const auto* auto_pad = c.attribute("auto_pad");
  if ((auto_pad && !auto_pad->s().empty() && auto_pad->s() != "NOTSET" &&
       auto_pad->s() != "VALID") ||
      c.has_attr("output_shape"))
    c.unsupported("a 3-D ConvTranspose with auto_pad SAME_* or output_shape");
  const std::vector<std::int64_t> strides = ints_or(c, "strides", {1, 1, 1}),
                                  dil = ints_or(c, "dilations", {1, 1, 1}),
                                  out_pad = ints_or(c, "output_padding", {0, 0, 0});
  const std::vector<std::int64_t> pads = ints_or(c, "pads", {0, 0, 0, 0, 0, 0});
  if (strides.size() != 3 || dil.size() != 3 || out_pad.size() != 3 || pads.size() != 6)
    c.unsupported("pads / strides / dilations / output_padding of a 3-D window");
  const std::int64_t n = xd[0], ch = xd[1], depth = xd[2], h = xd[3], w = xd[4], kd = wd[2];
  const std::int64_t od =
      (depth - 1) * strides[0] + (kd - 1) * dil[0] + 1 + out_pad[0] - pads[0] - pads[3];
  if (od < 1) c.unsupported("a 3-D ConvTranspose with an output depth below 1");
  Value folded =
      c.b.create<ReshapeOp>(
             c.b.create<TransposeOp>(x, std::vector<std::int64_t>{0, 2, 1, 3, 4}).result(),
             std::vector<std::int64_t>{n * depth, ch, h, w})
          .result();
  Value sum;
  for (std::int64_t j = 0; j < kd; ++j) {
    Value wj = c.b.create<GatherOp>(
                      wt, constant_value(c.b, Tensor::from_vector<std::int64_t>(Dims{}, {j})), 2)
                   .result();
    Value yj = c.b.create<Conv2dTransposeOp>(
                      folded, wj, std::vector<std::int64_t>{strides[1], strides[2]},
                      std::vector<std::int64_t>{pads[1], pads[4], pads[2], pads[5]},
                      std::vector<std::int64_t>{out_pad[1], out_pad[2]},
                      std::vector<std::int64_t>{dil[1], dil[2]}, c.int_attr("group", 1))
                   .result();
    const std::vector<std::int64_t> yd = shaped_dims(yj.type());  // [N·D, O, OH, OW]
    yj = c.b.create<ReshapeOp>(yj, std::vector<std::int64_t>{n, depth, yd[1], yd[2], yd[3]})
             .result();
    std::vector<std::int64_t> idx(static_cast<std::size_t>(od), 0);
    std::vector<double> mask(static_cast<std::size_t>(od), 0.0);
    for (std::int64_t q = 0; q < od; ++q) {
      const std::int64_t p = q + pads[0] - j * dil[0];
      if (p < 0 || p % strides[0] != 0 || p / strides[0] >= depth) continue;
      idx[static_cast<std::size_t>(q)] = p / strides[0];
      mask[static_cast<std::size_t>(q)] = 1.0;
    }
    Value picked =
        c.b.create<GatherOp>(
               yj, constant_value(c.b, Tensor::from_vector<std::int64_t>(Dims{od}, idx)), 1)
            .result();
    Value m = constant_value(c.b, Tensor::from_vector<double>(Dims{1, od, 1, 1, 1}, mask));
    const DataType dt = shaped_data_type(x.type());
    if (dt != DataType::Float64) m = c.b.create<CastOp>(m, dt).result();
    Value term = c.b.create<MulOp>(picked, m).result();
    sum = sum ? c.b.create<AddOp>(sum, term).result() : term;
  }
  return c.b.create<TransposeOp>(sum, std::vector<std::int64_t>{0, 2, 1, 3, 4}).result();
}

// ConvTranspose: kiln.conv2d_transpose with the pads given, or computed
// from output_shape or auto_pad SAME_* (ONNX's rule: total padding =
// stride·(in-1) + output_padding + (k-1)·dilation + 1 - out, its larger half
// at the end for SAME_UPPER, at the start otherwise; a negative total grows
// the output at the end).
std::vector<Value> conv_transpose(NodeContext& c) {
  Value x = c.input(0), wt = c.input(1);
  const auto rank = shaped_dims(x.type()).size();
  if (rank == 5) {
    Value y = conv_transpose3d(c);
    if (c.inputs.size() > 2 && c.inputs[2]) y = add_channel_bias(c, y, c.inputs[2]);
    return {y};
  }
  if (rank != 4 && rank != 3)
    c.unsupported("only 1-D, 2-D and 3-D (NCW, NCHW, NCDHW) inputs are imported, got rank " +
                  std::to_string(rank));
  const std::size_t n = rank - 2;
  Window2d w;
  w.one_d = rank == 3;
  w.strides = ints_or(c, "strides", std::vector<std::int64_t>(n, 1));
  w.dilations = ints_or(c, "dilations", std::vector<std::int64_t>(n, 1));
  std::vector<std::int64_t> out_pad = ints_or(c, "output_padding", std::vector<std::int64_t>(n, 0));
  std::vector<std::int64_t> pads = ints_or(c, "pads", std::vector<std::int64_t>(2 * n, 0));
  if (w.strides.size() != n || w.dilations.size() != n || out_pad.size() != n || pads.size() != 2 * n)
    c.unsupported("pads / strides / dilations / output_padding of the window");
  const auto& xd = shaped_dims(x.type());
  const auto& wd = shaped_dims(wt.type());
  const auto* auto_pad = c.attribute("auto_pad");
  const std::string mode = auto_pad ? auto_pad->s() : "NOTSET";
  const std::vector<std::int64_t> out_shape = c.ints_attr("output_shape");
  if (!out_shape.empty() || mode == "SAME_UPPER" || mode == "SAME_LOWER") {
    if (!out_shape.empty() && out_shape.size() != n) c.unsupported("output_shape of the window");
    for (std::size_t i = 0; i < n; ++i) {
      const std::int64_t in = xd[2 + i], k = wd[2 + i];
      if (in < 0 || k < 0) c.unsupported("output_shape with a dim known only at run time");
      const std::int64_t out = out_shape.empty() ? in * w.strides[i] : out_shape[i];
      const std::int64_t total =
          w.strides[i] * (in - 1) + out_pad[i] + (k - 1) * w.dilations[i] + 1 - out;
      if (total < 0) {  // the output grows: extra output padding at the end
        out_pad[i] -= total;
        pads[i] = pads[i + n] = 0;
        continue;
      }
      const std::int64_t half = total / 2;
      pads[i] = mode == "SAME_UPPER" ? half : total - half;
      pads[i + n] = total - pads[i];
    }
  } else if (mode != "NOTSET" && mode != "VALID") {
    c.unsupported("auto_pad " + mode);
  }
  if (w.one_d) {
    w.strides.insert(w.strides.begin(), 1);
    w.dilations.insert(w.dilations.begin(), 1);
    out_pad.insert(out_pad.begin(), 0);
    w.pads = {0, 0, pads[0], pads[1]};
  } else {
    w.pads = {pads[0], pads[2], pads[1], pads[3]};
  }
  Value y = c.b.create<Conv2dTransposeOp>(to_2d(c, w, x), to_2d(c, w, wt), w.strides, w.pads,
                                          out_pad, w.dilations, c.int_attr("group", 1))
                .result();
  y = from_2d(c, w, y);
  if (c.inputs.size() > 2 && c.inputs[2]) y = add_channel_bias(c, y, c.inputs[2]);
  return {y};
}

// Pools of any rank and dilation that kiln's 2-D pool kernels do not take
// (3-D windows, MaxPool's dilations), composed separably: a max or a sum
// over a box is one over each axis in turn, and along one axis output o
// reads the padded input at o·stride + j·dilation (j < kernel): k gathers of
// indices computed here, combined by maximum or add. An average divides by
// the product of the per-axis counts of the positions it may count (inside
// the input, or inside input and pads with count_include_pad). Dims must be
// known at import.
std::vector<Value> separable_pool(NodeContext& c, bool is_max) {
  Value x = c.input(0);
  const std::vector<std::int64_t> d = shaped_dims(x.type());
  const std::size_t n = d.size() - 2;
  for (auto e : d)
    if (e < 0) c.unsupported("a pool of rank " + std::to_string(d.size()) + " with a dim known only at run time");
  const auto* auto_pad = c.attribute("auto_pad");
  const std::string mode = auto_pad && !auto_pad->s().empty() ? auto_pad->s() : "NOTSET";
  std::vector<std::int64_t> kernel = c.ints_attr("kernel_shape");
  std::vector<std::int64_t> strides = ints_or(c, "strides", std::vector<std::int64_t>(n, 1));
  std::vector<std::int64_t> dil = ints_or(c, "dilations", std::vector<std::int64_t>(n, 1));
  std::vector<std::int64_t> pads = ints_or(c, "pads", std::vector<std::int64_t>(2 * n, 0));
  if (kernel.size() != n || strides.size() != n || dil.size() != n || pads.size() != 2 * n)
    c.unsupported("kernel_shape / pads / strides / dilations of the window");
  const bool ceil_mode = c.int_attr("ceil_mode", 0) != 0;
  const bool include_pad = c.int_attr("count_include_pad", 0) != 0;
  const DataType dt = shaped_data_type(x.type());
  std::vector<std::int64_t> out(n), ext(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t span = (kernel[i] - 1) * dil[i] + 1;
    if (mode == "SAME_UPPER" || mode == "SAME_LOWER") {
      const std::int64_t o = (d[2 + i] + strides[i] - 1) / strides[i];
      const std::int64_t total = std::max<std::int64_t>(0, (o - 1) * strides[i] + span - d[2 + i]);
      pads[i] = mode == "SAME_UPPER" ? total / 2 : total - total / 2;
      pads[i + n] = total - pads[i];
    } else if (mode == "VALID") {
      pads[i] = pads[i + n] = 0;
    } else if (mode != "NOTSET") {
      c.unsupported("auto_pad " + mode);
    }
    const std::int64_t padded = d[2 + i] + pads[i] + pads[i + n];
    if (padded < span) c.unsupported("a window larger than the padded input");
    std::int64_t o = ceil_mode ? (padded - span + strides[i] - 1) / strides[i] + 1
                               : (padded - span) / strides[i] + 1;
    // ceil_mode: the last window must start inside the input or its left pad.
    if (ceil_mode && (o - 1) * strides[i] >= d[2 + i] + pads[i]) --o;
    out[i] = o;
    ext[i] = std::max<std::int64_t>(0, (o - 1) * strides[i] + span - padded);  // beyond the end pad
  }
  std::vector<std::int64_t> torch_pads;  // kiln.pad: last dim first
  for (std::size_t i = n; i-- > 0;) {
    torch_pads.push_back(pads[i]);
    torch_pads.push_back(pads[i + n] + ext[i]);
  }
  for (std::size_t i = 0; i < 2; ++i) torch_pads.push_back(0), torch_pads.push_back(0);
  const double fill = is_max ? -std::numeric_limits<double>::infinity() : 0.0;
  Value y = c.b.create<PadOp>(x, torch_pads, fill).result();
  Value divisor;
  for (std::size_t i = n; i-- > 0;) {
    const auto axis = static_cast<std::int64_t>(2 + i);
    Value acc;
    for (std::int64_t j = 0; j < kernel[i]; ++j) {
      std::vector<std::int64_t> idx(static_cast<std::size_t>(out[i]));
      for (std::int64_t o = 0; o < out[i]; ++o) idx[static_cast<std::size_t>(o)] = o * strides[i] + j * dil[i];
      Value part = c.b.create<GatherOp>(
                          y, constant_value(c.b, Tensor::from_vector<std::int64_t>(Dims{out[i]}, idx)), axis)
                       .result();
      acc = !acc ? part : is_max ? c.b.create<MaximumOp>(acc, part).result() : c.b.create<AddOp>(acc, part).result();
    }
    y = acc;
    if (is_max) continue;
    std::vector<double> count(static_cast<std::size_t>(out[i]), 0.0);
    const std::int64_t lo = include_pad ? -pads[i] : 0, hi = d[2 + i] + (include_pad ? pads[i + n] : 0);
    for (std::int64_t o = 0; o < out[i]; ++o)
      for (std::int64_t j = 0; j < kernel[i]; ++j) {
        const std::int64_t at = o * strides[i] + j * dil[i] - pads[i];
        if (at >= lo && at < hi) count[static_cast<std::size_t>(o)] += 1;
      }
    std::vector<std::int64_t> shape(d.size(), 1);
    shape[2 + i] = out[i];
    Value cnt = constant_value(c.b, Tensor::from_vector<double>(Dims(shape), count));
    if (dt != DataType::Float64) cnt = c.b.create<CastOp>(cnt, dt).result();
    divisor = divisor ? c.b.create<MulOp>(divisor, cnt).result() : cnt;
  }
  if (!is_max) y = c.b.create<DivOp>(y, divisor).result();
  return {y};
}

bool needs_separable_pool(NodeContext& c) {
  if (shaped_dims(c.input(0).type()).size() == 5) return true;
  for (auto v : c.ints_attr("dilations"))
    if (v != 1) return true;
  return false;
}

// MaxPool's Indices: the input padded with -inf; per kernel tap (kh, kw)
// the strided slice of what each window sees there, stacked on a last axis;
// the first maximum's tap (argmax) → its index into the unpadded
// [N, C, H, W] input: (n·C + c)·H·W + h·W + w (row-major) or + w·H + h
// (storage_order 1), h = oh·sh - top + kh, w = ow·sw - left + kw.
Value max_pool_indices(NodeContext& c, const Window2d& w, Value x2d) {
  if (c.int_attr("ceil_mode", 0) != 0) c.unsupported("MaxPool's Indices output with ceil_mode");
  const std::vector<std::int64_t> d = shaped_dims(x2d.type());
  for (auto e : d)
    if (e < 0)
      c.unsupported("MaxPool's Indices output of an input with a dim known only at run time");
  const std::int64_t n = d[0], ch = d[1], h = d[2], wd = d[3], kh = w.kernel[0], kw = w.kernel[1],
                     sh = w.strides[0], sw = w.strides[1];
  const std::int64_t oh = (h + w.pads[0] + w.pads[1] - kh) / sh + 1,
                     ow = (wd + w.pads[2] + w.pads[3] - kw) / sw + 1;
  Value xp =
      c.b.create<PadOp>(x2d, std::vector<std::int64_t>{w.pads[2], w.pads[3], w.pads[0], w.pads[1]},
                        -std::numeric_limits<double>::infinity())
          .result();
  std::vector<Value> taps;
  for (std::int64_t i = 0; i < kh; ++i)
    for (std::int64_t j = 0; j < kw; ++j) {
      Value t = c.b.create<StridedSliceOp>(
                       xp, std::vector<std::int64_t>{2, 3}, std::vector<std::int64_t>{i, j},
                       std::vector<std::int64_t>{i + (oh - 1) * sh + 1, j + (ow - 1) * sw + 1},
                       std::vector<std::int64_t>{sh, sw})
                    .result();
      taps.push_back(c.b.create<UnsqueezeOp>(t, std::vector<std::int64_t>{4}).result());
    }
  Value tap = c.b.create<ArgMaxOp>(c.b.create<ConcatOp>(taps, 4).result(), 4, false).result();
  auto i64 = [&](const std::vector<std::int64_t>& dims, const std::vector<std::int64_t>& v) {
    return constant_value(c.b, Tensor::from_vector<std::int64_t>(Dims(dims), v));
  };
  std::vector<std::int64_t> plane, rows, cols;
  for (std::int64_t k = 0; k < n * ch; ++k) plane.push_back(k * h * wd);
  for (std::int64_t k = 0; k < oh; ++k) rows.push_back(k * sh - w.pads[0]);
  for (std::int64_t k = 0; k < ow; ++k) cols.push_back(k * sw - w.pads[2]);
  Value row =
      c.b.create<AddOp>(i64({1, 1, oh, 1}, rows), c.b.create<DivOp>(tap, i64({}, {kw})).result())
          .result();
  Value col =
      c.b.create<AddOp>(i64({1, 1, 1, ow}, cols), c.b.create<ModOp>(tap, i64({}, {kw})).result())
          .result();
  // storage_order 1: column-major within each plane
  const bool column_major = c.int_attr("storage_order", 0) != 0;
  Value flat =
      column_major
          ? c.b.create<AddOp>(c.b.create<MulOp>(col, i64({}, {h})).result(), row).result()
          : c.b.create<AddOp>(c.b.create<MulOp>(row, i64({}, {wd})).result(), col).result();
  return c.b.create<AddOp>(flat, i64({n, ch, 1, 1}, plane)).result();
}

std::vector<Value> max_pool(NodeContext& c) {
  const bool indices = c.node.output_size() > 1 && !c.node.output(1).empty();
  if (indices && needs_separable_pool(c))
    c.unsupported("MaxPool's Indices output of a 3-D or dilated pool");
  if (needs_separable_pool(c)) return separable_pool(c, true);
  Window2d w = window2d(c, true);
  if (w.dilations != std::vector<std::int64_t>{1, 1}) c.unsupported("MaxPool with dilations");
  Value x = to_2d(c, w, c.input(0));
  Value idx = indices ? from_2d(c, w, max_pool_indices(c, w, x)) : Value();
  if (pads_exceed_half_kernel(w)) {
    if (c.int_attr("ceil_mode", 0) != 0) c.unsupported("ceil_mode with pads beyond half the kernel");
    x = pad_explicitly(c, w, x, -std::numeric_limits<double>::infinity());
  }
  Value y = from_2d(
      c, w,
      c.b.create<MaxPool2dOp>(x, w.kernel, w.strides, w.pads, c.int_attr("ceil_mode", 0) != 0)
          .result());
  if (idx) return {y, idx};
  return {y};
}

// MaxUnpool: zeros of the unpooled shape ((in - 1)·stride - pads + kernel
// per spatial dim) with X written at the flat indices I (put_along_axis on
// the flattened tensors); with output_shape (known at import or computed at
// run time) that result is padded with zeros at the end of each dim, as
// ONNX's reference outputs are.
std::vector<Value> max_unpool(NodeContext& c) {
  Value x = c.input(0);
  const DataType dt = shaped_data_type(x.type());
  auto flat = [&](Value v) {
    return c.b.create<ReshapeOp>(v, std::vector<std::int64_t>{-1}).result();
  };
  Value idx = flat(c.input(1));
  if (shaped_data_type(idx.type()) != DataType::Int64)
    idx = c.b.create<CastOp>(idx, DataType::Int64).result();
  const std::vector<std::int64_t> xd = shaped_dims(x.type());
  const std::size_t n = xd.size() < 2 ? 0 : xd.size() - 2;
  const std::vector<std::int64_t> kernel = c.ints_attr("kernel_shape"),
                                  strides = ints_or(c, "strides", std::vector<std::int64_t>(n, 1)),
                                  pads = ints_or(c, "pads", std::vector<std::int64_t>(2 * n, 0));
  if (n == 0 || kernel.size() != n || strides.size() != n || pads.size() != 2 * n)
    c.unsupported("kernel_shape / strides / pads of the window");
  std::vector<std::int64_t> od{xd[0], xd[1]};
  for (std::size_t i = 0; i < n; ++i)
    od.push_back((xd[2 + i] - 1) * strides[i] - pads[i] - pads[i + n] + kernel[i]);
  std::int64_t total = 1;
  for (auto e : od) {
    if (e < 0) c.unsupported("MaxUnpool of an input with a dim known only at run time");
    total *= e;
  }
  Value zeros = c.b.create<FullOp>(std::vector<std::int64_t>{total}, 0.0, dt).result();
  Value y =
      c.b.create<ReshapeOp>(c.b.create<PutAlongAxisOp>(zeros, idx, flat(x), 0, "none").result(), od)
          .result();
  if (c.inputs.size() < 3 || !c.inputs[2]) return {y};
  // output_shape: the unpooled tensor padded with zeros at the end of each dim
  Value shape = c.inputs[2];
  if (shaped_data_type(shape.type()) != DataType::Int64)
    shape = c.b.create<CastOp>(shape, DataType::Int64).result();
  Value extra =
      c.b.create<SubOp>(shape,
                        constant_value(c.b, Tensor::from_vector<std::int64_t>(
                                                Dims{static_cast<std::int64_t>(od.size())}, od)))
          .result();
  Value begins = c.b.create<FullOp>(std::vector<std::int64_t>{static_cast<std::int64_t>(od.size())},
                                    0.0, DataType::Int64)
                     .result();
  Value grow = c.b.create<ConcatOp>(std::vector<Value>{begins, extra}, 0).result();
  return {pad_at_run_time(
      c, y, grow, c.b.create<FullOp>(std::vector<std::int64_t>{}, 0.0, dt).result(), "constant")};
}

// count_include_pad = 0 averages over the elements inside the input only;
// with pads beyond half the kernel that is the zero-padded window's mean
// divided by the mean of a zero-padded mask of ones.
std::vector<Value> average_pool(NodeContext& c) {
  if (needs_separable_pool(c)) return separable_pool(c, false);
  Window2d w = window2d(c, true);
  if (w.dilations != std::vector<std::int64_t>{1, 1}) c.unsupported("AveragePool with dilations");
  const bool include_pad = c.int_attr("count_include_pad", 0) != 0;
  const bool ceil_mode = c.int_attr("ceil_mode", 0) != 0;
  Value x = to_2d(c, w, c.input(0));
  if (!pads_exceed_half_kernel(w))
    return {from_2d(c, w, c.b.create<AvgPool2dOp>(x, w.kernel, w.strides, w.pads, ceil_mode,
                                                  /*exclusive=*/!include_pad)
                              .result())};
  if (ceil_mode) c.unsupported("ceil_mode with pads beyond half the kernel");
  Window2d padded = w;
  Value y = c.b.create<AvgPool2dOp>(pad_explicitly(c, padded, x, 0.0), w.kernel, w.strides,
                                    padded.pads, false, false)
                .result();
  if (!include_pad) {
    std::vector<std::int64_t> d = shaped_dims(x.type());
    for (auto e : d)
      if (e < 0) c.unsupported("AveragePool of a dim known only at run time with pads beyond half the kernel");
    Value ones = c.b.create<FullOp>(d, 1.0, shaped_data_type(x.type())).result();
    Window2d mask = w;
    Value share = c.b.create<AvgPool2dOp>(pad_explicitly(c, mask, ones, 0.0), w.kernel, w.strides,
                                          mask.pads, false, false)
                      .result();
    y = c.b.create<DivOp>(y, share).result();
  }
  return {from_2d(c, w, y)};
}

// Over every dim after the channels, kept as extent 1.
template <typename OpT>
std::vector<Value> global_pool(NodeContext& c) {
  const auto rank = static_cast<std::int64_t>(shaped_dims(c.input(0).type()).size());
  if (rank < 3) c.unsupported("an input of rank below 3");
  std::vector<std::int64_t> axes;
  for (std::int64_t a = 2; a < rank; ++a) axes.push_back(a);
  return {c.b.create<OpT>(c.input(0), axes, true).result()};
}

// Inference: y = x, the mask all true. Training (opset 12's training_mode
// input, known at import or fed per run; is_test = 0 before opset 7): each
// element is kept where a uniform draw in [0, 1) is >= ratio, and scaled by
// 1 / (1 - ratio); the mask says which were kept. A training_mode fed per
// run selects between the two with where. The ratio may be fed per run.
std::vector<Value> dropout(NodeContext& c) {
  Value x = c.input(0);
  const bool with_mask = c.node.output_size() > 1 && !c.node.output(1).empty();
  Value flag;  // a training_mode known only at run time
  bool training = c.opset < 7 && c.int_attr("is_test", 0) == 0;
  if (c.inputs.size() > 2 && c.inputs[2]) {
    if (c.constants[2] && c.constants[2]->numel() != 1)
      throw_error(ErrorKind::InvalidArgument, "ONNX ", c.where(), ": training_mode (input #2) holds ",
                  c.constants[2]->numel(), " values, expected one");
    if (c.constants[2]) training = c.constants[2]->to_vector<bool>()[0];
    else flag = c.inputs[2];
  }
  if (!training && !flag) {
    if (!with_mask) return {x};
    const auto& d = shaped_dims(x.type());
    if (std::none_of(d.begin(), d.end(), [](std::int64_t v) { return v < 0; }))
      return {x, c.b.create<FullOp>(d, 1.0, DataType::Bool).result()};
    return {x, c.b.create<FullByOp>(c.b.create<ShapeOp>(x).result(), 1.0, DataType::Bool).result()};
  }
  const DataType dt = shaped_data_type(x.type());
  if (dt != DataType::Float32 && dt != DataType::Float64) c.unsupported("Dropout in training of a non-float input");
  const std::vector<std::int64_t> d = shaped_dims(x.type());
  for (auto e : d)
    if (e < 0) c.unsupported("Dropout in training of an input with a dim known only at run time");
  auto scalar = [&](double v) { return c.b.create<FullOp>(std::vector<std::int64_t>{}, v, dt).result(); };
  Value ratio;
  if (c.opset < 12) ratio = scalar(c.float_attr("ratio", 0.5f));
  else if (c.inputs.size() > 1 && c.inputs[1]) ratio = c.inputs[1];
  else ratio = scalar(0.5);
  if (shaped_data_type(ratio.type()) != dt) ratio = c.b.create<CastOp>(ratio, dt).result();
  Value u = c.b.create<UniformRandomOp>(d, 0.0, 1.0, c.int_attr("seed", 0), dt).result();
  Value keep = c.b.create<GreaterEqualOp>(u, ratio).result();
  Value scale = c.b.create<DivOp>(scalar(1.0), c.b.create<SubOp>(scalar(1.0), ratio).result()).result();
  if (flag) {
    Value t = flag;
    if (shaped_data_type(t.type()) != DataType::Bool) t = c.b.create<CastOp>(t, DataType::Bool).result();
    keep = c.b.create<LogicalOrOp>(keep, c.b.create<LogicalNotOp>(t).result()).result();
    scale = c.b.create<WhereOp>(t, scale, scalar(1.0)).result();
  }
  Value y = c.b.create<WhereOp>(keep, c.b.create<MulOp>(x, scale).result(), scalar(0.0)).result();
  if (!with_mask) return {y};
  return {y, keep};
}

// Inference: y = (x - mean) · scale / sqrt(var + epsilon) + B, per channel
// (dim 1), composed from broadcasting kiln ops; training mode is not imported.
// Training mode (opset 14 on): normalized by the batch's own mean and
// (population) variance per channel; the running statistics outputs are
// input · momentum + batch statistic · (1 - momentum).
std::vector<Value> batch_norm_training(NodeContext& c) {
  Value x = c.input(0);
  const auto rank = static_cast<std::int64_t>(shaped_dims(x.type()).size());
  if (rank < 2) c.unsupported("an input of rank below 2");
  std::vector<std::int64_t> axes{0}, per_channel(static_cast<std::size_t>(rank), 1);
  for (std::int64_t a = 2; a < rank; ++a) axes.push_back(a);
  per_channel[1] = -1;
  const DataType dt = shaped_data_type(x.type());
  auto scalar = [&](double v) {
    return c.b.create<FullOp>(std::vector<std::int64_t>{}, v, dt).result();
  };
  auto channel = [&](std::size_t i) {
    return c.b.create<ReshapeOp>(c.input(i), per_channel).result();
  };
  Value mean = c.b.create<MeanOp>(x, axes, true).result();
  Value centered = c.b.create<SubOp>(x, mean).result();
  Value var = c.b.create<MeanOp>(c.b.create<SquareOp>(centered).result(), axes, true).result();
  Value std =
      c.b.create<SqrtOp>(c.b.create<AddOp>(var, scalar(c.float_attr("epsilon", 1e-5f))).result())
          .result();
  Value y =
      c.b.create<AddOp>(
             c.b.create<MulOp>(c.b.create<DivOp>(centered, std).result(), channel(1)).result(),
             channel(2))
          .result();
  const double momentum = c.float_attr("momentum", 0.9f);
  auto running = [&](std::size_t i, Value batch) {
    Value flat = c.b.create<ReshapeOp>(batch, std::vector<std::int64_t>{-1}).result();
    return c.b
        .create<AddOp>(c.b.create<MulOp>(c.input(i), scalar(momentum)).result(),
                       c.b.create<MulOp>(flat, scalar(1 - momentum)).result())
        .result();
  };
  std::vector<Value> out{y};
  if (c.node.output_size() > 1) out.push_back(running(3, mean));
  if (c.node.output_size() > 2) out.push_back(running(4, var));
  return out;
}

std::vector<Value> batch_norm(NodeContext& c) {
  if (c.int_attr("training_mode", 0) != 0) return batch_norm_training(c);
  if (c.opset < 7 && c.int_attr("is_test", 0) == 0)
    c.unsupported("BatchNormalization with is_test = 0");
  if (c.opset < 9 && c.int_attr("spatial", 1) == 0) c.unsupported("BatchNormalization with spatial = 0");
  for (int k = 1; k < c.node.output_size(); ++k)
    if (!c.node.output(k).empty()) c.unsupported("BatchNormalization's running statistics outputs");
  Value x = c.input(0);
  const auto rank = shaped_dims(x.type()).size();
  if (rank < 2) c.unsupported("an input of rank below 2");
  std::vector<std::int64_t> per_channel(rank, 1);
  per_channel[1] = -1;
  auto channel = [&](std::size_t i) { return c.b.create<ReshapeOp>(c.input(i), per_channel).result(); };
  const DataType dt = shaped_data_type(x.type());
  Value eps = c.b.create<FullOp>(std::vector<std::int64_t>{}, c.float_attr("epsilon", 1e-5f), dt).result();
  Value inv_std = c.b.create<SqrtOp>(c.b.create<AddOp>(channel(4), eps).result()).result();
  Value gain = c.b.create<DivOp>(channel(1), inv_std).result();
  Value centered = c.b.create<SubOp>(x, channel(3)).result();
  return {c.b.create<AddOp>(c.b.create<MulOp>(centered, gain).result(), channel(2)).result()};
}

// LayerNormalization (opset 17) over the dims from `axis` on, composed of
// kiln ops so its optional Mean and InvStdDev outputs (kept dims) come too:
// Y = (X - mean) · invstd · Scale + B, invstd = 1 / sqrt(var + epsilon).
std::vector<Value> layer_norm(NodeContext& c) {
  Value x = c.input(0);
  const auto rank = static_cast<std::int64_t>(shaped_dims(x.type()).size());
  std::int64_t axis = c.int_attr("axis", -1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) c.unsupported("axis out of range");
  std::vector<std::int64_t> axes;
  for (std::int64_t a = axis; a < rank; ++a) axes.push_back(a);
  Value mean = c.b.create<MeanOp>(x, axes, true).result();
  Value centered = c.b.create<SubOp>(x, mean).result();
  Value var = c.b.create<MeanOp>(c.b.create<SquareOp>(centered).result(), axes, true).result();
  Value eps = c.b.create<FullOp>(std::vector<std::int64_t>{}, c.float_attr("epsilon", 1e-5f),
                                 shaped_data_type(x.type()))
                  .result();
  Value inv_std = c.b.create<DivOp>(c.b.create<FullOp>(std::vector<std::int64_t>{}, 1.0,
                                                       shaped_data_type(x.type()))
                                        .result(),
                                    c.b.create<SqrtOp>(c.b.create<AddOp>(var, eps).result()).result())
                      .result();
  Value y = c.b.create<MulOp>(c.b.create<MulOp>(centered, inv_std).result(), c.input(1)).result();
  if (c.inputs.size() > 2 && c.inputs[2]) y = c.b.create<AddOp>(y, c.inputs[2]).result();
  return {y, mean, inv_std};
}

}  // namespace

void add_nn_ops(OpTable& t) {
  t["LayerNormalization"] = {&layer_norm, 17};
  t["BatchNormalization"] = {&batch_norm, 1};
  t["Conv"] = {&conv, 1};
  t["ConvTranspose"] = {&conv_transpose, 1};
  t["MaxPool"] = {&max_pool, 1};
  t["MaxUnpool"] = {&max_unpool, 9};
  t["AveragePool"] = {&average_pool, 1};
  t["GlobalAveragePool"] = {&global_pool<MeanOp>, 1};
  t["GlobalMaxPool"] = {&global_pool<MaxOp>, 1};
  t["Dropout"] = {&dropout, 1};
}

}  // namespace kiln::onnx::detail

// channels_last (kiln/passes/channels_last.h): one walk over a block in
// program order. A converted op is changed in place: its rank-4 operands
// replaced by their NHWC twins, its attributes renumbered, its result
// retyped, and its old readers given a transpose back to NCHW (erased at
// the end when nothing reads it). The walk runs twice: first on a copy of
// the block, where it groups the ops it converts into regions (ops joined
// by the NHWC values they pass) and weighs each region's transposes
// against the reorders its convolutions no longer need; then on the block,
// converting only the regions that gain.
#include "kiln/passes/channels_last.h"

#include <algorithm>
#include <array>
#include <optional>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kiln/dialect/binary_ops.h"
#include "kiln/dialect/compare_ops.h"
#include "kiln/dialect/conv_ops.h"
#include "kiln/dialect/fused_ops.h"
#include "kiln/dialect/norm_ops.h"
#include "kiln/dialect/pool_ops.h"
#include "kiln/dialect/reduce_ops.h"
#include "kiln/dialect/tensor_ops.h"
#include "kiln/dialect/unary_ops.h"
#include "kiln/ir/builder.h"
#include "kiln/ir/builtin_types.h"
#include "kiln/ir/ir_mapping.h"
#include "kiln/kernel/cpu_convolution.h"
#include "kiln/passes/op_effects.h"

namespace kiln {

namespace {

const std::vector<std::int64_t> kToNhwc{0, 2, 3, 1}, kToNchw{0, 3, 1, 2};
// Where NCHW axis k lies in NHWC.
constexpr std::array<std::int64_t, 4> kNhwcAxis{0, 3, 1, 2};

bool rank4(Value v) { return v && is_shaped(v.type()) && shaped_dims(v.type()).size() == 4; }

// Whether the CPU convolves v's dtype fast enough for NHWC to pay: f32, and
// bf16 where it computes bf16 natively.
bool fast_conv_dtype(Value v) {
  const DataType dt = shaped_data_type(v.type());
  return dt == DataType::Float32 || (dt == DataType::BFloat16 && cpu_convolutions_compute_bf16());
}

bool one_element(Value v) {
  if (!v || !is_shaped(v.type())) return false;
  std::int64_t n = 1;
  for (std::int64_t d : shaped_dims(v.type())) n *= d < 0 ? 2 : d;
  return n == 1;
}

// A [C, 1, 1] operand broadcast over a rank-4 result of C channels (a
// layer scale, a per-channel bias as exporters write them): read as [C]
// by the NHWC op.
bool channel_column(Value v, Value result) {
  if (!v || !is_shaped(v.type()) || !is_shaped(result.type())) return false;
  const auto& d = shaped_dims(v.type());
  const auto& r = shaped_dims(result.type());
  return d.size() == 3 && d[0] > 0 && d[1] == 1 && d[2] == 1 && r.size() == 4 && r[1] == d[0];
}

// Only read: every op that uses v has ReadOnly, is an Inplace op that
// writes other operands (batch_norm's running statistics), or is a view
// whose result is only read (a twin of v stays current).
bool only_read(Value v) {
  for (auto use : v.uses()) {
    Operation* o = use.owner();
    if (o->has_trait<ReadOnly>()) continue;
    if (o->has_trait<Inplace>()) {
      const auto written = written_operands(*o);
      if (std::find(written.begin(), written.end(), use.index()) == written.end()) continue;
    }
    if (o->has_trait<ViewLike>() && o->num_results() == 1 && only_read(o->result(0))) continue;
    return false;
  }
  return true;
}

// The one op that reads v, when v has exactly one use.
Operation* sole_reader(Value v) {
  Operation* reader = nullptr;
  for (auto use : v.uses()) {
    if (reader) return nullptr;
    reader = use.owner();
  }
  return reader;
}

std::vector<std::int64_t> normalized_perm(Operation* op) {
  std::vector<std::int64_t> perm = TransposeOp(op).attrs().perm;
  for (auto& p : perm)
    if (p < 0) p += static_cast<std::int64_t>(perm.size());
  return perm;
}

bool is_transpose(Operation* op, const std::vector<std::int64_t>& perm) {
  return op && op->isa<TransposeOp>() && !has_placement(*op) && rank4(op->operand_source(0)) &&
         normalized_perm(op) == perm;
}

template <typename OpT>
void set_attrs(Operation* op, const typename OpT::Attributes& a) {
  op->set_attributes(DictionaryAttribute::get(to_named_attributes(a)));
}

// Elements of a value (unknown dims counted as 1: a batch of -1 scales
// every value of a region alike).
double elements(Value v) {
  double n = 1;
  for (std::int64_t d : shaped_dims(v.type())) n *= d < 0 ? 1.0 : double(d);
  return n;
}

// A 1x1 convolution with stride 1 and no padding: kiln's NCHW kernel runs
// it as one GEMM without reorders, so NHWC gains nothing there. A
// (fused_)conv2d or its gradient.
template <typename OpT>
bool pointwise(Operation* conv) {
  const auto a = OpT(conv).attrs();
  const auto& w = shaped_dims(conv->operand_source(1).type());
  const bool no_pad = std::all_of(a.paddings.begin(), a.paddings.end(), [](auto p) { return p == 0; });
  return w.size() == 4 && w[2] == 1 && w[3] == 1 && a.strides == std::vector<std::int64_t>{1, 1} && no_pad;
}

// What one walk converted, by the op's position in the block: the region
// each op joined, and per region the elements its transposes move and
// the elements of the reorders around NCHW convolutions it saves.
class Regions {
 public:
  explicit Regions(std::size_t ops = 0) : parent_(ops), cost_(ops, 0), gain_(ops, 0), member_(ops, false) {
    for (std::size_t i = 0; i < ops; ++i) parent_[i] = i;
  }
  void join(std::size_t op) { member_[op] = true; }
  void unite(std::size_t a, std::size_t b) { parent_[root(a)] = root(b); }
  void cost(std::size_t op, double elements) { cost_[op] += elements; }
  void gain(std::size_t op, double elements) { gain_[op] += elements; }
  // The ops of regions whose saved reorders outweigh their transposes.
  std::vector<bool> gaining() {
    std::vector<double> cost(parent_.size(), 0), gain(parent_.size(), 0);
    for (std::size_t i = 0; i < parent_.size(); ++i) cost[root(i)] += cost_[i], gain[root(i)] += gain_[i];
    std::vector<bool> keep(parent_.size(), false);
    for (std::size_t i = 0; i < parent_.size(); ++i) keep[i] = member_[i] && gain[root(i)] > cost[root(i)];
    return keep;
  }

 private:
  std::size_t root(std::size_t i) {
    while (parent_[i] != i) i = parent_[i] = parent_[parent_[i]];
    return i;
  }
  std::vector<std::size_t> parent_;
  std::vector<double> cost_, gain_;
  std::vector<bool> member_;
};

class ChannelsLast {
 public:
  // `allowed`: the ops (by position) the walk may convert, all when null.
  // `follow_kept`: a kept result may change (a context moves it onto the
  // transpose back).
  ChannelsLast(Block& block, const ValueSet& keep, PassContext* ctx, bool follow_kept,
               const std::vector<bool>* allowed)
      : block_(block), keep_(keep), ctx_(ctx), follow_kept_(follow_kept), allowed_(allowed) {
    for (Operation* op : block_) ops_.push_back(op);
    regions_ = Regions(ops_.size());
  }

  std::size_t run() {
    std::size_t convs = 0;
    for (std::size_t i = 0; i < ops_.size(); ++i) {
      Operation* op = ops_[i];
      if (has_placement(*op) || (allowed_ && !(*allowed_)[i])) continue;
      at_ = i;
      if (op->isa<BatchNormOp>()) convert_on_twin<BatchNormOp>(op);
      else if (op->isa<GradOf<BatchNormOp>>()) convert_grad<GradOf<BatchNormOp>>(op, 4);
      else if (op->isa<GradOf<Conv2dOp>>()) convs += convert_conv_grad(op);
      else if (op->num_results() != 1) continue;
      else if (op->isa<FusedConv2dOp>()) convs += convert_conv<FusedConv2dOp>(op);
      else if (op->isa<Conv2dOp>()) convs += convert_conv<Conv2dOp>(op);
      else if (op->isa<GradOf<MaxPool2dOp>>()) convert_max_pool_grad(op);
      else if (op->isa<TransposeOp>()) read_through(op);
      else if (op->isa<MeanOp>()) convert_reduce<MeanOp>(op);
      else if (op->isa<SumOp>()) convert_reduce<SumOp>(op);
      else if (op->isa<MaxOp>()) convert_reduce<MaxOp>(op);
      else if (op->isa<ConcatOp>()) convert_concat(op);
      else if (op->isa<MaxPool2dOp>()) convert_on_twin<MaxPool2dOp>(op);
      else if (op->isa<SliceOp>()) convert_slice(op);
      else if (op->isa<ReshapeOp>()) convert_shuffle(op);
      else if (op->isa<AddNOp>()) convert_add_n(op);
      else convert_elementwise(op);
    }
    erase_unread();
    return convs;
  }

  Regions& regions() { return regions_; }

 private:
  // The NHWC twin of NCHW value v: known, the source of a transpose to
  // NCHW, or a new transpose before `before`; null when v may be written
  // in place (a twin would go stale).
  Value nhwc_of(Value v, Operation* before) {
    if (auto it = twin_.find(v.impl()); it != twin_.end()) {
      regions_.unite(at_, owner_.at(v.impl()));
      return it->second;
    }
    if (!only_read(v)) return {};
    Value t;
    if (Operation* def = v.defining_op(); is_transpose(def, kToNchw)) {
      t = def->operand_source(0);
      unread_later(def);  // unread once its readers take t
    } else {
      Builder b(block_);
      b.set_insertion_point(before);
      t = b.create<TransposeOp>(v, kToNhwc).result();
      unread_later(t.defining_op());
      regions_.cost(at_, elements(v));
    }
    twin_[v.impl()] = t;
    owner_[v.impl()] = at_;
    return t;
  }

  bool has_twin(Value v) const { return twin_.count(v.impl()) != 0; }
  // Whether nhwc_of(v) gives a twin (none for a value written in place).
  bool twinnable(Value v) const { return has_twin(v) || only_read(v); }

  // v's twin, read by the op at at_ (which joins the twin's region).
  Value twin(Value v) {
    regions_.unite(at_, owner_.at(v.impl()));
    return twin_.at(v.impl());
  }

  // The op may change: its result `i` is only read (readers get a transpose
  // back), and a kept result can be followed (the context moves it).
  bool convertible(Operation* op, std::uint32_t i = 0) const {
    Value r = op->result(i);
    return rank4(r) && only_read(r) && (follow_kept_ || !keep_.count(r.impl()));
  }

  // Replaces each rank-4 operand of op that is not one element by its twin;
  // false (op unchanged) when one has none.
  bool take_twins(Operation* op) {
    std::vector<std::pair<std::uint32_t, Value>> twins;
    for (std::uint32_t i = 0; i < op->num_operands(); ++i) {
      Value v = op->operand_source(i);
      if (!rank4(v) || one_element(v)) continue;
      Value t = nhwc_of(v, op);
      if (!t) return false;
      twins.emplace_back(i, t);
    }
    for (auto [i, t] : twins) op->set_operand(i, t);
    return true;
  }

  // op's operands and attributes are NHWC now: its result `i` is retyped,
  // and its readers read a transpose of it back to NCHW.
  void retype(Operation* op, std::uint32_t i = 0) {
    Value r = op->result(i);
    r.set_type(op->dyn_cast<InferMetaInterface>().infer_meta().at(i));
    Builder b(block_);
    b.set_insertion_point_after(op);
    Value back = b.create<TransposeOp>(r, kToNchw).result();
    replace_all_uses(r, back, ctx_);
    back.defining_op()->set_operand(0, r);
    twin_[back.impl()] = r;
    owner_[back.impl()] = at_;
    back_of_[back.defining_op()] = at_;
    unread_later(back.defining_op());
    regions_.join(at_);
  }

  // A (fused_)conv2d of f32 data (or bf16, convolved natively).
  template <typename OpT>
  std::size_t convert_conv(Operation* op) {
    auto a = OpT(op).attrs();
    Value x = op->operand_source(0);
    if (a.data_format == "NHWC" || !rank4(x) || !fast_conv_dtype(x) || !convertible(op))
      return 0;
    const bool has_residual = std::is_same_v<OpT, FusedConv2dOp> && op->num_operands() == 4;
    Value r = has_residual ? nhwc_of(op->operand_source(3), op) : Value();
    Value t = has_residual && !r ? Value() : nhwc_of(x, op);
    if (!t) return 0;
    op->set_operand(0, t);
    if (has_residual) op->set_operand(3, r);
    a.data_format = "NHWC";
    set_attrs<OpT>(op, a);
    retype(op);
    if (!pointwise<OpT>(op)) regions_.gain(at_, elements(t) + elements(op->result(0)));
    return 1;
  }

  // conv2d_grad(x, w, dout) -> (dx, dw) of f32 data (or bf16, convolved
  // natively), once x or dout has a twin: x, dout and dx NHWC, w and dw as
  // they are.
  std::size_t convert_conv_grad(Operation* op) {
    if (!fast_conv_dtype(op->operand_source(0)) || !convert_grad<GradOf<Conv2dOp>>(op, 2))
      return 0;
    // NCHW, oneDNN reorders x (for dw), dx back, and dout once (shared).
    if (!pointwise<GradOf<Conv2dOp>>(op))
      regions_.gain(at_, 2 * elements(op->operand_source(0)) + elements(op->operand_source(2)));
    return 1;
  }

  // A gradient op OpT(x, …, dout at operand d, …) -> (dx, …) with a
  // data_format, once x or dout has a twin: x, dout and dx NHWC, its other
  // operands and results (a weight's, a scale's gradient) as they are.
  // conv2d_grad (dout 2), batch_norm_grad (dy 4). False when unchanged.
  template <typename OpT>
  bool convert_grad(Operation* op, std::uint32_t d) {
    auto a = OpT(op).attrs();
    Value x = op->operand_source(0), dout = op->operand_source(d);
    if (a.data_format == "NHWC" || !rank4(x) || !(has_twin(x) || has_twin(dout)) || !twinnable(x) ||
        !twinnable(dout) || !convertible(op))
      return false;
    Value tx = nhwc_of(x, op), td = nhwc_of(dout, op);
    op->set_operand(0, tx);
    op->set_operand(d, td);
    a.data_format = "NHWC";
    set_attrs<OpT>(op, a);
    retype(op, 0);
    return true;
  }

  // An op OpT with a data_format (batch_norm, max_pool2d) of an x with a
  // twin: reads the twin, its result 0 NHWC (batch_norm's statistics as
  // they are).
  template <typename OpT>
  void convert_on_twin(Operation* op) {
    auto a = OpT(op).attrs();
    Value x = op->operand_source(0);
    if (a.data_format == "NHWC" || !rank4(x) || !has_twin(x) || !convertible(op)) return;
    op->set_operand(0, twin(x));
    a.data_format = "NHWC";
    set_attrs<OpT>(op, a);
    retype(op, 0);
  }

  // max_pool2d_grad(x, dout) of an x with a twin.
  void convert_max_pool_grad(Operation* op) {
    auto a = GradOf<MaxPool2dOp>(op).attrs();
    Value x = op->operand_source(0);
    if (a.data_format == "NHWC" || !rank4(x) || !has_twin(x) || !convertible(op) || !take_twins(op)) return;
    a.data_format = "NHWC";
    set_attrs<GradOf<MaxPool2dOp>>(op, a);
    retype(op);
  }

  // An elementwise op of the fused families, kiln.clip (relu6) or kiln.cast
  // (mixed precision's, around a bf16 convolution), or one's gradient, once
  // one operand has a twin or is a transpose of NHWC data to NCHW
  // (ConvNeXt's permute back before its layer scale). A [C, 1, 1] operand
  // is read as [C].
  void convert_elementwise(Operation* op) {
    FusedStep s;
    const bool clip_or_cast = op->isa<ClipOp>() || op->isa<GradOf<ClipOp>>() || op->isa<CastOp>();
    if (!(clip_or_cast || fused_step_for(op->name(), s)) || !op->has_trait<ReadOnly>() || !convertible(op)) return;
    if (!clip_or_cast && s.kind != FusedStep::Kind::Unary && s.kind != FusedStep::Kind::UnaryGrad &&
        s.kind != FusedStep::Kind::Binary && s.kind != FusedStep::Kind::Scale)
      return;
    bool any = false;
    for (std::uint32_t i = 0; i < op->num_operands(); ++i) {
      Value v = op->operand_source(i);
      if (!rank4(v) && !one_element(v) && !channel_column(v, op->result(0))) return;
      any = any || has_twin(v) || is_transpose(v.defining_op(), kToNchw);
    }
    if (!any || !take_twins(op)) return;
    for (std::uint32_t i = 0; i < op->num_operands(); ++i)
      if (Value v = op->operand_source(i); channel_column(v, op->result(0))) {
        Builder b(block_);
        b.set_insertion_point(op);
        op->set_operand(i, b.create<ReshapeOp>(v, std::vector<std::int64_t>{shaped_dims(v.type())[0]}).result());
      }
    retype(op);
  }

  // add_n of same-typed rank-4 values (gradients summed), once one has a twin.
  void convert_add_n(Operation* op) {
    bool any = false;
    for (std::uint32_t i = 0; i < op->num_operands(); ++i) {
      Value v = op->operand_source(i);
      if (!rank4(v) || v.type() != op->result(0).type()) return;
      any = any || has_twin(v);
    }
    if (any && convertible(op) && take_twins(op)) retype(op);
  }

  // A slice of a value with a twin slices the twin, its axes renumbered.
  void convert_slice(Operation* op) {
    auto a = SliceOp(op).attrs();
    Value x = op->operand_source(0);
    if (!rank4(x) || !has_twin(x) || !convertible(op)) return;
    for (auto& axis : a.axes) {
      if (axis < -4 || axis > 3) return;
      axis = kNhwcAxis[static_cast<std::size_t>(axis < 0 ? axis + 4 : axis)];
    }
    op->set_operand(0, twin(x));
    set_attrs<SliceOp>(op, a);
    retype(op);
  }

  // A channel shuffle (ShuffleNet's, as PyTorch exports it) of a value x
  // [N, C, H, W] with a twin:
  //   reshape(x){[0, g, C/g, H, W]} → transpose{[0, 2, 1, 3, 4]} → reshape{[0, C, H, W]}
  // becomes the same shuffle of the twin, along its last axis:
  //   reshape(x'){[0, H, W, g, C/g]} → transpose{[0, 1, 2, 4, 3]} → reshape{[0, H, W, C]}
  // when each step's result has no other reader.
  void convert_shuffle(Operation* op) {
    Value x = op->operand_source(0);
    if (!rank4(x) || !has_twin(x)) return;
    const auto& d = shaped_dims(x.type());
    const auto s1 = ReshapeOp(op).attrs().shape;
    if (s1.size() != 5 || s1[0] != 0 || s1[1] <= 0 || s1[2] <= 0 || d[1] != s1[1] * s1[2] ||
        d[2] <= 0 || d[3] <= 0 || s1[3] != d[2] || s1[4] != d[3])
      return;
    Operation* t = sole_reader(op->result(0));
    if (!t || !t->isa<TransposeOp>() ||
        normalized_perm(t) != std::vector<std::int64_t>{0, 2, 1, 3, 4})
      return;
    Operation* back = sole_reader(t->result(0));
    if (!back || !back->isa<ReshapeOp>() || back->result_type(0) != x.type()) return;
    const auto s2 = ReshapeOp(back).attrs().shape;
    if (s2.size() != 4 || s2[0] != 0 || (s2[1] != d[1] && s2[1] != -1) || s2[2] != d[2] ||
        s2[3] != d[3] || !convertible(back))
      return;
    op->set_operand(0, twin(x));
    set_attrs<ReshapeOp>(op, ReshapeOp::Attributes{{0, d[2], d[3], s1[1], s1[2]}});
    reinfer(op);
    set_attrs<TransposeOp>(t, TransposeOp::Attributes{{0, 1, 2, 4, 3}});
    reinfer(t);
    set_attrs<ReshapeOp>(back, ReshapeOp::Attributes{{0, d[2], d[3], d[1]}});
    retype(back);
  }

  // op's result takes the type its InferMeta gives now.
  static void reinfer(Operation* op) {
    op->result(0).set_type(op->dyn_cast<InferMetaInterface>().infer_meta().at(0));
  }

  void convert_concat(Operation* op) {
    auto a = ConcatOp(op).attrs();
    bool any = false;
    for (std::uint32_t i = 0; i < op->num_operands(); ++i) {
      if (!rank4(op->operand_source(i))) return;
      any = any || has_twin(op->operand_source(i));
    }
    const std::int64_t axis = a.axis < 0 ? a.axis + 4 : a.axis;
    if (!any || axis < 0 || axis > 3 || !convertible(op) || !take_twins(op)) return;
    a.axis = kNhwcAxis[static_cast<std::size_t>(axis)];
    set_attrs<ConcatOp>(op, a);
    retype(op);
  }

  // A reduction of a value with a twin reads the twin, its axes renumbered.
  // With keepdim its result is NHWC; without, the kept axes must keep their
  // order (then its result is what it was).
  template <typename OpT>
  void convert_reduce(Operation* op) {
    Value x = op->operand_source(0);
    if (!has_twin(x)) return;
    auto a = OpT(op).attrs();
    if (a.axis.empty()) return;
    std::vector<bool> reduced(4, false);
    for (std::int64_t k : a.axis) {
      if (k < -4 || k > 3) return;
      reduced[static_cast<std::size_t>(k < 0 ? k + 4 : k)] = true;
    }
    std::vector<std::int64_t> axes, kept;
    for (std::size_t k = 0; k < 4; ++k)
      (reduced[k] ? axes : kept).push_back(kNhwcAxis[k]);
    if (!a.keepdim && !std::is_sorted(kept.begin(), kept.end())) return;
    if (a.keepdim && !convertible(op)) return;
    std::sort(axes.begin(), axes.end());
    op->set_operand(0, twin(x));
    regions_.join(at_);
    a.axis = axes;
    set_attrs<OpT>(op, a);
    if (a.keepdim) retype(op);
  }

  // transpose(x, p) of an x with a twin: the twin transposed by the
  // composed permutation, or the twin itself.
  void read_through(Operation* op) {
    Value x = op->operand_source(0);
    if (!has_twin(x) || !rank4(x)) return;
    const std::vector<std::int64_t> perm = normalized_perm(op);
    std::vector<std::int64_t> composed(4);
    for (std::size_t i = 0; i < 4; ++i) composed[i] = kToNchw[static_cast<std::size_t>(perm[i])];
    if (composed == std::vector<std::int64_t>{0, 1, 2, 3}) {
      if (!follow_kept_ && keep_.count(op->result(0).impl())) return;
      replace_all_uses(op->result(0), twin(x), ctx_);
      regions_.join(at_);
      unread_later(op);
      return;
    }
    op->set_operand(0, twin(x));
    regions_.join(at_);
    set_attrs<TransposeOp>(op, TransposeOp::Attributes{composed});
  }

  // Lists a transpose to erase at the end if nothing reads it then.
  void unread_later(Operation* op) {
    if (listed_.insert(op).second) made_.push_back(op);
  }

  // Erases the listed transposes nothing reads any more, until none is
  // left (erasing one may leave the one it read unread).
  void erase_unread() {
    for (bool erased = true; erased;) {
      erased = false;
      for (Operation*& op : made_) {
        if (op == nullptr) continue;
        Value r = op->result(0);
        if (!r.use_empty() || keep_.count(r.impl()) ||
            (ctx_ && std::count(ctx_->live_out().begin(), ctx_->live_out().end(), r)))
          continue;
        if (auto it = back_of_.find(op); it != back_of_.end()) back_of_.erase(it);
        erase_op(op, ctx_);
        op = nullptr;
        erased = true;
      }
    }
    for (auto [back, at] : back_of_) regions_.cost(at, elements(back->result(0)));
  }

  Block& block_;
  const ValueSet& keep_;
  PassContext* ctx_;
  bool follow_kept_;
  const std::vector<bool>* allowed_;
  std::vector<Operation*> ops_;  // the block's ops before the walk
  std::size_t at_ = 0;           // the position of the op being converted
  Regions regions_;
  std::unordered_map<const void*, Value> twin_;          // NCHW value -> its NHWC twin
  std::unordered_map<const void*, std::size_t> owner_;   // NCHW value -> the op that twinned it
  std::unordered_map<Operation*, std::size_t> back_of_;  // transpose back -> its op
  std::vector<Operation*> made_;                 // transposes made or made unread
  std::unordered_set<Operation*> listed_;        // made_'s ops
};

// Whether the walk has anything to do: an NCHW (fused_)conv2d.
bool worth_a_walk(const Block& block) {
  for (Operation* op : block)
    if ((op->isa<FusedConv2dOp>() && FusedConv2dOp(op).attrs().data_format != "NHWC") ||
        (op->isa<Conv2dOp>() && Conv2dOp(op).attrs().data_format != "NHWC"))
      return true;
  return false;
}

// The ops (by position) of the regions that gain: the walk run on a copy
// of the block.
std::vector<bool> gaining_ops(const Block& block, const ValueSet& keep, bool follow_kept) {
  Program scratch;
  IrMapping map;
  ValueSet scratch_keep;
  for (Operation* op : block) {
    Operation* copy = op->clone(map);
    scratch.block().push_back(copy);
    for (std::uint32_t r = 0; r < op->num_results(); ++r)
      if (keep.count(op->result(r).impl())) scratch_keep.insert(copy->result(r).impl());
  }
  ChannelsLast walk(scratch.block(), scratch_keep, nullptr, follow_kept, nullptr);
  walk.run();
  return walk.regions().gaining();
}

}  // namespace

std::size_t convert_to_channels_last(Block& block, const ValueSet& keep, PassContext* ctx,
                                     bool force) {
  if ((!force && !cpu_convolutions_prefer_channels_last()) || !worth_a_walk(block)) return 0;
  const std::vector<bool> allowed = gaining_ops(block, keep, ctx != nullptr);
  return ChannelsLast(block, keep, ctx, ctx != nullptr, &allowed).run();
}

namespace {

class ChannelsLastPass : public Pass {
 public:
  ChannelsLastPass() : Pass("channels_last") {}
  void run(Program& program, PassContext& ctx) override {
    if (!ctx.target_place.is_cpu()) return;
    convert_to_channels_last(program.block(), live_out_set(ctx), &ctx);
  }
};

}  // namespace

std::unique_ptr<Pass> create_channels_last_pass() { return std::make_unique<ChannelsLastPass>(); }

KILN_REGISTER_PASS("channels_last", [] { return create_channels_last_pass(); },
                   "kiln.conv2d, kiln.fused_conv2d and the pools, batch norms, elementwise ops, concats "
                   "and reductions between them (and in a training program their gradients) in NHWC, "
                   "transposes where a value enters or leaves them (CPU)");

}  // namespace kiln

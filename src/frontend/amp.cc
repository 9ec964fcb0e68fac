#include "kiln/frontend/amp.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <unordered_map>
#include <unordered_set>

#include "kiln/dialect/binary_ops.h"
#include "kiln/dialect/builtin.h"
#include "kiln/dialect/fused_ops.h"
#include "kiln/dialect/loss_scaling_ops.h"
#include "kiln/dialect/unary_ops.h"
#include "kiln/frontend/backward.h"
#include "kiln/frontend/initializer.h"
#include "kiln/frontend/op_role.h"
#include "kiln/frontend/optimizer.h"
#include "kiln/frontend/parameter.h"
#include "kiln/frontend/program_guard.h"
#include "kiln/frontend/unique_name.h"
#include "kiln/ir/builder.h"
#include "kiln/ir/builtin_types.h"
#include "kiln/ir/half_operands.h"
#include "kiln/ir/interfaces.h"
#include "kiln/ir/mixed_half.h"
#include "kiln/ir/ir_context.h"
#include "kiln/ir/program.h"
#include "kiln/ir/traits.h"
#include "kiln/kernel/kernel_registry.h"
#include "kiln/runtime/scope.h"
#include "kiln/support/error.h"
#include "kiln/support/half.h"

namespace kiln::amp {
namespace {

bool of_dtype(Value v, DataType dt) { return v && is_shaped(v.type()) && shaped_data_type(v.type()) == dt; }

// Host streams run the CPU's kernels; any other place has kernels of its own.
PlaceKind backend_of(Place place) { return place.kind == PlaceKind::HostStream ? PlaceKind::Cpu : place.kind; }

std::string_view backend_name(PlaceKind k) {
  switch (k) {
    case PlaceKind::Cpu: return "CPU";
    case PlaceKind::Cuda: return "CUDA";
    default: return "undefined";
  }
}

bool has_kernel(TypeId op, PlaceKind backend, DataType dtype) {
  return KernelRegistry::instance().find(op, backend, dtype) != nullptr;
}

// One of the three op lists (amp.h: allow, follow, deny): the names a
// user gave (replacing the defaults when not empty) and the defaults.
struct ListSpec {
  std::string_view name;
  const std::vector<std::string>& given;
  const std::vector<std::string>& defaults;
  bool retypes;  // allow / follow: amp retypes the op's results to the low dtype
};

// The op a given list names; kiln::Error(InvalidArgument) naming the list
// and the name when it is no registered op, or (a list that retypes) when
// the op has no InferMeta or no kernel at `backend` for `dtype`.
OpInfo given_op(const std::string& name, const ListSpec& list, DataType dtype, PlaceKind backend) {
  const OpInfo info = IrContext::instance()->find_op(name);
  if (!info)
    throw_error(ErrorKind::InvalidArgument, "amp: ", list.name, "-list op '", name, "' is not a registered op");
  if (!list.retypes) return info;
  if (!info.has_interface<InferMetaInterface>())
    throw_error(ErrorKind::InvalidArgument, "amp: ", list.name, "-list op '", name,
                "' has no InferMeta (amp retypes the results of the ops it lowers)");
  if (!has_kernel(info.id(), backend, dtype))
    throw_error(ErrorKind::InvalidArgument, "amp: ", list.name, "-list op '", name, "' has no ",
                backend_name(backend), " kernel for ", to_string(dtype));
  return info;
}

// Each list's op ids. A given list replaces its defaults; a name on two
// given lists is an error; a name a given list holds leaves the other
// lists' defaults; a default that retypes is dropped where it has no
// kernel for the dtype at `backend`. So every op is on one list at most.
std::array<std::unordered_set<TypeId>, 3> resolve_lists(const std::array<ListSpec, 3>& lists, DataType dtype,
                                                       PlaceKind backend) {
  std::unordered_map<TypeId, std::size_t> given;  // op → the given list that names it
  for (std::size_t l = 0; l < lists.size(); ++l)
    for (const std::string& name : lists[l].given) {
      const auto [it, added] = given.emplace(given_op(name, lists[l], dtype, backend).id(), l);
      if (!added && it->second != l)
        throw_error(ErrorKind::InvalidArgument, "amp: op '", name, "' is on both the ", lists[it->second].name,
                    " and the ", lists[l].name, " list");
    }
  std::array<std::unordered_set<TypeId>, 3> ids;
  for (std::size_t l = 0; l < lists.size(); ++l) {
    if (!lists[l].given.empty()) {
      for (const auto& [id, in] : given)
        if (in == l) ids[l].insert(id);
      continue;
    }
    for (const std::string& name : lists[l].defaults) {
      const OpInfo info = IrContext::instance()->find_op(name);
      if (!info || given.count(info.id())) continue;
      if (lists[l].retypes && !has_kernel(info.id(), backend, dtype)) continue;
      ids[l].insert(info.id());
    }
  }
  return ids;
}

bool has_floating_result(const Operation& op) {
  for (std::uint32_t r = 0; r < op.num_results(); ++r)
    if (is_shaped(op.result_type(r)) && is_floating(shaped_data_type(op.result_type(r)))) return true;
  return false;
}

// Whether every floating operand and result of `op` holds one element (a
// static shape of product 1: [], [1], [1, 1]) — a loss's tail after its
// reductions (sum / count, a weighted sum of losses).
bool on_single_elements(const Operation& op) {
  auto single = [](Type t) {
    if (!is_shaped(t) || !is_floating(shaped_data_type(t))) return true;
    for (std::int64_t d : shaped_dims(t))
      if (d != 1) return false;
    return true;
  };
  for (std::uint32_t i = 0; i < op.num_operands(); ++i)
    if (const Value v = op.operand(i).source(); v && !single(v.type())) return false;
  for (std::uint32_t r = 0; r < op.num_results(); ++r)
    if (!single(op.result_type(r))) return false;
  return true;
}

using LowSet = std::unordered_set<const detail::ValueImpl*>;  // values the rewrite made low

// How an op's floating operands stand: f32 (f32_0d of them 0-dim); made
// low by the rewrite; low from the start (low_with_dims of those two kinds
// of rank 1 or more); another floating dtype (f64, the other 16-bit float).
struct FloatingOperands {
  int f32 = 0, f32_0d = 0, made_low = 0, low = 0, low_with_dims = 0, other = 0;
  FloatingOperands(const Operation& op, DataType low_dtype, const LowSet& lowered) {
    for (std::uint32_t i = 0; i < op.num_operands(); ++i) {
      const Value v = op.operand(i).source();
      if (!v || !is_shaped(v.type()) || !is_floating(shaped_data_type(v.type()))) continue;
      const bool has_dims = !shaped_dims(v.type()).empty();
      if (lowered.count(v.impl())) ++made_low, low_with_dims += has_dims;
      else if (of_dtype(v, DataType::Float32)) ++f32, f32_0d += !has_dims;
      else if (of_dtype(v, low_dtype)) ++low, low_with_dims += has_dims;
      else ++other;
    }
  }
  // PyTorch's type promotion: an f32 operand promotes a follow op's low
  // ones unless it is 0-dim beside a low operand with dims (a dimensionless
  // tensor does not lift a dimensioned one of its category).
  bool f32_promotes() const { return f32 > f32_0d || (f32 > 0 && low_with_dims == 0); }
};

// Which ops run in the low dtype (the rules amp.h states for O1 and O2).
class LowPolicy {
 public:
  explicit LowPolicy(const Options& o);

  bool runs_low(const Operation& op, const LowSet& lowered) const {
    return o2_ ? o2_runs_low(op, lowered) : o1_runs_low(op, lowered);
  }

  // Whether `op`, kept f32, reads its operand i, made low, as it is: the op
  // declares so (HalfOperandsInterface) and has a kernel for the low dtype
  // at the target.
  bool reads_low_as_is(Operation& op, std::uint32_t i) const {
    const auto half = op.dyn_cast<HalfOperandsInterface>();
    return half && half.reads_half_as_f32(i) && has_kernel(op.info().id(), backend_, low_);
  }

  // Whether `op` reads its MixedHalfInterface operands as they are, each
  // made low (its other operands kept f32), its following results then
  // low: it declares them and has a kernel for the low dtype at the target.
  bool reads_mixed_half(Operation& op, const LowSet& lowered) const {
    const auto mixed = op.dyn_cast<MixedHalfInterface>();
    if (!mixed || !has_kernel(op.info().id(), backend_, low_)) return false;
    for (std::uint32_t i : mixed.half_operands())
      if (!lowered.count(op.operand_source(i).impl())) return false;
    return true;
  }

 private:
  bool o1_runs_low(const Operation& op, const LowSet& lowered) const;
  bool o2_runs_low(const Operation& op, const LowSet& lowered) const;
  bool adds_bias_to_allowed(const Operation& op, const LowSet& lowered) const;

  bool o2_;
  DataType low_;
  PlaceKind backend_;
  std::unordered_set<TypeId> allow_, follow_, deny_;
  bool bias_add_runs_low_;  // kiln.add has a low kernel at the target and is not denied
};

LowPolicy::LowPolicy(const Options& o) : o2_(o.level == Level::O2), low_(o.dtype), backend_(backend_of(o.place)) {
  auto lists = resolve_lists({ListSpec{"allow", o.allow, default_allow_list(), true},
                              ListSpec{"follow", o.follow, default_follow_list(), true},
                              ListSpec{"deny", o.deny, default_deny_list(), false}},
                             low_, backend_);
  allow_ = std::move(lists[0]);
  follow_ = std::move(lists[1]);
  deny_ = std::move(lists[2]);
  const TypeId add = IrContext::instance()->op_info<AddOp>().id();
  bias_add_runs_low_ = has_kernel(add, backend_, low_) && !deny_.count(add);
}

// O1: an allow-list op that reads an f32 value or one made low; the bias
// add of an allow-list op's low result (kiln.add on the follow list or
// not); a follow-list op whose floating operands are all low, one made
// low, but for 0-dim f32 ones beside a low operand with dims (they read a
// low cast). None reads f64 or the other 16-bit float.
bool LowPolicy::o1_runs_low(const Operation& op, const LowSet& lowered) const {
  const FloatingOperands in(op, low_, lowered);
  if (in.other) return false;
  const TypeId id = op.info().id();
  if (allow_.count(id)) return in.f32 + in.made_low > 0;
  if (adds_bias_to_allowed(op, lowered)) return true;
  return follow_.count(id) && !in.f32_promotes() && in.made_low > 0 && has_floating_result(op);
}

// O2: every op with a floating first operand, a floating result and a
// kernel for the low dtype at the target that the deny list does not name
// (no region op, in-place op, side effect, collective or cast), nor one on
// single elements: rounding a scalar saves nothing and costs the loss its
// f32.
bool LowPolicy::o2_runs_low(const Operation& op, const LowSet& lowered) const {
  if (deny_.count(op.info().id()) || op.num_regions() || op.has_trait<Inplace>() ||
      op.has_trait<SideEffect>() || op.has_trait<Communication>() || op.isa<CastOp>() ||
      op.num_operands() == 0 || !has_floating_result(op) || on_single_elements(op))
    return false;
  const Value first = op.operand(0).source();
  if (!first || !is_shaped(first.type()) || !is_floating(shaped_data_type(first.type()))) return false;
  const FloatingOperands in(op, low_, lowered);
  return in.other == 0 && has_kernel(op.info().id(), backend_, low_);
}

// Whether a bias of dims `bias` is one value per channel of an NCHW
// result of dims `y`, as a convolution's bias is added: [C, 1, 1] or
// [1, C, 1, 1], C y's (known) dim 1.
bool is_channel_bias(const std::vector<std::int64_t>& bias, const std::vector<std::int64_t>& y) {
  if (y.size() != 4 || y[1] < 0) return false;
  return bias == std::vector<std::int64_t>{y[1], 1, 1} || bias == std::vector<std::int64_t>{1, y[1], 1, 1};
}

// Whether `op` is kiln.add(y, b) or (b, y) with y an allow-list op's low
// result and b an f32 bias of y: a linear layer's bias row, or a
// convolution's bias per channel; PyTorch's autocast adds both low, inside
// F.linear and F.conv2d.
bool LowPolicy::adds_bias_to_allowed(const Operation& op, const LowSet& lowered) const {
  if (!bias_add_runs_low_ || !op.isa<AddOp>()) return false;
  for (std::uint32_t i = 0; i < 2; ++i) {
    const Value y = op.operand(i).source(), b = op.operand(1 - i).source();
    const Operation* def = y.defining_op();
    if (!lowered.count(y.impl()) || !def || !allow_.count(def->info().id()) || !of_dtype(b, DataType::Float32))
      continue;
    const auto &bd = shaped_dims(b.type()), &yd = shaped_dims(y.type());
    if (is_row_bias(bd, yd) || is_channel_bias(bd, yd)) return true;
  }
  return false;
}

void check(const Block& block, const Options& o) {
  if (o.level != Level::O0 && o.level != Level::O1 && o.level != Level::O2)
    throw_error(ErrorKind::InvalidArgument, "amp: unknown level ", int(o.level));
  if (o.dtype != DataType::BFloat16 && o.dtype != DataType::Float16)
    throw_error(ErrorKind::InvalidArgument, "amp: the low dtype must be bf16 or f16, got ", to_string(o.dtype));
  if (!KernelRegistry::instance().has_backend(backend_of(o.place)))
    throw_error(ErrorKind::InvalidArgument, "amp: the place ", o.place.to_string(),
                " has no kernels in this build (Options::place: where the program will run)");
  for (const Operation* op : block)
    if (op_role(op) != OpRole::Forward)
      throw_error(ErrorKind::InvalidArgument, "amp: the program already has ", to_string(op_role(op)),
                  " ops (op '", op->name(), "'): rewrite it before append_backward or minimize");
}

// One cast per (value, dtype), made before the first op that needs it.
class Casts {
 public:
  explicit Casts(Block& block) : block_(block) {}
  Value get(Value v, DataType dt, Operation* before) {
    Value& c = made_[{v.impl(), dt}];
    if (!c) {
      Builder b(block_);
      b.set_insertion_point(before);
      c = b.create<CastOp>(v, dt).result();
      ++count;
    }
    return c;
  }
  std::size_t count = 0;

 private:
  struct Key {
    const detail::ValueImpl* v;
    DataType dt;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const {
      return std::hash<const void*>()(k.v) * 31 + static_cast<std::size_t>(k.dt);
    }
  };
  Block& block_;
  std::unordered_map<Key, Value, KeyHash> made_;
};

}  // namespace

const std::vector<std::string>& default_allow_list() {
  static const std::vector<std::string> list{"kiln.matmul", "kiln.scaled_dot_product_attention"};
  return list;
}

const std::vector<std::string>& default_follow_list() {
  static const std::vector<std::string> list{
      // the unary family but for PyTorch's f32 ones (exp, log, square, asin, acos, tan, sinh, cosh)
      "kiln.relu", "kiln.tanh", "kiln.sigmoid", "kiln.sqrt", "kiln.abs", "kiln.neg", "kiln.sin", "kiln.cos",
      "kiln.atan", "kiln.asinh", "kiln.acosh", "kiln.atanh", "kiln.erf", "kiln.floor", "kiln.ceil",
      "kiln.round", "kiln.sign", "kiln.gelu", "kiln.scale", "kiln.assign",
      // clip (relu6, hardtanh: PyTorch's autocast runs them in the input's dtype)
      "kiln.clip",
      // the binaries (pow is PyTorch's f32)
      "kiln.add", "kiln.sub", "kiln.mul", "kiln.div", "kiln.maximum", "kiln.minimum", "kiln.add_n",
      // data movement
      "kiln.reshape", "kiln.transpose", "kiln.split", "kiln.concat", "kiln.stack", "kiln.slice",
      "kiln.strided_slice", "kiln.squeeze", "kiln.unsqueeze", "kiln.flatten", "kiln.expand", "kiln.tile",
      "kiln.reshape_by", "kiln.slice_by", "kiln.squeeze_by", "kiln.unsqueeze_by",
      "kiln.split_by", "kiln.expand_by",
      // dropout, pools
      "kiln.dropout", "kiln.max_pool2d", "kiln.avg_pool2d", "kiln.adaptive_avg_pool2d"};
  return list;
}

const std::vector<std::string>& default_deny_list() {
  static const std::vector<std::string> list{
      "kiln.softmax_with_cross_entropy", "kiln.cross_entropy", "kiln.mean", "kiln.sum",
      "kiln.exp", "kiln.log", "kiln.square", "kiln.softmax", "kiln.log_softmax", "kiln.layer_norm",
      "kiln.rms_norm", "kiln.batch_norm"};
  return list;
}

namespace {

// Whether operand i of `op` turns low when op runs low: any, but for an op
// with MixedHalfInterface only those it declares (the others stay f32).
bool lowers_operand(Operation& op, std::uint32_t i) {
  const auto mixed = op.dyn_cast<MixedHalfInterface>();
  return !mixed || mixed.reads_half(i);
}

// op's results are retyped by its InferMeta, and those now low join `lowered`.
void retype(Operation& op, DataType low, LowSet& lowered) {
  const std::vector<Type> types = op.dyn_cast<InferMetaInterface>().infer_meta();
  for (std::uint32_t r = 0; r < op.num_results(); ++r) {
    op.result(r).set_type(types.at(r));
    if (of_dtype(op.result(r), low)) lowered.insert(op.result(r).impl());
  }
}

// `op` runs low: its f32 operands (lowers_operand) read low casts; its
// results are retyped.
void lower(Operation& op, DataType low, LowSet& lowered, Casts& casts) {
  for (std::uint32_t i = 0; i < op.num_operands(); ++i) {
    Value v = op.operand(i).source();
    if (of_dtype(v, DataType::Float32) && lowers_operand(op, i)) op.set_operand(i, casts.get(v, low, &op));
  }
  retype(op, low, lowered);
}

bool same_result_types(Operation& op) {
  const std::vector<Type> types = op.dyn_cast<InferMetaInterface>().infer_meta();
  for (std::uint32_t r = 0; r < op.num_results(); ++r)
    if (types.at(r) != op.result_type(r)) return false;
  return true;
}

// `op` stays f32: it reads each value made low through a cast back to f32,
// or as it is where it declares so — its MixedHalfInterface operands, all
// made low (LowPolicy::reads_mixed_half; its results are then retyped, the
// following ones low), or its HalfOperandsInterface ones
// (LowPolicy::reads_low_as_is) unless its InferMeta then gives other result
// types, against the declaration.
void read_low_operands(Operation& op, const LowPolicy& policy, DataType low, LowSet& lowered, Casts& casts) {
  const bool mixed = policy.reads_mixed_half(op, lowered);
  std::vector<std::uint32_t> as_is;
  for (std::uint32_t i = 0; i < op.num_operands(); ++i) {
    Value v = op.operand(i).source();
    if (!lowered.count(v.impl()) || (mixed && lowers_operand(op, i))) continue;
    if (policy.reads_low_as_is(op, i)) as_is.push_back(i);
    else op.set_operand(i, casts.get(v, DataType::Float32, &op));
  }
  if (mixed) retype(op, low, lowered);
  if (as_is.empty() || same_result_types(op)) return;
  for (std::uint32_t i : as_is) op.set_operand(i, casts.get(op.operand(i).source(), DataType::Float32, &op));
}

}  // namespace

RewriteResult rewrite(Block& block, const Options& options) {
  check(block, options);
  RewriteResult result;
  if (options.level == Level::O0) return result;
  const LowPolicy policy(options);
  LowSet lowered;  // results this rewrite made low
  Casts casts(block);
  std::vector<Operation*> ops(block.begin(), block.end());  // the casts added are not visited
  for (Operation* op : ops) {
    if (policy.runs_low(*op, lowered)) {
      lower(*op, options.dtype, lowered, casts);
      ++result.lowered_ops;
    } else {
      read_low_operands(*op, policy, options.dtype, lowered, casts);
    }
  }
  result.casts = casts.count;
  return result;
}

namespace {

bool wants_loss_scaling(const Options& o) {
  if (o.scaling == Scaling::Auto) return o.level != Level::O0 && o.dtype == DataType::Float16;
  return o.scaling == Scaling::On;
}

void check_loss_scaling(const LossScaling& l) {
  auto fail = [](std::string_view field, std::string_view want, double got) {
    throw_error(ErrorKind::InvalidArgument, "amp: LossScaling::", field, " must be ", want, ", got ", got);
  };
  if (!(l.init_scale > 0.0) || !std::isfinite(static_cast<float>(l.init_scale)))
    fail("init_scale", "a finite f32 > 0", l.init_scale);
  if (l.incr_every_n_steps < 1) fail("incr_every_n_steps", ">= 1", double(l.incr_every_n_steps));
  if (l.decr_every_n_nan_or_inf < 1)
    fail("decr_every_n_nan_or_inf", ">= 1", double(l.decr_every_n_nan_or_inf));
  if (!(l.incr_ratio >= 1.0) || l.incr_ratio > 1e30) fail("incr_ratio", "in [1, 1e30]", l.incr_ratio);
  if (!(l.decr_ratio > 0.0 && l.decr_ratio <= 1.0)) fail("decr_ratio", "in (0, 1]", l.decr_ratio);
}

}  // namespace

std::vector<std::pair<Value, Value>> Decorated::minimize(Value loss) {
  if (!loss || !loss.defining_op())
    throw_error(ErrorKind::InvalidArgument, "amp: minimize needs a loss defined by an op");
  scale_name_.clear();
  found_inf_ = {};
  if (wants_loss_scaling(options_)) check_loss_scaling(options_.loss_scaling);
  rewrite(*loss.defining_op()->parent_block(), options_);
  return wants_loss_scaling(options_) ? minimize_scaled(loss) : optimizer_.minimize(loss);
}

// scaled = loss · scale → append_backward → check_finite_and_unscale →
// update_loss_scaling_ → apply_gradients(skip = found_inf).
std::vector<std::pair<Value, Value>> Decorated::minimize_scaled(Value loss) {
  (void)current_startup_program();  // kiln::Error now, before anything is built
  const LossScaling& l = options_.loss_scaling;
  const std::string name = unique_name("loss_scaling");
  Value scale = create_parameter(name, {1}, DataType::Float32, init::Constant(l.init_scale), false);
  Value good = create_parameter(name + "_good_steps", {1}, DataType::Int32, init::Constant(0), false);
  Value bad = create_parameter(name + "_bad_steps", {1}, DataType::Int32, init::Constant(0), false);
  Block& block = *loss.defining_op()->parent_block();
  Builder b = main_builder();
  Operation* const before_scaling = block.back();
  Value factor = scale;
  if (is_shaped(loss.type()) && shaped_data_type(loss.type()) != DataType::Float32)
    factor = b.create<CastOp>(scale, shaped_data_type(loss.type())).result();
  Value scaled = b.create<MulOp>(loss, factor).result();
  auto params_grads = append_backward(scaled);
  if (params_grads.empty())
    throw_error(ErrorKind::InvalidArgument, "amp: the loss depends on no trainable parameter, nothing to optimize");
  set_op_role_after(block, before_scaling, OpRole::Backward);  // the scaling, then backward's own
  Operation* const mark = block.back();
  std::vector<Value> grads;
  for (const auto& [p, g] : params_grads) grads.push_back(g);
  Operation* check = b.create<CheckFiniteAndUnscaleOp>(scale, grads).operation();
  found_inf_ = check->result(check->num_results() - 1);
  if (l.dynamic)
    b.create<UpdateLossScaling_Op>(found_inf_, scale, good, bad,
                                   UpdateLossScaling_Op::Attributes{l.incr_every_n_steps, l.decr_every_n_nan_or_inf,
                                                                    l.incr_ratio, l.decr_ratio});
  set_op_role_after(block, mark, OpRole::Optimize);
  for (std::size_t i = 0; i < params_grads.size(); ++i) params_grads[i].second = check->result(i);
  optimizer_.apply_gradients(params_grads, found_inf_);
  scale_name_ = name;
  return params_grads;
}

namespace {

// The casts to `dtype` that are all `p`'s readers; empty if any reader is
// something else.
std::vector<Operation*> sole_casts_to(Operation* p, DataType dtype) {
  std::vector<Operation*> casts;
  for (auto use : p->result(0).uses()) {
    Operation* user = use.owner();
    if (!user->isa<CastOp>() || CastOp(user).attrs().dtype != dtype) return {};
    casts.push_back(user);
  }
  return casts;
}

// `name`'s f32 CPU tensor in `scope`, of `type`'s dims, rounded to `dtype`
// as kiln.cast rounds it.
Tensor rounded_parameter(const Scope& scope, const std::string& name, Type type, DataType dtype) {
  const Variable* v = scope.find_var(name);
  if (!v || !v->is_initialized())
    throw_error(ErrorKind::NotFound, "amp::cast_parameters: the scope has no parameter '", name,
                "' (run the startup program first)");
  const Tensor& t = v->get<Tensor>();
  if (t.dtype() != DataType::Float32 || !t.place().is_cpu() || t.dims().to_vector() != shaped_dims(type))
    throw_error(ErrorKind::InvalidArgument, "amp::cast_parameters: parameter '", name, "' is ", t.type_string(),
                " on ", t.place().to_string(), ", the program reads an f32 CPU tensor [",
                Dims(shaped_dims(type)).to_string(), "]");
  Tensor low = Tensor::empty(t.dims(), dtype);
  const float* src = t.data<float>();
  auto* dst = static_cast<std::uint16_t*>(low.raw_data());
  for (std::int64_t i = 0, n = t.numel(); i < n; ++i)
    dst[i] = dtype == DataType::BFloat16 ? float_to_bfloat16(src[i]) : float_to_half(src[i]);
  return low;
}

}  // namespace

std::size_t cast_parameters(Program& main, Scope& scope, DataType dtype) {
  if (dtype != DataType::BFloat16 && dtype != DataType::Float16)
    throw_error(ErrorKind::InvalidArgument, "amp::cast_parameters: dtype ", to_string(dtype), " is not bf16 or f16");
  struct Cast {
    Operation* parameter;
    std::vector<Operation*> casts;
    std::string name;
    Tensor low;
  };
  std::vector<Cast> todo;  // every tensor rounded before anything changes
  for (Operation* op : main.block()) {
    if (!op->isa<ParameterOp>() || !is_shaped(op->result(0).type()) ||
        shaped_data_type(op->result(0).type()) != DataType::Float32)
      continue;
    std::vector<Operation*> casts = sole_casts_to(op, dtype);
    if (casts.empty()) continue;
    const std::string name = ParameterOp(op).parameter_name();
    todo.push_back({op, std::move(casts), name + "@" + std::string(to_string(dtype)),
                    rounded_parameter(scope, name, op->result(0).type(), dtype)});
  }
  for (Cast& c : todo) {
    scope.var(c.name).set(std::move(c.low));
    Builder b(main.block());
    b.set_insertion_point(c.parameter);
    const Value low = b.create<ParameterOp>(c.name, c.casts.front()->result(0).type()).result();
    for (Operation* cast : c.casts) {
      cast->result(0).replace_all_uses_with(low);
      cast->erase();
    }
    c.parameter->erase();
  }
  return todo.size();
}

double Decorated::loss_scale(const Scope& scope) const {
  if (scale_name_.empty())
    throw_error(ErrorKind::NotFound, "amp: no loss scale (no minimize with loss scaling yet)");
  const Variable* v = scope.find_var(scale_name_);
  if (!v || !v->is_initialized())
    throw_error(ErrorKind::NotFound, "amp: the scope has no loss-scale parameter '", scale_name_,
                "' (run the startup program first)");
  return v->get<Tensor>().to_vector<float>().at(0);
}

}  // namespace kiln::amp

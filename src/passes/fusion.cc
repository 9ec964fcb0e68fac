// fuse_elementwise (kiln/passes/fusion.h): one walk over a block in program
// order grows groups of fusable ops; each group of two or more becomes one
// kiln.fused_elementwise.
#include "kiln/passes/fusion.h"
#include "kiln/passes/channels_last.h"
#include "kiln/passes/fold_attention_transposes.h"
#include "kiln/passes/fuse_optimizer.h"
#include "kiln/passes/fuse_softmax_cross_entropy.h"
#include "kiln/passes/op_effects.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/dialect/fused_ops.h"
#include "kiln/dialect/binary_ops.h"
#include "kiln/dialect/compare_ops.h"
#include "kiln/dialect/conv_ops.h"
#include "kiln/dialect/linalg_ops.h"
#include "kiln/dialect/norm_ops.h"
#include "kiln/dialect/reduce_ops.h"
#include "kiln/dialect/tensor_ops.h"
#include "kiln/dialect/unary_ops.h"
#include "kiln/ir/builder.h"
#include "kiln/ir/builtin_types.h"
#include "kiln/ir/region.h"
#include "kiln/kernel/cpu_convolution.h"
#include "kiln/kernel/kernel_registry.h"

namespace kiln {

ValueSet live_out_set(const PassContext& ctx) {
  ValueSet keep;
  for (Value v : ctx.live_out()) keep.insert(v.impl());
  return keep;
}

void replace_all_uses(Value from, Value to, PassContext* ctx) {
  if (ctx) ctx->replace_all_uses(from, to);
  else from.replace_all_uses_with(to);
}

void erase_op(Operation* op, PassContext* ctx) {
  if (ctx) ctx->erase_op(op);
  else op->erase();
}

namespace {

const void* key(Value v) { return v.impl(); }

bool floating_tensor(Type t) {
  if (!is_shaped(t)) return false;
  const DataType dt = shaped_data_type(t);
  return dt == DataType::Float32 || dt == DataType::Float64;
}

// A static element count of 1 (every dim known).
bool one_element(Type t) {
  if (!is_shaped(t)) return false;
  std::int64_t n = 1;
  for (std::int64_t d : shaped_dims(t)) {
    if (d < 0) return false;
    n *= d;
  }
  return n == 1;
}

// An op that may be moved across no other: it writes memory another op may
// read, or orders itself with others.
bool barrier(Operation* op) {
  return op->has_trait<Inplace>() || op->has_trait<SideEffect>() || op->has_trait<Communication>() ||
         op->num_regions() > 0;
}

// A kiln.full whose value may stand in for a register of type `t` (not one
// an in-place op updates: its readers after the update see another value).
std::optional<double> constant_of(Value v, Type t) {
  Operation* def = v.defining_op();
  if (!def || !def->isa<FullOp>() || alias_written_in_place(v)) return std::nullopt;
  Type ft = v.type();
  if (!is_shaped(ft) || shaped_data_type(ft) != shaped_data_type(t)) return std::nullopt;
  if (!one_element(ft) && ft != t) return std::nullopt;
  return from_attributes<FullOp::Attributes>(def->attributes(), FullOp::name).value;
}

// The step op is, with the operands it reads (the mean gradient reads only
// dout), or nullopt when it is not fusable as it stands.
struct Candidate {
  FusedStep step;
  std::vector<Value> reads;
};
std::optional<Candidate> candidate(Operation* op, const ValueSet& keep) {
  if (op->num_results() != 1 || op->num_regions() > 0 || has_placement(*op)) return std::nullopt;
  Value r = op->result(0);
  Type t = r.type();
  if (!floating_tensor(t) || keep.count(key(r))) return std::nullopt;
  Candidate c;
  if (!fused_step_for(op->name(), c.step)) return std::nullopt;
  switch (c.step.kind) {
    case FusedStep::Kind::MeanAllGrad: {
      const auto a = from_attributes<GradOf<MeanOp>::Attributes>(op->attributes(), op->name());
      if (!a.axis.empty() || op->num_operands() != 2 || op->operand_source(0).type() != t ||
          !one_element(op->operand_source(1).type()))
        return std::nullopt;
      c.reads = {op->operand_source(1)};
      return c;
    }
    case FusedStep::Kind::Scale: {
      const auto a = from_attributes<ScaleOp::Attributes>(op->attributes(), ScaleOp::name);
      c.step.c0 = a.scale;
      c.step.c1 = a.bias_after_scale ? a.bias : a.scale * a.bias;
      break;
    }
    default: break;
  }
  const std::uint32_t want = c.step.kind == FusedStep::Kind::UnaryGrad || c.step.kind == FusedStep::Kind::Binary ? 2 : 1;
  if (op->num_operands() != want) return std::nullopt;
  for (std::uint32_t i = 0; i < want; ++i) {
    Value v = op->operand_source(i);
    // Same shape as the result, or one element (broadcast); the dtype too.
    if (!v || !is_shaped(v.type()) || shaped_data_type(v.type()) != shaped_data_type(t)) return std::nullopt;
    if (v.type() != t && !one_element(v.type())) return std::nullopt;
    c.reads.push_back(v);
  }
  return c;
}

struct Group {
  Type type;
  std::vector<Operation*> members;  // program order
  std::vector<Candidate> steps;     // per member
  std::ptrdiff_t first = 0;         // position of the first member
  std::ptrdiff_t after = -1;        // the fused op goes after this position
};

class BlockFuser {
 public:
  BlockFuser(Block& block, const ValueSet& keep, PassContext* ctx) : block_(block), keep_(keep), ctx_(ctx) {
    for (Operation* op : block) {
      pos_[op] = static_cast<std::ptrdiff_t>(ops_.size());
      order_[op] = static_cast<double>(ops_.size());
      ops_.push_back(op);
      barriers_.push_back((barriers_.empty() ? 0 : barriers_.back()) + (barrier(op) ? 1 : 0));
    }
  }

  // A key two values share only when their run-time dims are provably
  // equal: the type when every dim is known; else the value whose dims an
  // elementwise chain carries along (a unary op's input, a binary op's
  // operand that is not one element, when both operands agree).
  const void* shape_class(Value v) {
    Type t = v.type();
    if (is_shaped(t)) {
      bool known = true;
      for (std::int64_t d : shaped_dims(t)) known = known && d >= 0;
      if (known) return t.storage();
    }
    if (auto it = class_.find(key(v)); it != class_.end()) return it->second;
    const void* cls = key(v);
    Operation* def = v.defining_op();
    FusedStep s;
    if (def && def->num_results() == 1 && def->num_operands() >= 1 && fused_step_for(def->name(), s)) {
      Value a = def->operand_source(0);
      if (s.kind == FusedStep::Kind::Binary && def->num_operands() == 2) {
        Value b = def->operand_source(1);
        if (one_element(b.type())) cls = shape_class(a);
        else if (one_element(a.type())) cls = shape_class(b);
        else if (const void* ca = shape_class(a); ca == shape_class(b)) cls = ca;
      } else {
        cls = shape_class(a);  // unary, its gradient, scale, a mean's gradient (x)
      }
    }
    class_[key(v)] = cls;
    return cls;
  }

  std::size_t run() {
    for (Operation* op : ops_) {
      std::optional<Candidate> c = candidate(op, keep_);
      if (!c) continue;
      // Every operand that is not one element has the result's dims at run
      // time, not only the same type (-1 dims may broadcast).
      const void* cls = shape_class(op->result(0));
      bool same = true;
      for (Value v : c->reads) same = same && (one_element(v.type()) || shape_class(v) == cls);
      if (!same) continue;
      // A group reads no other group's members: the fused ops move (each
      // to after its latest outside input), so two groups reading each
      // other could each be placed before the other's result. An op reading
      // one group joins it or stays as it is; one reading two stays.
      const std::vector<std::size_t> read = groups_read(op, *c);
      if (read.size() > 1) continue;
      if (!read.empty()) {
        join(read.front(), op, *c);
        continue;
      }
      {
        Group g;
        g.type = op->result(0).type();
        g.first = pos_[op];
        g.after = external_after(g, *c);
        g.members.push_back(op);
        g.steps.push_back(std::move(*c));
        group_of_[op] = groups_.size();
        groups_.push_back(std::move(g));
      }
    }
    std::size_t made = 0;
    for (Group& g : groups_)
      if (g.members.size() >= 2 && build(g)) ++made;
    return made;
  }

 private:
  // Position of v's definition in this block (-1: a block argument, or
  // defined outside: available everywhere here).
  std::ptrdiff_t def_pos(Value v) const {
    Operation* def = v.defining_op();
    if (!def) return -1;
    auto it = pos_.find(def);
    return it == pos_.end() ? -1 : it->second;
  }
  // Position in this block of the op that holds `user` (itself or an
  // ancestor), or the block's end when it is outside.
  std::ptrdiff_t user_pos(Operation* user) const {
    for (Operation* o = user; o; ) {
      auto it = pos_.find(o);
      if (it != pos_.end()) return it->second;
      Block* b = o->parent_block();
      Region* r = b ? b->parent_region() : nullptr;
      o = r ? r->parent_op() : nullptr;
    }
    return static_cast<std::ptrdiff_t>(ops_.size());
  }
  bool member(const Group& g, Operation* op) const {
    auto it = group_of_.find(op);
    return it != group_of_.end() && &groups_[it->second] == &g;
  }
  // Where c's operands from outside the group exist (constants need none).
  std::ptrdiff_t external_after(const Group& g, const Candidate& c) const {
    std::ptrdiff_t after = g.after;
    for (Value v : c.reads) {
      Operation* def = v.defining_op();
      if ((def && member(g, def)) || constant_of(v, g.type)) continue;
      after = std::max(after, def_pos(v));
    }
    return after;
  }

  // The groups whose members define values op reads (a mean's gradient
  // reads x too, for its shape), each once.
  std::vector<std::size_t> groups_read(Operation* op, const Candidate& c) const {
    std::vector<Value> links = c.reads;
    if (c.step.kind == FusedStep::Kind::MeanAllGrad) links.push_back(op->operand_source(0));
    std::vector<std::size_t> out;
    for (Value v : links)
      if (Operation* def = v.defining_op())
        if (auto it = group_of_.find(def); it != group_of_.end())
          if (std::find(out.begin(), out.end(), it->second) == out.end()) out.push_back(it->second);
    return out;
  }

  // Adds op to group `gi` when it may join it.
  void join(std::size_t gi, Operation* op, Candidate& c) {
    Group& g = groups_[gi];
    if (g.type != op->result(0).type() ||
        shape_class(g.members.front()->result(0)) != shape_class(op->result(0)) || !legal(g, op, c))
      return;
    g.after = external_after(g, c);
    g.members.push_back(op);
    g.steps.push_back(std::move(c));
    group_of_[op] = gi;
  }

  // op may join g: no barrier between g's first member and op, and every
  // op outside g reading a member's result comes after the place the fused
  // op would take.
  bool legal(const Group& g, Operation* op, const Candidate& c) const {
    const std::ptrdiff_t p = pos_.at(op);
    const std::ptrdiff_t after = external_after(g, c);
    // Members move to just after `after`: from there to op, no barrier (an
    // in-place update before the first member changes what it reads too).
    const std::ptrdiff_t from = std::min(after + 1, g.first);
    const std::ptrdiff_t before_from = from > 0 ? barriers_[from - 1] : 0;
    if (barriers_[p] - before_from != 0) return false;
    for (Operation* m : g.members)
      for (auto use : m->result(0).uses()) {
        Operation* u = use.owner();
        if (u == op || member(g, u)) continue;
        if (user_pos(u) <= after) return false;
      }
    return true;
  }

  // Register numbers of the fused op's values (by impl).
  using Registers = std::unordered_map<const void*, std::int64_t>;

  bool build(Group& g) {
    // Reads of a value an earlier group replaced now read its fused result.
    for (Candidate& c : g.steps)
      for (Value& v : c.reads)
        if (auto it = replaced_.find(key(v)); it != replaced_.end()) v = it->second;
    Registers reg;
    const std::vector<Value> inputs = group_inputs(g, reg);
    if (inputs.empty()) return false;
    std::vector<Operation*> constants;
    const FusedBody body = group_body(g, reg, static_cast<std::int64_t>(inputs.size()), constants);
    // Results: members read outside the group.
    std::vector<std::int64_t> outputs;
    std::vector<Value> replaced;
    for (Operation* m : g.members) {
      Value v = m->result(0);
      bool outside = v.use_empty();  // read by nobody: kept for DCE to decide
      for (auto use : v.uses())
        if (!member(g, use.owner())) outside = true;
      if (outside) {
        outputs.push_back(reg.at(key(v)));
        replaced.push_back(v);
      }
    }
    if (outputs.empty()) return false;  // nothing reads it: DCE's to remove
    Operation* fused = place_fused(inputs, body, outputs);
    for (std::size_t k = 0; k < replaced.size(); ++k) {
      Value r = fused->result(static_cast<std::uint32_t>(k));
      replace_all_uses(replaced[k], r, ctx_);
      replaced_[key(replaced[k])] = r;
    }
    for (auto it = g.members.rbegin(); it != g.members.rend(); ++it) erase(*it);
    for (Operation* c : constants)
      if (c->result(0).use_empty() && !keep_.count(key(c->result(0)))) erase(c);
    return true;
  }

  // The fused op's operands, each numbered in `reg`: operand 0 gives the
  // shape (the first outside operand of the group's type, else a mean
  // gradient's x, read for its shape only), then every other value the
  // group reads from outside; none when nothing gives the shape.
  std::vector<Value> group_inputs(const Group& g, Registers& reg) const {
    auto external = [&](Value v) {
      Operation* def = v.defining_op();
      return !(def && member(g, def)) && !constant_of(v, g.type);
    };
    Value shape;
    for (const Candidate& c : g.steps)
      for (Value v : c.reads)
        if (!shape && external(v) && v.type() == g.type) shape = v;
    if (!shape)
      for (Operation* m : g.members)
        if (m->isa<GradOf<MeanOp>>()) {
          shape = m->operand_source(0);
          break;
        }
    if (!shape) return {};
    std::vector<Value> inputs{shape};
    reg[key(shape)] = 0;
    for (const Candidate& c : g.steps)
      for (Value v : c.reads)
        if (external(v) && !reg.count(key(v))) {
          reg[key(v)] = static_cast<std::int64_t>(inputs.size());
          inputs.push_back(v);
        }
    return inputs;
  }

  // The body: a constant's step where it is first read (its op into
  // `constants`), then each member's, registers numbered from `next`.
  FusedBody group_body(const Group& g, Registers& reg, std::int64_t next, std::vector<Operation*>& constants) const {
    FusedBody body;
    body.set_first_register(static_cast<std::int32_t>(next));
    for (std::size_t k = 0; k < g.members.size(); ++k) {
      const Candidate& c = g.steps[k];
      std::int32_t r[2] = {-1, -1};
      for (std::size_t i = 0; i < c.reads.size(); ++i) {
        Value v = c.reads[i];
        auto it = reg.find(key(v));
        if (it == reg.end()) {  // a constant, read here first
          FusedStep cs;
          cs.kind = FusedStep::Kind::Const;
          cs.c0 = *constant_of(v, g.type);
          body.add(cs);
          it = reg.emplace(key(v), next++).first;
          constants.push_back(v.defining_op());
        }
        r[i] = static_cast<std::int32_t>(it->second);
      }
      FusedStep s = c.step;
      s.a = r[0];
      s.b = r[1];
      body.add(s);
      reg[key(g.members[k]->result(0))] = next++;
    }
    return body;
  }

  // The fused op, placed after the latest op that now defines an input (an
  // earlier group's fused op may define one), and after the fused ops
  // placed there before.
  Operation* place_fused(const std::vector<Value>& inputs, const FusedBody& body,
                         const std::vector<std::int64_t>& outputs) {
    Operation* anchor = nullptr;
    double at = -1;
    for (Value v : inputs)
      if (Operation* def = v.defining_op(); def) {
        auto it = order_.find(def);
        if (it != order_.end() && it->second > at) {
          at = it->second;
          anchor = def;
        }
      }
    Operation*& last = placed_after_[anchor];
    Operation* after = last ? last : anchor;
    Builder b(block_);
    if (after) b.set_insertion_point_after(after);
    else b.set_insertion_point(block_.front());
    last = b.create<FusedElementwiseOp>(inputs, body, outputs).operation();
    order_[last] = (after ? order_.at(after) : -1.0) + std::ldexp(1.0, -20);
    return last;
  }

  void erase(Operation* op) {
    order_.erase(op);  // its address may come back as a new op's
    placed_after_.erase(op);
    erase_op(op, ctx_);
  }

  Block& block_;
  const ValueSet& keep_;
  PassContext* ctx_;
  std::vector<Operation*> ops_;
  std::unordered_map<Operation*, std::ptrdiff_t> pos_;
  std::vector<std::ptrdiff_t> barriers_;  // barriers at or before each position
  std::vector<Group> groups_;
  std::unordered_map<Operation*, std::size_t> group_of_;
  // Block order of the original ops and of the fused ops placed since (a
  // fused op sits just after its anchor and the fused ops placed there
  // before it).
  std::unordered_map<const Operation*, double> order_;
  std::unordered_map<Operation*, Operation*> placed_after_;
  // Member results replaced by fused results (by the old value's impl: the
  // groups' reads were taken before any group was built).
  std::unordered_map<const void*, Value> replaced_;
  std::unordered_map<const void*, const void*> class_;  // shape_class memo
};

// The only op reading v, or null.
Operation* sole_user(Value v) {
  Operation* user = nullptr;
  for (auto use : v.uses()) {
    if (user && use.owner() != user) return nullptr;
    user = use.owner();
  }
  return user;
}

// Whether an op between `from` and `to` (exclusive; same block) is one
// nothing may move across.
bool barrier_between(Operation* from, Operation* to) {
  for (Operation* o = from->next_in_block(); o && o != to; o = o->next_in_block())
    if (barrier(o)) return true;
  return false;
}

}  // namespace

namespace {

// Whether the target has a kiln.fused_matmul kernel for t's dtype.
bool fused_matmul_runs(Type t, const Place& target) {
  if (!is_shaped(t)) return false;
  const DataType dt = shaped_data_type(t);
  return KernelRegistry::instance().find(IrContext::instance()->op_info<FusedMatmulOp>().id(), target.kind, dt) != nullptr;
}

// The bias `add` adds to the product `prod` (of type t): one element, or
// the product's (known) last dim as a row; null when it is no such bias.
Value matmul_bias(Operation* add, Value prod, Type t) {
  const std::uint32_t pi = add->operand_source(0) == prod ? 0 : 1;
  Value bias = add->operand_source(1 - pi);
  if (bias == prod || !is_shaped(bias.type()) || shaped_data_type(bias.type()) != shaped_data_type(t)) return {};
  const auto& od = shaped_dims(t);
  // A one-element bias too only where the product's last dim is known.
  if ((!od.empty() && od.back() < 0) || !is_row_bias(shaped_dims(bias.type()), od)) return {};
  return bias;
}

// The activation a fused matmul applies after its biased sum `sum`, and
// whether the sum's other readers need it kept (a second result).
struct EpilogueMatch {
  Operation* act = nullptr;
  std::string name;  // its EpilogueActivation name
  bool keep_pre = false;
};

// The name `op` has as the epilogue's activation at `target`, or "" where
// the target's kernel does not apply it: an op of the unary family (CUDA:
// kiln.relu only) or kiln.gelu (either form), reading one operand of type
// t into one result of type t.
std::string epilogue_activation_name(Operation* op, Type t, const Place& target) {
  FusedStep s;
  if (has_placement(*op) || op->num_results() != 1 || op->num_operands() != 1 || op->result(0).type() != t)
    return {};
  if (op->isa<GeluOp>()) return gelu_activation_name(GeluOp(op).attrs().approximate);
  if (!fused_step_for(op->name(), s) || s.kind != FusedStep::Kind::Unary) return {};
  return target.is_cpu() || op->isa<ReluOp>() ? std::string(op->name()) : std::string();
}

// The first op after `add` (in its block) that reads its sum (of type t),
// where it is an activation the target applies: taken, with the sum kept
// when other ops (all later in the block: a training program's gelu_grad)
// read it too. No activation when a reader lies in another block.
EpilogueMatch epilogue_activation(Operation* add, const Block& block, Type t, const Place& target) {
  const Value sum = add->result(0);
  std::size_t readers = 0;
  for (auto use : sum.uses()) {
    if (use.owner()->parent_block() != &block) return {};
    ++readers;  // each use: an op reading sum twice is no activation
  }
  Operation* first = nullptr;
  for (Operation* o = add->next_in_block(); o && !first; o = o->next_in_block())
    for (std::uint32_t i = 0; i < o->num_operands(); ++i)
      if (o->operand_source(i) == sum) first = o;
  if (!first) return {};
  EpilogueMatch m{first, epilogue_activation_name(first, t, target), readers > 1};
  if (m.name.empty()) return {};
  return m;
}

}  // namespace

std::size_t fuse_matmul_epilogue(Block& block, const ValueSet& keep, PassContext* ctx, const Place& target) {
  std::size_t made = 0;
  std::vector<Operation*> matmuls;
  for (Operation* op : block) {
    for (std::uint32_t r = 0; r < op->num_regions(); ++r)
      for (Block* inner : op->region(r)) made += fuse_matmul_epilogue(*inner, keep, ctx, target);
    if (op->isa<MatmulOp>()) matmuls.push_back(op);
  }
  for (Operation* mm : matmuls) {
    Value prod = mm->result(0);
    Type t = prod.type();
    if (!fused_matmul_runs(t, target) || keep.count(key(prod)) || has_placement(*mm)) continue;
    Operation* add = sole_user(prod);
    if (!add || !add->isa<AddOp>() || add->parent_block() != &block || add->result(0).type() != t ||
        has_placement(*add))
      continue;
    Value bias = matmul_bias(add, prod, t);
    if (!bias) continue;
    EpilogueMatch m =
        keep.count(key(add->result(0))) ? EpilogueMatch{} : epilogue_activation(add, block, t, target);
    if (m.act && barrier_between(mm, m.act)) m = {};  // the bias alone, where nothing bars it
    Operation* last_op = m.act ? m.act : add;
    if (barrier_between(mm, last_op)) continue;
    const auto ma = from_attributes<MatmulOp::Attributes>(mm->attributes(), MatmulOp::name);
    Builder b(block);
    b.set_insertion_point(last_op);
    auto fused = b.create<FusedMatmulOp>(mm->operand_source(0), mm->operand_source(1), bias, ma.transpose_x,
                                         ma.transpose_y, m.name, m.keep_pre);
    // The sum's later readers read the kept pre-activation.
    if (m.keep_pre) replace_all_uses(add->result(0), fused.operation()->result(1), ctx);
    replace_all_uses(last_op->result(0), fused.operation()->result(0), ctx);
    if (m.act) erase_op(m.act, ctx);
    erase_op(add, ctx);
    erase_op(mm, ctx);
    ++made;
  }
  return made;
}

namespace {

// The [O] bias that `reshaped` reshapes to [1, O, 1, 1] or [O, 1, 1]; null
// if it is no such reshape.
Value channel_bias(Value reshaped, std::int64_t channels) {
  Operation* r = reshaped.defining_op();
  if (!r || !r->isa<ReshapeOp>()) return {};
  const auto shape = ReshapeOp(r).attrs().shape;
  const bool four = shape == std::vector<std::int64_t>{1, channels, 1, 1} ||
                    shape == std::vector<std::int64_t>{1, -1, 1, 1};
  const bool three = shape == std::vector<std::int64_t>{channels, 1, 1} ||
                     shape == std::vector<std::int64_t>{-1, 1, 1};
  Value bias = r->operand_source(0);
  if ((!four && !three) || !is_shaped(bias.type()) ||
      shaped_dims(bias.type()) != std::vector<std::int64_t>{channels})
    return {};
  return bias;
}

// "relu" or "relu6" when op is a kiln.relu or a kiln.clip to [0, 6]; else "".
const char* conv_activation(Operation* op) {
  if (op->isa<ReluOp>()) return "relu";
  if (op->isa<ClipOp>() && ClipOp(op).attrs().min == 0.0 && ClipOp(op).attrs().max == 6.0)
    return "relu6";
  return "";
}

// The activation after a conv's biased output `sum` that the conv can take
// over: relu / relu6 (sum's sole reader), or silu (sum read only by
// s = sigmoid(sum) and by sum · s, s only by that product); `ops` are its
// ops in block order (empty: none). Values in `keep` stay.
struct ConvEpilogue {
  const char* activation = "none";
  std::vector<Operation*> ops;
};
ConvEpilogue conv_epilogue_after(Value sum, const Block& block, const ValueSet& keep) {
  auto fusable = [&](Operation* op) {
    return op && op->parent_block() == &block && !has_placement(*op);
  };
  if (keep.count(key(sum))) return {};
  if (Operation* act = sole_user(sum); fusable(act)) {
    const char* name = conv_activation(act);
    return *name ? ConvEpilogue{name, {act}} : ConvEpilogue{};
  }
  if (sum.use_count() != 2) return {};
  Operation *sig = nullptr, *mul = nullptr;
  for (auto use : sum.uses()) {
    if (use.owner()->isa<SigmoidOp>()) sig = use.owner();
    else if (use.owner()->isa<MulOp>()) mul = use.owner();
  }
  if (!fusable(sig) || !fusable(mul) || sole_user(sig->result(0)) != mul ||
      keep.count(key(sig->result(0))) || mul->result(0).type() != sum.type())
    return {};
  const bool reads_both = (mul->operand_source(0) == sum && mul->operand_source(1) == sig->result(0)) ||
                          (mul->operand_source(1) == sum && mul->operand_source(0) == sig->result(0));
  return reads_both ? ConvEpilogue{"silu", {sig, mul}} : ConvEpilogue{};
}

}  // namespace

std::size_t fuse_conv_epilogue(Block& block, const ValueSet& keep, PassContext* ctx) {
  std::size_t made = 0;
  std::vector<Operation*> convs;
  for (Operation* op : block)  // NCHW ones: an NHWC conv's bias is no [1, C, 1, 1] reshape
    if (op->isa<Conv2dOp>() && Conv2dOp(op).attrs().data_format != "NHWC") convs.push_back(op);
  for (Operation* conv : convs) {
    Value y = conv->result(0);
    Operation* add = sole_user(y);
    if (keep.count(key(y)) || !floating_tensor(y.type()) || has_placement(*conv) || !add ||
        !add->isa<AddOp>() || add->parent_block() != &block || add->result(0).type() != y.type() ||
        has_placement(*add))
      continue;
    const auto& dims = shaped_dims(y.type());
    if (dims.size() != 4 || dims[1] < 0) continue;
    Value other = add->operand_source(add->operand_source(0) == y ? 1 : 0);
    Value bias = channel_bias(other, dims[1]);
    if (!bias || other == y || shaped_data_type(bias.type()) != shaped_data_type(y.type())) continue;
    const ConvEpilogue epilogue = conv_epilogue_after(add->result(0), block, keep);
    Operation* last = epilogue.ops.empty() ? add : epilogue.ops.back();
    if (barrier_between(conv, last)) continue;
    Builder b(block);
    b.set_insertion_point(last);
    const auto a = Conv2dOp(conv).attrs();
    // A training program's optimizer updates w in place every step.
    const bool trained = alias_written_in_place(conv->operand_source(1), ctx);
    Value fused = b.create<FusedConv2dOp>(conv->operand_source(0), conv->operand_source(1), bias,
                                          a.strides, a.paddings, a.dilations, a.groups,
                                          epilogue.activation, "NCHW", Value(), trained)
                      .result();
    Operation* reshape = other.defining_op();
    replace_all_uses(last->result(0), fused, ctx);
    for (auto it = epilogue.ops.rbegin(); it != epilogue.ops.rend(); ++it) erase_op(*it, ctx);
    erase_op(add, ctx);
    erase_op(conv, ctx);
    if (reshape->result(0).use_empty() && !keep.count(key(reshape->result(0))))
      erase_op(reshape, ctx);
    ++made;
  }
  return made;
}

std::size_t fuse_conv_residual(Block& block, const ValueSet& keep, PassContext* ctx) {
  std::size_t made = 0;
  std::vector<Operation*> convs;
  for (Operation* op : block)
    if (op->isa<FusedConv2dOp>() && op->num_operands() == 3 && FusedConv2dOp(op).attrs().activation == "none")
      convs.push_back(op);
  for (Operation* conv : convs) {
    Value y = conv->result(0);
    Operation* add = sole_user(y);
    if (keep.count(key(y)) || has_placement(*conv) || !add || !add->isa<AddOp>() ||
        add->parent_block() != &block || has_placement(*add) || add->operand_source(0) == add->operand_source(1))
      continue;
    Value residual = add->operand_source(add->operand_source(0) == y ? 1 : 0);
    if (residual.type() != y.type() || add->result(0).type() != y.type()) continue;
    const ConvEpilogue epilogue = conv_epilogue_after(add->result(0), block, keep);
    Operation* last = epilogue.ops.empty() ? add : epilogue.ops.back();
    if (barrier_between(conv, last)) continue;
    Builder b(block);
    b.set_insertion_point(last);
    auto a = FusedConv2dOp(conv).attrs();
    Value fused = b.create<FusedConv2dOp>(conv->operand_source(0), conv->operand_source(1),
                                          conv->operand_source(2), a.strides, a.paddings, a.dilations,
                                          a.groups, epilogue.activation, a.data_format, residual,
                                          a.weights_trained)
                      .result();
    replace_all_uses(last->result(0), fused, ctx);
    for (auto it = epilogue.ops.rbegin(); it != epilogue.ops.rend(); ++it) erase_op(*it, ctx);
    erase_op(add, ctx);
    erase_op(conv, ctx);
    ++made;
  }
  return made;
}

namespace {

// The per-channel factors s that `mul` multiplies an NHWC conv's x by: the
// operand other than x, of x's dtype, [N or 1, 1, 1, C] against x's dims;
// null if there is none.
Value channel_factors(Operation* mul, Value product) {
  for (std::uint32_t i = 0; i < 2; ++i) {
    Value x = mul->operand_source(i), s = mul->operand_source(1 - i);
    if (x.type() != product.type() || !is_shaped(s.type()) ||
        shaped_data_type(s.type()) != shaped_data_type(x.type()))
      continue;
    const auto& xd = shaped_dims(x.type());
    const auto& sd = shaped_dims(s.type());
    const bool fits = xd.size() == 4 && sd.size() == 4 && xd[3] >= 0 && sd[3] == xd[3] && sd[1] == 1 && sd[2] == 1;
    if (fits && (sd[0] == 1 || sd[0] == xd[0])) return s;
  }
  return Value();
}

// Whether the CPU kernel of the channel_scaled_conv2d that would replace
// `conv` (NHWC, x's spatial dims and both channel counts known) folds its
// factors into the weights rather than writing x ⊙ scale as the mul does.
bool kernel_folds_scale(Operation* conv) {
  const auto a = FusedConv2dOp(conv).attrs();
  const auto& x = shaped_dims(conv->operand_source(0).type());
  const auto& w = shaped_dims(conv->operand_source(1).type());
  if (a.data_format != "NHWC" || x.size() != 4 || w.size() != 4) return false;
  for (std::size_t i = 1; i < 4; ++i)
    if (x[i] < 0 || w[i] < 0) return false;
  if (w[0] < 0) return false;
  const Conv2dGeometry g =
      conv::geometry(FusedConv2dOp::name, Dims{1, x[3], x[1], x[2]}, Dims{w[0], w[1], w[2], w[3]}, a.strides,
                     a.paddings, a.dilations, a.groups);
  return cpu_folds_channel_scale(g);
}

}  // namespace

std::size_t fuse_conv_input_scale(Block& block, const ValueSet& keep, PassContext* ctx) {
  std::size_t made = 0;
  std::vector<Operation*> convs;
  for (Operation* op : block)
    if (op->isa<FusedConv2dOp>() && !FusedConv2dOp(op).attrs().weights_trained && !has_placement(*op))
      convs.push_back(op);
  for (Operation* conv : convs) {
    Value product = conv->operand_source(0);
    Operation* mul = product.defining_op();
    const DataType dt = shaped_data_type(product.type());
    if (!mul || !mul->isa<MulOp>() || mul->parent_block() != &block || has_placement(*mul) ||
        keep.count(key(product)) || sole_user(product) != conv || dt != DataType::Float32 ||
        !kernel_folds_scale(conv) || barrier_between(mul, conv))
      continue;
    const auto a = FusedConv2dOp(conv).attrs();
    const Value s = channel_factors(mul, product);
    if (!s) continue;
    const Value x = mul->operand_source(mul->operand_source(0) == s ? 1 : 0);
    Builder b(block);
    b.set_insertion_point(conv);
    const Value residual = conv->num_operands() == 4 ? conv->operand_source(3) : Value();
    Value fused = b.create<ChannelScaledConv2dOp>(x, s, conv->operand_source(1), conv->operand_source(2), a, residual)
                      .result();
    replace_all_uses(conv->result(0), fused, ctx);
    erase_op(conv, ctx);
    erase_op(mul, ctx);
    ++made;
  }
  return made;
}

namespace {

// Whether `mean` is kiln.mean over an NHWC value's axes 1 and 2, kept:
// the pixels of each image and channel.
bool mean_over_pixels(Operation* mean) {
  if (!mean->isa<MeanOp>()) return false;
  const auto a = MeanOp(mean).attrs();
  return a.keepdim && (a.axis == std::vector<std::int64_t>{1, 2} || a.axis == std::vector<std::int64_t>{-3, -2});
}

// The inference NHWC f32 fused_conv2d without residual that defines `y`,
// if y's image has H·W > 1 pixels and O > 1 channels (kiln.mean's bits
// then: its column sums); else null.
Operation* pooled_conv(Value y, const Block& block) {
  Operation* conv = y.defining_op();
  if (!conv || !conv->isa<FusedConv2dOp>() || conv->num_operands() != 3 || conv->parent_block() != &block ||
      has_placement(*conv) || shaped_data_type(y.type()) != DataType::Float32)
    return nullptr;
  const auto a = FusedConv2dOp(conv).attrs();
  const auto& d = shaped_dims(y.type());
  if (a.data_format != "NHWC" || a.weights_trained || d.size() != 4 || d[1] < 0 || d[2] < 0 || d[1] * d[2] < 2 ||
      d[3] < 2)
    return nullptr;
  return conv;
}

}  // namespace

std::size_t fuse_conv_channel_mean(Block& block, const ValueSet& keep, PassContext* ctx) {
  (void)keep;  // both results stay: nothing is fused away
  std::size_t made = 0;
  std::vector<Operation*> means;
  for (Operation* op : block)
    if (mean_over_pixels(op) && !has_placement(*op)) means.push_back(op);
  for (Operation* mean : means) {
    Operation* conv = pooled_conv(mean->operand_source(0), block);
    if (!conv || barrier_between(conv, mean)) continue;
    Builder b(block);
    b.set_insertion_point(conv);
    Operation* fused = b.create<FusedConv2dMeanOp>(conv->operand_source(0), conv->operand_source(1),
                                                   conv->operand_source(2), FusedConv2dOp(conv).attrs())
                           .operation();
    replace_all_uses(conv->result(0), fused->result(0), ctx);
    replace_all_uses(mean->result(0), fused->result(1), ctx);
    erase_op(mean, ctx);
    erase_op(conv, ctx);
    ++made;
  }
  return made;
}

namespace {

// Whether `conv` is an NHWC fused_conv2d of an inference program without
// residual, on the block, unplaced.
bool plain_nhwc_conv(Operation* conv, const Block& block) {
  if (!conv || !conv->isa<FusedConv2dOp>() || conv->num_operands() != 3 || conv->parent_block() != &block ||
      has_placement(*conv))
    return false;
  const auto a = FusedConv2dOp(conv).attrs();
  return a.data_format == "NHWC" && !a.weights_trained;
}

// The geometry of an NHWC fused_conv2d (image count 1) from its operand
// types, if every dim but N is known.
std::optional<Conv2dGeometry> static_geometry(Operation* conv) {
  const auto a = FusedConv2dOp(conv).attrs();
  const auto& x = shaped_dims(conv->operand_source(0).type());
  const auto& w = shaped_dims(conv->operand_source(1).type());
  if (x.size() != 4 || w.size() != 4) return std::nullopt;
  for (std::size_t i = 0; i < 4; ++i)
    if ((i > 0 && x[i] < 0) || w[i] < 0) return std::nullopt;
  return conv::geometry(FusedConv2dOp::name, Dims{1, x[3], x[1], x[2]}, Dims{w[0], w[1], w[2], w[3]}, a.strides,
                        a.paddings, a.dilations, a.groups);
}

// The 1x1 fused_conv2d whose result the depthwise fused_conv2d `dw` alone
// reads, where the CPU computes the pair in one pass; else null.
Operation* expansion_of(Operation* dw, const Block& block, const ValueSet& keep) {
  Value mid = dw->operand_source(0);
  Operation* pw = mid.defining_op();
  if (!plain_nhwc_conv(pw, block) || keep.count(key(mid)) || sole_user(mid) != dw ||
      shaped_data_type(mid.type()) != DataType::Float32 || barrier_between(pw, dw))
    return nullptr;
  const auto g1 = static_geometry(pw), g2 = static_geometry(dw);
  if (!g1 || !g2 || g1->groups != 1 || g2->groups != g2->c || g2->o != g2->c) return nullptr;
  return cpu_fuses_pointwise_depthwise(*g1, *g2) ? pw : nullptr;
}

}  // namespace

std::size_t fuse_pointwise_depthwise(Block& block, const ValueSet& keep, PassContext* ctx) {
  std::size_t made = 0;
  std::vector<Operation*> convs;
  for (Operation* op : block)
    if (plain_nhwc_conv(op, block)) convs.push_back(op);
  for (Operation* dw : convs) {
    Operation* pw = expansion_of(dw, block, keep);
    if (!pw) continue;
    const auto pa = FusedConv2dOp(pw).attrs(), da = FusedConv2dOp(dw).attrs();
    Builder b(block);
    b.set_insertion_point(dw);
    Value fused = b.create<PointwiseDepthwiseConv2dOp>(
                       pw->operand_source(0), pw->operand_source(1), pw->operand_source(2), dw->operand_source(1),
                       dw->operand_source(2),
                       PointwiseDepthwiseConv2dOp::Attributes{da.strides, da.paddings, da.dilations, pa.activation,
                                                              da.activation})
                      .result();
    replace_all_uses(dw->result(0), fused, ctx);
    erase_op(dw, ctx);
    erase_op(pw, ctx);
    ++made;
  }
  return made;
}

namespace {

// A batch norm's activation (kiln.relu, kiln.clip to [0, 6]) and, in a
// training program, that activation's gradient op and the batch norm's
// gradient op that alone reads it.
struct BatchNormEpilogue {
  const char* activation = "";
  Operation *act = nullptr, *act_grad = nullptr, *grad = nullptr;
};

// Sets e.grad to bn's gradient op where it fuses with the activation's
// gradient (a clip's, found by the caller, or a relu's, found here into
// e.act_grad): that gradient's dx is read by bn's gradient op alone, as its
// dy. Else e.grad is null.
void find_batch_norm_grads(Operation* bn, const Block& block, const ValueSet& keep, BatchNormEpilogue& e) {
  Operation* grad = nullptr;
  for (auto use : bn->result(3).uses())
    if (use.owner()->isa<GradOf<BatchNormOp>>() && use.owner()->operand_source(2) == bn->result(3)) grad = use.owner();
  if (!e.act_grad && e.act->isa<ReluOp>())
    for (auto use : e.act->result(0).uses())
      if (use.owner()->isa<GradOf<ReluOp>>() && use.owner()->operand_source(0) == e.act->result(0))
        e.act_grad = use.owner();
  Operation* ag = e.act_grad;
  const bool fusable = ag && grad && ag->parent_block() == &block && grad->parent_block() == &block &&
                       !has_placement(*ag) && !has_placement(*grad) && !keep.count(key(ag->result(0))) &&
                       sole_user(ag->result(0)) == grad && grad->operand_source(4) == ag->result(0) &&
                       !barrier_between(ag, grad);
  e.grad = fusable ? grad : nullptr;
}

// What of bn's y fuses: its activation alone (y's sole reader, a relu whose
// gradient reads its output), or with the gradients. Nothing (null act)
// when y is kept or read otherwise, or a clip's gradient (which reads y)
// cannot fuse with bn's.
BatchNormEpilogue batch_norm_epilogue(Operation* bn, const Block& block, const ValueSet& keep) {
  Value y = bn->result(0);
  if (keep.count(key(y)) || has_placement(*bn)) return {};
  BatchNormEpilogue e;
  for (auto use : y.uses()) {
    Operation* user = use.owner();
    if (!e.act && *conv_activation(user)) e.act = user;
    else if (!e.act_grad && user->isa<GradOf<ClipOp>>() && user->operand_source(0) == y) e.act_grad = user;
    else return {};
  }
  if (!e.act || e.act->parent_block() != &block || has_placement(*e.act) ||
      (e.act_grad && !e.act->isa<ClipOp>()))
    return {};
  e.activation = conv_activation(e.act);
  find_batch_norm_grads(bn, block, keep, e);
  if (e.grad) return e;
  // Without the gradients a relu still fuses (its gradient reads its own
  // output, which the fused op gives); a clip does not (its gradient reads
  // y, which fusing removes).
  if (e.act->isa<ClipOp>() && e.act_grad) return {};
  e.act_grad = nullptr;
  return e;
}

// bn's gradient op (reading the activation's gradient) as the fused
// op's, reading the activation's dout instead.
void fuse_batch_norm_grad(Operation* fused, const BatchNormEpilogue& e, PassContext* ctx) {
  Builder b(*e.grad->parent_block());
  b.set_insertion_point(e.grad);
  Operation* g = b.create<GradOf<FusedBatchNormOp>>(fused, fused->operand_source(0), fused->operand_source(1),
                                                    fused->operand_source(2), fused->result(3), fused->result(4),
                                                    e.act_grad->operand_source(1))
                     .operation();
  for (std::uint32_t i = 0; i < 3; ++i) replace_all_uses(e.grad->result(i), g->result(i), ctx);
  erase_op(e.grad, ctx);
  erase_op(e.act_grad, ctx);
}

}  // namespace

namespace {

// Whether the target runs fused_batch_norm and its gradient in bn's dtype:
// the CPU always (its kernels' dtypes are batch_norm's), another place
// where both have a kernel there.
bool fused_batch_norm_runs(const Operation& bn, const Place& target) {
  if (target.is_cpu()) return true;
  const DataType dt = kernel_dtype(bn);
  const KernelRegistry& kernels = KernelRegistry::instance();
  IrContext* ir = IrContext::instance();
  return kernels.find(ir->op_info<FusedBatchNormOp>().id(), target.kind, dt) &&
         kernels.find(ir->op_info<GradOf<FusedBatchNormOp>>().id(), target.kind, dt);
}

}  // namespace

std::size_t fuse_batch_norm_activation(Block& block, const ValueSet& keep, PassContext* ctx,
                                       const Place& target) {
  std::size_t made = 0;
  std::vector<Operation*> norms;
  for (Operation* op : block)
    if (op->isa<BatchNormOp>() && fused_batch_norm_runs(*op, target)) norms.push_back(op);
  for (Operation* bn : norms) {
    const BatchNormEpilogue e = batch_norm_epilogue(bn, block, keep);
    if (!e.act) continue;
    Builder b(block);
    b.set_insertion_point(bn);  // where the running statistics are updated
    const auto a = BatchNormOp(bn).attrs();
    Operation* fused = b.create<FusedBatchNormOp>(bn->operand_source(0), bn->operand_source(1), bn->operand_source(2),
                                                  bn->operand_source(3), bn->operand_source(4), a.momentum,
                                                  a.epsilon, a.is_test, a.data_format, e.activation)
                           .operation();
    replace_all_uses(e.act->result(0), fused->result(0), ctx);
    for (std::uint32_t i = 1; i < 5; ++i) replace_all_uses(bn->result(i), fused->result(i), ctx);
    if (e.grad) fuse_batch_norm_grad(fused, e, ctx);
    erase_op(e.act, ctx);
    erase_op(bn, ctx);
    made += e.grad ? 2 : 1;
  }
  return made;
}

std::size_t fuse_elementwise(Block& block, const ValueSet& keep, PassContext* ctx) {
  std::size_t made = 0;
  for (Operation* op : block)
    for (std::uint32_t r = 0; r < op->num_regions(); ++r)
      for (Block* inner : op->region(r)) made += fuse_elementwise(*inner, keep, ctx);
  made += BlockFuser(block, keep, ctx).run();
  return made;
}

namespace {

// "fuse": fold_attention_transposes, fuse_softmax_cross_entropy,
// fuse_conv_epilogue, fuse_conv_residual, channels_last, fuse_conv_input_scale,
// fuse_conv_channel_mean, fuse_pointwise_depthwise, fuse_batch_norm_activation,
// fuse_matmul_epilogue, fuse_elementwise, then
// fuse_optimizer_updates (kiln/passes/fuse_optimizer.h) over the program
// (regions included), keeping the context's live-out values. For a CUDA
// target those whose ops have CUDA kernels: fold_attention_transposes
// (where the flash kernels read BLHD), fuse_softmax_cross_entropy,
// fuse_batch_norm_activation (f32, f64), fuse_matmul_epilogue (relu and
// gelu the activations: cuBLASLt's epilogues, or one pass after them) and
// fuse_optimizer_updates; for
// other targets nothing.
class FusePass : public Pass {
 public:
  FusePass() : Pass("fuse") {}
  void run(Program& program, PassContext& ctx) override {
    if (ctx.target_place.kind == PlaceKind::Cuda) return run_for_cuda(program, ctx);
    if (!ctx.target_place.is_cpu()) return;
    fold_attention_transposes(program.block(), live_out_set(ctx), &ctx);
    // After the fold, which may have moved live-out values onto new ones.
    const ValueSet keep = live_out_set(ctx);
    fuse_softmax_cross_entropy(program.block(), keep, &ctx);
    fuse_conv_epilogue(program.block(), keep, &ctx);
    fuse_conv_residual(program.block(), keep, &ctx);
    convert_to_channels_last(program.block(), keep, &ctx);
    fuse_conv_input_scale(program.block(), live_out_set(ctx), &ctx);
    fuse_conv_channel_mean(program.block(), live_out_set(ctx), &ctx);
    fuse_pointwise_depthwise(program.block(), live_out_set(ctx), &ctx);
    fuse_batch_norm_activation(program.block(), live_out_set(ctx), &ctx);
    fuse_after_layout(program, live_out_set(ctx), ctx);
  }

 private:
  // After channels_last, which may have moved live-out values onto transposes.
  static void fuse_after_layout(Program& program, const ValueSet& keep, PassContext& ctx) {
    fuse_matmul_epilogue(program.block(), keep, &ctx);
    fuse_elementwise(program.block(), keep, &ctx);
    fuse_optimizer_updates(program.block(), &ctx);
  }
  // The rewrites whose ops have CUDA kernels.
  static void run_for_cuda(Program& program, PassContext& ctx) {
    fold_attention_transposes(program.block(), live_out_set(ctx), &ctx, ctx.target_place);
    const ValueSet keep = live_out_set(ctx);
    fuse_softmax_cross_entropy(program.block(), keep, &ctx);
    fuse_batch_norm_activation(program.block(), live_out_set(ctx), &ctx, ctx.target_place);
    fuse_matmul_epilogue(program.block(), live_out_set(ctx), &ctx, ctx.target_place);
    fuse_optimizer_updates(program.block(), &ctx);
  }
};

}  // namespace

std::unique_ptr<Pass> create_fuse_pass() { return std::make_unique<FusePass>(); }

KILN_REGISTER_PASS("fuse", [] { return create_fuse_pass(); },
                   "attention's head transposes into its layout, softmax + cross-entropy into "
                   "kiln.cross_entropy (CPU, CUDA), conv2d + bias + relu / relu6 / silu into "
                   "kiln.fused_conv2d (then NHWC where the CPU's convolutions prefer it), batch_norm + "
                   "relu / relu6 into kiln.fused_batch_norm (CPU, CUDA), matmul + bias + "
                   "activation into kiln.fused_matmul (CPU; CUDA: bias + relu / gelu), elementwise chains into "
                   "kiln.fused_elementwise (CPU), optimizer updates into kiln.merged_*_ (CPU, CUDA)");

}  // namespace kiln

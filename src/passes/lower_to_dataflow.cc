// The "lower_to_dataflow" pass (kiln/passes/lower_to_dataflow.h).
#include "kiln/passes/lower_to_dataflow.h"

#include <cmath>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kiln/dialect/control_flow_ops.h"
#include "kiln/dialect/dataflow_ops.h"
#include "kiln/kernel/kernel_cost.h"
#include "kiln/ir/builder.h"
#include "kiln/kernel/kernel_registry.h"
#include "kiln/passes/op_effects.h"

namespace kiln {

namespace {

constexpr std::int64_t kParallelIterations = 10;

// Whether an op may run once before a loop instead of once per iteration:
// one without effects (has_effect: no random draw, side effect or
// communication, and a known behaviour — a recv, an op of unknown traits,
// runs each time it is reached).
bool hoistable(const Operation& op) {
  return op.num_regions() == 0 && !is_dataflow_op(op) && !has_effect(op);
}

bool block_can_lower(const Block& block) {
  for (const Operation* op : block) {
    for (std::uint32_t r = 0; r < op->num_regions(); ++r)
      for (const Block* b : op->region(r))
        if (!block_can_lower(*b)) return false;
    if (auto w = const_cast<Operation*>(op)->dyn_cast<WhileOp>()) {
      if (w.attrs().max_iterations >= 0) return false;
      const Block& body = w.body_region().front();
      const Operation* yield = body.back();
      if (!yield || yield->num_operands() != 1 + w.num_carried()) return false;
      if (!type_fits(yield->operand_source(0).type(), w.cond().type())) return false;
      for (std::uint32_t k = 0; k < w.num_carried(); ++k)
        if (!type_fits(yield->operand_source(1 + k).type(), op->operand_source(1 + k).type())) return false;
      // A body op reading nothing of the loop that cannot move out of it.
      std::unordered_set<const detail::ValueImpl*> variant;
      for (std::uint32_t a = 0; a < body.num_arguments(); ++a) variant.insert(body.argument(a).impl());
      for (const Operation* b : body) {
        bool reads_loop = b->num_regions() != 0;  // a nested op reads the loop through its operands
        for (std::uint32_t i = 0; i < b->num_operands(); ++i)
          if (variant.count(b->operand_source(i).impl())) reads_loop = true;
        if (reads_loop || is_dataflow_op(*b)) {
          for (std::uint32_t r = 0; r < b->num_results(); ++r) variant.insert(b->result(r).impl());
        } else if (!hoistable(*b) && !b->isa<YieldOp>()) {
          return false;
        }
      }
    } else if (op->isa<IfOp>()) {
      if (op->region(0).empty()) return false;
      // An op reading nothing would run whichever branch is taken.
      for (std::uint32_t r = 0; r < op->num_regions(); ++r)
        for (const Block* b : op->region(r))
          for (const Operation* o : *b)
            if (o->num_operands() == 0 && !o->isa<YieldOp>() && !hoistable(*o)) return false;
    } else if (op->num_regions()) {
      return false;  // some other op with regions
    }
  }
  return true;
}

bool has_structured(const Block& block) {
  for (const Operation* op : block)
    if (op->num_regions()) return true;
  return false;
}

class Lowering {
 public:
  // Frame names already used by the program's own enters are not reused.
  Lowering(PassContext& ctx, const Program& program) : ctx_(ctx) {
    for (Block* b : blocks_innermost_first(program))
      for (Operation* op : *b)
        if (auto e = op->dyn_cast<EnterOp>()) taken_.insert(e.attrs().frame_name);
  }

  void lower_block(Block& block) {
    std::vector<Operation*> ops;
    for (Operation* op : block) ops.push_back(op);
    for (Operation* op : ops) {
      if (!op->num_regions()) continue;
      for (std::uint32_t r = 0; r < op->num_regions(); ++r)
        for (Block* b : op->region(r)) lower_block(*b);
      if (op->isa<IfOp>()) lower_if(op);
      else if (op->isa<WhileOp>()) lower_while(op);
    }
  }

 private:
  // Values of `ops` (in order, already in the block the lowering fills)
  // reachable from `seeds`, after every op that reads none of them but reads
  // something has its operands gated: it reads them through a switch on
  // `pred` (the `side` output), so it is dead where its branch, or its
  // loop's exit iteration, would not run it (TensorFlow's pivot). Ops
  // without operands (pure constants) stay as they are.
  std::unordered_set<const detail::ValueImpl*> gate_unreached(const std::vector<Operation*>& ops,
                                                              const std::vector<Value>& seeds, Value pred,
                                                              bool side) {
    std::unordered_set<const detail::ValueImpl*> live;
    for (Value v : seeds) live.insert(v.impl());
    std::unordered_map<const detail::ValueImpl*, Value> gated;
    for (Operation* o : ops) {
      bool hit = false;
      for (std::uint32_t i = 0; i < o->num_operands() && !hit; ++i) hit = live.count(o->operand_source(i).impl());
      if (!hit && o->num_operands()) {
        Builder gb(*o->parent_block());
        gb.set_insertion_point(o);
        for (std::uint32_t i = 0; i < o->num_operands(); ++i) {
          Value v = o->operand_source(i);
          auto [g, fresh] = gated.try_emplace(v.impl());
          if (fresh) {
            auto sw = gb.create<SwitchOp>(v, pred);
            g->second = side ? Value(sw.output_true()) : Value(sw.output_false());
          }
          o->set_operand(i, g->second);
        }
        hit = true;
      }
      if (hit)
        for (std::uint32_t r = 0; r < o->num_results(); ++r) live.insert(o->result(r).impl());
    }
    return live;
  }

  static std::vector<Operation*> body_ops(Block& b) {
    std::vector<Operation*> ops;
    for (Operation* op : b)
      if (!op->isa<YieldOp>()) ops.push_back(op);
    return ops;
  }

  void lower_if(Operation* op) {
    auto iff = op->dyn_cast<IfOp>();
    Builder b(*op->parent_block());
    b.set_insertion_point(op);
    const Value pred = iff.pred();
    std::vector<SwitchOp> switches;
    for (std::uint32_t j = 0; j < iff.num_captures(); ++j)
      switches.push_back(b.create<SwitchOp>(op->operand_source(1 + j), pred));
    std::vector<Value> yields[2];
    for (std::uint32_t r = 0; r < 2; ++r) {
      if (op->region(r).empty()) continue;
      Block& blk = op->region(r).front();
      std::vector<Value> seeds;
      for (std::uint32_t j = 0; j < blk.num_arguments(); ++j) {
        Value side = r == 0 ? Value(switches[j].output_true()) : Value(switches[j].output_false());
        blk.argument(j).replace_all_uses_with(side);
        seeds.push_back(side);
      }
      std::vector<Operation*> ops = body_ops(blk);
      for (Operation* o : ops) o->move_before(op);
      auto live = gate_unreached(ops, seeds, pred, r == 0);
      b.set_insertion_point(op);
      Operation* yield = blk.back();
      for (std::uint32_t k = 0; k < yield->num_operands(); ++k) {
        Value v = yield->operand_source(k);
        if (!live.count(v.impl())) {  // live in both branches: gate it
          auto gate = b.create<SwitchOp>(v, pred);
          v = r == 0 ? Value(gate.output_true()) : Value(gate.output_false());
        }
        yields[r].push_back(v);
      }
    }
    for (std::uint32_t k = 0; k < op->num_results(); ++k) {
      auto m = b.create<MergeOp>(std::vector<Value>{yields[0][k], yields[1][k]});
      ctx_.replace_all_uses(op->result(k), m.output());
    }
    ctx_.erase_op(op);
  }

  void lower_while(Operation* op) {
    auto w = op->dyn_cast<WhileOp>();
    std::string frame;
    do frame = "while_" + std::to_string(next_frame_++);
    while (taken_.count(frame));
    Block& body = w.body_region().front();
    Builder b(*op->parent_block());
    const std::uint32_t carried = w.num_carried();

    // Body ops that read nothing of the loop run once, before it.
    std::unordered_set<const detail::ValueImpl*> variant;
    for (std::uint32_t a = 0; a < body.num_arguments(); ++a) variant.insert(body.argument(a).impl());
    std::vector<Operation*> ops, hoisted;
    for (Operation* o : body_ops(body)) {
      bool reads_loop = false;
      for (std::uint32_t i = 0; i < o->num_operands(); ++i)
        if (variant.count(o->operand_source(i).impl())) reads_loop = true;
      if (!reads_loop && hoistable(*o)) {
        hoisted.push_back(o);
        continue;
      }
      if (!reads_loop && !is_dataflow_op(*o))
        throw_error(ErrorKind::Unimplemented, "lower_to_dataflow: op '", o->name(),
                    "' in a kiln.while body reads nothing of the loop and cannot run before it");
      for (std::uint32_t r = 0; r < o->num_results(); ++r) variant.insert(o->result(r).impl());
      ops.push_back(o);
    }
    for (Operation* o : hoisted) o->move_before(op);
    b.set_insertion_point(op);

    auto enter = [&](Value v, bool constant) {
      return b.create<EnterOp>(v, frame, constant, kParallelIterations).result();
    };
    Value cond_merged = b.create<MergeOp>(std::vector<Value>{enter(w.cond(), false)}).output();
    std::vector<Value> merged, taken;
    for (std::uint32_t k = 0; k < carried; ++k) {
      Value m = b.create<MergeOp>(std::vector<Value>{enter(op->operand_source(1 + k), false)}).output();
      merged.push_back(m);
      auto sw = b.create<SwitchOp>(m, cond_merged);
      ctx_.replace_all_uses(op->result(k), b.create<ExitOp>(sw.output_false()).result());
      taken.push_back(sw.output_true());
      body.argument(k).replace_all_uses_with(sw.output_true());
    }
    for (std::uint32_t j = 0; j < w.num_captures(); ++j)
      body.argument(carried + j).replace_all_uses_with(enter(op->operand_source(1 + carried + j), true));
    // Hoisted values the loop reads enter as constants.
    for (Operation* h : hoisted)
      for (std::uint32_t r = 0; r < h->num_results(); ++r) {
        Value v = h->result(r);
        bool inside = false;
        for (OpOperand u : v.uses())
          if (u.owner()->parent_block() == &body) inside = true;
        if (!inside) continue;
        Value c = enter(v, true);
        v.replace_uses_if(c, [&](OpOperand u) { return u.owner()->parent_block() == &body; });
      }
    for (Operation* o : ops) o->move_before(op);
    // Every body op must be dead in the iteration that takes the exit, as
    // it would not run structured there.
    auto live = gate_unreached(ops, taken, cond_merged, true);
    b.set_insertion_point(op);
    Operation* yield = body.back();
    auto next = [&](std::uint32_t k, Value target) {
      Value v = yield->operand_source(k);
      if (!live.count(v.impl())) v = b.create<SwitchOp>(v, cond_merged).output_true();  // gated
      b.create<NextIterationOp>(v, target);
    };
    next(0, cond_merged);
    for (std::uint32_t k = 0; k < carried; ++k) next(1 + k, merged[k]);
    ctx_.erase_op(op);
  }

  PassContext& ctx_;
  std::uint32_t next_frame_ = 0;
  std::unordered_set<std::string> taken_;
};

class LowerToDataflowPass : public Pass {
 public:
  LowerToDataflowPass() : Pass("lower_to_dataflow") {}
  void run(Program& program, PassContext& ctx) override {
    if (!can_lower_to_dataflow(program)) return;
    Lowering(ctx, program).lower_block(program.block());
  }
};

// ---- the automatic choice ----

// An op's elements when every operand and result has static dims; -1 when one does not.
double static_elements(Type t) {
  if (!t.isa<TensorType>()) return -1;
  double n = 1;
  for (std::int64_t d : shaped_dims(t)) {
    if (d < 0) return -1;
    n *= double(d);
  }
  return n;
}

// A rough time of `op`'s kernel on one CPU thread, from static shapes:
// a matmul at 16 multiply-adds per ns, anything else at 2 elements (read
// or written) per ns; an op with regions, its ops' sum once. Unknown
// (-1 dims, or no tensor) counts 0: the rule only lowers work it knows.
double estimated_ns(const Operation& op) {
  if (op.num_regions()) {
    double ns = 0;
    for (std::uint32_t r = 0; r < op.num_regions(); ++r)
      for (const Block* b : op.region(r))
        for (const Operation* o : *b) ns += estimated_ns(*o);
    return ns;
  }
  if (op.name() == "kiln.matmul" && op.num_operands() == 2 && op.num_results() == 1) {
    const double a = static_elements(op.operand_source(0).type());
    const double out = static_elements(op.result(0).type());
    const auto& od = op.result(0).type().isa<TensorType>() ? shaped_dims(op.result(0).type())
                                                          : std::vector<std::int64_t>{};
    if (a < 0 || out < 0 || od.size() < 2 || od[od.size() - 2] == 0) return 0;
    double batch = 1;
    for (std::size_t i = 0; i + 2 < od.size(); ++i) batch *= double(od[i]);
    const double k = a / (batch * double(od[od.size() - 2]));  // a is [batch..., M, K] or [K, M]
    return out * k / 16.0;
  }
  double elements = 0;
  for (std::uint32_t i = 0; i < op.num_operands(); ++i) {
    const double n = static_elements(op.operand_source(i).type());
    if (n < 0) return 0;
    elements += n;
  }
  for (std::uint32_t r = 0; r < op.num_results(); ++r) {
    const double n = static_elements(op.result(r).type());
    if (n < 0) return 0;
    elements += n;
  }
  return elements / 2.0;
}

// Whether some expensive op of kiln.while `w`'s body could run while a later
// iteration starts: it is off the chain of carried values the condition is
// computed from (the next iteration's condition need not wait for it) and
// off its own recurrence (its next instance need not wait for it).
bool iterations_can_overlap(Operation* op) {
  auto w = op->dyn_cast<WhileOp>();
  const Block& body = w.body_region().front();
  const Operation* yield = body.back();
  const std::uint32_t carried = w.num_carried();
  if (!yield || yield->num_operands() != 1 + carried) return false;
  using Set = std::vector<bool>;  // over the carried values
  auto unite = [](Set& a, const Set& b) {
    bool grew = false;
    for (std::size_t i = 0; i < a.size(); ++i)
      if (b[i] && !a[i]) a[i] = grew = true;
    return grew;
  };
  // Per value of the body: the carried values (this iteration's) it is computed from.
  std::unordered_map<const detail::ValueImpl*, Set> from;
  for (std::uint32_t a = 0; a < carried; ++a) {
    Set s(carried);
    s[a] = true;
    from[body.argument(a).impl()] = s;
  }
  auto deps = [&](Value v) {
    auto it = from.find(v.impl());
    return it == from.end() ? Set(carried) : it->second;
  };
  std::vector<const Operation*> ops;
  for (const Operation* o : body)
    if (o != yield) ops.push_back(o);
  for (const Operation* o : ops) {
    Set s(carried);
    for (std::uint32_t i = 0; i < o->num_operands(); ++i) unite(s, deps(o->operand_source(i)));
    for (std::uint32_t r = 0; r < o->num_results(); ++r) from[o->result(r).impl()] = s;
  }
  // next[k]: the carried values the next iteration's value k is computed from.
  std::vector<Set> next;
  for (std::uint32_t k = 0; k < carried; ++k) next.push_back(deps(yield->operand_source(1 + k)));
  // The carried values the condition depends on, across iterations.
  Set cond_chain = deps(yield->operand_source(0));
  for (bool grew = true; grew;) {
    grew = false;
    for (std::uint32_t k = 0; k < carried; ++k)
      if (cond_chain[k]) grew |= unite(cond_chain, next[k]);
  }
  for (std::size_t h = 0; h < ops.size(); ++h) {
    const Operation* heavy = ops[h];
    if (estimated_ns(*heavy) <= double(kExpensiveKernelNs)) continue;
    // What its results reach in this iteration.
    std::unordered_set<const detail::ValueImpl*> reach;
    for (std::uint32_t r = 0; r < heavy->num_results(); ++r) reach.insert(heavy->result(r).impl());
    for (std::size_t j = h + 1; j < ops.size(); ++j) {
      bool hit = false;
      for (std::uint32_t i = 0; i < ops[j]->num_operands() && !hit; ++i)
        hit = reach.count(ops[j]->operand_source(i).impl());
      if (hit)
        for (std::uint32_t r = 0; r < ops[j]->num_results(); ++r) reach.insert(ops[j]->result(r).impl());
    }
    if (reach.count(yield->operand_source(0).impl())) continue;  // the next condition waits for it
    Set fed(carried);  // carried values it feeds, in later iterations too
    for (std::uint32_t k = 0; k < carried; ++k) fed[k] = reach.count(yield->operand_source(1 + k).impl()) != 0;
    for (bool grew = true; grew;) {
      grew = false;
      for (std::uint32_t m = 0; m < carried; ++m)
        for (std::uint32_t k = 0; k < carried && !fed[m]; ++k)
          if (fed[k] && next[m][k]) fed[m] = grew = true;
    }
    bool serial = false;  // the condition's chain, or its own next instance, waits for it
    Set in(carried);
    for (std::uint32_t i = 0; i < heavy->num_operands(); ++i) unite(in, deps(heavy->operand_source(i)));
    for (std::uint32_t k = 0; k < carried; ++k)
      if (fed[k] && (cond_chain[k] || in[k])) serial = true;
    if (!serial) return true;
  }
  return false;
}

void collect_overlapping(const Block& block, std::vector<const Operation*>& out) {
  for (const Operation* op : block) {
    for (std::uint32_t r = 0; r < op->num_regions(); ++r)
      for (const Block* b : op->region(r)) collect_overlapping(*b, out);
    if (op->isa<WhileOp>() && iterations_can_overlap(const_cast<Operation*>(op))) out.push_back(op);
  }
}

// Whether every op of `block` (nested ones included) runs under the frame
// propagator as it runs structured: none placed by the user (a stream, a
// kiln.place), none communicating, none with an asynchronous CPU kernel
// (the propagator runs them, but on one thread in run_async's runs, where
// the structured scheduler uses the pool).
bool frames_run_all(const Block& block) {
  const KernelRegistry& kernels = KernelRegistry::instance();
  for (const Operation* op : block) {
    for (std::uint32_t r = 0; r < op->num_regions(); ++r)
      for (const Block* b : op->region(r))
        if (!frames_run_all(*b)) return false;
    // The propagator's per-op output masks hold 64 outputs.
    if (has_placement(*op) || op->has_trait<Communication>() || op->num_results() > 64) return false;
    for (DataType dt : kernels.dtypes_for(op->info().id(), PlaceKind::Cpu))
      if (const KernelInfo* k = kernels.find(op->info().id(), PlaceKind::Cpu, dt); k && k->async_fn) return false;
  }
  return true;
}

class AutoLowerToDataflowPass : public Pass {
 public:
  AutoLowerToDataflowPass() : Pass("auto_lower_to_dataflow") {}
  void run(Program& program, PassContext& ctx) override {
    if (ctx.target_place.kind != PlaceKind::Cpu || !auto_lowers_to_dataflow(program, ctx.num_threads)) return;
    Lowering(ctx, program).lower_block(program.block());
  }
};

}  // namespace

std::vector<const Operation*> loops_with_overlapping_iterations(const Program& program) {
  std::vector<const Operation*> out;
  collect_overlapping(program.block(), out);
  return out;
}

bool auto_lowers_to_dataflow(const Program& program, unsigned num_threads) {
  return num_threads > 1 && can_lower_to_dataflow(program) && !loops_with_overlapping_iterations(program).empty();
}

std::unique_ptr<Pass> create_auto_lower_to_dataflow_pass() { return std::make_unique<AutoLowerToDataflowPass>(); }

KILN_REGISTER_PASS("auto_lower_to_dataflow", [] { return create_auto_lower_to_dataflow_pass(); },
                   "lower_to_dataflow where a loop's iterations can overlap (more than one thread, and "
                   "expensive body work neither the condition nor its own next iteration waits on)");

bool can_lower_to_dataflow(const Program& program) {
  return has_structured(program.block()) && block_can_lower(program.block()) && frames_run_all(program.block());
}

std::unique_ptr<Pass> create_lower_to_dataflow_pass() { return std::make_unique<LowerToDataflowPass>(); }

KILN_REGISTER_PASS("lower_to_dataflow", [] { return create_lower_to_dataflow_pass(); },
                   "lowers kiln.if / kiln.while to kiln.switch, merge, enter, exit and next_iteration");

}  // namespace kiln

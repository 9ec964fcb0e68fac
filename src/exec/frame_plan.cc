// build_frame_plan (kiln/exec/frame_plan.h): frames, nodes and edges of a
// program with dataflow ops.
#include "kiln/exec/frame_plan.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "kiln/dialect/builtin.h"
#include "kiln/dialect/dataflow_ops.h"
#include "kiln/dialect/io_ops.h"
#include "kiln/dialect/send_recv_ops.h"
#include "kiln/ir/inplace_pairs.h"
#include "kiln/ir/op_info.h"
#include "kiln/kernel/kernel_registry.h"
#include "kiln/support/error.h"

namespace kiln {

namespace {

std::string frame_label(const FramePlan& fp, std::uint32_t f) {
  return f == 0 ? std::string("the top level") : "frame '" + fp.frames[f].name + "'";
}

FrameNode::Kind kind_of(const Operation& op) {
  if (op.isa<SwitchOp>()) return FrameNode::Kind::Switch;
  if (op.isa<MergeOp>()) return FrameNode::Kind::Merge;
  if (op.isa<EnterOp>()) return FrameNode::Kind::Enter;
  if (op.isa<ExitOp>()) return FrameNode::Kind::Exit;
  if (op.isa<NextIterationOp>()) return FrameNode::Kind::NextIteration;
  return FrameNode::Kind::Kernel;
}

class FramePlanBuilder {
 public:
  FramePlanBuilder(const ExecutionPlan& plan, const Block& block,
                   const std::unordered_map<const detail::ValueImpl*, std::uint32_t>& value_slot)
      : plan_(plan), block_(block), value_slot_(value_slot) {}

  std::shared_ptr<const FramePlan> build() {
    if (plan_.options.place.kind != PlaceKind::Cpu)
      throw_error(ErrorKind::Unimplemented, "a program with dataflow ops (kiln.switch, kiln.merge, ",
                  "kiln.enter, kiln.exit, kiln.next_iteration) runs on the CPU, not on ",
                  plan_.options.place.to_string());
    fp_->frames.emplace_back();  // the top level
    index_instructions();
    make_nodes();
    layout();
    make_edges();
    plan_fetches();
    return fp_;
  }

 private:
  [[noreturn]] static void fail(const Operation* op, std::uint32_t index, const std::string& what) {
    throw_error(ErrorKind::InvalidArgument, "op #", index, " '", op->name(), "' ", what);
  }

  void index_instructions() {
    for (std::uint32_t i = 0; i < plan_.instructions.size(); ++i) {
      const PlanInstruction& in = plan_.instructions[i];
      if (in.op && in.name == in.op->name()) instruction_of_[in.op] = i;
    }
  }

  std::uint32_t frame_of(Value v) const {
    auto it = value_frame_.find(v.impl());
    return it == value_frame_.end() ? 0 : it->second;
  }

  std::uint32_t child_frame(std::uint32_t parent, const EnterOp& enter, const Operation* op,
                            std::uint32_t index) {
    const auto& a = enter.attrs();
    auto [it, fresh] = child_frames_.try_emplace({parent, a.frame_name}, 0);
    if (fresh) {
      it->second = static_cast<std::uint32_t>(fp_->frames.size());
      StaticFrame f;
      f.name = a.frame_name;
      f.parent = parent;
      f.depth = fp_->frames[parent].depth + 1;
      f.parallel_iterations = a.parallel_iterations;
      fp_->frames.push_back(std::move(f));
      fp_->max_parallel_iterations = std::max(fp_->max_parallel_iterations, a.parallel_iterations);
    } else if (fp_->frames[it->second].parallel_iterations != a.parallel_iterations) {
      fail(op, index, "enters frame '" + a.frame_name + "' with parallel_iterations = " +
                          std::to_string(a.parallel_iterations) + ", another enter of it says " +
                          std::to_string(fp_->frames[it->second].parallel_iterations));
    }
    fp_->frames[it->second].num_enters++;
    return it->second;
  }

  void make_nodes() {
    std::uint32_t index = 0;
    for (Operation* op : block_) {
      const std::uint32_t i = index++;
      if (op->num_regions())
        fail(op, i, "has regions; a program with dataflow ops cannot also run structured control "
                    "flow (lower it with the pass 'lower_to_dataflow')");
      if (op->isa<ParameterOp>() || op->isa<DataOp>()) {
        add_source(op, i);
        continue;
      }
      FrameNode n;
      n.op = op;
      n.op_index = i;
      n.kind = kind_of(*op);
      auto ins = instruction_of_.find(op);
      if (ins == instruction_of_.end())
        fail(op, i, "has no instruction in the plan (the frame propagator cannot run it)");
      n.instruction = ins->second;
      const PlanInstruction& in = plan_.instructions[n.instruction];
      n.async = in.async_fn != nullptr;
      n.recv = op->isa<RecvOp>();
      fp_->has_async |= n.async;
      // The frame its operands live in (a next_iteration's target excepted).
      n.num_inputs = n.kind == FrameNode::Kind::NextIteration ? 1 : op->num_operands();
      n.num_forward = n.num_inputs;  // a merge's back edges are added in layout()
      n.frame = operand_frame(op, i, n.num_inputs);
      const std::uint32_t result_frame = link_frames(n, op, i);
      n.num_outputs = n.kind == FrameNode::Kind::NextIteration ? 1 : op->num_results();
      n.unused_outputs = in.unused_outputs;
      if (n.kind == FrameNode::Kind::Kernel) kernel_outputs(n, in, op, i);
      add(std::move(n), op);
      for (std::uint32_t r = 0; r < op->num_results(); ++r) value_frame_[op->result(r).impl()] = result_frame;
    }
  }

  // A fed data op or a parameter: a source node of its slot (none for an
  // unfed data op nothing reads).
  void add_source(Operation* op, std::uint32_t i) {
    auto it = value_slot_.find(op->result(0).impl());
    if (it == value_slot_.end()) return;
    FrameNode n;
    n.op = op;
    n.op_index = i;
    n.kind = FrameNode::Kind::Source;
    n.slot = it->second;
    n.num_outputs = 1;
    add(std::move(n), op);
  }

  // The one frame op's first `count` operands live in.
  std::uint32_t operand_frame(Operation* op, std::uint32_t i, std::uint32_t count) const {
    const std::uint32_t frame = count ? frame_of(op->operand_source(0)) : 0;
    for (std::uint32_t k = 1; k < count; ++k)
      if (frame_of(op->operand_source(k)) != frame)
        fail(op, i, "reads values of " + frame_label(*fp_, frame) + " (operand #0) and of " +
                        frame_label(*fp_, frame_of(op->operand_source(k))) + " (operand #" + std::to_string(k) +
                        "); a value enters a frame through kiln.enter and leaves it through kiln.exit");
    return frame;
  }

  // What an enter, exit or next_iteration node `n` (in n.frame) links:
  // the frame it enters, its frame's exits, its merge's back edges.
  // Returns the frame its results live in.
  std::uint32_t link_frames(FrameNode& n, Operation* op, std::uint32_t i) {
    const std::uint32_t frame = n.frame, node = static_cast<std::uint32_t>(fp_->nodes.size());
    switch (n.kind) {
      case FrameNode::Kind::Enter: {
        auto enter = op->dyn_cast<EnterOp>();
        n.target_frame = child_frame(frame, enter, op, i);
        n.constant_enter = enter.attrs().is_constant;
        if (n.constant_enter) {
          n.constant_index = static_cast<std::uint32_t>(fp_->frames[n.target_frame].constants.size());
          fp_->frames[n.target_frame].constants.push_back(node);
        }
        return n.target_frame;
      }
      case FrameNode::Kind::Exit:
        if (frame == 0) fail(op, i, "is at the top level: only a value inside a frame can exit");
        n.exit_index = static_cast<std::uint32_t>(fp_->frames[frame].exits.size());
        fp_->frames[frame].exits.push_back(node);
        return fp_->frames[frame].parent;
      case FrameNode::Kind::NextIteration: {
        if (frame == 0) fail(op, i, "is at the top level: a loop's next_iteration belongs to the frame of its loop");
        Operation* merge = op->dyn_cast<NextIterationOp>().target();
        auto m = node_of_.find(merge);
        if (!merge || m == node_of_.end()) fail(op, i, "names no kiln.merge of the program's top block");
        if (fp_->nodes[m->second].frame != frame)
          fail(op, i, "feeds a kiln.merge of " + frame_label(*fp_, fp_->nodes[m->second].frame) + " from " +
                          frame_label(*fp_, frame));
        back_edges_[m->second].push_back(node);
        return frame;
      }
      default: return frame;
    }
  }

  // A kernel node's outputs: those written straight into a parameter or
  // fetch slot, its in-place pairs, a send's rendezvous key.
  void kernel_outputs(FrameNode& n, const PlanInstruction& in, Operation* op, std::uint32_t i) {
    // Dead, forwarded and direct outputs are 64-bit masks per op.
    if (in.writes.size() > 64)
      fail(op, i, "has " + std::to_string(in.writes.size()) +
                      " outputs; an op in a program with dataflow ops has at most 64");
    n.out_slots.assign(in.writes.size(), kNoIndex);
    // An in-place output writes the variable its operand's buffer is (a
    // view's source); any other output is a value of its own, a view of a
    // feed or parameter included.
    std::uint64_t inplace_outputs = 0;
    for (auto [o, j] : inplace_pairs(*op)) inplace_outputs |= std::uint64_t{1} << o;
    for (std::uint32_t o = 0; o < in.writes.size(); ++o) {
      const std::uint32_t s = in.writes[o];
      const SlotKind k = (inplace_outputs >> o) & 1 ? plan_.slots[plan_.slots[s].alias].kind : plan_.slots[s].kind;
      if (k == SlotKind::Parameter || k == SlotKind::FetchOp || k == SlotKind::Feed) {
        if (k == SlotKind::Feed)
          fail(op, i, "writes a feed in place; in a program with dataflow ops it must work on a copy");
        n.out_slots[o] = s;
        n.direct_outputs |= std::uint64_t{1} << o;
      }
    }
    for (auto [o, j] : inplace_pairs(*op))
      if (!((n.direct_outputs >> o) & 1)) n.inplace.emplace_back(o, j);
    if (auto send = op->dyn_cast<SendOp>()) {
      const auto& a = send.attrs();
      n.send_key = std::make_shared<const RendezvousKey>(a.src_place, a.dst_place, a.tensor_name);
    }
  }

  void add(FrameNode n, Operation* op) {
    node_of_[op] = static_cast<std::uint32_t>(fp_->nodes.size());
    fp_->nodes.push_back(std::move(n));
  }

  // Frame-local indices, input tables and the counts an iteration starts with.
  void layout() {
    for (auto& [merge, sources] : back_edges_) {
      FrameNode& m = fp_->nodes[merge];
      m.num_inputs += static_cast<std::uint32_t>(sources.size());
    }
    for (std::uint32_t id = 0; id < fp_->nodes.size(); ++id) {
      FrameNode& n = fp_->nodes[id];
      StaticFrame& f = fp_->frames[n.frame];
      n.local = f.num_nodes++;
      n.input_base = f.num_inputs;
      f.num_inputs += n.num_inputs;
      std::int32_t first = static_cast<std::int32_t>(n.num_inputs), next = first;
      if (n.kind == FrameNode::Kind::Merge) {
        first = static_cast<std::int32_t>(n.num_forward);
        if (n.num_inputs > n.num_forward) next = static_cast<std::int32_t>(n.num_inputs - n.num_forward);
        else next = first;
      }
      f.pending_first.push_back(first);
      f.pending_next.push_back(next);
      if (n.frame == 0 && n.num_inputs == 0) fp_->roots.push_back(id);
      if (n.frame != 0 && n.num_inputs == 0)
        throw_error(ErrorKind::InvalidArgument, "op #", n.op_index, " '", n.op->name(),
                    "' has no operands but belongs to a frame");
    }
  }

  void make_edges() {
    std::vector<std::vector<FrameEdge>> out(fp_->nodes.size());
    for (std::uint32_t id = 0; id < fp_->nodes.size(); ++id) {
      const FrameNode& n = fp_->nodes[id];
      if (n.kind == FrameNode::Kind::NextIteration) continue;
      for (std::uint32_t r = 0; r < n.op->num_results(); ++r)
        for (OpOperand use : n.op->result(r).uses()) {
          Operation* user = use.owner();
          auto u = node_of_.find(user);
          if (u == node_of_.end())
            throw_error(ErrorKind::InvalidArgument, "op #", n.op_index, " '", n.op->name(),
                        "' result #", r, " is read by '", user->name(),
                        "', which is not an op of the program's top block");
          if (user->isa<NextIterationOp>() && use.index() == 1) continue;  // a target, not a read
          out[id].push_back({u->second, use.index(), r});
        }
    }
    for (auto& [merge, sources] : back_edges_) {
      const std::uint32_t forward = fp_->nodes[merge].num_forward;
      for (std::uint32_t k = 0; k < sources.size(); ++k) out[sources[k]].push_back({merge, forward + k, 0});
    }
    for (std::uint32_t id = 0; id < fp_->nodes.size(); ++id) {
      auto& e = out[id];
      std::stable_sort(e.begin(), e.end(),
                       [](const FrameEdge& a, const FrameEdge& b) { return a.src_output < b.src_output; });
      FrameNode& n = fp_->nodes[id];
      n.edge_begin = static_cast<std::uint32_t>(fp_->edges.size());
      fp_->edges.insert(fp_->edges.end(), e.begin(), e.end());
      n.edge_end = static_cast<std::uint32_t>(fp_->edges.size());
    }
  }

  // A fetched temporary keeps a share of the value its top-level producer
  // made; one inside a frame has no single value to fetch.
  void plan_fetches() {
    fp_->slot_producer.assign(plan_.slots.size(), kNoIndex);
    std::vector<char> fetched(plan_.slots.size(), 0);
    for (const auto& f : plan_.fetches) fetched[f.slot] = 1;
    for (std::uint32_t id = 0; id < fp_->nodes.size(); ++id) {
      FrameNode& n = fp_->nodes[id];
      if (n.kind == FrameNode::Kind::Source) continue;
      for (std::uint32_t r = 0; r < n.op->num_results(); ++r) {
        auto it = value_slot_.find(n.op->result(r).impl());
        if (it == value_slot_.end()) continue;
        const std::uint32_t s = it->second;
        if (!fetched[s]) continue;
        const std::uint32_t frame = frame_of(n.op->result(r));
        if (frame != 0)
          throw_error(ErrorKind::InvalidArgument, "a fetch target is result #", r, " of op #", n.op_index,
                      " '", n.op->name(), "', inside frame '", fp_->frames[frame].name,
                      "'; fetch the value after its kiln.exit");
        fp_->slot_producer[s] = id;
        if (n.kind == FrameNode::Kind::Kernel) {
          if (r < n.out_slots.size() && n.out_slots[r] == kNoIndex) n.out_slots[r] = s;
        } else {
          if (n.out_slots.size() < n.num_outputs) n.out_slots.assign(n.num_outputs, kNoIndex);
          n.out_slots[r] = s;
        }
      }
    }
  }

  const ExecutionPlan& plan_;
  const Block& block_;
  const std::unordered_map<const detail::ValueImpl*, std::uint32_t>& value_slot_;
  std::shared_ptr<FramePlan> fp_ = std::make_shared<FramePlan>();
  std::unordered_map<const Operation*, std::uint32_t> instruction_of_;
  std::unordered_map<const Operation*, std::uint32_t> node_of_;
  std::unordered_map<const detail::ValueImpl*, std::uint32_t> value_frame_;
  std::map<std::pair<std::uint32_t, std::string>, std::uint32_t> child_frames_;
  std::map<std::uint32_t, std::vector<std::uint32_t>> back_edges_;  // merge → next_iterations
};

// The five ops' work is the propagator's (values move between iteration
// tables, not through kernels); their kernels exist for the plan's kernel
// choice and only report a run outside the propagator.
void dataflow_outside_frames(KernelContext& ctx) {
  throw_error(ErrorKind::Internal, "op '", ctx.op()->name(), "' ran outside the frame propagator");
}

}  // namespace

KILN_REGISTER_KERNEL(SwitchOp, Cpu, Undefined, dataflow_outside_frames);
KILN_REGISTER_KERNEL(MergeOp, Cpu, Undefined, dataflow_outside_frames);
KILN_REGISTER_KERNEL(EnterOp, Cpu, Undefined, dataflow_outside_frames);
KILN_REGISTER_KERNEL(ExitOp, Cpu, Undefined, dataflow_outside_frames);
KILN_REGISTER_KERNEL(NextIterationOp, Cpu, Undefined, dataflow_outside_frames);

std::string FramePlan::describe(std::uint32_t node) const {
  const FrameNode& n = nodes.at(node);
  return "op #" + std::to_string(n.op_index) + " '" + std::string(n.op->name()) + "'";
}

std::shared_ptr<const FramePlan> build_frame_plan(
    const ExecutionPlan& plan, const Block& block,
    const std::unordered_map<const detail::ValueImpl*, std::uint32_t>& value_slot) {
  return FramePlanBuilder(plan, block, value_slot).build();
}

}  // namespace kiln

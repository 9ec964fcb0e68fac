#include "kiln/exec/control_flow.h"

#include "kiln/dialect/control_flow_ops.h"
#include "kiln/exec/run_state.h"

namespace kiln {

ControlFlowRunner::~ControlFlowRunner() = default;

void run_control_flow(KernelContext& ctx) {
  static_cast<ControlFlowRunner*>(const_cast<void*>(ctx.attrs_ptr()))->run(ctx);
}

namespace {

// The value of a condition tensor; kiln::Error naming the op and `what`
// when it is not a bool tensor of one element (a -1 dim fed otherwise).
bool read_condition(const KernelContext& ctx, const Variable& v, const char* what) {
  if (!v.is<Tensor>() || !v.get<Tensor>().is_initialized())
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' ", what,
                " holds no tensor");
  const Tensor& t = v.get<Tensor>();
  if (t.dtype() != DataType::Bool || t.numel() != 1)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' ", what,
                " must be a bool tensor of one element, got ", t.type_string());
  if (!t.place().is_cpu())
    throw_error(ErrorKind::Unimplemented, "op '", ctx.op()->name(), "' ", what, " on ",
                t.place().to_string(), ": conditions are read on the host");
  return *t.data<bool>();
}

// Runs a region's state, naming the region in the path of its errors.
void run_child(RunState& state, const RegionPlan& region) {
  try {
    state.run_region();
  } catch (const RegionError& e) {
    throw RegionError(e.kind(), region.name + " > " + e.path(), e.detail());
  }
}

// Output `k` of the op = yield operand `k` of the region that ran: taken
// from the region's variable when only that variable holds it, else shared
// (a parameter's tensor is copied: an optimizer may update it in place
// while the result lives on).
void hand_over(const RegionPlan& region, RunState& state, std::uint32_t k, Variable& out) {
  const ExecutionPlan& p = *region.plan;
  const std::uint32_t slot = p.fetches[k].slot;
  Variable& from = *state.variable(slot);
  if (region.yield_owned[k]) {
    out.take_content(from);
  } else if (p.slots[slot].kind == SlotKind::Parameter && from.is<Tensor>()) {
    out.clear();
    out.set(from.get<Tensor>().clone());
  } else {
    out.share_content(from);
  }
}

class IfRunner final : public ControlFlowRunner {
 public:
  IfRunner(const ControlFlowPlan& cf, std::span<Variable* const> inputs, Scope& root) : cf_(cf) {
    for (std::size_t r = 0; r < 2; ++r)
      if (cf.regions[r].plan)
        branch_[r] = std::make_unique<RunState>(cf.regions[r].plan, root, inputs.subspan(1));
  }

  void run(KernelContext& ctx) override {
    const bool c = read_condition(ctx, ctx.input_var(0), "condition");
    const std::size_t r = c ? 0 : 1;
    if (!branch_[r]) return;  // a result-less if without an else region
    run_child(*branch_[r], cf_.regions[r]);
    for (std::uint32_t k = 0; k < ctx.num_outputs(); ++k)
      hand_over(cf_.regions[r], *branch_[r], k, ctx.output_var(k));
  }

  void release() noexcept override {
    for (auto& b : branch_)
      if (b) b->release_temporaries();
  }

  std::vector<std::pair<std::string, const RunState*>> children() const override {
    std::vector<std::pair<std::string, const RunState*>> c;
    for (std::size_t r = 0; r < 2; ++r)
      if (branch_[r]) c.emplace_back(cf_.regions[r].name, branch_[r].get());
    return c;
  }

 private:
  const ControlFlowPlan& cf_;
  std::unique_ptr<RunState> branch_[2];
};

class WhileRunner final : public ControlFlowRunner {
 public:
  WhileRunner(const ControlFlowPlan& cf, std::span<Variable* const> inputs, Scope& root)
      : cf_(cf),
        n_(cf.num_carried),
        carried_(std::make_unique<Variable[]>(n_)),
        staged_(std::make_unique<Variable[]>(n_)) {
    // The body's arguments: the carried variables, then the captures (the
    // parent's own variables).
    std::vector<Variable*> args;
    for (std::uint32_t j = 0; j < n_; ++j) args.push_back(&carried_[j]);
    for (std::size_t k = 1 + n_; k < inputs.size(); ++k) args.push_back(inputs[k]);
    body_ = std::make_unique<RunState>(cf.regions[0].plan, root, args);
    const ExecutionPlan& p = *cf.regions[0].plan;
    cond_ = body_->variable(p.fetches[0].slot);
    for (std::uint32_t j = 0; j < n_; ++j) {
      next_.push_back(body_->variable(p.fetches[1 + j].slot));
      // The body yields carried value j itself (maybe updated in place, as
      // an array a write appended to): nothing to rebind.
      unchanged_.push_back(p.fetches[1 + j].slot == p.arguments[j] ? 1 : 0);
    }
  }

  void run(KernelContext& ctx) override {
    const RegionPlan& body = cf_.regions[0];
    bool c = read_condition(ctx, ctx.input_var(0), "condition");
    for (std::uint32_t j = 0; j < n_; ++j) carried_[j].share_content(ctx.input_var(1 + j));
    try {
      for (std::int64_t it = 0; c; ++it) {
        if (cf_.max_iterations >= 0 && it == cf_.max_iterations)
          throw_error(ErrorKind::OutOfRange, "op '", ctx.op()->name(), "' did not finish within ",
                      "max_iterations = ", cf_.max_iterations, " iterations");
        run_child(*body_, body);
        c = read_condition(ctx, *cond_, "body's next condition");
        rebind(body);
      }
    } catch (...) {
      release();
      throw;
    }
    for (std::uint32_t j = 0; j < n_; ++j) ctx.output_var(j).take_content(carried_[j]);
    // The body's yielded variables hold the previous iteration's tensors
    // (maybe the caller's initial values): let go of them.
    for (std::uint32_t j = 0; j < n_; ++j)
      if (body.yield_owned[1 + j]) next_[j]->clear();
  }

  void release() noexcept override {
    for (std::uint32_t j = 0; j < n_; ++j) {
      carried_[j].clear();
      staged_[j].clear();
    }
    body_->release_temporaries();
  }

  std::vector<std::pair<std::string, const RunState*>> children() const override {
    return {{cf_.regions[0].name, body_.get()}};
  }

 private:
  // carried_ = what the body yielded. A yielded temporary swaps places
  // with the carried value (its variable gets the old tensor back, which
  // its next kernel overwrites in place); a shared one (an argument — maybe
  // another carried value — or a capture) is staged first, so a permutation
  // of the carried values reads them before any is replaced.
  void rebind(const RegionPlan& body) {
    for (std::uint32_t j = 0; j < n_; ++j)
      if (!body.yield_owned[1 + j] && !unchanged_[j]) staged_[j].share_content(*next_[j]);
    for (std::uint32_t j = 0; j < n_; ++j) {
      if (unchanged_[j]) continue;
      if (body.yield_owned[1 + j]) carried_[j].swap_content(*next_[j]);
      else carried_[j].take_content(staged_[j]);
    }
  }

  const ControlFlowPlan& cf_;
  std::uint32_t n_;
  std::unique_ptr<Variable[]> carried_, staged_;
  std::unique_ptr<RunState> body_;
  Variable* cond_ = nullptr;
  std::vector<Variable*> next_;
  std::vector<std::uint8_t> unchanged_;
};

}  // namespace

std::unique_ptr<ControlFlowRunner> make_control_flow_runner(const PlanInstruction& in,
                                                            std::span<Variable* const> inputs,
                                                            Scope& root) {
  const ControlFlowPlan& cf = *in.control;
  if (cf.kind == ControlFlowPlan::Kind::While) return std::make_unique<WhileRunner>(cf, inputs, root);
  return std::make_unique<IfRunner>(cf, inputs, root);
}

}  // namespace kiln

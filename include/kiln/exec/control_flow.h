// How the executor runs kiln.if and kiln.while (seed 001 §3.3.3: ops
// without kernels run through their own Run). Each region is an
// ExecutionPlan of its own, built by PlanBuilder together with its parent's
// plan and cached with it (ControlFlowPlan, held by the parent instruction).
// A run state makes, once per control-flow instruction, a runner holding
// child run states over those plans; the instruction's kernel is a
// trampoline into that runner (the context's attributes point at it), so
// the scheduler's hot loop knows nothing of regions.
//
// A child run state binds its plan's Argument slots to the parent's
// variables themselves — the if's captures, the while's captures and its
// carried variables — so nothing defined outside a region is copied. It runs
// in program order on the caller's thread (never blocking a pool thread on
// pool work) with the usual last-use GC, so a body's temporaries are freed
// every iteration. The while's carried values are rebound between
// iterations by swapping variables' contents: the yielded tensor becomes
// the carried one and the previous carried tensor goes back to the body's
// variable, whose next kernel writes it in place (alloc_output reuses a
// buffer only it holds) — after the first iteration a loop allocates
// nothing, and its memory stays flat however many iterations it runs.
//
// GC (seed 001 §3.2.2): Paddle needs PrepareSafeEagerDeletionOnWhileOp-
// AndWhileGradOp because while_grad reads variables of the forward body's
// scopes. Here a region's values never outlive an iteration unless the
// region yields them, so plain last-use GC in each plan is safe: argument
// slots are never freed by the child (their parent owns them), yielded
// slots are kept for the runner, and the parent frees the op's operands
// after the op like any other reader.
//
// Errors inside a region carry the path of ops that led there:
// "while#3 > body > matmul#7 failed: …".
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/exec/execution_plan.h"
#include "kiln/support/error.h"

namespace kiln {

class RunState;
class Scope;
class Variable;

// One region's child plan and how its yields reach the parent.
struct RegionPlan {
  std::string name;  // "then", "else", "body"
  std::shared_ptr<const ExecutionPlan> plan;
  // Per yield operand: its slot in `plan` may be handed over by swapping or
  // moving variables (a temporary of the region, yielded once); otherwise
  // its tensor is shared (an argument, a parameter, a value yielded twice).
  std::vector<std::uint8_t> yield_owned;
};

struct ControlFlowPlan {
  enum class Kind : std::uint8_t { If, While };
  Kind kind = Kind::If;
  std::vector<RegionPlan> regions;  // if: then, else (may be empty: no plan); while: body
  std::int64_t max_iterations = -1;
  std::uint32_t num_carried = 0;  // while
};

// The per-run-state side of a control-flow instruction.
class ControlFlowRunner {
 public:
  virtual ~ControlFlowRunner();
  virtual void run(KernelContext& ctx) = 0;
  // Frees every value the runner and its child run states hold between runs
  // (after an error, so that nothing is leaked).
  virtual void release() noexcept = 0;
  // Its child run states with their regions' names (profiling: their last
  // run's kernel times nest under the op in a Chrome trace).
  virtual std::vector<std::pair<std::string, const RunState*>> children() const = 0;
};

// The runner of instruction `in` of a run state whose variables for it are
// `inputs` (its reads) and `outputs` (its writes); parameters bind to `root`.
std::unique_ptr<ControlFlowRunner> make_control_flow_runner(const PlanInstruction& in,
                                                            std::span<Variable* const> inputs,
                                                            Scope& root);

// The KernelFn of a control-flow instruction: ctx's attributes are its runner.
void run_control_flow(KernelContext& ctx);

// An error from inside a region: `path` is the ops and regions from the
// failing op's enclosing control-flow op down ("body > matmul#7"),
// `detail` the failing op's message.
class RegionError : public Error {
 public:
  RegionError(ErrorKind kind, std::string path, std::string detail)
      : Error(kind, path + " failed: " + detail), path_(std::move(path)), detail_(std::move(detail)) {}
  const std::string& path() const { return path_; }
  const std::string& detail() const { return detail_; }

 private:
  std::string path_, detail_;
};

}  // namespace kiln

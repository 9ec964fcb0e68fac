// How a program runs: the one options type of the Executor and of the
// InterpreterCore under it (threads, GC, profiling, the thread plan, the
// place), and what a run fetches.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/ir/value_handle.h"
#include "kiln/support/place.h"

namespace kiln {

class Communicator;

// What to fetch: a value of the program, or a name — of a kiln.fetch op, a
// data op, or a parameter. A fetch observes every op of the program that
// writes the fetched value's variable (as Paddle's fetch ops at the end of
// the program do): fetching `x` after an in-place `sqrt_(x)` gives sqrt(x).
struct FetchTarget {
  FetchTarget(Value v) : value(v) {}                   // NOLINT
  FetchTarget(std::string n) : name(std::move(n)) {}   // NOLINT
  FetchTarget(const char* n) : name(n) {}              // NOLINT
  Value value;
  std::string name;
};

// Where a run's threads go.
//   Sequential: the caller alone runs every op in program order (no
//               dependency counters; seed 001's "trace" mode).
//   Graph:      pool workers run independent ops; BLAS single-threaded.
//   Blas:       the caller runs every op; BLAS's GEMMs and kiln's own
//               kernels' loops get the threads.
// Never graph workers and BLAS threads at once: two spinning pools on the
// same cores made PyTorch's MLP 3x slower on 2 cores.
//   Auto:       measured (ThreadPlanTuner): after the cost model's first
//               runs, a few runs of each candidate, the fastest kept.
enum class ThreadPlan : std::uint8_t {
  Auto,
  Sequential,
  Graph,
  Blas,
};

constexpr std::string_view to_string(ThreadPlan p) {
  switch (p) {
    case ThreadPlan::Auto: return "auto";
    case ThreadPlan::Sequential: return "sequential";
    case ThreadPlan::Graph: return "graph";
    case ThreadPlan::Blas: return "blas";
  }
  return "?";
}

// The pipeline an executor runs by default (seed 002 §2.5.2's order):
// structured loops whose iterations can overlap lowered to dataflow ops
// (auto_lower_to_dataflow: only with more than one thread, and only for a
// loop with expensive body work that neither its condition nor its own next
// iteration waits on — kiln/passes/lower_to_dataflow.h; "lower_to_dataflow"
// lowers always, a pipeline without either never), then
// in-place updates of temporaries to their pure twins, then dead code,
// common subexpressions, constants, algebraic identities, fusion of
// elementwise chains and matmul epilogues and merged optimizer updates, and
// last pure ops back to in-place ones where their operand dies (pure, fuse
// and inplace on CPU places only, but fuse's merged updates on CUDA too). Every pass keeps results bit-identical: fused kernels run
// each op's own loop in the same order, and simplify rewrites only exact
// identities (x+(-0), never x+(+0): that is +0 for x = -0).
inline constexpr const char* kDefaultPasses =
    "auto_lower_to_dataflow,pure,dce,cse,fold,simplify,fuse,inplace";

struct ExecutionOptions {
  // Where kernels run. cpu: on the host, except ops with an
  // `execution_stream` attribute. host_stream:N: every op on that place's
  // default stream (named "host_stream:N") unless its attribute names
  // another. A place without kernels (cuda, until its backend exists) is a
  // kiln::Error. The Executor sets it from its own place.
  Place place = Place::cpu();
  // Host threads a run may use, the caller's included. 0: the hardware's
  // (Executor) or the work queue's threads + 1 (InterpreterCore).
  unsigned num_threads = 0;
  // See ThreadPlan. Sequential also keeps the work queue out of the core.
  ThreadPlan thread_plan = ThreadPlan::Auto;
  // Free each temporary after its last user.
  bool gc = true;
  // GC of a temporary of at most recycle_bytes keeps its buffer as the
  // variable's spare for the next run's kernel (Variable::recycle): freeing
  // and re-allocating small buffers every run costs more than the kernels of
  // a small model. At most recycle_budget bytes of spares per run state
  // (counted at recycle_bytes per eligible temporary); 0 frees everything.
  std::size_t recycle_bytes = 4096;
  std::size_t recycle_budget = std::size_t{1} << 20;
  // Place the temporaries of a host plan in one arena per run state, values
  // whose lifetimes the dependency DAG orders sharing bytes, at offsets found
  // after the first run (kiln/exec/memory_plan.h). The first run keeps every
  // temporary to its end (its peak is their sum); later runs allocate
  // nothing for the planned ones. Needs gc.
  bool plan_memory = true;
  // A cuda place: capture the program's device work as a CUDA graph on its
  // second run and replay it from then on (a launch per run instead of one
  // per kernel). A program with work on the host (ops without a device
  // kernel, kiln.fetch ops) or random ops is not captured, nor is one whose
  // capture fails (a kernel that waits on the host): it runs with a launch
  // per kernel, and says why once (kiln/support/warning.h). Feeds of a new
  // shape capture again; after 3 captures the plan stops capturing.
  bool cuda_graph = false;
  // Record per-instruction times (chrome_trace()).
  bool profile = false;
  // Values (of the program given to the core) never freed.
  std::vector<Value> skip_gc{};
  // The pass pipeline (kiln/passes/pass_manager.h) run when a plan is built,
  // on a copy of the program: the caller's program never changes, and feeds,
  // fetch targets and skip_gc values map through the copy and every
  // replacement a pass makes; errors name the caller's ops. Default:
  // kDefaultPasses. Empty: no passes (each op runs as written).
  std::string passes{kDefaultPasses};
  // The ranks the program's collective ops (kiln/dialect/collective_ops.h)
  // run over (kiln/runtime/communicator.h); kernels reach it through
  // StepContext::communicator. Null: a collective op fails naming itself.
  std::shared_ptr<Communicator> communicator{};
  // Executor only: compiled programs kept (LRU).
  std::size_t cache_capacity = 32;
};


}  // namespace kiln

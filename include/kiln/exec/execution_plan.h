// ExecutionPlan: a program pre-analysed once (seed 001 §三), immutable
// afterwards and shared by every run over it (TensorFlow's ExecutorImpl as
// against the per-step ExecutorState; seed 003). It holds the instructions
// with their chosen kernels, the variable slots each reads and writes, the
// dependency DAG in CSR form, the stream lanes and events of each
// instruction, the GC plan (who frees which slot) and the buffer plan (which
// slots recycle their buffer). It names no Variable: a RunState binds slots
// to variables, so several runs over one plan proceed at the same time.
// PlanBuilder makes it.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/exec/execution_options.h"
#include "kiln/exec/successor_kind.h"
#include "kiln/ir/program.h"
#include "kiln/kernel/kernel_registry.h"
#include "kiln/runtime/tensor.h"

namespace kiln {

inline constexpr std::uint32_t kNoIndex = std::numeric_limits<std::uint32_t>::max();

// What a variable slot holds, and so where a RunState finds its Variable.
enum class SlotKind : std::uint8_t {
  Temporary,  // the run state's own, contiguous
  Parameter,  // the root scope's variable `name`
  Feed,       // the run state's kid scope, `name`
  FetchOp,    // the run state's kid scope, "@fetch.<name>"
  Argument,   // a region plan's block argument: a variable its parent binds
};

struct PlanSlot {
  SlotKind kind = SlotKind::Temporary;
  Place place = Place::cpu();
  std::uint32_t alias = 0;        // dependency variable (a view shares its source's)
  bool persistent = false;        // parameter, feed, kiln.fetch op result: never freed
  std::uint32_t fetch_reads = 0;  // fetch instructions reading it (never freed then)
  bool kept = false;              // an ExecutionOptions::skip_gc value (never freed)
  std::string name;               // Parameter, Feed, FetchOp
  // Parameter: some set_parameter of the program writes it (a run state
  // creates the variable); otherwise the scope must hold it already, of `type`.
  bool set_by_program = false;
  Type type;  // Parameter: expected; Temporary: the value's (the buffer plan reads it)
};

struct ControlFlowPlan;  // kiln/exec/control_flow.h
struct FramePlan;        // kiln/exec/frame_plan.h

struct PlanInstruction {
  std::string name;               // "kiln.add", or "memcpy ...", "fetch", "copy"
  std::uint32_t op_index = kNoIndex;  // its op's position in the program
  Operation* op = nullptr;        // in the plan's own copy of the program
  KernelFn fn = nullptr;
  AsyncKernelFn async_fn = nullptr;  // an asynchronous kernel (then fn is null)
  std::shared_ptr<const void> attrs;  // decoded once; shared by every run state
  std::vector<std::uint32_t> reads, writes;  // slots, in kernel input/output order
  std::uint8_t order = 0;         // OrderFlags (dependency_builder.h)
  Lane lane = Lane::host();
  // Where its kernel runs: its context's place and allocator. A copy between
  // places runs at its destination; `pinned`: its output goes to page-locked
  // host memory (a device-to-host copy, so the copy is truly asynchronous).
  Place place = Place::cpu();
  bool pinned = false;
  bool calls_blas = false;        // its kernel runs GEMMs (the thread plan's concern)
  // Its CPU kernel may split its loops over a Blas run's threads: it runs
  // GEMMs, or its values are large or of unknown size.
  bool may_split = false;
  // Bit k: output k is read by no instruction and fetched by no target, so
  // its kernel may leave it uncomputed (KernelContext::output_unused).
  std::uint64_t unused_outputs = 0;
  // kiln.if / kiln.while: the child plans of its regions. `fn` runs them
  // through a per-run-state runner, which a run state passes as the
  // context's attributes (kiln/exec/control_flow.h).
  std::shared_ptr<const ControlFlowPlan> control;
};

// A fed tensor's expected type, decoded once for the per-run check.
struct PlanFeed {
  std::string name;
  std::uint32_t slot = kNoIndex;
  Type type;
  bool shaped = false;            // false: the data op's type is not a tensor (never matches)
  DataType dtype = DataType::Undefined;
  std::vector<std::int64_t> dims;  // -1: any extent
};

struct ExecutionPlan {
  ExecutionOptions options;
  // The plan's own copy of the program: kernels' contexts point at its ops,
  // and a cached plan outlives the caller's program.
  Program program;

  std::vector<PlanInstruction> instructions;
  std::vector<PlanSlot> slots;
  std::vector<PlanFeed> feeds;             // in the order of the feed names
  // Per fetch target: the slot read once every instruction is done (as
  // Paddle's fetch ops at the end of the program), copied when a parameter
  // (`deep`: its buffer outlives the run and a later run may update it).
  struct Fetch {
    std::uint32_t slot = kNoIndex;
    bool deep = false;
  };
  std::vector<Fetch> fetches;

  // Dependencies after transitive reduction: successors of i are
  // succ[succ_off[i] .. succ_off[i+1]); dep_count[i] predecessors; roots have none.
  std::vector<std::uint32_t> succ_off, succ, dep_count, roots;
  // GC: instruction i may free slots gc[gc_off[i] .. gc_off[i+1]); slot s is
  // freed when its ref_count[s] last users are done (0: never freed).
  std::vector<std::uint32_t> gc_off, gc;
  std::vector<std::int32_t> ref_count;
  // The buffer plan (plan_buffers): small temporaries of static shape are
  // resident (in no GC list: the variable keeps its buffer, and the run's
  // end parks it, Variable::park, so that it reads as collected); GC of slot
  // s keeps a buffer of at most recycle_max[s] bytes as the variable's spare
  // for the next run (0: frees it).
  std::vector<std::uint32_t> recycle_max;
  std::vector<std::uint32_t> resident;
  // Stream-safe GC (seed 001 §4.2): before GC frees slot s, its buffer is
  // recorded on the streams record[record_off[s] .. record_off[s+1]) — where
  // work on a device stream other than the compute stream touched it, every
  // device stream whose work touched it, the compute stream included (the
  // block returns to its writer stream's cache, whose next user is not
  // ordered after the other streams' work) — so a device block goes back to
  // the cache only once that work is done. Empty unless the plan has device
  // streams.
  std::vector<std::uint32_t> record_off, record;

  // Streams (all empty for a host-only program). lane[i]: -1 host, else the
  // stream index; records_event[i]: an event is recorded after i's launch;
  // i waits on the events of wait[wait_off[i] .. wait_off[i+1]).
  // stream_places[k]: the place of stream k (host_stream:k, or cuda:N for
  // the device's compute stream "cuda:N", its copy streams "cuda:N/h2d" and
  // "cuda:N/d2h", and any stream an execution_stream attribute names in a
  // cuda program).
  std::vector<std::string> stream_names;
  std::vector<Place> stream_places;
  std::vector<std::int16_t> lane;
  std::vector<std::uint8_t> records_event;
  std::vector<std::uint32_t> wait_off, wait;

  // For the thread plan: any kernel calls BLAS; any kernel may split its
  // loops (the Blas plan is then worth measuring); the DAG has independent
  // work (some instruction has two successors, or several roots).
  bool has_blas = false;
  bool has_intra_op = false;
  bool has_parallelism = false;
  // Some instruction's kernel is asynchronous (kiln/kernel/async_kernel.h):
  // runs count their outstanding work and resume after its callbacks.
  bool has_async = false;
  // Not null when the program holds dataflow ops (kiln/dialect/dataflow_ops.h):
  // a run goes through the frame propagator (kiln/exec/frame_propagator.h)
  // instead of the flat counters, which every other plan keeps.
  std::shared_ptr<const FramePlan> frames;

  // Introspection: the caller's values → the plan's slots.
  std::unordered_map<const detail::ValueImpl*, std::uint32_t> source_slot;

  std::uint32_t size() const { return static_cast<std::uint32_t>(instructions.size()); }
  bool has_streams() const { return !stream_names.empty(); }
  std::span<const std::uint32_t> successors(std::uint32_t i) const {
    return {succ.data() + succ_off[i], succ.data() + succ_off[i + 1]};
  }
  // kiln::Error naming the feed when `feeds` do not match what the program's
  // data ops expect (count, dtype, shape; -1 dims match any extent).
  void check_feeds(std::span<Tensor* const> feeds) const;
  // A region's plan: its Argument slots in block-argument order, and (as
  // `fetches`) the slots of its kiln.yield's operands. Its instructions
  // point into the root plan's program copy, which the root plan owns.
  std::vector<std::uint32_t> arguments;
  bool is_region() const { return region_depth > 0; }
  std::uint32_t region_depth = 0;

  // "op #3 'kiln.add'" (+ " on stream 's'"), for errors.
  std::string describe(std::uint32_t instruction) const;
  // "add#3": the op's name without its dialect and its index in its block,
  // one step of an error's path through regions (while#3 > body > add#1).
  std::string label(std::uint32_t instruction) const;
};

}  // namespace kiln

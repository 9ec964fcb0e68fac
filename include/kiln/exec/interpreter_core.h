// InterpreterCore: a Program pre-analysed once and run many times (seed 001
// §三 and §四). Building it maps each value to a Variable (in-place outputs
// share their input's; parameters live in the root scope by name,
// temporaries in a kid scope), picks each op's kernel (a function pointer),
// inserts data transfers where places differ, builds the dependency DAG and
// the GC plan, and caches a KernelContext per instruction. Running it does no
// string or map look-up and allocates nothing but tensor buffers. An
// instruction runs on the host or is launched onto a stream (an op's
// `execution_stream` attribute, or a host_stream place); successors follow as
// direct, event or sync (seed 001 §3.3.1.2, §4.2).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/exec/stream_analyzer.h"
#include "kiln/exec/work_queue.h"
#include "kiln/ir/program.h"
#include "kiln/kernel/kernel_registry.h"
#include "kiln/runtime/host_stream.h"
#include "kiln/runtime/scope.h"

namespace kiln {

// What to fetch: a value of the program, or a name — of a kiln.fetch op, a
// data op, or a parameter.
struct FetchTarget {
  FetchTarget(Value v) : value(v) {}                   // NOLINT
  FetchTarget(std::string n) : name(std::move(n)) {}   // NOLINT
  FetchTarget(const char* n) : name(n) {}              // NOLINT
  Value value;
  std::string name;
};

// Where a run's threads go when it has more than one (issue 4 §7): to the
// graph (workers run independent ops; BLAS single-threaded) or into the GEMMs
// (the caller runs every op; BLAS gets the threads). Never both: two spinning
// pools on the same cores made PyTorch's MLP 3x slower on 2 cores.
enum class ThreadPlan : std::uint8_t {
  Auto,   // measured: after calibration, a few runs of each, the faster kept
  Graph,
  Blas,
};

struct ExecutionConfig {
  // Host threads running the graph, the caller's included; 1 runs everything
  // on the caller's thread. 0: the work queue's threads + 1.
  unsigned num_threads = 0;
  // One thread, program order, no dependency counters (seed 001 "trace" mode).
  bool sequential = false;
  // Free each temporary after its last user.
  bool gc = true;
  // GC of a temporary of at most recycle_bytes keeps its buffer as the
  // variable's spare for the next run's kernel (Variable::recycle): freeing
  // and re-allocating small buffers every run costs more than the kernels of
  // a small model. At most recycle_budget bytes of spares per core (counted
  // at recycle_bytes per eligible temporary); 0 frees everything.
  std::size_t recycle_bytes = 4096;
  std::size_t recycle_budget = std::size_t{1} << 20;
  // Record per-instruction times (chrome_trace()).
  bool profile = false;
  // Values (of the program given to the constructor) never freed.
  std::vector<Value> skip_gc;
  // Only matters with num_threads > 1 and a kernel that calls BLAS (matmul);
  // otherwise the graph gets the threads and BLAS runs single-threaded.
  ThreadPlan thread_plan = ThreadPlan::Auto;
  // Where kernels run. cpu: on the host, except ops with an
  // `execution_stream` attribute. host_stream:N: every op on that place's
  // default stream (named "host_stream:N") unless its attribute names another.
  Place place = Place::cpu();
};

// The op attribute naming the stream an op's kernel is launched onto (a
// non-empty string; ops naming the same string share one in-order stream).
inline constexpr std::string_view kExecutionStreamAttr = "execution_stream";

class InterpreterCore {
 public:
  // Pre-analyses `program` for these feed names (data ops) and fetch targets.
  // `scope` is the caller's scope (its root holds parameters); `queue` the
  // shared host pool (null: run on the caller's thread only).
  InterpreterCore(const Program& program, Scope& scope, std::vector<std::string> feed_names,
                  const std::vector<FetchTarget>& fetch, ExecutionConfig config,
                  std::shared_ptr<WorkQueue> queue = nullptr);
  ~InterpreterCore();
  InterpreterCore(const InterpreterCore&) = delete;
  InterpreterCore& operator=(const InterpreterCore&) = delete;

  // `feeds` in the order of feed_names(). Returns the fetched tensors in the
  // order of the fetch targets. kiln::Error names a bad feed or a failing op
  // (the core stays usable).
  std::vector<Tensor> run(std::span<const Tensor> feeds = {});
  // The same, taking the feed tensors over (no reference-count traffic).
  std::vector<Tensor> run(std::vector<Tensor>&& feeds);

  const std::vector<std::string>& feed_names() const { return feed_names_; }
  std::size_t num_instructions() const { return instrs_.size(); }
  std::size_t num_variables() const { return vars_.size(); }

  // ---- introspection (tests, tools) ----
  struct InstructionInfo {
    std::string op_name;                 // "kiln.add", or "memcpy", "fetch", ...
    std::uint32_t op_index;              // position of its op in the program (or ~0)
    std::vector<std::uint32_t> successors;
    std::vector<SuccessorKind> successor_kinds;
    std::uint32_t num_predecessors;
    std::vector<std::uint32_t> reads, writes;  // variable slots
    std::vector<std::uint32_t> frees;          // slots it may free (last user of)
    Lane lane;                 // host, or stream index (stream_name())
    bool records_event = false;  // records an event after its launch (event/sync successors)
    std::vector<std::uint32_t> waits;  // predecessors whose event it waits on
  };
  InstructionInfo instruction(std::uint32_t i) const;
  // The slot of a value of the program given to the constructor (~0u if none).
  std::uint32_t slot_of(Value v) const;
  Variable* variable(std::uint32_t slot) const { return vars_[slot]; }
  // Graphviz DOT of the instruction DAG (solid: direct, dashed: event, bold: sync).
  std::string to_dot() const;
  // Chrome trace JSON (chrome://tracing, Perfetto) of the last profiled run.
  std::string chrome_trace() const;
  Scope& local_scope() const { return *local_scope_; }
  // Graph or Blas: the plan runs use once Auto has decided (after the two
  // calibration runs and kPlanTrials runs of each plan, which use the plan
  // under trial); a forced plan from the start.
  ThreadPlan thread_plan() const { return plan_; }
  static constexpr int kPlanTrials = 3;
  // Streams the core launches onto (Lane::stream indexes them), by name.
  std::size_t num_streams() const { return streams_.size(); }
  const std::string& stream_name(std::size_t k) const;

 private:
  // The hot part of an instruction: its kernel and cached context.
  struct Instruction {
    KernelFn fn = nullptr;
    KernelContext ctx;
  };
  struct Impl;
  void build(const Program& program, const std::vector<FetchTarget>& fetch);
  std::vector<Tensor> run_impl(Tensor* feeds, std::size_t num_feeds, bool take);
  void build_streams();
  // kStreams: the core has stream lanes. Host-only cores run the <false>
  // instantiations, which contain no lane, event or wait code at all.
  template <bool kStreams> void run_sequential();
  template <bool kStreams> void run_chain(std::uint32_t i);
  template <bool kStreams> bool execute(std::uint32_t i);
  void run_parallel();
  bool launch(std::uint32_t i);
  bool wait_on_host(std::uint32_t i);
  void run_on_stream(std::uint32_t i);
  void record_error(std::uint32_t i) noexcept;
  void synchronize_streams();
  void collect_garbage(std::uint32_t i);
  void hand_out(std::uint32_t i);
  void finish_task();
  static void task_entry(void* core, std::uint32_t i);
  void reset_counters();

  ExecutionConfig config_;
  std::shared_ptr<WorkQueue> queue_;
  Scope* scope_;
  Scope* local_scope_ = nullptr;
  std::vector<std::string> feed_names_;
  std::unique_ptr<Impl> impl_;

  // ---- flat per-run state (no allocation while running) ----
  std::vector<Instruction> instrs_;
  std::vector<Variable*> vars_;
  std::vector<std::uint32_t> succ_off_, succ_;
  std::vector<std::uint32_t> dep_static_;
  std::unique_ptr<std::atomic<std::int32_t>[]> dep_;
  std::vector<std::uint32_t> gc_off_, gc_;
  std::vector<std::int32_t> ref_static_;
  std::vector<std::uint32_t> recycle_max_;  // per slot: Variable::recycle's limit (0: clear)
  std::unique_ptr<std::atomic<std::int32_t>[]> ref_;
  std::vector<std::uint32_t> roots_;
  std::vector<std::uint32_t> local_ready_;  // single-thread hand-offs
  std::vector<std::uint32_t> sync_ready_;   // single-thread: ready sync successors
  // Cost classes (seed 003: "expensive" = measured above ~8000 cycles).
  static constexpr std::int64_t kExpensiveNs = 2000;
  std::vector<std::uint8_t> expensive_;
  std::vector<std::int64_t> cost_ns_;
  int calibration_runs_left_ = 2;
  // Thread plan (issue 4 §7): pool_ is queue_ for a Graph run, null for a
  // Blas run (the caller runs every op). plan_trials_ counts measured runs.
  WorkQueue* pool_ = nullptr;
  bool solo_ = false;  // this run's counters are touched by one thread only
  bool has_blas_ = false;
  ThreadPlan plan_ = ThreadPlan::Graph;
  int plan_trials_ = 0;
  std::int64_t plan_best_ns_[2] = {std::numeric_limits<std::int64_t>::max(),
                                   std::numeric_limits<std::int64_t>::max()};
  void apply_thread_plan(ThreadPlan plan);
  bool calibrating_ = false;
  // Streams (empty for host-only programs). lane_[i]: -1 host, else the index
  // of instruction i's stream; out_event_[i]: recorded after i's launch when
  // i has event/sync successors; wait_[wait_off_[i]..]: the predecessors
  // whose events i waits on (its stream waits, or the host blocks).
  std::vector<std::int16_t> lane_;
  std::vector<std::unique_ptr<HostStream>> streams_;
  std::vector<std::unique_ptr<Event>> out_event_;
  std::vector<std::uint32_t> wait_off_, wait_;

  // Tasks queued or running (queue mode); see finish_task() for completion.
  std::atomic<std::int64_t> pending_{0};
  std::mutex done_mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;  // guarded by done_mutex_
  std::atomic<bool> abort_{false};
  std::mutex error_mutex_;
  std::exception_ptr error_;
  std::uint32_t error_instr_ = 0;
  bool dirty_ = false;
  std::mutex run_mutex_;
};

}  // namespace kiln

// RunState: everything one run over an ExecutionPlan mutates (TensorFlow's
// per-step ExecutorState, seed 003): the variables the plan's slots bind to
// (temporaries and fetch results owned here, feeds in a kid scope of the
// caller's scope, parameters in its root), a KernelContext per instruction
// over them, the dependency and reference counters, the stream lanes' events,
// and the run's first error. Several run states over one plan run at the
// same time; one state runs one run at a time and is reused run after run,
// so a run allocates nothing but tensor buffers.
//
// The scheduler is the run state's own code (run_state_scheduling.cc): in
// program order on one thread, or from the DAG's roots with ready
// successors run inline when cheap and handed to the pool when expensive
// (seed 001 §4.1, seed 003's inline ready queue), stream instructions
// launched with their events. A plan with asynchronous kernels, and an
// asynchronous run, count their outstanding work instead and end on
// whichever thread finishes it last (run_state_async.cc).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "kiln/exec/control_flow.h"
#include "kiln/exec/cost_model.h"
#include "kiln/exec/execution_plan.h"
#include "kiln/exec/memory_plan.h"
#include "kiln/exec/run_options.h"
#include "kiln/exec/work_queue.h"
#include "kiln/runtime/cancellation.h"
#include "kiln/runtime/deadline_timer.h"
#include "kiln/runtime/cuda_graph.h"
#include "kiln/runtime/host_stream.h"
#include "kiln/runtime/scope.h"

namespace kiln {

struct StepStats;
class FramePropagator;

// How one run goes (decided by the core for each run).
struct RunConfig {
  ThreadPlan plan = ThreadPlan::Sequential;  // Sequential, Graph or Blas
  WorkQueue* pool = nullptr;                 // Graph: the workers
  CostModel* costs = nullptr;
  // Not null: the run's StepStats are collected there (kiln/exec/step_stats.h;
  // a failed run's too: the instructions that finished, `failed`, its error).
  StepStats* stats = nullptr;
  bool measure = false;                      // time every kernel into `costs`
  // Where the continuation of an asynchronous kernel that completed on
  // another thread runs, and an asynchronous run's first task: the pool, or
  // a one-thread queue when the core has none.
  WorkQueue* resume = nullptr;
};

// Marks the run itself (not an instruction) as the source of its error: a
// cancellation or a deadline.
inline constexpr std::uint32_t kRunIndex = kNoIndex - 1;

class RunState {
 public:
  // Binds the plan's slots to variables and builds the kernel contexts.
  // kiln::Error (NotFound) naming a parameter the scope lacks (and that no
  // set_parameter of the program writes) — thrown before the scope changes.
  RunState(std::shared_ptr<const ExecutionPlan> plan, Scope& scope);
  // A run state over a region's plan (kiln/exec/control_flow.h): its
  // Argument slots bind to `arguments` (in the plan's argument order), its
  // parameters to `root`; it has no feeds, no kid scope.
  RunState(std::shared_ptr<const ExecutionPlan> region_plan, Scope& root,
           std::span<Variable* const> arguments);
  // Drops the kid scope (feeds, fetch-op results).
  ~RunState();
  RunState(const RunState&) = delete;
  RunState& operator=(const RunState&) = delete;

  // One run. `feeds` (already checked against the plan) are moved in when
  // `take`, else shared (never written then); the fetched tensors are moved into `results` (one
  // per fetch target). kiln::Error names a failing op; the state stays usable.
  // `options` (may be null): the step id, deadline, cancellation token and
  // rendezvous of this run.
  void run(std::span<Tensor* const> feeds, bool take, const RunConfig& config, std::span<Tensor> results,
           const RunOptions* options = nullptr);

  // An asynchronous run's end, called once on the thread that finishes the
  // run's last work — a pool thread, possibly still inside start().
  struct Completion {
    void (*fn)(void* arg, RunState& state) noexcept = nullptr;
    void* arg = nullptr;
  };
  // Starts one run on this thread (a pool worker) and returns when no work
  // of it is left for this thread: the rest runs on config.pool /
  // config.resume and after asynchronous kernels' callbacks; `completion`
  // is called when all of it is done. `feeds` and `results` must stay valid
  // until then; config.resume must be set.
  void start(std::span<Tensor* const> feeds, bool take, const RunConfig& config,
             std::span<Tensor> results, const RunOptions& options, Completion completion);
  // After the completion: the run's results into the `results` given to
  // start(), or its first error (null when it succeeded). Feeds are dropped.
  std::exception_ptr finish_async() noexcept;

  // One run of a region's plan, in program order on this thread. A failing
  // op's error is rethrown as a RegionError whose path starts at that op.
  void run_region();
  // Frees every temporary (a region's state after an error, or when its
  // loop is done with it).
  void release_temporaries() noexcept;
  const ExecutionPlan& plan() const { return *plan_; }
  // Runs started so far.
  std::uint64_t num_runs() const { return runs_; }
  Variable* variable(std::uint32_t slot) const { return vars_[slot]; }
  Scope& local_scope() const { return *local_scope_; }
  // Whether the scope the state was made in still exists (a root state).
  bool scope_alive() const { return !scope_alive_.expired(); }
  // Chrome trace JSON of this state's last profiled run. The instructions of
  // regions appear under their control-flow op, as of their last iteration
  // (category "region", named by their path: "while#3 > body > add#1").
  std::string chrome_trace() const;
  // The memory plan of this state's arena (kiln/exec/memory_plan.h): null
  // before the first run ends, or when nothing of the plan is planned.
  const MemoryPlan* memory_plan() const { return memory_.get(); }

 private:
  // The hot part of an instruction: its kernel and cached context.
  // fn is null for an asynchronous kernel (the plan instruction's async_fn).
  struct Instruction {
    KernelFn fn = nullptr;
    KernelContext ctx;
  };
  // What execute() did with an instruction.
  enum class Step : std::uint8_t {
    Ran,        // done: its successors may run
    Failed,     // not run, or failed: the run is aborting
    Suspended,  // an asynchronous kernel still running: its callback resumes
  };

  // Binding (run_state.cc).
  void check_parameters(const Scope& root) const;
  void bind_variables(Scope& root, std::span<Variable* const> arguments = {});
  void build_contexts(Scope& root);
  Allocator* context_allocator(std::uint32_t i) const;
  void allocate_counters();
  void create_streams();
  void attach_streams();
  void reset_counters();
  void begin_run(const RunConfig& config);
  void run_launches(std::span<Tensor* const> feeds, bool take, const RunConfig& config,
                    std::span<Tensor> results, const RunOptions* options = nullptr);
  void finish_run(std::size_t num_feeds, std::span<Tensor> results);
  // Step stats (run_state.cc).
  void run_with_stats(std::span<Tensor* const> feeds, bool take, const RunConfig& config,
                      std::span<Tensor> results,
                      const RunOptions* options);
  void prepare_stats();
  void collect_stats(StepStats& stats, std::int64_t t0) const;
  std::int64_t output_bytes(std::uint32_t i) const;
  // CUDA graph mode (run_state_graph.cc).
  struct GraphMode;
  std::string graph_blocker() const;
  void run_graph(std::span<Tensor* const> feeds, bool take, const RunConfig& config,
                 std::span<Tensor> results);
  bool capture(std::span<Tensor* const> feeds, const RunConfig& config);
  void graph_off(const std::string& why);
  [[noreturn]] void rethrow_error();
  [[noreturn]] void rethrow_region_error();
  void append_trace_events(std::ostream& os, std::int64_t t0, const std::string& path,
                           bool& first) const;

  // Scheduling (run_state_scheduling.cc). kStreams: the plan has stream
  // lanes; host-only plans run the <false> instantiations, which contain no
  // lane, event or wait code at all.
  void schedule();
  // A plan with frames (kiln/exec/frame_propagator.h) runs here instead.
  void run_frames();
  void collect_frame_stats(StepStats& stats, std::int64_t t0) const;
  // kAsync: the plan has asynchronous kernels. Instantiated apart, so a
  // plan without them runs the very loops it ran before they existed.
  template <bool kStreams, bool kAsync = false> void run_in_order();
  template <bool kStreams, bool kAsync = false> void run_chain(std::uint32_t i, bool resumed = false);
  template <bool kStreams, bool kAsync = false> Step execute(std::uint32_t i);
  void run_from_roots();
  void run_ready_on_caller();
  void run_with_pool();
  bool launch(std::uint32_t i);
  bool wait_on_host(std::uint32_t i);
  void run_on_stream(std::uint32_t i);
  void run_kernel(std::uint32_t i);
  void run_kernel_timed(std::uint32_t i);
  void record_error(std::uint32_t i) noexcept;
  void record_error(std::uint32_t i, std::exception_ptr error) noexcept;
  void abort_rendezvous(std::uint32_t i, const std::exception_ptr& cause) noexcept;
  void synchronize_streams();
  void collect_garbage(std::uint32_t i);
  void record_streams(std::uint32_t slot);
  void hand_out(std::uint32_t i);
  void finish_task();
  static void task_entry(void* state, std::uint32_t i);

  // Asynchronous kernels, counted runs, run options (run_state_async.cc).
  struct AsyncSlot {
    // 0: the starter is inside compute_async; kAsyncLeft: it returned
    // first; kAsyncDone: done was called first.
    std::atomic<std::uint8_t> state{0};
    std::exception_ptr error;  // written by done before its exchange
  };
  static constexpr std::uint8_t kAsyncLeft = 1, kAsyncDone = 2;
  Step start_async_kernel(std::uint32_t i);
  static void async_kernel_done(void* state, std::uint32_t i, const Error* error) noexcept;
  static void resume_entry(void* state, std::uint32_t i);
  void resume_after(std::uint32_t i);
  void schedule_counted();
  void wait_counted();
  void complete() noexcept;
  void begin_step(const RunOptions* options);
  void end_step() noexcept;
  void cancel_run(ErrorKind kind) noexcept;

  std::shared_ptr<const ExecutionPlan> plan_;
  Scope* scope_;
  std::weak_ptr<const void> scope_alive_;  // scope_->lifetime()
  Scope* local_scope_ = nullptr;

  // Variables: slot → Variable*; temporaries and fetch results live in owned_.
  std::vector<Variable*> vars_;
  std::unique_ptr<Variable[]> owned_;
  std::vector<Instruction> instrs_;
  std::unique_ptr<Variable*[]> io_;  // every context's input and output pointers
  // Control-flow instructions' runners (their contexts' attributes).
  std::vector<std::unique_ptr<ControlFlowRunner>> runners_;
  // A plan with frames: its propagator (null otherwise).
  std::unique_ptr<FramePropagator> frames_;

  // Counters, restored to the plan's counts as they fire (a clean run leaves
  // them ready for the next; a failed one sets dirty_).
  std::unique_ptr<std::atomic<std::int32_t>[]> dep_;
  std::unique_ptr<std::atomic<std::int32_t>[]> ref_;
  bool dirty_ = false;
  std::vector<std::uint32_t> local_ready_;  // hand-offs without a pool
  std::vector<std::uint32_t> sync_ready_;   // without a pool: ready sync successors

  // Streams of this state (the plan's stream names) and the events recorded
  // after the instructions that have event or sync successors.
  // streams_[k] is stream k of the plan: a host stream of this state's own,
  // or a CUDA stream (the device context's compute and copy streams, or one
  // of this state's own for a named stream).
  std::vector<Stream*> streams_;
  std::vector<std::unique_ptr<Stream>> owned_streams_;
  std::vector<std::unique_ptr<Event>> out_event_;

  // CUDA graph mode: null unless the plan asks for it and can be captured.
  std::unique_ptr<GraphMode> graph_;
  // Set while a captured graph holds the temporaries' buffers: GC frees nothing.
  bool keep_temporaries_ = false;

  // The memory plan (run_state_memory.cc): the first synchronous run is a
  // probe, whose end plans the arena; later runs put the arena's pieces in
  // their slots and collect garbage by the arena's lists. The probe runs as
  // the run's thread plan says; a failed one is dropped at its run's end.
  enum class MemoryStage : std::uint8_t { Off, Unplanned, Probing, Planned };
  MemoryStage memory_stage_ = MemoryStage::Off;
  std::shared_ptr<const MemoryPlan> memory_;
  std::unique_ptr<MemoryArena> arena_;  // for the last planned run's schedule
  bool arena_placed_ = false;   // the slots hold their pieces
  bool arena_checked_ = false;  // a run over the pieces was checked
  std::uint8_t replans_ = 0;
  bool probing_ = false;  // this run is the probe: GC records each slot it frees
  std::unique_ptr<MemoryProbe> probe_;
  // A probe over the pool (other slots change while GC frees one): per slot,
  // the shared buffer GC freed, kept (so its address names it) until
  // finish_probe groups the slots by buffer. Empty for a probe in order.
  std::vector<BufferRef> probe_held_;
  std::vector<std::uint8_t> unplanned_slots_;  // kernels that left their piece
  // The GC lists in use: the plan's, or the arena's (without its slots).
  const std::uint32_t* gc_off_ = nullptr;
  const std::uint32_t* gc_ = nullptr;
  void park_kept_buffers() noexcept;
  void prepare_memory(bool may_probe);
  void probe_slot(std::uint32_t slot);
  void finish_probe();
  void drop_probe() noexcept;
  void group_probed_buffers(MemoryProbe& probe);
  void check_arena();
  void place_arena();
  void use_plan_gc();

  // This run.
  RunConfig config_;
  bool solo_ = false;  // one thread touches every counter
  bool timed_ = false; // profile or measure: read the clock around kernels
  bool record_ = false; // profile or step stats: keep each kernel's times
  std::uint64_t runs_ = 0;

  // Tasks queued or running (pool runs); see finish_task() for completion.
  std::atomic<std::int64_t> pending_{0};
  std::mutex done_mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;  // guarded by done_mutex_
  std::atomic<bool> abort_{false};
  std::mutex error_mutex_;
  std::exception_ptr error_;
  std::uint32_t error_instr_ = 0;
  // After a cancellation or deadline (error_instr_ == kRunIndex): the first
  // asynchronous kernel that was waiting, and its own error. Guarded by
  // error_mutex_.
  std::uint32_t waiting_instr_ = kNoIndex;
  std::exception_ptr waiting_error_;

  // Counted runs: a plan with asynchronous kernels, or start(). pending_
  // then counts the run's tasks and outstanding asynchronous kernels; the
  // thread that takes it to 0 finishes the run.
  bool counted_ = false;
  bool blocking_ = false;   // a region's run: wait for asynchronous kernels here
  std::unique_ptr<AsyncSlot[]> async_;  // per instruction, when the plan has async kernels
  Completion completion_;               // set for start()'s runs
  std::span<Tensor> async_results_;
  std::size_t async_num_feeds_ = 0;
  std::exception_ptr async_error_;      // a failure of start() itself
  std::unique_ptr<CostModel> own_costs_;  // counted runs given no cost model
  // The run's step (kernels' StepContext), its own cancellation manager
  // (cancelled when the run is cancelled, passes its deadline or fails: it
  // wakes asynchronous kernels), the caller's token and the deadline.
  StepContext step_;
  std::unique_ptr<CancellationManager> cancel_;
  CancellationManager* user_cancel_ = nullptr;
  CancellationToken user_token_ = kNoCancellationToken;
  DeadlineTimer::Handle timer_;

  // Profiling and step stats (one entry per instruction, last recorded run).
  std::vector<std::int64_t> t_start_, t_end_;
  std::vector<std::uint32_t> t_thread_;
  std::vector<std::int64_t> t_bytes_;  // step stats: bytes each output allocated
  // Profiling on CUDA streams: timing events around each kernel, read after
  // the run against one recorded at its start (so the trace shows device
  // time, one row per stream, and copies overlapping compute).
  std::vector<std::unique_ptr<Event>> dev_start_, dev_end_;
  std::unique_ptr<Event> dev_base_;
  std::size_t dev_base_stream_ = 0;
  std::int64_t dev_base_host_ns_ = 0;
  void create_device_timers();
  void read_device_times();
};

// CUDA graph mode's state: the first run launches kernels (lazy set-up such
// as cuBLAS handles and the allocator's first blocks happens outside any
// capture), the second captures, later ones replay. The captured copies
// read the feeds from page-locked buffers of this state's (each run's feeds
// are copied in) and the fetches land in page-locked buffers, copied out.
struct RunState::GraphMode {
  enum class Stage : std::uint8_t { Warmup, Capture, Replay };
  Stage stage = Stage::Warmup;
  CudaGraph graph;
  std::vector<Tensor> staged;  // per feed: the buffer the graph reads
  // A feed on the device is read in place from the tensor fed at capture
  // (no copy per replay) while that buffer is fed again; another buffer
  // makes a recapture that stages device feeds in the graph's own buffers,
  // copied into before every replay.
  bool own_device_feeds = false;
  int captures = 0;
  static constexpr int kMaxCaptures = 3;
};

}  // namespace kiln

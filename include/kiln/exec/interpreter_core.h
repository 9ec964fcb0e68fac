// InterpreterCore: a Program pre-analysed once and run many times (seed 001
// §三 and §四). Building it maps each value to a Variable (in-place outputs
// share their input's; parameters live in the root scope by name,
// temporaries in a kid scope), picks each op's kernel (a function pointer),
// inserts data transfers where places differ, builds the dependency DAG and
// the GC plan, and caches a KernelContext per instruction. Running it does no
// string or map look-up and allocates nothing but tensor buffers.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "kiln/exec/stream_analyzer.h"
#include "kiln/exec/work_queue.h"
#include "kiln/ir/program.h"
#include "kiln/kernel/kernel_registry.h"
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

struct ExecutionConfig {
  // Host threads running the graph, the caller's included; 1 runs everything
  // on the caller's thread. 0: the work queue's threads + 1.
  unsigned num_threads = 0;
  // One thread, program order, no dependency counters (seed 001 "trace" mode).
  bool sequential = false;
  // Free each temporary after its last user.
  bool gc = true;
  // Record per-instruction times (chrome_trace()).
  bool profile = false;
  // Values (of the program given to the constructor) never freed.
  std::vector<Value> skip_gc;
  Place place = Place::cpu();
};

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

 private:
  // The hot part of an instruction: its kernel and cached context.
  struct Instruction {
    KernelFn fn = nullptr;
    KernelContext ctx;
  };
  struct Impl;
  void build(const Program& program, const std::vector<FetchTarget>& fetch);
  void run_sequential();
  void run_parallel();
  void run_chain(std::uint32_t i);
  bool execute(std::uint32_t i);
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
  std::unique_ptr<std::atomic<std::int32_t>[]> ref_;
  std::vector<std::uint32_t> roots_;
  std::vector<std::uint32_t> local_ready_;  // single-thread hand-offs
  // Cost classes (seed 003: "expensive" = measured above ~8000 cycles).
  static constexpr std::int64_t kExpensiveNs = 2000;
  std::vector<std::uint8_t> expensive_;
  std::vector<std::int64_t> cost_ns_;
  int calibration_runs_left_ = 2;
  bool calibrating_ = false;
  std::atomic<std::int64_t> pending_{0};
  std::atomic<bool> abort_{false};
  std::mutex error_mutex_;
  std::exception_ptr error_;
  std::uint32_t error_instr_ = 0;
  bool dirty_ = false;
  std::mutex run_mutex_;
};

}  // namespace kiln

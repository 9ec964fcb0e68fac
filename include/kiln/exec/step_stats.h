// StepStats: what one run did, instruction by instruction (TensorFlow's
// RunMetadata.step_stats, seed 003's stats collector; PyTorch's profiler
// events). A run collects it only when its caller asks — passes a StepStats
// to Executor::run or InterpreterCore::run — and a run that does not ask
// reads no clock and records nothing. From it: a Chrome trace
// (chrome://tracing, Perfetto) and a profiler-style table, one line per op
// kind sorted by total time (torch.profiler's key_averages().table()).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

// One instruction of the run.
struct NodeStats {
  std::uint32_t instruction = 0;  // its index in the plan
  std::string op_name;            // "kiln.matmul", "memcpy h2d", "fetch", ...
  std::string label;              // "matmul#7": the op and its position in the program
  // Nanoseconds from the step's start (StepStats::start_ns). A kernel on a
  // CUDA stream has its device times; on the host, its kernel call's.
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  // The thread that ran it (a small tag, equal for one thread within a run;
  // for a CUDA stream, 1000000 + its stream index) and its stream's name
  // ("" for a host instruction, "host_stream:0", "cuda:0/h2d", ...).
  std::uint32_t thread = 0;
  std::string stream;
  // Bytes of the tensors it wrote to its outputs whose buffers are not
  // shared with one of its inputs (an in-place op or a view allocates none).
  std::int64_t bytes_allocated = 0;
  // A program with dataflow loops (kiln/exec/frame_propagator.h) runs an
  // op once per iteration: the frame it ran in ("" at the top level) and
  // its iteration there (-1 at the top level). Other programs leave these.
  std::string frame;
  std::int64_t iteration = -1;

  std::int64_t duration_ns() const { return end_ns - start_ns; }
};

struct StepStats {
  // The run this describes: its ordinal among the core's runs (1 for the
  // first) and where it started, on the steady clock (ns since its epoch).
  std::uint64_t step_id = 0;
  std::int64_t start_ns = 0;
  // From the run's start to its end (the caller's view, feeds to fetches).
  std::int64_t wall_ns = 0;
  // One per instruction the run ran, in plan order. A failed run keeps the
  // instructions that finished before the failure (`failed` set); a run
  // replayed as a CUDA graph (ExecutionOptions::cuda_graph) has none, as no
  // kernel was launched on its own.
  std::vector<NodeStats> nodes;
  bool failed = false;
  std::string error;  // the failed run's error message

  void clear();
  std::int64_t total_bytes_allocated() const;
};

// Chrome trace JSON of `stats`: a complete ("X") event per node, named by
// its op, with its label, instruction and bytes as arguments; one row per
// thread or stream (streams named by a thread_name record). Times in µs.
std::string to_chrome_trace(const StepStats& stats);

// One line per op kind (its op_name): calls, total, mean, min and max time,
// its share of the step's wall time and bytes allocated, sorted by total
// time, longest first; a header and a totals line. Widths fit the longest name.
std::string summary_table(const StepStats& stats);

// The per-op-kind rows of summary_table, for code that wants the numbers.
struct OpSummary {
  std::string op_name;
  std::uint64_t calls = 0;
  std::int64_t total_ns = 0;
  std::int64_t min_ns = 0;
  std::int64_t max_ns = 0;
  std::int64_t bytes_allocated = 0;

  double mean_ns() const { return calls ? double(total_ns) / double(calls) : 0.0; }
};
// Sorted by total_ns, longest first (ties: by name).
std::vector<OpSummary> summarize(const StepStats& stats);

// ---- inline definitions ----

inline void StepStats::clear() {
  step_id = 0;
  start_ns = 0;
  wall_ns = 0;
  nodes.clear();
  failed = false;
  error.clear();
}

inline std::int64_t StepStats::total_bytes_allocated() const {
  std::int64_t total = 0;
  for (const NodeStats& n : nodes) total += n.bytes_allocated;
  return total;
}

}  // namespace kiln

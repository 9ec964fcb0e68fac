// FramePropagator: the per-run-state half of running a program with frames
// (seed 003: TensorFlow's PropagatorState, FrameState and IterationState).
// A frame instance is made when the first of its enters fires in an
// iteration of its parent and deleted when its enters have all arrived and
// its last iteration is done; each iteration has its own pending and dead
// counts and its own input table, so the values of one iteration are freed
// as their readers run and an iteration's table is reused once the
// iteration is done. At most parallel_iterations iterations of a frame are
// live; a next_iteration that would start one more waits until the oldest
// is done. A node whose inputs include a dead one is not run and its
// outputs are dead (a merge excepted: it forwards the first live input and
// is dead only when every input that can arrive is dead). An exit that never
// got a live value gives a dead one when its frame is done.
//
// One thread (no pool) runs every node with no lock; with a pool, the
// propagation state is guarded by one mutex and kernels run outside it.
// Programs without dataflow ops never get here: their plan has no FramePlan
// and keeps the flat counters of run_state_scheduling.cc.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "kiln/exec/frame_plan.h"
#include "kiln/kernel/step_context.h"
#include "kiln/runtime/variable.h"

namespace kiln {

class WorkQueue;

class FramePropagator {
 public:
  // `vars`: the run state's variable per plan slot (parameters, feeds,
  // fetched values); `step`: the kernels' step context.
  FramePropagator(const ExecutionPlan& plan, std::span<Variable* const> vars, const StepContext* step);
  ~FramePropagator();
  FramePropagator(const FramePropagator&) = delete;
  FramePropagator& operator=(const FramePropagator&) = delete;

  struct Failure {
    std::uint32_t instruction = kNoIndex;  // the failing op's plan instruction; kNoIndex: the run's
    std::exception_ptr error;
  };
  // One run: every node, from the top level's roots. `pool` null: on this
  // thread alone; else on this thread and up to num_threads - 1 of the
  // pool's. Stops early when `abort` is set (checked before each node).
  // Every frame is gone afterwards, error or not.
  Failure run(WorkQueue* pool, unsigned num_threads, const std::atomic<bool>& abort);
  // After a run: whether the value kept in `slot` (a fetched value) was dead.
  bool dead(std::uint32_t slot) const { return slot < slot_dead_.size() && slot_dead_[slot]; }
  // The last run's most iterations of one static frame live at once (tests,
  // benchmarks), and frames made over the whole run.
  std::int64_t peak_iterations(std::uint32_t static_frame) const { return peak_[static_frame]; }
  std::int64_t frames_made() const { return frames_made_; }
  // Frames alive now (0 outside a run).
  std::size_t live_frames() const { return live_frames_; }
  const FramePlan& frame_plan() const { return fp_; }

  // Step stats: with recording on, each node a run executes (dead ones
  // aside) leaves a record of its frame and iteration.
  struct Record {
    std::uint32_t node = 0;
    std::uint32_t frame = 0;       // static frame
    std::int64_t iteration = 0;
    std::int64_t start_ns = 0, end_ns = 0;  // steady clock
    std::uint32_t thread = 0;
  };
  void set_recording(bool on) { record_ = on; }
  const std::vector<Record>& records() const { return records_; }

 private:
  struct Entry {
    Variable var;
    Variable* ref = nullptr;  // set: the value is this variable (a frame's constant), not var
    bool dead = false;
    Variable& value() { return ref ? *ref : var; }
  };
  // How deliver() passes a value on.
  enum class Pass : std::uint8_t { Share, Take, Ref };
  static void put(Entry& x, Variable& value, Pass pass);
  struct Frame;
  struct Iteration {
    std::int64_t id = 0;
    std::int32_t outstanding = 0;         // its nodes ready or running
    std::int32_t outstanding_frames = 0;  // child frames made from it, not yet done
    std::int32_t partial = 0;  // nodes (merges aside) with some inputs arrived, not all
    std::unique_ptr<std::int32_t[]> pending;  // per local node: inputs to arrive
    std::unique_ptr<std::int32_t[]> dead;     // per local node: dead inputs (a fired merge: -1 - input)
    std::unique_ptr<Entry[]> inputs;          // the frame's input table
    std::vector<Frame*> children;
  };
  struct Deferred {
    std::uint32_t node;  // a next_iteration
    Variable value;
  };
  struct Frame {
    std::uint32_t info = 0;
    Frame* parent = nullptr;
    Iteration* parent_iter = nullptr;
    std::int64_t newest = -1;  // id of the newest iteration started
    std::int32_t pending_enters = 0;
    std::deque<Iteration*> iterations;  // live ones, oldest first
    std::vector<Deferred> deferred;     // the next iteration's inputs, waiting for room
    std::vector<Entry> constants;       // per constant enter
    std::vector<std::uint8_t> constant_arrived, exit_fired;
    std::size_t live_index = 0;         // in live_
  };
  struct Ready {
    std::uint32_t node;
    Frame* frame;
    Iteration* iter;
    bool dead;
  };
  // A node's outputs between its kernel and their propagation.
  struct Outputs {
    static constexpr std::uint32_t kInline = 4;
    Variable small[kInline];
    std::vector<Variable> more;
    std::uint64_t dead = 0;  // bit o: output o is dead
    // Bit o: output o is the node's input entry from[o] itself (switch,
    // merge, enter, exit, next_iteration pass a value on without a move).
    std::uint64_t forwarded = 0;
    Entry* from[kInline] = {};
    Variable& at(std::uint32_t o) { return o < kInline ? small[o] : more[o - kInline]; }
    void forward(std::uint32_t o, Entry* e) {
      forwarded |= std::uint64_t{1} << o;
      from[o] = e;
    }
    void prepare(std::uint32_t n);
  };

  void execute(const Ready& r, Outputs& out);
  void execute_recorded(const Ready& r, Outputs& out);
  void run_kernel(const Ready& r, Outputs& out);
  void propagate(const Ready& r, Outputs& out);
  // propagate(), by phase: output o's variable (null: dead) and how it may
  // move on; fetched outputs' shares; the enter and next_iteration cases.
  Variable* output_value(const FrameNode& n, Outputs& out, std::uint32_t o);
  Pass output_pass(const FrameNode& n, const Outputs& out, std::uint32_t o) const;
  void keep_fetched(const FrameNode& n, Outputs& out);
  void propagate_enter(const Ready& r, Outputs& out);
  void propagate_next_iteration(const Ready& r, Outputs& out);
  void clear_inputs(const Ready& r) noexcept;
  void prepare_outputs(const Ready& r, Outputs& out);
  void record_outputs(const FrameNode& n, Outputs& out);
  void deliver(Frame* f, Iteration* it, const FrameEdge& e, Variable* value, Pass pass);
  void deliver_all(Frame* f, Iteration* it, std::uint32_t node, std::uint32_t output, Variable* value,
                   Pass pass);
  void push(std::uint32_t node, Frame* f, Iteration* it, bool dead);
  Frame* child_frame(Frame* parent, Iteration* it, std::uint32_t info);
  Iteration* start_iteration(Frame* f);
  void cleanup(Frame* f);
  void finish_frame(Frame* f);
  void release_iteration(std::uint32_t info, Iteration* it) noexcept;
  void release_all() noexcept;
  void fail(std::uint32_t node, std::exception_ptr e) noexcept;
  [[noreturn]] void throw_stalled(const Frame* f, const Iteration* it) const;
  // The pool side.
  void work(bool caller);
  static void work_entry(void* self, std::uint32_t);
  bool pop(Ready& r);

  const ExecutionPlan& plan_;
  const FramePlan& fp_;
  std::vector<Variable*> vars_;
  const StepContext* step_;
  // Free buffers kept at most (ExecutionOptions::recycle_budget; 0 without GC).
  std::size_t recycle_budget_;

  // Recycled storage, per static frame.
  std::vector<std::vector<std::unique_ptr<Iteration>>> free_iterations_;
  std::vector<std::unique_ptr<Frame>> free_frames_;
  std::vector<std::unique_ptr<Iteration>> owned_iterations_;
  std::vector<std::unique_ptr<Frame>> owned_frames_;
  std::vector<Frame*> live_;  // frames alive in this run
  std::size_t live_frames_ = 0;
  Frame* root_ = nullptr;

  // The ready nodes, first in first out: a ring that grows, never shrinks
  // (a deque allocates a block every few pushes).
  class ReadyQueue {
   public:
    bool empty() const noexcept { return size_ == 0; }
    void push_back(const Ready& r) {
      if (size_ == buf_.size()) grow();
      buf_[(head_ + size_) & (buf_.size() - 1)] = r;
      ++size_;
    }
    Ready pop_front() noexcept {
      Ready r = buf_[head_];
      head_ = (head_ + 1) & (buf_.size() - 1);
      --size_;
      return r;
    }
    void clear() noexcept { head_ = size_ = 0; }

   private:
    void grow() {
      std::vector<Ready> bigger(buf_.empty() ? 64 : buf_.size() * 2);
      for (std::size_t k = 0; k < size_; ++k) bigger[k] = buf_[(head_ + k) & (buf_.size() - 1)];
      buf_.swap(bigger);
      head_ = 0;
    }
    std::vector<Ready> buf_;  // size: 0 or a power of two
    std::size_t head_ = 0, size_ = 0;
  };
  ReadyQueue ready_;
  // Buffers freed by the last reader of a value (clear_inputs), at most
  // kMaxFreeBuffers and recycle_budget_ bytes (free_bytes_), dropped at the
  // run's end; a kernel's output starts in one of the size it wrote last
  // time (prepare_outputs; last_outputs_, per node from output_base_: its
  // first kOutputShapes outputs, set by record_outputs). Under mu_ with a pool.
  static constexpr std::size_t kMaxFreeBuffers = 64;
  static constexpr std::uint32_t kOutputShapes = 4;
  struct OutputShape {
    Dims dims;
    DataType dtype = DataType::Undefined;
    std::size_t bytes = 0;
  };
  std::vector<BufferRef> free_buffers_;
  std::size_t free_bytes_ = 0;
  std::vector<std::uint32_t> output_base_;
  std::vector<OutputShape> last_outputs_;
  std::vector<std::uint8_t> slot_dead_;
  std::vector<std::int64_t> peak_;
  std::int64_t frames_made_ = 0;
  bool record_ = false;
  std::vector<Record> records_;
  Failure failure_;

  // This run's threading (all below under mu_ when pool_ is set).
  WorkQueue* pool_ = nullptr;
  const std::atomic<bool>* abort_ = nullptr;
  unsigned max_workers_ = 1;
  unsigned active_ = 0;
  bool stop_ = false;
  unsigned running_ = 0;  // threads running a node (between its pop and its propagation)
  unsigned waiting_ = 0;  // threads asleep on idle_
  std::mutex mu_;
  std::condition_variable idle_;
};

}  // namespace kiln

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
// is dead only when every input that can arrive is dead; and a kiln.send,
// which sends the dead value on). An exit that never
// got a live value gives a dead one when its frame is done.
//
// One thread (no pool) runs every node with no lock; with a pool, the
// propagation state is guarded by one mutex and kernels run outside it.
// An asynchronous kernel (a kiln.recv) holds no thread while it waits: its
// node stays outstanding until its done comes (from any thread), and a
// worker then propagates its outputs; a run with such kernels takes the
// mutex even on one thread, and its caller sleeps while only they are left.
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
#include "kiln/kernel/kernel_context.h"
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
  // run() on this thread alone, for an asynchronous run: while only
  // asynchronous kernels are left it holds no thread, and their done takes
  // the run up again on `resume`. `finish(arg, failure)` comes once the run
  // is over — before start() returns, or on a thread of `resume` — and is
  // the run's last touch of this propagator.
  using Finish = void (*)(void* arg, Failure failure);
  void start(WorkQueue* resume, const std::atomic<bool>& abort, Finish finish, void* arg);
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
  // A value between its producer and its readers. Entries point at cells,
  // so passing a value on (a switch, merge, enter, exit or next_iteration,
  // or a kernel's output to its readers) moves a pointer, not the value.
  // A kernel output's cell goes back to its home (that output's free
  // cells) when its last owner drops it, keeping its tensor when nothing
  // else shares the buffer and the run's recycle budget allows: the
  // kernel's next run starts with it, and KernelContext::alloc_output
  // keeps a tensor of the same dims and dtype.
  struct Cell {
    Variable var;
    std::int32_t refs = 0;          // owners: entries (owned), node outputs, deferred values
    std::uint32_t home = kNoIndex;  // the output's free list (output_base_), kNoIndex: none
    std::size_t kept = 0;           // bytes of the buffer kept while free at its home
    Cell* next_free = nullptr;
  };
  struct Entry {
    Cell* cell = nullptr;
    bool owned = false;  // holds one of cell->refs; false: a frame constant's cell, which outlives it
    bool dead = false;
    Variable& value() { return cell->var; }
  };
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
    Cell* cell;
    bool owned;
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
    std::size_t constants_live = 0;     // constants arrived with a live value
    std::size_t live_index = 0;         // in live_
  };
  struct Ready {
    std::uint32_t node;
    Frame* frame;
    Iteration* iter;
    bool dead;
  };
  // A node's outputs between its kernel and their propagation: per output
  // its cell (null: dead, or a direct output) and whether it owns a ref.
  struct Outputs {
    static constexpr std::uint32_t kInline = 4;
    Cell* small[kInline] = {};
    std::vector<Cell*> more;
    std::uint64_t dead = 0;   // bit o: output o is dead
    std::uint64_t owned = 0;  // bit o: output o holds one of its cell's refs
    bool suspended = false;   // an asynchronous kernel started: its done propagates
    Cell*& at(std::uint32_t o) { return o < kInline ? small[o] : more[o - kInline]; }
    // Output o is the node's input entry `e`'s value (its ref moves on with it).
    // Called while the node runs, outside the propagator's mutex: no other
    // thread touches this node's entries until its inputs are cleared, under
    // the mutex, after it ran.
    void forward(std::uint32_t o, Entry& e) {
      at(o) = e.cell;
      if (e.owned) owned |= std::uint64_t{1} << o;
      e.owned = false;
    }
  };

  // An asynchronous kernel started and not yet propagated: its node, its
  // outputs and the context its kernel holds until it calls done.
  struct AsyncCall {
    Ready r{};
    Outputs out;
    std::vector<Variable*> io;
    KernelContext ctx;
    std::exception_ptr error;
    std::uint32_t index = 0;  // in calls_
    AsyncCall* next_free = nullptr;
  };

  Cell* new_cell();
  Cell* take_cell(std::uint32_t home);
  void unref(Cell* c) noexcept;
  void release_cell(Cell* c) noexcept;
  Cell* copy_cell(const Variable& v);
  static void put(Entry& x, Cell* c, bool owned) noexcept;
  void execute(const Ready& r, Outputs& out);
  void execute_recorded(const Ready& r, Outputs& out);
  void run_kernel(const Ready& r, Outputs& out);
  void send_dead(const FrameNode& n);
  // A kernel node's inputs (its entries `in`) and outputs, in-place ones copied.
  void bind_io(const FrameNode& n, Entry* in, std::uint32_t num_out, Outputs& out, Variable** io);
  void start_async(const Ready& r, Outputs& out);
  AsyncCall* take_call();
  static void async_done(void* self, std::uint32_t index, const Error* error) noexcept;
  void finish_async(AsyncCall* c);
  void drain_async(std::unique_lock<std::mutex>& lock);
  void propagate(const Ready& r, Outputs& out);
  // propagate(), by phase: output o's cell (null: dead); fetched outputs'
  // shares; the enter and next_iteration cases.
  Cell* output_cell(const FrameNode& n, Outputs& out, std::uint32_t o);
  void keep_fetched(const FrameNode& n, Outputs& out);
  void drop_outputs(Outputs& out) noexcept;
  void propagate_enter(const Ready& r, Outputs& out);
  void propagate_next_iteration(const Ready& r, Outputs& out);
  void clear_inputs(const Ready& r) noexcept;
  void prepare_outputs(const Ready& r, Outputs& out);
  void make_outputs(const FrameNode& n, std::uint32_t node, Outputs& out);
  void deliver(Frame* f, Iteration* it, const FrameEdge& e, Cell* value, bool owned);
  void deliver_all(Frame* f, Iteration* it, std::uint32_t node, std::uint32_t output, Cell* value,
                   bool owned);
  void push(std::uint32_t node, Frame* f, Iteration* it, bool dead);
  Frame* child_frame(Frame* parent, Iteration* it, std::uint32_t info);
  Iteration* start_iteration(Frame* f);
  void cleanup(Frame* f);
  void finish_frame(Frame* f);
  void release_iteration(std::uint32_t info, Iteration* it, bool done) noexcept;
  void release_all() noexcept;
  void fail(std::uint32_t node, std::exception_ptr e) noexcept;
  [[noreturn]] void throw_stalled(const Frame* f, const Iteration* it) const;
  // The run's phases: run() is begin, drive, end; start() resumes drive()
  // from asynchronous kernels' done until it returns true, then completes.
  void begin(WorkQueue* pool, unsigned num_threads, const std::atomic<bool>& abort);
  bool drive();
  Failure end();
  void complete();
  static void resume_entry(void* self, std::uint32_t);
  // The pool side.
  bool work(bool caller);
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
      if (size_ == buf_.size()) [[unlikely]] grow();
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
    [[gnu::noinline]] void grow() {
      std::vector<Ready> bigger(buf_.empty() ? 64 : buf_.size() * 2);
      for (std::size_t k = 0; k < size_; ++k) bigger[k] = buf_[(head_ + k) & (buf_.size() - 1)];
      buf_.swap(bigger);
      head_ = 0;
    }
    std::vector<Ready> buf_;  // size: 0 or a power of two
    std::size_t head_ = 0, size_ = 0;
  };
  ReadyQueue ready_;
  // The cells (stable addresses); the free ones without a home's tensor
  // (free_cells_) and, per kernel output from output_base_, its free cells
  // (home_free_), whose kept buffers hold at most recycle_budget_ bytes
  // (kept_bytes_). Emptied at the run's end. Under mu_ with a pool.
  std::vector<std::unique_ptr<Cell>> cells_;
  Cell* free_cells_ = nullptr;
  std::vector<Cell*> home_free_;
  std::size_t kept_bytes_ = 0;
  std::vector<std::uint32_t> output_base_;
  std::vector<std::uint8_t> keeps_fetched_;  // per node: keep_fetched has a share to keep
  std::vector<Allocator*> allocators_;       // per kernel node on the CPU: its place's allocator
  // Per static frame, for an iteration that starts once every constant
  // arrived live (start_iteration): what delivering them does, worked out
  // once — the input entries they fill, and per first / later iteration the
  // pending counts after them, the nodes they make ready (in delivery
  // order) and how many they leave partial. Not for a frame where a
  // constant feeds a merge (usable false).
  struct ConstantStart {
    std::vector<std::int32_t> pending;
    std::vector<std::uint32_t> ready;
    std::int32_t partial = 0;
  };
  struct ConstantPlan {
    bool usable = false;
    std::vector<std::pair<std::uint32_t, std::uint32_t>> inputs;  // (constant index, input table index)
    ConstantStart first, next;
  };
  std::vector<ConstantPlan> constant_plans_;
  std::vector<std::uint8_t> slot_dead_;
  std::vector<std::int64_t> peak_;
  std::int64_t frames_made_ = 0;
  bool record_ = false;
  std::vector<Record> records_;
  Failure failure_;

  // Asynchronous kernels: every call made (stable addresses), the free ones,
  // those whose done came (capacity: calls_.size(), so async_done never
  // allocates) and those started whose propagation has not ended.
  std::vector<std::unique_ptr<AsyncCall>> calls_;
  AsyncCall* free_calls_ = nullptr;
  std::vector<AsyncCall*> done_calls_;
  std::uint32_t async_outstanding_ = 0;

  // This run's threading (all below under mu_ when locked_).
  WorkQueue* pool_ = nullptr;
  bool locked_ = false;  // a pool, or asynchronous kernels (their done comes from other threads)
  // start()'s runs: the queue their resumption goes to (null in run()'s),
  // what gets the run's end, and whether a thread drives the run now.
  WorkQueue* resume_ = nullptr;
  Finish finish_ = nullptr;
  void* finish_arg_ = nullptr;
  bool driving_ = false;
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

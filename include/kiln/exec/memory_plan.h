// MemoryPlan: the temporaries of a host plan placed in one arena per run
// state, at offsets computed once, so that values whose lifetimes do not
// overlap share bytes (TFLite's and XLA's buffer assignment; Paddle's
// memory-reuse pass). The plan's peak is the arena's size.
//
// What goes in the arena is found by a probe: a run state's first
// synchronous run (on the threads its thread plan gives it) records each
// temporary's bytes, dtype and dims when GC frees it, and which other slots
// hold the same buffer (a view and its source, a kernel that shares its
// input): those form one group whose lifetime is every member's users. A group is left out when a member
// is not a private host temporary (a parameter, feed, fetched or skip_gc
// value, an argument, a device or stream value, one a control-flow
// instruction touches) or something outside the run state held its buffer.
// Two groups may share bytes only when the dependency DAG orders every user
// of one before the instruction that allocates the other, so the assignment
// holds for any schedule the executor picks, on any number of threads.
// Offsets: greedy by size, largest first, each group at the lowest offset
// free of the groups it may be live together with.
//
// At run time the group's allocating slot keeps a tensor over its piece of
// the arena (KernelContext::alloc_output reuses it in place) and leaves the
// GC lists; the run's end parks it (Variable::park), so that a user sees
// it collected, as without a plan. The other members are collected as
// before. A run whose feeds
// differ in shape from the probe's uses the plan's own GC lists (nothing is
// wrong then, only not shared), and pieces are put back when the shapes
// come back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kiln/exec/execution_plan.h"

namespace kiln {

// What a probe run saw of slot s when GC freed it (or at the run's end, for
// a slot never freed).
struct SlotBuffer {
  std::size_t bytes = 0;  // 0: no tensor seen
  DataType dtype = DataType::Undefined;
  Dims dims;
  bool escaped = false;  // a holder other than the run state's slots had its buffer
};

// The probe's record: each slot's SlotBuffer, and the slots found holding
// one buffer at the same time joined into groups (union-find).
class MemoryProbe {
 public:
  explicit MemoryProbe(std::size_t num_slots);
  std::vector<SlotBuffer> seen;
  void join(std::uint32_t a, std::uint32_t b);
  std::uint32_t group_of(std::uint32_t s);

 private:
  std::vector<std::uint32_t> parent_;
};

struct MemoryPlan {
  // A group's allocating slot and its bytes of the arena.
  struct Piece {
    std::uint32_t slot = 0;
    std::size_t offset = 0;           // in an arena for any schedule
    std::size_t offset_in_order = 0;  // in an arena for runs in program order
    std::size_t bytes = 0;
    DataType dtype = DataType::Undefined;
    Dims dims;
  };
  std::vector<Piece> pieces;
  // The arena's size: the plan's peak for the planned temporaries, for runs
  // on several threads (the DAG's order) and for runs in program order (one
  // thread, or BLAS's threads only), where lifetimes are intervals.
  std::size_t arena_bytes = 0;
  std::size_t arena_bytes_in_order = 0;
  // The same groups' bytes summed (what they take when none shares).
  std::size_t total_bytes = 0;
  // The live-set minimum of the same groups: the most bytes live at once
  // when the plan runs in program order (no assignment does better then).
  std::size_t live_bytes = 0;
  // Every observed temporary's live-set minimum, planned or not (the bound
  // the benchmark's peak is measured against).
  std::size_t temporaries_live_bytes = 0;
  // The plan's GC lists without the pieces' slots (ExecutionPlan::gc_off, gc).
  std::vector<std::uint32_t> gc_off, gc;
  // The feed shapes of the probe run (a run with others uses the plan's GC).
  std::vector<Dims> feed_dims;
};

// Whether a plan can have a memory plan: a root host plan without streams,
// frames, asynchronous kernels or CUDA places, with GC on and
// ExecutionOptions::plan_memory.
bool memory_plannable(const ExecutionPlan& plan);

// The memory plan of `plan` from a probe run's record, or null when no group
// can be planned. Plans of more than kMaxPlannedInstructions instructions
// get none (memory_plannable): the DAG's reachability is computed as one bit
// per instruction pair.
inline constexpr std::uint32_t kMaxPlannedInstructions = 8192;
std::shared_ptr<const MemoryPlan> plan_memory(const ExecutionPlan& plan, MemoryProbe& probe);

// The memory plan of `plan` when the plan is built, from its temporaries'
// types instead of a probe run: each value's bytes, dtype and dims from its
// type, a view sharing its source's buffer (PlanSlot::alias). For a
// program whose temporaries all have static shapes it is the plan the
// probe finds (the same pieces, arena and peak) unless a kernel makes its
// own output tensor or shares a buffer its op does not declare; null when
// some host temporary's shape is known only at run time, or as plan_memory.
std::shared_ptr<const MemoryPlan> plan_memory_from_types(const ExecutionPlan& plan);

// An arena for one run state. A piece is a Buffer over the arena's bytes
// that keeps the arena alive (so a tensor that outlived the run state would
// still point at valid memory); only the tensor it is given holds it, so
// KernelContext::alloc_output sees a buffer nobody else uses.
class MemoryArena {
 public:
  // The arena for runs in program order (`in_order`) or in any order; its
  // bytes come from the system (aligned_alloc), not from the caching
  // CpuAllocator, whose statistics therefore leave it out.
  MemoryArena(std::shared_ptr<const MemoryPlan> plan, bool in_order);
  const MemoryPlan& plan() const { return *plan_; }
  bool in_order() const { return in_order_; }
  std::size_t bytes() const { return arena_->size(); }
  // A new buffer over piece k (MemoryPlan::pieces[k]).
  BufferRef make_piece(std::size_t k) const;
  // Whether `buffer` is over piece k.
  bool is_piece(const BufferRef& buffer, std::size_t k) const;

 private:
  std::size_t offset(std::size_t k) const;
  std::shared_ptr<const MemoryPlan> plan_;
  bool in_order_;
  BufferRef arena_;
};

}  // namespace kiln

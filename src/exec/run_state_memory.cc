// RunState's memory plan (kiln/exec/memory_plan.h): the probe run, the
// arena's pieces put in their slots, and the GC lists each run uses.
#include "kiln/exec/run_state.h"

#include <unordered_map>
#include <utility>

namespace kiln {

void RunState::use_plan_gc() {
  gc_off_ = plan_->gc_off.data();
  gc_ = plan_->gc.data();
}

// At a run's end: the temporaries GC leaves alone so that they keep their
// buffers (resident ones, arena pieces) read as collected, as every other
// temporary does; their kernels take them back next run (get_mutable).
// One pass of stores here instead of a GC entry each (their ref counts, a
// branch per slot) kept the seed model's step at its instruction count.
void RunState::park_kept_buffers() noexcept {
  for (std::uint32_t s : plan_->resident) vars_[s]->park();
  if (memory_stage_ == MemoryStage::Planned && arena_placed_ && gc_ == memory_->gc.data())
    for (const MemoryPlan::Piece& piece : memory_->pieces) vars_[piece.slot]->park();
}

// At the start of each run. The first synchronous one is the probe, run as
// the thread plan says (an op may wait for another one to run beside it: in
// program order it would wait for ever); a planned run uses the arena when
// its feeds have the probe's shapes.
void RunState::prepare_memory(bool may_probe) {
  if (memory_stage_ == MemoryStage::Unplanned || memory_stage_ == MemoryStage::Probing) {
    drop_probe();
    if (!may_probe) return;
    memory_stage_ = MemoryStage::Probing;
    probe_ = std::make_unique<MemoryProbe>(plan_->slots.size());
    probing_ = true;
    // Over the pool (as schedule() decides), GC keeps shared buffers for
    // finish_probe instead of reading other slots' variables as it frees one.
    if (config_.plan != ThreadPlan::Sequential && config_.pool) probe_held_.resize(plan_->slots.size());
    return;
  }
  if (memory_stage_ != MemoryStage::Planned) return;
  const MemoryPlan& mp = *memory_;
  const ExecutionPlan& p = *plan_;
  bool same = true;
  for (std::size_t k = 0; k < p.feeds.size() && same; ++k) {
    const Variable* v = vars_[p.feeds[k].slot];
    same = v->is<Tensor>() && v->get<Tensor>().dims() == mp.feed_dims[k];
  }
  if (!same) {
    // Other shapes: every temporary is collected as the plan says (its
    // piece goes at its last use); the pieces come back with the shapes.
    use_plan_gc();
    arena_placed_ = false;
    return;
  }
  // The schedule's arena: program order (as schedule() decides) or any.
  const bool in_order = config_.plan == ThreadPlan::Sequential || config_.pool == nullptr;
  if (!arena_ || arena_->in_order() != in_order) {
    arena_ = std::make_unique<MemoryArena>(memory_, in_order);
    arena_placed_ = arena_checked_ = false;
  }
  if (!arena_placed_) place_arena();
  gc_off_ = mp.gc_off.data();
  gc_ = mp.gc.data();
}

// A probe that failed, or one a run without a probe replaces: its record
// and the buffers it kept go now, so they pin no memory until the next run.
void RunState::drop_probe() noexcept {
  probing_ = false;
  probe_.reset();
  probe_held_.clear();
}

// The probe, as GC frees slot s: what it holds, and which other slots hold
// the same buffer now (they join its group); a holder that is no slot's
// variable makes the buffer escaped. Over the pool the buffer is kept
// instead, and finish_probe finds its other holders.
[[gnu::noinline, gnu::cold]] void RunState::probe_slot(std::uint32_t s) {
  const Tensor* held = vars_[s]->held_or_parked();
  if (!held || !held->buffer()) return;
  const Tensor& t = *held;
  SlotBuffer& o = probe_->seen[s];
  o.bytes = t.bytes();
  o.dtype = t.dtype();
  o.dims = t.dims();
  // Another holder may be letting go on another thread; it reads at least
  // 2 too (this slot still holds the buffer), so both are kept.
  const long refs = t.use_count();
  if (refs == 1) return;
  if (!probe_held_.empty()) {
    probe_held_[s] = t.buffer();  // only this thread frees s
    return;
  }
  long holders = 1;
  for (std::uint32_t q = 0; q < vars_.size(); ++q) {
    const Tensor* other = q == s ? nullptr : vars_[q]->held_or_parked();
    if (!other || !(other->buffer() == t.buffer())) continue;
    probe_->join(s, q);
    ++holders;
  }
  o.escaped = holders < refs;
}

// Each planned slot's variable has a tensor over its piece parked, of the
// probe's dims and dtype: its kernel's alloc_output takes it back and
// writes it in place; the run's end parks it again (park_kept_buffers).
void RunState::place_arena() {
  const MemoryPlan& mp = arena_->plan();
  for (std::size_t k = 0; k < mp.pieces.size(); ++k) {
    const MemoryPlan::Piece& piece = mp.pieces[k];
    Variable* v = vars_[piece.slot];
    v->clear();
    BufferRef buffer = arena_->make_piece(k);
    v->get_mutable<Tensor>().adopt_buffer(buffer, piece.dims, piece.dtype, Place::cpu());
    v->park();
  }
  arena_placed_ = true;
}

// The slots holding one buffer at the probe's end (every buffer alive now,
// so its address names it) join one group, with the slots whose shared
// buffers GC kept; a buffer with a holder that is none of these escaped.
void RunState::group_probed_buffers(MemoryProbe& probe) {
  const std::uint32_t n = static_cast<std::uint32_t>(plan_->slots.size());
  std::unordered_map<const Buffer*, std::pair<std::uint32_t, long>> holders;  // first slot, count
  auto hold = [&](std::uint32_t s, const Buffer* b) {
    auto [it, fresh] = holders.try_emplace(b, s, 0);
    ++it->second.second;
    if (!fresh) probe.join(s, it->second.first);
  };
  for (std::uint32_t s = 0; s < probe_held_.size(); ++s)
    if (probe_held_[s]) hold(s, probe_held_[s].get());
  for (std::uint32_t s = 0; s < n; ++s) {
    const Tensor* held = vars_[s]->held_or_parked();
    if (!held || !held->buffer()) continue;
    const Tensor& t = *held;
    SlotBuffer& o = probe.seen[s];
    o.bytes = t.bytes();
    o.dtype = t.dtype();
    o.dims = t.dims();
    hold(s, t.buffer().get());
  }
  for (std::uint32_t s = 0; s < probe_held_.size(); ++s)
    if (const Buffer* b = probe_held_[s].get(); b && holders[b].second < b->use_count())
      probe.seen[s].escaped = true;
  for (std::uint32_t s = 0; s < n; ++s) {
    const Tensor* held = vars_[s]->held_or_parked();
    if (!held || !held->buffer()) continue;
    if (holders[held->buffer().get()].second < held->use_count()) probe.seen[s].escaped = true;
  }
}

// The probe's end (a run that succeeded): its record grouped, then the
// arena planned.
void RunState::finish_probe() {
  const ExecutionPlan& p = *plan_;
  std::unique_ptr<MemoryProbe> probe = std::move(probe_);
  group_probed_buffers(*probe);
  drop_probe();  // the kept buffers go
  // A slot whose kernel once left its piece is not planned again.
  for (std::uint32_t s = 0; s < unplanned_slots_.size(); ++s)
    if (unplanned_slots_[s]) probe->seen[s].escaped = true;
  std::shared_ptr<const MemoryPlan> mp;
  try {
    mp = plan_memory(p, *probe);
  } catch (const std::bad_alloc&) {
    mp = nullptr;  // the run's results stand; later runs go without an arena
  }
  if (!mp) {
    memory_stage_ = MemoryStage::Off;
    return;
  }
  auto with_feeds = std::make_shared<MemoryPlan>(*mp);
  for (const PlanFeed& f : p.feeds) with_feeds->feed_dims.push_back(vars_[f.slot]->get<Tensor>().dims());
  memory_ = std::move(with_feeds);
  arena_.reset();  // made by the next run, for its schedule
  arena_placed_ = arena_checked_ = false;
  memory_stage_ = MemoryStage::Planned;
}

// After the first run over the pieces: a kernel that did not reuse its
// output's tensor (it made a new one) left its piece; such slots are planned
// without (the next run probes again), twice at most, then the arena is off.
void RunState::check_arena() {
  arena_checked_ = true;
  const MemoryPlan& mp = arena_->plan();
  bool left = false;
  for (std::size_t k = 0; k < mp.pieces.size(); ++k) {
    const Tensor* held = vars_[mp.pieces[k].slot]->held_or_parked();
    const bool holds = held && arena_->is_piece(held->buffer(), k);
    if (holds) continue;
    if (unplanned_slots_.empty()) unplanned_slots_.assign(plan_->slots.size(), 0);
    unplanned_slots_[mp.pieces[k].slot] = 1;
    left = true;
  }
  if (!left) return;
  // The pieces' slots go back to the plan's GC; the arena goes with the
  // last tensor over it.
  for (const MemoryPlan::Piece& piece : mp.pieces) vars_[piece.slot]->clear();
  arena_.reset();
  memory_.reset();
  arena_placed_ = false;
  use_plan_gc();
  memory_stage_ = ++replans_ <= 2 ? MemoryStage::Unplanned : MemoryStage::Off;
}

}  // namespace kiln

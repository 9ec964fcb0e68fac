// FramePropagator (kiln/exec/frame_propagator.h): frames, iterations, dead
// values, and the run loop over them.
#include "kiln/exec/frame_propagator.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>
#include <string>
#include <utility>

#include "kiln/exec/work_queue.h"
#include "kiln/kernel/kernel_context.h"
#include "kiln/runtime/cancellation.h"
#include "kiln/runtime/rendezvous.h"
#include "kiln/runtime/tensor.h"
#include "kiln/support/error.h"

namespace kiln {

namespace {

using Kind = FrameNode::Kind;

// Holds `mu` only when the run has a pool (a run on one thread takes no lock).
class MaybeLock {
 public:
  MaybeLock(std::mutex& mu, bool on) : mu_(on ? &mu : nullptr) {
    if (mu_) mu_->lock();
  }
  ~MaybeLock() {
    if (mu_) mu_->unlock();
  }
  MaybeLock(const MaybeLock&) = delete;
  MaybeLock& operator=(const MaybeLock&) = delete;

 private:
  std::mutex* mu_;
};

bool read_predicate(const Variable& v, const Operation* op, std::uint32_t op_index) {
  const Tensor& t = v.get<Tensor>();
  if (t.dtype() != DataType::Bool || t.numel() != 1)
    throw_error(ErrorKind::InvalidArgument, "op #", op_index, " '", op->name(),
                "' predicate must be a bool tensor of one element, got ", to_string(t.dtype()), " [",
                t.dims().to_string(), "]");
  return t.data<bool>()[0];
}

}  // namespace

// ---- cells ----

// An empty cell with no owner and no home.
inline FramePropagator::Cell* FramePropagator::new_cell() {
  Cell* c = free_cells_;
  if (c) {
    free_cells_ = c->next_free;
  } else {
    cells_.push_back(std::make_unique<Cell>());
    c = cells_.back().get();
  }
  c->home = kNoIndex;
  c->refs = 1;
  return c;
}

// A cell for a kernel output `home`, one ref: a free one of that output
// (holding the tensor it last wrote, when kept) or an empty one.
inline FramePropagator::Cell* FramePropagator::take_cell(std::uint32_t home) {
  Cell* c = home_free_[home];
  if (!c) {
    c = new_cell();
    c->home = home;
    return c;
  }
  home_free_[home] = c->next_free;
  kept_bytes_ -= c->kept;
  c->kept = 0;
  c->refs = 1;
  return c;
}

// A new cell holding a share of `v`, one ref.
inline FramePropagator::Cell* FramePropagator::copy_cell(const Variable& v) {
  Cell* c = new_cell();
  c->var.share_content(v);
  return c;
}

inline void FramePropagator::unref(Cell* c) noexcept {
  if (--c->refs == 0) release_cell(c);
}

// A cell no one owns: to its home with its tensor when the buffer is the
// cell's alone (the same conditions as Variable::recycle) and fits the
// budget, else emptied.
void FramePropagator::release_cell(Cell* c) noexcept {
  if (c->home != kNoIndex) {
    if (const Tensor* t = c->var.is<Tensor>() ? &c->var.get<Tensor>() : nullptr) {
      const Buffer* b = t->buffer().get();
      // use_count() loads with acquire: the other owners' last reads happen
      // before the buffer is written again (see Buffer::use_count).
      if (b && t->offset() == 0 && b->allocator() && b->size() <= recycle_budget_ - kept_bytes_ &&
          !b->stream_recorded() && t->use_count() == 1) {
        c->kept = b->size();
        kept_bytes_ += c->kept;
        c->next_free = home_free_[c->home];
        home_free_[c->home] = c;
        return;
      }
    }
  }
  if (c->var.is_initialized()) c->var.clear();
  c->next_free = free_cells_;
  free_cells_ = c;
}

inline void FramePropagator::put(Entry& x, Cell* c, bool owned) noexcept {
  x.cell = c;
  x.owned = owned;
  if (owned) ++c->refs;
}

FramePropagator::FramePropagator(const ExecutionPlan& plan, std::span<Variable* const> vars,
                                 const StepContext* step)
    : plan_(plan),
      fp_(*plan.frames),
      vars_(vars.begin(), vars.end()),
      step_(step),
      recycle_budget_(plan.options.gc ? plan.options.recycle_budget : 0) {
  free_iterations_.resize(fp_.frames.size());
  output_base_.reserve(fp_.nodes.size());
  keeps_fetched_.reserve(fp_.nodes.size());
  allocators_.assign(fp_.nodes.size(), nullptr);
  std::uint32_t homes = 0;
  for (const FrameNode& n : fp_.nodes) {
    output_base_.push_back(homes);
    if (n.kind == Kind::Kernel) {
      const PlanInstruction& pi = plan.instructions[n.instruction];
      homes += static_cast<std::uint32_t>(pi.writes.size());
      if (pi.place.kind == PlaceKind::Cpu) allocators_[&n - fp_.nodes.data()] = &allocator_for(pi.place);
    }
    bool keeps = false;
    for (std::uint32_t o = 0; n.kind != Kind::Exit && o < n.out_slots.size(); ++o)
      keeps |= n.out_slots[o] != kNoIndex && !((n.direct_outputs >> o) & 1);
    keeps_fetched_.push_back(keeps);
  }
  home_free_.assign(homes, nullptr);
  constant_plans_.resize(fp_.frames.size());
  for (std::uint32_t fi = 0; fi < fp_.frames.size(); ++fi) {
    const StaticFrame& sf = fp_.frames[fi];
    ConstantPlan& cp = constant_plans_[fi];
    cp.usable = !sf.constants.empty();
    // deliver()'s work for a live value that reaches no merge.
    auto simulate = [&](const std::vector<std::int32_t>& pending, ConstantStart& start) {
      start.pending = pending;
      for (std::uint32_t node : sf.constants)
        for (std::uint32_t k = fp_.nodes[node].edge_begin; k < fp_.nodes[node].edge_end; ++k) {
          const FrameNode& d = fp_.nodes[fp_.edges[k].dst];
          if (d.kind == Kind::Merge) cp.usable = false;
          const std::int32_t left = --start.pending[d.local];
          if (left == 0) {
            if (d.num_inputs > 1) start.partial--;
            start.ready.push_back(fp_.edges[k].dst);
          } else if (left == static_cast<std::int32_t>(d.num_inputs) - 1) {
            start.partial++;
          }
        }
    };
    simulate(sf.pending_first, cp.first);
    simulate(sf.pending_next, cp.next);
    for (std::uint32_t c = 0; c < sf.constants.size(); ++c) {
      const FrameNode& n = fp_.nodes[sf.constants[c]];
      for (std::uint32_t k = n.edge_begin; k < n.edge_end; ++k)
        cp.inputs.emplace_back(c, fp_.nodes[fp_.edges[k].dst].input_base + fp_.edges[k].dst_input);
    }
  }
  peak_.assign(fp_.frames.size(), 0);
  slot_dead_.assign(plan.slots.size(), 0);
}

FramePropagator::~FramePropagator() {
  release_all();
  delete root_;
}

// ---- frames and iterations ----

inline FramePropagator::Iteration* FramePropagator::start_iteration(Frame* f) {
  const StaticFrame& info = fp_.frames[f->info];
  std::unique_ptr<Iteration> owned;
  auto& pool = free_iterations_[f->info];
  Iteration* it;
  if (!pool.empty()) {
    it = pool.back().release();
    pool.pop_back();
  } else {
    it = new Iteration;
    it->pending = std::make_unique<std::int32_t[]>(info.num_nodes);
    it->dead = std::make_unique<std::int32_t[]>(info.num_nodes);
    it->inputs = std::make_unique<Entry[]>(info.num_inputs);
  }
  it->id = ++f->newest;
  it->outstanding = 0;
  it->outstanding_frames = 0;
  it->partial = 0;
  // Every constant arrived live: their deliveries as worked out once.
  const ConstantPlan& cp = constant_plans_[f->info];
  const ConstantStart* start =
      cp.usable && f->constants_live == info.constants.size() ? (it->id == 0 ? &cp.first : &cp.next) : nullptr;
  const auto& pending = start ? start->pending : it->id == 0 ? info.pending_first : info.pending_next;
  if (info.num_nodes) {
    std::memcpy(it->pending.get(), pending.data(), info.num_nodes * sizeof(std::int32_t));
    std::memset(it->dead.get(), 0, info.num_nodes * sizeof(std::int32_t));
  }
  f->iterations.push_back(it);
  peak_[f->info] = std::max<std::int64_t>(peak_[f->info], static_cast<std::int64_t>(f->iterations.size()));
  // Constants already entered reach every iteration.
  if (start) {
    for (auto [c, k] : cp.inputs) it->inputs[k].cell = f->constants[c].cell;  // not owned, not dead
    it->partial = start->partial;
    for (std::uint32_t node : start->ready) push(node, f, it, false);
    return it;
  }
  for (std::uint32_t c = 0; c < info.constants.size(); ++c)
    if (f->constant_arrived[c]) {
      Entry& e = f->constants[c];
      deliver_all(f, it, info.constants[c], 0, e.dead ? nullptr : e.cell, false);
    }
  return it;
}

// `done`: the iteration is done (cleanup), so its entries are empty
// already — every node that got an input ran (none ready or running, none
// partial, a merge runs on its first live input and drops the rest) and
// emptied its entries (clear_inputs). Otherwise (a run's end, failed or
// not) they are emptied here.
inline void FramePropagator::release_iteration(std::uint32_t info, Iteration* it, bool done) noexcept {
  const StaticFrame& sf = fp_.frames[info];
  for (std::uint32_t k = 0; !done && k < sf.num_inputs; ++k) {
    Entry& e = it->inputs[k];
    if (e.owned) unref(e.cell);
    e = Entry{};
  }
  it->children.clear();
  free_iterations_[info].emplace_back(it);
}

FramePropagator::Frame* FramePropagator::child_frame(Frame* parent, Iteration* it, std::uint32_t info) {
  for (Frame* c : it->children)
    if (c->info == info) return c;
  Frame* f;
  if (!free_frames_.empty()) {
    f = free_frames_.back().release();
    free_frames_.pop_back();
  } else {
    f = new Frame;
  }
  const StaticFrame& sf = fp_.frames[info];
  f->info = info;
  f->parent = parent;
  f->parent_iter = it;
  f->newest = -1;
  f->pending_enters = static_cast<std::int32_t>(sf.num_enters);
  f->deferred.clear();
  f->constants.resize(sf.constants.size());
  f->constant_arrived.assign(sf.constants.size(), 0);
  f->constants_live = 0;
  f->exit_fired.assign(sf.exits.size(), 0);
  f->live_index = live_.size();
  live_.push_back(f);
  live_frames_ = live_.size();
  ++frames_made_;
  it->children.push_back(f);
  it->outstanding_frames++;
  start_iteration(f);
  return f;
}

// Releases the oldest iterations that are done, starts a waiting next
// iteration when that makes room, and ends the frame when nothing is left.
// An iteration is done when none of its nodes is ready or running, no frame
// made from it is alive, and no input can still reach it: iteration 0 once
// every enter arrived, a later one once the one before it is released.
inline void FramePropagator::cleanup(Frame* f) {
  if (f == root_) return;
  const StaticFrame& sf = fp_.frames[f->info];
  while (!f->iterations.empty()) {
    Iteration* it = f->iterations.front();
    if (it->outstanding != 0 || it->outstanding_frames != 0 || (it->id == 0 && f->pending_enters != 0)) break;
    if (__builtin_expect(it->partial != 0, 0)) throw_stalled(f, it);
    f->iterations.pop_front();
    release_iteration(f->info, it, /*done=*/true);
    if (!f->deferred.empty() &&
        static_cast<std::int64_t>(f->iterations.size()) < sf.parallel_iterations) {
      Iteration* next = start_iteration(f);
      std::vector<Deferred> waiting = std::move(f->deferred);
      f->deferred.clear();
      for (Deferred& d : waiting) {
        deliver_all(f, next, d.node, 0, d.cell, d.owned);
        if (d.owned) unref(d.cell);
      }
    }
  }
  if (f->iterations.empty() && f->deferred.empty()) finish_frame(f);
}

void FramePropagator::finish_frame(Frame* f) {
  const StaticFrame& sf = fp_.frames[f->info];
  Frame* parent = f->parent;
  Iteration* pit = f->parent_iter;
  for (std::uint32_t x = 0; x < sf.exits.size(); ++x)
    if (!f->exit_fired[x]) {
      const FrameNode& e = fp_.nodes[sf.exits[x]];
      if (!e.out_slots.empty() && e.out_slots[0] != kNoIndex) {
        slot_dead_[e.out_slots[0]] = 1;
        vars_[e.out_slots[0]]->clear();
      }
      deliver_all(parent, pit, sf.exits[x], 0, nullptr, false);
    }
  for (Entry& e : f->constants) {
    if (e.owned) unref(e.cell);
    e = Entry{};
  }
  auto& kids = pit->children;
  kids.erase(std::find(kids.begin(), kids.end(), f));
  pit->outstanding_frames--;
  live_[f->live_index] = live_.back();
  live_[f->live_index]->live_index = f->live_index;
  live_.pop_back();
  live_frames_ = live_.size();
  free_frames_.emplace_back(f);
  cleanup(parent);
}

// ---- propagation ----

inline void FramePropagator::push(std::uint32_t node, Frame* f, Iteration* it, bool dead) {
  it->outstanding++;
  ready_.push_back({node, f, it, dead});
}

// One value (null: dead) into input e.dst_input of e.dst in iteration `it`.
[[gnu::always_inline]] inline void FramePropagator::deliver(Frame* f, Iteration* it, const FrameEdge& e,
                                                            Cell* value, bool owned) {
  const FrameNode& d = fp_.nodes[e.dst];
  // A dead value reaching an exit (every iteration but a loop's last) has
  // nothing to do: an exit acts on a live value only, and one that never
  // got one gives a dead value when its frame ends (finish_frame).
  if (!value && d.kind == Kind::Exit) return;
  std::int32_t& dead = it->dead[d.local];
  std::int32_t& pending = it->pending[d.local];
  if (d.kind == Kind::Merge) {
    if (dead < 0) return;  // fired already: later inputs are dropped
    --pending;
    if (value) {
      put(it->inputs[d.input_base + e.dst_input], value, owned);
      dead = -1 - static_cast<std::int32_t>(e.dst_input);
      push(e.dst, f, it, false);
    } else {
      ++dead;
      if (pending == 0) push(e.dst, f, it, true);  // every input that can arrive was dead
    }
    return;
  }
  Entry& x = it->inputs[d.input_base + e.dst_input];
  if (value) {
    put(x, value, owned);
  } else {
    x.dead = true;
    ++dead;
  }
  // partial: the iteration cannot be done while a node waits for the rest
  // of its inputs (a value that reaches iteration 0 only, read later).
  const std::int32_t left = --pending;
  if (left == 0) {
    if (d.num_inputs > 1) it->partial--;
    push(e.dst, f, it, dead > 0);
  } else if (left == static_cast<std::int32_t>(d.num_inputs) - 1) {
    it->partial++;
  }
}

// Output `output` of `node` (null: dead) to each of its readers, each
// taking a ref when `owned` (the caller drops its own). Edges are sorted by
// output.
inline void FramePropagator::deliver_all(Frame* f, Iteration* it, std::uint32_t node, std::uint32_t output,
                                         Cell* value, bool owned) {
  const FrameNode& n = fp_.nodes[node];
  const FrameEdge* e = fp_.edges.data();
  std::uint32_t k = n.edge_begin;
  while (k < n.edge_end && e[k].src_output < output) ++k;
  for (; k < n.edge_end && e[k].src_output == output; ++k) deliver(f, it, e[k], value, owned);
}

// The cell of output o (null: dead). A direct output's readers get a share
// of its variable in a cell of its own (owned by out from here on).
inline FramePropagator::Cell* FramePropagator::output_cell(const FrameNode& n, Outputs& out, std::uint32_t o) {
  if ((out.dead >> o) & 1) return nullptr;
  Cell*& c = out.at(o);
  if (!c && ((n.direct_outputs >> o) & 1)) {
    c = copy_cell(*vars_[n.out_slots[o]]);
    out.owned |= std::uint64_t{1} << o;
  }
  return c;
}

// The outputs' own refs, once their readers took theirs.
inline void FramePropagator::drop_outputs(Outputs& out) noexcept {
  for (std::uint64_t m = out.owned; m; m &= m - 1) unref(out.at(static_cast<std::uint32_t>(__builtin_ctzll(m))));
  out.owned = 0;
}

// Fetched values keep a share (and whether they were dead); an exit's
// when it leaves its frame.
inline void FramePropagator::keep_fetched(const FrameNode& n, Outputs& out) {
  if (!keeps_fetched_[&n - fp_.nodes.data()]) return;
  for (std::uint32_t o = 0; n.kind != Kind::Exit && o < n.out_slots.size(); ++o) {
    const std::uint32_t s = n.out_slots[o];
    if (s == kNoIndex || ((n.direct_outputs >> o) & 1)) continue;
    Cell* c = output_cell(n, out, o);
    slot_dead_[s] = c == nullptr;
    if (c) vars_[s]->share_content(c->var);
    else vars_[s]->clear();
  }
}

void FramePropagator::propagate_enter(const Ready& r, Outputs& out) {
  const FrameNode& n = fp_.nodes[r.node];
  Frame* f = r.frame;
  Iteration* it = r.iter;
  Frame* child = child_frame(f, it, n.target_frame);
  Cell* v = output_cell(n, out, 0);
  if (n.constant_enter) {
    // The constant keeps the value's ref (a constant of an enclosing frame,
    // not owned, outlives this frame).
    Entry& c = child->constants[n.constant_index];
    c.dead = v == nullptr;
    c.cell = v;
    c.owned = v && (out.owned & 1);
    out.owned = 0;
    child->constant_arrived[n.constant_index] = 1;
    if (v) child->constants_live++;
    for (Iteration* ci : child->iterations) deliver_all(child, ci, r.node, 0, c.dead ? nullptr : v, false);
  } else {
    deliver_all(child, child->iterations.front(), r.node, 0, v, out.owned & 1);
    drop_outputs(out);
  }
  clear_inputs(r);
  child->pending_enters--;
  it->outstanding--;
  cleanup(child);
  if (it->outstanding == 0) cleanup(f);
}

inline void FramePropagator::propagate_next_iteration(const Ready& r, Outputs& out) {
  const FrameNode& n = fp_.nodes[r.node];
  Frame* f = r.frame;
  Iteration* it = r.iter;
  Cell* v = output_cell(n, out, 0);
  if (!v) return;  // a dead next value starts no iteration
  // A constant's cell (not owned) outlives every iteration of its frame.
  const bool owned = out.owned & 1;
  if (it->id < f->newest) {
    for (Iteration* later : f->iterations)
      if (later->id == it->id + 1) {
        deliver_all(f, later, r.node, 0, v, owned);
        break;
      }
  } else if (static_cast<std::int64_t>(f->iterations.size()) < fp_.frames[f->info].parallel_iterations) {
    deliver_all(f, start_iteration(f), r.node, 0, v, owned);
  } else {
    f->deferred.push_back({r.node, v, owned});  // the output's ref moves to the deferred value
    out.owned = 0;
    return;
  }
  drop_outputs(out);
}

inline void FramePropagator::propagate(const Ready& r, Outputs& out) {
  const FrameNode& n = fp_.nodes[r.node];
  Frame* f = r.frame;
  Iteration* it = r.iter;
  keep_fetched(n, out);
  switch (n.kind) {
    case Kind::Enter:
      propagate_enter(r, out);  // settles the iteration itself
      return;
    case Kind::Exit: {
      Cell* v = output_cell(n, out, 0);
      if (v && !f->exit_fired[n.exit_index]) {
        f->exit_fired[n.exit_index] = 1;
        if (!n.out_slots.empty() && n.out_slots[0] != kNoIndex) vars_[n.out_slots[0]]->share_content(v->var);
        // A frame constant's cell ends with the frame: the parent gets a share.
        if (!(out.owned & 1)) {
          v = out.at(0) = copy_cell(v->var);
          out.owned = 1;
        }
        deliver_all(f->parent, f->parent_iter, r.node, 0, v, true);
      }
      drop_outputs(out);
      break;
    }
    case Kind::NextIteration:
      propagate_next_iteration(r, out);
      break;
    default: {
      const FrameEdge* e = fp_.edges.data();
      for (std::uint32_t k = n.edge_begin; k < n.edge_end; ++k) {
        const std::uint32_t o = e[k].src_output;
        Cell* c = output_cell(n, out, o);
        deliver(f, it, e[k], c, (out.owned >> o) & 1);
      }
      drop_outputs(out);
      break;
    }
  }
  clear_inputs(r);
  // Only an iteration with nothing left to run can be done.
  if (--it->outstanding == 0) cleanup(f);
}

// ---- running a node ----

inline void FramePropagator::execute(const Ready& r, Outputs& out) {
  const FrameNode& n = fp_.nodes[r.node];
  // A kernel's output cells are made ready by prepare_outputs; the other
  // nodes forward an input's cell or make their outputs' cells themselves.
  Entry* in = r.iter->inputs.get() + n.input_base;
  if (r.dead) {
    if (n.send_key) [[unlikely]] send_dead(n);
    out.dead = ~std::uint64_t{0};
    out.owned = 0;
    return;
  }
  switch (n.kind) {
    case Kind::Source:
      out.dead = 0;
      out.owned = 1;
      out.at(0)->var.share_content(*vars_[n.slot]);
      break;
    case Kind::Switch: {
      const bool p = read_predicate(in[1].value(), n.op, n.op_index);
      out.owned = 0;
      out.forward(p ? 1 : 0, in[0]);
      out.dead = p ? 1 : 2;
      break;
    }
    case Kind::Merge: {
      const std::int32_t chosen = -1 - r.iter->dead[n.local];
      out.dead = 0;
      out.owned = out.at(1) ? 2 : 0;
      out.forward(0, in[chosen]);
      if (out.at(1))
        out.at(1)->var.set(Tensor::from_vector<std::int64_t>(Dims(), {static_cast<std::int64_t>(chosen)}));
      break;
    }
    case Kind::Enter:
    case Kind::Exit:
    case Kind::NextIteration:
      out.dead = 0;
      out.owned = 0;
      out.forward(0, in[0]);
      break;
    case Kind::Kernel: run_kernel(r, out); break;
  }
}

// A kiln.send whose input is dead: the receiver gets a dead value (the
// send's own kernel would send a live one, and skipping it would leave the
// receiver waiting for ever).
[[gnu::cold]] void FramePropagator::send_dead(const FrameNode& n) {
  const RendezvousKey& key = *n.send_key;
  if (!step_ || !step_->rendezvous)
    throw_error(ErrorKind::InvalidArgument, "op 'kiln.send' of '", key.to_string(),
                "' has no rendezvous: run the program with RunOptions::rendezvous set");
  step_->rendezvous->send(key, Tensor(), /*is_dead=*/true);
}

// After its outputs are on their way: the node's inputs drop their refs
// (a value whose last reader ran goes back to its cell's home), and its
// entries are ready for the next use.
inline void FramePropagator::clear_inputs(const Ready& r) noexcept {
  const FrameNode& n = fp_.nodes[r.node];
  Entry* in = r.iter->inputs.get() + n.input_base;
  for (std::uint32_t k = 0; k < n.num_inputs; ++k) {
    if (in[k].owned) unref(in[k].cell);
    in[k].cell = nullptr;
    in[k].owned = false;
    in[k].dead = false;
  }
}

[[gnu::noinline, gnu::cold]] void FramePropagator::execute_recorded(const Ready& r, Outputs& out) {
  auto now = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  const std::int64_t t0 = now();
  execute(r, out);
  const std::int64_t t1 = now();
  if (r.dead) return;
  const auto thread =
      static_cast<std::uint32_t>(std::hash<std::thread::id>()(std::this_thread::get_id()) & 0xffff);
  MaybeLock lock(mu_, locked_);
  records_.push_back({r.node, r.frame->info, r.iter->id, t0, t1, thread});
}

// always_inline: on every kernel node's run (out of line, a call and the
// look-ups again cost the one-op loop benchmark ~4 %).
[[gnu::always_inline]] inline void FramePropagator::bind_io(const FrameNode& n, Entry* in, std::uint32_t num_out,
                                                            Outputs& out, Variable** io) {
  const std::uint32_t num_in = n.num_inputs;
  for (std::uint32_t k = 0; k < num_in; ++k) io[k] = &in[k].value();
  for (std::uint32_t o = 0; o < num_out; ++o)
    io[num_in + o] = ((n.direct_outputs >> o) & 1) ? vars_[n.out_slots[o]] : &out.at(o)->var;
  // An in-place output starts as a copy of its input: the input's buffer
  // may be shared with other readers of the value.
  for (auto [o, i] : n.inplace)
    if (in[i].value().is<Tensor>()) out.at(o)->var.set(in[i].value().get<Tensor>().clone());
    else out.at(o)->var.share_content(in[i].value());
}

inline void FramePropagator::run_kernel(const Ready& r, Outputs& out) {
  const FrameNode& n = fp_.nodes[r.node];
  if (n.async) [[unlikely]] {
    start_async(r, out);
    return;
  }
  const PlanInstruction& pi = plan_.instructions[n.instruction];
  const std::uint32_t num_in = n.num_inputs, num_out = static_cast<std::uint32_t>(pi.writes.size());
  Variable* io_small[16];
  std::vector<Variable*> io_big;
  Variable** io = io_small;
  if (num_in + num_out > 16) {
    io_big.resize(num_in + num_out);
    io = io_big.data();
  }
  bind_io(n, r.iter->inputs.get() + n.input_base, num_out, out, io);
  Allocator* alloc = allocators_[r.node];
  KernelContext ctx(n.op, io, num_in, io + num_in, num_out, pi.attrs.get(), pi.place,
                    alloc ? alloc : &allocator_for(pi.place));
  ctx.set_unused_outputs(pi.unused_outputs);
  ctx.set_step(step_);
  pi.fn(ctx);
}

// ---- asynchronous kernels ----

// A free call (under mu_). done_calls_ keeps room for every call.
FramePropagator::AsyncCall* FramePropagator::take_call() {
  if (AsyncCall* c = free_calls_) {
    free_calls_ = c->next_free;
    return c;
  }
  done_calls_.reserve(calls_.size() + 1);
  calls_.push_back(std::make_unique<AsyncCall>());
  calls_.back()->index = static_cast<std::uint32_t>(calls_.size() - 1);
  return calls_.back().get();
}

// Starts node r's asynchronous kernel (outside mu_): its outputs go with
// the call, and its done, on whichever thread, hands the call to a worker.
void FramePropagator::start_async(const Ready& r, Outputs& out) {
  const FrameNode& n = fp_.nodes[r.node];
  const PlanInstruction& pi = plan_.instructions[n.instruction];
  AsyncCall* c;
  {
    MaybeLock lock(mu_, locked_);
    c = take_call();
    ++async_outstanding_;
  }
  const std::uint32_t num_in = n.num_inputs, num_out = static_cast<std::uint32_t>(pi.writes.size());
  c->r = r;
  c->error = nullptr;
  try {
    c->io.resize(num_in + num_out);
    bind_io(n, r.iter->inputs.get() + n.input_base, num_out, out, c->io.data());
    c->out = out;
    Allocator* alloc = allocators_[r.node];
    c->ctx = KernelContext(n.op, c->io.data(), num_in, c->io.data() + num_in, num_out, pi.attrs.get(),
                           pi.place, alloc ? alloc : &allocator_for(pi.place));
    c->ctx.set_unused_outputs(pi.unused_outputs);
    c->ctx.set_step(step_);
    out.suspended = true;  // before the call: its done may propagate before it returns
    pi.async_fn(c->ctx, AsyncKernelDone(&async_done, this, c->index));
  } catch (...) {
    // The kernel threw before handing its done to anything: the node fails.
    out.suspended = false;
    MaybeLock lock(mu_, locked_);
    --async_outstanding_;
    c->next_free = free_calls_;
    free_calls_ = c;
    throw;
  }
}

void FramePropagator::async_done(void* self, std::uint32_t index, const Error* error) noexcept {
  auto* p = static_cast<FramePropagator*>(self);
  std::lock_guard lock(p->mu_);
  AsyncCall* c = p->calls_[index].get();
  if (error) {
    try {
      c->error = std::make_exception_ptr(*error);
    } catch (...) {
      c->error = std::current_exception();
    }
  }
  p->done_calls_.push_back(c);  // within its reserved capacity
  if (p->resume_ && !p->driving_) {
    // start()'s run, which no thread drives now: one takes it up.
    p->driving_ = true;
    p->active_ = 1;
    p->resume_->push(WorkTask{&FramePropagator::resume_entry, p, 0});
  } else if (p->waiting_) {
    p->idle_.notify_all();
  }
}

// Under mu_: a call whose done came. Its error fails the run; otherwise its
// outputs go to their readers (a recv's output left without a tensor is
// dead) and the node's inputs are released.
void FramePropagator::finish_async(AsyncCall* c) {
  const FrameNode& n = fp_.nodes[c->r.node];
  std::exception_ptr error = std::exchange(c->error, nullptr);
  Outputs& out = c->out;
  out.suspended = false;
  if (!error && n.recv) {
    const Cell* cell = out.at(0);
    if (cell && cell->var.is<Tensor>() && !cell->var.get<Tensor>().is_initialized()) out.dead |= 1;
  }
  if (!error) {
    try {
      propagate(c->r, out);
    } catch (...) {
      error = std::current_exception();
    }
  }
  if (error) fail(c->r.node, std::move(error));
  c->next_free = free_calls_;
  free_calls_ = c;
  --async_outstanding_;
}

// After a stopped run (under mu_, no worker left): the kernels still
// waiting are woken through the run's cancellation manager (outside mu_:
// their done takes it) and their calls dropped; their errors come after the
// run's own.
void FramePropagator::drain_async(std::unique_lock<std::mutex>& lock) {
  if (async_outstanding_ == 0) return;
  lock.unlock();
  if (step_ && step_->cancellation) step_->cancellation->start_cancel();
  lock.lock();
  while (async_outstanding_ != 0) {
    while (!done_calls_.empty()) {
      AsyncCall* c = done_calls_.back();
      done_calls_.pop_back();
      if (c->error) fail(c->r.node, std::exchange(c->error, nullptr));
      c->next_free = free_calls_;
      free_calls_ = c;
      --async_outstanding_;
    }
    if (async_outstanding_ == 0) break;
    ++waiting_;
    idle_.wait(lock);
    --waiting_;
  }
}

// Before a node runs (under the lock with a pool): a source's output and
// a merge's value_index (when read) get an empty cell; a kernel's each output but a
// direct one gets a cell of its home, which holds the tensor this output
// had last time when it was kept (release_cell) — KernelContext::alloc_output
// keeps a tensor of the same dims and dtype that nothing else holds — so a
// loop's iterations allocate nothing once the run has freed a few values.
// An unused output and an in-place node's outputs start empty.
inline void FramePropagator::prepare_outputs(const Ready& r, Outputs& out) {
  const FrameNode& n = fp_.nodes[r.node];
  const bool makes = n.kind == Kind::Kernel || n.kind == Kind::Source ||
                     (n.kind == Kind::Merge && !((n.unused_outputs >> 1) & 1));
  if (makes && !r.dead) make_outputs(n, r.node, out);
  else if (n.kind == Kind::Merge) out.at(1) = nullptr;
}

// prepare_outputs' cells, for a node that has some to make.
void FramePropagator::make_outputs(const FrameNode& n, std::uint32_t node, Outputs& out) {
  if (n.kind == Kind::Source) {
    out.at(0) = new_cell();
    return;
  }
  if (n.kind == Kind::Merge) {
    out.at(1) = new_cell();
    return;
  }
  const std::uint32_t num_out = static_cast<std::uint32_t>(plan_.instructions[n.instruction].writes.size());
  if (num_out > Outputs::kInline && out.more.size() < num_out - Outputs::kInline)
    out.more.resize(num_out - Outputs::kInline);
  out.dead = 0;
  out.owned = 0;
  const std::uint32_t base = output_base_[node];
  const std::uint64_t empty = n.inplace.empty() ? n.unused_outputs : ~std::uint64_t{0};
  for (std::uint32_t o = 0; o < num_out; ++o) {
    if ((n.direct_outputs >> o) & 1) {
      out.at(o) = nullptr;
      continue;
    }
    Cell* c = take_cell(base + o);
    if (((empty >> o) & 1) && c->var.is_initialized()) c->var.clear();
    out.at(o) = c;
    out.owned |= std::uint64_t{1} << o;
  }
}

[[gnu::cold]] void FramePropagator::throw_stalled(const Frame* f, const Iteration* it) const {
  const StaticFrame& sf = fp_.frames[f->info];
  std::string who = "an op";
  for (std::uint32_t id = 0; id < fp_.nodes.size(); ++id) {
    const FrameNode& n = fp_.nodes[id];
    if (n.frame != f->info || n.kind == Kind::Merge) continue;
    const std::int32_t left = it->pending[n.local];
    if (left > 0 && left < static_cast<std::int32_t>(n.num_inputs)) {
      who = fp_.describe(id);
      break;
    }
  }
  throw_error(ErrorKind::InvalidArgument, who, " in iteration ", it->id, " of frame '", sf.name,
              "' got some of its inputs, but the rest never arrives (a value read in every iteration "
              "of a loop must enter its frame with is_constant = true; a non-constant enter reaches "
              "iteration 0 only; a value that is dead in one iteration, as the body of a loop whose exit "
              "was taken, must be dead in all the values of a loop it enters)");
}

void FramePropagator::fail(std::uint32_t node, std::exception_ptr e) noexcept {
  if (!failure_.error) {
    failure_.instruction = node == kNoIndex ? kNoIndex : fp_.nodes[node].instruction;
    failure_.error = std::move(e);
  }
  stop_ = true;
}

// ---- the run ----

inline bool FramePropagator::pop(Ready& r) {
  // Relaxed: a stale "false" only runs one more node before the abort is seen.
  if (stop_ || ready_.empty() || (abort_ && abort_->load(std::memory_order_relaxed))) return false;
  r = ready_.pop_front();
  return true;
}

// A worker: runs ready nodes until the run has none left and none running
// (nothing more can become ready), or stops. While others run nodes that
// may make more ready, the caller of run() sleeps (it is the user's thread)
// and a pool worker lingers at most kLinger — waking a sleeping pool thread
// costs more than an iteration of a small loop, so a worker that left at
// once would come back too late for the next iteration's work — then
// leaves, so no pool thread waits long on others. A worker processes the
// done of asynchronous kernels as it finds them; the caller waits for them
// too, except in start()'s runs, where it leaves (false) when only they are
// left.
bool FramePropagator::work(bool caller) {
  constexpr auto kLinger = std::chrono::microseconds(200);
  Outputs out;
  std::unique_lock lock(mu_);
  Ready r;
  for (;;) {
    // Relaxed: as in pop(). A cancellation only sets the flag; sleepers
    // see it when the running nodes end (each end notifies them).
    const bool stopped = stop_ || (abort_ && abort_->load(std::memory_order_relaxed));
    if (!done_calls_.empty() && !stopped) [[unlikely]] {
      AsyncCall* c = done_calls_.back();
      done_calls_.pop_back();
      finish_async(c);
      if (waiting_ && (!ready_.empty() || (running_ == 0 && async_outstanding_ == 0) || stop_))
        idle_.notify_all();
      continue;
    }
    if (!pop(r)) {
      if (stopped || (running_ == 0 && async_outstanding_ == 0)) break;
      if (caller && resume_ && running_ == 0) {
        // start()'s run waits on asynchronous kernels only: it holds no thread.
        driving_ = false;
        --active_;
        return false;
      }
      ++waiting_;
      if (caller) idle_.wait(lock);
      else idle_.wait_for(lock, kLinger);
      --waiting_;
      if (!caller && ready_.empty() && done_calls_.empty()) break;  // lingered long enough
      continue;
    }
    prepare_outputs(r, out);
    ++running_;
    // Someone else for the rest of the ready nodes: a waiting thread, or
    // one more pool worker while there is room.
    if (!ready_.empty()) {
      if (waiting_) idle_.notify_all();
      else if (active_ < max_workers_) {
        ++active_;
        pool_->push({&FramePropagator::work_entry, this, 0});
      }
    }
    lock.unlock();
    std::exception_ptr error;
    try {
      if (__builtin_expect(record_, 0)) execute_recorded(r, out);
      else execute(r, out);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    if (error) fail(r.node, std::move(error));
    else if (out.suspended) out.suspended = false;  // its done propagates it
    else {
      try {
        propagate(r, out);
      } catch (...) {
        fail(r.node, std::current_exception());
      }
    }
    --running_;
    // New ready nodes for the waiting, or the run's end (or a failure) for them.
    if (waiting_ && (!ready_.empty() || running_ == 0 || stop_)) idle_.notify_all();
  }
  --active_;
  if (waiting_) idle_.notify_all();
  return true;
}

void FramePropagator::work_entry(void* self, std::uint32_t) { static_cast<FramePropagator*>(self)->work(false); }

// A run's start: the top level's roots ready.
void FramePropagator::begin(WorkQueue* pool, unsigned num_threads, const std::atomic<bool>& abort) {
  failure_ = {};
  stop_ = false;
  records_.clear();
  abort_ = &abort;
  frames_made_ = 0;
  std::fill(peak_.begin(), peak_.end(), 0);
  std::fill(slot_dead_.begin(), slot_dead_.end(), 0);
  pool_ = num_threads > 1 ? pool : nullptr;
  max_workers_ = pool_ ? num_threads : 1;
  locked_ = pool_ != nullptr || fp_.has_async;
  resume_ = nullptr;
  active_ = 1;  // this thread
  running_ = 0;
  waiting_ = 0;
  driving_ = true;
  // The top level: one frame, one iteration, its roots ready.
  if (!root_) {
    root_ = new Frame;
    root_->info = 0;
  }
  root_->newest = -1;
  root_->pending_enters = 0;
  Iteration* top = start_iteration(root_);
  for (std::uint32_t id : fp_.roots) push(id, root_, top, false);
}

// Runs nodes on this thread (and the pool's) until the run is over — true —
// or, in start()'s runs, until only asynchronous kernels are left — false:
// this thread left, and their done resumes the run on resume_.
bool FramePropagator::drive() {
  if (!locked_) {
    Outputs out;
    Ready r;
    while (pop(r)) {
      try {
        prepare_outputs(r, out);
        if (__builtin_expect(record_, 0)) execute_recorded(r, out);
        else execute(r, out);
        propagate(r, out);
      } catch (...) {
        fail(r.node, std::current_exception());
      }
    }
    return true;
  }
  if (!work(/*caller=*/true)) return false;
  // Pool workers still in work() leave at their next look (the run has
  // nothing left, or stopped): the state outlives them.
  std::unique_lock lock(mu_);
  while (active_ != 0) {
    ++waiting_;
    idle_.wait(lock);
    --waiting_;
  }
  drain_async(lock);
  return true;
}

// The run's end, once no thread but this one touches it: a run that stalled
// is an error; every frame and value is dropped.
FramePropagator::Failure FramePropagator::end() {
  const Iteration* top = root_->iterations.front();
  // Relaxed: only picks the error message; the run's own error (Cancelled,
  // DeadlineExceeded) was recorded by whoever set the flag.
  const bool aborted = abort_->load(std::memory_order_relaxed);
  if (!failure_.error && !aborted && (top->outstanding != 0 || top->outstanding_frames != 0 || !live_.empty()))
    failure_.error = std::make_exception_ptr(Error(
        ErrorKind::InvalidArgument,
        "the dataflow run stopped with " + std::to_string(live_.size()) +
            " frame(s) still live and no op ready: a kiln.merge or another op waits for an input that "
            "never arrives (a value read in every iteration of a loop must enter its frame with "
            "is_constant = true; a non-constant enter reaches iteration 0 only)"));
  release_all();
  return failure_;
}

FramePropagator::Failure FramePropagator::run(WorkQueue* pool, unsigned num_threads,
                                              const std::atomic<bool>& abort) {
  begin(pool, num_threads, abort);
  drive();
  return end();
}

void FramePropagator::start(WorkQueue* resume, const std::atomic<bool>& abort, Finish finish, void* arg) {
  begin(nullptr, 1, abort);
  resume_ = resume;
  finish_ = finish;
  finish_arg_ = arg;
  if (drive()) complete();
}

// start()'s run is over: `finish` gets its failure, the last touch of this
// propagator by the run.
void FramePropagator::complete() {
  const Finish finish = finish_;
  void* arg = finish_arg_;
  Failure failure = end();
  finish(arg, std::move(failure));
}

// On resume_: the done of an asynchronous kernel came after start()'s
// thread left.
void FramePropagator::resume_entry(void* self, std::uint32_t) {
  auto* p = static_cast<FramePropagator*>(self);
  if (p->drive()) p->complete();
}

// Drops every frame, iteration and queued node (after a run, failed or not).
void FramePropagator::release_all() noexcept {
  ready_.clear();
  // Children first: a frame's iterations hold its own children only.
  while (!live_.empty()) {
    Frame* f = live_.back();
    live_.pop_back();
    for (Iteration* it : f->iterations) release_iteration(f->info, it, /*done=*/false);
    f->iterations.clear();
    f->deferred.clear();
    for (Entry& e : f->constants) e = Entry{};
    free_frames_.emplace_back(f);
  }
  live_frames_ = 0;
  if (root_) {
    for (Iteration* it : root_->iterations) release_iteration(0, it, /*done=*/false);
    root_->iterations.clear();
  }
  // Every cell back to empty and free, held or not (a failed node's
  // outputs, a deferred value): the run keeps no value past its end.
  free_cells_ = nullptr;
  std::fill(home_free_.begin(), home_free_.end(), nullptr);
  kept_bytes_ = 0;
  for (auto& c : cells_) {
    if (c->var.is_initialized()) c->var.clear();
    c->refs = 0;
    c->kept = 0;
    c->home = kNoIndex;
    c->next_free = free_cells_;
    free_cells_ = c.get();
  }
}

}  // namespace kiln

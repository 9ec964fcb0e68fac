#include "kiln/exec/memory_plan.h"

#include <algorithm>
#include <cstdlib>
#include <unordered_map>

#include "kiln/ir/builtin_types.h"

namespace kiln {

namespace {

constexpr std::size_t kPieceAlignment = 64;

std::size_t aligned(std::size_t bytes) {
  return (bytes + kPieceAlignment - 1) / kPieceAlignment * kPieceAlignment;
}

// The temporaries that hold one buffer, and when it is in use.
struct Group {
  std::vector<std::uint32_t> slots;
  std::uint32_t allocator = kNoIndex;  // the slot whose kernel allocates it
  std::uint32_t first = kNoIndex;      // its allocating instruction
  std::uint32_t last = 0;              // its last user, in program order
  std::vector<std::uint32_t> users;    // every instruction touching a member
  std::size_t bytes = 0;
  std::size_t offset = 0;           // in an arena for any schedule
  std::size_t offset_in_order = 0;  // in an arena for runs in program order
  bool plannable = true;
};

// One bit per (instruction, ancestor) pair: anc(j) holds every i that the
// DAG orders before j. Instructions are numbered in a topological order
// (program order), so one pass over the successor lists fills it.
class Ancestors {
 public:
  explicit Ancestors(const ExecutionPlan& p) : words_((p.size() + 63) / 64), bits_(p.size() * words_, 0) {
    for (std::uint32_t i = 0; i < p.size(); ++i)
      for (std::uint32_t j : p.successors(i)) {
        std::uint64_t* to = row(j);
        const std::uint64_t* from = row(i);
        for (std::size_t w = 0; w < words_; ++w) to[w] |= from[w];
        to[i / 64] |= std::uint64_t{1} << (i % 64);
      }
  }
  bool before(std::uint32_t i, std::uint32_t j) const { return (row(j)[i / 64] >> (i % 64)) & 1; }

 private:
  std::uint64_t* row(std::uint32_t i) { return bits_.data() + i * words_; }
  const std::uint64_t* row(std::uint32_t i) const { return bits_.data() + i * words_; }
  std::size_t words_;
  std::vector<std::uint64_t> bits_;
};

// Slots a probe may plan: private host temporaries.
std::vector<std::uint8_t> plannable_slots(const ExecutionPlan& p) {
  std::vector<std::uint8_t> ok(p.slots.size(), 0);
  for (std::uint32_t s = 0; s < p.slots.size(); ++s) {
    const PlanSlot& slot = p.slots[s];
    ok[s] = slot.kind == SlotKind::Temporary && slot.place == Place::cpu() && !slot.persistent &&
            slot.fetch_reads == 0 && !slot.kept;
  }
  // Values an instruction we cannot order by the DAG alone touches.
  for (const PlanInstruction& in : p.instructions) {
    const bool host = !in.lane.is_stream && in.place == Place::cpu() && !in.pinned && in.fn &&
                      !in.async_fn && !in.control;
    if (host) continue;
    for (const auto* list : {&in.reads, &in.writes})
      for (std::uint32_t s : *list) ok[s] = 0;
  }
  for (const auto& f : p.fetches)
    if (f.slot != kNoIndex) ok[f.slot] = 0;
  return ok;
}

// The groups of slots the probe saw holding one buffer, with their users.
std::vector<Group> group_buffers(const ExecutionPlan& p, MemoryProbe& probe) {
  const std::vector<std::uint8_t> ok = plannable_slots(p);
  std::vector<std::uint32_t> group_of(p.slots.size(), kNoIndex), index(p.slots.size(), kNoIndex);
  std::vector<Group> groups;
  for (std::uint32_t s = 0; s < p.slots.size(); ++s) {
    const SlotBuffer& o = probe.seen[s];
    if (o.bytes == 0 && o.dtype == DataType::Undefined) continue;
    std::uint32_t& k = index[probe.group_of(s)];
    if (k == kNoIndex) {
      k = static_cast<std::uint32_t>(groups.size());
      groups.emplace_back();
    }
    groups[k].slots.push_back(s);
    groups[k].plannable = groups[k].plannable && ok[s] && !o.escaped;
    group_of[s] = k;
  }
  // Users, and the allocating slot: the member written first.
  for (std::uint32_t i = 0; i < p.size(); ++i) {
    const PlanInstruction& in = p.instructions[i];
    for (std::uint32_t s : in.writes)
      if (group_of[s] != kNoIndex && groups[group_of[s]].first == kNoIndex) {
        groups[group_of[s]].first = i;
        groups[group_of[s]].allocator = s;
      }
    for (const auto* list : {&in.reads, &in.writes})
      for (std::uint32_t s : *list)
        if (group_of[s] != kNoIndex) groups[group_of[s]].users.push_back(i);
  }
  for (Group& g : groups) {
    std::sort(g.users.begin(), g.users.end());
    g.users.erase(std::unique(g.users.begin(), g.users.end()), g.users.end());
    if (g.users.empty() || g.allocator == kNoIndex) {
      g.plannable = false;
      continue;
    }
    g.last = g.users.back();
    g.bytes = aligned(probe.seen[g.allocator].bytes);
    // The allocating slot is no view, and its kernel made the buffer.
    g.plannable = g.plannable && p.slots[g.allocator].alias == g.allocator && g.bytes > 0;
  }
  return groups;
}

// The most bytes of `groups` live at one point of program order.
std::size_t live_set_minimum(const std::vector<const Group*>& groups, std::uint32_t n) {
  std::vector<std::int64_t> delta(n + 1, 0);
  for (const Group* g : groups) {
    delta[g->first] += static_cast<std::int64_t>(g->bytes);
    delta[g->last + 1] -= static_cast<std::int64_t>(g->bytes);
  }
  std::int64_t live = 0, most = 0;
  for (std::uint32_t i = 0; i <= n; ++i) most = std::max(most, live += delta[i]);
  return static_cast<std::size_t>(most);
}

// Greedy by size: each group, largest first, at the lowest offset where it
// overlaps no placed group it may be live together with (`apart(a, b)`:
// every user of a is done before b allocates). Writes each group's offset,
// returns the arena's size.
template <typename Apart>
std::size_t assign_offsets(std::vector<Group*> groups, Apart apart, std::size_t Group::*offset_of) {
  std::stable_sort(groups.begin(), groups.end(),
                   [](const Group* a, const Group* b) { return a->bytes > b->bytes; });
  std::size_t arena = 0;
  std::vector<const Group*> placed, clash;
  for (Group* g : groups) {
    clash.clear();
    for (const Group* q : placed)
      if (!apart(*q, *g) && !apart(*g, *q)) clash.push_back(q);
    std::sort(clash.begin(), clash.end(),
              [&](const Group* a, const Group* b) { return a->*offset_of < b->*offset_of; });
    std::size_t offset = 0;
    for (const Group* q : clash) {
      if (q->*offset_of >= offset + g->bytes) break;
      offset = std::max(offset, q->*offset_of + q->bytes);
    }
    g->*offset_of = offset;
    arena = std::max(arena, offset + g->bytes);
    placed.push_back(g);
  }
  return arena;
}

}  // namespace

MemoryProbe::MemoryProbe(std::size_t num_slots) : seen(num_slots), parent_(num_slots) {
  for (std::uint32_t s = 0; s < num_slots; ++s) parent_[s] = s;
}

std::uint32_t MemoryProbe::group_of(std::uint32_t s) {
  while (parent_[s] != s) s = parent_[s] = parent_[parent_[s]];
  return s;
}

void MemoryProbe::join(std::uint32_t a, std::uint32_t b) {
  a = group_of(a);
  b = group_of(b);
  if (a != b) parent_[std::max(a, b)] = std::min(a, b);
}

bool memory_plannable(const ExecutionPlan& p) {
  return !p.is_region() && p.options.plan_memory && p.options.gc && !p.has_streams() && !p.frames &&
         !p.has_async && p.options.place == Place::cpu() && p.size() <= kMaxPlannedInstructions;
}

std::shared_ptr<const MemoryPlan> plan_memory(const ExecutionPlan& p, MemoryProbe& probe) {
  if (!memory_plannable(p) || probe.seen.size() != p.slots.size()) return nullptr;
  std::vector<Group> groups = group_buffers(p, probe);
  std::vector<Group*> planned;
  std::vector<const Group*> all;
  for (Group& g : groups) {
    if (g.users.empty() || g.allocator == kNoIndex) continue;
    if (p.slots[g.allocator].kind != SlotKind::Temporary) continue;
    all.push_back(&g);
    if (g.plannable) planned.push_back(&g);
  }
  if (planned.empty()) return nullptr;

  auto plan = std::make_shared<MemoryPlan>();
  plan->temporaries_live_bytes = live_set_minimum(all, p.size());
  plan->live_bytes = live_set_minimum({planned.begin(), planned.end()}, p.size());
  for (const Group* g : planned) plan->total_bytes += g->bytes;
  // Any schedule: the DAG orders a's users before b's allocation. In
  // program order: a's last user comes before b's allocation.
  const Ancestors dag(p);
  plan->arena_bytes = assign_offsets(
      planned,
      [&](const Group& a, const Group& b) {
        return std::all_of(a.users.begin(), a.users.end(),
                           [&](std::uint32_t u) { return dag.before(u, b.first); });
      },
      &Group::offset);
  plan->arena_bytes_in_order = assign_offsets(
      planned, [](const Group& a, const Group& b) { return a.last < b.first; }, &Group::offset_in_order);

  std::vector<std::uint8_t> in_arena(p.slots.size(), 0);
  for (const Group* g : planned) {
    const SlotBuffer& a = probe.seen[g->allocator];
    plan->pieces.push_back({g->allocator, g->offset, g->offset_in_order, g->bytes, a.dtype, a.dims});
    in_arena[g->allocator] = 1;
  }
  std::sort(plan->pieces.begin(), plan->pieces.end(),
            [](const MemoryPlan::Piece& a, const MemoryPlan::Piece& b) { return a.slot < b.slot; });
  plan->gc_off.assign(p.gc_off.size(), 0);
  for (std::uint32_t i = 0; i < p.size(); ++i) {
    for (std::uint32_t k = p.gc_off[i]; k < p.gc_off[i + 1]; ++k)
      if (!in_arena[p.gc[k]]) plan->gc.push_back(p.gc[k]);
    plan->gc_off[i + 1] = static_cast<std::uint32_t>(plan->gc.size());
  }
  return plan;
}

std::shared_ptr<const MemoryPlan> plan_memory_from_types(const ExecutionPlan& p) {
  if (!memory_plannable(p)) return nullptr;
  MemoryProbe probe(p.slots.size());
  for (std::uint32_t s = 0; s < p.slots.size(); ++s) {
    const PlanSlot& slot = p.slots[s];
    if (slot.kind != SlotKind::Temporary || !slot.type || !is_shaped(slot.type)) continue;
    const std::vector<std::int64_t>& dims = shaped_dims(slot.type);
    if (std::any_of(dims.begin(), dims.end(), [](std::int64_t d) { return d < 0; })) return nullptr;
    SlotBuffer& o = probe.seen[s];
    o.dtype = shaped_data_type(slot.type);
    o.dims = Dims(dims);
    o.bytes = size_of(o.dtype) * static_cast<std::size_t>(o.dims.numel());
    if (slot.alias != s) probe.join(s, slot.alias);
  }
  return plan_memory(p, probe);
}

MemoryArena::MemoryArena(std::shared_ptr<const MemoryPlan> plan, bool in_order)
    : plan_(std::move(plan)), in_order_(in_order) {
  // Straight from the system, not the caching allocator: its size classes
  // would round the arena up by as much as a quarter.
  const std::size_t bytes = in_order_ ? plan_->arena_bytes_in_order : plan_->arena_bytes;
  void* base = std::aligned_alloc(kPieceAlignment, std::max(aligned(bytes), kPieceAlignment));
  if (!base)
    throw_error(ErrorKind::Unavailable, "memory plan: out of memory allocating an arena of ", bytes,
                " bytes");
  arena_ = BufferRef::adopt(Buffer::wrap(base, bytes, Place::cpu(), [](void* p) { std::free(p); }));
}

std::size_t MemoryArena::offset(std::size_t k) const {
  return in_order_ ? plan_->pieces[k].offset_in_order : plan_->pieces[k].offset;
}

BufferRef MemoryArena::make_piece(std::size_t k) const {
  // The deleter's copy of the arena's reference keeps its bytes valid for
  // as long as a tensor over the piece exists.
  BufferRef keep = arena_;
  return BufferRef::adopt(Buffer::wrap(static_cast<std::byte*>(arena_->data()) + offset(k),
                                       plan_->pieces[k].bytes, Place::cpu(), [keep](void*) {}));
}

bool MemoryArena::is_piece(const BufferRef& buffer, std::size_t k) const {
  return buffer && buffer->allocator() == nullptr &&
         buffer->data() == static_cast<std::byte*>(arena_->data()) + offset(k);
}

}  // namespace kiln

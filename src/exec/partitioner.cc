// partition() and run_partitioned(): kiln/exec/partitioner.h.
#include "kiln/exec/partitioner.h"

#include <algorithm>
#include <map>
#include <memory>
#include <unordered_map>
#include <unordered_set>

#include "kiln/dialect/dataflow_ops.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/dialect/send_recv_ops.h"
#include "kiln/exec/executor_barrier.h"
#include "kiln/ir/builder.h"
#include "kiln/ir/ir_mapping.h"
#include "kiln/runtime/rendezvous.h"

namespace kiln {

void set_op_place(Operation* op, Place place) {
  op->set_attribute(kPlaceAttr, PlaceAttribute::get(place));
}

Place op_place(const Operation* op, Place fallback) {
  Attribute a = op->attribute(kPlaceAttr);
  if (!a) return fallback;
  auto p = a.dyn_cast<PlaceAttribute>();
  if (!p)
    throw_error(ErrorKind::InvalidArgument, "op '", op->name(), "': attribute '", kPlaceAttr,
                "' must be a place, got ", a.to_string());
  return p.value();
}

namespace {

using ValueKey = const void*;
ValueKey key_of(Value v) { return v.impl(); }

// The top-level values `op` reads: its operands, and what ops nested in its
// regions read from the top level (in first-use order, without repeats).
void top_level_uses(const Operation* op, const std::unordered_set<ValueKey>& top,
                    std::vector<Value>& out, std::unordered_set<ValueKey>& seen) {
  for (std::uint32_t i = 0; i < op->num_operands(); ++i) {
    Value v = op->operand_source(i);
    if (top.count(key_of(v)) && seen.insert(key_of(v)).second) out.push_back(v);
  }
  for (std::uint32_t r = 0; r < op->num_regions(); ++r)
    for (Block* b : op->region(r))
      for (Operation* inner : *b) top_level_uses(inner, top, out, seen);
}

std::string describe(Value v) {
  Operation* def = v.defining_op();
  return def ? "result of op '" + std::string(def->name()) + "'" : std::string("a block argument");
}

// What pass 1 of partition() finds: each op's part and the top-level values
// it reads (both by the op's index in the block), and for each value, its
// op's part and the other parts that read it.
struct PartAssignment {
  std::vector<std::size_t> op_part;
  std::vector<std::vector<Value>> op_uses;
  std::unordered_map<ValueKey, std::size_t> owner;  // top-level value → part index
  std::unordered_map<ValueKey, std::vector<std::size_t>> readers;  // value → parts, first-use order
};

// Pass 1 of partition(): adds to `pp` one part per place the ops of
// `program` run on (in first-use order, each with the program's
// parameters), and returns each op's part and, for each value, the other
// parts that read it.
PartAssignment assign_parts(const Program& program, Place default_place, PartitionedProgram& pp) {
  std::map<std::pair<PlaceKind, int>, std::size_t> part_of_place;
  auto part_for = [&](Place p) {
    auto [it, added] = part_of_place.try_emplace({p.kind, p.device}, pp.parts.size());
    if (added) {
      pp.parts.emplace_back();
      pp.parts.back().place = p;
      for (const auto& [name, param] : program.parameters())
        pp.parts.back().program.set_parameter(name, param);
    }
    return it->second;
  };
  PartAssignment a;
  std::unordered_set<ValueKey> top;
  for (Operation* op : program.block()) {
    const std::size_t k = part_for(op_place(op, default_place));
    a.op_part.push_back(k);
    std::vector<Value> uses;
    std::unordered_set<ValueKey> seen;
    top_level_uses(op, top, uses, seen);
    for (Value v : uses) {
      const std::size_t from = a.owner.at(key_of(v));
      auto& r = a.readers[key_of(v)];
      if (from != k && std::find(r.begin(), r.end(), k) == r.end()) r.push_back(k);
    }
    a.op_uses.push_back(std::move(uses));
    for (std::uint32_t i = 0; i < op->num_results(); ++i) {
      top.insert(key_of(op->result(i)));
      a.owner[key_of(op->result(i))] = k;
    }
  }
  return a;
}

// Pass 2 of partition(): clones the ops into their parts in program order;
// a value another part reads is sent right after its op, and received in
// that part before its first reader.
class PartCloner {
 public:
  // In a dataflow program a value may arrive dead: with `passes_dead`, its
  // receiving part passes it on dead.
  PartCloner(const PartAssignment& assigned, PartitionedProgram& pp, bool passes_dead)
      : assigned_(assigned), pp_(pp), passes_dead_(passes_dead), maps_(pp.parts.size()) {}

  // Clones `op`, the block's op #`index`, into its part, with the receives
  // before it and the sends after it.
  void clone(Operation* op, std::size_t index) {
    const std::size_t k = assigned_.op_part[index];
    ProgramPart& part = pp_.parts[k];
    Builder b(part.program);
    receive_uses(b, k, assigned_.op_uses[index]);
    Operation* copy = op->clone(maps_[k]);
    copy->set_attributes(copy->attributes().without(kPlaceAttr));
    part.program.block().push_back(copy);
    if (auto d = op->dyn_cast<DataOp>()) part.feeds.push_back(d.attrs().name);
    send_read_results(b, k, op);
  }

  // Gives each value of `fetch` to its part's fetch list.
  void add_fetches(const std::vector<Value>& fetch) {
    for (std::size_t f = 0; f < fetch.size(); ++f) {
      auto o = assigned_.owner.find(key_of(fetch[f]));
      if (!fetch[f] || o == assigned_.owner.end())
        throw_error(ErrorKind::InvalidArgument, "partition: fetch #", f,
                    " is not a value of the program's top-level block");
      ProgramPart& part = pp_.parts[o->second];
      part.fetch.push_back(maps_[o->second].lookup(fetch[f]));
      part.fetch_of.push_back(f);
    }
  }

 private:
  // Receives into part `k` each value of `uses` that another part defines
  // and `k` has not received yet.
  void receive_uses(Builder& b, std::size_t k, const std::vector<Value>& uses) {
    ProgramPart& part = pp_.parts[k];
    for (Value v : uses) {
      const std::size_t from = assigned_.owner.at(key_of(v));
      if (from == k || maps_[k].lookup(v)) continue;
      const std::string& name = edge_name_.at(key_of(v));
      Value got = b.create<RecvOp>(name, shaped_data_type(v.type()), shaped_dims(v.type()),
                                   pp_.parts[from].place, part.place, passes_dead_)
                      .result();
      maps_[k].map(v, got);
    }
  }

  // Sends each result of `op` (of part `k`) that other parts read to each of
  // them, over one new edge per result.
  void send_read_results(Builder& b, std::size_t k, Operation* op) {
    ProgramPart& part = pp_.parts[k];
    for (std::uint32_t i = 0; i < op->num_results(); ++i) {
      Value v = op->result(i);
      auto r = assigned_.readers.find(key_of(v));
      if (r == assigned_.readers.end() || r->second.empty()) continue;
      if (!is_shaped(v.type()))
        throw_error(ErrorKind::Unimplemented, "partition: ", describe(v), " #", i, " (",
                    v.type().to_string(), ") is read on another place; only tensors are sent");
      const std::string name =
          "edge" + std::to_string(edge_name_.size()) + ":" + std::string(op->name());
      edge_name_.emplace(key_of(v), name);
      for (std::size_t to : r->second) {
        b.create<SendOp>(maps_[k].lookup(v), name, part.place, pp_.parts[to].place);
        ++pp_.transfers;
      }
    }
  }

  const PartAssignment& assigned_;
  PartitionedProgram& pp_;
  const bool passes_dead_;
  std::vector<IrMapping> maps_;                          // per part: original value → its copy
  std::unordered_map<ValueKey, std::string> edge_name_;  // value sent → its edge's name
};

}  // namespace

PartitionedProgram partition(const Program& program, const std::vector<Value>& fetch,
                             Place default_place) {
  PartitionedProgram pp;
  pp.num_fetches = fetch.size();
  const PartAssignment assigned = assign_parts(program, default_place, pp);
  PartCloner cloner(assigned, pp, has_dataflow_ops(program.block()));
  std::size_t index = 0;
  for (Operation* op : program.block()) cloner.clone(op, index++);
  cloner.add_fetches(fetch);
  return pp;
}

std::vector<Tensor> run_partitioned(const PartitionedProgram& pp,
                                    std::span<Executor* const> executors, const FeedMap& feed,
                                    RunOptions options) {
  if (executors.size() != pp.parts.size())
    throw_error(ErrorKind::InvalidArgument, "run_partitioned: ", executors.size(),
                " executors for ", pp.parts.size(), " parts (one each)");
  std::vector<ExecutorBarrier::Part> parts(pp.parts.size());
  std::unordered_map<std::string_view, std::size_t> feed_part;
  for (std::size_t k = 0; k < pp.parts.size(); ++k) {
    parts[k].executor = executors[k];
    parts[k].program = &pp.parts[k].program;
    for (const Value& v : pp.parts[k].fetch) parts[k].fetch.emplace_back(v);
    for (const std::string& name : pp.parts[k].feeds) feed_part.emplace(name, k);
  }
  for (const auto& [name, t] : feed) {
    auto it = feed_part.find(name);
    if (it == feed_part.end())
      throw_error(ErrorKind::NotFound, "feed '", name, "' matches no data op of the program");
    parts[it->second].feed.emplace(name, t);
  }
  std::unique_ptr<LocalRendezvous> own;
  LocalRendezvous* rendezvous = options.rendezvous;
  if (!rendezvous) rendezvous = (own = std::make_unique<LocalRendezvous>()).get();
  auto results = ExecutorBarrier::run(std::move(parts), *rendezvous, options);
  std::vector<Tensor> out(pp.num_fetches);
  for (std::size_t k = 0; k < pp.parts.size(); ++k)
    for (std::size_t i = 0; i < pp.parts[k].fetch_of.size(); ++i)
      out[pp.parts[k].fetch_of[i]] = std::move(results[k][i]);
  return out;
}

}  // namespace kiln

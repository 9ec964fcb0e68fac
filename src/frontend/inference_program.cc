// clone_for_test (kiln/frontend/clone_for_test.h) and prune
// (kiln/frontend/prune.h): each decides on the original program which ops
// go, then copies the rest with copy_without.
#include <string>
#include <unordered_set>
#include <vector>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/frontend/clone_for_test.h"
#include "kiln/frontend/op_role.h"
#include "kiln/frontend/parameter.h"
#include "kiln/frontend/prune.h"
#include "kiln/ir/inplace_pairs.h"
#include "kiln/passes/op_effects.h"

namespace kiln {

namespace {

using ValueSet = std::unordered_set<const detail::ValueImpl*>;
using OpSet = std::unordered_set<const Operation*>;
using NameSet = std::unordered_set<std::string>;

// Calls f(op) for every op nested in `op`'s regions, outer before inner.
template <typename F>
void for_each_nested(const Operation* op, F& f) {
  for (std::uint32_t r = 0; r < op->num_regions(); ++r)
    for (Block* b : op->region(r))
      for (Operation* inner : *b) {
        f(inner);
        for_each_nested(inner, f);
      }
}

// Every value `op` defines: its results, and the arguments and results of
// everything nested in it.
void add_defined_values(const Operation* op, ValueSet& out) {
  for (std::uint32_t i = 0; i < op->num_results(); ++i) out.insert(op->result(i).impl());
  for (std::uint32_t r = 0; r < op->num_regions(); ++r)
    for (Block* b : op->region(r)) {
      for (std::uint32_t a = 0; a < b->num_arguments(); ++a) out.insert(b->argument(a).impl());
      for (Operation* inner : *b) add_defined_values(inner, out);
    }
}

// The values `op` reads from outside itself: its operands and the outer
// values its nested ops use.
std::vector<Value> reads_of(const Operation* op) {
  std::vector<Value> out = op->operands();
  if (op->num_regions() == 0) return out;
  ValueSet inside;
  add_defined_values(op, inside);
  auto captures = [&](Operation* inner) {
    for (std::uint32_t i = 0; i < inner->num_operands(); ++i) {
      Value v = inner->operand_source(i);
      if (!inside.count(v.impl())) out.push_back(v);
    }
  };
  for_each_nested(op, captures);
  return out;
}

// A variable of a run: a parameter's (every builtin.parameter value of one
// name shares it) or a value's own.
struct Variables {
  ValueSet values;
  NameSet parameters;

  void add(Value v) {
    const Value root = alias_root(v);
    if (std::string name = parameter_name(root); !name.empty()) parameters.insert(std::move(name));
    else values.insert(root.impl());
  }
  bool contains(Value v) const {
    const Value root = alias_root(v);
    if (std::string name = parameter_name(root); !name.empty()) return parameters.count(name) > 0;
    return values.count(root.impl()) > 0;
  }
};

// Whether `op` (or an op nested in it) writes a variable in `vars`: in
// place, or as builtin.set_parameter.
bool writes_any(Operation* op, const Variables& vars) {
  bool hit = false;
  auto check = [&](Operation* o) {
    if (auto s = o->dyn_cast<SetParameterOp>())
      hit = hit || vars.parameters.count(s.attrs().parameter_name) > 0;
    for (auto [out, in] : inplace_pairs(*o))
      hit = hit || vars.contains(o->result(out));
  };
  check(op);
  for_each_nested(op, check);
  return hit;
}

// The parameter names `op` and its nested ops read or write.
void add_parameter_names(Operation* op, NameSet& out) {
  auto add = [&](Operation* o) {
    if (auto p = o->dyn_cast<ParameterOp>()) out.insert(p.attrs().parameter_name);
    if (auto s = o->dyn_cast<SetParameterOp>()) out.insert(s.attrs().parameter_name);
  };
  add(op);
  for_each_nested(op, add);
}

NameSet parameter_names(const Program& p) {
  NameSet names;
  for (Operation* op : p.block()) add_parameter_names(op, names);
  return names;
}

// Ops in `dropped` nested in `op`'s regions (not descending into dropped
// ones), in program order.
void collect_nested_dropped(const Operation* op, const OpSet& dropped,
                            std::vector<const Operation*>& out) {
  for (std::uint32_t r = 0; r < op->num_regions(); ++r)
    for (Block* b : op->region(r))
      for (Operation* inner : *b) {
        if (dropped.count(inner)) out.push_back(inner);
        else collect_nested_dropped(inner, dropped, out);
      }
}

// Records original → copy in `out` for `op` and everything it defines,
// skipping dropped ops.
void export_mapping(const Operation* op, const OpSet& dropped, const IrMapping& map,
                    IrMapping& out) {
  if (dropped.count(op)) return;
  out.map(const_cast<Operation*>(op), map.lookup(const_cast<Operation*>(op)));
  for (std::uint32_t i = 0; i < op->num_results(); ++i)
    out.map(op->result(i), map.lookup(op->result(i)));
  for (std::uint32_t r = 0; r < op->num_regions(); ++r)
    for (Block* b : op->region(r)) {
      if (Block* c = map.lookup(b)) out.map(b, c);
      for (std::uint32_t a = 0; a < b->num_arguments(); ++a)
        if (Value c = map.lookup(b->argument(a))) out.map(b->argument(a), c);
      for (Operation* inner : *b) export_mapping(inner, dropped, map, out);
    }
}

// A copy of `program` without the ops in `dropped` (at any depth; an op's
// nested ops go with it). No kept op may use a value of a dropped one.
Program copy_without(const Program& program, const OpSet& dropped, IrMapping* mapping) {
  Program copy;
  for (const auto& [name, param] : program.parameters()) copy.set_parameter(name, param);
  IrMapping map;
  std::vector<const Operation*> nested;
  for (Operation* op : program.block()) {
    if (dropped.count(op)) continue;
    copy.block().push_back(op->clone(map));
    collect_nested_dropped(op, dropped, nested);
  }
  for (auto it = nested.rbegin(); it != nested.rend(); ++it)
    map.lookup(const_cast<Operation*>(*it))->erase();
  if (mapping)
    for (Operation* op : program.block()) export_mapping(op, dropped, map, *mapping);
  return copy;
}

// "result #0 of op 'kiln.data' (data 'x')" — what an error calls a value.
std::string describe_value(Value v) {
  if (!v) return "a null value";
  Operation* op = v.defining_op();
  if (!op) return "a block argument";
  std::string s = "result #" + std::to_string(cast<OpResult>(v).index()) + " of op '" +
                  std::string(op->name()) + "'";
  if (auto d = op->dyn_cast<DataOp>()) s += " (data '" + d.attrs().name + "')";
  if (auto p = op->dyn_cast<ParameterOp>()) s += " (parameter '" + p.attrs().parameter_name + "')";
  return s;
}

}  // namespace

// ---- clone_for_test ----

namespace {

// Marks the training-only ops of `b` (and of the blocks nested in the ops it
// keeps) and every op that uses a value of a marked one.
void mark_training_ops(const Block& b, OpSet& dropped, ValueSet& dead) {
  for (Operation* op : b) {
    bool drop = op_role(op) != OpRole::Forward || op->isa<SetParameterOp>();
    if (!drop)
      for (Value v : reads_of(op))
        if (dead.count(v.impl())) {
          drop = true;
          break;
        }
    if (drop) {
      dropped.insert(op);
      add_defined_values(op, dead);
      continue;
    }
    for (std::uint32_t r = 0; r < op->num_regions(); ++r)
      for (Block* inner : op->region(r)) mark_training_ops(*inner, dropped, dead);
  }
}

void set_is_test(Operation* op) {
  if (op->attribute("is_test").isa<BoolAttribute>())
    op->set_attribute("is_test", BoolAttribute::get(true));
}

}  // namespace

Program clone_for_test(const Program& program, IrMapping* mapping) {
  OpSet dropped;
  ValueSet dead;
  mark_training_ops(program.block(), dropped, dead);
  Program copy = copy_without(program, dropped, mapping);
  for (Operation* op : copy.block()) {
    set_is_test(op);
    for_each_nested(op, set_is_test);
  }
  const NameSet kept = parameter_names(copy);
  for (const std::string& name : parameter_names(program))
    if (!kept.count(name)) copy.erase_parameter(name);
  return copy;
}

// ---- prune ----

Program prune(const Program& program, const std::vector<Value>& targets, IrMapping* mapping) {
  ValueSet top_level;
  for (Value a : program.block().arguments()) top_level.insert(a.impl());
  for (Operation* op : program.block())
    for (std::uint32_t i = 0; i < op->num_results(); ++i) top_level.insert(op->result(i).impl());
  for (std::size_t k = 0; k < targets.size(); ++k)
    if (!targets[k] || !top_level.count(targets[k].impl()))
      throw_error(ErrorKind::InvalidArgument, "prune: target #", k, " (",
                  describe_value(targets[k]),
                  ") is not a value of the program (a result of an op in its top-level block)");

  // One walk from the end: an op is kept when a kept op (or a target) reads
  // one of its results, or when it writes a variable that a kept op reads
  // after it (`read_later`: what the kept ops seen so far read; targets are
  // read after the whole program, as fetches are).
  ValueSet needed;
  Variables read_later;
  for (Value t : targets) {
    needed.insert(t.impl());
    read_later.add(t);
  }
  OpSet dropped;
  std::vector<Operation*> ops;
  for (Operation* op : program.block()) ops.push_back(op);
  for (auto it = ops.rbegin(); it != ops.rend(); ++it) {
    Operation* op = *it;
    bool keep = false;
    for (std::uint32_t i = 0; i < op->num_results() && !keep; ++i)
      keep = needed.count(op->result(i).impl()) > 0;
    if (!keep) keep = writes_any(op, read_later);
    if (!keep) {
      dropped.insert(op);
      continue;
    }
    for (Value v : reads_of(op)) {
      needed.insert(v.impl());
      read_later.add(v);
    }
  }
  Program copy = copy_without(program, dropped, mapping);
  const NameSet kept = parameter_names(copy);
  for (const auto& [name, param] : program.parameters())
    if (!kept.count(name)) copy.erase_parameter(name);
  return copy;
}

}  // namespace kiln

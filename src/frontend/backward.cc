// append_backward (include/kiln/frontend/backward.h), seed 001 §1.2.2.1:
// requires-grad forward, reaches-loss backward, then one reverse walk over
// the ops on a path calling each one's Vjp, summing gradients with add_n
// (kiln.array_add for tensor arrays). kiln.if and kiln.while have no Vjp of
// their own: if_vjp and while_vjp build their gradients as control flow.
#include <algorithm>
#include <memory>
#include <unordered_map>
#include <unordered_set>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/frontend/backward.h"
#include "kiln/frontend/op_role.h"
#include "kiln/frontend/parameter.h"
#include "kiln/frontend/stop_gradient.h"
#include "kiln/ir/inplace_pairs.h"
#include "kiln/ir/ir_mapping.h"

namespace kiln {

namespace {

// Whether in-place `op` overwrites an operand that carries a gradient. An
// array it updates does not count: no Vjp reads a forward array's contents
// (kiln/dialect/tensor_array_ops.h).
bool overwrites_grad_operand(Operation* op, const std::unordered_set<Value>& requires_grad) {
  if (!op->has_trait<Inplace>()) return false;
  for (const auto& [out, in] : inplace_pairs(*op)) {
    Value v = op->operand_source(in);
    if (requires_grad.count(v) && !is_tensor_array(v.type())) return true;
  }
  return false;
}

bool is_floating_tensor(Type t) {
  if (!t.isa<TensorType>() && !t.isa<VTensorType>()) return false;
  switch (shaped_data_type(t)) {
    case DataType::Float16:
    case DataType::BFloat16:
    case DataType::Float32:
    case DataType::Float64: return true;
    default: return false;
  }
}

// Whether gradients flow through values of type t: floating tensors and
// tensor arrays.
bool differentiable_type(Type t) {
  if (is_tensor_array(t)) return is_floating(t.cast<TensorArrayType>().data_type());
  return is_floating_tensor(t);
}

Block* block_of(Value v) {
  return v.defining_op() ? v.defining_op()->parent_block() : cast<BlockArgument>(v).owner();
}

std::string describe_op(Operation* op) {
  return "'" + std::string(op->name()) + "'";
}

// A gradient fits its value: same dtype and rank, dims equal where both
// are known (-1 is a dim known only at run time).
bool compatible(Type grad, Type value) {
  if (grad == value) return true;
  if (is_tensor_array(grad) || is_tensor_array(value))
    return is_tensor_array(grad) && is_tensor_array(value) &&
           (type_fits(grad, value) || type_fits(value, grad) || join_types(grad, value));
  if (!is_shaped(grad) || !is_shaped(value)) return false;
  if (shaped_data_type(grad) != shaped_data_type(value)) return false;
  const auto& g = shaped_dims(grad);
  const auto& v = shaped_dims(value);
  if (g.size() != v.size()) return false;
  for (std::size_t i = 0; i < g.size(); ++i)
    if (g[i] != v[i] && g[i] != -1 && v[i] != -1) return false;
  return true;
}

// The sum of the gradient contributions of one value (null when none).
Value sum_grads(Builder& b, const std::vector<Value>& parts) {
  if (parts.empty()) return {};
  if (parts.size() == 1) return parts[0];
  if (is_tensor_array(parts[0].type())) {
    Value sum = parts[0];
    for (std::size_t i = 1; i < parts.size(); ++i) sum = b.create<ArrayAddOp>(sum, parts[i]).result();
    return sum;
  }
  return b.create<AddNOp>(parts).result();
}

// acc + part (arrays: kiln.array_add, in place on acc).
Value accumulate(Builder& b, Value acc, Value part) {
  if (is_tensor_array(acc.type())) return b.create<ArrayAddOp>(acc, part).result();
  return b.create<AddOp>(acc, part).result();
}

// What append_backward changed beyond appending ops, so that an error can
// undo it: a kiln.while on the path is replaced by one that also saves, per
// iteration, the values its gradient reads (while_vjp). Replaced ops are
// kept, detached, until the end, so no later op reuses their addresses
// while the walk's sets still name their values.
struct BackwardContext {
  struct Rewrite {
    Operation* old_op;               // detached, operands still linked
    Operation* new_op;               // in its place
    std::vector<Operation*> added;   // ops inserted before it
  };
  Block* top = nullptr;             // the loss's block
  Operation* mark = nullptr;        // its last op before the gradient ops
  std::vector<Rewrite> rewrites;    // of ops of `top`
  std::vector<Operation*> retired;  // replaced ops of nested blocks, references dropped

  void commit() {
    for (auto& r : rewrites) r.old_op->erase();
    for (Operation* op : retired) op->erase();
    rewrites.clear();
    retired.clear();
  }
  // Puts the replaced ops of `top` back (the gradient ops must have dropped
  // their references first).
  void undo() noexcept {
    for (auto it = rewrites.rbegin(); it != rewrites.rend(); ++it) {
      Block* block = it->new_op->parent_block();
      block->insert(it->new_op, it->old_op);
      for (std::uint32_t j = 0; j < it->old_op->num_results(); ++j)
        it->new_op->result(j).replace_all_uses_with(it->old_op->result(j));
      if (mark == it->new_op) mark = it->old_op;
      it->new_op->drop_all_references();
      block->erase(it->new_op);
      for (auto a = it->added.rbegin(); a != it->added.rend(); ++a) block->erase(*a);
    }
    rewrites.clear();
    for (Operation* op : retired) op->erase();
    retired.clear();
  }
};

using Contribs = std::unordered_map<Value, std::vector<Value>>;

// The ops of `ops` (program order) on a path to a value of `reaches`,
// reverse program order; `reaches` grows by the operands with a gradient.
// kiln::Error when such an op cannot be differentiated.
std::vector<Operation*> path_to(const std::vector<Operation*>& ops,
                                const std::unordered_set<Value>& requires_grad,
                                std::unordered_set<Value>& reaches) {
  std::vector<Operation*> path;
  for (auto it = ops.rbegin(); it != ops.rend(); ++it) {
    Operation* op = *it;
    bool out = false;
    for (std::uint32_t r = 0; r < op->num_results() && !out; ++r) out = reaches.count(op->result(r)) > 0;
    if (!out) continue;
    bool in = false;
    for (std::uint32_t i = 0; i < op->num_operands(); ++i) {
      Value v = op->operand_source(i);
      if (requires_grad.count(v)) {
        reaches.insert(v);
        in = true;
      }
    }
    if (!in) continue;
    // An in-place op overwrites an operand's variable when it runs, and the
    // grad ops appended after the forward pass would read the new contents
    // where they need the old (its producer's or other users' Vjps). PyTorch
    // and Paddle refuse this too ("modified by an inplace operation"). An
    // operand it overwrites that needs no gradient (batch_norm's running
    // statistics) is state, not part of the differentiated path.
    if (overwrites_grad_operand(op, requires_grad))
      throw_error(ErrorKind::Unimplemented, "append_backward: in-place op ", describe_op(op),
                  " is on the path from the parameters to the loss; it overwrites a value the "
                  "gradient needs — use its out-of-place form (e.g. kiln.relu for kiln.relu_)");
    if (!op->has_interface<VjpInterface>() && !op->isa<IfOp>() && !op->isa<WhileOp>())
      throw_error(ErrorKind::Unimplemented, "append_backward: op ", describe_op(op),
                  " is on the path from the parameters to the loss but has no Vjp "
                  "(VjpInterface) to build its gradient");
    path.push_back(op);
  }
  return path;
}

// Which values of `ops` have a gradient: those in `requires_grad` already,
// and every result of an op with such an operand, unless `cut`.
template <typename Cut>
void propagate_requires_grad(const std::vector<Operation*>& ops,
                             std::unordered_set<Value>& requires_grad, const Cut& cut) {
  for (Operation* op : ops) {
    bool any_in = false;
    for (std::uint32_t i = 0; i < op->num_operands() && !any_in; ++i)
      any_in = requires_grad.count(op->operand_source(i)) > 0;
    if (!any_in) continue;
    for (std::uint32_t r = 0; r < op->num_results(); ++r)
      if (!cut(op->result(r))) requires_grad.insert(op->result(r));
  }
}

void emit_path(Builder& b, const std::vector<Operation*>& path, Contribs& contribs,
               const std::unordered_set<Value>& requires_grad,
               const std::unordered_set<Value>& reaches, BackwardContext& ctx);

// The gradient of kiln.if with respect to its captures: a kiln.if on the same
// condition whose branches recompute the forward branch (its ops cloned)
// and run the backward walk over them from the out-grads. Recomputing
// instead of saving the branch's values leaves the forward op untouched.
std::vector<Value> if_vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads,
                          const std::unordered_set<Value>& requires_grad, BackwardContext& ctx) {
  IfOp fwd(op);
  const std::uint32_t ncap = fwd.num_captures();
  std::vector<Value> operands;  // of the grad if, after the condition
  for (std::uint32_t k = 0; k < ncap; ++k) operands.push_back(op->operand_source(1 + k));
  std::vector<std::uint32_t> seeded;  // results with an out-grad
  for (std::uint32_t j = 0; j < out_grads.size(); ++j)
    if (out_grads[j]) {
      seeded.push_back(j);
      operands.push_back(out_grads[j]);
    }
  std::vector<std::uint32_t> diff;  // captures that get a gradient
  for (std::uint32_t k = 0; k < ncap; ++k)
    if (requires_grad.count(op->operand_source(1 + k))) diff.push_back(k);
  std::vector<Value> in_grads(op->num_operands());
  if (diff.empty() || seeded.empty()) return in_grads;

  std::unique_ptr<Block> branch[2];
  std::vector<Type> yield_types[2];
  for (int r = 0; r < 2; ++r) {
    branch[r] = std::make_unique<Block>();
    Block& g = *branch[r];
    for (Value v : operands) g.add_argument(v.type());
    const Block& f = op->region(r).front();
    IrMapping map;
    for (std::uint32_t k = 0; k < ncap; ++k) map.map(f.argument(k), g.argument(k));
    std::vector<Operation*> cloned;
    Operation* fwd_yield = f.back();
    for (Operation* o : f) {
      if (o == fwd_yield) break;
      Operation* c = o->clone(map);
      g.push_back(c);
      cloned.push_back(c);
    }
    std::unordered_set<Value> req;
    for (std::uint32_t k : diff) req.insert(g.argument(k));
    propagate_requires_grad(cloned, req, [](Value v) { return !differentiable_type(v.type()); });
    Contribs contribs;
    std::unordered_set<Value> reaches;
    for (std::size_t s = 0; s < seeded.size(); ++s) {
      Value y = map.lookup_or_self(fwd_yield->operand_source(seeded[s]));
      if (!req.count(y)) continue;
      contribs[y].push_back(g.argument(ncap + static_cast<std::uint32_t>(s)));
      reaches.insert(y);
    }
    Builder gb(g);
    emit_path(gb, path_to(cloned, req, reaches), contribs, req, reaches, ctx);
    std::vector<Value> grads;
    for (std::uint32_t k : diff) {
      Value a = g.argument(k);
      auto it = contribs.find(a);
      Value gk = it == contribs.end() ? Value() : sum_grads(gb, it->second);
      if (!gk) gk = vjp::zeros(gb, a);
      grads.push_back(gk);
      yield_types[r].push_back(gk.type());
    }
    gb.create<YieldOp>(grads);
  }
  std::vector<Type> result_types;
  for (std::size_t i = 0; i < diff.size(); ++i) {
    Type t = join_types(yield_types[0][i], yield_types[1][i]);
    if (!t)
      throw_error(ErrorKind::Internal, "append_backward: the branches of ", describe_op(op),
                  " give capture #", diff[i], " gradients of types ", yield_types[0][i].to_string(),
                  " and ", yield_types[1][i].to_string());
    result_types.push_back(t);
  }
  auto grad = b.create<IfOp>(fwd.pred(), operands, result_types);
  for (int r = 0; r < 2; ++r) grad->region(r).push_back(branch[r].release());
  grad->verify();
  for (std::size_t i = 0; i < diff.size(); ++i) in_grads[1 + diff[i]] = grad->result(static_cast<std::uint32_t>(i));
  return in_grads;
}

// The body of the saving forward loop: `body`'s ops cloned, with arguments
// (carried..., counter, arrays..., captures...) typed by `types` then the
// captures', and after each value of `values` is defined (an argument: as
// the iteration starts) a write of it into its array at the counter; it
// yields the old body's values, counter + 1 and the arrays.
std::unique_ptr<Block> saving_body(const Block& body, std::uint32_t n, std::uint32_t ncap,
                                   const std::vector<Type>& types,
                                   const std::vector<Value>& values) {
  auto nb = std::make_unique<Block>();
  IrMapping map;
  for (Type t : types) nb->add_argument(t);
  for (std::uint32_t j = 0; j < n; ++j) map.map(body.argument(j), nb->argument(j));
  for (std::uint32_t k = 0; k < ncap; ++k)
    map.map(body.argument(n + k), nb->add_argument(body.argument(n + k).type()));
  Value counter = nb->argument(n);
  std::vector<Value> arrays;
  for (std::uint32_t s = 0; s < values.size(); ++s) arrays.push_back(nb->argument(n + 1 + s));
  Builder nbb(*nb);
  auto save_defined_by = [&](Operation* def) {
    for (std::size_t s = 0; s < values.size(); ++s)
      if (values[s].defining_op() == def)
        arrays[s] = nbb.create<ArrayWriteOp>(arrays[s], counter, map.lookup(values[s])).result();
  };
  save_defined_by(nullptr);  // the body's arguments, as the iteration starts
  Operation* yield = body.back();
  for (Operation* o : body) {
    if (o == yield) break;
    nb->push_back(o->clone(map));
    save_defined_by(o);
  }
  std::vector<Value> next;
  for (std::uint32_t i = 0; i < yield->num_operands(); ++i)
    next.push_back(map.lookup_or_self(yield->operand_source(i)));
  next.push_back(nbb.create<ScaleOp>(counter, 1.0, 1.0).result());
  next.insert(next.end(), arrays.begin(), arrays.end());
  nbb.create<YieldOp>(next);
  return nb;
}

// Replaces kiln.while `op` by one that also carries a counter and, for
// each of `values` (of its body), an array that gets the value's tensor of
// every iteration at that iteration's index (Paddle's per-iteration stack).
// Returns the new op: results = op's, then the iteration count, then the
// arrays in the order of `values`.
Operation* save_in_forward(Operation* op, const std::vector<Value>& values, BackwardContext& ctx) {
  WhileOp fwd(op);
  const std::uint32_t n = fwd.num_carried(), ncap = fwd.num_captures();
  Block* block = op->parent_block();
  Builder pb(*block);
  pb.set_insertion_point(op);
  for (Value v : values)
    if (!is_shaped(v.type()))
      throw_error(ErrorKind::Unimplemented, "append_backward: the gradient of ", describe_op(op),
                  " reads a ", v.type().to_string(), " of its body, which cannot be saved per "
                  "iteration");
  std::vector<Operation*> added;
  Operation* nw = nullptr;
  try {
    std::vector<Value> inits;
    std::vector<Type> types;
    for (std::uint32_t j = 0; j < n; ++j) {
      inits.push_back(op->operand_source(1 + j));
      types.push_back(op->result_type(j));
    }
    inits.push_back(pb.create<FullOp>(std::vector<std::int64_t>{1}, 0.0, DataType::Int64).result());
    for (Value v : values)
      inits.push_back(
          pb.create<ArrayCreateOp>(shaped_data_type(v.type()), shaped_dims(v.type())).result());
    for (std::size_t i = n; i < inits.size(); ++i) {
      types.push_back(inits[i].type());
      added.push_back(inits[i].defining_op());
    }
    std::vector<Value> captures;
    for (std::uint32_t k = 0; k < ncap; ++k) captures.push_back(op->operand_source(1 + n + k));
    nw = pb.create<WhileOp>(fwd.cond(), inits, captures, fwd.attrs().max_iterations, types);
    for (const auto& [k, v] : op->attributes()) nw->set_attribute(k, v);
    nw->region(0).push_back(saving_body(fwd.body_region().front(), n, ncap, types, values).release());
    nw->verify();
  } catch (...) {
    if (nw) block->erase(nw);
    for (auto a = added.rbegin(); a != added.rend(); ++a) block->erase(*a);
    throw;
  }
  for (std::uint32_t j = 0; j < n; ++j) op->result(j).replace_all_uses_with(nw->result(j));
  block->take(op);
  if (block == ctx.top) {
    ctx.rewrites.push_back({op, nw, std::move(added)});
    if (ctx.mark == op) ctx.mark = nw;
  } else {
    op->drop_all_references();
    ctx.retired.push_back(op);
  }
  return nw;
}

// Which carried values (indices) and captures (indices among them) of a
// while carry gradients: a fixpoint, since a carried value may get its
// gradient from another one (or a capture) through the body.
struct WhileGradients {
  std::vector<std::uint32_t> carried, captures;
};
WhileGradients while_gradients(WhileOp fwd, const std::unordered_set<Value>& requires_grad) {
  const std::uint32_t n = fwd.num_carried(), ncap = fwd.num_captures();
  const Block& f = fwd.body_region().front();
  Operation* fwd_yield = f.back();
  std::vector<Operation*> body_ops;
  for (Operation* o : f)
    if (o != fwd_yield) body_ops.push_back(o);
  auto cut = [](Value v) { return !differentiable_type(v.type()); };
  WhileGradients w;
  std::vector<bool> carries(n, false);
  for (std::uint32_t j = 0; j < n; ++j)
    carries[j] = requires_grad.count(fwd.operation()->operand_source(1 + j)) && !cut(f.argument(j));
  for (std::uint32_t k = 0; k < ncap; ++k)
    if (requires_grad.count(fwd.operation()->operand_source(1 + n + k)) && !cut(f.argument(n + k)))
      w.captures.push_back(k);
  for (bool changed = true; changed;) {
    changed = false;
    std::unordered_set<Value> req;
    for (std::uint32_t j = 0; j < n; ++j)
      if (carries[j]) req.insert(f.argument(j));
    for (std::uint32_t k : w.captures) req.insert(f.argument(n + k));
    propagate_requires_grad(body_ops, req, cut);
    for (std::uint32_t j = 0; j < n; ++j)
      if (!carries[j] && req.count(fwd_yield->operand_source(1 + j)) && !cut(f.argument(j)))
        carries[j] = changed = true;
  }
  for (std::uint32_t j = 0; j < n; ++j)
    if (carries[j]) w.carried.push_back(j);
  return w;
}

// The gradient loop's body while it is built: arguments (k, dcarried...,
// acc..., captures..., x...), x being the forward carried values (replaced
// by saved copies, then erased); `feeds` = what the loop passes to each
// (null for k, dcarried, acc and x); the clones of the forward body's ops,
// and the forward value each clone's value (or x) stands for.
struct GradBody {
  std::unique_ptr<Block> block;
  std::vector<Value> feeds;
  std::unordered_set<Operation*> cloned;
  std::unordered_map<Value, Value> forward_of;
  std::uint32_t cap0 = 0, x0 = 0;
};

// The body of the gradient loop: the forward body cloned and walked
// backward from the carried gradients; yields (k-1 >= 0, k-1, the carried
// values' gradients, the accumulators plus this iteration's capture
// gradients).
GradBody grad_body(WhileOp fwd, const WhileGradients& w, BackwardContext& ctx) {
  Operation* op = fwd.operation();
  const std::uint32_t n = fwd.num_carried(), ncap = fwd.num_captures();
  const Block& f = fwd.body_region().front();
  Operation* fwd_yield = f.back();
  GradBody gb;
  gb.block = std::make_unique<Block>();
  Block& g = *gb.block;
  Value k = g.add_argument(TensorType::get(DataType::Int64, {1}));
  for (std::uint32_t j : w.carried) g.add_argument(op->result_type(j));
  for (std::uint32_t c : w.captures) g.add_argument(f.argument(n + c).type());
  gb.feeds.resize(g.num_arguments());
  gb.cap0 = g.num_arguments();
  for (std::uint32_t c = 0; c < ncap; ++c) {
    g.add_argument(f.argument(n + c).type());
    gb.feeds.push_back(op->operand_source(1 + n + c));
  }
  gb.x0 = g.num_arguments();
  IrMapping map;
  for (std::uint32_t j = 0; j < n; ++j) {
    Value x = g.add_argument(f.argument(j).type());
    gb.feeds.emplace_back();
    map.map(f.argument(j), x);
    gb.forward_of[x] = f.argument(j);
  }
  for (std::uint32_t c = 0; c < ncap; ++c) map.map(f.argument(n + c), g.argument(gb.cap0 + c));
  std::vector<Operation*> cloned_order;
  for (Operation* o : f) {
    if (o == fwd_yield) break;
    Operation* c = o->clone(map);
    g.push_back(c);
    gb.cloned.insert(c);
    cloned_order.push_back(c);
    for (std::uint32_t r = 0; r < o->num_results(); ++r) gb.forward_of[c->result(r)] = o->result(r);
  }
  std::unordered_set<Value> req;
  for (std::uint32_t j : w.carried) req.insert(g.argument(gb.x0 + j));
  for (std::uint32_t c : w.captures) req.insert(g.argument(gb.cap0 + c));
  propagate_requires_grad(cloned_order, req, [](Value v) { return !differentiable_type(v.type()); });
  Contribs contribs;
  std::unordered_set<Value> reaches;
  for (std::size_t i = 0; i < w.carried.size(); ++i) {
    Value y = map.lookup_or_self(fwd_yield->operand_source(1 + w.carried[i]));
    if (!req.count(y)) continue;
    contribs[y].push_back(g.argument(1 + static_cast<std::uint32_t>(i)));
    reaches.insert(y);
  }
  Builder b(g);
  emit_path(b, path_to(cloned_order, req, reaches), contribs, req, reaches, ctx);
  std::vector<Value> next;
  Value zero = b.create<FullOp>(std::vector<std::int64_t>{1}, 0.0, DataType::Int64).result();
  Value k_next = b.create<ScaleOp>(k, 1.0, -1.0).result();
  next.push_back(b.create<GreaterEqualOp>(k_next, zero).result());
  next.push_back(k_next);
  auto grad_of = [&](Value v) {
    auto it = contribs.find(v);
    return it == contribs.end() ? Value() : sum_grads(b, it->second);
  };
  for (std::uint32_t j : w.carried) {
    Value x = g.argument(gb.x0 + j);
    Value gx = grad_of(x);
    next.push_back(gx ? gx : vjp::zeros(b, x));
  }
  for (std::size_t i = 0; i < w.captures.size(); ++i) {
    Value acc = g.argument(1 + static_cast<std::uint32_t>(w.carried.size() + i));
    Value part = grad_of(g.argument(gb.cap0 + w.captures[i]));
    next.push_back(part ? accumulate(b, acc, part) : acc);
  }
  b.create<YieldOp>(next);
  return gb;
}

// Makes the forward loop save what the gradient ops of `gb` read of the
// clones (or of x), reads those back at k instead, and erases the clones,
// the x arguments and the captures nothing reads. Returns the new forward op.
Operation* read_saved_values(GradBody& gb, Operation* op, BackwardContext& ctx) {
  Block& g = *gb.block;
  const std::uint32_t n = WhileOp(op).num_carried(), ncap = WhileOp(op).num_captures();
  std::vector<Value> saved;  // values of g
  std::unordered_set<Value> seen;
  for (Operation* o : g) {
    if (gb.cloned.count(o)) continue;
    for (std::uint32_t i = 0; i < o->num_operands(); ++i) {
      Value v = o->operand_source(i);
      if (gb.forward_of.count(v) && seen.insert(v).second) saved.push_back(v);
    }
  }
  std::vector<Value> forward_values;
  for (Value v : saved) forward_values.push_back(gb.forward_of.at(v));
  Operation* nw = save_in_forward(op, forward_values, ctx);

  Builder b(g);
  b.set_insertion_point(g.front());
  for (std::size_t s = 0; s < saved.size(); ++s) {
    Value array = nw->result(n + 1 + static_cast<std::uint32_t>(s));
    gb.feeds.push_back(array);
    Value r = b.create<ArrayReadOp>(g.add_argument(array.type()), g.argument(0)).result();
    saved[s].replace_uses_if(r, [&](OpOperand u) { return !gb.cloned.count(u.owner()); });
  }
  for (Operation* o = g.back(); o;) {
    Operation* prev = o->prev_in_block();
    if (gb.cloned.count(o)) g.erase(o);
    o = prev;
  }
  for (std::uint32_t j = n; j-- > 0;) {
    g.erase_argument(gb.x0 + j);
    gb.feeds.erase(gb.feeds.begin() + gb.x0 + j);
  }
  for (std::uint32_t c = ncap; c-- > 0;)
    if (g.argument(gb.cap0 + c).use_empty()) {
      g.erase_argument(gb.cap0 + c);
      gb.feeds.erase(gb.feeds.begin() + gb.cap0 + c);
    }
  return nw;
}

// The gradient of kiln.while (seed 001 §1: the backward of a sub-block is a
// grad block of its own), Paddle's way: the forward loop saves, per
// iteration, the body values the body's gradient reads (save_in_forward);
// a second loop runs the body's gradient for k = n-1 … 0, reading them
// back at k. Its carried values are k, the gradients of the carried values
// (from the out-grads; after zero iterations they pass through) and one
// accumulator per capture that needs a gradient (summed over iterations).
//
// The gradient body is built by cloning the forward body, walking it
// backward, then replacing every cloned value a gradient op reads by its
// saved copy and erasing the clones.
std::vector<Value> while_vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads,
                             const std::unordered_set<Value>& requires_grad, BackwardContext& ctx) {
  WhileOp fwd(op);
  const std::uint32_t n = fwd.num_carried();
  std::vector<Value> in_grads(op->num_operands());
  const WhileGradients w = while_gradients(fwd, requires_grad);
  if (std::none_of(w.carried.begin(), w.carried.end(),
                   [&](std::uint32_t j) { return bool(out_grads[j]); }))
    return in_grads;
  // (save_in_forward replaces op: read what is needed of it before.)
  std::vector<Value> captures_with_grad;
  std::vector<Type> types{TensorType::get(DataType::Int64, {1})};
  for (std::uint32_t j : w.carried) types.push_back(op->result_type(j));
  for (std::uint32_t c : w.captures) {
    captures_with_grad.push_back(op->operand_source(1 + n + c));
    types.push_back(captures_with_grad.back().type());
  }
  GradBody gb = grad_body(fwd, w, ctx);
  Operation* nw = read_saved_values(gb, op, ctx);

  // The gradient loop, after the forward one: k from n-1 down to 0.
  Value k0 = b.create<ScaleOp>(nw->result(n), 1.0, -1.0).result();
  Value zero = b.create<FullOp>(std::vector<std::int64_t>{1}, 0.0, DataType::Int64).result();
  Value cond0 = b.create<GreaterEqualOp>(k0, zero).result();
  std::vector<Value> inits{k0};
  for (std::uint32_t j : w.carried)
    inits.push_back(out_grads[j] ? out_grads[j] : vjp::zeros(b, nw->result(j)));
  for (Value c : captures_with_grad) inits.push_back(vjp::zeros(b, c));
  std::vector<Value> captures(gb.feeds.begin() + static_cast<std::ptrdiff_t>(inits.size()),
                              gb.feeds.end());
  Operation* grad = b.create<WhileOp>(cond0, inits, captures, -1, types);
  grad->region(0).push_back(gb.block.release());
  grad->verify();
  for (std::size_t i = 0; i < w.carried.size(); ++i)
    in_grads[1 + w.carried[i]] = grad->result(1 + static_cast<std::uint32_t>(i));
  for (std::size_t i = 0; i < w.captures.size(); ++i)
    in_grads[1 + n + w.captures[i]] =
        grad->result(1 + static_cast<std::uint32_t>(w.carried.size() + i));
  return in_grads;
}

// The reverse walk: for each op of `path`, its out-grads (the sums of the
// contributions to its results) give, through its Vjp, contributions to its
// operands.
void emit_path(Builder& b, const std::vector<Operation*>& path, Contribs& contribs,
               const std::unordered_set<Value>& requires_grad,
               const std::unordered_set<Value>& reaches, BackwardContext& ctx) {
  for (Operation* op : path) {
    std::vector<Value> out_grads(op->num_results());
    bool any = false;
    for (std::uint32_t r = 0; r < op->num_results(); ++r) {
      auto it = contribs.find(op->result(r));
      if (it == contribs.end()) continue;
      out_grads[r] = sum_grads(b, it->second);
      contribs.erase(it);
      any = any || out_grads[r];
    }
    if (!any) continue;
    // (while_vjp replaces op, which may then drop its operands: read them first.)
    const std::vector<Value> operands = op->operands();
    std::vector<Value> in_grads =
        op->isa<IfOp>()      ? if_vjp(b, op, out_grads, requires_grad, ctx)
        : op->isa<WhileOp>() ? while_vjp(b, op, out_grads, requires_grad, ctx)
                             : op->dyn_cast<VjpInterface>().vjp(b, out_grads);
    if (in_grads.size() != op->num_operands())
      throw_error(ErrorKind::Internal, "append_backward: the Vjp of op ", describe_op(op),
                  " returned ", in_grads.size(), " gradients for ", op->num_operands(),
                  " operands");
    for (std::uint32_t i = 0; i < operands.size(); ++i) {
      Value x = operands[i];
      if (!in_grads[i] || !requires_grad.count(x) || !reaches.count(x)) continue;
      if (!compatible(in_grads[i].type(), x.type()))
        throw_error(ErrorKind::Internal, "append_backward: the Vjp of op ", describe_op(op),
                    " gave operand #", i, " (", x.type().to_string(), ") a gradient of type ",
                    in_grads[i].type().to_string());
      contribs[x].push_back(in_grads[i]);
    }
  }
}

// Throws kiln::Error unless `loss` is the result of an op in a block and a
// floating-point tensor of one element.
void check_backward_loss(Value loss) {
  if (!loss) throw_error(ErrorKind::InvalidArgument, "append_backward: the loss is a null value");
  Operation* loss_op = loss.defining_op();
  if (!loss_op || !loss_op->parent_block())
    throw_error(ErrorKind::InvalidArgument,
                "append_backward: the loss must be the result of an op in a block");
  const Type lt = loss.type();
  if (!is_floating_tensor(lt))
    throw_error(ErrorKind::InvalidArgument, "append_backward: the loss (result of ",
                describe_op(loss_op), ") must be a floating-point tensor, got ", lt.to_string());
  std::int64_t n = 1;
  for (auto d : shaped_dims(lt)) n = d < 0 ? -1 : n * d;
  if (n != 1)
    throw_error(ErrorKind::InvalidArgument, "append_backward: the loss (result of ",
                describe_op(loss_op), ") must be a scalar or hold one element, got ",
                lt.to_string(), " (reduce it, e.g. with kiln.mean)");
}

// Throws kiln::Error unless every parameter is a value of `block`.
void check_backward_parameters(const std::vector<Value>& parameters, const Block& block) {
  for (Value p : parameters) {
    if (!p) throw_error(ErrorKind::InvalidArgument, "append_backward: a parameter is a null value");
    if (block_of(p) != &block)
      throw_error(ErrorKind::InvalidArgument, "append_backward: parameter ",
                  parameter_name(p).empty() ? std::string("value") : "'" + parameter_name(p) + "'",
                  " is not in the loss's block");
  }
}

// The ops of `block` up to and including `last`, in program order.
std::vector<Operation*> ops_up_to(Block& block, Operation* last) {
  std::vector<Operation*> ops;
  for (Operation* op : block) {
    ops.push_back(op);
    if (op == last) break;
  }
  return ops;
}

// Which values of `block` (its arguments and the results of `ops`) have a
// gradient: the sources, and every result of an op with such an operand;
// minus stop_gradient, `no_grad_set` and non-floats. The sources are
// `parameters`, or when there are none the results of parameter and data ops.
std::unordered_set<Value> values_requiring_grad(const Block& block,
                                                const std::vector<Operation*>& ops,
                                                const std::vector<Value>& parameters,
                                                const std::vector<Value>& no_grad_set) {
  const std::unordered_set<Value> cut_set(no_grad_set.begin(), no_grad_set.end());
  const std::unordered_set<Value> explicit_sources(parameters.begin(), parameters.end());
  auto cut = [&](Value v) {
    return cut_set.count(v) || stop_gradient(v) || !differentiable_type(v.type());
  };
  std::unordered_set<Value> requires_grad;
  for (Value a : block.arguments())
    if (explicit_sources.count(a) && !cut(a)) requires_grad.insert(a);
  for (Operation* op : ops) {
    bool any_in = false;
    for (std::uint32_t i = 0; i < op->num_operands() && !any_in; ++i)
      any_in = requires_grad.count(op->operand_source(i)) > 0;
    for (std::uint32_t r = 0; r < op->num_results(); ++r) {
      Value v = op->result(r);
      // Default sources: parameters and data values (constants and random
      // ops never are); cut() drops the stop_gradient ones.
      const bool source = parameters.empty() ? op->isa<ParameterOp>() || op->isa<DataOp>()
                                             : explicit_sources.count(v) > 0;
      if ((source || any_in) && !cut(v)) requires_grad.insert(v);
    }
  }
  return requires_grad;
}

// The parameters whose gradients are returned: `parameters`, or when there
// are none the result of every parameter op of `ops` not marked stop_gradient.
std::vector<Value> returned_parameters(const std::vector<Operation*>& ops,
                                       const std::vector<Value>& parameters) {
  if (!parameters.empty()) return parameters;
  std::vector<Value> wanted;
  for (Operation* op : ops)
    if (op->isa<ParameterOp>() && !stop_gradient(op->result(0))) wanted.push_back(op->result(0));
  return wanted;
}

// The (parameter, gradient) pairs of `wanted`, in its order without repeats,
// for those with a gradient; each gradient is the sum of the parameter's
// contributions, and replaces them in `contribs`.
std::vector<std::pair<Value, Value>> sum_parameter_grads(
    Builder& b, const std::vector<Value>& wanted, Contribs& contribs,
    const std::unordered_set<Value>& requires_grad) {
  std::vector<std::pair<Value, Value>> result;
  std::unordered_set<Value> seen;
  for (Value p : wanted) {
    if (!seen.insert(p).second) continue;
    auto it = contribs.find(p);
    if (it == contribs.end() || !requires_grad.count(p)) continue;
    Value g = sum_grads(b, it->second);
    it->second = {g};
    result.emplace_back(p, g);
  }
  return result;
}

// Removes the grad ops after `mark` that nobody reads (gradients of inputs
// that need none): those without side effects whose results have no use and
// are none of the gradients of `result`.
void erase_unread_grad_ops(Block& block, Operation* mark,
                           const std::vector<std::pair<Value, Value>>& result) {
  std::unordered_set<Value> keep;
  for (auto& [p, g] : result) keep.insert(g);
  for (Operation* op = block.back(); op && op != mark;) {
    Operation* prev = op->prev_in_block();
    bool dead = !op->has_trait<SideEffect>();
    for (std::uint32_t r = 0; r < op->num_results() && dead; ++r)
      dead = op->result(r).use_empty() && !keep.count(op->result(r));
    if (dead) block.erase(op);
    op = prev;
  }
}

// Erases the grad ops appended after ctx.mark and puts back the ops they
// replaced, leaving `block` as it was before append_backward.
void undo_backward(Block& block, BackwardContext& ctx) {
  for (Operation* op = block.back(); op && op != ctx.mark;) {
    Operation* prev = op->prev_in_block();
    op->drop_all_references();
    op = prev;
  }
  ctx.undo();
  while (block.back() != ctx.mark) block.erase(block.back());
}

// Appends to `block` the gradient ops of `path`, from a gradient of 1 for
// `loss`, and returns the gradients of `wanted`; on any error it rolls
// `block` back and rethrows.
std::vector<std::pair<Value, Value>> emit_backward(Block& block, Value loss,
                                                   const std::vector<Operation*>& path,
                                                   const std::unordered_set<Value>& requires_grad,
                                                   const std::unordered_set<Value>& reaches,
                                                   const std::vector<Value>& wanted) {
  BackwardContext ctx;
  ctx.top = &block;
  ctx.mark = block.back();
  Builder b(block);
  const Type lt = loss.type();
  try {
    Contribs contribs;
    contribs[loss].push_back(
        b.create<FullOp>(shaped_dims(lt), 1.0, shaped_data_type(lt)).result());
    emit_path(b, path, contribs, requires_grad, reaches, ctx);
    std::vector<std::pair<Value, Value>> result =
        sum_parameter_grads(b, wanted, contribs, requires_grad);
    erase_unread_grad_ops(block, ctx.mark, result);
    set_op_role_after(block, ctx.mark, OpRole::Backward);
    ctx.commit();
    return result;
  } catch (...) {
    undo_backward(block, ctx);
    throw;
  }
}

}  // namespace

std::vector<std::pair<Value, Value>> append_backward(Value loss,
                                                     const std::vector<Value>& parameters,
                                                     const std::vector<Value>& no_grad_set) {
  check_backward_loss(loss);
  Operation* loss_op = loss.defining_op();
  Block& block = *loss_op->parent_block();
  check_backward_parameters(parameters, block);

  // 1. Which values have a gradient.
  const std::vector<Operation*> ops = ops_up_to(block, loss_op);
  const std::unordered_set<Value> requires_grad =
      values_requiring_grad(block, ops, parameters, no_grad_set);
  if (!requires_grad.count(loss)) return {};

  // 2. Which of them lead to the loss; the ops on a path are those with a
  // result that does and an operand with a gradient.
  std::unordered_set<Value> reaches{loss};
  const std::vector<Operation*> path = path_to(ops, requires_grad, reaches);

  // 3. Emit, rolling back on any error.
  return emit_backward(block, loss, path, requires_grad, reaches,
                       returned_parameters(ops, parameters));
}

}  // namespace kiln

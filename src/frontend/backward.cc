// append_backward (include/kiln/frontend/backward.h), seed 001 §1.2.2.1:
// requires-grad forward, reaches-loss backward, then one reverse walk over
// the ops on a path calling each one's Vjp, summing gradients with add_n.
#include <algorithm>
#include <memory>
#include <unordered_map>
#include <unordered_set>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/ir/ir_mapping.h"
#include "kiln/frontend/backward.h"
#include "kiln/frontend/op_role.h"
#include "kiln/frontend/parameter.h"
#include "kiln/frontend/stop_gradient.h"

namespace kiln {

namespace {

// Whether in-place `op` overwrites an operand that carries a gradient.
bool overwrites_grad_operand(Operation* op, const std::unordered_set<Value>& requires_grad) {
  if (!op->has_trait<Inplace>()) return false;
  for (const auto& [out, in] : op->info().impl()->inplace_map)
    if (requires_grad.count(op->operand_source(in))) return true;
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
  return b.create<AddNOp>(parts).result();
}

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
    if (!op->has_interface<VjpInterface>() && !op->isa<IfOp>())
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
               const std::unordered_set<Value>& reaches);

// The gradient of kiln.if with respect to its captures: a kiln.if on the same
// condition whose branches recompute the forward branch (its ops cloned)
// and run the backward walk over them from the out-grads. Recomputing
// instead of saving the branch's values leaves the forward op untouched.
std::vector<Value> if_vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads,
                          const std::unordered_set<Value>& requires_grad) {
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
    propagate_requires_grad(cloned, req, [](Value v) { return !is_floating_tensor(v.type()); });
    Contribs contribs;
    std::unordered_set<Value> reaches;
    for (std::size_t s = 0; s < seeded.size(); ++s) {
      Value y = map.lookup_or_self(fwd_yield->operand_source(seeded[s]));
      if (!req.count(y)) continue;
      contribs[y].push_back(g.argument(ncap + static_cast<std::uint32_t>(s)));
      reaches.insert(y);
    }
    Builder gb(g);
    emit_path(gb, path_to(cloned, req, reaches), contribs, req, reaches);
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

// The reverse walk: for each op of `path`, its out-grads (the sums of the
// contributions to its results) give, through its Vjp, contributions to its
// operands.
void emit_path(Builder& b, const std::vector<Operation*>& path, Contribs& contribs,
               const std::unordered_set<Value>& requires_grad,
               const std::unordered_set<Value>& reaches) {
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
    std::vector<Value> in_grads = op->isa<IfOp>() ? if_vjp(b, op, out_grads, requires_grad)
                                                  : op->dyn_cast<VjpInterface>().vjp(b, out_grads);
    if (in_grads.size() != op->num_operands())
      throw_error(ErrorKind::Internal, "append_backward: the Vjp of op ", describe_op(op),
                  " returned ", in_grads.size(), " gradients for ", op->num_operands(),
                  " operands");
    for (std::uint32_t i = 0; i < op->num_operands(); ++i) {
      Value x = op->operand_source(i);
      if (!in_grads[i] || !requires_grad.count(x) || !reaches.count(x)) continue;
      if (!compatible(in_grads[i].type(), x.type()))
        throw_error(ErrorKind::Internal, "append_backward: the Vjp of op ", describe_op(op),
                    " gave operand #", i, " (", x.type().to_string(), ") a gradient of type ",
                    in_grads[i].type().to_string());
      contribs[x].push_back(in_grads[i]);
    }
  }
}

}  // namespace

std::vector<std::pair<Value, Value>> append_backward(Value loss,
                                                     const std::vector<Value>& parameters,
                                                     const std::vector<Value>& no_grad_set) {
  if (!loss) throw_error(ErrorKind::InvalidArgument, "append_backward: the loss is a null value");
  Operation* loss_op = loss.defining_op();
  if (!loss_op || !loss_op->parent_block())
    throw_error(ErrorKind::InvalidArgument,
                "append_backward: the loss must be the result of an op in a block");
  const Type lt = loss.type();
  if (!is_floating_tensor(lt))
    throw_error(ErrorKind::InvalidArgument, "append_backward: the loss (result of ",
                describe_op(loss_op), ") must be a floating-point tensor, got ", lt.to_string());
  {
    std::int64_t n = 1;
    for (auto d : shaped_dims(lt)) n = d < 0 ? -1 : n * d;
    if (n != 1)
      throw_error(ErrorKind::InvalidArgument, "append_backward: the loss (result of ",
                  describe_op(loss_op), ") must be a scalar or hold one element, got ",
                  lt.to_string(), " (reduce it, e.g. with kiln.mean)");
  }
  Block& block = *loss_op->parent_block();
  for (Value p : parameters) {
    if (!p) throw_error(ErrorKind::InvalidArgument, "append_backward: a parameter is a null value");
    if (block_of(p) != &block)
      throw_error(ErrorKind::InvalidArgument, "append_backward: parameter ",
                  parameter_name(p).empty() ? std::string("value") : "'" + parameter_name(p) + "'",
                  " is not in the loss's block");
  }

  // 1. Which values have a gradient: the sources, and every result of an op
  // with such an operand; minus stop_gradient, no_grad_set and non-floats.
  const std::unordered_set<Value> cut_set(no_grad_set.begin(), no_grad_set.end());
  const std::unordered_set<Value> explicit_sources(parameters.begin(), parameters.end());
  auto cut = [&](Value v) {
    return cut_set.count(v) || stop_gradient(v) || !is_floating_tensor(v.type());
  };
  std::unordered_set<Value> requires_grad;
  for (Value a : block.arguments())
    if (explicit_sources.count(a) && !cut(a)) requires_grad.insert(a);
  std::vector<Operation*> ops;  // the block's ops up to the loss's
  for (Operation* op : block) {
    ops.push_back(op);
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
    if (op == loss_op) break;
  }
  if (!requires_grad.count(loss)) return {};

  // 2. Which of them lead to the loss; the ops on a path are those with a
  // result that does and an operand with a gradient.
  std::unordered_set<Value> reaches{loss};
  const std::vector<Operation*> path = path_to(ops, requires_grad, reaches);

  // The parameters whose gradients are returned.
  std::vector<Value> wanted;
  if (parameters.empty()) {
    for (Operation* op : ops)
      if (op->isa<ParameterOp>() && !stop_gradient(op->result(0))) wanted.push_back(op->result(0));
  } else {
    wanted = parameters;
  }

  // 3. Emit, rolling back on any error.
  Operation* mark = block.back();
  Builder b(block);
  std::vector<std::pair<Value, Value>> result;
  try {
    Contribs contribs;
    contribs[loss].push_back(
        b.create<FullOp>(shaped_dims(lt), 1.0, shaped_data_type(lt)).result());
    emit_path(b, path, contribs, requires_grad, reaches);
    std::unordered_set<Value> seen;
    for (Value p : wanted) {
      if (!seen.insert(p).second) continue;
      auto it = contribs.find(p);
      if (it == contribs.end() || !requires_grad.count(p)) continue;
      Value g = sum_grads(b, it->second);
      it->second = {g};
      result.emplace_back(p, g);
    }
    // 4. Remove the grad ops nobody reads (gradients of inputs that need none).
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
    set_op_role_after(block, mark, OpRole::Backward);
  } catch (...) {
    for (Operation* op = block.back(); op && op != mark;) {
      Operation* prev = op->prev_in_block();
      op->drop_all_references();
      op = prev;
    }
    while (block.back() != mark) block.erase(block.back());
    throw;
  }
  return result;
}

}  // namespace kiln

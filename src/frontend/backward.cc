// append_backward (include/kiln/frontend/backward.h), seed 001 §1.2.2.1:
// requires-grad forward, reaches-loss backward, then one reverse walk over
// the ops on a path calling each one's Vjp, summing gradients with add_n.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "kiln/dialect/kiln_dialect.h"
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
  std::vector<Operation*> path;  // reverse program order
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
    if (!op->has_interface<VjpInterface>())
      throw_error(ErrorKind::Unimplemented, "append_backward: op ", describe_op(op),
                  " is on the path from the parameters to the loss but has no Vjp "
                  "(VjpInterface) to build its gradient");
    path.push_back(op);
  }

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
    std::unordered_map<Value, std::vector<Value>> contribs;
    contribs[loss].push_back(
        b.create<FullOp>(shaped_dims(lt), 1.0, shaped_data_type(lt)).result());
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
      std::vector<Value> in_grads = op->dyn_cast<VjpInterface>().vjp(b, out_grads);
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

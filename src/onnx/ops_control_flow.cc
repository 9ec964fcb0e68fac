// ONNX's control flow → kiln's structured ops (kiln/dialect/control_flow_ops.h):
//   If   → kiln.if, its branches imported into the two regions;
//   Loop → kiln.while carrying (iteration, cond, values…, scan arrays…): the
//          trip count M and the condition combine into the while's
//          condition; scan outputs are written to tensor arrays at the
//          iteration number and stacked after the loop;
//   Scan → kiln.while over the scan inputs' slices (array_from_tensor, read
//          at i or, reversed, at n-1-i), scan outputs stacked likewise;
//          opset 8's batch form for a batch of one.
// Subgraphs read outer values directly; capture_external_values turns those
// into the ops' captures. A loop-carried value whose dims change across
// iterations is imported again with -1 there.
#include <memory>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/frontend/capture.h"
#include "op_table.h"

namespace kiln::onnx::detail {

namespace {

const ::onnx::GraphProto& graph_attr(NodeContext& c, const std::string& name) {
  const auto* a = c.attribute(name);
  if (!a || !a->has_g()) c.unsupported("no subgraph attribute '" + name + "'");
  return a->g();
}

Value scalar(Builder& b, DataType dt, double v) {
  return b.create<FullOp>(std::vector<std::int64_t>{}, v, dt).result();
}

// A one-element tensor as a 0-d one (ONNX conditions and counts come as []
// or [1]).
Value as_scalar(Builder& b, Value v) {
  if (shaped_dims(v.type()).empty()) return v;
  return b.create<ReshapeOp>(v, std::vector<std::int64_t>{}).result();
}

// Widens types[offset + j] to fit outs[j] (j < n) where a body's output does
// not fit its carried value; whether any changed. kiln::Error (via c) when
// dtype or rank differ.
bool join_carried_types(NodeContext& c, std::vector<Type>& types, std::size_t offset,
                        const std::vector<Value>& outs, std::size_t first_out, std::size_t n,
                        const std::string& what) {
  bool changed = false;
  for (std::size_t j = 0; j < n; ++j) {
    Type& t = types[offset + j];
    Type got = outs[first_out + j].type();
    if (type_fits(got, t)) continue;
    Type joined = join_types(t, got);
    if (!joined)
      c.unsupported(what + " #" + std::to_string(j) + " is " + t.to_string() + " but the body gives " +
                    got.to_string());
    t = joined;
    changed = true;
  }
  return changed;
}

// One empty array (before the loop) and one body argument per scan output
// outs[first .. first + k).
void scan_output_arrays(NodeContext& c, Block& body, const std::vector<Value>& outs, std::size_t first,
                        std::size_t k, std::vector<Value>& arrays, std::vector<Value>& array_args) {
  for (std::size_t s = 0; s < k; ++s) {
    Type et = outs[first + s].type();
    Value a = c.b.create<ArrayCreateOp>(shaped_data_type(et), shaped_dims(et)).result();
    arrays.push_back(a);
    array_args.push_back(body.add_argument(a.type()));
  }
}

// The while op over `carried` (types, then the arrays'), its body moved in.
WhileOp build_while(NodeContext& c, Value c0, std::vector<Value> carried, const std::vector<Value>& arrays,
                    std::vector<Type> types, std::unique_ptr<Block> body, const std::string& who) {
  carried.insert(carried.end(), arrays.begin(), arrays.end());
  for (Value a : arrays) types.push_back(a.type());
  std::vector<Value> captures = capture_external_values({body.get()}, who, {"body"});
  WhileOp op = c.b.create<WhileOp>(c0, carried, captures, -1, types);
  op.body_region().push_back(body.release());
  op.operation()->verify();
  return op;
}

std::vector<Value> if_node(NodeContext& c) {
  Value pred = c.input(0);
  if (!is_condition_type(pred.type()))
    c.unsupported("a condition of type " + pred.type().to_string() + "; expected a bool tensor of one element");
  auto then_block = std::make_unique<Block>();
  auto else_block = std::make_unique<Block>();
  std::vector<Value> t = c.import_subgraph(graph_attr(c, "then_branch"), *then_block, {});
  std::vector<Value> f = c.import_subgraph(graph_attr(c, "else_branch"), *else_block, {});
  if (t.size() != f.size())
    c.unsupported("then_branch gives " + std::to_string(t.size()) + " outputs, else_branch " +
                  std::to_string(f.size()));
  std::vector<Type> types;
  for (std::size_t i = 0; i < t.size(); ++i) {
    Type j = join_types(t[i].type(), f[i].type());
    if (!j)
      c.unsupported("output #" + std::to_string(i) + " is " + t[i].type().to_string() +
                    " in then_branch but " + f[i].type().to_string() + " in else_branch");
    types.push_back(j);
  }
  Builder(*then_block).create<YieldOp>(t);
  Builder(*else_block).create<YieldOp>(f);
  std::vector<Value> captures = capture_external_values({then_block.get(), else_block.get()}, "ONNX If",
                                                        {"then_branch", "else_branch"});
  IfOp op = c.b.create<IfOp>(pred, captures, types);
  op.then_region().push_back(then_block.release());
  op.else_region().push_back(else_block.release());
  op.operation()->verify();
  return op.operation()->results();
}

// Carried: [iteration (i64 []), cond (bool []), values…, scan arrays…].
std::vector<Value> loop_node(NodeContext& c) {
  const ::onnx::GraphProto& body_g = graph_attr(c, "body");
  Value trip = c.inputs.size() > 0 ? c.inputs[0] : Value{};
  Value cond0 = c.inputs.size() > 1 ? c.inputs[1] : Value{};
  std::vector<Value> inits;
  for (std::size_t i = 2; i < c.inputs.size(); ++i) inits.push_back(c.input(i));
  const std::size_t n = inits.size();
  if (static_cast<std::size_t>(body_g.output_size()) < 1 + n)
    c.unsupported("a body with " + std::to_string(body_g.output_size()) + " outputs for " +
                  std::to_string(n) + " loop-carried values");
  const std::size_t k = static_cast<std::size_t>(body_g.output_size()) - 1 - n;

  Value i0 = scalar(c.b, DataType::Int64, 0.0);
  Value keep = cond0 ? as_scalar(c.b, cond0) : scalar(c.b, DataType::Bool, 1.0);
  if (shaped_data_type(keep.type()) != DataType::Bool) c.unsupported("a condition that is not bool");
  Value limit;
  if (trip) {
    limit = as_scalar(c.b, trip);
    if (shaped_data_type(limit.type()) != DataType::Int64)
      limit = c.b.create<CastOp>(limit, DataType::Int64).result();
  }
  Value c0 = limit ? c.b.create<LogicalAndOp>(keep, c.b.create<LessThanOp>(i0, limit).result()).result()
                   : keep;

  std::vector<Type> types{i0.type(), keep.type()};
  for (Value v : inits) types.push_back(v.type());
  for (int attempt = 0;; ++attempt) {
    auto body = std::make_unique<Block>();
    std::vector<Value> args;
    for (Type t : types) args.push_back(body->add_argument(t));
    std::vector<Value> outs = c.import_subgraph(body_g, *body, args);
    if (join_carried_types(c, types, 2, outs, 1, n, "loop-carried value")) {
      if (attempt > 0) c.unsupported("a body whose outputs' types change again on a second import");
      continue;  // the detached body is dropped
    }
    Builder bb(*body);
    std::vector<Value> arrays, array_args;
    scan_output_arrays(c, *body, outs, 1 + n, k, arrays, array_args);
    Value i = args[0];
    Value next_i = bb.create<AddOp>(i, scalar(bb, DataType::Int64, 1.0)).result();
    Value cond_out = as_scalar(bb, outs[0]);
    if (shaped_data_type(cond_out.type()) != DataType::Bool) c.unsupported("a body condition that is not bool");
    Value next_cond = limit ? bb.create<LogicalAndOp>(cond_out, bb.create<LessThanOp>(next_i, limit).result()).result()
                            : cond_out;
    std::vector<Value> yielded{next_cond, next_i, cond_out};
    for (std::size_t j = 0; j < n; ++j) yielded.push_back(outs[1 + j]);
    for (std::size_t s = 0; s < k; ++s)
      yielded.push_back(bb.create<ArrayWriteOp>(array_args[s], i, outs[1 + n + s]).result());
    bb.create<YieldOp>(yielded);
    std::vector<Value> carried{i0, keep};
    carried.insert(carried.end(), inits.begin(), inits.end());
    WhileOp op = build_while(c, c0, carried, arrays, types, std::move(body), "ONNX Loop");
    std::vector<Value> results;
    for (std::size_t j = 0; j < n; ++j) results.push_back(op.operation()->result(static_cast<std::uint32_t>(2 + j)));
    for (std::size_t s = 0; s < k; ++s)
      results.push_back(
          c.b.create<ArrayStackOp>(op.operation()->result(static_cast<std::uint32_t>(2 + n + s)), 0).result());
    return results;
  }
}

std::vector<Value> scan8_node(NodeContext& c);

// Opset 9 on (opset 8's batch form: scan8_node). Carried: [i, state…,
// scan output arrays…]; the scan inputs' arrays are captures.
std::vector<Value> scan_node(NodeContext& c) {
  if (c.opset < 9) return scan8_node(c);
  const ::onnx::GraphProto& body_g = graph_attr(c, "body");
  const auto m = static_cast<std::size_t>(c.int_attr("num_scan_inputs", 0));
  if (m == 0 || m > c.inputs.size()) c.unsupported("num_scan_inputs " + std::to_string(m));
  const std::size_t n = c.inputs.size() - m;
  if (static_cast<std::size_t>(body_g.output_size()) < n)
    c.unsupported("a body with fewer outputs than state values");
  const std::size_t k = static_cast<std::size_t>(body_g.output_size()) - n;
  auto axes_or_zero = [&](const std::string& name, std::size_t count) {
    std::vector<std::int64_t> v = c.ints_attr(name);
    if (v.empty()) v.assign(count, 0);
    if (v.size() != count) c.unsupported(name + " of the wrong length");
    return v;
  };
  const std::vector<std::int64_t> in_axes = axes_or_zero("scan_input_axes", m),
                                  in_dirs = axes_or_zero("scan_input_directions", m),
                                  out_axes = axes_or_zero("scan_output_axes", k),
                                  out_dirs = axes_or_zero("scan_output_directions", k);
  std::vector<Value> in_arrays;
  for (std::size_t j = 0; j < m; ++j) {
    Value x = c.input(n + j);
    auto rank = static_cast<std::int64_t>(shaped_dims(x.type()).size());
    std::int64_t axis = in_axes[j] < 0 ? in_axes[j] + rank : in_axes[j];
    if (axis < 0 || axis >= rank) c.unsupported("scan input axis out of range");
    in_arrays.push_back(c.b.create<ArrayFromTensorOp>(x, axis).result());
  }
  Value length = as_scalar(c.b, c.b.create<ArrayLengthOp>(in_arrays[0]).result());
  Value last = c.b.create<SubOp>(length, scalar(c.b, DataType::Int64, 1.0)).result();
  Value i0 = scalar(c.b, DataType::Int64, 0.0);
  Value c0 = c.b.create<LessThanOp>(i0, length).result();

  std::vector<Value> states;
  for (std::size_t j = 0; j < n; ++j) states.push_back(c.input(j));
  std::vector<Type> types{i0.type()};
  for (Value v : states) types.push_back(v.type());
  for (int attempt = 0;; ++attempt) {
    auto body = std::make_unique<Block>();
    std::vector<Value> args;
    for (Type t : types) args.push_back(body->add_argument(t));
    Builder bb(*body);
    Value i = args[0];
    Value reversed = bb.create<SubOp>(last, i).result();
    std::vector<Value> inputs(args.begin() + 1, args.end());
    for (std::size_t j = 0; j < m; ++j)
      inputs.push_back(bb.create<ArrayReadOp>(in_arrays[j], in_dirs[j] ? reversed : i).result());
    std::vector<Value> outs = c.import_subgraph(body_g, *body, inputs);
    if (join_carried_types(c, types, 1, outs, 0, n, "state value")) {
      if (attempt > 0) c.unsupported("a body whose outputs' types change again on a second import");
      continue;
    }
    std::vector<Value> arrays, array_args;
    scan_output_arrays(c, *body, outs, n, k, arrays, array_args);
    Value next_i = bb.create<AddOp>(i, scalar(bb, DataType::Int64, 1.0)).result();
    std::vector<Value> yielded{bb.create<LessThanOp>(next_i, length).result(), next_i};
    for (std::size_t j = 0; j < n; ++j) yielded.push_back(outs[j]);
    for (std::size_t s = 0; s < k; ++s)
      yielded.push_back(
          bb.create<ArrayWriteOp>(array_args[s], out_dirs[s] ? reversed : i, outs[n + s]).result());
    bb.create<YieldOp>(yielded);
    std::vector<Value> carried{i0};
    carried.insert(carried.end(), states.begin(), states.end());
    WhileOp op = build_while(c, c0, carried, arrays, types, std::move(body), "ONNX Scan");
    std::vector<Value> results;
    for (std::size_t j = 0; j < n; ++j) results.push_back(op.operation()->result(static_cast<std::uint32_t>(1 + j)));
    for (std::size_t s = 0; s < k; ++s) {
      const auto rank = static_cast<std::int64_t>(shaped_dims(outs[n + s].type()).size()) + 1;
      std::int64_t axis = out_axes[s] < 0 ? out_axes[s] + rank : out_axes[s];
      if (axis < 0 || axis >= rank) c.unsupported("scan output axis out of range");
      results.push_back(
          c.b.create<ArrayStackOp>(op.operation()->result(static_cast<std::uint32_t>(1 + n + s)), axis).result());
    }
    return results;
  }
}

// Opset 8: sequence_lens first, then the states and scan inputs with a
// batch axis 0 (the scan axis is 1). A batch of one without sequence_lens
// is opset 9's Scan on the inputs with the batch axis squeezed out, its
// outputs given it back.
std::vector<Value> scan8_node(NodeContext& c) {
  if (c.inputs.empty()) c.unsupported("Scan without inputs");
  if (c.inputs[0]) c.unsupported("Scan (opset 8) with sequence_lens");
  for (std::int64_t d : c.ints_attr("directions"))
    if (d != 0) c.unsupported("Scan (opset 8) with reversed directions");
  NodeContext c9 = c;
  c9.opset = 9;
  c9.inputs.erase(c9.inputs.begin());
  c9.constants.erase(c9.constants.begin());
  for (Value& v : c9.inputs) {
    const auto d = shaped_dims(v.type());
    if (d.empty() || d[0] != 1)
      c.unsupported("Scan (opset 8) with a batch other than 1, input " + meta::dims_string(d));
    v = c.b.create<SqueezeOp>(v, std::vector<std::int64_t>{0}).result();
  }
  std::fill(c9.constants.begin(), c9.constants.end(), nullptr);
  std::vector<Value> outs = scan_node(c9);
  for (Value& v : outs) v = c.b.create<UnsqueezeOp>(v, std::vector<std::int64_t>{0}).result();
  return outs;
}

}  // namespace

void add_control_flow_ops(OpTable& t) {
  t["If"] = {&if_node, 1};
  t["Loop"] = {&loop_node, 1};
  t["Scan"] = {&scan_node, 8};
}

}  // namespace kiln::onnx::detail

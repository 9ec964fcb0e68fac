// kiln::onnx::import_model (kiln/onnx/import.h): the graph's inputs become
// kiln.data ops, each node goes through its op-table entry (op_table.h),
// the graph's outputs become kiln.fetch ops named like them.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/ir/tensor_attribute.h"
#include "kiln/kernel/kernel_registry.h"
#include "kiln/onnx/import.h"
#include "kiln/passes/constant_fold.h"
#include "kiln/passes/fusion.h"
#include "kiln/support/error.h"
#include "external_data.h"
#include "fusion.h"
#include "model_proto.h"
#include "op_table.h"

namespace kiln::onnx {

namespace detail {

std::string NodeContext::where() const {
  return "node '" + node.name() + "' (" + node.op_type() + ")";
}

void NodeContext::unsupported(const std::string& what) const {
  throw_error(ErrorKind::Unimplemented, "ONNX ", where(), ": ", what);
}

Value NodeContext::input(std::size_t i) const {
  if (i < sequences.size() && sequences[i])
    unsupported("input #" + std::to_string(i) + " is a sequence; kiln takes a tensor there");
  if (i >= inputs.size() || !inputs[i])
    throw_error(ErrorKind::InvalidArgument, "ONNX ", where(), " needs input #", i);
  return inputs[i];
}

const std::vector<Value>& NodeContext::sequence(std::size_t i) const {
  if (i >= sequences.size() || !sequences[i])
    throw_error(ErrorKind::InvalidArgument, "ONNX ", where(), " needs a sequence as input #", i);
  return *sequences[i];
}

const ::onnx::AttributeProto* NodeContext::attribute(const std::string& name) const {
  for (const auto& a : node.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

std::int64_t NodeContext::int_attr(const std::string& name, std::int64_t fallback) const {
  const auto* a = attribute(name);
  return a ? a->i() : fallback;
}

float NodeContext::float_attr(const std::string& name, float fallback) const {
  const auto* a = attribute(name);
  return a ? a->f() : fallback;
}

std::vector<std::int64_t> NodeContext::ints_attr(const std::string& name) const {
  const auto* a = attribute(name);
  if (!a) return {};
  return {a->ints().begin(), a->ints().end()};
}

std::vector<std::int64_t> NodeContext::constant_ints(std::size_t i, const std::string& what) const {
  if (i >= constants.size() || !constants[i])
    unsupported(what + " (input #" + std::to_string(i) +
                ") is computed at run time; kiln imports it only as a constant");
  const Tensor& t = *constants[i];
  std::vector<std::int64_t> v;
  if (t.dtype() == DataType::Int64) v = t.to_vector<std::int64_t>();
  else if (t.dtype() == DataType::Int32)
    for (auto x : t.to_vector<std::int32_t>()) v.push_back(x);
  else
    unsupported(what + " (input #" + std::to_string(i) + ") is " + std::string(to_string(t.dtype())) +
                ", expected int32 or int64");
  return v;
}

std::vector<std::int64_t> NodeContext::distinct_axes(const std::vector<std::int64_t>& axes, std::int64_t rank) const {
  std::vector<std::int64_t> out;
  for (std::int64_t a : axes) {
    const std::int64_t at = a < 0 ? a + rank : a;
    if (at < 0 || at >= rank || std::find(out.begin(), out.end(), at) != out.end())
      unsupported("axes entry " + std::to_string(a) + " (out of range or repeated) for rank " + std::to_string(rank));
    out.push_back(at);
  }
  return out;
}

std::vector<std::int64_t> NodeContext::ints_input_or_attr(std::size_t i, const std::string& attr,
                                                          std::int64_t input_since, const std::string& what) const {
  if (opset < input_since) return ints_attr(attr);
  if (i >= inputs.size() || !inputs[i]) return {};
  return constant_ints(i, what);
}

std::int64_t NodeContext::constant_int(std::size_t i, const std::string& what) const {
  const std::vector<std::int64_t> v = constant_ints(i, what);
  if (v.size() != 1)
    throw_error(ErrorKind::InvalidArgument, "ONNX ", where(), ": ", what, " (input #", i, ") holds ",
                v.size(), " values, expected one");
  return v[0];
}

Value constant_value(Builder& b, const Tensor& t) { return constant_of(b, attribute_from_tensor(t)); }

Value constant_of(Builder& b, TensorAttribute a) {
  return b.create<ConstantOp>(a, TensorType::get(a.dtype(), a.dims())).result();
}

const OpTable& op_table() {
  static const OpTable table = [] {
    OpTable t;
    add_elementwise_ops(t);
    add_tensor_ops(t);
    add_constant_ops(t);
    add_reduce_ops(t);
    add_nn_ops(t);
    add_math_ops(t);
    add_layout_ops(t);
    add_resize_ops(t);
    add_control_flow_ops(t);
    add_random_ops(t);
    add_indexing_ops(t);
    add_loss_ops(t);
    add_shape_ops(t);
    add_sequence_ops(t);
    add_rnn_ops(t);
    add_quantize_ops(t);
    add_attention_ops(t);
    return t;
  }();
  return table;
}

}  // namespace detail

namespace {

// The kiln dtype of an ONNX element type; kiln::Error naming `what` otherwise.
DataType data_type(std::int32_t elem_type, const std::string& what) {
  if (auto dt = detail::kiln_data_type(elem_type)) return *dt;
  throw_error(ErrorKind::Unimplemented, "ONNX ", what, " has element type ",
              detail::elem_type_name(elem_type), "; kiln imports ", detail::kImportedElemTypes);
}

// The most elements a value folded at import has: those above are held
// attributes (TensorAttribute::get_or_hold's limit), read in place of their
// bytes (taken_constant), which the fold's kernels, which may write their
// operands, never see.
constexpr std::int64_t kMaxFoldedElements = TensorAttribute::kMaxUniquedElements;

// When every input of `node` is known at import, runs the kiln ops its
// builder added (after `mark`) on those values, op by op, with the fold
// pass's evaluator (each op's own CPU kernel), and records the node's
// outputs as known too: Reshape after Shape → Gather → Concat (PyTorch's
// exported shape arithmetic) then has a constant shape. Small inputs and
// outputs only; an op folding may not run (random, side effects, control
// flow) or that fails leaves its results unknown (running the model reports
// a failure).
void fold_constants(Block& block, Operation* mark, const ::onnx::NodeProto& node,
                    const detail::NodeContext& ctx, const std::vector<Value>& results,
                    std::unordered_map<std::string, Tensor>& constants) {
  std::unordered_map<Value, Tensor> known;
  for (std::size_t i = 0; i < ctx.inputs.size(); ++i) {
    if (!ctx.inputs[i]) continue;
    if (!ctx.constants[i] || ctx.constants[i]->numel() > kMaxFoldedElements) return;
    known.emplace(ctx.inputs[i], *ctx.constants[i]);
  }
  if (known.empty()) return;
  for (Operation* op = mark ? mark->next_in_block() : block.front(); op;
       op = op->next_in_block()) {
    std::vector<Tensor> operands;
    for (std::uint32_t i = 0; i < op->num_operands(); ++i) {
      auto it = known.find(op->operand_source(i));
      if (it == known.end()) break;
      operands.push_back(it->second);
    }
    if (operands.size() != op->num_operands()) continue;
    std::vector<Tensor> got = evaluate_on_cpu(op, operands);
    for (std::size_t r = 0; r < got.size(); ++r) known.emplace(op->result(r), std::move(got[r]));
  }
  for (int k = 0; k < node.output_size() && k < static_cast<int>(results.size()); ++k) {
    const Value v = results[static_cast<std::size_t>(k)];
    if (node.output(k).empty() || !v) continue;
    if (auto it = known.find(v); it != known.end() && it->second.numel() <= kMaxFoldedElements)
      constants.emplace(node.output(k), it->second);
  }
}

// A value known at import: the attribute a constant or parameter is made
// of, and the tensor the builders read.
struct KnownConstant {
  TensorAttribute attribute;
  Tensor tensor;
};

// `t` copied into the attribute: held when too large to fold (a weight in
// typed fields, a Conv weight folded with its BatchNormalization), as
// taken_constant's.
KnownConstant copied_constant(Tensor t) { return {attribute_from_tensor(t), std::move(t)}; }

// `tp`'s raw data moved into the attribute (no copy). A tensor too large to
// fold is a held attribute (freed with the last op carrying it: the startup
// program's constant, and the builders' tensor is a view of its bytes: no
// importer step writes a constant it reads, and the op outlives the import);
// a smaller one is uniqued, and anything else copied.
KnownConstant taken_constant(::onnx::TensorProto& tp, const std::string& what) {
  if (tp.raw_data().empty()) return copied_constant(detail::tensor_of(tp, what));
  detail::TensorLayout l = detail::layout_of(tp, what);
  const TensorAttribute a = TensorAttribute::get_or_hold(l.dtype, std::move(l.dims),
                                                         std::move(*tp.mutable_raw_data()));
  const std::string_view bytes = a.bytes();
  if (a.held() && reinterpret_cast<std::uintptr_t>(bytes.data()) % alignof(std::max_align_t) == 0)
    return {a, Tensor::from_external(const_cast<char*>(bytes.data()), bytes.size(), Dims(a.dims()), a.dtype())};
  return {a, tensor_from_attribute(a)};
}

// One import, phase by phase: initializers, graph inputs, each node, graph
// outputs. `values` maps ONNX names to kiln values; `constants` holds the
// values known at import (initializers, Constant nodes, Shape of static
// dims, folded nodes).
//
// A subgraph (If's branches, Loop's and Scan's bodies) is imported by a
// child importer into a detached block: names it does not define resolve
// in its parent's scope, so its ops read outer values directly, and the
// control-flow builder then turns those into captures
// (capture_external_values).
class GraphImporter {
 public:
  GraphImporter(ImportedModel& out, std::string_view what)
      : out_(out), what_(what), block_(out.main.block()), b_(out.main), sb_(out.startup) {}
  GraphImporter(ImportedModel& out, std::string_view what, Block& block, const GraphImporter& parent)
      : out_(out), what_(what), block_(block), b_(block), sb_(out.startup), parent_(&parent) {}

  // The value an ONNX name refers to here or in an enclosing graph; null if none.
  Value lookup(const std::string& name) const {
    auto v = values_.find(name);
    if (v != values_.end()) return v->second;
    return parent_ ? parent_->lookup(name) : Value{};
  }
  const Tensor* lookup_constant(const std::string& name) const {
    auto c = constants_.find(name);
    if (c != constants_.end()) return &c->second;
    return parent_ ? parent_->lookup_constant(name) : nullptr;
  }
  const std::vector<Value>* lookup_sequence(const std::string& name) const {
    auto q = sequences_.find(name);
    if (q != sequences_.end()) return &q->second;
    return parent_ ? parent_->lookup_sequence(name) : nullptr;
  }
  void bind(const std::string& name, Value v) { values_[name] = v; }

  // Initializers: parameters set by the startup program from their values
  // (so the imported model trains like one built by the frontend); in a
  // subgraph, constants of its block.
  // A main graph's initializers hand their raw data to the parameters'
  // attributes (`owned`: the parsed model is the import's own, and a
  // model's weights are then copied once, by the parse); a subgraph's are
  // copied.
  void import_initializers(const ::onnx::GraphProto& g, ::onnx::GraphProto* owned = nullptr) {
    if (g.sparse_initializer_size() > 0)
      throw_error(ErrorKind::Unimplemented, "ONNX model ", what_, " has sparse initializers (first '",
                  g.sparse_initializer(0).values().name(), "'); kiln does not import them");
    for (int i = 0; i < g.initializer_size(); ++i) {
      const std::string& name = g.initializer(i).name();
      if (poisoned_.count(name)) continue;  // its external data failed
      const std::string what = "initializer '" + name + "'";
      std::optional<KnownConstant> c;
      if (!recorded([&] {
            c = owned ? taken_constant(*owned->mutable_initializer(i), what)
                      : copied_constant(detail::tensor_of(g.initializer(i), what));
          }, {name}))
        continue;
      values_[name] = add_initializer(name, std::move(*c));
    }
  }

  // `name`'s value known at import: a parameter the startup program sets
  // (a subgraph's: a constant), its tensor kept for the builders.
  Value add_initializer(const std::string& name, KnownConstant c) {
    Value v;
    if (parent_) {
      v = detail::constant_of(b_, c.attribute);
    } else {
      const Type type = TensorType::get(c.attribute.dtype(), c.attribute.dims());
      sb_.create<SetParameterOp>(detail::constant_of(sb_, c.attribute), name);
      out_.startup.set_parameter(name, Parameter{type, true});
      out_.main.set_parameter(name, Parameter{type, true});
      v = b_.create<ParameterOp>(name, type).result();
    }
    constants_.emplace(name, std::move(c.tensor));
    return v;
  }

  void import_inputs(const ::onnx::GraphProto& g) {
    for (const auto& in : g.input()) {
      if (constants_.count(in.name()) || poisoned_.count(in.name()))
        continue;  // an initializer listed as an input (IR < 4)
      recorded([&] { import_input(in); }, {in.name()});
    }
  }

  void import_input(const ::onnx::ValueInfoProto& in) {
    const std::string desc = "graph input '" + in.name() + "'";
    if (!in.type().has_tensor_type())
      throw_error(ErrorKind::Unimplemented, "ONNX ", desc, " is not a tensor");
    const auto& tt = in.type().tensor_type();
    const DataType dt = data_type(tt.elem_type(), desc);
    if (!tt.has_shape())
      throw_error(ErrorKind::Unimplemented, "ONNX ", desc, " has no shape (not even its rank)");
    std::vector<std::int64_t> dims;
    for (const auto& d : tt.shape().dim()) dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
    values_[in.name()] = b_.create<DataOp>(in.name(), dims, dt).result();
    out_.inputs.push_back(in.name());
  }

  // Collecting problems instead of stopping at the first (`problems` not
  // null): a failing step's message is recorded and the names it would have
  // defined are poisoned — nodes reading them are skipped, as their failure
  // would only repeat it. Without a list, errors propagate.
  void collect_problems(std::vector<std::string>* problems) { problems_ = problems; }
  void poison(const std::unordered_set<std::string>& names) { poisoned_.insert(names.begin(), names.end()); }
  template <typename F>
  bool recorded(F&& step, std::vector<std::string> defines) {
    if (!problems_) {
      step();
      return true;
    }
    try {
      step();
      return true;
    } catch (const Error& e) {
      problems_->push_back(e.message());
      for (auto& n : defines) poisoned_.insert(std::move(n));
      return false;
    }
  }
  bool reads_poisoned(const ::onnx::NodeProto& node) const {
    for (const auto& name : node.input())
      if (poisoned_.count(name)) return true;
    return false;
  }
  // Each node, skipping those that read a poisoned name (collecting); a
  // chain of nodes that kiln has one fused op for (fusion.h) is built as
  // that op where it starts, and its other nodes are skipped.
  void import_nodes(const ::onnx::GraphProto& g) {
    const detail::GraphUses uses(g);
    const detail::FusionScope scope{[this](const std::string& n) { return lookup(n); },
                                    [this](const std::string& n) { return lookup_constant(n); },
                                    [this](const std::string& n, Tensor t) {
                                      return values_[n] = add_initializer(n, copied_constant(std::move(t)));
                                    },
                                    out_.opset};
    std::vector<bool> fused(static_cast<std::size_t>(g.node_size()), false);
    for (int i = 0; i < g.node_size(); ++i) {
      if (fused[static_cast<std::size_t>(i)]) continue;
      const auto& node = g.node(i);
      std::vector<std::string> outs(node.output().begin(), node.output().end());
      if (reads_poisoned(node)) {
        poisoned_.insert(outs.begin(), outs.end());
        continue;
      }
      if (auto f = detail::fuse_at(g, uses, i, b_, scope)) {
        for (int k : f->nodes) fused[static_cast<std::size_t>(k)] = true;
        values_[f->output] = f->value;
        continue;
      }
      recorded([&] { import_node(node); }, std::move(outs));
    }
  }

  void import_node(const ::onnx::NodeProto& node) {
    const std::string where = "node '" + node.name() + "' (" + node.op_type() + ")";
    const detail::OpEntry& entry = entry_for(node, where);
    detail::NodeContext ctx{b_, node, out_.opset, {}, {}, {}, {}, {}, {}, {}};
    bool sequences = false;
    for (const auto& name : node.input()) {
      const std::vector<Value>* seq = name.empty() ? nullptr : lookup_sequence(name);
      ctx.sequences.push_back(seq);
      sequences |= seq != nullptr;
      if (name.empty() || seq) {
        ctx.inputs.emplace_back();
        ctx.constants.push_back(nullptr);
        continue;
      }
      Value v = lookup(name);
      if (!v)
        throw_error(ErrorKind::InvalidArgument, "ONNX ", where, ": input '", name,
                    "' is made by no earlier node and is no graph input");
      ctx.inputs.push_back(v);
      ctx.constants.push_back(lookup_constant(name));
    }
    ctx.import_subgraph = [this](const ::onnx::GraphProto& g, Block& block,
                                 const std::vector<Value>& inputs) {
      return import_subgraph(g, block, inputs);
    };
    ctx.lookup = [this](const std::string& name) { return lookup(name); };
    std::vector<Value> results;
    Operation* mark = block_.back();
    try {
      results = entry.build(ctx);
      require_cpu_kernels(mark);
    } catch (const Error& e) {
      // kiln's own checks (InferMeta) name kiln's op; say which node it was.
      if (e.message().find(where) != std::string::npos) throw;
      throw Error(e.kind(), "ONNX " + where + ": " + e.message());
    }
    for (auto& [k, elements] : ctx.sequence_outputs) {
      if (k < static_cast<std::size_t>(node.output_size()) &&
          !node.output(static_cast<int>(k)).empty())
        sequences_[node.output(static_cast<int>(k))] = std::move(elements);
      sequences = true;
    }
    for (int k = 0; k < node.output_size(); ++k) {
      if (node.output(k).empty() || ctx.sequence_outputs.count(static_cast<std::size_t>(k)))
        continue;
      if (k >= static_cast<int>(results.size()) || !results[static_cast<std::size_t>(k)])
        throw_error(ErrorKind::Unimplemented, "ONNX ", where, ": kiln does not compute output #",
                    k, " ('", node.output(k), "')");
      values_[node.output(k)] = results[static_cast<std::size_t>(k)];
    }
    // Outputs the builder knows (Constant, Shape), or else a node whose
    // inputs are all known, folded: known at import too.
    if (ctx.known_outputs.empty()) {
      if (!sequences) fold_constants(block_, mark, node, ctx, results, constants_);
      return;
    }
    for (std::size_t k = 0; k < ctx.known_outputs.size(); ++k)
      if (k < static_cast<std::size_t>(node.output_size()) && ctx.known_outputs[k].is_initialized())
        constants_.emplace(node.output(static_cast<int>(k)), ctx.known_outputs[k]);
  }

  // Every op the node's builder added after `mark` that runs through a
  // kernel has a CPU kernel for its dtype (ops without any kernel, such as
  // control flow, are the executor's own): a model of u16 tensors is then
  // unsupported at import, not an error in its first run.
  void require_cpu_kernels(Operation* mark) const {
    const KernelRegistry& registry = KernelRegistry::instance();
    for (Operation* op = mark ? mark->next_in_block() : block_.front(); op;
         op = op->next_in_block())
      if (!registry.dtypes_for(op->info().id(), PlaceKind::Cpu).empty())
        registry.get(*op, PlaceKind::Cpu, kernel_dtype(*op));
  }

  // g's nodes into `block`, its inputs bound to `inputs` in order (fewer
  // inputs than the graph declares: kiln::Error); returns its outputs.
  std::vector<Value> import_subgraph(const ::onnx::GraphProto& g, Block& block,
                                     const std::vector<Value>& inputs) const {
    GraphImporter child(out_, what_, block, *this);
    if (static_cast<std::size_t>(g.input_size()) != inputs.size())
      throw_error(ErrorKind::InvalidArgument, "ONNX model ", what_, ": subgraph '", g.name(),
                  "' declares ", g.input_size(), " inputs, its op gives it ", inputs.size());
    for (int i = 0; i < g.input_size(); ++i) child.bind(g.input(i).name(), inputs[static_cast<std::size_t>(i)]);
    child.import_initializers(g);
    child.import_nodes(g);
    std::vector<Value> outs;
    for (const auto& o : g.output()) {
      Value v = child.lookup(o.name());
      if (!v)
        throw_error(ErrorKind::InvalidArgument, "ONNX model ", what_, ": subgraph '", g.name(),
                    "' output '", o.name(), "' is made by no node");
      outs.push_back(v);
    }
    return outs;
  }

  void import_outputs(const ::onnx::GraphProto& g) {
    for (const auto& o : g.output()) {
      if (poisoned_.count(o.name())) continue;
      auto v = values_.find(o.name());
      if (v == values_.end() && sequences_.count(o.name()))
        throw_error(ErrorKind::Unimplemented, "ONNX model ", what_, ": graph output '", o.name(),
                    "' is a sequence; kiln's outputs are tensors");
      if (v == values_.end())
        throw_error(ErrorKind::InvalidArgument, "ONNX model ", what_, ": graph output '", o.name(),
                    "' is made by no node");
      b_.create<FetchOp>(v->second, o.name());
      out_.outputs.push_back(o.name());
    }
  }

 private:
  // The node's table entry; kiln::Error when its domain, op or opset is
  // not covered.
  const detail::OpEntry& entry_for(const ::onnx::NodeProto& node, const std::string& where) const {
    const bool training = node.domain() == detail::kTrainingDomain;
    if (!training && !node.domain().empty() && node.domain() != "ai.onnx")
      throw_error(ErrorKind::Unimplemented, "ONNX ", where, " is in domain '", node.domain(),
                  "'; kiln imports the default domain and ", detail::kTrainingDomain);
    const auto& table = training ? detail::training_op_table() : detail::op_table();
    const std::int64_t opset = training ? out_.training_opset : out_.opset;
    const std::string domain = training ? std::string(detail::kTrainingDomain) : "ai.onnx";
    if (opset == 0)
      throw_error(ErrorKind::InvalidArgument, "ONNX ", where, ": the model imports no opset of "
                  "domain '", domain, "'");
    auto it = table.find(node.op_type());
    if (it == table.end())
      throw_error(ErrorKind::Unimplemented, "ONNX ", where, ": kiln has no importer for op '",
                  node.op_type(), "'", training ? " of domain " + domain : std::string());
    if (opset < it->second.since || opset > it->second.until)
      throw_error(ErrorKind::Unimplemented, "ONNX ", where, ": kiln imports '", node.op_type(),
                  "' for opsets ", it->second.since, " to ", it->second.until, ", the model uses ",
                  opset);
    return it->second;
  }

  ImportedModel& out_;
  std::string_view what_;
  Block& block_;
  Builder b_, sb_;
  const GraphImporter* parent_ = nullptr;
  std::vector<std::string>* problems_ = nullptr;
  std::unordered_set<std::string> poisoned_;
  std::unordered_map<std::string, Value> values_;
  std::unordered_map<std::string, Tensor> constants_;
  std::unordered_map<std::string, std::vector<Value>> sequences_;
};

}  // namespace

namespace {

// Whether `g` or one of its subgraphs has a node of the default domain.
bool uses_default_domain(const ::onnx::GraphProto& g) {
  for (const auto& n : g.node()) {
    if (n.domain().empty() || n.domain() == "ai.onnx") return true;
    for (const auto& a : n.attribute()) {
      if (a.has_g() && uses_default_domain(a.g())) return true;
      for (const auto& sub : a.graphs())
        if (uses_default_domain(sub)) return true;
    }
  }
  return false;
}

// The import, stopping at the first error (`problems` null) or recording
// each one there and going on as far as the model allows.
ImportedModel import_parsed(::onnx::ModelProto& model, std::string_view what,
                            std::vector<std::string>* problems,
                            const std::unordered_set<std::string>& failed = {}) {
  ImportedModel out;
  out.info = detail::model_info_of(model);
  for (const auto& o : model.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") out.opset = o.version();
    if (o.domain() == detail::kTrainingDomain) out.training_opset = o.version();
  }
  // A model of the training domain alone (ONNX's optimizer tests) imports
  // no default opset; its nodes of the default domain, if any, are errors.
  const bool only_training = out.opset == 0 && out.training_opset != 0 && !uses_default_domain(model.graph());
  if (!only_training && (out.opset < 1 || out.opset > detail::kMaxOpset))
    throw_error(ErrorKind::Unimplemented, "ONNX model ", what, " uses opset ", out.opset,
                " of the default domain; kiln imports opsets 1 to ", detail::kMaxOpset);
  const auto& g = model.graph();
  GraphImporter importer(out, what);
  importer.collect_problems(problems);
  importer.poison(failed);
  importer.import_initializers(g, model.mutable_graph());
  importer.import_inputs(g);
  importer.import_nodes(g);
  importer.import_outputs(g);
  if (!problems) fuse_conv_epilogue(out.main.block());
  return out;
}

// A parsed model with its external data, imported.
ImportedModel import_with_data(::onnx::ModelProto& model, std::string_view what, const std::string& base_dir) {
  detail::load_external_data(model, base_dir, what);
  return import_parsed(model, what, nullptr);
}

// All that importing a parsed model finds unsupported (import_problems).
std::vector<std::string> problems_of(::onnx::ModelProto& model, std::string_view what,
                                     const std::string& base_dir, ModelInfo* info) {
  if (info) *info = detail::model_info_of(model);
  std::vector<std::string> problems;
  std::unordered_set<std::string> failed;
  detail::load_external_data(model, base_dir, what, &problems, &failed);
  try {
    import_parsed(model, what, &problems, failed);
  } catch (const Error& e) {  // the model as a whole (its opset)
    problems.push_back(e.message());
  }
  return problems;
}

// The folder a model file's external data locations are relative to.
std::string folder_of(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

}  // namespace

ImportedModel import_model_from_bytes(std::string_view bytes, std::string_view what,
                                     const std::string& base_dir) {
  ::onnx::ModelProto model = detail::parse_model(bytes, what);
  return import_with_data(model, what, base_dir);
}

std::vector<std::string> import_problems_from_bytes(std::string_view bytes, std::string_view what,
                                                    const std::string& base_dir, ModelInfo* info) {
  ::onnx::ModelProto model = detail::parse_model(bytes, what);
  return problems_of(model, what, base_dir, info);
}

std::vector<std::string> import_problems(const std::string& path, ModelInfo* info) {
  ::onnx::ModelProto model = detail::parse_model_file(path);
  return problems_of(model, "'" + path + "'", folder_of(path), info);
}

ImportedModel import_model(const std::string& path) {
  ::onnx::ModelProto model = detail::parse_model_file(path);
  return import_with_data(model, "'" + path + "'", folder_of(path));
}

// ---- TensorProto ----

namespace {

template <typename T, typename Field>
void copy_field(const Field& f, Tensor& t) {
  T* p = t.data<T>();
  for (int i = 0; i < f.size(); ++i) p[i] = static_cast<T>(f.Get(i));
}

}  // namespace

Tensor tensor_from_bytes(std::string_view bytes, std::string_view what) {
  ::onnx::TensorProto tp;
  if (bytes.size() > static_cast<std::size_t>(std::numeric_limits<int>::max()) ||
      !tp.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    throw_error(ErrorKind::InvalidArgument, "ONNX tensor ", what, " is not a valid TensorProto");
  return detail::tensor_of(tp, what);
}

detail::TensorLayout detail::layout_of(const ::onnx::TensorProto& tp, std::string_view what) {
  if (tp.data_location() == ::onnx::TensorProto_DataLocation_EXTERNAL)
    throw_error(ErrorKind::InvalidArgument, "ONNX tensor ", what, " keeps its data in an external "
                "file that was not read (kiln reads external data when it imports a model file, "
                "or model bytes with the model's folder)");
  TensorLayout l{data_type(tp.data_type(), "tensor " + std::string(what)),
                 std::vector<std::int64_t>(tp.dims().begin(), tp.dims().end()), 1};
  // The element count, checked against the data held before anything is
  // allocated: dims may promise far more than the model holds.
  for (auto d : l.dims) {
    if (d < 0) throw_error(ErrorKind::InvalidArgument, "ONNX tensor ", what, " has dim ", d);
    const auto u = static_cast<std::uint64_t>(d);
    if (u != 0 && l.numel > std::numeric_limits<std::uint64_t>::max() / 16 / u)
      throw_error(ErrorKind::InvalidArgument, "ONNX tensor ", what, " has dims too large to hold");
    l.numel *= u;
  }
  if (!tp.raw_data().empty() && tp.raw_data().size() != l.numel * size_of(l.dtype))
    throw_error(ErrorKind::InvalidArgument, "ONNX tensor ", what, " has ", tp.raw_data().size(),
                " bytes of raw data for ", l.numel, " elements of ", to_string(l.dtype));
  return l;
}

Tensor detail::tensor_of(const ::onnx::TensorProto& tp, std::string_view what) {
  const TensorLayout l = layout_of(tp, what);
  const DataType dt = l.dtype;
  const std::vector<std::int64_t>& dims = l.dims;
  const std::uint64_t n = l.numel;
  if (!tp.raw_data().empty()) {
    Tensor t = Tensor::empty(Dims(dims), dt);
    if (n) std::memcpy(t.raw_data(), tp.raw_data().data(), t.bytes());
    return t;
  }
  // Without raw data the values sit in the field ONNX keeps for the type:
  // float_data, double_data, int64_data, uint64_data (uint32, uint64), or
  // int32_data (the rest; f16 / bf16 as their bits).
  std::size_t have = 0;
  switch (dt) {
    case DataType::Float32: have = static_cast<std::size_t>(tp.float_data_size()); break;
    case DataType::Float64: have = static_cast<std::size_t>(tp.double_data_size()); break;
    case DataType::Int64: have = static_cast<std::size_t>(tp.int64_data_size()); break;
    case DataType::UInt32:
    case DataType::UInt64: have = static_cast<std::size_t>(tp.uint64_data_size()); break;
    default: have = static_cast<std::size_t>(tp.int32_data_size()); break;
  }
  if (have != n)
    throw_error(ErrorKind::InvalidArgument, "ONNX tensor ", what, " holds ", have,
                " values for ", n, " elements");
  Tensor t = Tensor::empty(Dims(dims), dt);
  if (!n) return t;
  switch (dt) {
    case DataType::Float32: copy_field<float>(tp.float_data(), t); break;
    case DataType::Float64: copy_field<double>(tp.double_data(), t); break;
    case DataType::Int64: copy_field<std::int64_t>(tp.int64_data(), t); break;
    case DataType::UInt32: copy_field<std::uint32_t>(tp.uint64_data(), t); break;
    case DataType::UInt64: copy_field<std::uint64_t>(tp.uint64_data(), t); break;
    case DataType::Int32: copy_field<std::int32_t>(tp.int32_data(), t); break;
    case DataType::Int8: copy_field<std::int8_t>(tp.int32_data(), t); break;
    case DataType::Int16: copy_field<std::int16_t>(tp.int32_data(), t); break;
    case DataType::UInt8: copy_field<std::uint8_t>(tp.int32_data(), t); break;
    case DataType::UInt16: copy_field<std::uint16_t>(tp.int32_data(), t); break;
    case DataType::Float16:
    case DataType::BFloat16: {
      auto* p = static_cast<std::uint16_t*>(t.raw_data());
      for (int i = 0; i < tp.int32_data_size(); ++i) p[i] = static_cast<std::uint16_t>(tp.int32_data(i));
      break;
    }
    default: copy_field<bool>(tp.int32_data(), t); break;
  }
  return t;
}

Tensor read_tensor_proto(const std::string& path) {
  const detail::FileBytes file(path, "ONNX tensor file");
  return tensor_from_bytes(file.view(), "'" + path + "'");
}

}  // namespace kiln::onnx

// kiln::onnx::export_model (kiln/onnx/export.h): the fetches and the ops
// they need are found first, the graph's inputs, initializers and output
// names fixed, then each needed op goes through its export-table entry
// (export_table.h) in program order.
#include <onnx/checker.h>

#include <cstring>
#include <deque>
#include <map>
#include <set>

#include "export_table.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/io/file.h"
#include "kiln/onnx/export.h"
#include "kiln/support/error.h"
#include "kiln/support/half.h"
#include "model_proto.h"

namespace kiln::onnx {

namespace detail {

std::string ExportState::fresh(std::string_view hint) {
  for (;;) {
    std::string n = std::string(hint) + "_" + std::to_string(next++);
    if (taken.insert(n).second) return n;
  }
}

std::string EmitContext::where() const {
  return "op #" + std::to_string(index_) + " '" + op_->name() + "'";
}

void EmitContext::unsupported(const std::string& what) const {
  throw_error(ErrorKind::Unimplemented, "ONNX export: kiln ", where(), ": ", what);
}

std::string EmitContext::in(std::size_t i) const {
  auto it = s_.names.find(op_->operand_source(static_cast<std::uint32_t>(i)));
  if (it == s_.names.end())
    throw_error(ErrorKind::Internal, "ONNX export: kiln ", where(), ": operand #", i,
                " has no ONNX name");
  return it->second;
}

std::string EmitContext::out(std::size_t i) {
  Value v = op_->result(static_cast<std::uint32_t>(i));
  auto it = s_.names.find(v);
  if (it != s_.names.end()) return it->second;
  std::string n = s_.fresh("v");
  s_.names.emplace(v, n);
  return n;
}

bool EmitContext::used(std::size_t i) const {
  Value v = op_->result(static_cast<std::uint32_t>(i));
  if (s_.fetched.count(v)) return true;
  for (OpOperand use : v.uses())
    if (s_.exported.count(use.owner())) return true;
  return false;
}

bool EmitContext::read_later(std::size_t i) const {
  const Value v = op_->operand_source(static_cast<std::uint32_t>(i));
  if (s_.fetched.count(v)) return true;  // a fetch sees the variable after the run
  for (OpOperand use : v.uses()) {
    Operation* user = use.owner();
    if (user == op_ || !s_.exported.count(user)) continue;
    auto p = s_.position.find(user);
    if (p != s_.position.end() && p->second > index_) return true;
  }
  return false;
}

DataType EmitContext::in_dtype(std::size_t i) const {
  return shaped_data_type(op_->operand_source(static_cast<std::uint32_t>(i)).type());
}

const std::vector<std::int64_t>& EmitContext::in_dims(std::size_t i) const {
  return shaped_dims(op_->operand_source(static_cast<std::uint32_t>(i)).type());
}

const std::vector<std::int64_t>& EmitContext::out_dims(std::size_t i) const {
  return shaped_dims(op_->result_type(static_cast<std::uint32_t>(i)));
}

::onnx::NodeProto& EmitContext::node(const std::string& op_type,
                                     const std::vector<std::string>& inputs,
                                     const std::vector<std::string>& outputs) {
  ::onnx::NodeProto& n = *s_.graph.add_node();
  n.set_op_type(op_type);
  n.set_name(s_.fresh(op_type));
  for (const auto& i : inputs) n.add_input(i);
  for (const auto& o : outputs) n.add_output(o);
  return n;
}

std::string EmitContext::node1(const std::string& op_type, const std::vector<std::string>& inputs,
                               ::onnx::NodeProto** made) {
  std::string o = fresh("t");
  ::onnx::NodeProto& n = node(op_type, inputs, {o});
  if (made) *made = &n;
  return o;
}

std::string EmitContext::constant(DataType dt, const std::vector<std::int64_t>& dims,
                                  std::string_view bytes) {
  std::string o = fresh("c");
  ::onnx::NodeProto& n = node("Constant", {}, {o});
  set_attr(n, "value", tensor_proto(dt, dims, bytes, where()));
  return o;
}

std::string EmitContext::const_i64(const std::vector<std::int64_t>& v) {
  return constant(DataType::Int64, {static_cast<std::int64_t>(v.size())},
                  {reinterpret_cast<const char*>(v.data()), v.size() * sizeof(std::int64_t)});
}

std::string EmitContext::value_bytes(DataType dt, double v) const {
  auto bytes_of = [](const auto& x) {
    return std::string(reinterpret_cast<const char*>(&x), sizeof(x));
  };
  switch (dt) {
    case DataType::Float32: return bytes_of(static_cast<float>(v));
    case DataType::Float64: return bytes_of(v);
    case DataType::Int32: return bytes_of(static_cast<std::int32_t>(v));
    case DataType::Int64: return bytes_of(static_cast<std::int64_t>(v));
    case DataType::Bool: return bytes_of(static_cast<bool>(v != 0));
    case DataType::Float16: return bytes_of(float_to_half(static_cast<float>(v)));
    case DataType::BFloat16: return bytes_of(float_to_bfloat16(static_cast<float>(v)));
    case DataType::Int8: return bytes_of(static_cast<std::int8_t>(v));
    case DataType::Int16: return bytes_of(static_cast<std::int16_t>(v));
    case DataType::UInt8: return bytes_of(static_cast<std::uint8_t>(v));
    case DataType::UInt16: return bytes_of(static_cast<std::uint16_t>(v));
    case DataType::UInt32: return bytes_of(static_cast<std::uint32_t>(v));
    case DataType::UInt64: return bytes_of(static_cast<std::uint64_t>(v));
    case DataType::Undefined: break;
  }
  unsupported("a constant of dtype undefined");
}

std::string EmitContext::scalar(DataType dt, double v) { return constant(dt, {}, value_bytes(dt, v)); }

void set_attr(::onnx::NodeProto& n, const std::string& name, std::int64_t v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto_AttributeType_INT);
  a->set_i(v);
}

void set_attr(::onnx::NodeProto& n, const std::string& name, float v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto_AttributeType_FLOAT);
  a->set_f(v);
}

void set_attr(::onnx::NodeProto& n, const std::string& name, const std::string& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto_AttributeType_STRING);
  a->set_s(v);
}

void set_attr(::onnx::NodeProto& n, const std::string& name, const std::vector<std::int64_t>& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto_AttributeType_INTS);
  for (auto x : v) a->add_ints(x);
}

void set_attr(::onnx::NodeProto& n, const std::string& name, const ::onnx::TensorProto& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto_AttributeType_TENSOR);
  *a->mutable_t() = v;
}

std::int32_t onnx_elem_type(DataType dt, const std::string& what) {
  if (auto t = detail::onnx_elem_type(dt)) return *t;
  throw_error(ErrorKind::Unimplemented, "ONNX export: ", what, " has dtype ", to_string(dt),
              ", which ONNX has no element type for");
}

::onnx::TensorProto tensor_proto(DataType dt, const std::vector<std::int64_t>& dims,
                                 std::string_view bytes, const std::string& what) {
  ::onnx::TensorProto t;
  t.set_data_type(onnx_elem_type(dt, what));
  for (auto d : dims) t.add_dims(d);
  t.set_raw_data(std::string(bytes));
  return t;
}

const ExportTable& export_table() {
  static const ExportTable table = [] {
    ExportTable t;
    add_export_elementwise(t);
    add_export_nn(t);
    add_export_tensor(t);
    add_export_shape(t);
    add_export_indexing(t);
    return t;
  }();
  return table;
}

}  // namespace detail

namespace {

constexpr std::int64_t kExportOpset = 17;
constexpr std::int64_t kIrVersion = 8;  // what ONNX 1.12 writes for opset 17

// A graph input or output: its name, dtype and dims (-1: symbolic, named
// `<name>_dim<i>` when `name_dims`, else left unnamed).
void add_value_info(::onnx::ValueInfoProto& vi, const std::string& name, Type type,
                    const std::string& what, bool name_dims) {
  vi.set_name(name);
  auto* tt = vi.mutable_type()->mutable_tensor_type();
  tt->set_elem_type(detail::onnx_elem_type(shaped_data_type(type), what));
  auto* shape = tt->mutable_shape();
  const auto& dims = shaped_dims(type);
  for (std::size_t i = 0; i < dims.size(); ++i) {
    auto* d = shape->add_dim();
    if (dims[i] >= 0) d->set_dim_value(dims[i]);
    else if (name_dims) d->set_dim_param(name + "_dim" + std::to_string(i));
  }
}

class GraphExporter {
 public:
  GraphExporter(const Program& program, const Scope& scope, ::onnx::GraphProto& graph)
      : program_(program), scope_(scope), state_{graph, kExportOpset, {}, {}, 0, {}, {}, {}} {}

  void run(const std::vector<std::string>& feeds, const std::vector<FetchTarget>& fetches) {
    resolve_fetches(fetches);
    find_needed_ops();
    add_inputs(feeds);
    reserve_output_names();
    emit_ops();
    add_outputs();
  }

 private:
  struct Output {
    Value value;
    std::string name;
  };

  // Each fetch as (value, output name); kiln::Error for a bad one.
  void resolve_fetches(const std::vector<FetchTarget>& fetches) {
    if (fetches.empty())
      throw_error(ErrorKind::InvalidArgument, "ONNX export: no fetches (the graph needs an output)");
    Block& block = program_.block();
    for (std::size_t i = 0; i < fetches.size(); ++i) {
      const FetchTarget& f = fetches[i];
      Output o;
      if (!f.value) {
        for (Operation* op = block.front(); op; op = op->next_in_block())
          if (auto fo = FetchOp::dyn_cast(op); fo && fo.attrs().name == f.name) {
            o.value = op->operand_source(0);
            break;
          }
        if (f.name.empty() || !o.value)
          throw_error(ErrorKind::NotFound, "ONNX export: fetch #", i, " '", f.name,
                      "' is no kiln.fetch op of the program");
        o.name = f.name;
      } else {
        o.value = f.value;
        Operation* def = f.value.defining_op();
        if (!def || def->parent_block() != &block)
          throw_error(ErrorKind::InvalidArgument, "ONNX export: fetch #", i,
                      " is not computed by the program's top-level block (a value of another "
                      "program, e.g. the training program rather than its for-test clone, or of "
                      "a nested block)");
        for (Operation* op = block.front(); op && o.name.empty(); op = op->next_in_block())
          if (auto fo = FetchOp::dyn_cast(op); fo && op->operand_source(0) == f.value)
            o.name = fo.attrs().name;
        if (o.name.empty()) o.name = "fetch_" + std::to_string(i);
      }
      if (!is_shaped(o.value.type()))
        throw_error(ErrorKind::Unimplemented, "ONNX export: fetch '", o.name, "' is a ",
                    o.value.type().to_string(), ", not a tensor");
      for (const auto& p : outputs_)
        if (p.name == o.name)
          throw_error(ErrorKind::InvalidArgument, "ONNX export: two fetches are named '", o.name,
                      "'");
      outputs_.push_back(o);
      state_.fetched.insert(o.value);
    }
  }

  // The top-level ops the fetches transitively read.
  void find_needed_ops() {
    std::deque<Operation*> work;
    for (const auto& o : outputs_) work.push_back(o.value.defining_op());
    while (!work.empty()) {
      Operation* op = work.front();
      work.pop_front();
      if (!op || !state_.exported.insert(op).second) continue;
      for (std::uint32_t i = 0; i < op->num_operands(); ++i)
        work.push_back(op->operand_source(i).defining_op());
    }
  }

  void add_inputs(const std::vector<std::string>& feeds) {
    std::map<std::string, Operation*, std::less<>> data_ops;
    for (Operation* op = program_.block().front(); op; op = op->next_in_block())
      if (auto d = DataOp::dyn_cast(op)) data_ops.emplace(d.attrs().name, op);
    std::set<std::string> seen;
    for (std::size_t i = 0; i < feeds.size(); ++i) {
      const std::string& name = feeds[i];
      if (name.empty())
        throw_error(ErrorKind::InvalidArgument, "ONNX export: feed #", i, " has an empty name");
      if (!seen.insert(name).second)
        throw_error(ErrorKind::InvalidArgument, "ONNX export: feed '", name, "' is given twice");
      auto it = data_ops.find(name);
      if (it == data_ops.end())
        throw_error(ErrorKind::NotFound, "ONNX export: feed '", name,
                    "' is no kiln.data op of the program");
      Value v = it->second->result(0);
      claim(name, "feed");
      feed_names_.insert(name);
      state_.names.emplace(v, name);
      add_value_info(*state_.graph.add_input(), name, v.type(), "feed '" + name + "'", true);
    }
    for (Operation* op : state_.exported)
      if (auto d = DataOp::dyn_cast(op); d && !seen.count(d.attrs().name))
        throw_error(ErrorKind::InvalidArgument, "ONNX export: the fetches need kiln.data '",
                    d.attrs().name, "', which is not among the feeds");
  }

  // Output names are taken before any intermediate name is made up; a
  // fetched value that an exported op computes is written under its output
  // name directly (the others get an Identity in add_outputs).
  void reserve_output_names() {
    for (const auto& [name, param] : program_.parameters()) {
      (void)param;
      param_names_.insert(name);
    }
    for (auto& o : outputs_) {
      if (param_names_.count(o.name))
        throw_error(ErrorKind::InvalidArgument, "ONNX export: fetch '", o.name,
                    "' is named like a parameter of the program");
      claim(o.name, "fetch");
      Operation* def = o.value.defining_op();
      if (!state_.names.count(o.value) && !DataOp::dyn_cast(def) && !ParameterOp::dyn_cast(def))
        state_.names.emplace(o.value, o.name);
    }
    for (const auto& name : param_names_) state_.taken.insert(name);
  }

  void emit_ops() {
    const auto& table = detail::export_table();
    std::size_t index = 0;
    for (Operation* op = program_.block().front(); op; op = op->next_in_block())
      state_.position.emplace(op, index++);
    index = 0;
    for (Operation* op = program_.block().front(); op; op = op->next_in_block(), ++index) {
      if (!state_.exported.count(op) || DataOp::dyn_cast(op)) continue;
      if (auto p = ParameterOp::dyn_cast(op)) {
        add_initializer(p.parameter_name(), op->result_type(0));
        state_.names.emplace(op->result(0), p.parameter_name());
        continue;
      }
      detail::EmitContext ctx(state_, op, index);
      auto it = table.find(op->name());
      if (it == table.end())
        throw_error(ErrorKind::Unimplemented, "ONNX export: kiln ", ctx.where(),
                    " has no ONNX equivalent (kiln exports ", table.size(), " op kinds)");
      for (std::uint32_t i = 0; i < op->num_operands(); ++i)
        if (!is_shaped(op->operand_source(i).type()))
          ctx.unsupported("operand #" + std::to_string(i) + " is a " +
                          op->operand_source(i).type().to_string() + ", not a tensor");
      for (std::uint32_t i = 0; i < op->num_results(); ++i) {
        if (!is_shaped(op->result_type(i)))
          ctx.unsupported("result #" + std::to_string(i) + " is a " +
                          op->result_type(i).to_string() + ", not a tensor");
        detail::onnx_elem_type(shaped_data_type(op->result_type(i)),
                               "kiln " + ctx.where() + " result #" + std::to_string(i));
      }
      // An in-place op overwrites its operand's variable: later readers of
      // the operand would see the result in kiln but the input in ONNX.
      if (op->has_trait<Inplace>() && !BatchNormOp::dyn_cast(op) && !FusedBatchNormOp::dyn_cast(op))
        for (std::uint32_t i = 0; i < op->num_operands(); ++i)
          if (ctx.read_later(i))
            ctx.unsupported("it overwrites operand #" + std::to_string(i) +
                            " in place and a later op (or a fetch) reads that operand");
      it->second(ctx);
    }
  }

  void add_initializer(const std::string& name, Type type) {
    if (!initialized_.insert(name).second) return;
    if (feed_names_.count(name))
      throw_error(ErrorKind::InvalidArgument, "ONNX export: feed '", name,
                  "' is named like a parameter the fetches read (a graph name used twice)");
    const Variable* var = scope_.find_var(name);
    if (!var || !var->is<Tensor>() || !var->get<Tensor>().is_initialized())
      throw_error(ErrorKind::NotFound, "ONNX export: parameter '", name,
                  "' has no initialized tensor in the scope (run the startup program or load "
                  "the weights first)");
    const Tensor& t = var->get<Tensor>();
    if (!t.place().is_cpu())
      throw_error(ErrorKind::Unimplemented, "ONNX export: parameter '", name, "' is on ",
                  t.place().to_string(), "; kiln exports CPU tensors");
    const auto dims = t.dims().to_vector();
    const auto& want = shaped_dims(type);
    bool dims_ok = dims.size() == want.size();
    for (std::size_t i = 0; dims_ok && i < dims.size(); ++i)
      dims_ok = want[i] < 0 || want[i] == dims[i];
    if (t.dtype() != shaped_data_type(type) || !dims_ok)
      throw_error(ErrorKind::InvalidArgument, "ONNX export: parameter '", name,
                  "' holds a tensor of ", t.dtype() == DataType::Undefined ? "no dtype" : to_string(t.dtype()),
                  " [", t.dims().to_string(), "]; the program declares ", type.to_string());
    *state_.graph.add_initializer() = detail::tensor_proto(
        t.dtype(), dims, {static_cast<const char*>(t.raw_data()), t.bytes()},
        "parameter '" + name + "'");
    state_.graph.mutable_initializer(state_.graph.initializer_size() - 1)->set_name(name);
  }

  void add_outputs() {
    for (const auto& o : outputs_) {
      const std::string& have = state_.names.at(o.value);
      if (have != o.name) {
        ::onnx::NodeProto& n = *state_.graph.add_node();
        n.set_op_type("Identity");
        n.set_name(state_.fresh("Identity"));
        n.add_input(have);
        n.add_output(o.name);
      }
      add_value_info(*state_.graph.add_output(), o.name, o.value.type(),
                     "fetch '" + o.name + "'", false);
    }
  }

  void claim(const std::string& name, const char* what) {
    if (!state_.taken.insert(name).second)
      throw_error(ErrorKind::InvalidArgument, "ONNX export: ", what, " name '", name,
                  "' is already a name of the graph (a feed, a fetch or a parameter)");
  }

  const Program& program_;
  const Scope& scope_;
  detail::ExportState state_;
  std::vector<Output> outputs_;
  std::set<std::string> param_names_, initialized_, feed_names_;
};

}  // namespace

std::string export_model_to_bytes(const Program& program, const Scope& scope,
                                  const std::vector<std::string>& feeds,
                                  const std::vector<FetchTarget>& fetches,
                                  const ExportOptions& options) {
  if (options.opset != kExportOpset)
    throw_error(ErrorKind::Unimplemented, "ONNX export: opset ", options.opset,
                " requested; kiln exports opset ", kExportOpset);
  ::onnx::ModelProto model;
  model.set_ir_version(kIrVersion);
  model.set_producer_name(options.producer_name);
  auto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(options.opset);
  ::onnx::GraphProto& graph = *model.mutable_graph();
  graph.set_name(options.graph_name);
  GraphExporter(program, scope, graph).run(feeds, fetches);
  // ONNX's own checker on what the emitters wrote: a model it rejects is a
  // bug of kiln's exporter, reported before anything is written.
  try {
    ::onnx::checker::check_model(model);
  } catch (const std::exception& e) {
    throw_error(ErrorKind::Internal, "ONNX export: the model fails ONNX's checker (a bug of kiln's "
                "exporter): ", e.what());
  }
  std::string bytes;
  if (!model.SerializeToString(&bytes))
    throw_error(ErrorKind::Internal, "ONNX export: the model could not be serialized (over 2 GiB?)");
  return bytes;
}

void export_model(const Program& program, const Scope& scope, const std::vector<std::string>& feeds,
                  const std::vector<FetchTarget>& fetches, const std::string& path,
                  const ExportOptions& options) {
  const std::string bytes = export_model_to_bytes(program, scope, feeds, fetches, options);
  write_file_atomic(path, bytes, "ONNX model");
}

}  // namespace kiln::onnx

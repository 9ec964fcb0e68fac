// Private to src/onnx: the table from kiln op kinds to ONNX emitters, the
// exporter's counterpart of op_table.h. One entry per kiln op name; each
// family file (export_ops_*.cc) adds its entries. An emitter gets the op,
// reads its operands' ONNX names with in(i), and adds the nodes that compute
// its results under the names out(i); it throws kiln::Error (Unimplemented)
// through unsupported() for an attribute value or form ONNX cannot express.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kiln/ir/operation.h"
#include "kiln/support/data_type.h"

namespace kiln::onnx::detail {

// The names and nodes of the graph being written, shared by every emitter.
struct ExportState {
  ::onnx::GraphProto& graph;
  std::int64_t opset;
  std::unordered_map<Value, std::string> names;  // kiln value → ONNX name
  std::unordered_set<std::string> taken;         // every name in the graph
  std::int64_t next = 0;
  std::unordered_set<Operation*> exported;       // the ops the fetches need
  std::unordered_set<Value> fetched;
  std::unordered_map<const Operation*, std::size_t> position;  // in the program's block

  // A name nobody uses yet: "<hint>_<n>".
  std::string fresh(std::string_view hint);
};

class EmitContext {
 public:
  EmitContext(ExportState& s, Operation* op, std::size_t index) : s_(s), op_(op), index_(index) {}

  Operation* op() const { return op_; }
  // "op #<index> 'kiln.conv2d'" (index: its position in the program's block)
  std::string where() const;
  [[noreturn]] void unsupported(const std::string& what) const;

  std::size_t num_operands() const { return op_->num_operands(); }
  // The ONNX name of operand i; of result i (given on first use).
  std::string in(std::size_t i) const;
  std::string out(std::size_t i);
  // Whether anything exported reads result i.
  bool used(std::size_t i) const;
  // Whether an exported op after this one reads operand i (which an
  // in-place op overwrites in kiln; ONNX has no in-place nodes).
  bool read_later(std::size_t i) const;
  DataType in_dtype(std::size_t i) const;
  const std::vector<std::int64_t>& in_dims(std::size_t i) const;
  const std::vector<std::int64_t>& out_dims(std::size_t i) const;

  std::string fresh(std::string_view hint = "t") { return s_.fresh(hint); }
  // Adds a node; its name is "<op_type>_<n>".
  ::onnx::NodeProto& node(const std::string& op_type, const std::vector<std::string>& inputs,
                          const std::vector<std::string>& outputs);
  // Convenience: a node with one output, a fresh name; returns the name.
  std::string node1(const std::string& op_type, const std::vector<std::string>& inputs,
                    ::onnx::NodeProto** made = nullptr);

  // Constant nodes: a 1-D int64 tensor, a rank-0 scalar of `dt`, any tensor.
  std::string const_i64(const std::vector<std::int64_t>& v);
  std::string scalar(DataType dt, double v);
  // One value of `dt` as its bytes (any dtype but undefined: kiln::Error).
  std::string value_bytes(DataType dt, double v) const;
  std::string constant(DataType dt, const std::vector<std::int64_t>& dims, std::string_view bytes);

 private:
  ExportState& s_;
  Operation* op_;
  std::size_t index_;
};

// Attributes of a node.
void set_attr(::onnx::NodeProto& n, const std::string& name, std::int64_t v);
void set_attr(::onnx::NodeProto& n, const std::string& name, float v);
void set_attr(::onnx::NodeProto& n, const std::string& name, const std::string& v);
void set_attr(::onnx::NodeProto& n, const std::string& name, const std::vector<std::int64_t>& v);
void set_attr(::onnx::NodeProto& n, const std::string& name, const ::onnx::TensorProto& v);

// ONNX's element type of a kiln dtype; kiln::Error naming `what` for a
// dtype the exporter does not cover.
std::int32_t onnx_elem_type(DataType dt, const std::string& what);
// A TensorProto of `dt` with `dims` and raw data `bytes`.
::onnx::TensorProto tensor_proto(DataType dt, const std::vector<std::int64_t>& dims,
                                 std::string_view bytes, const std::string& what);

using Emitter = std::function<void(EmitContext& c)>;
// An emitter that maps the op to one ONNX node of `onnx_type` with the same
// operands and results.
Emitter same_as(std::string onnx_type);
using ExportTable = std::map<std::string, Emitter, std::less<>>;

const ExportTable& export_table();

// The family files' entries.
void add_export_elementwise(ExportTable& t);
void add_export_nn(ExportTable& t);
void add_export_tensor(ExportTable& t);
void add_export_shape(ExportTable& t);
void add_export_indexing(ExportTable& t);

// An axis of a rank-`rank` value, counted from the front (kiln's negative
// axes count from the back).
inline std::int64_t norm_axis(std::int64_t axis, std::size_t rank) {
  return axis < 0 ? axis + static_cast<std::int64_t>(rank) : axis;
}

}  // namespace kiln::onnx::detail

// Private to src/onnx: the table from ONNX op types to kiln op builders.
// One entry per ONNX op type; each family file (ops_*.cc) adds its entries.
// A builder gets the node's inputs as kiln values (null for an omitted
// optional input) and returns one value per node output; it throws
// kiln::Error (Unimplemented) for an attribute value or form it does not
// cover, through the helpers below, which name the node.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/ir/builder.h"
#include "kiln/ir/tensor_attribute.h"
#include "kiln/runtime/tensor.h"

namespace kiln::onnx::detail {

// The values of a node's inputs known at import, one per input (null where
// not known). Indexing past the node's inputs gives null too: a builder may
// look at input i's value before c.input(i) reports that the node lacks it.
class KnownInputs : public std::vector<const Tensor*> {
 public:
  const Tensor* operator[](std::size_t i) const {
    return i < size() ? std::vector<const Tensor*>::operator[](i) : nullptr;
  }
};

struct NodeContext {
  Builder& b;
  const ::onnx::NodeProto& node;
  std::int64_t opset;            // the model's ai.onnx opset
  std::vector<Value> inputs;     // null where the node omits an optional input
  // The values of the inputs known at import (initializers, Constant
  // nodes); null elsewhere. Ops whose ONNX inputs kiln takes as attributes
  // (Reshape's shape, Unsqueeze's axes) read them here.
  KnownInputs constants;
  // A builder that knows its outputs' values at import (Shape of static
  // dims) puts them here, one per output (uninitialized: not known).
  std::vector<Tensor> known_outputs;
  // ONNX sequences are imported as lists of values whose length is known
  // at import: input i's elements where it is a sequence (its `inputs`
  // entry is then null), else null. A builder whose output k is a sequence
  // puts its elements in sequence_outputs[k] and returns a null value there.
  std::vector<const std::vector<Value>*> sequences;
  std::map<std::size_t, std::vector<Value>> sequence_outputs;
  // Imports a subgraph attribute's graph into `block` (a detached block),
  // binding its inputs to `inputs`; names it does not define resolve in the
  // node's scope (outer values, used directly). Returns its outputs.
  std::function<std::vector<Value>(const ::onnx::GraphProto&, Block&, const std::vector<Value>&)>
      import_subgraph;
  // The value an ONNX name refers to in the node's scope (null if none):
  // for ops that name values in attributes (Gradient's xs and y).
  std::function<Value(const std::string&)> lookup;

  // "node 'name' (OpType)"
  std::string where() const;
  [[noreturn]] void unsupported(const std::string& what) const;
  // Input i, or kiln::Error naming the node when it is missing.
  Value input(std::size_t i) const;
  const ::onnx::AttributeProto* attribute(const std::string& name) const;
  std::int64_t int_attr(const std::string& name, std::int64_t fallback) const;
  float float_attr(const std::string& name, float fallback) const;
  std::vector<std::int64_t> ints_attr(const std::string& name) const;
  bool has_attr(const std::string& name) const { return attribute(name) != nullptr; }
  // Input i's value as integers, known at import; kiln::Error naming the
  // node and `what` when the input is computed at run time.
  std::vector<std::int64_t> constant_ints(std::size_t i, const std::string& what) const;
  // `axes` of a rank-`rank` input counted from the front; kiln::Error
  // naming the node when one is out of range or named twice.
  std::vector<std::int64_t> distinct_axes(const std::vector<std::int64_t>& axes, std::int64_t rank) const;
  // Integers from attribute `attr` before opset `input_since`, since then
  // from input i (constant_ints; empty when the input is absent).
  std::vector<std::int64_t> ints_input_or_attr(std::size_t i, const std::string& attr, std::int64_t input_since,
                                               const std::string& what) const;
  // Input i's elements; kiln::Error naming the node when it is no sequence.
  const std::vector<Value>& sequence(std::size_t i) const;
  // The one integer input i holds, known at import; kiln::Error naming the
  // node and `what` when it is computed at run time or holds another count.
  std::int64_t constant_int(std::size_t i, const std::string& what) const;
};

// An ONNX TensorProto's element type, dims and element count, checked
// (its data not external, no negative dim, raw data of the size they give);
// kiln::Error naming the tensor as `what`.
struct TensorLayout {
  DataType dtype;
  std::vector<std::int64_t> dims;
  std::uint64_t numel;
};
TensorLayout layout_of(const ::onnx::TensorProto& t, std::string_view what);
// An ONNX TensorProto as a kiln tensor (see kiln/onnx/import.h).
Tensor tensor_of(const ::onnx::TensorProto& t, std::string_view what);
// A tensor's bytes as a builtin.constant; its value.
Value constant_value(Builder& b, const Tensor& t);
// A builtin.constant of `a`; its value.
Value constant_of(Builder& b, TensorAttribute a);

// x padded by `pads` (1-D i32/i64 [2·rank]: begins, then ends; negative
// crops) computed at run time, in ONNX Pad's mode constant (with the scalar
// `fill`), edge or reflect. x's dims must be known at import.
Value pad_at_run_time(NodeContext& c, Value x, Value pads, Value fill, const std::string& mode);

using NodeBuilder = std::vector<Value> (*)(NodeContext& ctx);

// The newest default-domain opset kiln imports (ONNX 1.19's).
inline constexpr std::int64_t kMaxOpset = 24;

struct OpEntry {
  NodeBuilder build;
  std::int64_t since = 1;          // the first opset version the builder covers
  std::int64_t until = kMaxOpset;  // the last
};

using OpTable = std::map<std::string, OpEntry, std::less<>>;

// The whole table (built once).
const OpTable& op_table();

// The family files' entries.
void add_elementwise_ops(OpTable& t);
void add_tensor_ops(OpTable& t);
void add_constant_ops(OpTable& t);
void add_reduce_ops(OpTable& t);
void add_nn_ops(OpTable& t);
void add_math_ops(OpTable& t);
void add_layout_ops(OpTable& t);
void add_resize_ops(OpTable& t);
void add_control_flow_ops(OpTable& t);
void add_random_ops(OpTable& t);
void add_indexing_ops(OpTable& t);
void add_loss_ops(OpTable& t);
void add_shape_ops(OpTable& t);
void add_sequence_ops(OpTable& t);
void add_rnn_ops(OpTable& t);
void add_quantize_ops(OpTable& t);
void add_attention_ops(OpTable& t);

// ONNX's training domain (ops_training.cc): its own table, its own opset.
inline constexpr std::string_view kTrainingDomain = "ai.onnx.preview.training";
const OpTable& training_op_table();
void add_training_ops(OpTable& t);

}  // namespace kiln::onnx::detail

// Private to src/onnx: import-time fusion. Exporters write a layer norm, a
// GELU or an attention as a chain of small ONNX nodes (PyTorch's opset-13
// export of nn.LayerNorm is ten of them); the importer recognizes such a
// chain where it starts and builds kiln's one fused op instead — what ONNX
// Runtime's graph optimizer does after loading, done while importing. A
// chain is fused only when nothing outside it reads its intermediate
// values (no other node, no graph output) and its constants have the values
// the fused op assumes; otherwise its nodes import one by one as before.
#pragma once

#include <onnx/onnx_pb.h>

#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kiln/ir/builder.h"
#include "kiln/runtime/tensor.h"

namespace kiln::onnx::detail {

// Who reads and who makes each name of one graph.
struct GraphUses {
  explicit GraphUses(const ::onnx::GraphProto& g);
  std::unordered_map<std::string, std::vector<int>> consumers;  // name -> nodes reading it
  std::unordered_map<std::string, int> producer;                // name -> the node making it
  std::unordered_set<std::string> graph_outputs;
};

// What a matcher asks the importer: a name's kiln value (null when it is
// not defined yet) and its value when known at import (null otherwise);
// `parameter` adds a tensor the matcher computed as a new initializer of
// that (unused) name and returns its value.
struct FusionScope {
  std::function<Value(const std::string&)> value;
  std::function<const Tensor*(const std::string&)> constant;
  std::function<Value(const std::string&, Tensor)> parameter;
  std::int64_t opset = 13;  // the model's ai.onnx opset
};

// A fused chain: the nodes it covers (not to be imported again) and the
// ONNX name its result defines.
struct Fused {
  std::vector<int> nodes;
  std::string output;
  Value value;
};

// Tries every fusion whose chain starts at node `first`; on a match, builds
// the fused op with `b` and returns it. Never throws for a chain it cannot
// fuse (nullopt).
std::optional<Fused> fuse_at(const ::onnx::GraphProto& g, const GraphUses& uses, int first,
                             Builder& b, const FusionScope& scope);

}  // namespace kiln::onnx::detail

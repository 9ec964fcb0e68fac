// What an ONNX model file declares, read without importing it: its opsets,
// its graph's inputs (those that are not initializers) and outputs with
// their element types and dims (symbolic dims by name), its initializers,
// and how many nodes of each op type it has — what `kiln-onnx info` prints.
// The protobuf classes stay inside the implementation (src/onnx/): this
// header needs no ONNX or protobuf headers.
//
// Errors are kiln::Error naming the file (with the system's reason where
// it has one): NotFound when it does not exist, Unavailable when it cannot
// be opened otherwise, InvalidArgument for a folder or when it is not an
// ONNX ModelProto (not protobuf, or truncated) or has no graph, DataLoss
// when reading it fails.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/support/data_type.h"

namespace kiln::onnx {

// A graph input or output as the model declares it.
struct TensorInfo {
  std::string name;
  // ONNX's element type name ("float", "int64", "bool", …; "undefined" when
  // the model gives none) — kiln supports a subset, so this is not a DataType.
  std::string elem_type;
  // -1 where a dim is symbolic or unknown; dim_params holds its name ("batch"),
  // empty for a fixed or unnamed dim. No shape at all: has_shape false.
  std::vector<std::int64_t> dims;
  std::vector<std::string> dim_params;
  bool has_shape = false;
};

struct ModelInfo {
  std::int64_t ir_version = 0;
  std::string producer;               // "pytorch 1.13", or empty
  std::map<std::string, std::int64_t> opsets;  // domain ("" = ai.onnx) → version
  std::vector<TensorInfo> inputs;     // graph inputs that are not initializers
  std::vector<TensorInfo> outputs;
  std::size_t num_initializers = 0;
  std::size_t num_nodes = 0;
  // "Add", or "domain:Op" for ops outside the default domain → count;
  // nodes of subgraphs (If, Loop, Scan bodies) included.
  std::map<std::string, std::size_t> op_counts;
};

// The kiln dtype of an input's or output's element type; nullopt where kiln
// has none (string, complex, undefined).
std::optional<DataType> data_type_of(const TensorInfo& t);

// From a file; `what` in errors is its path.
ModelInfo read_model_info(const std::string& path);
// From the bytes of a serialized ModelProto; `what` names them in errors.
ModelInfo read_model_info_from_bytes(std::string_view bytes, std::string_view what = "model");

// info as text: one line each for the IR version, producer and opsets, one
// per input and output ("  x: float [batch, 3, 224, 224]"), then the op
// counts, most frequent first.
std::string to_string(const ModelInfo& info);

}  // namespace kiln::onnx

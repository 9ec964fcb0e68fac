// Importing an ONNX model as a kiln program (seed 002's IR is the target;
// ONNX is a format, not a runtime): kiln::onnx::import_model reads a
// ModelProto and builds a main program whose data ops are the graph's
// inputs (initializers excluded) and whose kiln.fetch ops, named like the
// graph's outputs, return them. Initializers become persistable parameters
// that the startup program sets, so append_backward and the optimizers work
// on an imported model as on one built by the frontend. Each node becomes
// kiln ops through one table entry per ONNX op type (src/onnx/op_table.h),
// covering a range of opset versions (the default domain, and
// ai.onnx.preview.training's optimizers and Gradient in a table of their
// own); If, Loop and Scan become kiln.if and
// kiln.while with their subgraphs as regions; symbolic dims stay dynamic.
//
// Anything kiln cannot import is a kiln::Error naming the node (its name and
// op type) and what is missing: the op, its opset version, an attribute
// value or a dtype; import_problems lists all of them at once. Not yet
// imported: sparse initializers. The reverse direction is
// kiln/onnx/export.h.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kiln/ir/program.h"
#include "kiln/onnx/model_info.h"
#include "kiln/runtime/tensor.h"

namespace kiln::onnx {

struct ImportedModel {
  Program main;
  Program startup;                    // sets the initializers' parameters
  std::vector<std::string> inputs;    // the data ops' names = feed names, in graph order
  std::vector<std::string> outputs;   // the kiln.fetch ops' names = fetch names, in graph order
  std::int64_t opset = 0;             // of the default (ai.onnx) domain
  std::int64_t training_opset = 0;    // of ai.onnx.preview.training; 0: not imported
  ModelInfo info;                     // what the model declares (kiln/onnx/model_info.h)
};

// kiln::Error: the file's errors (kiln/onnx/model_info.h), an opset of the
// default domain outside 1…24, and each node kiln cannot import.
//
// Memory: the file is read once; an initializer stored as raw data (what
// exporters write) is copied by the protobuf parse and then held, without
// another copy, by the startup program's constant, and once more by the
// scope the startup program runs in. A weight of more than 65536 elements
// is a held attribute (kiln/ir/tensor_attribute.h): its bytes are freed
// with the last op carrying it, so to keep a model's weights once, in the
// scope, run the startup program, evict it from the executor and drop it:
//   exe.run(model.startup); exe.evict(model.startup); model.startup = {};
// Smaller ones are uniqued constants, kept for the process's life.
//
// External data (weights kept in side files beside the model): import_model
// reads them relative to the model file's folder; import_model_from_bytes
// relative to `base_dir` (empty: no folder, and a tensor with external data
// is an error). A location outside that folder (an absolute path, a ".."
// part, a link leading out), a missing side file, an offset or length past
// its end or a length other than the tensor's byte size: kiln::Error naming
// the tensor and the side file.
ImportedModel import_model(const std::string& path);
ImportedModel import_model_from_bytes(std::string_view bytes, std::string_view what = "model",
                                     const std::string& base_dir = {});

// Everything in the model kiln cannot import, at once: the messages
// import_model would raise, one per graph input, initializer or node that
// fails (a node reading what failed is skipped: its error would repeat the
// cause). Empty when import_model succeeds. kiln::Error only for a file
// that cannot be read or is not ONNX. `info`, when given, receives what the
// model declares (the file is read and parsed once for both).
std::vector<std::string> import_problems(const std::string& path, ModelInfo* info = nullptr);
std::vector<std::string> import_problems_from_bytes(std::string_view bytes,
                                                    std::string_view what = "model",
                                                    const std::string& base_dir = {},
                                                    ModelInfo* info = nullptr);

// A serialized onnx.TensorProto (the backend test suite's input_N.pb and
// output_N.pb) as a kiln tensor: float, double, int32, int64 and bool.
// kiln::Error naming `what` and the dtype for the others, or a bad file.
Tensor read_tensor_proto(const std::string& path);
Tensor tensor_from_bytes(std::string_view bytes, std::string_view what = "tensor");

}  // namespace kiln::onnx

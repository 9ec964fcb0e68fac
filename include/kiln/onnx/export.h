// Exporting a kiln inference program as an ONNX model (the reverse of
// kiln/onnx/import.h): the program's kiln.data ops named as feeds become the
// graph's inputs, the fetched values its outputs, the parameters it reads
// (their tensors taken from a scope) its initializers. Each kiln op kind maps
// to ONNX nodes through one table entry (src/onnx/export_table.h); ops that
// ONNX lacks as one node are composed (gelu, rms_norm, scaled dot-product
// attention). A dim kiln does not know (-1) is a symbolic dim in ONNX.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/exec/execution_options.h"
#include "kiln/ir/program.h"
#include "kiln/runtime/scope.h"

namespace kiln::onnx {

struct ExportOptions {
  // The ai.onnx opset the model declares. 17 is the first with
  // LayerNormalization (kiln's layer_norm as one node, not six) and the
  // newest kiln imports; the emitters target it and nothing else yet.
  std::int64_t opset = 17;
  std::string graph_name = "kiln";
  std::string producer_name = "kiln";
};

// The ONNX model (a serialized ModelProto) of `program`, an inference
// program (the for-test clone of a trained one, kiln/frontend/clone_for_test.h):
//   feeds   names of its kiln.data ops, the graph's inputs in this order;
//   fetches values of its top-level block, or names of its kiln.fetch ops,
//           the graph's outputs in this order, named like the kiln.fetch op
//           of the value when there is one, else "fetch_<index>";
//   scope   holds every parameter the fetches need (its find_var: the scope
//           or its ancestors), written as initializers.
// Only the ops the fetches need are exported (a loss computed beside the
// logits is left out).
//
// kiln::Error naming what is wrong: no fetches; a feed name that is empty,
// repeated or not a kiln.data op (NotFound); a fetch name that is no
// kiln.fetch op (NotFound); a fetch value that is null or not computed by
// the program's top-level block; a kiln.data op a fetch needs that is not
// among the feeds; a graph name used twice (a fetch named like a feed or a
// parameter); a dtype ONNX export does not cover (f32, f64, i32, i64 and
// bool are); a parameter the scope lacks or holds with another dtype or
// shape; an opset other than 17; and each op without an ONNX equivalent
// (Unimplemented), naming its kind and its position in the program. The
// model is run through ONNX's checker before it is returned (a model it
// rejects would be kiln's bug: kiln::Error, Internal).
std::string export_model_to_bytes(const Program& program, const Scope& scope,
                                  const std::vector<std::string>& feeds,
                                  const std::vector<FetchTarget>& fetches,
                                  const ExportOptions& options = {});

// The same, written to `path` atomically (kiln/io/file.h): a failed export
// leaves no file, or the old one, never part of a model. kiln::Error
// (Unavailable) naming the path when it cannot be written.
void export_model(const Program& program, const Scope& scope, const std::vector<std::string>& feeds,
                  const std::vector<FetchTarget>& fetches, const std::string& path,
                  const ExportOptions& options = {});

}  // namespace kiln::onnx

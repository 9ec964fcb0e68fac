// Private to src/onnx: ONNX's external data. A tensor whose data_location
// is EXTERNAL keeps its bytes in a side file named by its external_data
// entries (location: a path relative to the model file's folder; offset and
// length in bytes; checksum, which kiln, like ONNX, does not verify).
// load_external_data reads them into the tensors' raw_data before the
// import, so the rest of the importer sees ordinary tensors.
#pragma once

#include <onnx/onnx_pb.h>

#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace kiln::onnx::detail {

// Every external tensor of `model` (initializers, tensor attributes, in
// subgraphs too) read from its side file under `base_dir` (empty: no folder
// is known, and an external tensor is an error). kiln::Error naming the
// tensor and the side file when the location leaves base_dir (an absolute
// path, a ".." part, a link pointing outside), the file is missing, offset
// or length reach past its end, or the length is not the tensor's byte
// size. With `problems`, each failure is appended there instead, the
// tensor stays external and the names of failed graph initializers go to
// `failed`.
void load_external_data(::onnx::ModelProto& model, const std::string& base_dir,
                        std::string_view what, std::vector<std::string>* problems = nullptr,
                        std::unordered_set<std::string>* failed = nullptr);

}  // namespace kiln::onnx::detail

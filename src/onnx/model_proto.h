// Private to src/onnx: reading an onnx::ModelProto from a file or bytes with
// kiln::Error naming the source (see kiln/onnx/model_info.h for the rules).
#pragma once

#include <onnx/onnx_pb.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "kiln/onnx/model_info.h"
#include "kiln/support/data_type.h"

namespace kiln::onnx::detail {

::onnx::ModelProto parse_model(std::string_view bytes, std::string_view what);
// The model in a file, parsed as it is read (no buffer of the file's size:
// GPT-2 small's 650 MB read 3x faster in 1 MiB pieces than into fresh
// pages), a regular file or a pipe; FileBytes's errors for opening and
// reading it, parse_model's for what it holds.
::onnx::ModelProto parse_model_file(const std::string& path);
// What `model` declares (kiln/onnx/model_info.h).
ModelInfo model_info_of(const ::onnx::ModelProto& model);

// A file's bytes, read once: into a buffer of the size the file has (a
// regular file; one that shrinks meanwhile gives what is left, a truncated
// model: mapping it instead would kill the process with SIGBUS) or as a
// stream delivers them (a pipe). kiln::Error naming the file, as `noun`
// ("ONNX model file"), and the system's reason: NotFound when it does not
// exist, Unavailable when it cannot be opened otherwise (permissions, no
// descriptor left), InvalidArgument for a folder, OutOfRange when it is too
// large to hold, DataLoss when reading fails.
class FileBytes {
 public:
  FileBytes(const std::string& path, std::string_view noun);
  std::string_view view() const { return file_ ? std::string_view(file_.get(), size_) : stream_; }

 private:
  std::unique_ptr<char[]> file_;  // uninitialized until read: no page is written twice
  std::size_t size_ = 0;
  std::string stream_;
};
// ONNX's element type name, lower case ("float", "int64", "bfloat16").
std::string elem_type_name(std::int32_t elem_type);
// ONNX's element type of a kiln dtype and back: one table for import, export
// and the test data; nullopt where the other side has none (ONNX's string,
// complex and float8 types).
std::optional<DataType> kiln_data_type(std::int32_t elem_type);
std::optional<std::int32_t> onnx_elem_type(DataType dtype);
// The ONNX names of the element types kiln imports, for error messages.
inline constexpr std::string_view kImportedElemTypes =
    "float, double, float16, bfloat16, int8 to int64, uint8 to uint64 and bool";

}  // namespace kiln::onnx::detail

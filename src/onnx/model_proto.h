// Private to src/onnx: reading an onnx::ModelProto from a file or bytes with
// kiln::Error naming the source (see kiln/onnx/model_info.h for the rules).
#pragma once

#include <onnx/onnx_pb.h>

#include <optional>
#include <string>
#include <string_view>

#include "kiln/support/data_type.h"

namespace kiln::onnx::detail {

::onnx::ModelProto parse_model(std::string_view bytes, std::string_view what);

// A file's bytes for as long as this lives: a regular file mapped read-only
// (a model of a few hundred MB is parsed from the page cache, not copied
// into the heap first), anything else (a pipe) read. kiln::Error(NotFound)
// naming the file when it cannot be opened or read.
class FileBytes {
 public:
  explicit FileBytes(const std::string& path);
  ~FileBytes();
  FileBytes(const FileBytes&) = delete;
  FileBytes& operator=(const FileBytes&) = delete;
  std::string_view view() const { return mapped_ ? std::string_view(mapped_, size_) : read_; }

 private:
  const char* mapped_ = nullptr;
  std::size_t size_ = 0;
  std::string read_;
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

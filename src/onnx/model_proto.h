// Private to src/onnx: reading an onnx::ModelProto from a file or bytes with
// kiln::Error naming the source (see kiln/onnx/model_info.h for the rules).
#pragma once

#include <onnx/onnx_pb.h>

#include <string>
#include <string_view>

namespace kiln::onnx::detail {

::onnx::ModelProto parse_model(std::string_view bytes, std::string_view what);
// The file's bytes; kiln::Error(NotFound) naming it when it cannot be read.
std::string read_file_bytes(const std::string& path);
// ONNX's element type name, lower case ("float", "int64", "bfloat16").
std::string elem_type_name(std::int32_t elem_type);

}  // namespace kiln::onnx::detail

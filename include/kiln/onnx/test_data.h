// ONNX's data-set layout (its backend test suite's, which `kiln-onnx run`
// and the conformance run read): a folder of `input_N.pb` / `output_N.pb`
// files, each a serialized onnx.TensorProto, N in the order of the graph's
// inputs (initializers excluded) and outputs; and the comparison ONNX's
// backend runner makes between an output and the expected one.
// The protobuf classes stay inside the implementation.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/runtime/tensor.h"

namespace kiln::onnx {

// The entries of `dir` whose names start with `prefix` ("input_",
// "test_data_set_"), ordered by the number after the prefix (input_10
// after input_9), names without one last. Empty when `dir` is no folder.
std::vector<std::filesystem::path> numbered_entries(const std::filesystem::path& dir,
                                                    std::string_view prefix);

// A data-set tensor as the model declares it: ONNX 1.12's suite writes
// bfloat16 tensors as uint16 (numpy has no bfloat16), so a u16 tensor where
// the model declares bf16 is read as the bf16 bits it holds. Anything else
// is returned as it is.
Tensor as_declared(const Tensor& t, DataType declared);

// How far `got` is from `want`. Floats match when |got - want| <= atol +
// rtol·|want| (NaN matches NaN), everything else exactly; dtypes and dims
// must be equal. max_abs / max_rel are over all elements (max_rel relative
// to |want|, over the elements where want != 0).
struct Comparison {
  bool matches = true;
  double max_abs = 0, max_rel = 0;
  std::int64_t mismatched = 0;  // elements outside the tolerance
  std::string first;            // the first difference in words; empty when it matches
};
// ONNX's backend runner's tolerances.
inline constexpr double kOnnxRtol = 1e-3, kOnnxAtol = 1e-7;
Comparison compare_tensors(const Tensor& got, const Tensor& want, double rtol = kOnnxRtol,
                           double atol = kOnnxAtol);

// `t` as a serialized onnx.TensorProto named `name` (raw data), any dtype
// but undefined (kiln::Error).
std::string tensor_proto_bytes(const Tensor& t, std::string_view name);
// The same, written to `path` atomically (a failed write leaves the old file).
void write_tensor_proto(const Tensor& t, std::string_view name, const std::string& path);

}  // namespace kiln::onnx

// Private to src/onnx: small builders several op families share (the
// importer's .cc files compile as unity blocks, so one definition each).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/dialect/tensor_ops.h"
#include "op_table.h"

namespace kiln::onnx::detail {

// A node's one output: OpT of its first input.
template <typename OpT>
std::vector<Value> unary(NodeContext& c) {
  return {c.b.create<OpT>(c.input(0)).result()};
}

inline DataType dtype_of(Value v) { return shaped_data_type(v.type()); }

// A 0-dim constant v of dtype dt.
inline Value scalar(NodeContext& c, DataType dt, double v) {
  return c.b.create<FullOp>(std::vector<std::int64_t>{}, v, dt).result();
}

// The dims of `v`, every one known at import; kiln::Error naming `what` else.
inline std::vector<std::int64_t> known_dims(NodeContext& c, Value v, const std::string& what) {
  std::vector<std::int64_t> d = shaped_dims(v.type());
  for (auto e : d)
    if (e < 0) c.unsupported(what + " of an input with a dim known only at run time");
  return d;
}

}  // namespace kiln::onnx::detail

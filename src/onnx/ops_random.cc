// ONNX's random generators → kiln.uniform_random / kiln.gaussian_random
// (kiln's counter-based generator: the numbers differ from ONNX Runtime's,
// the distributions do not): RandomUniform / RandomNormal (shape from the
// attribute), their -Like forms (shape of the input, known at import), and
// Bernoulli (uniform < p). ONNX's float `seed` becomes kiln's integer seed
// (absent: kiln's process-wide generator).
#include <cmath>

#include "kiln/dialect/kiln_dialect.h"
#include "op_table.h"

namespace kiln::onnx::detail {

namespace {

// The `dtype` attribute (an ONNX element type), else `fallback`.
DataType dtype_attr(NodeContext& c, DataType fallback) {
  if (!c.has_attr("dtype")) return fallback;
  switch (c.int_attr("dtype", 0)) {
    case ::onnx::TensorProto_DataType_FLOAT: return DataType::Float32;
    case ::onnx::TensorProto_DataType_DOUBLE: return DataType::Float64;
    case ::onnx::TensorProto_DataType_INT32: return DataType::Int32;
    case ::onnx::TensorProto_DataType_INT64: return DataType::Int64;
    case ::onnx::TensorProto_DataType_BOOL: return DataType::Bool;
    default: c.unsupported("dtype " + std::to_string(c.int_attr("dtype", 0)));
  }
}

std::int64_t seed_attr(NodeContext& c) {
  if (!c.has_attr("seed")) return 0;
  const auto s = static_cast<std::int64_t>(std::llround(c.float_attr("seed", 0.0f)));
  return s == 0 ? 1 : s;  // 0 would mean "the process-wide generator"
}

std::vector<std::int64_t> like_dims(NodeContext& c) {
  std::vector<std::int64_t> d = shaped_dims(c.input(0).type());
  for (auto e : d)
    if (e < 0) c.unsupported("a shape known only at run time");
  return d;
}

// Draws floats and casts them when the requested dtype is not one.
Value drawn(NodeContext& c, Value v, DataType dt) {
  return dt == DataType::Float32 || dt == DataType::Float64 ? v : c.b.create<CastOp>(v, dt).result();
}

DataType draw_type(DataType dt) { return dt == DataType::Float64 ? DataType::Float64 : DataType::Float32; }

Value uniform(NodeContext& c, const std::vector<std::int64_t>& dims, DataType dt) {
  return drawn(c,
               c.b.create<UniformRandomOp>(dims, c.float_attr("low", 0.0f), c.float_attr("high", 1.0f),
                                           seed_attr(c), draw_type(dt))
                   .result(),
               dt);
}

Value normal(NodeContext& c, const std::vector<std::int64_t>& dims, DataType dt) {
  return drawn(c,
               c.b.create<GaussianRandomOp>(dims, c.float_attr("mean", 0.0f), c.float_attr("scale", 1.0f),
                                            seed_attr(c), draw_type(dt))
                   .result(),
               dt);
}

std::vector<Value> random_uniform(NodeContext& c) {
  return {uniform(c, c.ints_attr("shape"), dtype_attr(c, DataType::Float32))};
}
std::vector<Value> random_normal(NodeContext& c) {
  return {normal(c, c.ints_attr("shape"), dtype_attr(c, DataType::Float32))};
}
std::vector<Value> random_uniform_like(NodeContext& c) {
  return {uniform(c, like_dims(c), dtype_attr(c, shaped_data_type(c.input(0).type())))};
}
std::vector<Value> random_normal_like(NodeContext& c) {
  return {normal(c, like_dims(c), dtype_attr(c, shaped_data_type(c.input(0).type())))};
}

// 1 where a uniform draw in [0, 1) is below the probability, else 0.
std::vector<Value> bernoulli(NodeContext& c) {
  Value p = c.input(0);
  const DataType pt = shaped_data_type(p.type());
  Value u = c.b.create<UniformRandomOp>(like_dims(c), 0.0, 1.0, seed_attr(c), draw_type(pt)).result();
  if (shaped_data_type(u.type()) != pt) u = c.b.create<CastOp>(u, pt).result();
  Value hit = c.b.create<LessThanOp>(u, p).result();
  return {c.b.create<CastOp>(hit, dtype_attr(c, pt)).result()};
}

}  // namespace

void add_random_ops(OpTable& t) {
  t["RandomUniform"] = {&random_uniform, 1};
  t["RandomNormal"] = {&random_normal, 1};
  t["RandomUniformLike"] = {&random_uniform_like, 1};
  t["RandomNormalLike"] = {&random_normal_like, 1};
  t["Bernoulli"] = {&bernoulli, 15};
}

}  // namespace kiln::onnx::detail

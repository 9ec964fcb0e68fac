// ONNX's random generators imported as kiln's: RandomUniform and
// RandomNormalLike built here with ONNX's protobuf classes, checked for
// range, dtype and moments, and for the same numbers on every run of a
// fixed seed.
#include <onnx/onnx_pb.h>

#include <cmath>
#include <string>
#include <vector>

#include "catch.hpp"
#include "kiln/exec/executor.h"
#include "kiln/onnx/import.h"

using namespace kiln;

namespace {

::onnx::AttributeProto* attr(::onnx::NodeProto* n, const std::string& name) {
  auto* a = n->add_attribute();
  a->set_name(name);
  return a;
}

std::string one_node_model(const std::string& op, bool with_input, const std::vector<std::int64_t>& dims,
                           void (*set_attrs)(::onnx::NodeProto*)) {
  ::onnx::ModelProto m;
  m.set_ir_version(7);
  m.add_opset_import()->set_version(13);
  auto* g = m.mutable_graph();
  auto* n = g->add_node();
  n->set_op_type(op);
  if (with_input) {
    auto* in = g->add_input();
    in->set_name("like");
    auto* t = in->mutable_type()->mutable_tensor_type();
    t->set_elem_type(::onnx::TensorProto_DataType_FLOAT);
    for (auto d : dims) t->mutable_shape()->add_dim()->set_dim_value(d);
    n->add_input("like");
  }
  n->add_output("y");
  set_attrs(n);
  g->add_output()->set_name("y");
  std::string bytes;
  REQUIRE(m.SerializeToString(&bytes));
  return bytes;
}

std::vector<double> moments(const std::vector<double>& v) {
  double mean = 0, var = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  for (double x : v) var += (x - mean) * (x - mean);
  return {mean, std::sqrt(var / static_cast<double>(v.size()))};
}

}  // namespace

TEST_CASE("ONNX RandomUniform draws in [low, high) with its dtype and shape, the same numbers "
          "each run for a fixed seed",
          "[onnx][random]") {
  const std::string bytes = one_node_model("RandomUniform", false, {}, [](::onnx::NodeProto* n) {
    auto* s = attr(n, "shape");
    s->set_type(::onnx::AttributeProto_AttributeType_INTS);
    s->add_ints(40);
    s->add_ints(50);
    auto* lo = attr(n, "low");
    lo->set_type(::onnx::AttributeProto_AttributeType_FLOAT);
    lo->set_f(-2.0f);
    auto* hi = attr(n, "high");
    hi->set_type(::onnx::AttributeProto_AttributeType_FLOAT);
    hi->set_f(3.0f);
    auto* seed = attr(n, "seed");
    seed->set_type(::onnx::AttributeProto_AttributeType_FLOAT);
    seed->set_f(7.0f);
    auto* dt = attr(n, "dtype");
    dt->set_type(::onnx::AttributeProto_AttributeType_INT);
    dt->set_i(::onnx::TensorProto_DataType_DOUBLE);
  });
  kiln::onnx::ImportedModel m = kiln::onnx::import_model_from_bytes(bytes, "uniform");
  Executor exe;
  Tensor a = exe.run(m.main, {}, {"y"})[0], b = exe.run(m.main, {}, {"y"})[0];
  CHECK(a.dtype() == DataType::Float64);
  CHECK(a.dims() == Dims{40, 50});
  const auto v = a.to_vector<double>();
  for (double x : v) REQUIRE((x >= -2.0 && x < 3.0));
  CHECK(moments(v)[0] == Approx(0.5).margin(0.15));  // 2000 draws: σ/√n ≈ 0.03
  CHECK(b.to_vector<double>() == v);
}

TEST_CASE("ONNX RandomNormalLike draws with the input's shape and the requested mean and scale",
          "[onnx][random]") {
  const std::string bytes = one_node_model("RandomNormalLike", true, {4000}, [](::onnx::NodeProto* n) {
    auto* mean = attr(n, "mean");
    mean->set_type(::onnx::AttributeProto_AttributeType_FLOAT);
    mean->set_f(1.0f);
    auto* scale = attr(n, "scale");
    scale->set_type(::onnx::AttributeProto_AttributeType_FLOAT);
    scale->set_f(2.0f);
  });
  kiln::onnx::ImportedModel m = kiln::onnx::import_model_from_bytes(bytes, "normal");
  Executor exe;
  Tensor y = exe.run(m.main, {{"like", Tensor::zeros(Dims{4000}, DataType::Float32)}}, {"y"})[0];
  CHECK(y.dtype() == DataType::Float32);
  CHECK(y.dims() == Dims{4000});
  std::vector<double> v;
  for (float x : y.to_vector<float>()) v.push_back(x);
  const auto mo = moments(v);
  CHECK(mo[0] == Approx(1.0).margin(0.2));  // σ/√n ≈ 0.03
  CHECK(mo[1] == Approx(2.0).margin(0.2));
}

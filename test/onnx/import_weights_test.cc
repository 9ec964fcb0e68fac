// A model's weights on import: raw-data initializers reach the parameters
// the startup program sets bit for bit, whether the model comes from bytes
// or from a file, and a weight large enough that the importer reads it in
// place (a Conv's weight folded with a BatchNormalization) gives the same
// results as when it is not folded, and keeps its values; a large weight's
// bytes are freed with the last program holding them.
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "catch.hpp"
#include "kiln/dialect/builtin.h"
#include "kiln/exec/executor.h"
#include "kiln/ir/tensor_attribute.h"
#include "kiln/onnx/import.h"

using namespace kiln;

namespace {

// Element k of every test weight: small exact binary fractions of both signs.
float weight_at(std::int64_t k, int salt) { return static_cast<float>((k * 37 + salt) % 1001 - 500) / 256.f; }

std::vector<float> weights(std::int64_t n, int salt) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t k = 0; k < n; ++k) v[static_cast<std::size_t>(k)] = weight_at(k, salt);
  return v;
}

// An f32 initializer holding `v` as raw data, as exporters write weights.
void add_raw(::onnx::GraphProto* g, const std::string& name, const std::vector<std::int64_t>& dims,
             const std::vector<float>& v) {
  auto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(::onnx::TensorProto_DataType_FLOAT);
  for (auto d : dims) t->add_dims(d);
  t->set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
}

void add_input(::onnx::GraphProto* g, const std::string& name, const std::vector<std::int64_t>& dims) {
  auto* tt = g->add_input();
  tt->set_name(name);
  auto* t = tt->mutable_type()->mutable_tensor_type();
  t->set_elem_type(::onnx::TensorProto_DataType_FLOAT);
  for (auto d : dims) t->mutable_shape()->add_dim()->set_dim_value(d);
}

::onnx::NodeProto* add_node(::onnx::GraphProto* g, const std::string& op, const std::vector<std::string>& ins,
                            const std::string& out) {
  auto* n = g->add_node();
  n->set_op_type(op);
  for (const auto& i : ins) n->add_input(i);
  n->add_output(out);
  return n;
}

std::string serialized(::onnx::ModelProto& m) {
  m.set_ir_version(7);
  m.add_opset_import()->set_version(13);
  std::string bytes;
  REQUIRE(m.SerializeToString(&bytes));
  return bytes;
}

bool same_bits(const Tensor& t, const std::vector<float>& v) {
  return t.numel() == static_cast<std::int64_t>(v.size()) &&
         std::memcmp(t.raw_data(), v.data(), v.size() * sizeof(float)) == 0;
}

const Tensor& parameter(Executor& exe, const std::string& name) {
  const Variable* var = exe.scope().find_var(name);
  REQUIRE(var);
  return var->get<Tensor>();
}

std::map<std::string, int> op_counts(const Program& p) {
  std::map<std::string, int> n;
  for (Operation* op : p.block()) ++n[std::string(op->name())];
  return n;
}

// The tensor attributes of `p`'s constants of `numel` elements.
std::vector<TensorAttribute> constants_of(const Program& p, std::int64_t numel) {
  std::vector<TensorAttribute> found;
  for (Operation* op : p.block())
    if (auto c = op->dyn_cast<ConstantOp>())
      if (auto a = c.value().dyn_cast<TensorAttribute>(); a && a.numel() == numel) found.push_back(a);
  return found;
}

// x [1, 3, 4, 4] → Conv (weight w [kConvOut, 3, 3, 3], raw data) →
// BatchNormalization → y; with `conv_out` the Conv's result is an output too
// (read elsewhere: not folded). var's values are made positive.
constexpr std::int64_t kConvOut = 2600;  // w: 70200 elements, read in place at import
kiln::onnx::ImportedModel conv_bn_model(const std::vector<float>& w, bool conv_out) {
  std::vector<float> var = weights(kConvOut, 6);
  for (float& v : var) v = std::fabs(v) + 0.5f;
  ::onnx::ModelProto m;
  auto* g = m.mutable_graph();
  add_input(g, "x", {1, 3, 4, 4});
  add_raw(g, "w", {kConvOut, 3, 3, 3}, w);
  add_raw(g, "scale", {kConvOut}, weights(kConvOut, 7));
  add_raw(g, "beta", {kConvOut}, weights(kConvOut, 8));
  add_raw(g, "mean", {kConvOut}, weights(kConvOut, 9));
  add_raw(g, "var", {kConvOut}, var);
  add_node(g, "Conv", {"x", "w"}, "c");
  add_node(g, "BatchNormalization", {"c", "scale", "beta", "mean", "var"}, "y");
  g->add_output()->set_name("y");
  if (conv_out) g->add_output()->set_name("c");
  return kiln::onnx::import_model_from_bytes(serialized(m));
}

}  // namespace

TEST_CASE("a model's raw-data weights reach its parameters bit for bit and give its results, imported "
          "from bytes or from a file",
          "[onnx]") {
  // w: 300000 elements (1.2 MB: a file read crosses its 1 MiB pieces inside it), read in place at import
  constexpr std::int64_t kIn = 600, kOut = 500;
  const std::vector<float> w = weights(kIn * kOut, 1), b = weights(kOut, 2), x = weights(2 * kIn, 3);
  ::onnx::ModelProto m;
  auto* g = m.mutable_graph();
  add_input(g, "x", {2, kIn});
  add_raw(g, "w", {kIn, kOut}, w);
  add_raw(g, "b", {kOut}, b);
  add_node(g, "MatMul", {"x", "w"}, "xw");
  add_node(g, "Add", {"xw", "b"}, "y");
  g->add_output()->set_name("y");
  const std::string bytes = serialized(m);
  const std::string path = "/tmp/kiln_onnx_test_raw_weights_" + std::to_string(::getpid()) + ".onnx";
  REQUIRE(static_cast<bool>(std::ofstream(path, std::ios::binary) << bytes));

  const FeedMap feed{{"x", Tensor::from_vector<float>({2, kIn}, x)}};
  std::vector<float> first;
  for (bool from_file : {false, true}) {
    INFO((from_file ? "from the file" : "from bytes"));
    kiln::onnx::ImportedModel model = from_file ? kiln::onnx::import_model(path) : kiln::onnx::import_model_from_bytes(bytes);
    Executor exe;
    exe.run(model.startup);
    CHECK(same_bits(parameter(exe, "w"), w));
    CHECK(same_bits(parameter(exe, "b"), b));
    const auto y = exe.run(model.main, feed, {"y"})[0].to_vector<float>();
    REQUIRE(y.size() == static_cast<std::size_t>(2 * kOut));
    for (std::int64_t r = 0; r < 2; ++r)
      for (std::int64_t o = 0; o < kOut; ++o) {
        double s = b[static_cast<std::size_t>(o)];
        for (std::int64_t i = 0; i < kIn; ++i)
          s += double(x[static_cast<std::size_t>(r * kIn + i)]) * w[static_cast<std::size_t>(i * kOut + o)];
        CHECK(y[static_cast<std::size_t>(r * kOut + o)] == Approx(s).epsilon(1e-5).margin(1e-4));
      }
    if (from_file) CHECK(y == first);
    else first = y;
  }
  std::remove(path.c_str());
}

TEST_CASE("a Conv whose large raw-data weight is folded with a BatchNormalization at import gives "
          "the unfolded result and leaves the weight's parameter as the model holds it",
          "[onnx][fusion]") {
  const std::vector<float> w = weights(kConvOut * 27, 4), x = weights(3 * 16, 5);
  kiln::onnx::ImportedModel folded = conv_bn_model(w, false), apart = conv_bn_model(w, true);
  CHECK(op_counts(folded.main)["kiln.sqrt"] == 0);
  CHECK(op_counts(apart.main)["kiln.sqrt"] == 1);
  Executor a, b;
  a.run(folded.startup);
  b.run(apart.startup);
  CHECK(same_bits(parameter(a, "w"), w));
  CHECK(same_bits(parameter(b, "w"), w));
  const FeedMap feed{{"x", Tensor::from_vector<float>({1, 3, 4, 4}, x)}};
  const auto got = a.run(folded.main, feed, {"y"})[0].to_vector<float>();
  const auto want = b.run(apart.main, feed, {"y"})[0].to_vector<float>();
  REQUIRE(got.size() == static_cast<std::size_t>(kConvOut * 4));
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(1e-4).margin(1e-4));
}

TEST_CASE("an imported model's large weights are freed with the last program holding them, and "
          "the parameters its startup program set keep their values",
          "[onnx]") {
  constexpr std::int64_t kIn = 300, kOut = 300;  // w: 90000 elements, b: 300
  const std::vector<float> w = weights(kIn * kOut, 10), b = weights(kOut, 11);
  ::onnx::ModelProto m;
  auto* g = m.mutable_graph();
  add_input(g, "x", {1, kIn});
  add_raw(g, "w", {kIn, kOut}, w);
  add_raw(g, "b", {kOut}, b);
  add_node(g, "MatMul", {"x", "w"}, "xw");
  add_node(g, "Add", {"xw", "b"}, "y");
  g->add_output()->set_name("y");
  std::optional<kiln::onnx::ImportedModel> model = kiln::onnx::import_model_from_bytes(serialized(m));
  std::map<std::int64_t, TensorAttribute> by_size;
  for (Operation* op : model->startup.block())
    if (auto c = op->dyn_cast<ConstantOp>()) {
      auto a = c.value().dyn_cast<TensorAttribute>();
      if (a) by_size[a.numel()] = a;
    }
  REQUIRE(by_size.count(kIn * kOut));
  REQUIRE(by_size.count(kOut));
  const TensorAttribute large = by_size[kIn * kOut], small = by_size[kOut];
  CHECK(large.held());
  CHECK_FALSE(small.held());  // small enough to fold: uniqued by content
  Executor exe;
  exe.run(model->startup);
  exe.evict(model->startup);  // its compiled copy would carry the weights too
  std::optional<Program> copy = model->startup.clone();
  model.reset();
  CHECK_FALSE(large.released());  // the clone holds it
  copy.reset();
  CHECK(large.released());
  CHECK_FALSE(small.released());
  CHECK(same_bits(parameter(exe, "w"), w));
  CHECK(same_bits(parameter(exe, "b"), b));
}

TEST_CASE("a Conv's large weight folded with a BatchNormalization at import is held like the "
          "model's own large weights, and freed with the startup program",
          "[onnx][fusion]") {
  std::optional<kiln::onnx::ImportedModel> model = conv_bn_model(weights(kConvOut * 27, 4), false);
  REQUIRE(op_counts(model->main)["kiln.sqrt"] == 0);  // folded
  const std::vector<TensorAttribute> large = constants_of(model->startup, kConvOut * 27);
  REQUIRE(large.size() == 2);  // the model's weight and the folded one
  for (const TensorAttribute& a : large) CHECK(a.held());
  model.reset();
  for (const TensorAttribute& a : large) CHECK(a.released());
}

TEST_CASE("an imported model's large weight stored in float_data, not raw data, is held too",
          "[onnx]") {
  constexpr std::int64_t kIn = 300, kOut = 300;  // w: 90000 elements
  const std::vector<float> w = weights(kIn * kOut, 12);
  ::onnx::ModelProto m;
  auto* g = m.mutable_graph();
  add_input(g, "x", {1, kIn});
  auto* t = g->add_initializer();
  t->set_name("w");
  t->set_data_type(::onnx::TensorProto_DataType_FLOAT);
  t->add_dims(kIn);
  t->add_dims(kOut);
  for (float f : w) t->add_float_data(f);
  add_node(g, "MatMul", {"x", "w"}, "y");
  g->add_output()->set_name("y");
  std::optional<kiln::onnx::ImportedModel> model = kiln::onnx::import_model_from_bytes(serialized(m));
  const std::vector<TensorAttribute> found = constants_of(model->startup, kIn * kOut);
  REQUIRE(found.size() == 1);
  const std::optional<TensorAttribute> large = found[0];
  CHECK(large->held());
  model.reset();
  CHECK(large->released());
}

TEST_CASE("a large tensor in a Constant node is held and freed with the imported model, and "
          "gives its values",
          "[onnx]") {
  constexpr std::int64_t kIn = 300, kOut = 300;  // the constant: 90000 elements
  const std::vector<float> w = weights(kIn * kOut, 13), x = weights(kIn, 14);
  ::onnx::ModelProto m;
  auto* g = m.mutable_graph();
  add_input(g, "x", {1, kIn});
  auto* value = add_node(g, "Constant", {}, "w")->add_attribute();
  value->set_name("value");
  value->set_type(::onnx::AttributeProto_AttributeType_TENSOR);
  value->mutable_t()->set_data_type(::onnx::TensorProto_DataType_FLOAT);
  value->mutable_t()->add_dims(kIn);
  value->mutable_t()->add_dims(kOut);
  value->mutable_t()->set_raw_data(std::string(reinterpret_cast<const char*>(w.data()), w.size() * sizeof(float)));
  add_node(g, "MatMul", {"x", "w"}, "y");
  g->add_output()->set_name("y");
  std::optional<kiln::onnx::ImportedModel> model = kiln::onnx::import_model_from_bytes(serialized(m));
  const std::vector<TensorAttribute> found = constants_of(model->main, kIn * kOut);
  REQUIRE(found.size() == 1);
  const std::optional<TensorAttribute> large = found[0];
  CHECK(large->held());
  std::vector<float> y;
  {
    Executor exe;
    exe.run(model->startup);
    y = exe.run(model->main, {{"x", Tensor::from_vector<float>({1, kIn}, x)}}, {"y"})[0].to_vector<float>();
  }
  REQUIRE(y.size() == static_cast<std::size_t>(kOut));
  for (std::int64_t j : {std::int64_t{0}, kOut / 2, kOut - 1}) {
    double want = 0;
    for (std::int64_t k = 0; k < kIn; ++k) want += double(x[std::size_t(k)]) * w[std::size_t(k * kOut + j)];
    CHECK(y[std::size_t(j)] == Approx(want).margin(1e-3));
  }
  model.reset();
  CHECK(large->released());
}

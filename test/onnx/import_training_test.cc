// ONNX's training domain (ai.onnx.preview.training): Adagrad, Adam and
// Momentum imported as compositions of kiln's elementwise ops, checked
// against ONNX's pseudo code at the first update (T = 0) and a later one,
// in double; the suite's test_adam_multiple with the epsilon its expected
// outputs were computed with; Gradient (kiln's append_backward) and the
// domain's opset rules.
#include <onnx/onnx_pb.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "catch.hpp"
#include "kiln/exec/executor.h"
#include "kiln/onnx/import.h"
#include "kiln/onnx/test_data.h"
#include "test_util.h"

namespace {

constexpr const char* kTraining = "ai.onnx.preview.training";

void add_input(::onnx::GraphProto* g, const std::string& name, int elem_type, bool scalar) {
  auto* in = g->add_input();
  in->set_name(name);
  auto* t = in->mutable_type()->mutable_tensor_type();
  t->set_elem_type(elem_type);
  auto* shape = t->mutable_shape();
  if (!scalar) shape->add_dim()->set_dim_value(2);
}

void float_attr(::onnx::NodeProto* n, const std::string& name, float v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto_AttributeType_FLOAT);
  a->set_f(v);
}

// One optimizer node of the training domain over double tensors of 2
// elements: inputs R, T, then `tensors`; outputs `outs`.
::onnx::ModelProto optimizer_model(const std::string& op, const std::vector<std::string>& tensors,
                                   const std::vector<std::string>& outs, std::int64_t version = 1) {
  ::onnx::ModelProto m;
  m.set_ir_version(7);
  auto* o = m.add_opset_import();
  o->set_domain(kTraining);
  o->set_version(version);
  auto* g = m.mutable_graph();
  add_input(g, "R", ::onnx::TensorProto_DataType_DOUBLE, true);
  add_input(g, "T", ::onnx::TensorProto_DataType_INT64, true);
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_domain(kTraining);
  n->set_name("opt");
  n->add_input("R");
  n->add_input("T");
  for (const auto& t : tensors) {
    add_input(g, t, ::onnx::TensorProto_DataType_DOUBLE, false);
    n->add_input(t);
  }
  for (const auto& out : outs) {
    n->add_output(out);
    g->add_output()->set_name(out);
  }
  return m;
}

std::string bytes_of(const ::onnx::ModelProto& m) {
  std::string b;
  REQUIRE(m.SerializeToString(&b));
  return b;
}

using Vec = std::vector<double>;

// Runs the model on R, T and the named 2-element tensors.
std::vector<Vec> run(const ::onnx::ModelProto& model, double r, std::int64_t t,
                     const std::vector<Vec>& tensors) {
  kiln::onnx::ImportedModel m = kiln::onnx::import_model_from_bytes(bytes_of(model), "optimizer");
  kiln::Executor exe;
  exe.run(m.startup);
  kiln::FeedMap feed;
  feed["R"] = kiln::Tensor::from_vector<double>(kiln::Dims(std::vector<std::int64_t>{}), {r});
  feed["T"] = kiln::Tensor::from_vector<std::int64_t>(kiln::Dims(std::vector<std::int64_t>{}), {t});
  for (std::size_t i = 0; i < tensors.size(); ++i)
    feed[m.inputs[2 + i]] = kiln::Tensor::from_vector<double>(kiln::Dims(std::vector<std::int64_t>{2}), tensors[i]);
  std::vector<kiln::FetchTarget> fetch(m.outputs.begin(), m.outputs.end());
  std::vector<Vec> got;
  for (const auto& out : exe.run(m.main, feed, fetch)) got.push_back(out.to_vector<double>());
  return got;
}

void check_close(const Vec& got, const Vec& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(1e-12));
}

const Vec kX{1.0, -2.0}, kG{0.5, -0.25}, kA{0.1, 2.0}, kB{0.3, 0.04};

}  // namespace

TEST_CASE("ONNX Adam follows ONNX's pseudo code: no bias correction at T = 0, then "
          "sqrt(1 - beta^T) / (1 - alpha^T), and the post-update decay",
          "[onnx]") {
  const double alpha = 0.8, beta = 0.9, eps = 1e-3, norm = 0.01, post = 0.05, r = 0.2;
  ::onnx::ModelProto m = optimizer_model("Adam", {"X", "G", "V", "H"}, {"X_new", "V_new", "H_new"});
  auto* n = m.mutable_graph()->mutable_node(0);
  float_attr(n, "alpha", static_cast<float>(alpha));
  float_attr(n, "beta", static_cast<float>(beta));
  float_attr(n, "epsilon", static_cast<float>(eps));
  float_attr(n, "norm_coefficient", static_cast<float>(norm));
  float_attr(n, "norm_coefficient_post", static_cast<float>(post));
  // The attributes as ONNX stores them (float).
  const double a = static_cast<float>(alpha), b = static_cast<float>(beta), e = static_cast<float>(eps),
               nc = static_cast<float>(norm), np = static_cast<float>(post);
  for (std::int64_t t : {0, 3}) {
    Vec x_new(2), v_new(2), h_new(2);
    const double r_adj = t > 0 ? r * std::sqrt(1 - std::pow(b, t)) / (1 - std::pow(a, t)) : r;
    for (int i = 0; i < 2; ++i) {
      const double g = nc * kX[i] + kG[i];
      v_new[i] = a * kA[i] + (1 - a) * g;
      h_new[i] = b * kB[i] + (1 - b) * g * g;
      x_new[i] = (1 - np) * (kX[i] - r_adj * v_new[i] / (std::sqrt(h_new[i]) + e));
    }
    INFO("T = " << t);
    const auto got = run(m, r, t, {kX, kG, kA, kB});
    check_close(got[0], x_new);
    check_close(got[1], v_new);
    check_close(got[2], h_new);
  }
}

TEST_CASE("ONNX Adagrad decays the rate by 1 + T * decay_factor and divides by the root of the "
          "accumulated squares",
          "[onnx]") {
  const double r = 0.5;
  ::onnx::ModelProto m = optimizer_model("Adagrad", {"X", "G", "H"}, {"X_new", "H_new"});
  auto* n = m.mutable_graph()->mutable_node(0);
  float_attr(n, "decay_factor", 0.25f);
  float_attr(n, "norm_coefficient", 0.125f);  // epsilon left at its default, 1e-6
  const std::int64_t t = 2;
  Vec x_new(2), h_new(2);
  for (int i = 0; i < 2; ++i) {
    const double g = 0.125 * kX[i] + kG[i];
    h_new[i] = kB[i] + g * g;
    x_new[i] = kX[i] - r / (1 + t * 0.25) * g / (std::sqrt(h_new[i]) + static_cast<double>(1e-6f));
  }
  const auto got = run(m, r, t, {kX, kG, kB});
  check_close(got[0], x_new);
  check_close(got[1], h_new);
}

TEST_CASE("ONNX Momentum scales the first gradient by 1, later ones by beta; Nesterov's mode "
          "steps along the gradient plus alpha times the new momentum",
          "[onnx]") {
  const double alpha = 0.5, beta = 0.25, norm = 0.125, r = 0.1;
  for (const std::string mode : {"standard", "nesterov"}) {
    ::onnx::ModelProto m = optimizer_model("Momentum", {"X", "G", "V"}, {"X_new", "V_new"});
    auto* n = m.mutable_graph()->mutable_node(0);
    float_attr(n, "alpha", static_cast<float>(alpha));
    float_attr(n, "beta", static_cast<float>(beta));
    float_attr(n, "norm_coefficient", static_cast<float>(norm));
    auto* a = n->add_attribute();
    a->set_name("mode");
    a->set_type(::onnx::AttributeProto_AttributeType_STRING);
    a->set_s(mode);
    for (std::int64_t t : {0, 1}) {
      Vec x_new(2), v_new(2);
      for (int i = 0; i < 2; ++i) {
        const double g = norm * kX[i] + kG[i];
        v_new[i] = alpha * kA[i] + (t > 0 ? beta : 1.0) * g;
        x_new[i] = kX[i] - r * (mode == "standard" ? v_new[i] : g + alpha * v_new[i]);
      }
      INFO(mode << ", T = " << t);
      const auto got = run(m, r, t, {kX, kG, kA});
      check_close(got[0], x_new);
      check_close(got[1], v_new);
    }
  }
}

TEST_CASE("ONNX training ops: an unknown Momentum mode, an opset of the domain kiln "
          "lacks and a default-domain node without its opset are errors naming them",
          "[onnx]") {
  ::onnx::ModelProto m = optimizer_model("Momentum", {"X", "G", "V"}, {"X_new", "V_new"});
  auto* n = m.mutable_graph()->mutable_node(0);
  for (const char* f : {"alpha", "beta", "norm_coefficient"}) float_attr(n, f, 0.5f);
  auto* a = n->add_attribute();
  a->set_name("mode");
  a->set_s("heavy_ball");
  KILN_CHECK_ERROR(kiln::onnx::import_model_from_bytes(bytes_of(m)), Unimplemented,
                   {"node 'opt' (Momentum)", "mode 'heavy_ball'"});
  n->mutable_attribute()->RemoveLast();
  KILN_CHECK_ERROR(kiln::onnx::import_model_from_bytes(bytes_of(m)), InvalidArgument,
                   {"node 'opt' (Momentum)", "needs attribute 'mode'"});

  ::onnx::ModelProto v2 = optimizer_model("Adam", {"X", "G", "V", "H"}, {"X_new", "V_new", "H_new"}, 2);
  KILN_CHECK_ERROR(kiln::onnx::import_model_from_bytes(bytes_of(v2)), Unimplemented,
                   {"node 'opt' (Adam)", "opsets 1 to 1", "uses 2"});

  ::onnx::ModelProto odd = optimizer_model("Adam", {"X", "G", "V"}, {"X_new", "V_new"});
  KILN_CHECK_ERROR(kiln::onnx::import_model_from_bytes(bytes_of(odd)), InvalidArgument,
                   {"node 'opt' (Adam)", "5 inputs", "4 equally long lists"});

  ::onnx::ModelProto relu = optimizer_model("Adagrad", {"X", "G", "H"}, {"X_new", "H_new"});
  auto* r = relu.mutable_graph()->add_node();
  r->set_op_type("Relu");
  r->set_name("relu");
  r->add_input("X_new");
  r->add_output("y");
  KILN_CHECK_ERROR(kiln::onnx::import_model_from_bytes(bytes_of(relu)), Unimplemented,
                   {"opset 0 of the default domain"});
}

TEST_CASE("ONNX's test_adam_multiple matches its expected outputs with the epsilon they were "
          "computed with (its node leaves epsilon at the default)",
          "[onnx]") {
  const std::filesystem::path dir = "/usr/share/libonnx-testdata/data/node/test_adam_multiple";
  if (!std::filesystem::exists(dir / "model.onnx")) {
    WARN("ONNX's backend test data is not installed: skipped");
    return;
  }
  ::onnx::ModelProto model;
  {
    std::ifstream in(dir / "model.onnx", std::ios::binary);
    REQUIRE(model.ParseFromIstream(&in));
  }
  float_attr(model.mutable_graph()->mutable_node(0), "epsilon", 1e-2f);
  kiln::onnx::ImportedModel m = kiln::onnx::import_model_from_bytes(bytes_of(model), "adam multiple");
  kiln::Executor exe;
  exe.run(m.startup);
  kiln::FeedMap feed;
  for (std::size_t i = 0; i < m.inputs.size(); ++i)
    feed[m.inputs[i]] = kiln::onnx::read_tensor_proto(
        (dir / "test_data_set_0" / ("input_" + std::to_string(i) + ".pb")).string());
  std::vector<kiln::FetchTarget> fetch(m.outputs.begin(), m.outputs.end());
  const auto got = exe.run(m.main, feed, fetch);
  REQUIRE(got.size() == 6);
  for (std::size_t k = 0; k < got.size(); ++k) {
    const kiln::Tensor want = kiln::onnx::read_tensor_proto(
        (dir / "test_data_set_0" / ("output_" + std::to_string(k) + ".pb")).string());
    const auto c = kiln::onnx::compare_tensors(got[k], want);
    INFO(m.outputs[k] << ": " << c.first);
    CHECK(c.matches);
  }
}

namespace {

// y = a * a + b over float scalars a, b, c; Gradient(xs = a, b, c; y = `y`).
std::string gradient_model(const std::string& y) {
  ::onnx::ModelProto m;
  m.set_ir_version(7);
  m.add_opset_import()->set_version(13);
  auto* o = m.add_opset_import();
  o->set_domain(kTraining);
  o->set_version(1);
  auto* g = m.mutable_graph();
  for (const char* in : {"a", "b", "c"}) add_input(g, in, ::onnx::TensorProto_DataType_FLOAT, true);
  auto node = [&](const std::string& op, std::vector<std::string> ins, std::vector<std::string> outs) {
    auto* n = g->add_node();
    n->set_op_type(op);
    n->set_name(op);
    for (const auto& i : ins) n->add_input(i);
    for (const auto& out : outs) n->add_output(out);
    return n;
  };
  node("Mul", {"a", "a"}, {"sq"});
  node("Add", {"sq", "b"}, {"y"});
  auto* grad = node("Gradient", {"a", "b", "c"}, {"dy_da", "dy_db", "dy_dc"});
  grad->set_domain(kTraining);
  auto* xs = grad->add_attribute();
  xs->set_name("xs");
  xs->set_type(::onnx::AttributeProto_AttributeType_STRINGS);
  for (const char* x : {"a", "b", "c"}) xs->add_strings(x);
  auto* ya = grad->add_attribute();
  ya->set_name("y");
  ya->set_type(::onnx::AttributeProto_AttributeType_STRING);
  ya->set_s(y);
  for (const char* out : {"y", "dy_da", "dy_db", "dy_dc"}) g->add_output()->set_name(out);
  return bytes_of(m);
}

}  // namespace

TEST_CASE("ONNX Gradient is the gradient of a graph value w.r.t. others, zeros for one it does "
          "not depend on",
          "[onnx]") {
  kiln::onnx::ImportedModel m = kiln::onnx::import_model_from_bytes(gradient_model("y"), "gradient");
  kiln::Executor exe;
  exe.run(m.startup);
  kiln::FeedMap feed;
  const kiln::Dims scalar(std::vector<std::int64_t>{});
  feed["a"] = kiln::Tensor::from_vector<float>(scalar, {3.0f});
  feed["b"] = kiln::Tensor::from_vector<float>(scalar, {-1.0f});
  feed["c"] = kiln::Tensor::from_vector<float>(scalar, {7.0f});
  std::vector<kiln::FetchTarget> fetch(m.outputs.begin(), m.outputs.end());
  const auto got = exe.run(m.main, feed, fetch);
  REQUIRE(got.size() == 4);
  CHECK(got[0].to_vector<float>()[0] == Approx(8.0f));
  CHECK(got[1].to_vector<float>()[0] == Approx(6.0f));  // 2a
  CHECK(got[2].to_vector<float>()[0] == Approx(1.0f));
  CHECK(got[3].to_vector<float>()[0] == Approx(0.0f));

  KILN_CHECK_ERROR(kiln::onnx::import_model_from_bytes(gradient_model("nope")), InvalidArgument,
                   {"node 'Gradient' (Gradient)", "y 'nope'"});
}

// ONNX's RNN / GRU / LSTM imported as kiln.rnn / kiln.gru / kiln.lstm: one
// fused op per node (with transposes around it for layout = 1), the suite's
// expected outputs, hidden_size taken from R when the node omits it, and
// the errors for an activation kiln lacks. (The conformance run checks all
// twelve suite models; these tests pin down what the import looks like.)
#include <onnx/onnx_pb.h>

#include <filesystem>
#include <string>

#include "catch.hpp"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/executor.h"
#include "kiln/onnx/import.h"
#include "test_util.h"

using namespace kiln;

namespace {

constexpr const char* kSuite = "/usr/share/libonnx-testdata/data/node";

std::string suite(const std::string& test, const std::string& file = "model.onnx") {
  return std::string(kSuite) + "/" + test + "/" + file;
}

// A one-node model: X [2, 1, 3] → LSTM (hidden 2) → Y_h, with W, R as
// initializers; `edit` adjusts the node.
template <typename Edit>
std::string lstm_model(Edit edit) {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(14);
  auto* g = m.mutable_graph();
  g->set_name("lstm");
  auto add_init = [&](const std::string& name, std::vector<std::int64_t> dims) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(::onnx::TensorProto_DataType_FLOAT);
    std::int64_t n = 1;
    for (auto d : dims) t->add_dims(d), n *= d;
    for (std::int64_t i = 0; i < n; ++i) t->add_float_data(0.1f * static_cast<float>(i % 7) - 0.3f);
  };
  add_init("W", {1, 8, 3});
  add_init("R", {1, 8, 2});
  auto value_info = [](::onnx::ValueInfoProto* v, const std::string& name,
                       std::vector<std::int64_t> dims) {
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(::onnx::TensorProto_DataType_FLOAT);
    for (auto d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
  };
  value_info(g->add_input(), "X", {2, 1, 3});
  value_info(g->add_output(), "Y_h", {1, 1, 2});
  auto* n = g->add_node();
  n->set_op_type("LSTM");
  n->set_name("the_lstm");
  n->add_input("X");
  n->add_input("W");
  n->add_input("R");
  n->add_output("");
  n->add_output("Y_h");
  edit(*n);
  return m.SerializeAsString();
}

void add_strings(::onnx::NodeProto& n, const std::string& name, std::vector<std::string> v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::STRINGS);
  for (auto& s : v) a->add_strings(s);
}

}  // namespace

TEST_CASE("a batch-major ONNX LSTM imports as one kiln.lstm between transposes and gives the "
          "suite's outputs",
          "[onnx][rnn]") {
  if (!std::filesystem::is_directory(kSuite)) {
    WARN("libonnx-testdata is not installed: skipped");
    return;
  }
  const std::string test = "test_lstm_batchwise";
  kiln::onnx::ImportedModel m = kiln::onnx::import_model(suite(test));
  CHECK_NOTHROW(m.main.verify());
  int lstms = 0, transposes = 0, others = 0;
  for (Operation* op : m.main.block()) {
    if (op->isa<LstmOp>()) ++lstms;
    else if (op->isa<TransposeOp>()) ++transposes;
    else if (!op->isa<DataOp>() && !op->isa<ParameterOp>() && !op->isa<FetchOp>()) ++others;
  }
  CHECK(lstms == 1);
  CHECK(transposes >= 2);  // X in, Y / Y_h out
  CHECK(others == 0);
  FeedMap feed;
  for (std::size_t i = 0; i < m.inputs.size(); ++i)
    feed[m.inputs[i]] =
        kiln::onnx::read_tensor_proto(suite(test, "test_data_set_0/input_" + std::to_string(i) + ".pb"));
  Executor exe;
  exe.run(m.startup);
  std::vector<FetchTarget> fetch(m.outputs.begin(), m.outputs.end());
  auto got = exe.run(m.main, feed, fetch);
  for (std::size_t k = 0; k < got.size(); ++k) {
    Tensor want = kiln::onnx::read_tensor_proto(suite(test, "test_data_set_0/output_" + std::to_string(k) + ".pb"));
    REQUIRE(got[k].dims() == want.dims());
    auto g = got[k].to_vector<float>(), w = want.to_vector<float>();
    for (std::size_t i = 0; i < g.size(); ++i) CHECK(g[i] == Approx(w[i]).margin(1e-5));
  }
}

TEST_CASE("an ONNX LSTM without hidden_size takes it from R, and its activations list becomes "
          "the op's",
          "[onnx][rnn]") {
  const std::string bytes = lstm_model([](::onnx::NodeProto& n) {
    add_strings(n, "activations", {"HardSigmoid", "LeakyRelu", "Tanh"});
    auto* a = n.add_attribute();
    a->set_name("activation_alpha");
    a->set_type(::onnx::AttributeProto::FLOATS);
    a->add_floats(0.25f);  // HardSigmoid's alpha
    a->add_floats(0.5f);   // LeakyRelu's
  });
  kiln::onnx::ImportedModel m = kiln::onnx::import_model_from_bytes(bytes, "lstm");
  Operation* lstm = nullptr;
  for (Operation* op : m.main.block())
    if (op->isa<LstmOp>()) lstm = op;
  REQUIRE(lstm);
  const auto a = LstmOp::dyn_cast(lstm).attrs();
  CHECK(a.hidden_size == 2);
  CHECK(a.activations == "HardSigmoid(0.25,0.5),LeakyRelu(0.5),Tanh");
  CHECK_FALSE(a.has_bias);
  Executor exe;
  exe.run(m.startup);
  auto got = exe.run(m.main, {{"X", Tensor::from_vector<float>({2, 1, 3}, {1, 2, 3, 4, 5, 6})}},
                     {FetchTarget("Y_h")});
  CHECK(got[0].dims() == Dims{1, 1, 2});
}

TEST_CASE("an ONNX recurrent node with an activation kiln lacks is an error naming the node",
          "[onnx][rnn]") {
  const std::string bytes = lstm_model([](::onnx::NodeProto& n) {
    add_strings(n, "activations", {"Sigmoid", "Swish", "Tanh"});
  });
  KILN_CHECK_ERROR(kiln::onnx::import_model_from_bytes(bytes, "lstm"), Unimplemented,
                   {"node 'the_lstm' (LSTM)", "activation 'Swish'", "Sigmoid, Tanh, Relu"});
  const std::string bad_layout = lstm_model([](::onnx::NodeProto& n) {
    auto* a = n.add_attribute();
    a->set_name("layout");
    a->set_type(::onnx::AttributeProto::INT);
    a->set_i(2);
  });
  KILN_CHECK_ERROR(kiln::onnx::import_model_from_bytes(bad_layout, "lstm"), Unimplemented,
                   {"(LSTM)", "layout 2"});
}

// ONNX's RNN / GRU / LSTM imported as kiln.rnn / kiln.gru / kiln.lstm: one
// fused op per node (with transposes around it for layout = 1), the suite's
// expected outputs, hidden_size taken from R when the node omits it, and
// the errors for an activation kiln lacks; an imported LSTM fine-tuned
// through kiln.lstm's gradient. (The conformance run checks all twelve
// suite models; these tests pin down what the import looks like.)
#include <onnx/onnx_pb.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "catch.hpp"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/executor.h"
#include "kiln/frontend/frontend.h"
#include "kiln/io/json.h"
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

namespace {

// A bidirectional ONNX LSTM (hidden 3) with W, R, B and peepholes P as
// initializers: X [4, 2, 3] → Y [4, 2, 2, 3] and Y_h [2, 2, 3].
std::string trainable_lstm_model() {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(14);
  auto* g = m.mutable_graph();
  g->set_name("lstm");
  auto add_init = [&](const std::string& name, std::vector<std::int64_t> dims, float scale) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(::onnx::TensorProto_DataType_FLOAT);
    std::int64_t n = 1;
    for (auto d : dims) t->add_dims(d), n *= d;
    for (std::int64_t i = 0; i < n; ++i)
      t->add_float_data(scale * std::sin(0.9f * static_cast<float>(i) + 0.3f));
  };
  add_init("W", {2, 12, 3}, 0.4f);
  add_init("R", {2, 12, 3}, 0.4f);
  add_init("B", {2, 24}, 0.1f);
  add_init("P", {2, 9}, 0.2f);
  auto value_info = [](::onnx::ValueInfoProto* v, const std::string& name,
                       std::vector<std::int64_t> dims) {
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(::onnx::TensorProto_DataType_FLOAT);
    for (auto d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
  };
  value_info(g->add_input(), "X", {4, 2, 3});
  value_info(g->add_output(), "Y", {4, 2, 2, 3});
  value_info(g->add_output(), "Y_h", {2, 2, 3});
  auto* n = g->add_node();
  n->set_op_type("LSTM");
  n->set_name("the_lstm");
  for (const char* in : {"X", "W", "R", "B", "", "", "", "P"}) n->add_input(in);
  n->add_output("Y");
  n->add_output("Y_h");
  auto* a = n->add_attribute();
  a->set_name("hidden_size");
  a->set_type(::onnx::AttributeProto::INT);
  a->set_i(3);
  auto* d = n->add_attribute();
  d->set_name("direction");
  d->set_type(::onnx::AttributeProto::STRING);
  d->set_s("bidirectional");
  return m.SerializeAsString();
}

Value fetched(const Program& p, const std::string& name) {
  for (Operation* op : p.block())
    if (op->isa<FetchOp>() && FetchOp(op).attrs().name == name) return op->operand_source(0);
  return {};
}

}  // namespace

TEST_CASE("an imported ONNX LSTM fine-tunes: append_backward and Adam through kiln.lstm lower "
          "the loss and move every initializer",
          "[onnx][rnn]") {
  kiln::onnx::ImportedModel m = kiln::onnx::import_model_from_bytes(trainable_lstm_model(), "lstm");
  Value y = fetched(m.main, "Y"), yh = fetched(m.main, "Y_h");
  REQUIRE(y);
  REQUIRE(yh);
  Value loss;
  std::vector<std::string> params;
  {
    ProgramGuard guard(m.main, m.startup);
    Value target = data("target", {4, 2, 2, 3});
    Value target_h = data("target_h", {2, 2, 3});
    loss = main_builder()
               .create<AddOp>(nn::MSELoss()(y, target), nn::MSELoss()(yh, target_h))
               .result();
    // append_backward reaches every initializer through the fused op.
    auto grads = append_backward(loss);
    CHECK(grads.size() == 4);
    int lstm_grads = 0;
    for (Operation* op : m.main.block()) lstm_grads += op->name() == "kiln.lstm_grad";
    CHECK(lstm_grads == 1);
    for (const auto& [param, grad] : grads)
      params.push_back(ParameterOp(param.defining_op()).parameter_name());
    optim::Adam(3e-2).apply_gradients(grads);
  }
  // The training program, kiln.lstm_grad included, round-trips through JSON.
  const std::string json = save_program_json(m.main);
  CHECK(save_program_json(load_program_json(json)) == json);
  std::vector<float> xs(24), ts(48), hs(12);
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = std::cos(0.7f * static_cast<float>(i));
  for (std::size_t i = 0; i < ts.size(); ++i) ts[i] = 0.5f * std::sin(0.3f * static_cast<float>(i));
  for (std::size_t i = 0; i < hs.size(); ++i)
    hs[i] = -0.4f * std::cos(0.5f * static_cast<float>(i));
  const FeedMap feed{{"X", Tensor::from_vector<float>({4, 2, 3}, xs)},
                     {"target", Tensor::from_vector<float>({4, 2, 2, 3}, ts)},
                     {"target_h", Tensor::from_vector<float>({2, 2, 3}, hs)}};
  Executor exe;
  exe.run(m.startup);
  auto values = [&] {
    std::vector<std::vector<float>> v;
    for (const auto& name : params)
      v.push_back(exe.scope().find_var(name)->get<Tensor>().to_vector<float>());
    return v;
  };
  const auto before = values();
  std::vector<float> losses;
  for (int step = 0; step < 30; ++step)
    losses.push_back(exe.run(m.main, feed, {loss})[0].to_vector<float>()[0]);
  INFO("loss " << losses.front() << " -> " << losses.back());
  CHECK(std::isfinite(losses.back()));
  CHECK(losses.back() < 0.5f * losses.front());
  const auto after = values();
  for (std::size_t i = 0; i < params.size(); ++i) {
    INFO(params[i]);
    CHECK(after[i] != before[i]);
  }
}

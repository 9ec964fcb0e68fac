// Suite tests whose attribute-like inputs (Resize's scales and sizes, TopK's
// k, OneHot's depth, Pad's pads) are graph inputs fed at run time (the
// conformance run checks that form): kiln computes these ops' gathers and
// weights at import when those inputs are constant, so here the same
// models get them as initializers holding the test data's values, and must
// then give ONNX's expected outputs (rtol 1e-3, atol 1e-5). Also, on
// suite models edited here: ops composed at import from their input's dims
// name the node when a dim is known only at run time; a sequence (kept by
// the importer as a list) cannot be a graph output.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "catch.hpp"
#include "kiln/exec/executor.h"
#include "kiln/onnx/import.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

const fs::path kNode = "/usr/share/libonnx-testdata/data/node";

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Imports node/TEST with the graph inputs named in `constant` turned into
// initializers from test_data_set_0, runs it on the remaining inputs and
// compares every output.
void check_with_constant_inputs(const std::string& test, const std::vector<std::string>& constant) {
  INFO(test);
  const fs::path dir = kNode / test;
  ::onnx::ModelProto model;
  REQUIRE(model.ParseFromString(read_bytes(dir / "model.onnx")));
  auto* g = model.mutable_graph();
  std::vector<std::string> fed;
  std::vector<int> fed_files;
  for (int i = 0; i < g->input_size(); ++i) {
    const std::string name = g->input(i).name();
    const fs::path file = dir / "test_data_set_0" / ("input_" + std::to_string(i) + ".pb");
    if (std::find(constant.begin(), constant.end(), name) != constant.end()) {
      ::onnx::TensorProto t;
      REQUIRE(t.ParseFromString(read_bytes(file)));
      t.set_name(name);
      *g->add_initializer() = t;
    } else {
      fed.push_back(name);
      fed_files.push_back(i);
    }
  }
  // Graph inputs that became initializers are dropped from the inputs.
  auto* inputs = g->mutable_input();
  for (int i = inputs->size() - 1; i >= 0; --i)
    if (std::find(constant.begin(), constant.end(), inputs->Get(i).name()) != constant.end())
      inputs->DeleteSubrange(i, 1);
  std::string bytes;
  REQUIRE(model.SerializeToString(&bytes));
  kiln::onnx::ImportedModel m = kiln::onnx::import_model_from_bytes(bytes, test);
  REQUIRE(m.inputs == fed);
  Executor exe;
  exe.run(m.startup);
  FeedMap feed;
  for (std::size_t k = 0; k < fed.size(); ++k)
    feed[fed[k]] = kiln::onnx::read_tensor_proto(
        (dir / "test_data_set_0" / ("input_" + std::to_string(fed_files[k]) + ".pb")).string());
  std::vector<FetchTarget> fetch(m.outputs.begin(), m.outputs.end());
  std::vector<Tensor> got = exe.run(m.main, feed, fetch);
  for (std::size_t k = 0; k < got.size(); ++k) {
    Tensor want = kiln::onnx::read_tensor_proto(
        (dir / "test_data_set_0" / ("output_" + std::to_string(k) + ".pb")).string());
    REQUIRE(got[k].dims() == want.dims());
    REQUIRE(got[k].dtype() == want.dtype());
    if (want.dtype() == DataType::Float32) {
      auto a = got[k].to_vector<float>(), b = want.to_vector<float>();
      for (std::size_t i = 0; i < a.size(); ++i) {
        INFO("output " << k << " element " << i);
        CHECK(std::abs(a[i] - b[i]) <= 1e-5 + 1e-3 * std::abs(b[i]));
      }
    } else if (want.dtype() == DataType::Int64) {
      CHECK(got[k].to_vector<std::int64_t>() == want.to_vector<std::int64_t>());
    }
  }
}

bool have_suite() {
  if (fs::is_directory(kNode)) return true;
  WARN("libonnx-testdata is not installed: the checks are skipped");
  return false;
}

}  // namespace

TEST_CASE("Resize with constant scales or sizes matches ONNX's reference in every mode and "
          "coordinate transformation of the suite",
          "[onnx][resize]") {
  if (!have_suite()) return;
  for (const auto& e : fs::directory_iterator(kNode)) {
    const std::string test = e.path().filename().string();
    if (test.rfind("test_resize_", 0) != 0) continue;
    check_with_constant_inputs(test, {"roi", "scales", "sizes"});
  }
}

TEST_CASE("TopK with a constant k, OneHot with a constant depth and Pad with constant pads "
          "match ONNX's reference",
          "[onnx]") {
  if (!have_suite()) return;
  for (const char* t : {"test_top_k", "test_top_k_negative_axis", "test_top_k_smallest"})
    check_with_constant_inputs(t, {"k"});
  for (const char* t : {"test_onehot_negative_indices", "test_onehot_with_axis",
                        "test_onehot_with_negative_axis", "test_onehot_without_axis"})
    check_with_constant_inputs(t, {"depth"});
  for (const char* t : {"test_constant_pad", "test_edge_pad", "test_reflect_pad"})
    check_with_constant_inputs(t, {"pads", "value"});
}

TEST_CASE(
    "an op composed at import from its input's dims is a clear error when a dim is known "
    "only at run time",
    "[onnx]") {
  if (!have_suite()) return;
  for (const char* test : {"test_einsum_transpose", "test_reversesequence_time", "test_edge_pad"}) {
    INFO(test);
    ::onnx::ModelProto model;
    REQUIRE(model.ParseFromString(read_bytes(kNode / test / "model.onnx")));
    auto* dim = model.mutable_graph()
                    ->mutable_input(0)
                    ->mutable_type()
                    ->mutable_tensor_type()
                    ->mutable_shape()
                    ->mutable_dim(0);
    dim->set_dim_param("n");
    std::string bytes;
    REQUIRE(model.SerializeToString(&bytes));
    try {
      kiln::onnx::import_model_from_bytes(bytes, test);
      FAIL("no kiln::Error");
    } catch (const kiln::Error& e) {
      CHECK(e.kind() == ErrorKind::Unimplemented);
      CHECK_THAT(e.message(), Catch::Contains("known only at run time"));
      CHECK_THAT(e.message(), Catch::Contains("ONNX node"));
    }
  }
}

TEST_CASE("a sequence as a graph output is a clear error; read through SequenceAt it imports",
          "[onnx]") {
  if (!have_suite()) return;
  const fs::path model_file =
      fs::path("/usr/share/libonnx-testdata/data/simple/test_sequence_model2/model.onnx");
  ::onnx::ModelProto model;
  REQUIRE(model.ParseFromString(read_bytes(model_file)));
  std::string erased;
  for (const auto& node : model.graph().node())
    if (node.op_type() == "SequenceErase") erased = node.output(0);
  REQUIRE(!erased.empty());
  std::string bytes;
  REQUIRE(model.SerializeToString(&bytes));
  CHECK_NOTHROW(kiln::onnx::import_model_from_bytes(bytes, "test_sequence_model2"));
  model.mutable_graph()->mutable_output(0)->set_name(erased);
  REQUIRE(model.SerializeToString(&bytes));
  try {
    kiln::onnx::import_model_from_bytes(bytes, "test_sequence_model2");
    FAIL("no kiln::Error");
  } catch (const kiln::Error& e) {
    CHECK(e.kind() == ErrorKind::Unimplemented);
    CHECK_THAT(e.message(), Catch::Contains("'" + erased + "' is a sequence"));
  }
}

namespace {

// An i64 initializer `name` holding `values` (1-D, or a scalar when `scalar`).
void add_ints(::onnx::GraphProto* g, const std::string& name, const std::vector<std::int64_t>& values,
              bool scalar = false) {
  auto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(::onnx::TensorProto::INT64);
  if (!scalar) t->add_dims(static_cast<std::int64_t>(values.size()));
  for (auto v : values) t->add_int64_data(v);
}

void add_node(::onnx::GraphProto* g, const std::string& op, const std::vector<std::string>& in,
              const std::string& out) {
  auto* n = g->add_node();
  n->set_op_type(op);
  for (const auto& i : in) n->add_input(i);
  n->add_output(out);
}

// ShuffleNet's channel shuffle as PyTorch exports it with a symbolic batch,
// x [batch, 4, 3, 3]: n = Unsqueeze(Gather(Shape(x), 0)),
// y = Reshape(Transpose(Reshape(x, [n, 2, 2, 3, 3]), [0, 2, 1, 3, 4]), [n, -1, 3, 3]).
std::string channel_shuffle_model() {
  ::onnx::ModelProto model;
  model.set_ir_version(7);
  model.add_opset_import()->set_version(13);
  auto* g = model.mutable_graph();
  auto* x = g->add_input();
  x->set_name("x");
  auto* tt = x->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(::onnx::TensorProto::FLOAT);
  tt->mutable_shape()->add_dim()->set_dim_param("batch");
  for (std::int64_t d : {4, 3, 3}) tt->mutable_shape()->add_dim()->set_dim_value(d);
  add_ints(g, "zero", {0}, true);
  add_ints(g, "axes", {0});
  add_ints(g, "split_rest", {2, 2, 3, 3});
  add_ints(g, "merged_rest", {-1, 3, 3});
  add_node(g, "Shape", {"x"}, "s");
  add_node(g, "Gather", {"s", "zero"}, "n0");
  add_node(g, "Unsqueeze", {"n0", "axes"}, "n");
  auto* c1 = g->add_node();
  c1->set_op_type("Concat");
  for (const char* in : {"n", "split_rest"}) c1->add_input(in);
  c1->add_output("split_shape");
  c1->add_attribute()->set_name("axis");
  c1->mutable_attribute(0)->set_type(::onnx::AttributeProto::INT);
  c1->mutable_attribute(0)->set_i(0);
  auto* c2 = g->add_node();
  *c2 = *c1;
  c2->set_input(1, "merged_rest");
  c2->set_output(0, "merged_shape");
  add_node(g, "Reshape", {"x", "split_shape"}, "split");
  auto* t = g->add_node();
  t->set_op_type("Transpose");
  t->add_input("split");
  t->add_output("swapped");
  auto* perm = t->add_attribute();
  perm->set_name("perm");
  perm->set_type(::onnx::AttributeProto::INTS);
  for (std::int64_t p : {0, 2, 1, 3, 4}) perm->add_ints(p);
  add_node(g, "Reshape", {"swapped", "merged_shape"}, "y");
  g->add_output()->set_name("y");
  std::string bytes;
  REQUIRE(model.SerializeToString(&bytes));
  return bytes;
}

}  // namespace

TEST_CASE("a Reshape whose run-time shape copies the input's own symbolic batch imports as a "
          "static reshape, its other dims known",
          "[onnx][shape]") {
  kiln::onnx::ImportedModel m = kiln::onnx::import_model_from_bytes(channel_shuffle_model(), "shuffle");
  std::vector<std::vector<std::int64_t>> shapes;
  for (Operation* op : m.main.block()) {
    CHECK_FALSE(op->isa<ReshapeByOp>());
    if (op->isa<ReshapeOp>()) shapes.push_back(ReshapeOp(op).attrs().shape);
    if (op->isa<FetchOp>())
      CHECK(shaped_dims(op->operand_source(0).type()) == std::vector<std::int64_t>{-1, 4, 3, 3});
  }
  CHECK(shapes == std::vector<std::vector<std::int64_t>>{{0, 2, 2, 3, 3}, {0, -1, 3, 3}});
  Executor exe;
  exe.run(m.startup);
  for (std::int64_t batch : {2, 5}) {
    INFO("batch " << batch);
    std::vector<float> x(static_cast<std::size_t>(batch * 36));
    for (std::size_t k = 0; k < x.size(); ++k) x[k] = static_cast<float>(k);
    const Tensor y = exe.run(m.main, {{"x", Tensor::from_vector<float>({batch, 4, 3, 3}, x)}}, {"y"})[0];
    REQUIRE(y.dims() == Dims{batch, 4, 3, 3});
    const auto got = y.to_vector<float>();
    // channel j·2 + i of y is channel i·2 + j of x (2 groups of 2)
    for (std::int64_t n = 0; n < batch; ++n)
      for (std::int64_t c = 0; c < 4; ++c)
        for (std::int64_t p = 0; p < 9; ++p)
          CHECK(got[static_cast<std::size_t>((n * 4 + c) * 9 + p)] ==
                x[static_cast<std::size_t>((n * 4 + (c % 2) * 2 + c / 2) * 9 + p)]);
  }
}

// kiln::onnx::import_problems: everything in a model kiln cannot import, at
// once (what `kiln-onnx info` prints), built here with ONNX's protobuf classes.
#include <onnx/onnx_pb.h>

#include <string>
#include <vector>

#include "catch.hpp"
#include "kiln/onnx/import.h"
#include "kiln/support/error.h"

using namespace kiln;

namespace {

void add_input(::onnx::GraphProto* g, const std::string& name, int elem_type) {
  auto* in = g->add_input();
  in->set_name(name);
  auto* t = in->mutable_type()->mutable_tensor_type();
  t->set_elem_type(elem_type);
  t->mutable_shape()->add_dim()->set_dim_value(2);
}

::onnx::NodeProto* add_node(::onnx::GraphProto* g, const std::string& op, const std::string& name,
                            const std::vector<std::string>& ins, const std::string& out) {
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (const auto& i : ins) n->add_input(i);
  n->add_output(out);
  return n;
}

// x: complex64 (kiln lacks it), y: float; a = Frobnicate(y) (no such op),
// b = Cast(y, to string), c = Relu(a) (only a's failure again), d = Relu(y).
std::string model_with_three_problems(std::int64_t opset = 13) {
  ::onnx::ModelProto m;
  m.set_ir_version(7);
  m.add_opset_import()->set_version(opset);
  auto* g = m.mutable_graph();
  add_input(g, "x", ::onnx::TensorProto_DataType_COMPLEX64);
  add_input(g, "y", ::onnx::TensorProto_DataType_FLOAT);
  add_node(g, "Frobnicate", "frob", {"y"}, "a");
  auto* cast = add_node(g, "Cast", "to_string", {"y"}, "b");
  auto* to = cast->add_attribute();
  to->set_name("to");
  to->set_type(::onnx::AttributeProto_AttributeType_INT);
  to->set_i(::onnx::TensorProto_DataType_STRING);
  add_node(g, "Relu", "after_frob", {"a"}, "c");
  add_node(g, "Relu", "fine", {"y"}, "d");
  add_node(g, "Identity", "of_x", {"x"}, "e");
  for (const char* o : {"b", "c", "d", "e"}) g->add_output()->set_name(o);
  std::string bytes;
  REQUIRE(m.SerializeToString(&bytes));
  return bytes;
}

}  // namespace

TEST_CASE("import problems lists each unsupported input, op and attribute value once, not the "
          "nodes that only read them",
          "[onnx]") {
  const auto problems = kiln::onnx::import_problems_from_bytes(model_with_three_problems());
  REQUIRE(problems.size() == 3);
  CHECK_THAT(problems[0], Catch::Contains("graph input 'x'") && Catch::Contains("complex64"));
  CHECK_THAT(problems[1], Catch::Contains("node 'frob' (Frobnicate)") &&
                              Catch::Contains("no importer for op 'Frobnicate'"));
  CHECK_THAT(problems[2], Catch::Contains("node 'to_string' (Cast)") &&
                              Catch::Contains("element type string"));
  // import_model stops at the first of them.
  CHECK_THROWS_WITH(kiln::onnx::import_model_from_bytes(model_with_three_problems()),
                    Catch::Contains("graph input 'x'"));
}

TEST_CASE("an op whose kiln kernels lack the model's dtype is unsupported at import, naming the "
          "node, the kiln op, the dtype and the dtypes it has",
          "[onnx]") {
  // u16 tensors import, and Max has u16 kernels; Relu has none.
  ::onnx::ModelProto m;
  m.set_ir_version(7);
  m.add_opset_import()->set_version(13);
  auto* g = m.mutable_graph();
  add_input(g, "x", ::onnx::TensorProto_DataType_UINT16);
  add_node(g, "Max", "widest", {"x", "x"}, "y");
  add_node(g, "Relu", "rectify", {"y"}, "z");
  g->add_output()->set_name("z");
  std::string bytes;
  REQUIRE(m.SerializeToString(&bytes));
  const auto problems = kiln::onnx::import_problems_from_bytes(bytes);
  REQUIRE(problems.size() == 1);
  CHECK_THAT(problems[0], Catch::Contains("node 'rectify' (Relu)") &&
                              Catch::Contains("kiln.relu") && Catch::Contains("u16") &&
                              Catch::Contains("kernels exist for: f16, bf16, f32, f64, i32, i64"));
  CHECK_THROWS_WITH(kiln::onnx::import_model_from_bytes(bytes), Catch::Contains("kiln.relu"));
}

TEST_CASE("import problems is empty for a model kiln imports, and names an opset it lacks",
          "[onnx]") {
  ::onnx::ModelProto m;
  m.set_ir_version(7);
  m.add_opset_import()->set_version(13);
  add_input(m.mutable_graph(), "y", ::onnx::TensorProto_DataType_FLOAT);
  add_node(m.mutable_graph(), "Relu", "r", {"y"}, "z");
  m.mutable_graph()->add_output()->set_name("z");
  std::string bytes;
  REQUIRE(m.SerializeToString(&bytes));
  CHECK(kiln::onnx::import_problems_from_bytes(bytes).empty());

  const auto future = kiln::onnx::import_problems_from_bytes(model_with_three_problems(99));
  REQUIRE(future.size() == 1);
  CHECK_THAT(future[0], Catch::Contains("opset 99") && Catch::Contains("opsets 1 to 24"));
  CHECK_THROWS_WITH(kiln::onnx::import_model_from_bytes(model_with_three_problems(99)),
                    Catch::Contains("opset 99") && Catch::Contains("opsets 1 to 24"));
  CHECK_THROWS_AS(kiln::onnx::import_problems_from_bytes("not a model"), Error);
}

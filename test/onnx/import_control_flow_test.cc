// ONNX If, Loop and Scan imported as kiln.if / kiln.while: models built here
// with ONNX's protobuf classes, run by the Executor, checked against values
// computed by hand — trip counts (zero included), early exit by the
// condition, scan outputs, subgraphs that read outer values, nesting.
#include <onnx/onnx_pb.h>

#include <string>
#include <vector>

#include "catch.hpp"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/executor.h"
#include "kiln/onnx/import.h"
#include "cf_lowering_util.h"
#include "test_util.h"

using namespace kiln;

namespace {

void set_type(::onnx::ValueInfoProto* v, const std::string& name, int elem,
              const std::vector<std::int64_t>& dims) {
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(elem);
  auto* shape = t->mutable_shape();
  for (auto d : dims) shape->add_dim()->set_dim_value(d);
}

::onnx::NodeProto* add_node(::onnx::GraphProto* g, const std::string& op,
                            const std::vector<std::string>& in, const std::vector<std::string>& out) {
  auto* n = g->add_node();
  n->set_op_type(op);
  for (const auto& i : in) n->add_input(i);
  for (const auto& o : out) n->add_output(o);
  return n;
}

constexpr int kF = ::onnx::TensorProto_DataType_FLOAT, kI64 = ::onnx::TensorProto_DataType_INT64,
              kB = ::onnx::TensorProto_DataType_BOOL;

std::string serialize(::onnx::ModelProto& m, int opset = 13) {
  m.set_ir_version(7);
  m.add_opset_import()->set_version(opset);
  std::string bytes;
  REQUIRE(m.SerializeToString(&bytes));
  return bytes;
}

// A model: inputs M (i64 []), x (f32 [2]), w (f32 [2]); Loop(M, true, x)
// whose body gives x_out = x_in + w · i (w: an outer value) and a scan
// output x_in · 2, stopping early once the iteration number reaches
// `stop_at` (cond_out = i + 1 < stop_at).
std::string loop_model(std::int64_t stop_at) {
  ::onnx::ModelProto m;
  auto* g = m.mutable_graph();
  g->set_name("main");
  set_type(g->add_input(), "M", kI64, {});
  set_type(g->add_input(), "x", kF, {2});
  set_type(g->add_input(), "w", kF, {2});
  auto* stop = g->add_initializer();
  stop->set_name("stop_at");
  stop->set_data_type(kI64);
  stop->add_int64_data(stop_at);
  auto* t = g->add_initializer();
  t->set_name("yes");
  t->set_data_type(kB);
  t->add_int32_data(1);
  auto* loop = add_node(g, "Loop", {"M", "yes", "x"}, {"x_final", "doubled"});
  auto* attr = loop->add_attribute();
  attr->set_name("body");
  attr->set_type(::onnx::AttributeProto_AttributeType_GRAPH);
  auto* body = attr->mutable_g();
  body->set_name("body");
  set_type(body->add_input(), "i", kI64, {});
  set_type(body->add_input(), "cond_in", kB, {});
  set_type(body->add_input(), "x_in", kF, {2});
  auto* one = body->add_initializer();
  one->set_name("one");
  one->set_data_type(kI64);
  one->add_int64_data(1);
  auto* two = body->add_initializer();
  two->set_name("two");
  two->set_data_type(kF);
  two->add_float_data(2.0f);
  add_node(body, "Cast", {"i"}, {"i_f"})->add_attribute()->set_name("to");
  body->mutable_node(0)->mutable_attribute(0)->set_type(::onnx::AttributeProto_AttributeType_INT);
  body->mutable_node(0)->mutable_attribute(0)->set_i(kF);
  add_node(body, "Mul", {"w", "i_f"}, {"step"});
  add_node(body, "Add", {"x_in", "step"}, {"x_out"});
  add_node(body, "Mul", {"x_in", "two"}, {"scan"});
  add_node(body, "Add", {"i", "one"}, {"next"});
  add_node(body, "Less", {"next", "stop_at"}, {"cond_out"});
  set_type(body->add_output(), "cond_out", kB, {});
  set_type(body->add_output(), "x_out", kF, {2});
  set_type(body->add_output(), "scan", kF, {2});
  set_type(g->add_output(), "x_final", kF, {2});
  set_type(g->add_output(), "doubled", kF, {-1, 2});
  g->mutable_output(1)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0)->set_dim_param("n");
  return serialize(m);
}

std::vector<Tensor> run_loop(std::int64_t trip, std::int64_t stop_at) {
  kiln::onnx::ImportedModel m = kiln::onnx::import_model_from_bytes(loop_model(stop_at), "loop model");
  kiln_test::BothWays exe;  // structured and lowered to dataflow ops, bit-identical
  exe.run(m.startup);
  FeedMap feed{{"M", Tensor::from_vector<std::int64_t>(Dims{}, {trip})},
               {"x", Tensor::from_vector<float>(Dims{2}, {1, 10})},
               {"w", Tensor::from_vector<float>(Dims{2}, {1, -1})}};
  auto got = exe.run(m.main, feed, {"x_final", "doubled"});
  CHECK(exe.lowered_runs() == 1);
  return got;
}

}  // namespace

TEST_CASE("an ONNX Loop becomes a kiln.while: the trip count bounds it, values carry across "
          "iterations, scan outputs stack, and the body reads outer values",
          "[onnx][cf]") {
  kiln::onnx::ImportedModel m = kiln::onnx::import_model_from_bytes(loop_model(100), "loop model");
  std::size_t whiles = 0;
  for (Operation* op : m.main.block()) whiles += op->isa<WhileOp>();
  CHECK(whiles == 1);
  // x after 3 iterations: x + w·(0 + 1 + 2); scans: x_in·2 per iteration
  // (x_in: x, x, x + w).
  auto r = run_loop(3, 100);
  CHECK(r[0].to_vector<float>() == std::vector<float>{4, 7});
  CHECK(r[1].dims() == Dims{3, 2});
  CHECK(r[1].to_vector<float>() == std::vector<float>{2, 20, 2, 20, 4, 18});
}

TEST_CASE("an ONNX Loop stops when its body's condition turns false, and runs zero times for "
          "a trip count of 0",
          "[onnx][cf]") {
  auto early = run_loop(10, 2);  // two iterations: the condition after i = 1 is false
  CHECK(early[0].to_vector<float>() == std::vector<float>{2, 9});
  CHECK(early[1].dims() == Dims{2, 2});
  auto none = run_loop(0, 100);
  CHECK(none[0].to_vector<float>() == std::vector<float>{1, 10});
  CHECK(none[1].dims() == Dims{0, 2});
}

TEST_CASE("an ONNX If inside a Loop body reads values from both enclosing graphs", "[onnx][cf]") {
  // y = Σ_{i < 3} (i even ? x : -x) = x, with x outer to the loop and the
  // parity carried as a bool the body negates.
  ::onnx::ModelProto m;
  auto* g = m.mutable_graph();
  set_type(g->add_input(), "x", kF, {});
  auto* trip = g->add_initializer();
  trip->set_name("three");
  trip->set_data_type(kI64);
  trip->add_int64_data(3);
  auto* zero = g->add_initializer();
  zero->set_name("zero");
  zero->set_data_type(kF);
  zero->add_float_data(0.0f);
  auto* yes = g->add_initializer();
  yes->set_name("yes");
  yes->set_data_type(kB);
  yes->add_int32_data(1);
  auto* loop = add_node(g, "Loop", {"three", "", "zero", "yes"}, {"y", "parity"});
  auto* a = loop->add_attribute();
  a->set_name("body");
  a->set_type(::onnx::AttributeProto_AttributeType_GRAPH);
  auto* body = a->mutable_g();
  set_type(body->add_input(), "i", kI64, {});
  set_type(body->add_input(), "c", kB, {});
  set_type(body->add_input(), "acc", kF, {});
  set_type(body->add_input(), "even", kB, {});
  auto* iff = add_node(body, "If", {"even"}, {"term"});
  for (const char* branch : {"then_branch", "else_branch"}) {
    auto* ba = iff->add_attribute();
    ba->set_name(branch);
    ba->set_type(::onnx::AttributeProto_AttributeType_GRAPH);
    auto* bg = ba->mutable_g();
    if (std::string(branch) == "then_branch") add_node(bg, "Identity", {"x"}, {"t"});
    else add_node(bg, "Neg", {"x"}, {"t"});
    set_type(bg->add_output(), "t", kF, {});
  }
  add_node(body, "Add", {"acc", "term"}, {"acc_out"});
  add_node(body, "Not", {"even"}, {"even_out"});
  add_node(body, "Identity", {"c"}, {"c_out"});
  set_type(body->add_output(), "c_out", kB, {});
  set_type(body->add_output(), "acc_out", kF, {});
  set_type(body->add_output(), "even_out", kB, {});
  set_type(g->add_output(), "y", kF, {});
  set_type(g->add_output(), "parity", kB, {});
  kiln::onnx::ImportedModel im = kiln::onnx::import_model_from_bytes(serialize(m), "nested model");
  kiln_test::BothWays exe;
  exe.run(im.startup);
  auto got = exe.run(im.main, {{"x", Tensor::from_vector<float>(Dims{}, {2.5f})}}, {"y", "parity"});
  CHECK(exe.lowered_runs() == 1);
  CHECK(got[0].to_vector<float>() == std::vector<float>{2.5f});
  CHECK(got[1].to_vector<bool>() == std::vector<bool>{false});
}

TEST_CASE("an ONNX If whose branch gives a mismatched dtype is a clear error naming the node",
          "[onnx][cf]") {
  ::onnx::ModelProto m;
  auto* g = m.mutable_graph();
  set_type(g->add_input(), "p", kB, {});
  set_type(g->add_input(), "x", kF, {2});
  set_type(g->add_input(), "n", kI64, {2});
  auto* iff = add_node(g, "If", {"p"}, {"y"});
  iff->set_name("pick");
  for (const char* branch : {"then_branch", "else_branch"}) {
    auto* ba = iff->add_attribute();
    ba->set_name(branch);
    ba->set_type(::onnx::AttributeProto_AttributeType_GRAPH);
    auto* bg = ba->mutable_g();
    add_node(bg, "Identity", {std::string(branch) == "then_branch" ? "x" : "n"}, {"t"});
    set_type(bg->add_output(), "t", kF, {2});
  }
  set_type(g->add_output(), "y", kF, {2});
  KILN_CHECK_ERROR(kiln::onnx::import_model_from_bytes(serialize(m), "if model"), Unimplemented,
                   {"'pick' (If)", "then_branch", "else_branch"});
}

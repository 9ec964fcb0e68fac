// Writes dynamic_batch.onnx (not built with kiln; kept to show how the model
// was made): opset 13, x float [batch, 3, 4] with a symbolic batch dim,
//   y = Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0), [0]), [12]))  -> [batch, 12]
//   z = Expand(b, Shape(x)), b = [1, 2, 3, 4]                          -> [batch, 3, 4]
//   w = Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0), [0]),
//                         Unsqueeze(Gather(Shape(x), 1), [0]), [-1]))  -> [batch, 3, 4]
//   last = Gather(x, -1) along the batch                                -> [3, 4]
//   steps = Range(0, 4, 1), all known at import                         -> [4]
// the way PyTorch exports x.reshape(x.shape[0], 12) and b.expand(x.shape)
// with dynamic_axes. Build:
//   c++ -std=c++20 -DONNX_ML=1 -DONNX_NAMESPACE=onnx make_dynamic_batch.cc \
//       -lonnx_proto -lprotobuf -o make_dynamic_batch && ./make_dynamic_batch out.onnx
#include <onnx/onnx_pb.h>

#include <fstream>
#include <string>
#include <vector>

namespace {

void add_ints(onnx::GraphProto* g, const std::string& name, const std::vector<long long>& v,
              bool scalar = false) {
  auto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto_DataType_INT64);
  if (!scalar) t->add_dims(static_cast<long long>(v.size()));
  for (auto x : v) t->add_int64_data(x);
}

onnx::NodeProto* node(onnx::GraphProto* g, const std::string& op, const std::string& name,
                      std::vector<std::string> in, std::vector<std::string> out) {
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (auto& s : in) n->add_input(s);
  for (auto& s : out) n->add_output(s);
  return n;
}

void set_axis(onnx::NodeProto* n, long long axis) {
  auto* a = n->add_attribute();
  a->set_name("axis");
  a->set_type(onnx::AttributeProto_AttributeType_INT);
  a->set_i(axis);
}

void value_info(onnx::ValueInfoProto* v, const std::string& name, std::vector<std::string> dims) {
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto_DataType_FLOAT);
  for (auto& d : dims) {
    auto* dim = tt->mutable_shape()->add_dim();
    if (d[0] >= '0' && d[0] <= '9') dim->set_dim_value(std::stoll(d));
    else dim->set_dim_param(d);
  }
}

}  // namespace

int main(int argc, char** argv) {
  onnx::ModelProto m;
  m.set_ir_version(7);
  m.set_producer_name("kiln test");
  m.add_opset_import()->set_version(13);
  auto* g = m.mutable_graph();
  g->set_name("dynamic_batch");
  add_ints(g, "zero", {0}, true);
  add_ints(g, "axes0", {0});
  add_ints(g, "twelve", {12});
  add_ints(g, "one", {1}, true);
  add_ints(g, "minus1", {-1});
  add_ints(g, "minus1_scalar", {-1}, true);
  add_ints(g, "four", {4}, true);
  auto* b = g->add_initializer();
  b->set_name("b");
  b->set_data_type(onnx::TensorProto_DataType_FLOAT);
  b->add_dims(4);
  for (float v : {1.f, 2.f, 3.f, 4.f}) b->add_float_data(v);
  value_info(g->add_input(), "x", {"batch", "3", "4"});
  node(g, "Shape", "shape", {"x"}, {"s"});
  set_axis(node(g, "Gather", "gather", {"s", "zero"}, {"n"}), 0);
  node(g, "Unsqueeze", "unsqueeze", {"n", "axes0"}, {"n1"});
  set_axis(node(g, "Concat", "concat", {"n1", "twelve"}, {"shape"}), 0);
  node(g, "Reshape", "reshape", {"x", "shape"}, {"y"});
  node(g, "Expand", "expand", {"b", "s"}, {"z"});
  set_axis(node(g, "Gather", "gather1", {"s", "one"}, {"m"}), 0);
  node(g, "Unsqueeze", "unsqueeze1", {"m", "axes0"}, {"m1"});
  set_axis(node(g, "Concat", "concat2", {"n1", "m1", "minus1"}, {"shape2"}), 0);
  node(g, "Reshape", "reshape2", {"x", "shape2"}, {"w"});
  set_axis(node(g, "Gather", "gather_last", {"x", "minus1_scalar"}, {"last"}), 0);
  node(g, "Range", "range", {"zero", "four", "one"}, {"steps"});
  value_info(g->add_output(), "y", {"batch", "12"});
  value_info(g->add_output(), "z", {"batch", "3", "4"});
  value_info(g->add_output(), "w", {"batch", "3", "4"});
  value_info(g->add_output(), "last", {"3", "4"});
  value_info(g->add_output(), "steps", {"4"});
  g->mutable_output(g->output_size() - 1)->mutable_type()->mutable_tensor_type()->set_elem_type(
      onnx::TensorProto_DataType_INT64);
  std::ofstream f(argc > 1 ? argv[1] : "dynamic_batch.onnx", std::ios::binary);
  return m.SerializeToOstream(&f) ? 0 : 1;
}

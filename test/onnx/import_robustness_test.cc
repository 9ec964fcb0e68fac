// Bad ONNX models are kiln::Errors, never crashes or other exceptions (what
// tools/fuzz/onnx_import_fuzz checks): the cases here are those the fuzzer
// found or that guard the same paths.
#include <onnx/onnx_pb.h>

#include <string>
#include <vector>

#include "catch.hpp"
#include "kiln/exec/executor.h"
#include "kiln/onnx/import.h"
#include "kiln/support/error.h"
#include "test_util.h"

namespace {

// y = Identity(w), w an initializer of `dims` holding `values` floats.
std::string initializer_model(const std::vector<std::int64_t>& dims, int values) {
  ::onnx::ModelProto m;
  m.set_ir_version(7);
  m.add_opset_import()->set_version(13);
  auto* g = m.mutable_graph();
  auto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(::onnx::TensorProto_DataType_FLOAT);
  for (auto d : dims) w->add_dims(d);
  for (int i = 0; i < values; ++i) w->add_float_data(1.0f);
  auto* n = g->add_node();
  n->set_op_type("Identity");
  n->set_name("id");
  n->add_input("w");
  n->add_output("y");
  g->add_output()->set_name("y");
  std::string bytes;
  REQUIRE(m.SerializeToString(&bytes));
  return bytes;
}

}  // namespace

TEST_CASE("ONNX tensors whose dims promise more data than they hold are errors before anything "
          "is allocated",
          "[onnx]") {
  // 2^40 floats (4 TiB) declared, one value held.
  KILN_CHECK_ERROR(kiln::onnx::import_model_from_bytes(initializer_model({1 << 20, 1 << 20}, 1)),
                   InvalidArgument, {"initializer 'w'", "1 values"});
  // Dims whose product overflows 64 bits.
  KILN_CHECK_ERROR(kiln::onnx::import_model_from_bytes(
                       initializer_model({std::int64_t{1} << 40, std::int64_t{1} << 40}, 0)),
                   InvalidArgument, {"initializer 'w'"});
  // The same, as a serialized TensorProto.
  ::onnx::TensorProto t;
  t.set_data_type(::onnx::TensorProto_DataType_FLOAT);
  t.add_dims(std::int64_t{1} << 42);
  t.set_raw_data(std::string(8, '\0'));
  std::string bytes;
  REQUIRE(t.SerializeToString(&bytes));
  KILN_CHECK_ERROR(kiln::onnx::tensor_from_bytes(bytes, "big"), InvalidArgument, {"big", "8 bytes"});
}

namespace {

// One node of `op` reading `inputs` float [2] graph inputs (named x0, x1, …).
std::string one_node(const std::string& op, int inputs, std::int64_t opset) {
  ::onnx::ModelProto m;
  m.set_ir_version(7);
  m.add_opset_import()->set_version(opset);
  auto* g = m.mutable_graph();
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name("n");
  for (int i = 0; i < inputs; ++i) {
    auto* in = g->add_input();
    in->set_name("x" + std::to_string(i));
    auto* t = in->mutable_type()->mutable_tensor_type();
    t->set_elem_type(::onnx::TensorProto_DataType_FLOAT);
    t->mutable_shape()->add_dim()->set_dim_value(2);
    n->add_input("x" + std::to_string(i));
  }
  n->add_output("y");
  g->add_output()->set_name("y");
  std::string bytes;
  REQUIRE(m.SerializeToString(&bytes));
  return bytes;
}

}  // namespace

TEST_CASE("ONNX nodes with fewer inputs than their op takes are errors naming the node, for "
          "every op kiln imports",
          "[onnx]") {
  KILN_CHECK_ERROR(kiln::onnx::import_model_from_bytes(one_node("Reshape", 1, 13)), InvalidArgument,
                   {"node 'n' (Reshape)", "needs input #1"});
  // Each op that reads an input's value at import, with too few inputs.
  for (const char* op :
       {"Reshape", "Expand", "Tile", "Slice", "Pad", "Resize", "Upsample", "Clip", "Dropout",
        "ConstantOfShape", "Range", "OneHot", "TopK", "Split", "Squeeze", "Unsqueeze", "ReduceSum",
        "Gather", "GatherElements", "ScatterElements", "CumSum", "Trilu", "Where", "Concat", "Gemm",
        "MatMul", "Conv", "BatchNormalization", "LayerNormalization", "Einsum", "Mod", "Pow",
        "CastLike", "Shape", "Size", "NonZero", "ReduceMean", "ArgMax", "Softmax", "If", "Loop", "Scan",
        "GridSample", "RoiAlign", "MaxPool", "AveragePool", "Flatten", "Transpose", "DepthToSpace",
        "SpaceToDepth", "EyeLike", "Hardmax", "LpNormalization", "MeanVarianceNormalization",
        "NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss", "RandomNormalLike", "Bernoulli"})
    for (int inputs : {0, 1})
      for (std::int64_t opset : {7, 11, 13, 17}) {
        INFO(op << " with " << inputs << " inputs at opset " << opset);
        try {
          (void)kiln::onnx::import_model_from_bytes(one_node(op, inputs, opset));
        } catch (const kiln::Error&) {
        }
      }
}

namespace {

// y = op(x, <inputs after x>), x a float graph input of `dims`; `empty`
// names an input (at its position) that is an initializer holding no value
// of `elem_type`; "" an omitted input.
std::string with_empty_operand(const std::string& op, std::int64_t opset,
                               const std::vector<std::int64_t>& dims,
                               const std::vector<std::string>& rest, int elem_type) {
  ::onnx::ModelProto m;
  m.set_ir_version(7);
  m.add_opset_import()->set_version(opset);
  auto* g = m.mutable_graph();
  auto* in = g->add_input();
  in->set_name("x");
  auto* t = in->mutable_type()->mutable_tensor_type();
  t->set_elem_type(::onnx::TensorProto_DataType_FLOAT);
  for (auto d : dims) t->mutable_shape()->add_dim()->set_dim_value(d);
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name("n");
  n->add_input("x");
  for (const auto& r : rest) {
    n->add_input(r);
    if (r.empty()) continue;
    auto* init = g->add_initializer();
    init->set_name(r);
    init->set_data_type(elem_type);
    init->add_dims(0);
  }
  n->add_output("y");
  g->add_output()->set_name("y");
  std::string bytes;
  REQUIRE(m.SerializeToString(&bytes));
  return bytes;
}

}  // namespace

TEST_CASE("ONNX scalar operands known at import that hold no value are errors naming the node",
          "[onnx]") {
  const int i64 = ::onnx::TensorProto_DataType_INT64, f32 = ::onnx::TensorProto_DataType_FLOAT;
  CHECK_THROWS_AS(kiln::onnx::import_model_from_bytes(with_empty_operand("Trilu", 14, {2, 2}, {"k"}, i64)),
                  kiln::Error);
  CHECK_THROWS_AS(kiln::onnx::import_model_from_bytes(with_empty_operand("TopK", 11, {4}, {"k"}, i64)),
                  kiln::Error);
  CHECK_THROWS_AS(kiln::onnx::import_model_from_bytes(with_empty_operand("CumSum", 11, {2}, {"axis"}, i64)),
                  kiln::Error);
  CHECK_THROWS_AS(kiln::onnx::import_model_from_bytes(with_empty_operand("Clip", 11, {2}, {"lo"}, f32)),
                  kiln::Error);
  CHECK_THROWS_AS(kiln::onnx::import_model_from_bytes(
                      with_empty_operand("Dropout", 12, {2}, {"", "mode"}, ::onnx::TensorProto_DataType_BOOL)),
                  kiln::Error);
}

TEST_CASE("a TfIdfVectorizer of string tokens, or of a pool its counts do not cut into n-grams, is an error "
          "naming the node",
          "[onnx]") {
  auto model = [](bool strings, std::vector<std::int64_t> counts, bool string_input = false) {
    ::onnx::ModelProto m;
    REQUIRE(m.ParseFromString(one_node("TfIdfVectorizer", 0, 9)));
    auto* g = m.mutable_graph();
    auto* in = g->add_input();
    in->set_name("x");
    auto* t = in->mutable_type()->mutable_tensor_type();
    t->set_elem_type(string_input ? ::onnx::TensorProto_DataType_STRING : ::onnx::TensorProto_DataType_INT64);
    t->mutable_shape()->add_dim()->set_dim_value(4);
    auto* n = g->mutable_node(0);
    n->add_input("x");
    auto attr = [&](const char* name, ::onnx::AttributeProto_AttributeType type) {
      auto* a = n->add_attribute();
      a->set_name(name);
      a->set_type(type);
      return a;
    };
    attr("mode", ::onnx::AttributeProto_AttributeType_STRING)->set_s("TF");
    attr("min_gram_length", ::onnx::AttributeProto_AttributeType_INT)->set_i(1);
    attr("max_gram_length", ::onnx::AttributeProto_AttributeType_INT)->set_i(2);
    attr("max_skip_count", ::onnx::AttributeProto_AttributeType_INT)->set_i(0);
    auto* c = attr("ngram_counts", ::onnx::AttributeProto_AttributeType_INTS);
    for (auto v : counts) c->add_ints(v);
    auto* idx = attr("ngram_indexes", ::onnx::AttributeProto_AttributeType_INTS);
    for (int i = 0; i < 3; ++i) idx->add_ints(i);
    if (strings) {
      auto* p = attr("pool_strings", ::onnx::AttributeProto_AttributeType_STRINGS);
      for (const char* s : {"a", "b", "a", "b"}) p->add_strings(s);
    } else {
      auto* p = attr("pool_int64s", ::onnx::AttributeProto_AttributeType_INTS);
      for (int v : {1, 2, 1, 2}) p->add_ints(v);
    }
    std::string bytes;
    REQUIRE(m.SerializeToString(&bytes));
    return bytes;
  };
  // The pool's 1-grams 1, 2 and 2-gram (1, 2) in columns 0, 1, 2.
  auto m = kiln::onnx::import_model_from_bytes(model(false, {0, 2}));
  kiln::Executor exe;
  exe.run(m.startup);
  const auto y = exe.run(m.main, {{"x", kiln::Tensor::from_vector<std::int64_t>({4}, {1, 2, 1, 2})}}, {"y"});
  CHECK(y.at(0).to_vector<float>() == std::vector<float>{2, 2, 2});
  KILN_CHECK_ERROR(kiln::onnx::import_model_from_bytes(model(true, {0, 2})), Unimplemented,
                   {"TfIdfVectorizer", "pool_strings"});
  KILN_CHECK_ERROR(kiln::onnx::import_model_from_bytes(model(true, {0, 2}, true)), Unimplemented,
                   {"graph input 'x'", "element type string"});
  KILN_CHECK_ERROR(kiln::onnx::import_model_from_bytes(model(false, {0, 1})), InvalidArgument,
                   {"TfIdfVectorizer", "kiln.tfidf_vectorizer", "ngram_counts"});
}

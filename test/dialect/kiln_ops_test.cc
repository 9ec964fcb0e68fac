// The first op set (data, fetch, full, add, matmul, relu, relu_, reshape,
// uniform_random) and the builtin ops: each op's InferMeta on good input,
// and the kiln::Error it gives for bad input.
#include "kiln/dialect/kiln_dialect.h"

#include "../ir/ir_test_util.h"
#include "catch.hpp"

using namespace kiln;

namespace {
using Shape = std::vector<std::int64_t>;

Type tf(Shape d) { return TensorType::get(DataType::Float32, std::move(d)); }
Type vf(Shape d) { return VTensorType::get(DataType::Float32, std::move(d)); }

Type add(Type a, Type b) {
  auto out = AddOp::infer_meta({a, b}, DictionaryAttribute::get());
  REQUIRE(out.size() == 1);
  return out[0];
}

Type matmul(Type a, Type b, bool tx = false, bool ty = false) {
  auto attrs = DictionaryAttribute::get(to_named_attributes(MatmulOp::Attributes{tx, ty}));
  auto out = MatmulOp::infer_meta({a, b}, attrs);
  REQUIRE(out.size() == 1);
  return out[0];
}

Type reshape(Type x, Shape shape) {
  auto attrs = DictionaryAttribute::get(to_named_attributes(ReshapeOp::Attributes{std::move(shape)}));
  auto out = ReshapeOp::infer_meta({x}, attrs);
  REQUIRE(out.size() == 1);
  return out[0];
}
}  // namespace

// ---- add / broadcasting ----

TEST_CASE("add of equal shapes keeps the shape and dtype", "[dialect][kiln][add]") {
  CHECK(add(tf({2, 3}), tf({2, 3})) == tf({2, 3}));
  CHECK(add(TensorType::get(DataType::Int64, {4}), TensorType::get(DataType::Int64, {4})) ==
        TensorType::get(DataType::Int64, {4}));
  CHECK(add(tf({}), tf({})) == tf({}));
}

TEST_CASE("add broadcasts numpy-style from the trailing dims", "[dialect][kiln][add]") {
  CHECK(add(tf({2, 3}), tf({3})) == tf({2, 3}));
  CHECK(add(tf({3}), tf({2, 3})) == tf({2, 3}));
  CHECK(add(tf({2, 1}), tf({1, 3})) == tf({2, 3}));
  CHECK(add(tf({4, 1, 3}), tf({2, 1})) == tf({4, 2, 3}));
  CHECK(add(tf({}), tf({5, 2})) == tf({5, 2}));
  CHECK(add(tf({1}), tf({7})) == tf({7}));
}

TEST_CASE("add broadcasting treats -1 as unknown: it yields to a known dim but not to 1",
          "[dialect][kiln][add]") {
  CHECK(add(tf({-1, 3}), tf({4, 3})) == tf({4, 3}));
  CHECK(add(tf({4, 3}), tf({-1, 3})) == tf({4, 3}));
  CHECK(add(tf({-1, 3}), tf({1, 3})) == tf({-1, 3}));
  CHECK(add(tf({1, 3}), tf({-1, 3})) == tf({-1, 3}));
  CHECK(add(tf({-1, 3}), tf({-1, 3})) == tf({-1, 3}));
  CHECK(add(tf({-1, 3}), tf({3})) == tf({-1, 3}));
  CHECK(broadcast_shapes("t", {-1}, {5, 1}) == Shape{5, -1});
}

TEST_CASE("add of shapes that cannot broadcast names the op and both shapes",
          "[dialect][kiln][add]") {
  KILN_CHECK_ERROR(add(tf({2, 3}), tf({4, 3})), InvalidArgument,
                   {"'kiln.add'", "[2, 3]", "[4, 3]"});
  KILN_CHECK_ERROR(add(tf({3}), tf({2, 2})), InvalidArgument, {"'kiln.add'", "broadcast"});
  KILN_CHECK_ERROR(broadcast_shapes("my.op", {2}, {3}), InvalidArgument, {"'my.op'"});
}

TEST_CASE("add of f32 and f64 is an InvalidArgument error naming 'kiln.add'",
          "[dialect][kiln][add]") {
  KILN_CHECK_ERROR(add(tf({2}), TensorType::get(DataType::Float64, {2})), InvalidArgument,
                   {"'kiln.add'", "f32", "f64"});
  // Through the builder: nothing is inserted.
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", Shape{2}, DataType::Float32);
  auto y = b.create<DataOp>("y", Shape{2}, DataType::Float64);
  KILN_CHECK_ERROR(b.create<AddOp>(x.result(), y.result()), InvalidArgument, {"'kiln.add'"});
  CHECK(p.block().size() == 2);
}

TEST_CASE("add of a non-tensor operand names the operand", "[dialect][kiln][add]") {
  KILN_CHECK_ERROR(add(Float32Type::get(), tf({2})), InvalidArgument,
                   {"'kiln.add'", "operand #0", "tensor", "f32"});
  KILN_CHECK_ERROR(AddOp::infer_meta({tf({2})}, DictionaryAttribute::get()), InvalidArgument,
                   {"'kiln.add'", "takes 2 operands", "got 1"});
}

TEST_CASE("add gives a vtensor only when both operands are vtensors", "[dialect][kiln][add]") {
  CHECK(add(vf({2}), vf({2})) == vf({2}));
  CHECK(add(vf({2}), tf({2})) == tf({2}));
  CHECK(add(tf({2}), vf({1})) == tf({2}));
}

// ---- matmul ----

TEST_CASE("matmul contracts the last dim of x with the second-last of y",
          "[dialect][kiln][matmul]") {
  CHECK(matmul(tf({2, 3}), tf({3, 4})) == tf({2, 4}));
  CHECK(matmul(tf({-1, 16}), tf({16, 1})) == tf({-1, 1}));
  CHECK(matmul(vf({2, 3}), vf({3, 4})) == vf({2, 4}));
  CHECK(matmul(TensorType::get(DataType::Float64, {1, 1}),
               TensorType::get(DataType::Float64, {1, 1})) ==
        TensorType::get(DataType::Float64, {1, 1}));
}

TEST_CASE("matmul honours transpose_x and transpose_y", "[dialect][kiln][matmul]") {
  CHECK(matmul(tf({3, 2}), tf({3, 4}), true, false) == tf({2, 4}));
  CHECK(matmul(tf({2, 3}), tf({4, 3}), false, true) == tf({2, 4}));
  CHECK(matmul(tf({3, 2}), tf({4, 3}), true, true) == tf({2, 4}));
  KILN_CHECK_ERROR(matmul(tf({2, 3}), tf({3, 4}), true, false), InvalidArgument,
                   {"'kiln.matmul'"});
}

TEST_CASE("matmul broadcasts batch dims", "[dialect][kiln][matmul]") {
  CHECK(matmul(tf({5, 2, 3}), tf({3, 4})) == tf({5, 2, 4}));
  CHECK(matmul(tf({2, 3}), tf({7, 3, 4})) == tf({7, 2, 4}));
  CHECK(matmul(tf({5, 1, 2, 3}), tf({4, 3, 6})) == tf({5, 4, 2, 6}));
  KILN_CHECK_ERROR(matmul(tf({2, 2, 3}), tf({3, 3, 4})), InvalidArgument, {"'kiln.matmul'"});
}

TEST_CASE("matmul with mismatched contraction dims names the op and both dims",
          "[dialect][kiln][matmul]") {
  KILN_CHECK_ERROR(matmul(tf({2, 3}), tf({5, 4})), InvalidArgument,
                   {"'kiln.matmul'", "contraction", "3", "5"});
  // An unknown contraction dim is not an error.
  CHECK(matmul(tf({2, -1}), tf({5, 4})) == tf({2, 4}));
  CHECK(matmul(tf({2, 3}), tf({-1, 4})) == tf({2, 4}));
}

TEST_CASE("matmul needs rank >= 2 tensors of one dtype", "[dialect][kiln][matmul]") {
  KILN_CHECK_ERROR(matmul(tf({3}), tf({3, 4})), InvalidArgument, {"'kiln.matmul'", "rank"});
  KILN_CHECK_ERROR(matmul(tf({2, 3}), TensorType::get(DataType::Int32, {3, 4})), InvalidArgument,
                   {"'kiln.matmul'", "f32", "i32"});
  KILN_CHECK_ERROR(matmul(Int64Type::get(), tf({3, 4})), InvalidArgument,
                   {"'kiln.matmul'", "operand #0"});
}

TEST_CASE("matmul without its transpose attributes names the missing one",
          "[dialect][kiln][matmul]") {
  KILN_CHECK_ERROR(MatmulOp::infer_meta({tf({2, 3}), tf({3, 4})}, DictionaryAttribute::get()),
                   InvalidArgument, {"'kiln.matmul'", "'transpose_x'"});
}

// ---- relu / relu_ ----

TEST_CASE("relu keeps its operand's type, tensor or vtensor", "[dialect][kiln][relu]") {
  CHECK(ReluOp::infer_meta({tf({-1, 4})}, {}) == std::vector<Type>{tf({-1, 4})});
  CHECK(ReluOp::infer_meta({vf({3})}, {}) == std::vector<Type>{vf({3})});
  KILN_CHECK_ERROR(ReluOp::infer_meta({Float32Type::get()}, {}), InvalidArgument,
                   {"'kiln.relu'", "tensor"});
  KILN_CHECK_ERROR(ReluOp::infer_meta({}, {}), InvalidArgument, {"'kiln.relu'"});
}

TEST_CASE("relu_ writes in place, so it takes a tensor but not a vtensor",
          "[dialect][kiln][relu]") {
  CHECK(Relu_Op::infer_meta({tf({2})}, {}) == std::vector<Type>{tf({2})});
  KILN_CHECK_ERROR(Relu_Op::infer_meta({vf({2})}, {}), InvalidArgument,
                   {"'kiln.relu_'", "vtensor"});
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", Shape{2});
  auto r = b.create<Relu_Op>(x.result());
  CHECK(r->has_trait<Inplace>());
  CHECK_FALSE(r->has_trait<ValueSemantics>());
  CHECK_NOTHROW(p.verify());
}

// ---- reshape ----

TEST_CASE("reshape to a shape with the same element count", "[dialect][kiln][reshape]") {
  CHECK(reshape(tf({2, 3}), {3, 2}) == tf({3, 2}));
  CHECK(reshape(tf({2, 3}), {6}) == tf({6}));
  CHECK(reshape(tf({1}), {}) == tf({}));
  CHECK(reshape(TensorType::get(DataType::Int64, {2, 3}), {6}) ==
        TensorType::get(DataType::Int64, {6}));
  CHECK(reshape(vf({2, 3}), {6}) == vf({6}));
}

TEST_CASE("reshape infers one -1 and copies dims given as 0", "[dialect][kiln][reshape]") {
  CHECK(reshape(tf({2, 3}), {-1}) == tf({6}));
  CHECK(reshape(tf({2, 3}), {-1, 2}) == tf({3, 2}));
  CHECK(reshape(tf({2, 3, 4}), {0, -1}) == tf({2, 12}));
  CHECK(reshape(tf({2, 3}), {0, 3}) == tf({2, 3}));
}

TEST_CASE("reshape of a shape with unknown dims leaves what it cannot infer unknown",
          "[dialect][kiln][reshape]") {
  CHECK(reshape(tf({-1, 3}), {-1}) == tf({-1}));
  CHECK(reshape(tf({-1, 3}), {3, -1}) == tf({3, -1}));
  CHECK(reshape(tf({-1, 3}), {0, 3}) == tf({-1, 3}));
}

TEST_CASE("reshape infers its -1 when the only unknown dim is one it copies (a batch kept by 0)",
          "[dialect][kiln][reshape]") {
  CHECK(reshape(tf({-1, 24, 2, 7, 7}), {0, -1, 7, 7}) == tf({-1, 48, 7, 7}));
  CHECK(reshape(tf({-1, 48, 7, 7}), {0, 2, 24, 7, 7}) == tf({-1, 2, 24, 7, 7}));
  CHECK(reshape(tf({-1, 3, -1}), {0, -1}) == tf({-1, -1}));  // another unknown dim
  KILN_CHECK_ERROR(reshape(tf({-1, 3, 4}), {0, 5, -1}), InvalidArgument, {"'kiln.reshape'", "12", "5"});
}

TEST_CASE("reshape to a different element count names the op and the counts",
          "[dialect][kiln][reshape]") {
  KILN_CHECK_ERROR(reshape(tf({2, 3}), {4}), InvalidArgument, {"'kiln.reshape'", "6", "4"});
  KILN_CHECK_ERROR(reshape(tf({2, 3}), {4, -1}), InvalidArgument, {"'kiln.reshape'", "6"});
  KILN_CHECK_ERROR(reshape(tf({2, 3}), {7, 1}), InvalidArgument, {"'kiln.reshape'"});
}

TEST_CASE("reshape rejects two -1s, a 0 past the input's rank and dims below -1",
          "[dialect][kiln][reshape]") {
  KILN_CHECK_ERROR(reshape(tf({2, 3}), {-1, -1}), InvalidArgument, {"'kiln.reshape'", "-1"});
  KILN_CHECK_ERROR(reshape(tf({6}), {2, 0}), InvalidArgument, {"'kiln.reshape'", "rank"});
  KILN_CHECK_ERROR(reshape(tf({6}), {-2, -3}), InvalidArgument, {"'kiln.reshape'"});
  KILN_CHECK_ERROR(reshape(Float32Type::get(), {1}), InvalidArgument, {"'kiln.reshape'"});
}

TEST_CASE("reshape is a view of its input", "[dialect][kiln][reshape]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", Shape{4, 4});
  auto r = b.create<ReshapeOp>(x.result(), Shape{2, -1});
  CHECK(r.result().type() == tf({2, 8}));
  CHECK(r->has_trait<ViewLike>());
  CHECK(r.attrs().shape == Shape{2, -1});
  CHECK_NOTHROW(p.verify());
}

// ---- data / full / uniform_random / fetch ----

TEST_CASE("data gives a tensor of its declared shape and dtype", "[dialect][kiln][data]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", Shape{-1, 16}, DataType::Int32, Place::host_stream(1));
  CHECK(x.result().type() == TensorType::get(DataType::Int32, {-1, 16}));
  CHECK(x->num_operands() == 0);
  CHECK(x->attribute<StrAttribute>("name").value() == "x");
  CHECK(x->attribute<PlaceAttribute>("place").value() == Place::host_stream(1));
  KILN_CHECK_ERROR(b.create<DataOp>("", Shape{1}), InvalidArgument, {"'kiln.data'", "name"});
  KILN_CHECK_ERROR(b.create<DataOp>("y", Shape{2, -3}), InvalidArgument, {"'kiln.data'", "-3"});
  CHECK(p.block().size() == 1);
}

TEST_CASE("full gives a tensor of its shape attribute", "[dialect][kiln][full]") {
  Program p;
  Builder b(p);
  auto f = b.create<FullOp>(Shape{3, 1}, 2.5, DataType::Float64);
  CHECK(f.result().type() == TensorType::get(DataType::Float64, {3, 1}));
  CHECK(f.attrs().value == 2.5);
  CHECK(f->has_trait<ReadOnly>());
  KILN_CHECK_ERROR(b.create<FullOp>(Shape{-4}, 0.0), InvalidArgument, {"'kiln.full'"});
  KILN_CHECK_ERROR(FullOp::infer_meta({}, DictionaryAttribute::get()), InvalidArgument,
                   {"'kiln.full'", "missing"});
}

TEST_CASE("uniform_random needs a floating dtype and min <= max", "[dialect][kiln][random]") {
  Program p;
  Builder b(p);
  auto r = b.create<UniformRandomOp>(Shape{4, 4}, -0.5, 0.5, 7);
  CHECK(r.result().type() == tf({4, 4}));
  CHECK(r->has_trait<Random>());
  CHECK(r.attrs().seed == 7);
  KILN_CHECK_ERROR(b.create<UniformRandomOp>(Shape{2}, 0.0, 1.0, 0, DataType::Int64),
                   InvalidArgument, {"'kiln.uniform_random'", "i64"});
  KILN_CHECK_ERROR(b.create<UniformRandomOp>(Shape{2}, 1.0, 0.0), InvalidArgument,
                   {"'kiln.uniform_random'", "min <= max"});
  CHECK(p.block().size() == 1);
  // Changing the attributes after building is caught by verify.
  r->set_attribute("min", Float64Attribute::get(2.0));
  KILN_CHECK_ERROR(p.verify(), InvalidArgument, {"'kiln.uniform_random'", "min <= max"});
}

TEST_CASE("fetch has no results and keeps program order", "[dialect][kiln][fetch]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", Shape{2});
  auto f = b.create<FetchOp>(x.result(), "x", 3);
  CHECK(f->num_results() == 0);
  CHECK(f->has_trait<SideEffect>());
  CHECK(f->attribute<Int32Attribute>("col").value() == 3);
  CHECK_FALSE(f->has_interface<InferMetaInterface>());
  CHECK_NOTHROW(p.verify());
}

// ---- builtin ops ----

TEST_CASE("constant holds its value attribute and result type", "[dialect][builtin]") {
  Program p;
  Builder b(p);
  auto c = b.create<ConstantOp>(Int64Attribute::get(3), Int64Type::get());
  CHECK(c.value() == Int64Attribute::get(3));
  CHECK(c.result().type() == Int64Type::get());
  CHECK_NOTHROW(p.verify());
  c->erase_attribute("value");
  KILN_CHECK_ERROR(p.verify(), InvalidArgument, {"'builtin.constant'", "'value'"});
}

TEST_CASE("the first op set is registered in the kiln and builtin dialects",
          "[dialect][kiln]") {
  IrContext* ctx = IrContext::instance();
  Dialect* kiln = ctx->dialect("kiln");
  for (std::string_view n : {"kiln.data", "kiln.fetch", "kiln.add", "kiln.matmul", "kiln.relu",
                             "kiln.relu_", "kiln.full", "kiln.reshape", "kiln.uniform_random"}) {
    INFO(n);
    REQUIRE(ctx->find_op(n));
    CHECK(ctx->find_op(n).dialect() == kiln);
  }
  for (std::string_view n : {"builtin.parameter", "builtin.set_parameter", "builtin.constant"}) {
    INFO(n);
    REQUIRE(ctx->find_op(n));
    CHECK(ctx->find_op(n).dialect() == ctx->dialect("builtin"));
  }
}

TEST_CASE("the demo's program builds and verifies", "[dialect][kiln]") {
  Program prog;
  prog.set_parameter("linear_0.w_0", {TensorType::get(DataType::Float32, {16, 1})});
  prog.set_parameter("linear_0.b_0", {TensorType::get(DataType::Float32, {1})});
  Builder b(prog);
  auto x = b.create<DataOp>("x", Shape{-1, 16});
  auto w = b.create<ParameterOp>("linear_0.w_0", prog.parameter("linear_0.w_0").type);
  auto bias = b.create<ParameterOp>("linear_0.b_0", prog.parameter("linear_0.b_0").type);
  auto out = b.create<AddOp>(b.create<MatmulOp>(x.result(), w.result()).result(), bias.result());
  auto act = b.create<ReluOp>(out.result());
  auto noise = b.create<UniformRandomOp>(Shape{16, 1}, -0.01, 0.01, 42);
  auto sum = b.create<AddOp>(act.result(), noise.result());
  auto flat = b.create<ReshapeOp>(sum.result(), Shape{-1});
  b.create<FetchOp>(flat.result(), "out");
  CHECK(out.result().type() == tf({-1, 1}));
  CHECK(sum.result().type() == tf({16, 1}));
  CHECK(flat.result().type() == tf({16}));
  CHECK_NOTHROW(prog.verify());
}

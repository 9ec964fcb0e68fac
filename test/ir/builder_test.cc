// Builder: insertion points, and create<OpT>() running build() and InferMeta.
#include "kiln/ir/builder.h"

#include "catch.hpp"
#include "ir_test_util.h"

using namespace kiln;

namespace {
std::vector<std::string> names(const Block& b) {
  std::vector<std::string> out;
  for (Operation* op : b) out.push_back(op->name());
  return out;
}
}  // namespace

TEST_CASE("a builder appends to the end of its block by default", "[ir][builder]") {
  Program p;
  Builder b(p);
  CHECK(b.block() == &p.block());
  CHECK(b.insertion_point() == nullptr);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{2});
  auto r = b.create<ReluOp>(x.result());
  CHECK(names(p.block()) == std::vector<std::string>{"kiln.data", "kiln.relu"});
  CHECK(r->parent_block() == &p.block());
  CHECK(p.block().back() == r.operation());
}

TEST_CASE("set_insertion_point puts new ops before the given op", "[ir][builder]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{2});
  auto f = b.create<FetchOp>(x.result(), "x");
  b.set_insertion_point(f);
  CHECK(b.insertion_point() == f.operation());
  auto r1 = b.create<ReluOp>(x.result());
  auto r2 = b.create<ReluOp>(r1.result());
  CHECK(names(p.block()) ==
        std::vector<std::string>{"kiln.data", "kiln.relu", "kiln.relu", "kiln.fetch"});
  CHECK(r1->next_in_block() == r2.operation());
  CHECK(r2->next_in_block() == f.operation());
  CHECK_NOTHROW(p.verify());
}

TEST_CASE("set_insertion_point_after puts new ops right after the given op", "[ir][builder]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{2});
  auto f = b.create<FetchOp>(x.result(), "x");
  b.set_insertion_point_after(x);
  auto r = b.create<ReluOp>(x.result());
  CHECK(x->next_in_block() == r.operation());
  CHECK(r->next_in_block() == f.operation());
  // After the last op = at the end.
  b.set_insertion_point_after(f);
  CHECK(b.insertion_point() == nullptr);
  auto g = b.create<FetchOp>(r.result(), "r");
  CHECK(p.block().back() == g.operation());
}

TEST_CASE("a builder follows its insertion point into nested blocks", "[ir][builder]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{2});
  Operation* loop = kiln_test::add_region_op(p.block(), {}, {});
  Block& body = loop->region(0).emplace_block();
  b.set_insertion_point_to_end(body);
  CHECK(b.block() == &body);
  auto r = b.create<ReluOp>(x.result());
  CHECK(r->parent_op() == loop);
  auto r2 = b.create<ReluOp>(r.result());
  b.set_insertion_point(r2);
  auto mid = b.create<ReluOp>(r.result());
  CHECK(names(body) == std::vector<std::string>{"kiln.relu", "kiln.relu", "kiln.relu"});
  CHECK(body.front()->next_in_block() == mid.operation());
  // Back out to the top level, after the loop.
  b.set_insertion_point_after(loop);
  auto f = b.create<FetchOp>(x.result(), "x");
  CHECK(f->parent_block() == &p.block());
  CHECK(loop->next_in_block() == f.operation());
  CHECK_NOTHROW(p.verify());
}

TEST_CASE("create runs the op's InferMeta to set its result types", "[ir][builder]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{-1, 8}, DataType::Float64);
  CHECK(x.result().type() == TensorType::get(DataType::Float64, {-1, 8}));
  auto y = b.create<FullOp>(std::vector<std::int64_t>{8, 2}, 0.5, DataType::Float64);
  auto m = b.create<MatmulOp>(x.result(), y.result());
  CHECK(m.result().type() == TensorType::get(DataType::Float64, {-1, 2}));
  CHECK(m->attribute<BoolAttribute>("transpose_x").value() == false);
}

TEST_CASE("create throws and inserts nothing when InferMeta rejects the operands",
          "[ir][builder]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{2, 3});
  auto y = b.create<DataOp>("y", std::vector<std::int64_t>{4, 5});
  KILN_CHECK_ERROR(b.create<MatmulOp>(x.result(), y.result()), InvalidArgument, {"'kiln.matmul'"});
  CHECK(p.block().size() == 2);
  CHECK(x.result().use_empty());
  CHECK(y.result().use_empty());
}

TEST_CASE("create with a null operand is an InvalidArgument error naming the op",
          "[ir][builder]") {
  Program p;
  Builder b(p);
  KILN_CHECK_ERROR(b.create<ReluOp>(Value()), InvalidArgument, {"'kiln.relu'", "null"});
  CHECK(p.block().empty());
}

TEST_CASE("a builder inserts a detached op at its insertion point", "[ir][builder]") {
  Program p;
  Builder b(p);
  Operation* first = kiln_test::add_any(p.block(), {}, {});
  b.set_insertion_point(first);
  Operation* op = b.insert(kiln_test::make_any({}, {}));
  CHECK(p.block().front() == op);
}

TEST_CASE("an insertion point at an op in no block is an InvalidArgument error",
          "[ir][builder]") {
  Program p;
  Builder b(p);
  Operation* loose = kiln_test::make_any({}, {});
  KILN_CHECK_ERROR(b.set_insertion_point(loose), InvalidArgument, {"'test.any'", "no block"});
  KILN_CHECK_ERROR(b.set_insertion_point_after(loose), InvalidArgument, {"'test.any'", "no block"});
  // The builder still inserts where it did before.
  CHECK(b.block() == &p.block());
  CHECK(b.insertion_point() == nullptr);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{1});
  CHECK(p.block().front() == x.operation());
  loose->erase();
}

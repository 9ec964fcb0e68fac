// Program: named parameters, deep clone, verification (use before
// definition, values escaping their region), op counting, moves.
#include "kiln/ir/program.h"

#include "catch.hpp"
#include "ir_test_util.h"

using namespace kiln;
using kiln_test::add_any;
using kiln_test::add_region_op;
using kiln_test::f32;
using kiln_test::t23;

TEST_CASE("parameters are set, read, replaced and erased by name", "[ir][program]") {
  Program p;
  CHECK(p.parameters().empty());
  CHECK_FALSE(p.has_parameter("w"));
  CHECK(p.get_parameter("w") == nullptr);

  p.set_parameter("w", {t23()});
  p.set_parameter("b", {TensorType::get(DataType::Float32, {3}), /*is_mutable=*/false});
  CHECK(p.has_parameter("w"));
  CHECK(p.parameter("w").type == t23());
  CHECK(p.parameter("w").is_mutable);
  CHECK_FALSE(p.parameter("b").is_mutable);
  CHECK(p.get_parameter("b")->type == TensorType::get(DataType::Float32, {3}));

  // Sorted by name.
  std::vector<std::string> names;
  for (const auto& [n, _] : p.parameters()) names.push_back(n);
  CHECK(names == std::vector<std::string>{"b", "w"});

  p.set_parameter("w", {f32(), false});
  CHECK(p.parameter("w") == Parameter{f32(), false});
  CHECK(p.parameters().size() == 2);

  CHECK(p.erase_parameter("w"));
  CHECK_FALSE(p.erase_parameter("w"));
  CHECK_FALSE(p.has_parameter("w"));
  CHECK(p.parameters().size() == 1);
}

TEST_CASE("reading a missing parameter is a NotFound error naming it", "[ir][program]") {
  Program p;
  p.set_parameter("linear_0.w_0", {t23()});
  KILN_CHECK_ERROR(p.parameter("linear_0.w_1"), NotFound, {"'linear_0.w_1'"});
}

TEST_CASE("a parameter needs a name and a type", "[ir][program]") {
  Program p;
  KILN_CHECK_ERROR(p.set_parameter("", {t23()}), InvalidArgument, {"name"});
  KILN_CHECK_ERROR(p.set_parameter("w", {Type()}), InvalidArgument, {"'w'"});
  CHECK(p.parameters().empty());
}

TEST_CASE("parameter ops refer to program parameters by name", "[ir][program]") {
  Program p;
  p.set_parameter("w", {t23()});
  Builder b(p);
  auto w = b.create<ParameterOp>("w", p.parameter("w").type);
  CHECK(w.parameter_name() == "w");
  CHECK(w.result().type() == t23());
  auto r = b.create<ReluOp>(w.result());
  auto set = b.create<SetParameterOp>(r.result(), "w");
  CHECK(set.parameter_name() == "w");
  CHECK(set->num_results() == 0);
  CHECK(set->has_trait<SideEffect>());
  CHECK(w->has_trait<ReadOnly>());
  CHECK_NOTHROW(p.verify());
  KILN_CHECK_ERROR(b.create<ParameterOp>("v", Type()), InvalidArgument, {"'v'"});
}

TEST_CASE("a cloned program prints identically and shares no ops or values", "[ir][program]") {
  Program p;
  p.set_parameter("w", {TensorType::get(DataType::Float32, {3, 4})});
  p.set_parameter("frozen", {f32(), false});
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{-1, 3});
  auto w = b.create<ParameterOp>("w", p.parameter("w").type);
  auto m = b.create<MatmulOp>(x.result(), w.result(), false, false);
  auto r = b.create<ReluOp>(m.result());
  Operation* loop = add_region_op(p.block(), {r.result()}, {});
  Block& body = loop->region(0).emplace_block();
  BlockArgument arg = body.add_argument(r.result().type());
  add_any(body, {arg, m.result()}, {f32()});
  b.create<FetchOp>(r.result(), "out");

  Program c = p.clone();
  CHECK(c.to_string() == p.to_string());
  CHECK(c.parameters() == p.parameters());
  CHECK(c.num_ops() == p.num_ops());
  CHECK_NOTHROW(c.verify());
  // The clone's ops are new, and its values are used only inside the clone.
  for (Operation* op : c.block()) {
    CHECK(op->parent_block() == &c.block());
    for (Value v : op->operands()) CHECK(v.defining_op()->parent_block() == &c.block());
  }
  CHECK(r.result().use_count() == 2);  // still just the loop and the fetch
  // Changing the clone leaves the original alone.
  c.set_parameter("extra", {f32()});
  c.block().back()->erase();
  CHECK(c.to_string() != p.to_string());
  CHECK_FALSE(p.has_parameter("extra"));
  CHECK(p.block().size() == 6);
}

TEST_CASE("verify catches a use before its definition", "[ir][program]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{2});
  auto r = b.create<ReluOp>(x.result());
  auto f = b.create<FetchOp>(r.result(), "out");
  CHECK_NOTHROW(p.verify());
  // Move the user above its operand's definition.
  r->move_before(x);
  KILN_CHECK_ERROR(p.verify(), InvalidArgument, {"'kiln.relu'", "operand #0", "not defined before"});
  r->move_before(f);
  CHECK_NOTHROW(p.verify());
  // An op using its own result.
  r->set_operand(0, r.result());
  KILN_CHECK_ERROR(p.verify(), InvalidArgument, {"'kiln.relu'", "not defined before"});
}

TEST_CASE("verify catches a value used outside the region that defines it", "[ir][program]") {
  Program p;
  Operation* holder = add_region_op(p.block(), {}, {});
  Block& body = holder->region(0).emplace_block();
  BlockArgument arg = body.add_argument(f32());
  Operation* inner = add_any(body, {arg}, {f32()});
  CHECK_NOTHROW(p.verify());
  Operation* escaped = add_any(p.block(), {inner->result(0)}, {});
  KILN_CHECK_ERROR(p.verify(), InvalidArgument,
                   {"'test.any'", "defined inside a region of op 'test.region'"});
  escaped->set_operand(0, arg);
  KILN_CHECK_ERROR(p.verify(), InvalidArgument, {"defined inside a region of op 'test.region'"});
  escaped->erase();
  // Inner ops may use values defined above their parent op.
  Value top = add_any(p.block(), {}, {f32()})->result(0);
  top.defining_op()->move_before(holder);
  add_any(body, {top}, {});
  CHECK_NOTHROW(p.verify());
}

TEST_CASE("verify names the first bad op, nested ones included", "[ir][program]") {
  Program p;
  Operation* holder = add_region_op(p.block(), {}, {});
  Block& body = holder->region(0).emplace_block();
  Builder b(body);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{2});
  auto r = b.create<ReluOp>(x.result());
  r.result().set_type(f32());
  KILN_CHECK_ERROR(p.verify(), InvalidArgument, {"'kiln.relu'"});
}

TEST_CASE("num_ops counts nested ops", "[ir][program]") {
  Program p;
  CHECK(p.num_ops() == 0);
  add_any(p.block(), {}, {});
  Operation* h = add_region_op(p.block(), {}, {});
  Block& b0 = h->region(0).emplace_block();
  Block& b1 = h->region(0).emplace_block();
  add_any(b0, {}, {});
  add_any(b1, {}, {});
  add_any(b1, {}, {});
  CHECK(p.num_ops() == 5);
  CHECK(p.block().size() == 2);
}

TEST_CASE("a moved program keeps its ops and parameters", "[ir][program]") {
  Program p;
  p.set_parameter("w", {f32()});
  Operation* a = add_any(p.block(), {}, {f32()});
  Block* block = &p.block();
  Program q = std::move(p);
  CHECK(&q.block() == block);
  CHECK(q.block().front() == a);
  CHECK(q.has_parameter("w"));
  Program r;
  r = std::move(q);
  CHECK(r.block().front() == a);
}

TEST_CASE("verify reports an operand that refers to no value, and printing still works",
          "[ir][program]") {
  Program p;
  Value x = add_any(p.block(), {}, {f32()})->result(0);
  Operation* a = add_any(p.block(), {x}, {});
  a->operand(0).set_source(Value());  // dropped, as drop_all_references does
  CHECK(x.use_empty());
  KILN_CHECK_ERROR(p.verify(), InvalidArgument, {"'test.any'", "operand #0", "dangling"});
  CHECK(p.to_string() ==
        "program {\n"
        "  %0 = test.any() : () -> f32\n"
        "  test.any(%<null>) : (<null>) -> ()\n"
        "}\n");
}

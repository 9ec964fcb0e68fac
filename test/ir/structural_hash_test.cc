// structural_hash: equal for a program, its clone and a twin built the same
// way; changed by any change to an op's name, attributes, result types, use-def
// edges, nesting, the block arguments or the parameters.
#include "kiln/ir/structural_hash.h"

#include <iterator>

#include "catch.hpp"
#include "ir_test_util.h"

using namespace kiln;
using kiln_test::add_any;
using kiln_test::f32;
using kiln_test::t23;

namespace {

// x, y -> sub(x, y) -> scale -> a test.region op whose body takes one
// argument and adds it to the scaled value; one parameter "w".
Program sample_program() {
  Program p;
  p.set_parameter("w", Parameter{t23(), true});
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{2, 3});
  auto y = b.create<DataOp>("y", std::vector<std::int64_t>{2, 3});
  auto d = b.create<SubOp>(x.result(), y.result());
  auto s = b.create<ScaleOp>(d.result(), 2.0);
  Operation* loop = kiln_test::add_region_op(p.block(), {s.result()}, {t23()});
  Block& body = loop->region(0).emplace_block();
  BlockArgument arg = body.add_argument(t23());
  Builder inner(body);
  inner.create<AddOp>(arg, s.result());
  return p;
}

// The `k`-th op of the program's top-level block.
Operation* op_at(const Program& p, std::size_t k) {
  return *std::next(p.block().begin(), static_cast<std::ptrdiff_t>(k));
}

Block& body_of(const Program& p) { return op_at(p, 4)->region(0).front(); }

}  // namespace

TEST_CASE("a program's structural hash does not change when the program does not",
          "[ir][structural_hash]") {
  Program p = sample_program();
  std::uint64_t h = structural_hash(p);
  CHECK(structural_hash(p) == h);
  CHECK(structural_hash(p) == h);
}

TEST_CASE("a program and its clone have the same structural hash", "[ir][structural_hash]") {
  Program p = sample_program();
  Program c = p.clone();
  CHECK(structural_hash(c) == structural_hash(p));
}

TEST_CASE("two programs built the same way have the same structural hash",
          "[ir][structural_hash]") {
  CHECK(structural_hash(sample_program()) == structural_hash(sample_program()));
  CHECK(structural_hash(Program()) == structural_hash(Program()));
}

TEST_CASE("changing one attribute value changes the structural hash", "[ir][structural_hash]") {
  Program p = sample_program();
  const std::uint64_t h = structural_hash(p);
  op_at(p, 3)->set_attribute("scale", Float64Attribute::get(3.0));
  CHECK(structural_hash(p) != h);
  op_at(p, 3)->set_attribute("scale", Float64Attribute::get(2.0));
  CHECK(structural_hash(p) == h);  // back to the same attributes, back to the same hash
}

TEST_CASE("changing one result type or shape changes the structural hash",
          "[ir][structural_hash]") {
  Program p = sample_program();
  const std::uint64_t h = structural_hash(p);
  Value r = op_at(p, 3)->result(0);
  r.set_type(TensorType::get(DataType::Float32, {3, 2}));
  const std::uint64_t shape_changed = structural_hash(p);
  CHECK(shape_changed != h);
  r.set_type(TensorType::get(DataType::Float64, {3, 2}));
  CHECK(structural_hash(p) != shape_changed);
  CHECK(structural_hash(p) != h);
}

TEST_CASE("swapping the operands of a sub changes the structural hash", "[ir][structural_hash]") {
  Program p = sample_program();
  const std::uint64_t h = structural_hash(p);
  Operation* sub = op_at(p, 2);
  Value x = sub->operand_source(0), y = sub->operand_source(1);
  sub->set_operand(0, y);
  sub->set_operand(1, x);
  CHECK(structural_hash(p) != h);
}

TEST_CASE("an operand edge alone changes the structural hash, even between identical values",
          "[ir][structural_hash]") {
  // a and b are the same op with the same type: only the edges tell
  // any(a, b) from any(b, a) and any(a, a).
  auto build = [](int which) {
    Program p;
    Value a = add_any(p.block(), {}, {f32()})->result(0);
    Value b = add_any(p.block(), {}, {f32()})->result(0);
    if (which == 0) add_any(p.block(), {a, b}, {});
    if (which == 1) add_any(p.block(), {b, a}, {});
    if (which == 2) add_any(p.block(), {a, a}, {});
    return p;
  };
  const std::uint64_t ab = structural_hash(build(0)), ba = structural_hash(build(1)),
                      aa = structural_hash(build(2));
  CHECK(ab != ba);
  CHECK(ab != aa);
  CHECK(ba != aa);
  CHECK(structural_hash(build(0)) == ab);
}

TEST_CASE("adding an op changes the structural hash", "[ir][structural_hash]") {
  Program p = sample_program();
  const std::uint64_t h = structural_hash(p);
  Builder b(p);
  auto extra = b.create<ReluOp>(op_at(p, 3)->result(0));
  CHECK(structural_hash(p) != h);
  extra->erase();
  CHECK(structural_hash(p) == h);
}

TEST_CASE("adding an op inside a region changes the structural hash", "[ir][structural_hash]") {
  Program p = sample_program();
  const std::uint64_t h = structural_hash(p);
  Block& body = body_of(p);
  Builder b(body);
  b.create<ReluOp>(body.argument(0));
  CHECK(structural_hash(p) != h);

  // An empty block, or a second region of the same op, counts as structure too.
  Program q = sample_program();
  op_at(q, 4)->region(0).emplace_block();
  CHECK(structural_hash(q) != h);
}

TEST_CASE("changing a block argument's type changes the structural hash",
          "[ir][structural_hash]") {
  Program p = sample_program();
  const std::uint64_t h = structural_hash(p);
  body_of(p).argument(0).set_type(f32());
  CHECK(structural_hash(p) != h);
}

TEST_CASE("the named parameters are part of the structural hash", "[ir][structural_hash]") {
  Program p = sample_program();
  const std::uint64_t h = structural_hash(p);
  p.set_parameter("w", Parameter{t23(), false});
  const std::uint64_t immutable = structural_hash(p);
  CHECK(immutable != h);
  p.set_parameter("w", Parameter{f32(), false});
  CHECK(structural_hash(p) != immutable);
  p.erase_parameter("w");
  CHECK(structural_hash(p) != h);
  p.set_parameter("w", Parameter{t23(), true});
  CHECK(structural_hash(p) == h);
}

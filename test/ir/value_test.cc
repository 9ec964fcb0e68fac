// Value / OpResult / BlockArgument / OpOperand: use lists, replacing uses,
// result indices and owners (inline and out-of-line results).
#include "kiln/ir/value.h"

#include <algorithm>
#include <vector>

#include "catch.hpp"
#include "ir_test_util.h"

using namespace kiln;
using kiln_test::add_any;
using kiln_test::f32;

namespace {
std::vector<Operation*> users(Value v) {
  std::vector<Operation*> out;
  for (OpOperand u : v.uses()) out.push_back(u.owner());
  return out;
}
}  // namespace

TEST_CASE("a value's uses are listed most recent first", "[ir][value]") {
  Program p;
  Operation* def = add_any(p.block(), {}, {f32()});
  Value v = def->result(0);
  CHECK(v.use_empty());
  CHECK(v.use_count() == 0);
  CHECK_FALSE(v.has_one_use());
  CHECK_FALSE(v.first_use());

  Operation* a = add_any(p.block(), {v}, {});
  CHECK(v.has_one_use());
  Operation* b = add_any(p.block(), {v}, {});
  Operation* c = add_any(p.block(), {v, v}, {});

  CHECK(v.use_count() == 4);
  CHECK_FALSE(v.has_one_use());
  CHECK_FALSE(v.use_empty());
  // c's operand #1 was linked last, then c's #0, then b, then a.
  CHECK(users(v) == std::vector<Operation*>{c, c, b, a});
  std::vector<std::uint32_t> idx;
  for (OpOperand u : v.uses()) idx.push_back(u.index());
  CHECK(idx == std::vector<std::uint32_t>{1, 0, 0, 0});
  CHECK(v.first_use().owner() == c);
  CHECK(v.first_use().next_use().owner() == c);
}

TEST_CASE("an operand knows its owner, its index and its source", "[ir][value]") {
  Program p;
  Operation* d = add_any(p.block(), {}, {f32(), f32(), f32()});
  Operation* user = add_any(p.block(), {d->result(2), d->result(0), d->result(1)}, {});
  REQUIRE(user->num_operands() == 3);
  for (std::uint32_t i = 0; i < 3; ++i) {
    OpOperand o = user->operand(i);
    CHECK(o.owner() == user);
    CHECK(o.index() == i);
  }
  CHECK(user->operand(0).source() == d->result(2));
  CHECK(user->operand(1).source() == d->result(0));
  CHECK(user->operand_source(2) == d->result(1));
  CHECK(user->operands() == std::vector<Value>{d->result(2), d->result(0), d->result(1)});
}

TEST_CASE("replace_all_uses_with moves every use to the new value", "[ir][value]") {
  Program p;
  Operation* d1 = add_any(p.block(), {}, {f32()});
  Operation* d2 = add_any(p.block(), {}, {f32()});
  Value x = d1->result(0), y = d2->result(0);
  Operation* a = add_any(p.block(), {x, y}, {});
  Operation* b = add_any(p.block(), {x}, {});
  Operation* c = add_any(p.block(), {x, x}, {});

  x.replace_all_uses_with(y);
  CHECK(x.use_empty());
  CHECK(y.use_count() == 5);
  CHECK(a->operand_source(0) == y);
  CHECK(a->operand_source(1) == y);
  CHECK(b->operand_source(0) == y);
  CHECK(c->operand_source(0) == y);
  CHECK(c->operand_source(1) == y);
  auto u = users(y);
  CHECK(std::count(u.begin(), u.end(), a) == 2);
  CHECK(std::count(u.begin(), u.end(), b) == 1);
  CHECK(std::count(u.begin(), u.end(), c) == 2);
  // With no uses left, the old definition can go.
  CHECK_NOTHROW(d1->erase());
  CHECK(p.block().size() == 4);
}

TEST_CASE("replace_all_uses_with the value itself changes nothing", "[ir][value]") {
  Program p;
  Value x = add_any(p.block(), {}, {f32()})->result(0);
  Operation* a = add_any(p.block(), {x}, {});
  Operation* b = add_any(p.block(), {x}, {});
  x.replace_all_uses_with(x);
  CHECK(users(x) == std::vector<Operation*>{b, a});
}

TEST_CASE("replace_uses_if moves only the uses the predicate picks", "[ir][value]") {
  Program p;
  Value x = add_any(p.block(), {}, {f32()})->result(0);
  Value y = add_any(p.block(), {}, {f32()})->result(0);
  Operation* a = add_any(p.block(), {x}, {});
  Operation* b = add_any(p.block(), {x, x}, {});
  Operation* c = add_any(p.block(), {x}, {});

  // Every use by b, plus operand #0 of anyone.
  x.replace_uses_if(y, [&](OpOperand u) { return u.owner() == b && u.index() == 1; });
  CHECK(b->operand_source(1) == y);
  CHECK(b->operand_source(0) == x);
  CHECK(a->operand_source(0) == x);
  CHECK(c->operand_source(0) == x);
  CHECK(x.use_count() == 3);
  CHECK(y.use_count() == 1);

  x.replace_uses_if(y, [&](OpOperand u) { return u.owner() != c; });
  CHECK(users(x) == std::vector<Operation*>{c});
  CHECK(y.use_count() == 3);

  x.replace_uses_if(y, [](OpOperand) { return false; });
  CHECK(x.use_count() == 1);
}

TEST_CASE("set_operand relinks one use and rejects bad indices and null values",
          "[ir][value]") {
  Program p;
  Value x = add_any(p.block(), {}, {f32()})->result(0);
  Value y = add_any(p.block(), {}, {f32()})->result(0);
  Operation* a = add_any(p.block(), {x, x}, {});
  a->set_operand(1, y);
  CHECK(x.use_count() == 1);
  CHECK(y.use_count() == 1);
  CHECK(y.first_use().owner() == a);
  CHECK(y.first_use().index() == 1);

  a->operand(0).set_source(y);
  CHECK(x.use_empty());
  CHECK(y.use_count() == 2);

  KILN_CHECK_ERROR(a->set_operand(2, x), OutOfRange, {"'test.any'", "#2"});
  KILN_CHECK_ERROR(a->set_operand(0, Value()), InvalidArgument, {"'test.any'"});
  CHECK(a->operand_source(0) == y);
  CHECK(y.use_count() == 2);
}

TEST_CASE("erasing a user removes its uses from the values it read", "[ir][value]") {
  Program p;
  Value x = add_any(p.block(), {}, {f32()})->result(0);
  Operation* a = add_any(p.block(), {x}, {});
  Operation* b = add_any(p.block(), {x}, {});
  Operation* c = add_any(p.block(), {x}, {});
  b->erase();
  CHECK(users(x) == std::vector<Operation*>{c, a});
  c->erase();
  a->erase();
  CHECK(x.use_empty());
}

TEST_CASE("an op with ten results gives each result its index and owner", "[ir][value]") {
  Program p;
  std::vector<Type> types;
  for (int i = 0; i < 10; ++i) types.push_back(TensorType::get(DataType::Float32, {i + 1}));
  Operation* op = add_any(p.block(), {}, types);
  REQUIRE(op->num_results() == 10);
  for (std::uint32_t i = 0; i < 10; ++i) {
    OpResult r = op->result(i);
    INFO("result #" << i);
    CHECK(r.index() == i);
    CHECK(r.owner() == op);
    CHECK(r.defining_op() == op);
    CHECK(r.type() == types[i]);
    CHECK_FALSE(r.is_block_argument());
    CHECK(isa<OpResult>(Value(r)));
  }
  // All ten are distinct values.
  auto rs = op->results();
  for (std::size_t i = 0; i < rs.size(); ++i)
    for (std::size_t j = i + 1; j < rs.size(); ++j) CHECK(rs[i] != rs[j]);

  // Uses work on inline and out-of-line results alike.
  Operation* u1 = add_any(p.block(), {op->result(9), op->result(5), op->result(6)}, {});
  Operation* u2 = add_any(p.block(), {op->result(9)}, {});
  CHECK(op->result(9).use_count() == 2);
  CHECK(users(op->result(9)) == std::vector<Operation*>{u2, u1});
  CHECK(op->result(6).first_use().owner() == u1);
  CHECK(op->result(6).first_use().index() == 2);
  // The use's source leads back to the right owner and index.
  OpResult back = cast<OpResult>(u1->operand_source(0));
  CHECK(back.owner() == op);
  CHECK(back.index() == 9);

  op->result(9).replace_all_uses_with(op->result(7));
  CHECK(op->result(9).use_empty());
  CHECK(op->result(7).use_count() == 2);
  CHECK(u1->operand_source(0) == op->result(7));

  KILN_CHECK_ERROR(op->erase(), PreconditionNotMet, {"'test.any'"});
  u1->erase();
  u2->erase();
  CHECK_NOTHROW(op->erase());
  CHECK(p.block().empty());
}

TEST_CASE("results are inline up to six and out of line after", "[ir][value]") {
  // An op with exactly six results, and one with seven: indices hold on both
  // sides of the boundary.
  for (std::uint32_t n : {1u, 5u, 6u, 7u, 13u}) {
    Operation* op = kiln_test::make_any({}, std::vector<Type>(n, f32()));
    for (std::uint32_t i = 0; i < n; ++i) {
      CHECK(op->result(i).index() == i);
      CHECK(op->result(i).owner() == op);
    }
    op->erase();
  }
}

TEST_CASE("a block argument is a value with its block and index", "[ir][value]") {
  Block block;
  BlockArgument a0 = block.add_argument(f32());
  BlockArgument a1 = block.add_argument(kiln_test::t23());
  CHECK(a0.owner() == &block);
  CHECK(a1.owner() == &block);
  CHECK(a0.index() == 0);
  CHECK(a1.index() == 1);
  CHECK(a1.type() == kiln_test::t23());
  Value v = a1;
  CHECK(v.is_block_argument());
  CHECK(v.defining_op() == nullptr);
  CHECK(isa<BlockArgument>(v));
  CHECK_FALSE(isa<OpResult>(v));
  CHECK(dyn_cast<BlockArgument>(v).index() == 1);
  CHECK_FALSE(dyn_cast<OpResult>(v));

  Operation* u = add_any(block, {a0, a1, a0}, {});
  CHECK(Value(a0).use_count() == 2);
  CHECK(a1.first_use().owner() == u);
  CHECK(a1.first_use().index() == 1);
}

TEST_CASE("set_type changes the type a value reports", "[ir][value]") {
  Operation* op = kiln_test::make_any({}, {f32()});
  Value v = op->result(0);
  v.set_type(kiln_test::t23());
  CHECK(v.type() == kiln_test::t23());
  CHECK(op->result_type(0) == kiln_test::t23());
  op->erase();
}

TEST_CASE("values compare by identity: two results of one op differ", "[ir][value]") {
  Operation* op = kiln_test::make_any({}, {f32(), f32()});
  CHECK(op->result(0) == op->result(0));
  CHECK(op->result(0) != op->result(1));
  CHECK(op->result(0).type() == op->result(1).type());
  CHECK_FALSE(Value());
  op->erase();
}

TEST_CASE("replacing uses with a null value is an InvalidArgument error and changes nothing",
          "[ir][value]") {
  Program p;
  Value x = add_any(p.block(), {}, {f32()})->result(0);
  Operation* a = add_any(p.block(), {x}, {});
  KILN_CHECK_ERROR(x.replace_all_uses_with(Value()), InvalidArgument, {"null"});
  KILN_CHECK_ERROR(x.replace_uses_if(Value(), [](OpOperand) { return true; }), InvalidArgument,
                   {"null"});
  CHECK(a->operand_source(0) == x);
  CHECK(x.use_count() == 1);
}

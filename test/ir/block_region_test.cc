// Block and Region: op lists, block arguments, ops with regions, erasing a
// block (refused while its values are used outside), and cloning regions
// with an IrMapping.
#include "kiln/ir/block.h"
#include "kiln/ir/region.h"

#include "catch.hpp"
#include "ir_test_util.h"

using namespace kiln;
using kiln_test::add_any;
using kiln_test::add_region_op;
using kiln_test::f32;
using kiln_test::t23;

namespace {
std::vector<Operation*> ops_of(const Block& b) { return {b.begin(), b.end()}; }
}  // namespace

TEST_CASE("a block keeps its ops in order with O(1) insert, push_front and take",
          "[ir][block]") {
  Block block;
  CHECK(block.empty());
  CHECK(block.begin() == block.end());
  Operation* a = add_any(block, {}, {});
  Operation* c = add_any(block, {}, {});
  Operation* b = kiln_test::make_any({}, {});
  block.insert(c, b);
  Operation* z = kiln_test::make_any({}, {});
  block.push_front(z);
  CHECK(ops_of(block) == std::vector<Operation*>{z, a, b, c});
  CHECK(block.size() == 4);
  CHECK(block.front() == z);
  CHECK(block.back() == c);
  // Backwards from end().
  auto it = block.end();
  --it;
  CHECK(*it == c);
  --it;
  CHECK(*it == b);

  Operation* taken = block.take(a);
  CHECK(taken == a);
  CHECK(a->parent_block() == nullptr);
  CHECK(ops_of(block) == std::vector<Operation*>{z, b, c});
  CHECK(block.size() == 3);
  block.push_back(a);
  CHECK(block.back() == a);
}

TEST_CASE("a block refuses ops that are in a block and insertion points outside it",
          "[ir][block]") {
  Block b1, b2;
  Operation* a = add_any(b1, {}, {});
  Operation* x = add_any(b2, {}, {});
  KILN_CHECK_ERROR(b2.push_back(a), InvalidArgument, {"'test.any'", "already in a block"});
  Operation* loose = kiln_test::make_any({}, {});
  KILN_CHECK_ERROR(b1.insert(x, loose), InvalidArgument, {"not in this block"});
  KILN_CHECK_ERROR(b1.take(x), InvalidArgument, {"not in this block"});
  KILN_CHECK_ERROR(b1.erase(x), InvalidArgument, {"not in this block"});
  CHECK(b1.size() == 1);
  CHECK(b2.size() == 1);
  CHECK(x->parent_block() == &b2);
  loose->erase();
}

TEST_CASE("block arguments are added, used and erased by index", "[ir][block]") {
  Block block;
  BlockArgument a0 = block.add_argument(f32());
  BlockArgument a1 = block.add_argument(t23());
  BlockArgument a2 = block.add_argument(Int64Type::get());
  CHECK(block.num_arguments() == 3);
  CHECK(block.arguments() == std::vector<Value>{a0, a1, a2});
  CHECK(block.argument(1) == a1);
  KILN_CHECK_ERROR(block.add_argument(Type()), InvalidArgument);

  Operation* user = add_any(block, {a1}, {});
  KILN_CHECK_ERROR(block.erase_argument(1), PreconditionNotMet, {"#1", "'test.any'"});
  KILN_CHECK_ERROR(block.erase_argument(3), OutOfRange, {"#3"});
  CHECK(block.num_arguments() == 3);

  block.erase_argument(0);
  CHECK(block.num_arguments() == 2);
  CHECK(block.argument(0) == a1);
  CHECK(a1.index() == 0);  // later arguments move down
  CHECK(a2.index() == 1);
  CHECK(user->operand_source(0) == a1);
}

TEST_CASE("an op with a region holds blocks whose ops know their parents", "[ir][region]") {
  Program p;
  Operation* loop = add_region_op(p.block(), {}, {});
  REQUIRE(loop->num_regions() == 1);
  Region& r = loop->region(0);
  CHECK(r.empty());
  CHECK(r.parent_op() == loop);
  Block& b0 = r.emplace_block();
  Block& b1 = r.emplace_block();
  CHECK(r.size() == 2);
  CHECK(&r.front() == &b0);
  CHECK(&r.block(1) == &b1);
  CHECK(b0.parent_region() == &r);
  CHECK(b1.parent_op() == loop);
  CHECK(p.block().parent_op() == nullptr);
  CHECK(p.block().parent_region() == nullptr);

  Operation* inner = add_any(b1, {}, {});
  CHECK(inner->parent_op() == loop);
  CHECK(inner->parent_region() == &r);
  // Nested two deep.
  Operation* inner_loop = add_region_op(b1, {}, {});
  Operation* deep = add_any(inner_loop->region(0).emplace_block(), {}, {});
  CHECK(deep->parent_op() == inner_loop);
  CHECK(deep->parent_op()->parent_op() == loop);
  CHECK(p.num_ops() == 4);

  auto* extra = new Block();
  r.push_back(extra);
  CHECK(r.size() == 3);
  KILN_CHECK_ERROR(r.push_back(extra), InvalidArgument, {"already belongs"});
}

TEST_CASE("erasing a block whose values are used outside it throws and changes nothing",
          "[ir][region]") {
  Program p;
  Operation* holder = add_region_op(p.block(), {}, {});
  Region& r = holder->region(0);
  Block& b0 = r.emplace_block();
  Block& b1 = r.emplace_block();
  BlockArgument arg = b0.add_argument(f32());
  Operation* def = add_any(b0, {arg}, {f32()});
  Operation* outside = add_any(b1, {def->result(0)}, {});

  KILN_CHECK_ERROR(r.erase(&b0), PreconditionNotMet, {"'test.any'", "outside"});
  CHECK(r.size() == 2);
  CHECK(b0.size() == 1);
  CHECK(def->result(0).first_use().owner() == outside);

  // Argument used from another block.
  outside->set_operand(0, arg);
  KILN_CHECK_ERROR(r.erase(&b0), PreconditionNotMet, {"argument #0"});
  CHECK(r.size() == 2);

  outside->erase();
  CHECK_NOTHROW(r.erase(&b0));
  CHECK(r.size() == 1);
  CHECK(&r.front() == &b1);

  Block stray;
  KILN_CHECK_ERROR(r.erase(&stray), InvalidArgument, {"not in this region"});
}

TEST_CASE("erasing a block drops the uses its ops made of outer values", "[ir][region]") {
  Program p;
  Value x = add_any(p.block(), {}, {f32()})->result(0);
  Operation* holder = add_region_op(p.block(), {}, {});
  Block& body = holder->region(0).emplace_block();
  Operation* a = add_any(body, {x}, {f32()});
  add_any(body, {a->result(0), x}, {});
  CHECK(x.use_count() == 2);
  holder->region(0).erase(&body);
  CHECK(x.use_empty());
  CHECK(holder->region(0).empty());
}

TEST_CASE("clear erases every op of a block unless a result is used outside it",
          "[ir][block]") {
  Program p;
  Operation* holder = add_region_op(p.block(), {}, {});
  Block& body = holder->region(0).emplace_block();
  Operation* a = add_any(body, {}, {f32()});
  add_any(body, {a->result(0)}, {f32()});
  Operation* user = add_any(p.block(), {a->result(0)}, {});
  KILN_CHECK_ERROR(body.clear(), PreconditionNotMet, {"'test.any'", "outside"});
  CHECK(body.size() == 2);
  user->erase();
  body.clear();
  CHECK(body.empty());
  CHECK(body.size() == 0);
}

TEST_CASE("cloning an op with a region maps its results, blocks and nested block arguments",
          "[ir][region]") {
  Program p;
  Value outer = add_any(p.block(), {}, {f32()})->result(0);
  Operation* loop = add_region_op(p.block(), {outer}, {t23()});
  Block& body = loop->region(0).emplace_block();
  BlockArgument iv = body.add_argument(Int64Type::get());
  BlockArgument acc = body.add_argument(f32());
  Operation* step = add_any(body, {iv, acc, outer}, {f32()});
  Operation* inner_loop = add_region_op(body, {step->result(0)}, {});
  Block& inner_body = inner_loop->region(0).emplace_block();
  BlockArgument inner_arg = inner_body.add_argument(f32());
  Operation* deep = add_any(inner_body, {inner_arg, acc, step->result(0), outer}, {});

  IrMapping map;
  Operation* copy = loop->clone(map);
  p.block().push_back(copy);

  REQUIRE(copy->num_regions() == 1);
  REQUIRE(copy->region(0).size() == 1);
  Block& cbody = copy->region(0).front();
  CHECK(&cbody != &body);
  CHECK(map.lookup(&body) == &cbody);
  CHECK(map.lookup(loop) == copy);
  CHECK(map.lookup(loop->result(0)) == copy->result(0));
  // Block arguments are new values, mapped.
  REQUIRE(cbody.num_arguments() == 2);
  CHECK(map.lookup(iv) == cbody.argument(0));
  CHECK(map.lookup(acc) == cbody.argument(1));
  CHECK(cbody.argument(0).type() == Int64Type::get());
  CHECK(cbody.argument(0).owner() == &cbody);

  // The cloned step reads the cloned arguments and the (unmapped) outer value.
  Operation* cstep = cbody.front();
  CHECK(map.lookup(step) == cstep);
  CHECK(cstep->operand_source(0) == cbody.argument(0));
  CHECK(cstep->operand_source(1) == cbody.argument(1));
  CHECK(cstep->operand_source(2) == outer);
  CHECK(copy->operand_source(0) == outer);

  // Two levels down: the deep op reads its own block's clone, the middle
  // block's cloned argument and op, and the outer value.
  Operation* cinner_loop = cbody.back();
  Block& cinner_body = cinner_loop->region(0).front();
  CHECK(map.lookup(&inner_body) == &cinner_body);
  Operation* cdeep = cinner_body.front();
  CHECK(map.lookup(deep) == cdeep);
  CHECK(cdeep->operand_source(0) == cinner_body.argument(0));
  CHECK(cdeep->operand_source(1) == cbody.argument(1));
  CHECK(cdeep->operand_source(2) == cstep->result(0));
  CHECK(cdeep->operand_source(3) == outer);
  CHECK(cinner_loop->operand_source(0) == cstep->result(0));

  // The original is untouched and both verify.
  CHECK(deep->operand_source(0) == inner_arg);
  CHECK(Value(acc).use_count() == 2);
  CHECK(outer.use_count() == 6);
  CHECK_NOTHROW(p.verify());
  CHECK(p.num_ops() == 1 + 2 * 4);
}

TEST_CASE("clone_into appends cloned blocks to another region", "[ir][region]") {
  Program p;
  Operation* src = add_region_op(p.block(), {}, {});
  Block& b = src->region(0).emplace_block();
  BlockArgument a = b.add_argument(f32());
  add_any(b, {a}, {});
  Operation* dst = add_region_op(p.block(), {}, {});
  dst->region(0).emplace_block();
  IrMapping map;
  src->region(0).clone_into(dst->region(0), map);
  REQUIRE(dst->region(0).size() == 2);
  Block& nb = dst->region(0).block(1);
  CHECK(map.lookup(&b) == &nb);
  CHECK(nb.front()->operand_source(0) == nb.argument(0));
  CHECK(Value(a).use_count() == 1);
}

TEST_CASE("clone_into the same region appends one copy of each of its blocks", "[ir][region]") {
  // E.g. unrolling a loop body: the region's blocks are cloned into itself.
  Program p;
  Operation* holder = add_region_op(p.block(), {}, {});
  Region& r = holder->region(0);
  Block& b0 = r.emplace_block();
  BlockArgument a = b0.add_argument(f32());
  Operation* op0 = add_any(b0, {a}, {f32()});
  Block& b1 = r.emplace_block();
  add_any(b1, {}, {});
  IrMapping map;
  r.clone_into(r, map);
  REQUIRE(r.size() == 4);
  CHECK(map.lookup(&b0) == &r.block(2));
  CHECK(map.lookup(&b1) == &r.block(3));
  CHECK(r.block(2).size() == 1);
  CHECK(r.block(3).size() == 1);
  CHECK(r.block(2).front()->operand_source(0) == r.block(2).argument(0));
  CHECK(map.lookup(op0->result(0)) == r.block(2).front()->result(0));
  CHECK(Value(a).use_count() == 1);
  CHECK(p.num_ops() == 5);
}

TEST_CASE("erasing a block refuses while a nested block's argument is used outside it",
          "[ir][region]") {
  Program p;
  Operation* holder = add_region_op(p.block(), {}, {});
  Region& r = holder->region(0);
  Block& b0 = r.emplace_block();
  Block& b1 = r.emplace_block();
  Operation* inner = add_region_op(b0, {}, {});
  Block& nested = inner->region(0).emplace_block();
  BlockArgument arg = nested.add_argument(f32());
  Operation* outside = add_any(b1, {arg}, {});  // (invalid IR, but erase must not dangle it)
  KILN_CHECK_ERROR(r.erase(&b0), PreconditionNotMet, {"outside"});
  CHECK(r.size() == 2);
  CHECK(outside->operand_source(0) == arg);
  KILN_CHECK_ERROR(b0.clear(), PreconditionNotMet, {"outside"});
  CHECK(b0.size() == 1);
  CHECK(outside->operand_source(0) == arg);
  outside->erase();
  CHECK_NOTHROW(r.erase(&b0));
}

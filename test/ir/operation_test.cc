// Operation: creation (counts, attributes, null checks), typed attribute
// access, erase/destroy and its refusal while results are used, moving,
// cloning with a value map, and per-op verification.
#include "kiln/ir/operation.h"

#include <sstream>

#include "catch.hpp"
#include "ir_test_util.h"

using namespace kiln;
using kiln_test::add_any;
using kiln_test::f32;
using kiln_test::t23;

namespace {
std::vector<Operation*> ops_of(const Block& b) { return {b.begin(), b.end()}; }
}  // namespace

TEST_CASE("a created op holds its operands, result types, attributes and kind",
          "[ir][operation]") {
  Program p;
  Operation* d = add_any(p.block(), {}, {f32(), t23()});
  auto attrs = DictionaryAttribute::get({{"k", Int64Attribute::get(3)}});
  Operation* op = Operation::create({d->result(1), d->result(0)}, {t23()}, attrs,
                                    IrContext::instance()->op_info<kiln_test::AnyOp>());
  CHECK(op->name() == "test.any");
  CHECK(op->info() == IrContext::instance()->op_info("test.any"));
  CHECK(op->num_operands() == 2);
  CHECK(op->num_results() == 1);
  CHECK(op->num_regions() == 0);
  CHECK(op->operand_types() == std::vector<Type>{t23(), f32()});
  CHECK(op->result_type(0) == t23());
  CHECK(op->attributes() == attrs);
  CHECK(op->parent_block() == nullptr);  // detached until inserted
  CHECK(op->parent_op() == nullptr);
  CHECK(op->parent_region() == nullptr);
  p.block().push_back(op);
  CHECK(op->parent_block() == &p.block());
  CHECK(ops_of(p.block()) == std::vector<Operation*>{d, op});
}

TEST_CASE("creating an op with a null operand, a null result type or no OpInfo fails",
          "[ir][operation]") {
  OpInfo info = IrContext::instance()->op_info<kiln_test::AnyOp>();
  Operation* d = kiln_test::make_any({}, {f32()});
  KILN_CHECK_ERROR(Operation::create({d->result(0), Value()}, {}, {}, info), InvalidArgument,
                   {"'test.any'", "operand #1"});
  KILN_CHECK_ERROR(Operation::create({}, {f32(), Type()}, {}, info), InvalidArgument,
                   {"'test.any'", "result #1"});
  KILN_CHECK_ERROR(Operation::create({}, {}, {}, OpInfo()), InvalidArgument);
  // Nothing was linked by the failed attempts.
  CHECK(d->result(0).use_empty());
  d->erase();
}

TEST_CASE("creating an op from an OperationArgument checks its operand count",
          "[ir][operation]") {
  Program p;
  Value x = add_any(p.block(), {}, {t23()})->result(0);
  OperationArgument arg(IrContext::instance()->op_info<ReluOp>());
  arg.add_operands({x, x});
  arg.add_result(t23());
  KILN_CHECK_ERROR(Operation::create(arg), InvalidArgument, {"'kiln.relu'", "1 operands", "got 2"});
  CHECK(x.use_empty());
}

TEST_CASE("an op's default attributes are the empty dictionary", "[ir][operation]") {
  Operation* op = kiln_test::make_any({}, {});
  CHECK(op->attributes() == DictionaryAttribute::get());
  CHECK_FALSE(op->attribute("x"));
  op->erase();
}

TEST_CASE("set_attribute and erase_attribute change one op's dictionary", "[ir][operation]") {
  Operation* a = kiln_test::make_any({}, {});
  Operation* b = kiln_test::make_any({}, {});
  a->set_attribute("axis", Int64Attribute::get(1));
  a->set_attribute("name", StrAttribute::get("n"));
  CHECK(a->attribute("axis") == Int64Attribute::get(1));
  CHECK(a->attribute<Int64Attribute>("axis").value() == 1);
  CHECK(b->attributes().empty());  // b shares nothing with a
  a->set_attribute("axis", Int64Attribute::get(2));
  CHECK(a->attribute<Int64Attribute>("axis").value() == 2);
  CHECK(a->attributes().size() == 2);
  a->erase_attribute("axis");
  CHECK_FALSE(a->attribute("axis"));
  CHECK(a->attributes() == DictionaryAttribute::get({{"name", StrAttribute::get("n")}}));
  KILN_CHECK_ERROR(a->set_attribute("x", Attribute()), InvalidArgument, {"'test.any'", "'x'"});
  a->set_attributes(DictionaryAttribute::get({{"z", BoolAttribute::get(true)}}));
  CHECK(a->attribute<BoolAttribute>("z").value());
  a->erase();
  b->erase();
}

TEST_CASE("a typed attribute read names the op and attribute when missing or ill-kinded",
          "[ir][operation]") {
  Operation* op = kiln_test::make_any(
      {}, {}, DictionaryAttribute::get({{"axis", Int32Attribute::get(0)}}));
  KILN_CHECK_ERROR(op->attribute<Int64Attribute>("nope"), NotFound, {"'test.any'", "'nope'"});
  KILN_CHECK_ERROR(op->attribute<Int64Attribute>("axis"), InvalidArgument,
                   {"'test.any'", "'axis'", "i64", "i32"});
  CHECK(op->attribute<Int32Attribute>("axis").value() == 0);
  op->erase();
}

TEST_CASE("erasing an op whose result is still used throws and leaves the program unchanged",
          "[ir][operation]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{2, 3});
  auto r = b.create<ReluOp>(x.result());
  auto f = b.create<FetchOp>(r.result(), "out");
  const std::string before = p.to_string();

  KILN_CHECK_ERROR(r->erase(), PreconditionNotMet, {"'kiln.relu'", "'kiln.fetch'"});
  KILN_CHECK_ERROR(r->destroy(), PreconditionNotMet, {"'kiln.relu'"});
  KILN_CHECK_ERROR(p.block().erase(x), PreconditionNotMet, {"'kiln.data'", "'kiln.relu'"});
  CHECK(p.to_string() == before);
  CHECK(p.block().size() == 3);
  CHECK(r.result().use_count() == 1);
  CHECK(x.result().use_count() == 1);
  CHECK_NOTHROW(p.verify());

  // Erasing from the last user back works.
  f->erase();
  CHECK(r.result().use_empty());
  p.block().erase(r);
  CHECK(x.result().use_empty());
  x->destroy();
  CHECK(p.block().empty());
}

TEST_CASE("an op whose nested op's result is used outside cannot be erased", "[ir][operation]") {
  Program p;
  Operation* outer = kiln_test::add_region_op(p.block(), {}, {});
  Block& body = outer->region(0).emplace_block();
  Operation* inner = add_any(body, {}, {f32()});
  Operation* user = add_any(p.block(), {inner->result(0)}, {});
  KILN_CHECK_ERROR(outer->erase(), PreconditionNotMet, {"'test.any'"});
  CHECK(p.block().size() == 2);
  CHECK(inner->result(0).first_use().owner() == user);
  user->erase();
  CHECK_NOTHROW(outer->erase());
  CHECK(p.block().empty());
}

TEST_CASE("an op whose uses are all inside it can be erased with its regions",
          "[ir][operation]") {
  Program p;
  Value x = add_any(p.block(), {}, {f32()})->result(0);
  Operation* outer = kiln_test::add_region_op(p.block(), {x}, {});
  Block& body = outer->region(0).emplace_block();
  BlockArgument arg = body.add_argument(f32());
  Operation* a = add_any(body, {arg, x}, {f32()});
  add_any(body, {a->result(0), arg}, {});
  CHECK(x.use_count() == 2);
  CHECK_NOTHROW(outer->erase());
  CHECK(x.use_empty());  // the nested op's use of x is gone too
  CHECK(p.block().size() == 1);
}

TEST_CASE("move_before and move_to_end reorder ops within and across blocks",
          "[ir][operation]") {
  Program p;
  Operation* a = add_any(p.block(), {}, {});
  Operation* b = add_any(p.block(), {}, {});
  Operation* c = add_any(p.block(), {}, {});
  c->move_before(a);
  CHECK(ops_of(p.block()) == std::vector<Operation*>{c, a, b});
  CHECK(p.block().front() == c);
  CHECK(p.block().back() == b);
  CHECK(a->prev_in_block() == c);
  CHECK(a->next_in_block() == b);
  a->move_before(a);  // no-op
  CHECK(ops_of(p.block()) == std::vector<Operation*>{c, a, b});
  c->move_to_end(&p.block());
  CHECK(ops_of(p.block()) == std::vector<Operation*>{a, b, c});

  Operation* holder = kiln_test::add_region_op(p.block(), {}, {});
  Block& body = holder->region(0).emplace_block();
  b->move_to_end(&body);
  CHECK(ops_of(p.block()) == std::vector<Operation*>{a, c, holder});
  CHECK(ops_of(body) == std::vector<Operation*>{b});
  CHECK(b->parent_block() == &body);
  CHECK(b->parent_op() == holder);
  CHECK(b->parent_region() == &holder->region(0));
  a->move_before(b);
  CHECK(ops_of(body) == std::vector<Operation*>{a, b});
  CHECK(p.block().size() == 2);
  CHECK(body.size() == 2);

  Operation* loose = kiln_test::make_any({}, {});
  KILN_CHECK_ERROR(a->move_before(loose), InvalidArgument, {"in no block"});
  CHECK(a->parent_block() == &body);
  loose->erase();
}

TEST_CASE("clone copies an op and records its results in the mapping", "[ir][operation]") {
  Program p;
  Operation* d = add_any(p.block(), {}, {f32(), t23()});
  Operation* op = add_any(p.block(), {d->result(0), d->result(1)}, {t23(), f32()},
                          DictionaryAttribute::get({{"k", Int64Attribute::get(1)}}));
  IrMapping map;
  Operation* c = op->clone(map);
  CHECK(c != op);
  CHECK(c->parent_block() == nullptr);
  CHECK(c->name() == op->name());
  CHECK(c->attributes() == op->attributes());
  CHECK(c->operand_source(0) == d->result(0));  // unmapped operands are kept
  CHECK(c->operand_source(1) == d->result(1));
  CHECK(d->result(0).use_count() == 2);
  CHECK(map.lookup(op->result(0)) == c->result(0));
  CHECK(map.lookup(op->result(1)) == c->result(1));
  CHECK(map.lookup(op) == c);
  CHECK(c->result_type(0) == t23());
  CHECK(c->result_type(1) == f32());

  // Mapped operands are replaced.
  Operation* d2 = add_any(p.block(), {}, {f32()});
  IrMapping m2;
  m2.map(d->result(0), d2->result(0));
  Operation* c2 = op->clone(m2);
  CHECK(c2->operand_source(0) == d2->result(0));
  CHECK(c2->operand_source(1) == d->result(1));
  CHECK(m2.lookup_or_self(d->result(1)) == d->result(1));
  CHECK_FALSE(m2.lookup(d->result(1)));
  c->erase();
  c2->erase();
}

TEST_CASE("verify checks operand, result and region counts against the OpInfo",
          "[ir][operation]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{2});
  OpInfo relu = IrContext::instance()->op_info<ReluOp>();
  Operation* two_results =
      Operation::create({x.result()}, {x.result().type(), x.result().type()}, {}, relu);
  KILN_CHECK_ERROR(two_results->verify(), InvalidArgument, {"'kiln.relu'", "1 results", "got 2"});
  two_results->erase();
  Operation* no_operand = Operation::create({}, {x.result().type()}, {}, relu);
  KILN_CHECK_ERROR(no_operand->verify(), InvalidArgument, {"'kiln.relu'", "1 operands", "got 0"});
  no_operand->erase();
  Operation* with_region = Operation::create({x.result()}, {x.result().type()}, {}, relu, 1);
  KILN_CHECK_ERROR(with_region->verify(), InvalidArgument, {"'kiln.relu'", "regions"});
  with_region->erase();
}

TEST_CASE("verify checks result types against the op's InferMeta", "[ir][operation]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{2, 3});
  auto y = b.create<DataOp>("y", std::vector<std::int64_t>{2, 3});
  auto add = b.create<AddOp>(x.result(), y.result());
  CHECK_NOTHROW(add->verify());
  add.result().set_type(TensorType::get(DataType::Float32, {3, 2}));
  KILN_CHECK_ERROR(add->verify(), InvalidArgument,
                   {"'kiln.add'", "tensor<3x2xf32>", "tensor<2x3xf32>"});
}

TEST_CASE("verify reports a declared attribute of the wrong kind", "[ir][operation]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{2, 2});
  auto m = b.create<MatmulOp>(x.result(), x.result());
  m->set_attribute("transpose_x", Int32Attribute::get(1));
  KILN_CHECK_ERROR(m->verify(), InvalidArgument, {"'kiln.matmul'", "'transpose_x'", "bool"});
}

TEST_CASE("an op prints as one line of the text form", "[ir][operation]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{2});
  auto r = b.create<ReluOp>(x.result());
  std::string s = r->to_string();
  CHECK_THAT(s, Catch::StartsWith("%") && Catch::Contains(" = kiln.relu(%") &&
                    Catch::EndsWith(") : (tensor<2xf32>) -> tensor<2xf32>\n"));
  std::ostringstream os;
  os << *r.operation();
  CHECK(os.str() == s);
}

TEST_CASE("moving an op into its own region is an InvalidArgument error and changes nothing",
          "[ir][operation]") {
  Program p;
  Operation* outer = kiln_test::add_region_op(p.block(), {}, {});
  Block& body = outer->region(0).emplace_block();
  Operation* inner = add_any(body, {}, {});
  Operation* mid = kiln_test::add_region_op(body, {}, {});
  Block& deep = mid->region(0).emplace_block();
  KILN_CHECK_ERROR(outer->move_before(inner), InvalidArgument, {"'test.region'", "inside"});
  KILN_CHECK_ERROR(outer->move_to_end(&deep), InvalidArgument, {"'test.region'", "inside"});
  // A detached op inserted into a block nested in it.
  p.block().take(outer);
  KILN_CHECK_ERROR(deep.push_back(outer), InvalidArgument, {"'test.region'", "inside"});
  CHECK(outer->parent_block() == nullptr);
  p.block().push_back(outer);
  CHECK(ops_of(p.block()) == std::vector<Operation*>{outer});
  CHECK(ops_of(body) == std::vector<Operation*>{inner, mid});
  CHECK(outer->parent_block() == &p.block());
  CHECK(p.num_ops() == 3);
}

TEST_CASE("an out-of-range result index is an error naming the op and the index",
          "[ir][operation]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{2});
  auto add = b.create<AddOp>(x.result(), x.result());
  Operation* op = add.operation();
  std::string msg = KILN_CHECK_ERROR(op->result(3), OutOfRange,
                                     {"'kiln.add'", "result #3", "it has 1 result)"});
  CHECK(msg == "op 'kiln.add': result #3 out of range (it has 1 result)");
  KILN_CHECK_ERROR(op->result(1), OutOfRange, {"'kiln.add'", "result #1", "1 result"});
  KILN_CHECK_ERROR(op->result_type(1), OutOfRange, {"'kiln.add'", "result #1"});
  KILN_CHECK_ERROR(add.result(0xffffffffu), OutOfRange, {"'kiln.add'", "#4294967295"});
  CHECK(op->result(0).type() == x.result().type());  // in range: unchanged
}

TEST_CASE("a result index past the out-of-line results is an error too", "[ir][operation]") {
  Program p;
  Operation* op = add_any(p.block(), {}, std::vector<Type>(8, f32()));
  CHECK(op->result(7).index() == 7);  // the last out-of-line result
  KILN_CHECK_ERROR(op->result(8), OutOfRange, {"'test.any'", "result #8", "8 results"});
  CHECK(add_any(p.block(), {}, {})->results().empty());
  KILN_CHECK_ERROR(p.block().back()->result(0), OutOfRange,
                   {"'test.any'", "result #0", "0 results"});
}

TEST_CASE("an out-of-range operand index is an error naming the op and the index",
          "[ir][operation]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{2});
  auto y = b.create<DataOp>("y", std::vector<std::int64_t>{2});
  Operation* op = b.create<SubOp>(x.result(), y.result()).operation();
  std::string msg = KILN_CHECK_ERROR(op->operand(2), OutOfRange,
                                     {"'kiln.sub'", "operand #2", "2 operands"});
  CHECK(msg == "op 'kiln.sub': operand #2 out of range (it has 2 operands)");
  KILN_CHECK_ERROR(op->operand_source(5), OutOfRange, {"'kiln.sub'", "operand #5"});
  KILN_CHECK_ERROR(op->set_operand(2, x.result()), OutOfRange, {"'kiln.sub'", "operand #2"});
  KILN_CHECK_ERROR(x->operand(0), OutOfRange, {"'kiln.data'", "operand #0", "0 operands"});
  // Nothing changed: the operands are still x and y.
  CHECK(op->operands() == std::vector<Value>{x.result(), y.result()});
}

TEST_CASE("an out-of-range region index is an error naming the op and the index",
          "[ir][operation]") {
  Program p;
  Operation* op = kiln_test::add_region_op(p.block(), {}, {});
  CHECK(op->region(0).empty());
  KILN_CHECK_ERROR(op->region(1), OutOfRange, {"'test.region'", "region #1", "1 region)"});
  KILN_CHECK_ERROR(add_any(p.block(), {}, {})->region(0), OutOfRange,
                   {"'test.any'", "region #0", "0 regions"});
}

// IrPrinter: the exact text form of programs, ops, regions and blocks.
#include "kiln/ir/printer.h"

#include <sstream>

#include "catch.hpp"
#include "ir_test_util.h"

using namespace kiln;

TEST_CASE("an empty program prints as an empty body", "[ir][printer]") {
  Program p;
  CHECK(p.to_string() == "program {\n}\n");
}

TEST_CASE("a small program prints exactly in the text form", "[ir][printer]") {
  Program p;
  p.set_parameter("w", {TensorType::get(DataType::Float32, {3, 4})});
  p.set_parameter("frozen", {Float32Type::get(), /*is_mutable=*/false});
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{-1, 3});
  auto w = b.create<ParameterOp>("w", p.parameter("w").type);
  auto m = b.create<MatmulOp>(x.result(), w.result());
  auto r = b.create<ReluOp>(m.result());
  auto c = b.create<ConstantOp>(Float64Attribute::get(1.5), Float64Type::get());
  b.create<FetchOp>(r.result(), "out", 1);
  (void)c;

  const std::string expected =
      "program {\n"
      "  parameter \"frozen\" : f32 {mutable = false}\n"
      "  parameter \"w\" : tensor<3x4xf32>\n"
      "  %0 = kiln.data() {dtype = dtype<f32>, name = \"x\", place = place<cpu>, shape = [-1, 3]}"
      " : () -> tensor<-1x3xf32>\n"
      "  %1 = builtin.parameter() {parameter_name = \"w\"} : () -> tensor<3x4xf32>\n"
      "  %2 = kiln.matmul(%0, %1) {transpose_x = false, transpose_y = false}"
      " : (tensor<-1x3xf32>, tensor<3x4xf32>) -> tensor<-1x4xf32>\n"
      "  %3 = kiln.relu(%2) : (tensor<-1x4xf32>) -> tensor<-1x4xf32>\n"
      "  %4 = builtin.constant() {value = 1.5} : () -> f64\n"
      "  kiln.fetch(%3) {col = 1 : i32, name = \"out\"} : (tensor<-1x4xf32>) -> ()\n"
      "}\n";
  CHECK(p.to_string() == expected);
  std::ostringstream os;
  os << p;
  CHECK(os.str() == expected);
}

TEST_CASE("a program whose top block has arguments prints them after 'program', and odd "
          "parameter names and dictionary keys are quoted",
          "[ir][printer]") {
  Program p;
  p.set_parameter("a \"b\"", {Float32Type::get()});
  BlockArgument arg = p.block().add_argument(Int64Type::get());
  kiln_test::add_any(p.block(), {arg}, {},
                     DictionaryAttribute::get({{"plain_key.1", Int64Attribute::get(1)},
                                               {"odd key", Int64Attribute::get(2)}}));
  CHECK(p.to_string() ==
        "program(%0: i64) {\n"
        "  parameter \"a \\\"b\\\"\" : f32\n"
        "  test.any(%0) {\"odd key\" = 2, plain_key.1 = 1} : (i64) -> ()\n"
        "}\n");
}

TEST_CASE("ops with regions print their blocks, arguments and results nested",
          "[ir][printer]") {
  Program p;
  Operation* def = kiln_test::add_any(p.block(), {}, {Int64Type::get()});
  Operation* loop = kiln_test::add_region_op(p.block(), {def->result(0)},
                                             {Float32Type::get(), Int64Type::get()});
  Block& b0 = loop->region(0).emplace_block();
  BlockArgument i = b0.add_argument(Int64Type::get());
  BlockArgument acc = b0.add_argument(Float32Type::get());
  kiln_test::add_any(b0, {i, acc, def->result(0)}, {Float32Type::get()},
                     DictionaryAttribute::get({{"tag", StrAttribute::get("step")}}));
  Block& b1 = loop->region(0).emplace_block();
  kiln_test::add_any(b1, {}, {});
  kiln_test::add_any(p.block(), {loop->result(1), loop->result(0)}, {});

  const std::string expected =
      "program {\n"
      "  %0 = test.any() : () -> i64\n"
      "  %1, %2 = test.region(%0) : (i64) -> (f32, i64) {\n"
      "    ^bb0(%3: i64, %4: f32):\n"
      "      %5 = test.any(%3, %4, %0) {tag = \"step\"} : (i64, f32, i64) -> f32\n"
      "    ^bb1:\n"
      "      test.any() : () -> ()\n"
      "  }\n"
      "  test.any(%2, %1) : (i64, f32) -> ()\n"
      "}\n";
  CHECK(p.to_string() == expected);
}

TEST_CASE("an op with many results prints them all, in order", "[ir][printer]") {
  Program p;
  std::vector<Type> types;
  for (int i = 0; i < 8; ++i) types.push_back(TensorType::get(DataType::Int32, {i}));
  Operation* op = kiln_test::add_any(p.block(), {}, types);
  kiln_test::add_any(p.block(), {op->result(7), op->result(6)}, {});
  CHECK(p.to_string() ==
        "program {\n"
        "  %0, %1, %2, %3, %4, %5, %6, %7 = test.any() : () -> (tensor<0xi32>, tensor<1xi32>, "
        "tensor<2xi32>, tensor<3xi32>, tensor<4xi32>, tensor<5xi32>, tensor<6xi32>, "
        "tensor<7xi32>)\n"
        "  test.any(%7, %6) : (tensor<7xi32>, tensor<6xi32>) -> ()\n"
        "}\n");
}

TEST_CASE("value numbers follow definition order after ops move", "[ir][printer]") {
  Program p;
  Operation* a = kiln_test::add_any(p.block(), {}, {Float32Type::get()});
  Operation* b = kiln_test::add_any(p.block(), {}, {Int64Type::get()});
  b->move_before(a);
  CHECK(p.to_string() ==
        "program {\n"
        "  %0 = test.any() : () -> i64\n"
        "  %1 = test.any() : () -> f32\n"
        "}\n");
}

TEST_CASE("one IrPrinter numbers values consistently across the ops it prints",
          "[ir][printer]") {
  Program p;
  Operation* a = kiln_test::add_any(p.block(), {}, {Float32Type::get()});
  Operation* b = kiln_test::add_any(p.block(), {a->result(0)}, {Float32Type::get()});
  std::ostringstream os;
  IrPrinter printer(os);
  printer.print(*a);
  printer.print(*b);
  printer.print_value(b->result(0));
  printer.print_value(Value());
  CHECK(os.str() ==
        "%0 = test.any() : () -> f32\n"
        "%1 = test.any(%0) : (f32) -> f32\n"
        "%1%<null>");
}

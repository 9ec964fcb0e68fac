// The text IR parser (kiln/ir/parser.h): print → parse → print gives the same
// text and a structurally equal program, for real models (the seed model, an
// MLP, a CNN, a transformer block, an RNN, nested control flow), the random
// programs of the JSON tests and the JSON fuzz seeds; and every kind of bad
// input is a kiln::Error that says where ("source:line:column:") and what.
#include "kiln/ir/parser.h"

#include <bit>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "catch.hpp"
#include "frontend/frontend_test_util.h"
#include "io/random_program.h"
#include "kiln/frontend/rnn.h"
#include "kiln/io/json.h"
#include "kiln/ir/structural_hash.h"
#include "kiln/ir/tensor_array_type.h"
#include "kiln/ir/tensor_attribute.h"
#include "test_util.h"

using namespace kiln;
using kiln_frontend_test::GuardedPrograms;
namespace F = kiln::nn::functional;

namespace {

// The round-trip properties; returns "" or what broke.
std::string text_round_trip_failure(const Program& p) {
  const std::string text = p.to_string();
  Program q = parse_program(text);
  if (q.to_string() != text)
    return "print(parse(print(p))) != print(p)\n--- printed ---\n" + text + "--- reprinted ---\n" +
           q.to_string();
  if (structural_hash(q) != structural_hash(p)) return "structural_hash changed:\n" + text;
  return "";
}

// The text of a one-op program around `op_line` (no results used).
std::string program_with(const std::string& lines) { return "program {\n" + lines + "}\n"; }

// The message of the kiln::Error parse_program(text) throws, checked to
// contain each part.
std::string parse_error(const std::string& text, ErrorKind kind,
                        const std::vector<std::string>& parts) {
  return kiln_test::expect_error([&] { (void)parse_program(text); }, kind, parts,
                                 "parse_program of:\n" + text);
}


}  // namespace

// ---- round trips of real programs ----

TEST_CASE("the seed model (linear + MSE + Adam) round-trips through the text form, main and "
          "startup",
          "[ir][parser]") {
  GuardedPrograms b;
  auto x = data("x", {16, 16});
  auto label = data("label", {16, 1});
  auto out = nn::Linear(16, 1)(x);
  auto loss = nn::MSELoss()(out, label);
  optim::Adam(/*learning_rate=*/1e-3).minimize(loss);
  REQUIRE(b.main.num_ops() > 10);
  CHECK(text_round_trip_failure(b.main) == "");
  CHECK(text_round_trip_failure(b.startup) == "");
  // Adam's 1e-3 and 1e-8 keep every bit (the old %g-style output did not
  // guarantee it), and the parameters keep their mutability.
  Program q = parse_program(b.main.to_string());
  CHECK(q.parameters() == b.main.parameters());
}

TEST_CASE("an MLP with cross entropy and Adam round-trips through the text form",
          "[ir][parser]") {
  GuardedPrograms b;
  auto x = data("x", {-1, 12});
  nn::Linear fc1(12, 8), fc2(8, 8), fc3(8, 3);
  nn::ReLU relu;
  auto logits = fc3(relu(fc2(relu(fc1(x)))));
  auto label = data("label", {-1}, DataType::Int64);
  auto loss = nn::CrossEntropyLoss()(logits, label);
  optim::Adam(1e-3).minimize(loss);
  CHECK(text_round_trip_failure(b.main) == "");
  CHECK(text_round_trip_failure(b.startup) == "");
}

TEST_CASE("a small CNN (conv, pool, flatten, linear) round-trips through the text form",
          "[ir][parser]") {
  GuardedPrograms b;
  auto x = data("x", {-1, 1, 12, 12});
  auto label = data("label", {-1}, DataType::Int64);
  nn::Sequential net;
  net.emplace<nn::Conv2D>(1, 4, 3, 1, 1);
  net.emplace<nn::ReLU>();
  net.emplace<nn::MaxPool2D>(2);
  net.emplace<nn::Flatten>();
  net.emplace<nn::Linear>(4 * 6 * 6, 5);
  auto loss = F::cross_entropy(net(x), label);
  optim::SGD(0.1).minimize(loss);
  CHECK(text_round_trip_failure(b.main) == "");
  CHECK(text_round_trip_failure(b.startup) == "");
}

TEST_CASE("a transformer block (attention, layer norm, gelu) round-trips through the text form",
          "[ir][parser]") {
  GuardedPrograms b;
  auto x = data("x", {2, 5, 8});
  nn::TransformerEncoderLayer block(8, 2, 16, /*dropout=*/0.0, "gelu");
  nn::LayerNorm norm({8});
  auto y = norm(block(x, /*causal=*/true));
  auto loss = F::mse_loss(y, data("target", {2, 5, 8}));
  optim::AdamW(3e-4, 0.9, 0.999, 1e-8, 0.01).minimize(loss);
  CHECK(text_round_trip_failure(b.main) == "");
  CHECK(text_round_trip_failure(b.startup) == "");
}

TEST_CASE("an RNN (a while loop over tensor arrays) and its gradient round-trip through the "
          "text form",
          "[ir][parser]") {
  GuardedPrograms b;
  auto x = data("x", {4, 2, 3});
  nn::SimpleRNN rnn(3, 5);
  auto [ys, h] = rnn(x);
  optim::SGD(0.1).minimize(F::mse_loss(h, data("target", {2, 5})));
  const std::string text = b.main.to_string();
  CHECK_THAT(text, Catch::Contains("tensor_array<"));
  CHECK_THAT(text, Catch::Contains("kiln.while"));
  CHECK(text_round_trip_failure(b.main) == "");
}

TEST_CASE("a cond nested in a while_loop body round-trips: regions in regions, block "
          "arguments and yields",
          "[ir][parser]") {
  GuardedPrograms b;
  Value x = data("x", {2});
  Value i0 = full({1}, 0.0, DataType::Int64);
  auto outs = while_loop(
      [&](const std::vector<Value>& v) { return less_than(v[0], 10); },
      [&](const std::vector<Value>& v) {
        Value odd = equal(v[0], 1);
        Value y = cond(odd, [&] { return add(v[1], x); }, [&] { return F::relu(v[1]); });
        return std::vector<Value>{increment(v[0]), y};
      },
      {i0, full({2}, 0.0)});
  b.main.verify();
  const std::string text = b.main.to_string();
  CHECK_THAT(text, Catch::Contains("kiln.if"));
  CHECK_THAT(text, Catch::Contains("kiln.yield"));
  CHECK_THAT(text, Catch::Contains("^bb"));
  CHECK(text_round_trip_failure(b.main) == "");
  // The parsed loop's body holds the if, whose two regions hold one block each.
  Program q = parse_program(text);
  Operation* loop = q.block().back();
  REQUIRE(loop->name() == "kiln.while");
  bool found_if = false;
  for (Operation* op : loop->region(0).front())
    if (op->name() == "kiln.if") {
      found_if = true;
      CHECK(op->num_regions() == 2);
    }
  CHECK(found_if);
}

TEST_CASE("parameters round-trip with their types, mutability and names that need escapes",
          "[ir][parser]") {
  Program p;
  p.set_parameter("w", {TensorType::get(DataType::Float32, {3, 4})});
  p.set_parameter("frozen", {Float32Type::get(), /*is_mutable=*/false});
  p.set_parameter("\"odd\"\nname \\ ü", {VTensorType::get(DataType::Int8, {})});
  Builder b(p);
  b.create<ParameterOp>("w", p.parameter("w").type);
  const std::string text = p.to_string();
  CHECK_THAT(text, Catch::Contains("parameter \"\\\"odd\\\"\\nname \\\\ ü\" : vtensor<i8>"));
  CHECK_THAT(text, Catch::Contains("parameter \"frozen\" : f32 {mutable = false}"));
  Program q = parse_program(text);
  CHECK(q.parameters() == p.parameters());
  CHECK(text_round_trip_failure(p) == "");
}

TEST_CASE("every builtin attribute kind and special value round-trips exactly", "[ir][parser]") {
  const std::vector<double> doubles = {0.1, -0.0, 1e-8, 1e300, 5e-324, 123456789.0,
                                       std::numeric_limits<double>::infinity(),
                                       -std::numeric_limits<double>::infinity()};
  const std::vector<float> floats = {0.1f, 1e-8f, 3.4e38f, 1e-45f, 16777216.0f, -2.5f};
  Program p;
  Builder b(p);
  for (double d : doubles) b.create<ConstantOp>(Float64Attribute::get(d), Type(Float64Type::get()));
  for (float f : floats) b.create<ConstantOp>(Float32Attribute::get(f), Type(Float32Type::get()));
  b.create<ConstantOp>(Float64Attribute::get(std::nan("")), Type(Float64Type::get()));
  b.create<ConstantOp>(Float32Attribute::get(-std::numeric_limits<float>::quiet_NaN()),
                       Type(Float32Type::get()));
  const std::uint64_t payload_bits = 0xfff0000000000123;  // a negative NaN with a payload
  b.create<ConstantOp>(Float64Attribute::get(std::bit_cast<double>(payload_bits)),
                       Type(Float64Type::get()));
  Attribute everything = DictionaryAttribute::get({
      {"i32", Int32Attribute::get(std::numeric_limits<std::int32_t>::min())},
      {"i64", Int64Attribute::get(std::numeric_limits<std::int64_t>::min())},
      {"bools", ArrayAttribute::get({BoolAttribute::get(true), BoolAttribute::get(false)})},
      {"str", StrAttribute::get("q\"b\\n\n\t\x01\x7f ü")},
      {"empty", ArrayAttribute::get({ArrayAttribute::get({}), DictionaryAttribute::get({})})},
      {"dtype", DataTypeAttribute::get(DataType::BFloat16)},
      {"places", ArrayAttribute::get({PlaceAttribute::get(Place::cpu()),
                                      PlaceAttribute::get(Place::cuda(3))})},
      {"types", ArrayAttribute::get({TypeAttribute::get(TensorType::get(DataType::Float32, {-1, 3})),
                                     TypeAttribute::get(VectorType::get({})),
                                     TypeAttribute::get(BoolType::get()),
                                     TypeAttribute::get(TensorArrayType::get(DataType::Int64, {}))})},
      {"key with spaces = \"odd\"", Int64Attribute::get(1)},
      {"", Int64Attribute::get(2)},
      {"nested.name_1", DictionaryAttribute::get({{"deep", make_i64_array({-1, 0, 7})}})},
  });
  b.create<ConstantOp>(everything, Type(BoolType::get()));
  const std::string text = p.to_string();
  CHECK(text_round_trip_failure(p) == "");
  Program q = parse_program(text);
  auto it = q.block().begin();
  for (double d : doubles)
    CHECK(std::bit_cast<std::uint64_t>((*it++)->attribute<Float64Attribute>("value").value()) ==
          std::bit_cast<std::uint64_t>(d));
  for (float f : floats)
    CHECK(std::bit_cast<std::uint32_t>((*it++)->attribute<Float32Attribute>("value").value()) ==
          std::bit_cast<std::uint32_t>(f));
  CHECK(std::isnan((*it++)->attribute<Float64Attribute>("value").value()));
  float neg_nan = (*it++)->attribute<Float32Attribute>("value").value();
  CHECK((std::isnan(neg_nan) && std::signbit(neg_nan)));
  CHECK(std::bit_cast<std::uint64_t>((*it++)->attribute<Float64Attribute>("value").value()) ==
        payload_bits);
  CHECK_THAT(text, Catch::Contains("value = -nan : f32") && Catch::Contains("nan(0xfff0000000000123)"));
  CHECK((*it)->attribute("value") == everything);  // uniqued: the very same attribute
}

TEST_CASE("tensor constants of every dtype round-trip with every value", "[ir][parser]") {
  auto bytes_of = [](const auto& v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(v[0]));
  };
  Program p;
  Builder b(p);
  auto constant = [&](TensorAttribute a) {
    b.create<ConstantOp>(a, Type(TensorType::get(a.dtype(), a.dims())));
  };
  std::vector<float> f32s(20);
  for (std::size_t i = 0; i < f32s.size(); ++i) f32s[i] = 0.1f * float(i) + 1e-7f;
  f32s[3] = std::numeric_limits<float>::infinity();
  f32s[4] = std::bit_cast<float>(std::uint32_t{0x7fc00001});  // a NaN payload
  f32s[5] = -std::numeric_limits<float>::quiet_NaN();
  constant(TensorAttribute::get(DataType::Float32, {4, 5}, bytes_of(f32s)));
  constant(TensorAttribute::get(DataType::Float64, {2},
                                bytes_of(std::vector<double>{1.0 / 3, -1e-300})));
  constant(TensorAttribute::get(DataType::Int64, {3},
                                bytes_of(std::vector<std::int64_t>{
                                    std::numeric_limits<std::int64_t>::min(), 0,
                                    std::numeric_limits<std::int64_t>::max()})));
  constant(TensorAttribute::get(DataType::Int8, {2}, bytes_of(std::vector<std::int8_t>{-128, 127})));
  constant(TensorAttribute::get(DataType::UInt64, {1},
                                bytes_of(std::vector<std::uint64_t>{~std::uint64_t{0}})));
  constant(TensorAttribute::get(DataType::Float16, {2},
                                bytes_of(std::vector<std::uint16_t>{0x3c00, 0xfc00})));
  constant(TensorAttribute::get(DataType::Bool, {3}, std::string{char(1), char(0), char(1)}));
  constant(TensorAttribute::get(DataType::Int32, {0, 4}, ""));
  CHECK(text_round_trip_failure(p) == "");
  Program q = parse_program(p.to_string());
  auto qi = q.block().begin();
  for (Operation* op : p.block()) CHECK((*qi++)->attribute("value") == op->attribute("value"));
}

TEST_CASE("a thousand seeded random programs round-trip through the text form", "[ir][parser]") {
  int failures = 0;
  for (std::uint64_t seed = 0; seed < 1000 && failures < 3; ++seed) {
    Program p = kiln::test::random_program(seed);
    std::string why = text_round_trip_failure(p);
    if (!why.empty()) {
      ++failures;
      INFO("seed " << seed);
      CHECK(why == "");
    }
  }
  CHECK(failures == 0);
}

TEST_CASE("the JSON fuzz seeds that load also round-trip through the text form",
          "[ir][parser]") {
  const char* root = std::getenv("KILN_SOURCE_ROOT");
  const std::filesystem::path dir =
      std::filesystem::path(root ? root : ".") / "tools/fuzz/corpus";  // meson test sets it
  REQUIRE(std::filesystem::is_directory(dir));
  int loaded = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path());
    std::stringstream ss;
    ss << in.rdbuf();
    Program p;
    try {
      p = load_program_json(ss.str());
    } catch (const Error&) {
      continue;  // a seed of bad input
    }
    ++loaded;
    INFO(entry.path().string());
    CHECK(text_round_trip_failure(p) == "");
  }
  CHECK(loaded >= 10);
}

TEST_CASE("hand-written text may use comments, free white space, ? dims and suffixed numbers",
          "[ir][parser]") {
  Program q = parse_program(
      "// a comment\n"
      "program{ %x=kiln.data(){dtype=dtype<f32>,name=\"x\",place=place<cpu>,shape=[-1,3]}:()->"
      "tensor<?x3xf32>   // trailing comment\n"
      "  kiln.fetch( %x ) { col = 0 : i32 , name = \"x\" } : ( tensor<-1x3xf32> ) -> ( ) }");
  CHECK(q.to_string() ==
        "program {\n"
        "  %0 = kiln.data() {dtype = dtype<f32>, name = \"x\", place = place<cpu>, shape = [-1, 3]}"
        " : () -> tensor<-1x3xf32>\n"
        "  kiln.fetch(%0) {col = 0 : i32, name = \"x\"} : (tensor<-1x3xf32>) -> ()\n"
        "}\n");
}

// ---- errors: where and what ----

TEST_CASE("a syntax error names the line, the column, what was expected and what was found",
          "[ir][parser]") {
  // The attributes' '{' where ')' should close the operands.
  parse_error(program_with("  %0 = kiln.data() {dtype = dtype<f32>, name = \"x\", place = "
                           "place<cpu>, shape = [2]} : () -> tensor<2xf32>\n"
                           "  %1 = kiln.relu(%0 {} : (tensor<2xf32>) -> tensor<2xf32>\n"),
              ErrorKind::InvalidArgument,
              {"<text>:3:21: expected ')' after the operands of kiln.relu, found '{'"});
  parse_error("program {\n  %0 = kiln.relu(\n", ErrorKind::InvalidArgument,
              {"<text>:3:1: expected a value %N as an operand of kiln.relu, found end of input"});
  parse_error("prog {}", ErrorKind::InvalidArgument,
              {"<text>:1:1: expected 'program' at the start, found 'prog'"});
  parse_error("program {\n  %0 = kiln.full() : () -> tensor<2xf32>\n", ErrorKind::InvalidArgument,
              {"expected '}' to close the program opened at <text>:1:1, found end of input"});
  parse_error(program_with("  %0 = kiln.full() {} () -> f32\n"), ErrorKind::InvalidArgument,
              {"<text>:2:23: expected ':' before the signature of kiln.full, found '('"});
  parse_error(program_with("  %0 = kiln.full() {} : () => f32\n"), ErrorKind::InvalidArgument,
              {"<text>:2:28: expected '->' after the operand types of kiln.full, found '='"});
}

TEST_CASE("the source name given to parse_program starts every message", "[ir][parser]") {
  KILN_CHECK_ERROR(parse_program("program {\n  ?\n}", "model.kir"), InvalidArgument,
                   {"model.kir:2:3: expected an op name, found '?'"});
}

TEST_CASE("an unknown op or type is an error naming it", "[ir][parser]") {
  parse_error(program_with("  %0 = kiln.nosuchop() : () -> f32\n"), ErrorKind::NotFound,
              {"<text>:2:8: unknown op 'kiln.nosuchop'"});
  parse_error(program_with("  %0 = kiln.full() : () -> tensor<2xf99>\n"), ErrorKind::NotFound,
              {"<text>:2:37: unknown type 'f99'"});
  parse_error(program_with("  parameter \"w\" : matrix<2x2>\n"), ErrorKind::NotFound,
              {"<text>:2:19: unknown type 'matrix'"});
}

TEST_CASE("an undefined value, a value defined twice and a value used outside its region are "
          "errors naming the value",
          "[ir][parser]") {
  parse_error(program_with("  %0 = kiln.relu(%12) : (tensor<2xf32>) -> tensor<2xf32>\n"),
              ErrorKind::InvalidArgument, {"<text>:2:18: undefined value %12"});
  const std::string data =
      "  %0 = kiln.data() {dtype = dtype<f32>, name = \"x\", place = place<cpu>, shape = [2]} : "
      "() -> tensor<2xf32>\n";
  parse_error(program_with(data + "  %0 = kiln.relu(%0) : (tensor<2xf32>) -> tensor<2xf32>\n"),
              ErrorKind::AlreadyExists, {"<text>:3:3: value %0 is defined twice (first at <text>:2:3)"});
  // A value of an if's branch used after the if.
  parse_error(program_with(
                  "  %0 = kiln.full() {dtype = dtype<bool>, place = place<cpu>, shape = [1], "
                  "value = 1.0} : () -> tensor<1xbool>\n"
                  "  kiln.if(%0) : (tensor<1xbool>) -> () {\n"
                  "    ^bb0:\n"
                  "      %1 = kiln.full() {dtype = dtype<f32>, place = place<cpu>, shape = [1], "
                  "value = 1.0} : () -> tensor<1xf32>\n"
                  "      kiln.yield() : () -> ()\n"
                  "  } {\n"
                  "    ^bb1:\n"
                  "      kiln.yield() : () -> ()\n"
                  "  }\n"
                  "  %2 = kiln.relu(%1) : (tensor<1xf32>) -> tensor<1xf32>\n"),
              ErrorKind::InvalidArgument,
              {"<text>:11:18: value %1 is not visible here: it is defined at <text>:5:7 inside a "
               "region that ends at <text>:7:3"});
}

TEST_CASE("a value used inside a kiln.if or kiln.while that it was not passed to is an error "
          "at the use",
          "[ir][parser]") {
  parse_error(program_with(
                  "  %0 = kiln.full() {dtype = dtype<bool>, place = place<cpu>, shape = [1], "
                  "value = 1.0} : () -> tensor<1xbool>\n"
                  "  %1 = kiln.full() {dtype = dtype<f32>, place = place<cpu>, shape = [1], "
                  "value = 1.0} : () -> tensor<1xf32>\n"
                  "  kiln.if(%0) : (tensor<1xbool>) -> () {\n"
                  "    ^bb0:\n"
                  "      %2 = kiln.relu(%1) : (tensor<1xf32>) -> tensor<1xf32>\n"
                  "      kiln.yield() : () -> ()\n"
                  "  } {\n"
                  "    ^bb1:\n"
                  "      kiln.yield() : () -> ()\n"
                  "  }\n"),
              ErrorKind::InvalidArgument,
              {"<text>:6:22: value %1 (defined at <text>:3:3) is used inside kiln.if at <text>:4:3, "
               "whose regions are isolated from above: pass it to kiln.if as an operand"});
}

TEST_CASE("a wrong operand or result count and a signature type that is not the operand's "
          "are errors",
          "[ir][parser]") {
  const std::string data =
      "  %0 = kiln.data() {dtype = dtype<f32>, name = \"x\", place = place<cpu>, shape = [2]} : "
      "() -> tensor<2xf32>\n";
  parse_error(program_with(data + "  %1 = kiln.relu(%0, %0) : (tensor<2xf32>, tensor<2xf32>) -> "
                                  "tensor<2xf32>\n"),
              ErrorKind::InvalidArgument, {"<text>:3:17: kiln.relu takes 1 operand(s), found 2"});
  parse_error(program_with(data + "  %1 = kiln.relu(%0) : (tensor<3xf32>) -> tensor<2xf32>\n"),
              ErrorKind::InvalidArgument,
              {"<text>:3:25: operand #0 of kiln.relu is defined as tensor<2xf32>, but the signature "
               "says tensor<3xf32>"});
  parse_error(program_with(data + "  %1 = kiln.relu(%0) : () -> tensor<2xf32>\n"),
              ErrorKind::InvalidArgument,
              {"<text>:3:24: the signature of kiln.relu lists 0 operand type(s), but it has 1"});
  parse_error(program_with(data + "  %1, %2 = kiln.relu(%0) : (tensor<2xf32>) -> tensor<2xf32>\n"),
              ErrorKind::InvalidArgument,
              {"<text>:3:47: kiln.relu has 1 result type(s) but 2 result name(s)"});
  parse_error(program_with(data + "  kiln.relu(%0) : (tensor<2xf32>) -> ()\n"),
              ErrorKind::InvalidArgument, {"<text>:3:38: kiln.relu has 1 result(s), found 0"});
}

TEST_CASE("an op that does not verify and a program that does not verify are errors at the op "
          "or the program",
          "[ir][parser]") {
  // relu's result must be the operand's type: the op's own verification.
  parse_error(program_with(
                  "  %0 = kiln.data() {dtype = dtype<f32>, name = \"x\", place = place<cpu>, "
                  "shape = [2]} : () -> tensor<2xf32>\n"
                  "  %1 = kiln.matmul(%0, %0) : (tensor<2xf32>, tensor<2xf32>) -> tensor<7xf32>\n"),
              ErrorKind::InvalidArgument, {"<text>:3:8: ", "kiln.matmul"});
  // A data op without its attributes.
  parse_error(program_with("  %0 = kiln.data() : () -> tensor<2xf32>\n"),
              ErrorKind::InvalidArgument, {"<text>:2:8: ", "'kiln.data' is missing attribute"});
}

TEST_CASE("an unterminated region or string and trailing text are errors saying so",
          "[ir][parser]") {
  parse_error("program {\n  kiln.if(%0) : () -> () {\n    ^bb0:\n", ErrorKind::InvalidArgument,
              {"<text>:2:11: undefined value %0"});
  parse_error(program_with(
                  "  %0 = kiln.full() {dtype = dtype<bool>, place = place<cpu>, shape = [1], "
                  "value = 1.0} : () -> tensor<1xbool>\n"
                  "  kiln.if(%0) : (tensor<1xbool>) -> () {\n"
                  "      kiln.yield() : () -> ()\n"
                  "  }\n"),
              ErrorKind::InvalidArgument,
              {"<text>:4:7: expected a block label ^bbN or '}' in region #0 of kiln.if, found "
               "'kiln.yield'"});
  parse_error("program {\n  %0 = kiln.full() : () -> f32 {\n", ErrorKind::InvalidArgument,
              {"<text>:3:1: expected '}' to close region #0 of kiln.full opened at <text>:2:32, "
               "found end of input"});
  parse_error(program_with("  %0 = kiln.full() {name = \"abc} : () -> f32\n"),
              ErrorKind::InvalidArgument,
              {"<text>:2:28: unterminated string: it reaches the end of the line"});
  parse_error(program_with("  %0 = kiln.full() {name = \"a\\qb\"} : () -> f32\n"),
              ErrorKind::InvalidArgument, {"<text>:2:30: unknown escape in a string"});
  parse_error("program {\n}\nprogram {\n}\n", ErrorKind::InvalidArgument,
              {"<text>:3:1: expected the end of input after the program, found 'program'"});
}

TEST_CASE("bad attributes and types are errors at the attribute or type", "[ir][parser]") {
  auto full_with = [](const std::string& attrs, const std::string& type = "f32") {
    return program_with("  %0 = kiln.full() {" + attrs + "} : () -> " + type + "\n");
  };
  parse_error(full_with("a = 1, a = 2"), ErrorKind::AlreadyExists,
              {"<text>:2:28: attribute 'a' is given twice (first at <text>:2:21)"});
  parse_error(full_with("a = 99999999999 : i32"), ErrorKind::OutOfRange,
              {"<text>:2:25: '99999999999' is out of range for i32"});
  parse_error(full_with("a = 1e999"), ErrorKind::OutOfRange, {"'1e999' is out of range for f64"});
  parse_error(full_with("a = 1e-50 : f32"), ErrorKind::OutOfRange,
              {"'1e-50' is out of range for f32 (it rounds to an infinity or to zero)"});
  parse_error(full_with("a = 1.5 : i32"), ErrorKind::InvalidArgument,
              {"'1.5' is not an integer, but its type is i32"});
  parse_error(full_with("a = dtype<f99>"), ErrorKind::InvalidArgument,
              {"<text>:2:31: unknown data type 'f99' in dtype<...>"});
  parse_error(full_with("a = place<gpu:0>"), ErrorKind::InvalidArgument,
              {"expected cpu, host_stream:N or cuda:N in place<...>, found 'gpu:0'"});
  parse_error(full_with("a = [1, 2"), ErrorKind::InvalidArgument,
              {"<text>:2:30: expected ']' after the elements of an array, found '}'"});
  parse_error(full_with("a = tensor<2xf32> [1, 2, 3]"), ErrorKind::InvalidArgument,
              {"<text>:2:25: tensor constant tensor<2xf32> needs 2 value(s), found 3"});
  parse_error(full_with("a = tensor<2xi8> [1, 300]"), ErrorKind::OutOfRange,
              {"'300' is out of range for an element of a i8 tensor constant"});
  parse_error(full_with("", "tensor<2x3>"), ErrorKind::InvalidArgument,
              {"<text>:2:41: expected 'x' after a dim of tensor<...>, found '>'"});
  parse_error(full_with("", "tensor<-2xf32>"), ErrorKind::InvalidArgument,
              {"<text>:2:31: tensor dim must be >= -1"});
  parse_error(full_with("", "tensor<2xtensor<f32>>"), ErrorKind::InvalidArgument,
              {"<text>:2:31: tensor element type must be a scalar type, got tensor<f32>"});
}

TEST_CASE("nesting deeper than the limit is rejected, not a stack overflow", "[ir][parser]") {
  const int n = 100000;
  parse_error(program_with("  %0 = kiln.full() {a = " + std::string(n, '[') + "} : () -> f32\n"),
              ErrorKind::InvalidArgument, {"<text>:2:", "attribute nesting is deeper than 64"});
  std::string types;
  for (int i = 0; i < n; ++i) types += "vector<";
  parse_error(program_with("  %0 = kiln.full() : () -> " + types + "\n"),
              ErrorKind::InvalidArgument, {"type nesting is deeper than 64"});
  std::string regions;
  for (int i = 0; i < n; ++i) regions += "iotest.scope() : () -> () { ^bb0: ";
  kiln::test::random_program(0);  // registers iotest.scope
  parse_error(program_with(regions), ErrorKind::InvalidArgument,
              {"region nesting is deeper than 64"});
}

// Not a test: regenerates the text parser's fuzz seed corpus from printed
// programs (a few small ones: ./run fuzz uses -max_len=8192 for it).
//   KILN_CORPUS_DIR=tools/fuzz/ir_corpus ./build/test/kiln_tests "[.ir_corpus]"
TEST_CASE("write printed programs as fuzz corpus seeds for the text parser", "[.ir_corpus]") {
  const char* dir = std::getenv("KILN_CORPUS_DIR");
  REQUIRE(dir != nullptr);
  auto write = [&](const std::string& name, const Program& p) {
    const std::string text = p.to_string();
    REQUIRE(text.size() <= 8192);
    std::ofstream(std::string(dir) + "/" + name + ".kir") << text;
  };
  {
    GuardedPrograms b;
    auto x = data("x", {16, 16});
    auto loss = nn::MSELoss()(nn::Linear(16, 1)(x), data("label", {16, 1}));
    optim::Adam(1e-3).minimize(loss);
    write("seed_startup", b.startup);
    write("seed_main", b.main);
  }
  {
    GuardedPrograms b;
    Value x = data("x", {2});
    auto outs = while_loop(
        [&](const std::vector<Value>& v) { return less_than(v[0], 10); },
        [&](const std::vector<Value>& v) {
          Value y = cond(equal(v[0], 1), [&] { return add(v[1], x); },
                         [&] { return F::relu(v[1]); });
          return std::vector<Value>{increment(v[0]), y};
        },
        {full({1}, 0.0, DataType::Int64), full({2}, 0.0)});
    write("while_if", b.main);
  }
  test::RandomProgramOptions small;
  small.max_ops = 6;
  small.max_region_depth = 0;  // iotest.scope is not registered in the fuzz target
  small.max_attribute_depth = 2;
  for (std::uint64_t seed : {1, 2, 3, 5, 8})
    write("random_" + std::to_string(seed), test::random_program(seed, small));
}

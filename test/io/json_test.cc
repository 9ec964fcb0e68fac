// The JSON program format: save/load round trips (1000 seeded random programs
// plus the special values each kind of attribute can hold) and the content
// hash (a fixed program hashes to a known constant; any change changes it).
#include "kiln/io/json.h"

#include <bit>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <cstdint>
#include <limits>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "catch.hpp"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/support/hash.h"
#include "random_program.h"

using namespace kiln;
using nlohmann::json;

namespace {

// The three round-trip properties; returns "" or what broke.
std::string round_trip_failure(const Program& p) {
  std::string text = save_program_json(p);
  Program q = load_program_json(text);
  if (q.to_string() != p.to_string())
    return "print(load(save(p))) != print(p)\n--- p ---\n" + p.to_string() + "--- loaded ---\n" +
           q.to_string();
  if (save_program_json(q) != text) return "save(load(save(p))) != save(p)\n" + text;
  if (content_hash(q) != content_hash(p)) return "content_hash changed across a round trip";
  return "";
}

// The program the hash tests fix: parameters, every kiln op, a nested region
// (left out for the fuzz corpus: the fuzz target does not register iotest.scope).
Program fixed_program(bool with_region = true) {
  Program p;
  p.set_parameter("linear_0.w_0", {TensorType::get(DataType::Float32, {16, 1})});
  p.set_parameter("linear_0.b_0", {TensorType::get(DataType::Float32, {1}), false});
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{-1, 16});
  auto w = b.create<ParameterOp>("linear_0.w_0", p.parameter("linear_0.w_0").type);
  auto bias = b.create<ParameterOp>("linear_0.b_0", p.parameter("linear_0.b_0").type);
  auto xw = b.create<MatmulOp>(x.result(), w.result());
  auto out = b.create<AddOp>(xw.result(), bias.result());
  auto act = b.create<Relu_Op>(b.create<ReluOp>(out.result()).result());
  auto noise = b.create<UniformRandomOp>(std::vector<std::int64_t>{16, 1}, -0.01, 0.01, 42);
  auto full = b.create<FullOp>(std::vector<std::int64_t>{16, 1}, 0.5);
  auto sum = b.create<AddOp>(b.create<AddOp>(act.result(), noise.result()).result(), full.result());
  auto flat = b.create<ReshapeOp>(sum.result(), std::vector<std::int64_t>{-1});
  b.create<ConstantOp>(StrAttribute::get("a \"quoted\"\nline"), Type(Float64Type::get()));
  if (with_region) {
    auto scope = b.create<test::ScopeOp>(std::vector<Value>{flat.result()},
                                         std::vector<Type>{Float32Type::get()});
    Block& inner = scope->region(0).emplace_block();
    BlockArgument arg = inner.add_argument(Int64Type::get());
    Builder ib(inner);
    ib.create<FetchOp>(arg, "inner");
  }
  b.create<SetParameterOp>(sum.result(), "linear_0.w_0");
  b.create<FetchOp>(flat.result(), "out", 1);
  p.verify();
  return p;
}

}  // namespace

TEST_CASE("a thousand seeded random programs survive save, load and save again unchanged",
          "[io][json]") {
  int failures = 0;
  for (std::uint64_t seed = 1; seed <= 1000; ++seed) {
    Program p = test::random_program(seed);
    std::string why = round_trip_failure(p);
    if (!why.empty() && ++failures <= 3) FAIL_CHECK("seed " << seed << ": " << why);
  }
  CHECK(failures == 0);
}

TEST_CASE("the random programs cover every op, attribute kind, region and special value",
          "[io][json]") {
  std::set<std::string> ops, attr_kinds;
  bool nan = false, inf = false, block_args = false, out_of_line = false, vector_type = false,
       vtensor = false, nested_region = false, params = false;
  std::function<void(Attribute)> visit_attr = [&](Attribute a) {
    attr_kinds.insert(std::string(a.kind_name()));
    if (auto f = a.dyn_cast<Float32Attribute>()) nan |= std::isnan(f.value()), inf |= std::isinf(f.value());
    if (auto f = a.dyn_cast<Float64Attribute>()) nan |= std::isnan(f.value()), inf |= std::isinf(f.value());
    if (auto arr = a.dyn_cast<ArrayAttribute>()) for (auto e : arr.value()) visit_attr(e);
    if (auto d = a.dyn_cast<DictionaryAttribute>()) for (auto& [k, e] : d) visit_attr(e);
    if (auto t = a.dyn_cast<TypeAttribute>()) vector_type |= t.value().isa<VectorType>();
  };
  std::function<void(const Block&, int)> visit = [&](const Block& blk, int depth) {
    block_args |= blk.num_arguments() > 0;
    nested_region |= depth >= 2;
    for (Operation* op : blk) {
      ops.insert(op->name());
      out_of_line |= op->num_results() > 6;
      for (auto t : op->results()) vtensor |= t.type().isa<VTensorType>();
      for (auto& [k, a] : op->attributes()) visit_attr(a);
      for (std::uint32_t r = 0; r < op->num_regions(); ++r)
        for (Block* inner : op->region(r)) visit(*inner, depth + 1);
    }
  };
  for (std::uint64_t seed = 1; seed <= 1000; ++seed) {
    Program p = test::random_program(seed);
    params |= !p.parameters().empty();
    visit(p.block(), 0);
  }
  CHECK(ops == std::set<std::string>{"builtin.constant", "builtin.parameter",
                                     "builtin.set_parameter", "iotest.scope", "kiln.add",
                                     "kiln.data", "kiln.fetch", "kiln.full", "kiln.matmul",
                                     "kiln.relu", "kiln.relu_", "kiln.reshape",
                                     "kiln.uniform_random"});
  CHECK(attr_kinds == std::set<std::string>{"array", "bool", "dict", "dtype", "f32", "f64", "i32",
                                            "i64", "place", "str", "type"});
  CHECK(nan);
  CHECK(inf);
  CHECK(block_args);
  CHECK(out_of_line);
  CHECK(vector_type);
  CHECK(vtensor);
  CHECK(nested_region);
  CHECK(params);
}

TEST_CASE("the random program generator is deterministic in its seed", "[io][json]") {
  CHECK(save_program_json(test::random_program(7)) == save_program_json(test::random_program(7)));
  CHECK(save_program_json(test::random_program(7)) != save_program_json(test::random_program(8)));
}

TEST_CASE("pretty-printed and compact JSON load to the same program", "[io][json]") {
  Program p = test::random_program(42);
  Program compact = load_program_json(save_program_json(p));
  Program pretty = load_program_json(save_program_json(p, 2));
  CHECK(pretty.to_string() == compact.to_string());
  CHECK(content_hash(pretty) == content_hash(p));
}

TEST_CASE("convolutions, batch norms, max pools and their gradients saved before data_format (and "
          "weights_trained) existed load as NCHW (and false)",
          "[io][json]") {
  Program p;
  Builder b(p);
  using V = std::vector<std::int64_t>;
  Value x = b.create<DataOp>("x", V{2, 3, 6, 6}).result(), w = b.create<DataOp>("w", V{4, 3, 3, 3}).result();
  Value y = b.create<Conv2dOp>(x, w, V{1, 1}, V{1, 1}).result();
  Value c = b.create<DataOp>("c", V{4}).result();
  auto bn = b.create<BatchNormOp>(y, c, c, b.create<FullOp>(V{4}, 0.0, DataType::Float32).result(),
                                  b.create<FullOp>(V{4}, 1.0, DataType::Float32).result());
  Value d = bn.operation()->result(0);
  b.create<GradOf<BatchNormOp>>(bn.operation(), y, c, bn.operation()->result(3), bn.operation()->result(4), d);
  b.create<GradOf<Conv2dOp>>(Conv2dOp(y.defining_op()).attrs(), x, w, d);
  Value m = b.create<MaxPool2dOp>(d, V{2, 2}).result();
  b.create<GradOf<MaxPool2dOp>>(m.defining_op(), d, m);
  b.create<FusedConv2dOp>(x, w, c, V{1, 1}, V{1, 1});
  json j = json::parse(save_program_json(p));
  std::size_t dropped = 0;
  for (json& op : j["body"]["ops"]) dropped += op["attrs"].erase("data_format") + op["attrs"].erase("weights_trained");
  REQUIRE(dropped == 8);  // seven ops' data_format, fused_conv2d's weights_trained
  Program loaded = load_program_json(j.dump());
  loaded.verify();
  CHECK(loaded.to_string() == p.to_string());
  std::size_t nchw = 0;
  for (Operation* op : loaded.block()) {
    const DictionaryAttribute a = op->attributes();
    if (a.contains("data_format")) nchw += a.find("data_format").cast<StrAttribute>().value() == "NCHW";
    if (op->isa<FusedConv2dOp>()) CHECK_FALSE(FusedConv2dOp(op).attrs().weights_trained);
  }
  CHECK(nchw == 7);
}

TEST_CASE("the saved document has the documented top-level layout", "[io][json]") {
  json j = json::parse(save_program_json(fixed_program()));
  CHECK(j["format"] == "kiln.program");
  CHECK(j["version"] == kProgramFormatVersion);
  CHECK(j["parameters"][0] == json{{"name", "linear_0.b_0"},
                                   {"type", {{"tensor", {{"dtype", "f32"}, {"dims", {1}}}}}},
                                   {"mutable", false}});
  CHECK(j["body"]["args"] == json::array());
  const json& data = j["body"]["ops"][0];
  CHECK(data["op"] == "kiln.data");
  CHECK(data["operands"] == json::array());
  CHECK(data["attrs"]["name"] == json{{"str", "x"}});
  CHECK(data["attrs"]["shape"] == json{{"array", {{{"i64", -1}}, {{"i64", 16}}}}});
  CHECK(j["body"]["ops"][3]["operands"] == json{0, 1});  // matmul(x, w)
}

TEST_CASE("float attributes keep their exact value, sign of zero, infinities and NaN",
          "[io][json]") {
  using F = std::numeric_limits<float>;
  using D = std::numeric_limits<double>;
  const std::vector<float> floats = {0.1f, -0.0f, F::denorm_min(), F::max(), F::lowest(),
                                     F::min(), F::infinity(), -F::infinity(), 16777217.0f};
  const std::vector<double> doubles = {0.1, -0.0, D::denorm_min(), D::max(), D::lowest(),
                                       D::min(), D::infinity(), -D::infinity(), 1.0 / 3.0};
  Program p;
  Builder b(p);
  for (float f : floats) b.create<ConstantOp>(Float32Attribute::get(f), Type(Float32Type::get()));
  for (double d : doubles) b.create<ConstantOp>(Float64Attribute::get(d), Type(Float64Type::get()));
  b.create<ConstantOp>(Float32Attribute::get(F::quiet_NaN()), Type(Float32Type::get()));
  b.create<ConstantOp>(Float64Attribute::get(-D::quiet_NaN()), Type(Float64Type::get()));
  Program q = load_program_json(save_program_json(p));
  auto it = q.block().begin();
  for (float f : floats) {
    float got = (*it++)->attribute<Float32Attribute>("value").value();
    CHECK(std::bit_cast<std::uint32_t>(got) == std::bit_cast<std::uint32_t>(f));
  }
  for (double d : doubles) {
    double got = (*it++)->attribute<Float64Attribute>("value").value();
    CHECK(std::bit_cast<std::uint64_t>(got) == std::bit_cast<std::uint64_t>(d));
  }
  CHECK(std::isnan((*it++)->attribute<Float32Attribute>("value").value()));
  CHECK(std::isnan((*it++)->attribute<Float64Attribute>("value").value()));
  CHECK(round_trip_failure(p).empty());
}

TEST_CASE("strings keep quotes, backslashes, control characters and unicode", "[io][json]") {
  const std::vector<std::string> strings = {"", "\"", "a\\b", "line\nbreak\r\n", "\t\x01\x1f\x7f",
                                            "ünïcödé 日本語 🔥", "\u2028", "nan", "{\"str\":1}"};
  Program p;
  p.set_parameter("\"odd\"\nname ü", {VTensorType::get(DataType::Int8, {})});
  Builder b(p);
  for (const auto& s : strings) b.create<ConstantOp>(StrAttribute::get(s), Type(BoolType::get()));
  b.create<ConstantOp>(DictionaryAttribute::get({{"ключ \"k\"\n", StrAttribute::get("v")}}),
                       Type(BoolType::get()));
  Program q = load_program_json(save_program_json(p));
  auto it = q.block().begin();
  for (const auto& s : strings) CHECK((*it++)->attribute<StrAttribute>("value").value() == s);
  CHECK((*it)->attribute<DictionaryAttribute>("value").contains("ключ \"k\"\n"));
  CHECK(q.has_parameter("\"odd\"\nname ü"));
  CHECK(round_trip_failure(p).empty());
}

TEST_CASE("nested arrays, dicts and type attributes with vector types round-trip",
          "[io][json]") {
  Type vec = VectorType::get({TensorType::get(DataType::Float32, {-1, 3}),
                              VectorType::get({}),
                              VectorType::get({Int8Type::get(), VTensorType::get(DataType::Bool, {0})})});
  Attribute nested = ArrayAttribute::get(
      {ArrayAttribute::get({}), DictionaryAttribute::get({}),
       DictionaryAttribute::get({{"b", make_i64_array({std::numeric_limits<std::int64_t>::min()})},
                                 {"a", ArrayAttribute::get({TypeAttribute::get(vec)})}}),
       Int32Attribute::get(std::numeric_limits<std::int32_t>::min()),
       DataTypeAttribute::get(DataType::BFloat16), PlaceAttribute::get(Place::cuda(32767))});
  Program p;
  Builder b(p);
  auto c = b.create<ConstantOp>(nested, vec);
  Program q = load_program_json(save_program_json(p));
  Operation* loaded = *q.block().begin();
  // Uniqued: the loaded attribute and type are the very same storage.
  CHECK(loaded->attribute("value") == c->attribute("value"));
  CHECK(loaded->result_type(0) == vec);
  CHECK(round_trip_failure(p).empty());
}

TEST_CASE("ops with regions, block arguments and more than six results round-trip",
          "[io][json]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{2, 2});
  std::vector<Type> results(9, TensorType::get(DataType::Float32, {2, 2}));
  results[7] = Int64Type::get();
  auto outer = b.create<test::ScopeOp>(std::vector<Value>{x.result()}, results);
  Block& first = outer->region(0).emplace_block();
  BlockArgument a0 = first.add_argument(TensorType::get(DataType::Float32, {2, 2}));
  first.add_argument(VectorType::get({BoolType::get()}));
  Builder ib(first);
  auto sum = ib.create<AddOp>(a0, x.result());  // uses an argument and an outer value
  auto inner = ib.create<test::ScopeOp>(std::vector<Value>{sum.result(), a0}, std::vector<Type>{});
  Block& deepest = inner->region(0).emplace_block();
  Builder db(deepest);
  db.create<FetchOp>(db.create<ReluOp>(sum.result()).result(), "deep");
  outer->region(0).emplace_block();  // an empty second block
  b.create<FetchOp>(outer->result(8), "last");
  b.create<FetchOp>(outer->result(7), "seventh");
  p.verify();

  Program q = load_program_json(save_program_json(p));
  Operation* lo = *std::next(q.block().begin());
  REQUIRE(lo->num_results() == 9);
  CHECK(lo->result_type(7) == Type(Int64Type::get()));
  REQUIRE(lo->region(0).size() == 2);
  CHECK(lo->region(0).block(0).num_arguments() == 2);
  CHECK(lo->region(0).block(1).empty());
  CHECK(lo->result(8).use_count() == 1);
  CHECK(round_trip_failure(p).empty());
}

// ---- content hash ----

TEST_CASE("the content hash of a fixed program is a known constant", "[io][json]") {
  // Literal: the same in every run, process and build. If the format changes
  // on purpose, bump kProgramFormatVersion and update this constant.
  CHECK(content_hash(fixed_program()) == 0x3d8b7c288bce70f1ULL);
  CHECK(content_hash(fixed_program()) == xxh64(save_program_json(fixed_program())));
}

TEST_CASE("the content hash survives load, clone and re-save", "[io][json]") {
  Program p = fixed_program();
  std::uint64_t h = content_hash(p);
  CHECK(content_hash(load_program_json(save_program_json(p))) == h);
  CHECK(content_hash(load_program_json(save_program_json(p, 4))) == h);
  CHECK(content_hash(p.clone()) == h);
}

TEST_CASE("any change to a program changes its content hash", "[io][json]") {
  std::map<std::string, std::uint64_t> hashes;
  hashes["original"] = content_hash(fixed_program());
  auto variant = [&](const std::string& what, auto&& change) {
    Program p = fixed_program();
    change(p);
    p.verify();
    hashes[what] = content_hash(p);
  };
  auto op_at = [](Program& p, int i) { return *std::next(p.block().begin(), i); };
  variant("an attribute value", [&](Program& p) {
    op_at(p, 7)->set_attribute("seed", Int64Attribute::get(43));  // uniform_random
  });
  variant("a constant's value as i32", [&](Program& p) {
    op_at(p, 12)->set_attribute("value", Int32Attribute::get(42));
  });
  variant("the same value as i64", [&](Program& p) {
    op_at(p, 12)->set_attribute("value", Int64Attribute::get(42));
  });
  variant("a string attribute", [&](Program& p) {
    op_at(p, 15)->set_attribute("name", StrAttribute::get("out2"));  // the last fetch
  });
  variant("a float attribute by one ulp", [&](Program& p) {
    op_at(p, 8)->set_attribute("value", Float64Attribute::get(std::nextafter(0.5, 1.0)));  // full
  });
  variant("a dim", [&](Program& p) {
    p.set_parameter("linear_0.b_0", {TensorType::get(DataType::Float32, {1, 1}), false});
  });
  variant("a parameter type", [&](Program& p) {
    p.set_parameter("linear_0.b_0", {VTensorType::get(DataType::Float32, {1}), false});
  });
  variant("a parameter's mutability", [&](Program& p) {
    p.set_parameter("linear_0.b_0", {TensorType::get(DataType::Float32, {1}), true});
  });
  variant("a parameter name", [&](Program& p) {
    p.set_parameter("linear_0.b_1", p.parameter("linear_0.b_0"));
    p.erase_parameter("linear_0.b_0");
  });
  variant("an extra parameter", [&](Program& p) {
    p.set_parameter("z", {Int64Type::get()});
  });
  variant("op order", [&](Program& p) {
    op_at(p, 2)->move_before(op_at(p, 1));  // the two parameter ops
  });
  variant("an operand", [&](Program& p) {
    op_at(p, 15)->set_operand(0, op_at(p, 10)->result(0));
  });
  variant("an extra op", [&](Program& p) {
    Builder b(p);
    b.create<FetchOp>(op_at(p, 0)->result(0), "x");
  });
  variant("a block argument type", [&](Program& p) {
    Block& inner = op_at(p, 13)->region(0).front();
    inner.add_argument(BoolType::get());
  });
  variant("an empty block added to a region", [&](Program& p) {
    op_at(p, 13)->region(0).emplace_block();
  });
  std::set<std::uint64_t> distinct;
  for (const auto& [what, h] : hashes) distinct.insert(h);
  INFO("variants: " << hashes.size());
  CHECK(distinct.size() == hashes.size());
  CHECK(hashes.size() == 16);
}

// Not a test: regenerates the fuzz seed corpus from real saved programs.
//   KILN_CORPUS_DIR=tools/fuzz/corpus ./build/test/kiln_tests "[.corpus]"
TEST_CASE("write saved random programs as fuzz corpus seeds", "[.corpus]") {
  const char* dir = std::getenv("KILN_CORPUS_DIR");
  REQUIRE(dir != nullptr);
  test::RandomProgramOptions small;
  small.max_ops = 6;
  small.max_region_depth = 0;  // iotest.scope is not registered in the fuzz target
  small.max_attribute_depth = 2;
  int written = 0;
  for (std::uint64_t seed = 1; written < 16 && seed < 1000; ++seed) {
    std::string text = save_program_json(test::random_program(seed, small), seed % 3 == 0 ? 1 : -1);
    if (text.size() > 3000) continue;  // ./run fuzz uses -max_len=4096
    std::ofstream(std::string(dir) + "/random_" + std::to_string(seed) + ".json") << text;
    ++written;
  }
  CHECK(written == 16);
  std::ofstream(std::string(dir) + "/demo.json") << save_program_json(fixed_program(false));
}

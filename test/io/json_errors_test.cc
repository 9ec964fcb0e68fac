// Bad program JSON: every malformed, truncated or inconsistent document is a
// kiln::Error with a fitting kind and a message naming the culprit — never a
// crash, another exception type, or a half-built program.
#include <nlohmann/json.hpp>
#include <string>

#include "catch.hpp"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/io/json.h"
#include "random_program.h"

using namespace kiln;
using nlohmann::json;
using Catch::Matchers::Contains;

namespace {

// The kiln::Error that loading `text` throws (fails the test if it loads, or
// if anything but a kiln::Error escapes).
Error load_error(const std::string& text) {
  try {
    (void)load_program_json(text);
  } catch (const Error& e) {
    return e;
  }
  FAIL("loaded without an error: " << text.substr(0, 300));
  return Error(ErrorKind::Internal, "unreachable");
}
Error load_error(const json& j) { return load_error(j.dump()); }

// x: data[2,3]; y: data[3,4]; matmul(x, y); relu; fetch. Value ids 0..3.
json small_program() {
  Program p;
  p.set_parameter("w", {TensorType::get(DataType::Float32, {3, 4})});
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{2, 3});
  auto y = b.create<DataOp>("y", std::vector<std::int64_t>{3, 4});
  auto mm = b.create<MatmulOp>(x.result(), y.result());
  auto r = b.create<ReluOp>(mm.result());
  b.create<FetchOp>(r.result(), "out");
  return program_to_json(p);
}
json& op(json& j, int i) { return j["body"]["ops"][i]; }

}  // namespace

TEST_CASE("the small test program loads before it is broken", "[io][json]") {
  CHECK(load_program_json(small_program().dump()).num_ops() == 5);
}

TEST_CASE("malformed JSON text is an InvalidArgument error", "[io][json]") {
  for (std::string text : {"", " ", "{", "not json", "{\"format\":}", "[1,2,]", "{\"a\" 1}",
                           "\xff\xfe", "{\"format\":\"kiln.program\"}}", "nul", "1e999"}) {
    Error e = load_error(text);
    CHECK(e.kind() == ErrorKind::InvalidArgument);
    CHECK_THAT(e.message(), Contains("program JSON"));
  }
}

TEST_CASE("every prefix of a valid document is an error, never a crash", "[io][json]") {
  Program p = test::random_program(3);
  for (const std::string& text : {save_program_json(p), save_program_json(p, 1)}) {
    std::size_t errors = 0;
    for (std::size_t n = 0; n < text.size(); ++n) {
      try {
        (void)load_program_json(std::string_view(text).substr(0, n));
      } catch (const Error&) {
        ++errors;
      }
    }
    CHECK(errors == text.size());
    CHECK(load_program_json(text).to_string() == p.to_string());
  }
}

TEST_CASE("a document that is not a kiln program says so", "[io][json]") {
  CHECK_THAT(load_error(json::array()).message(), Contains("must be a JSON object"));
  json j = small_program();
  j["format"] = "onnx";
  CHECK_THAT(load_error(j).message(), Contains("\"format\" should be \"kiln.program\""));
  j.erase("format");
  CHECK_THAT(load_error(j).message(), Contains("\"format\""));
}

TEST_CASE("another format version is an Unimplemented error naming both versions", "[io][json]") {
  json j = small_program();
  j["version"] = 2;
  Error e = load_error(j);
  CHECK(e.kind() == ErrorKind::Unimplemented);
  CHECK_THAT(e.message(), Contains("version 2"));
  CHECK_THAT(e.message(), Contains("reads version 1"));
  for (json bad : {json("1"), json(1.0), json(nullptr)}) {
    j["version"] = bad;
    CHECK_THAT(load_error(j).message(), Contains("\"version\""));
  }
  j.erase("version");
  CHECK_THAT(load_error(j).message(), Contains("\"version\""));
}

TEST_CASE("a missing or ill-typed top-level field is named", "[io][json]") {
  for (const char* key : {"parameters", "body"}) {
    json j = small_program();
    j.erase(key);
    CHECK_THAT(load_error(j).message(), Contains(std::string("\"") + key + "\""));
  }
  json j = small_program();
  j["body"]["ops"] = json::object();
  CHECK_THAT(load_error(j).message(), Contains("\"ops\" must be an array"));
  j = small_program();
  j["body"] = json::array();
  CHECK_THAT(load_error(j).message(), Contains("block must be an object"));
}

TEST_CASE("an op that is not an object names its index", "[io][json]") {
  for (json bad : {json(1), json("kiln.relu"), json::array(), json(nullptr)}) {
    json j = small_program();
    op(j, 2) = bad;
    Error e = load_error(j);
    CHECK(e.kind() == ErrorKind::InvalidArgument);
    CHECK_THAT(e.message(), Contains("op #2 must be an object"));
  }
  json j = small_program();
  op(j, 1).erase("op");
  CHECK_THAT(load_error(j).message(), Contains("op #1 has no \"op\" field"));
  j = small_program();
  op(j, 1)["op"] = 7;
  CHECK_THAT(load_error(j).message(), Contains("\"op\" must be a string"));
  j = small_program();
  op(j, 1).erase("results");
  CHECK_THAT(load_error(j).message(), Contains("\"results\""));
}

TEST_CASE("an unknown op is a NotFound error naming it", "[io][json]") {
  json j = small_program();
  op(j, 3)["op"] = "kiln.no_such_op";
  Error e = load_error(j);
  CHECK(e.kind() == ErrorKind::NotFound);
  CHECK_THAT(e.message(), Contains("op #3 'kiln.no_such_op'"));
  CHECK_THAT(e.message(), Contains("not registered"));
}

TEST_CASE("an unknown type is a NotFound error naming it and where it was", "[io][json]") {
  json j = small_program();
  op(j, 3)["results"][0] = "f128";
  Error e = load_error(j);
  CHECK(e.kind() == ErrorKind::NotFound);
  CHECK_THAT(e.message(), Contains("unknown type 'f128'"));
  CHECK_THAT(e.message(), Contains("op #3 'kiln.relu'"));

  j = small_program();
  j["parameters"][0]["type"] = json{{"tensor", {{"dtype", "f8"}, {"dims", {3}}}}};
  e = load_error(j);
  CHECK_THAT(e.message(), Contains("parameter 'w'"));
  CHECK_THAT(e.message(), Contains("f8"));

  j = small_program();
  j["parameters"][0]["type"] = json{{"matrix", {{"dtype", "f32"}}}};
  CHECK_THAT(load_error(j).message(), Contains("unknown type 'matrix'"));
}

TEST_CASE("ill-formed types are InvalidArgument errors", "[io][json]") {
  auto with_result_type = [](json t) {
    json j = small_program();
    op(j, 3)["results"][0] = std::move(t);
    return load_error(j);
  };
  CHECK_THAT(with_result_type(json{{"f32", {}}}).message(), Contains("takes no parameters"));
  CHECK_THAT(with_result_type("tensor").message(), Contains("needs parameters"));
  CHECK_THAT(with_result_type(42).message(), Contains("a type is a name"));
  CHECK_THAT(with_result_type(json{{"tensor", {{"dtype", "f32"}, {"dims", {-2}}}}}).message(),
             Contains("dim must be >= -1"));
  CHECK_THAT(with_result_type(json{{"tensor", {{"dtype", "f32"}, {"dims", {1.5}}}}}).message(),
             Contains("dim must be an integer"));
  CHECK_THAT(with_result_type(json{{"tensor", {{"dtype", "vector"}, {"dims", {1}}}}}).message(),
             Contains("unknown dtype"));
  CHECK_THAT(with_result_type(json{{"vector", {{"elements", 3}}}}).message(),
             Contains("vector type needs"));
}

TEST_CASE("a dim beyond the range of int64 is an error, not a wrapped -1", "[io][json]") {
  json j = small_program();
  op(j, 0)["results"][0] =
      json{{"tensor", {{"dtype", "f32"}, {"dims", {std::uint64_t(18446744073709551615ULL), 3}}}}};
  Error e = load_error(j);
  CHECK(e.kind() == ErrorKind::OutOfRange);
  CHECK_THAT(e.message(), Contains("18446744073709551615"));
}

TEST_CASE("an attribute of the wrong kind names the op and the attribute", "[io][json]") {
  json j = small_program();
  op(j, 2)["attrs"]["transpose_x"] = json{{"i64", 1}};
  Error e = load_error(j);
  CHECK(e.kind() == ErrorKind::InvalidArgument);
  CHECK_THAT(e.message(), Contains("op #2 'kiln.matmul'"));
  CHECK_THAT(e.message(), Contains("attribute 'transpose_x' should be bool"));
  CHECK_THAT(e.message(), Contains("got i64"));

  j = small_program();
  op(j, 0)["attrs"]["shape"] = json{{"array", {{{"i64", 2}}, {{"f64", 3.0}}}}};
  CHECK_THAT(load_error(j).message(), Contains("attribute 'shape' should be array of i64"));
}

TEST_CASE("a missing attribute names the op and the attribute", "[io][json]") {
  json j = small_program();
  op(j, 2)["attrs"].erase("transpose_y");
  Error e = load_error(j);
  CHECK(e.kind() == ErrorKind::InvalidArgument);
  CHECK_THAT(e.message(), Contains("'kiln.matmul' is missing attribute 'transpose_y'"));

  j = small_program();
  op(j, 4).erase("attrs");
  CHECK_THAT(load_error(j).message(), Contains("'kiln.fetch' is missing attribute"));
}

TEST_CASE("an attribute value that does not fit its kind is an error", "[io][json]") {
  auto with_attr = [](json a) {
    json j = small_program();
    op(j, 4)["attrs"]["extra"] = std::move(a);
    return load_error(j);
  };
  CHECK(with_attr(json{{"i32", 2147483648LL}}).kind() == ErrorKind::OutOfRange);
  CHECK(with_attr(json{{"i32", -2147483649LL}}).kind() == ErrorKind::OutOfRange);
  CHECK(with_attr(json{{"i64", 9223372036854775808ULL}}).kind() == ErrorKind::OutOfRange);
  CHECK(with_attr(json{{"f32", 1e39}}).kind() == ErrorKind::OutOfRange);
  CHECK_THAT(with_attr(json{{"f64", "NaN"}}).message(), Contains("f64 attribute needs a number"));
  CHECK_THAT(with_attr(json{{"bool", 1}}).message(), Contains("bool attribute needs true/false"));
  CHECK_THAT(with_attr(json{{"str", 1}}).message(), Contains("str attribute needs a string"));
  CHECK_THAT(with_attr(json{{"dtype", "f128"}}).message(), Contains("dtype attribute needs"));
  CHECK_THAT(with_attr(json{{"place", "tpu:0"}}).message(), Contains("place attribute needs"));
  CHECK_THAT(with_attr(json{{"array", {1, 2}}}).message(), Contains("an attribute is {\"kind\""));
  CHECK_THAT(with_attr(json{{"dict", {1}}}).message(), Contains("dict attribute needs a JSON object"));
  CHECK_THAT(with_attr(json{{"complex", 1}}).message(), Contains("unknown attribute kind 'complex'"));
  CHECK_THAT(with_attr(json{{"i64", 1}, {"i32", 1}}).message(), Contains("an attribute is"));
  CHECK_THAT(with_attr(json::array()).message(), Contains("an attribute is"));
  // Every one names the op it belongs to.
  CHECK_THAT(with_attr(json{{"bool", 1}}).message(), Contains("op #4 'kiln.fetch'"));
}

TEST_CASE("a wrong operand count names the op and both counts", "[io][json]") {
  json j = small_program();
  op(j, 3)["operands"] = {2, 2};  // relu takes 1
  Error e = load_error(j);
  CHECK(e.kind() == ErrorKind::InvalidArgument);
  CHECK_THAT(e.message(), Contains("'kiln.relu' takes 1 operands, got 2"));
  j = small_program();
  op(j, 2)["operands"] = json::array();
  CHECK_THAT(load_error(j).message(), Contains("'kiln.matmul' takes 2 operands, got 0"));
}

TEST_CASE("a wrong result count or region count names the op", "[io][json]") {
  json j = small_program();
  op(j, 4)["results"] = {"f32"};  // fetch has none
  CHECK_THAT(load_error(j).message(), Contains("'kiln.fetch' has 0 results, got 1"));
  j = small_program();
  op(j, 3)["regions"] = {json::array()};
  CHECK_THAT(load_error(j).message(), Contains("'kiln.relu' has 0 regions, got 1"));
  j = small_program();
  op(j, 3)["regions"] = 1;
  CHECK_THAT(load_error(j).message(), Contains("\"regions\" must be an array"));
}

TEST_CASE("a dangling value reference is an error naming the operand", "[io][json]") {
  for (json id : {json(4), json(99), json(3), json(-1), json(1.0), json("0"), json(nullptr)}) {
    json j = small_program();
    op(j, 3)["operands"][0] = id;  // relu; 3 would be its own result
    Error e = load_error(j);
    CHECK(e.kind() == ErrorKind::InvalidArgument);
    CHECK_THAT(e.message(), Contains("op #3 'kiln.relu'"));
    CHECK_THAT(e.message(), Contains("operand #0"));
    CHECK_THAT(e.message(), Contains("dangling"));
  }
  json j = small_program();
  op(j, 2)["operands"] = 0;
  CHECK_THAT(load_error(j).message(), Contains("\"operands\" must be an array"));
}

TEST_CASE("a value defined inside a region cannot be used after it", "[io][json]") {
  Program p;
  Builder b(p);
  auto scope = b.create<test::ScopeOp>(std::vector<Value>{}, std::vector<Type>{});
  Block& inner = scope->region(0).emplace_block();
  inner.add_argument(Int64Type::get());
  b.create<FetchOp>(inner.argument(0), "leak");  // invalid on purpose
  json j = program_to_json(p);
  Error e = load_error(j);
  CHECK_THAT(e.message(), Contains("'kiln.fetch'"));
  CHECK_THAT(e.message(), Contains("defined inside a region of op 'iotest.scope'"));
}

TEST_CASE("a result type that contradicts InferMeta names the op and both types", "[io][json]") {
  json j = small_program();
  op(j, 2)["results"][0] = json{{"tensor", {{"dtype", "f32"}, {"dims", {2, 5}}}}};
  Error e = load_error(j);
  CHECK(e.kind() == ErrorKind::InvalidArgument);
  CHECK_THAT(e.message(), Contains("'kiln.matmul' result #0 has type tensor<2x5xf32>"));
  CHECK_THAT(e.message(), Contains("tensor<2x4xf32>"));

  j = small_program();  // operands InferMeta cannot take: 2x3 @ 2x3
  op(j, 2)["operands"] = {0, 0};
  CHECK_THAT(load_error(j).message(), Contains("contraction dims differ"));
}

TEST_CASE("deep nesting is an error, not a stack overflow", "[io][json]") {
  // Built as text: a deep nlohmann::json would itself recurse to dump or copy.
  constexpr int kDepth = 10000;
  auto repeat = [](const std::string& s, int n) {
    std::string out;
    out.reserve(s.size() * n);
    for (int i = 0; i < n; ++i) out += s;
    return out;
  };
  auto with_attr = [](const std::string& attr) {
    std::string text = small_program().dump();
    auto at = text.find("\"attrs\":{");
    return text.insert(at + 9, "\"deep\":" + attr + ",");
  };
  SECTION("10000 nested array attributes") {
    Error e = load_error(with_attr(repeat("{\"array\":[", kDepth) + repeat("]}", kDepth)));
    CHECK(e.kind() == ErrorKind::InvalidArgument);
    CHECK_THAT(e.message(), Contains("attribute nesting is deeper than"));
  }
  SECTION("10000 nested dict attributes") {
    Error e = load_error(with_attr(repeat("{\"dict\":{\"k\":", kDepth) + "{\"dict\":{}}" + repeat("}}", kDepth)));
    CHECK_THAT(e.message(), Contains("nesting is deeper than"));
  }
  SECTION("10000 nested plain JSON arrays as an attribute value") {
    Error e = load_error(with_attr("{\"array\":" + std::string(kDepth, '[') +
                                   std::string(kDepth, ']') + "}"));
    CHECK(e.kind() == ErrorKind::InvalidArgument);
  }
  SECTION("10000 nested vector types") {
    std::string type = repeat("{\"vector\":{\"elements\":[", kDepth) + repeat("]}}", kDepth);
    std::string text = "{\"format\":\"kiln.program\",\"version\":1,\"body\":{\"args\":[],\"ops\":[]},"
           "\"parameters\":[{\"name\":\"p\",\"type\":" + type + "}]}";
    CHECK_THAT(load_error(text).message(), Contains("type nesting is deeper than"));
  }
  SECTION("10000 nested regions") {
    std::string open = "[{\"op\":\"iotest.scope\",\"operands\":[],\"results\":[],"
                       "\"regions\":[[{\"args\":[],\"ops\":";
    std::string text = "{\"format\":\"kiln.program\",\"version\":1,\"parameters\":[],"
                       "\"body\":{\"args\":[],\"ops\":" + repeat(open, kDepth) + "[]" +
                       repeat("}]]}]", kDepth) + "}}";
    CHECK_THAT(load_error(text).message(), Contains("region nesting is deeper than"));
  }
  SECTION("a 100000-deep document") {
    CHECK(load_error(std::string(100000, '[') + std::string(100000, ']')).kind() ==
          ErrorKind::InvalidArgument);
    CHECK(load_error(std::string(100000, '[')).kind() == ErrorKind::InvalidArgument);
    CHECK(load_error(repeat("{\"a\":", 100000)).kind() == ErrorKind::InvalidArgument);
  }
}

TEST_CASE("moderate nesting within the limit still loads", "[io][json]") {
  Attribute a = ArrayAttribute::get({});
  for (int i = 0; i < 20; ++i) a = ArrayAttribute::get({a});
  Program p;
  Builder b(p);
  b.create<ConstantOp>(a, Type(BoolType::get()));
  CHECK(load_program_json(save_program_json(p)).to_string() == p.to_string());
}

TEST_CASE("a parameter listed twice is an AlreadyExists error naming it", "[io][json]") {
  json j = small_program();
  j["parameters"].push_back(j["parameters"][0]);
  Error e = load_error(j);
  CHECK(e.kind() == ErrorKind::AlreadyExists);
  CHECK_THAT(e.message(), Contains("parameter 'w' is listed twice"));
}

TEST_CASE("ill-formed parameters are named", "[io][json]") {
  auto with_param = [](json param) {
    json j = small_program();
    j["parameters"][0] = std::move(param);
    return load_error(j);
  };
  CHECK_THAT(with_param(3).message(), Contains("a parameter must be an object"));
  CHECK_THAT(with_param(json{{"type", "f32"}}).message(), Contains("has no \"name\""));
  CHECK_THAT(with_param(json{{"name", ""}, {"type", "f32"}}).message(), Contains("non-empty"));
  CHECK_THAT(with_param(json{{"name", "p"}}).message(), Contains("parameter 'p'"));
  CHECK_THAT(with_param(json{{"name", "p"}, {"type", "f32"}, {"mutable", 1}}).message(),
             Contains("parameter 'p' \"mutable\" must be a bool"));
  json j = small_program();
  j["parameters"] = json::object();
  CHECK_THAT(load_error(j).message(), Contains("\"parameters\" must be an array"));
}

TEST_CASE("an error inside a region names the nested op", "[io][json]") {
  Program p;
  Builder b(p);
  auto scope = b.create<test::ScopeOp>(std::vector<Value>{}, std::vector<Type>{});
  Block& inner = scope->region(0).emplace_block();
  inner.add_argument(Int64Type::get());
  Builder(inner).create<FetchOp>(inner.argument(0), "in");
  json j = program_to_json(p);
  j["body"]["ops"][0]["regions"][0][0]["ops"][0]["op"] = "kiln.nope";
  Error e = load_error(j);
  CHECK_THAT(e.message(), Contains("op #1 'kiln.nope'"));
  j = program_to_json(p);
  j["body"]["ops"][0]["regions"][0][0]["args"] = {"f99"};
  CHECK_THAT(load_error(j).message(), Contains("unknown type 'f99'"));
  j = program_to_json(p);
  j["body"]["ops"][0]["regions"][0] = 5;
  CHECK_THAT(load_error(j).message(), Contains("region #0 must be an array of blocks"));
}

TEST_CASE("a program holding a string that is not UTF-8 cannot be saved and says why",
          "[io][json]") {
  Program p;
  Builder b(p);
  b.create<ConstantOp>(StrAttribute::get("bad \xff byte"), Type(BoolType::get()));
  try {
    (void)save_program_json(p);
    FAIL("saved a non-UTF-8 string");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::InvalidArgument);
    CHECK_THAT(e.message(), Contains("UTF-8"));
  }
  CHECK_THROWS_AS(content_hash(p), Error);
}

TEST_CASE("a reshape whose element count overflows int64 is an OutOfRange error", "[io][json]") {
  // Found by ./run fuzz (UBSan: signed overflow in ReshapeOp::infer_meta).
  auto reshape = [](std::vector<std::int64_t> in, std::vector<std::int64_t> shape) {
    json dims = in, attr = json::array();
    for (auto d : in) attr.push_back({{"i64", d}});
    json rs = json::array();
    for (auto d : shape) rs.push_back({{"i64", d}});
    json t = {{"tensor", {{"dtype", "f32"}, {"dims", dims}}}};
    json j = {{"format", "kiln.program"}, {"version", 1}, {"parameters", json::array()},
              {"body", {{"args", json::array()}, {"ops", {
        {{"op", "kiln.data"}, {"operands", json::array()}, {"results", {t}},
         {"attrs", {{"name", {{"str", "x"}}}, {"shape", {{"array", attr}}},
                    {"dtype", {{"dtype", "f32"}}}, {"place", {{"place", "cpu"}}}}}},
        {{"op", "kiln.reshape"}, {"operands", {0}}, {"results", {t}},
         {"attrs", {{"shape", {{"array", rs}}}}}}}}}}};
    return load_error(j);
  };
  const std::int64_t big = std::int64_t(1) << 62;
  for (Error e : {reshape({big, 4}, {-1}), reshape({2, 3}, {big, 4}),
                  reshape({-1, 3}, {big, big, -1})}) {
    CHECK(e.kind() == ErrorKind::OutOfRange);
    CHECK_THAT(e.message(), Contains("'kiln.reshape'"));
    CHECK_THAT(e.message(), Contains("overflows"));
  }
}

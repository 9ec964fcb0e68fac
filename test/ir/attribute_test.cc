// Attributes: every builtin kind (uniqued, printed), the sorted dictionary
// with binary search, a user-defined attribute, and reflected attribute
// structs.
#include "kiln/ir/attribute.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "catch.hpp"
#include "ir_test_util.h"
#include "kiln/io/json.h"
#include "kiln/ir/attribute_struct.h"
#include "kiln/ir/builtin_attributes.h"

using namespace kiln;

namespace {

// A user's attribute: an inclusive integer range [lo, hi].
struct MyRangeAttributeStorage : AttributeStorage {
  using KeyTy = std::pair<std::int64_t, std::int64_t>;
  explicit MyRangeAttributeStorage(const KeyTy& k) : lo(k.first), hi(k.second) {}
  bool operator==(const KeyTy& k) const { return lo == k.first && hi == k.second; }
  static std::size_t hash_key(const KeyTy& k) {
    return hash_combine(std::hash<std::int64_t>()(k.first), std::hash<std::int64_t>()(k.second));
  }
  std::int64_t lo, hi;
};

class MyRangeAttribute : public AttrBase<MyRangeAttribute, MyRangeAttributeStorage> {
 public:
  using AttrBase::AttrBase;
  static constexpr std::string_view name = "mylib.range";
  static MyRangeAttribute get(std::int64_t lo, std::int64_t hi) { return get_uniqued(MyRangeAttributeStorage::KeyTy{lo, hi}); }
  std::int64_t lo() const { return storage()->lo; }
  std::int64_t hi() const { return storage()->hi; }
  void print(std::ostream& os) const { os << "range<" << lo() << ".." << hi() << '>'; }
  void save(nlohmann::json& j) const { j = {lo(), hi()}; }
  static MyRangeAttribute load(const nlohmann::json& j) {
    return get(j.at(0).get<std::int64_t>(), j.at(1).get<std::int64_t>());
  }
};

struct MyConvAttrs {
  KILN_REFLECT(MyConvAttrs, (std::vector<std::int64_t>, strides), (bool, bias),
                           (std::string, padding), (float, alpha), (DataType, dtype),
                           (Place, place), (std::int32_t, groups));
};

}  // namespace

TEST_CASE("scalar attributes are uniqued by value and read back", "[ir][attribute]") {
  CHECK(BoolAttribute::get(true) == BoolAttribute::get(true));
  CHECK(BoolAttribute::get(true) != BoolAttribute::get(false));
  CHECK(BoolAttribute::get(false).value() == false);
  CHECK(Int32Attribute::get(7) == Int32Attribute::get(7));
  CHECK(Int32Attribute::get(7).value() == 7);
  CHECK(Int64Attribute::get(-3).value() == -3);
  CHECK(Float32Attribute::get(1.5f).value() == 1.5f);
  CHECK(Float64Attribute::get(0.25).value() == 0.25);
  CHECK(StrAttribute::get("relu").value() == "relu");
  CHECK(StrAttribute::get("relu") == StrAttribute::get(std::string("re") + "lu"));
  // Same number, different kinds: different attributes.
  CHECK(Attribute(Int32Attribute::get(7)) != Attribute(Int64Attribute::get(7)));
  CHECK(Attribute(Float32Attribute::get(1.0f)) != Attribute(Float64Attribute::get(1.0)));
  CHECK(Int64Attribute::get(7).storage() == Int64Attribute::get(7).storage());
}

TEST_CASE("float attributes unique by bits: NaN equals NaN, 0.0 differs from -0.0",
          "[ir][attribute]") {
  double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(Float64Attribute::get(nan) == Float64Attribute::get(nan));
  CHECK(std::isnan(Float64Attribute::get(nan).value()));
  CHECK(Float64Attribute::get(0.0) != Float64Attribute::get(-0.0));
  CHECK(Float32Attribute::get(std::numeric_limits<float>::quiet_NaN()) ==
        Float32Attribute::get(std::numeric_limits<float>::quiet_NaN()));
}

TEST_CASE("attributes print in the text form", "[ir][attribute]") {
  CHECK(BoolAttribute::get(true).to_string() == "true");
  CHECK(BoolAttribute::get(false).to_string() == "false");
  CHECK(Int32Attribute::get(3).to_string() == "3 : i32");
  CHECK(Int64Attribute::get(-42).to_string() == "-42");
  CHECK(Float32Attribute::get(1.5f).to_string() == "1.5 : f32");
  CHECK(Float64Attribute::get(2.0).to_string() == "2.0");
  CHECK(Float64Attribute::get(0.1).to_string() == "0.1");
  CHECK(Float64Attribute::get(-std::numeric_limits<double>::infinity()).to_string() == "-inf");
  CHECK(StrAttribute::get("a \"b\"\n").to_string() == "\"a \\\"b\\\"\\n\"");
  CHECK(TypeAttribute::get(kiln_test::t23()).to_string() == "tensor<2x3xf32>");
  CHECK(DataTypeAttribute::get(DataType::BFloat16).to_string() == "dtype<bf16>");
  CHECK(PlaceAttribute::get(Place::cpu()).to_string() == "place<cpu>");
  CHECK(PlaceAttribute::get(Place::cuda(1)).to_string() == "place<cuda:1>");
  CHECK(make_i64_array({1, -1, 3}).to_string() == "[1, -1, 3]");
  CHECK(ArrayAttribute::get({}).to_string() == "[]");
  CHECK(Attribute().to_string() == "<<null attribute>>");
}

TEST_CASE("type, dtype and place attributes hold their values", "[ir][attribute]") {
  auto ta = TypeAttribute::get(kiln_test::t23());
  CHECK(ta.value() == kiln_test::t23());
  CHECK(ta == TypeAttribute::get(TensorType::get(DataType::Float32, {2, 3})));
  CHECK(ta != TypeAttribute::get(VTensorType::get(DataType::Float32, {2, 3})));
  auto da = DataTypeAttribute::get(DataType::Int64);
  CHECK(da.value() == DataType::Int64);
  CHECK(da != DataTypeAttribute::get(DataType::Int32));
  auto pa = PlaceAttribute::get(Place::host_stream(2));
  CHECK(pa.value() == Place::host_stream(2));
  CHECK(pa == PlaceAttribute::get(Place::host_stream(2)));
  CHECK(pa != PlaceAttribute::get(Place::host_stream(3)));
  CHECK(pa != PlaceAttribute::get(Place::cuda(2)));
}

TEST_CASE("array attributes are ordered, may mix kinds, and unique by content",
          "[ir][attribute]") {
  auto a = ArrayAttribute::get({Int64Attribute::get(1), StrAttribute::get("x")});
  CHECK(a == ArrayAttribute::get({Int64Attribute::get(1), StrAttribute::get("x")}));
  CHECK(a != ArrayAttribute::get({StrAttribute::get("x"), Int64Attribute::get(1)}));
  CHECK(a.size() == 2);
  CHECK(a[1] == StrAttribute::get("x"));
  CHECK(a.to_string() == "[1, \"x\"]");
  auto nested = ArrayAttribute::get({a, make_i64_array({})});
  CHECK(nested.to_string() == "[[1, \"x\"], []]");
  CHECK(to_i64_vector(make_i64_array({4, 5, -1})) == std::vector<std::int64_t>{4, 5, -1});
}

TEST_CASE("a dictionary sorts its entries by name and finds them by binary search",
          "[ir][attribute]") {
  auto d = DictionaryAttribute::get({{"zeta", Int64Attribute::get(1)},
                                     {"alpha", BoolAttribute::get(true)},
                                     {"mid", StrAttribute::get("m")},
                                     {"beta", Float64Attribute::get(0.5)}});
  std::vector<std::string> keys;
  for (const auto& [k, v] : d) keys.push_back(k);
  CHECK(keys == std::vector<std::string>{"alpha", "beta", "mid", "zeta"});
  CHECK(d.size() == 4);
  CHECK(d.find("alpha") == BoolAttribute::get(true));
  CHECK(d.find("beta") == Float64Attribute::get(0.5));
  CHECK(d.find("mid") == StrAttribute::get("m"));
  CHECK(d.find("zeta") == Int64Attribute::get(1));
  CHECK_FALSE(d.find("a"));
  CHECK_FALSE(d.find("zz"));
  CHECK_FALSE(d.find(""));
  CHECK(d.contains("mid"));
  CHECK_FALSE(d.contains("middle"));
  CHECK(d.to_string() == "{alpha = true, beta = 0.5, mid = \"m\", zeta = 1}");
}

TEST_CASE("dictionaries with the same entries in any order are the same attribute",
          "[ir][attribute]") {
  auto a = DictionaryAttribute::get({{"x", Int64Attribute::get(1)}, {"y", Int64Attribute::get(2)}});
  auto b = DictionaryAttribute::get({{"y", Int64Attribute::get(2)}, {"x", Int64Attribute::get(1)}});
  CHECK(a == b);
  CHECK(a != DictionaryAttribute::get({{"x", Int64Attribute::get(1)}, {"y", Int64Attribute::get(3)}}));
  CHECK(DictionaryAttribute::get() == DictionaryAttribute::get({}));
  CHECK(DictionaryAttribute::get().empty());
  CHECK(DictionaryAttribute::get().to_string() == "{}");
}

TEST_CASE("a dictionary with a repeated name or a null value is an InvalidArgument error",
          "[ir][attribute]") {
  KILN_CHECK_ERROR(DictionaryAttribute::get({{"k", Int64Attribute::get(1)},
                                             {"j", Int64Attribute::get(0)},
                                             {"k", Int64Attribute::get(2)}}),
                   InvalidArgument, {"'k'", "twice"});
  KILN_CHECK_ERROR(DictionaryAttribute::get({{"k", Attribute()}}), InvalidArgument, {"'k'"});
}

TEST_CASE("with adds or replaces an entry and without removes one, leaving the original",
          "[ir][attribute]") {
  auto d = DictionaryAttribute::get({{"b", Int64Attribute::get(1)}, {"d", Int64Attribute::get(2)}});
  auto added = d.with("c", StrAttribute::get("new"));
  CHECK(added.to_string() == "{b = 1, c = \"new\", d = 2}");
  auto first = d.with("a", BoolAttribute::get(false));
  CHECK(first.value().front().first == "a");
  auto last = d.with("e", BoolAttribute::get(false));
  CHECK(last.value().back().first == "e");
  auto replaced = d.with("b", Int64Attribute::get(9));
  CHECK(replaced.find("b") == Int64Attribute::get(9));
  CHECK(replaced.size() == 2);
  auto removed = added.without("b");
  CHECK(removed.to_string() == "{c = \"new\", d = 2}");
  CHECK(d.without("nope") == d);
  // Results are uniqued like any dictionary, and d itself is unchanged.
  CHECK(added == DictionaryAttribute::get({{"d", Int64Attribute::get(2)},
                                           {"c", StrAttribute::get("new")},
                                           {"b", Int64Attribute::get(1)}}));
  CHECK(d.to_string() == "{b = 1, d = 2}");
}

TEST_CASE("isa and dyn_cast tell attribute kinds apart", "[ir][attribute]") {
  Attribute a = Int64Attribute::get(5);
  CHECK(a.isa<Int64Attribute>());
  CHECK_FALSE(a.isa<Int32Attribute>());
  CHECK(a.dyn_cast<Int64Attribute>().value() == 5);
  CHECK_FALSE(a.dyn_cast<StrAttribute>());
  CHECK_FALSE(Attribute().isa<Int64Attribute>());
  CHECK(a.kind_name() == "i64");
  CHECK(a.dialect()->name() == "builtin");
}

TEST_CASE("a user-defined attribute is uniqued, printed and nested in builtin ones",
          "[ir][attribute]") {
  auto r = MyRangeAttribute::get(0, 10);
  CHECK(r == MyRangeAttribute::get(0, 10));
  CHECK(r != MyRangeAttribute::get(0, 11));
  CHECK(r.lo() == 0);
  CHECK(r.hi() == 10);
  CHECK(r.to_string() == "range<0..10>");
  Attribute a = r;
  CHECK(a.isa<MyRangeAttribute>());
  CHECK(a.dialect()->name() == "mylib");
  auto d = DictionaryAttribute::get({{"r", r}, {"n", Int64Attribute::get(1)}});
  CHECK(d.to_string() == "{n = 1, r = range<0..10>}");
  CHECK(d.find("r").cast<MyRangeAttribute>().hi() == 10);
  CHECK(attribute_from_json(attribute_to_json(r)) == a);
}

TEST_CASE("a reflected attribute struct converts to named attributes and back",
          "[ir][attribute]") {
  MyConvAttrs in{{2, 2}, true, "same", 0.5f, DataType::Float16, Place::cuda(0), 4};
  auto named = to_named_attributes(in);
  REQUIRE(named.size() == 7);
  CHECK(named[0].first == "strides");  // declaration order
  CHECK(named[0].second == make_i64_array({2, 2}));
  CHECK(named[3].second == Float32Attribute::get(0.5f));
  auto dict = DictionaryAttribute::get(named);
  MyConvAttrs out = from_attributes<MyConvAttrs>(dict, "test.conv");
  CHECK(out.strides == in.strides);
  CHECK(out.bias == true);
  CHECK(out.padding == "same");
  CHECK(out.alpha == 0.5f);
  CHECK(out.dtype == DataType::Float16);
  CHECK(out.place == Place::cuda(0));
  CHECK(out.groups == 4);
  auto schema = attribute_schema<MyConvAttrs>();
  CHECK(schema == std::vector<std::pair<std::string, std::string>>{
                      {"strides", "array<i64>"}, {"bias", "bool"},     {"padding", "str"},
                      {"alpha", "f32"},          {"dtype", "dtype"},  {"place", "place"},
                      {"groups", "i32"}});
}

TEST_CASE("a missing or ill-kinded reflected attribute names the op and the attribute",
          "[ir][attribute]") {
  auto good = DictionaryAttribute::get(to_named_attributes(
      MyConvAttrs{{1}, false, "valid", 1.0f, DataType::Float32, Place::cpu(), 1}));
  KILN_CHECK_ERROR(from_attributes<MyConvAttrs>(good.without("padding"), "test.conv"),
                   InvalidArgument, {"'test.conv'", "missing", "'padding'"});
  KILN_CHECK_ERROR(from_attributes<MyConvAttrs>(good.with("bias", Int32Attribute::get(1)), "test.conv"),
                   InvalidArgument, {"'test.conv'", "'bias'", "bool", "i32"});
  KILN_CHECK_ERROR(from_attributes<MyConvAttrs>(good.with("alpha", Float64Attribute::get(1.0)),
                                              "test.conv"),
                   InvalidArgument, {"'alpha'", "f32"});
  // An array of i64 means every element is an i64.
  KILN_CHECK_ERROR(
      from_attributes<MyConvAttrs>(
          good.with("strides", ArrayAttribute::get({Int64Attribute::get(1), Int32Attribute::get(2)})),
          "test.conv"),
      InvalidArgument, {"'strides'", "array of i64"});
}

TEST_CASE("to_i64_vector of an array that is not all i64 is an InvalidArgument error",
          "[ir][attribute]") {
  KILN_CHECK_ERROR(to_i64_vector(ArrayAttribute::get({Int64Attribute::get(1), Int32Attribute::get(2)})),
                   InvalidArgument, {"i64", "i32"});
}

TEST_CASE("with a null value is an InvalidArgument error naming the key", "[ir][attribute]") {
  auto d = DictionaryAttribute::get({{"a", Int64Attribute::get(1)}});
  KILN_CHECK_ERROR(d.with("b", Attribute()), InvalidArgument, {"'b'"});
  KILN_CHECK_ERROR(d.with("a", Attribute()), InvalidArgument, {"'a'"});
}

// Types: builtin singletons, tensor / vtensor / vector uniquing and printing,
// and a user-defined parametric type with its own storage.
#include "kiln/ir/type.h"

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <unordered_set>

#include "catch.hpp"
#include "ir_test_util.h"
#include "kiln/io/json.h"
#include "kiln/ir/builtin_types.h"

using namespace kiln;

namespace {

// A user's parametric type: mylib.pair<name, width>, e.g. a quantized element
// type. Its storage defines KeyTy, operator== and hash_key, as IR types must.
struct MyPairTypeStorage : TypeStorage {
  using KeyTy = std::pair<std::string, int>;
  explicit MyPairTypeStorage(const KeyTy& k) : label(k.first), width(k.second) {}
  bool operator==(const KeyTy& k) const { return label == k.first && width == k.second; }
  static std::size_t hash_key(const KeyTy& k) {
    return hash_combine(std::hash<std::string>()(k.first), std::hash<int>()(k.second));
  }
  std::string label;
  int width;
};

class MyPairType : public TypeBase<MyPairType, MyPairTypeStorage> {
 public:
  using TypeBase::TypeBase;
  static constexpr std::string_view name = "mylib.pair";
  static MyPairType get(std::string label, int width) {
    return get_uniqued(MyPairTypeStorage::KeyTy{std::move(label), width});
  }
  const std::string& label() const { return storage()->label; }
  int width() const { return storage()->width; }
  void print(std::ostream& os) const { os << "mylib.pair<" << label() << ", " << width() << '>'; }
  void save(nlohmann::json& j) const {
    j["label"] = label();
    j["width"] = width();
  }
  static MyPairType load(const nlohmann::json& j) {
    return get(j.at("label").get<std::string>(), j.at("width").get<int>());
  }
};

// A user's singleton type (no parameters).
class MyTokenType : public TypeBase<MyTokenType> {
 public:
  using TypeBase::TypeBase;
  static constexpr std::string_view name = "mylib.token";
  static MyTokenType get() { return get_singleton(); }
};

}  // namespace

TEST_CASE("builtin scalar types are singletons: get() twice is the same pointer",
          "[ir][type]") {
  CHECK(Float32Type::get().storage() == Float32Type::get().storage());
  CHECK(Float16Type::get() == Float16Type::get());
  CHECK(BFloat16Type::get() == BFloat16Type::get());
  CHECK(Float64Type::get() == Float64Type::get());
  CHECK(Int8Type::get() == Int8Type::get());
  CHECK(Int32Type::get() == Int32Type::get());
  CHECK(Int64Type::get() == Int64Type::get());
  CHECK(BoolType::get() == BoolType::get());
  // ...and all distinct from each other.
  std::unordered_set<Type> all{Float16Type::get(), BFloat16Type::get(), Float32Type::get(),
                               Float64Type::get(), Int8Type::get(),     Int32Type::get(),
                               Int64Type::get(),   BoolType::get()};
  CHECK(all.size() == 8);
}

TEST_CASE("scalar types print their short names", "[ir][type]") {
  CHECK(Float16Type::get().to_string() == "f16");
  CHECK(BFloat16Type::get().to_string() == "bf16");
  CHECK(Float32Type::get().to_string() == "f32");
  CHECK(Float64Type::get().to_string() == "f64");
  CHECK(Int8Type::get().to_string() == "i8");
  CHECK(Int32Type::get().to_string() == "i32");
  CHECK(Int64Type::get().to_string() == "i64");
  CHECK(BoolType::get().to_string() == "bool");
  CHECK(Type().to_string() == "<<null type>>");
}

TEST_CASE("isa, dyn_cast and cast tell type kinds apart", "[ir][type]") {
  Type t = Float32Type::get();
  CHECK(t.isa<Float32Type>());
  CHECK_FALSE(t.isa<Float64Type>());
  CHECK_FALSE(t.isa<TensorType>());
  CHECK(t.dyn_cast<Float32Type>() == t);
  CHECK_FALSE(t.dyn_cast<TensorType>());
  CHECK_FALSE(Type().isa<Float32Type>());
  CHECK(t.type_id() == TypeId::get<Float32Type>());
  CHECK(t.kind_name() == "f32");
}

TEST_CASE("scalar_type and to_data_type map between DataType and types", "[ir][type]") {
  for (DataType dt : {DataType::Float16, DataType::BFloat16, DataType::Float32, DataType::Float64,
                      DataType::Int8, DataType::Int32, DataType::Int64, DataType::Bool}) {
    Type t = scalar_type(dt);
    CHECK(t.to_string() == to_string(dt));
    CHECK(to_data_type(t) == dt);
  }
  CHECK_FALSE(to_data_type(kiln_test::t23()).has_value());
  CHECK_FALSE(to_data_type(Type()).has_value());
  KILN_CHECK_ERROR(scalar_type(DataType::Undefined), InvalidArgument);
}

TEST_CASE("tensor<2x3xf32> asked for twice is the same type", "[ir][type]") {
  auto a = TensorType::get(DataType::Float32, {2, 3});
  auto b = TensorType::get(Float32Type::get(), {2, 3});
  CHECK(a == b);
  CHECK(a.storage() == b.storage());
  CHECK(a != TensorType::get(DataType::Float32, {3, 2}));
  CHECK(a != TensorType::get(DataType::Float64, {2, 3}));
  CHECK(a != TensorType::get(DataType::Float32, {2, 3, 1}));
  CHECK(a.element_type() == Float32Type::get());
  CHECK(a.data_type() == DataType::Float32);
  CHECK(a.dims() == std::vector<std::int64_t>{2, 3});
  CHECK(a.rank() == 2);
  CHECK(a.numel() == 6);
  CHECK(a.has_static_shape());
  CHECK(a.to_string() == "tensor<2x3xf32>");
}

TEST_CASE("vtensor and tensor with the same dims are different types", "[ir][type]") {
  Type t = TensorType::get(DataType::Float32, {2, 3});
  Type v = VTensorType::get(DataType::Float32, {2, 3});
  CHECK(t != v);
  CHECK(v == VTensorType::get(DataType::Float32, {2, 3}));
  CHECK(v.isa<VTensorType>());
  CHECK_FALSE(v.isa<TensorType>());
  CHECK(is_shaped(v));
  CHECK(is_shaped(t));
  CHECK_FALSE(is_shaped(Float32Type::get()));
  CHECK(v.to_string() == "vtensor<2x3xf32>");
  CHECK(shaped_dims(v) == std::vector<std::int64_t>{2, 3});
  CHECK(shaped_data_type(v) == DataType::Float32);
  KILN_CHECK_ERROR(shaped_dims(Float32Type::get()), InvalidArgument, {"f32"});
  KILN_CHECK_ERROR(shaped_data_type(Int64Type::get()), InvalidArgument, {"i64"});
}

TEST_CASE("unknown dims are -1: numel is -1 and the shape is not static", "[ir][type]") {
  auto t = TensorType::get(DataType::Int64, {-1, 16});
  CHECK(t.to_string() == "tensor<-1x16xi64>");
  CHECK(t.numel() == -1);
  CHECK_FALSE(t.has_static_shape());
  CHECK(t == TensorType::get(DataType::Int64, {-1, 16}));
  CHECK(t != TensorType::get(DataType::Int64, {1, 16}));
}

TEST_CASE("a rank-0 tensor is a scalar tensor with one element", "[ir][type]") {
  auto t = TensorType::get(DataType::Float64, {});
  CHECK(t.rank() == 0);
  CHECK(t.numel() == 1);
  CHECK(t.to_string() == "tensor<f64>");
  CHECK(t != Float64Type::get());
}

TEST_CASE("a tensor type rejects dims below -1 and non-scalar element types", "[ir][type]") {
  KILN_CHECK_ERROR(TensorType::get(DataType::Float32, {2, -2}), InvalidArgument, {"-2"});
  KILN_CHECK_ERROR(VTensorType::get(DataType::Float32, {-5}), InvalidArgument, {"vtensor"});
  KILN_CHECK_ERROR(TensorType::get(kiln_test::t23(), {2}), InvalidArgument,
                   {"tensor<2x3xf32>"});
  KILN_CHECK_ERROR(TensorType::get(Type(), {2}), InvalidArgument);
}

TEST_CASE("vector types nest and unique by their elements", "[ir][type]") {
  Type f = Float32Type::get();
  Type t = kiln_test::t23();
  auto inner = VectorType::get({f, t});
  auto outer = VectorType::get({inner, Int64Type::get()});
  CHECK(inner == VectorType::get({Float32Type::get(), TensorType::get(DataType::Float32, {2, 3})}));
  CHECK(outer == VectorType::get({VectorType::get({f, t}), Int64Type::get()}));
  CHECK(inner != VectorType::get({t, f}));  // order matters
  CHECK(VectorType::get({}) == VectorType::get({}));
  CHECK(VectorType::get({}) != inner);
  CHECK(outer.size() == 2);
  CHECK(outer[0] == inner);
  CHECK(outer[0].isa<VectorType>());
  CHECK(outer[0].cast<VectorType>()[1] == t);
  CHECK(outer.to_string() == "vector<vector<f32, tensor<2x3xf32>>, i64>");
  CHECK(VectorType::get({}).to_string() == "vector<>");
}

TEST_CASE("a user-defined parametric type is uniqued by its key and printed by its class",
          "[ir][type]") {
  MyPairType a = MyPairType::get("q", 8);
  MyPairType b = MyPairType::get("q", 8);
  CHECK(a == b);
  CHECK(a.storage() == b.storage());
  CHECK(a != MyPairType::get("q", 4));
  CHECK(a != MyPairType::get("r", 8));
  CHECK(a.label() == "q");
  CHECK(a.width() == 8);
  CHECK(a.to_string() == "mylib.pair<q, 8>");
  CHECK(a.kind_name() == "mylib.pair");
  Type t = a;
  CHECK(t.isa<MyPairType>());
  CHECK_FALSE(t.isa<TensorType>());
  CHECK(t.dyn_cast<MyPairType>().width() == 8);
  // It composes with builtin types.
  CHECK(VectorType::get({a, Float32Type::get()}).to_string() == "vector<mylib.pair<q, 8>, f32>");
  // It belongs to the dialect named by its prefix.
  REQUIRE(t.dialect() != nullptr);
  CHECK(t.dialect()->name() == "mylib");
  CHECK(IrContext::instance()->find_type_kind("mylib.pair") != nullptr);
}

TEST_CASE("a user-defined type saves and loads through its own hooks", "[ir][type]") {
  MyPairType a = MyPairType::get("scale", 16);
  nlohmann::json j = type_to_json(a);
  Type back = type_from_json(j);
  CHECK(back == a);
  Type vec = VectorType::get({a, MyTokenType::get()});
  CHECK(type_from_json(type_to_json(vec)) == vec);
}

TEST_CASE("a user-defined singleton type is one pointer and prints its name", "[ir][type]") {
  CHECK(MyTokenType::get() == MyTokenType::get());
  CHECK(MyTokenType::get().to_string() == "mylib.token");
  CHECK(Type(MyTokenType::get()) != Type(MyPairType::get("token", 0)));
  CHECK(MyTokenType::get().dialect()->name() == "mylib");
}

TEST_CASE("builtin types belong to the builtin dialect", "[ir][type]") {
  for (Type t : {Type(Float32Type::get()), Type(kiln_test::t23()),
                 Type(VTensorType::get(DataType::Int8, {1})), Type(VectorType::get({}))}) {
    REQUIRE(t.dialect() != nullptr);
    CHECK(t.dialect()->name() == "builtin");
    CHECK(t.dialect() == IrContext::instance()->dialect("builtin"));
  }
}

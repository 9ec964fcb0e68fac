// IrContext: the dialect registry (by name and by TypeId), the op registry
// (unknown names, name clashes), type/attribute kinds, and thread-safe
// uniquing.
#include "kiln/ir/ir_context.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <unordered_set>
#include <vector>

#include "catch.hpp"
#include "ir_test_util.h"

using namespace kiln;

namespace {

// A different class claiming an existing op's name.
struct MyFakeMatmulOp : Op<MyFakeMatmulOp> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.matmul";
};

// A user dialect whose class is registered after a type already named it.
class MyGeoDialect : public Dialect {
 public:
  MyGeoDialect() : Dialect("geo", TypeId::get<MyGeoDialect>()) {}
};

class MyGeoPointType : public TypeBase<MyGeoPointType> {
 public:
  using TypeBase::TypeBase;
  static constexpr std::string_view name = "geo.point";
  static MyGeoPointType get() { return get_singleton(); }
};

struct MyGeoOp : Op<MyGeoOp> {
  using Op::Op;
  static constexpr std::string_view name = "geo.op";
};

// A second dialect class under the name "kiln".
class MyOtherKilnDialect : public Dialect {
 public:
  MyOtherKilnDialect() : Dialect("kiln", TypeId::get<MyOtherKilnDialect>()) {}
};

// A second type class under the name "f32".
class MyOtherF32Type : public TypeBase<MyOtherF32Type> {
 public:
  using TypeBase::TypeBase;
  static constexpr std::string_view name = "f32";
  static MyOtherF32Type get() { return get_singleton(); }
};

}  // namespace

TEST_CASE("the builtin and kiln dialects are found by name and by TypeId", "[ir][context]") {
  IrContext* ctx = IrContext::instance();
  Dialect* builtin = ctx->dialect("builtin");
  Dialect* kiln = ctx->dialect("kiln");
  REQUIRE(builtin);
  REQUIRE(kiln);
  CHECK(builtin->name() == "builtin");
  CHECK(kiln->name() == "kiln");
  CHECK(ctx->dialect(TypeId::get<BuiltinDialect>()) == builtin);
  CHECK(ctx->dialect(TypeId::get<KilnDialect>()) == kiln);
  CHECK(builtin->id() == TypeId::get<BuiltinDialect>());
  CHECK(ctx->get_or_register_dialect<KilnDialect>() == kiln);
  CHECK(ctx->dialect("nope") == nullptr);
  CHECK(ctx->dialect(TypeId::get<int>()) == nullptr);
  auto all = ctx->dialects();
  CHECK(std::count(all.begin(), all.end(), builtin) == 1);
  CHECK(std::count(all.begin(), all.end(), kiln) == 1);
}

TEST_CASE("types, attributes and ops report the dialect that owns them", "[ir][context]") {
  IrContext* ctx = IrContext::instance();
  CHECK(Type(Float32Type::get()).dialect() == ctx->dialect("builtin"));
  CHECK(Attribute(StrAttribute::get("s")).dialect() == ctx->dialect("builtin"));
  CHECK(ctx->op_info<MatmulOp>().dialect() == ctx->dialect("kiln"));
  CHECK(ctx->op_info<ParameterOp>().dialect() == ctx->dialect("builtin"));
}

TEST_CASE("registered ops are found by name and by TypeId", "[ir][context]") {
  IrContext* ctx = IrContext::instance();
  for (std::string_view n : {"builtin.parameter", "builtin.set_parameter", "builtin.constant",
                             "kiln.data", "kiln.fetch", "kiln.add", "kiln.matmul", "kiln.relu",
                             "kiln.relu_", "kiln.full", "kiln.reshape", "kiln.uniform_random"}) {
    INFO(n);
    OpInfo info = ctx->find_op(n);
    REQUIRE(info);
    CHECK(info.name() == n);
    CHECK(ctx->find_op(info.id()) == info);
  }
  CHECK(ctx->op_info("kiln.add") == ctx->op_info<AddOp>());
  auto all = ctx->registered_ops();
  CHECK(std::count(all.begin(), all.end(), ctx->op_info<ReluOp>()) == 1);
}

TEST_CASE("an unregistered op name is a NotFound error naming it", "[ir][context]") {
  IrContext* ctx = IrContext::instance();
  CHECK_FALSE(ctx->find_op("nope.op"));
  CHECK_FALSE(ctx->find_op(TypeId::get<double>()));
  KILN_CHECK_ERROR(ctx->op_info("nope.op"), NotFound, {"'nope.op'", "not registered"});
}

TEST_CASE("registering another class under an existing op name is AlreadyExists",
          "[ir][context]") {
  IrContext* ctx = IrContext::instance();
  KILN_CHECK_ERROR(ctx->register_op<MyFakeMatmulOp>(), AlreadyExists, {"'kiln.matmul'"});
  KILN_CHECK_ERROR(ctx->op_info<MyFakeMatmulOp>(), AlreadyExists, {"'kiln.matmul'"});
  // The real op is still the one registered.
  CHECK(ctx->op_info("kiln.matmul").id() == TypeId::get<MatmulOp>());
  CHECK_FALSE(ctx->find_op(TypeId::get<MyFakeMatmulOp>()));
  // Registering the same class again is harmless and gives the same OpInfo.
  CHECK(ctx->register_op<MatmulOp>() == ctx->op_info<MatmulOp>());
}

TEST_CASE("registering another class under an existing dialect or type name is AlreadyExists",
          "[ir][context]") {
  IrContext* ctx = IrContext::instance();
  KILN_CHECK_ERROR(ctx->get_or_register_dialect<MyOtherKilnDialect>(), AlreadyExists, {"'kiln'"});
  CHECK(ctx->dialect("kiln")->id() == TypeId::get<KilnDialect>());
  KILN_CHECK_ERROR(MyOtherF32Type::get(), AlreadyExists, {"'f32'"});
  CHECK(ctx->find_type_kind("f32")->id == TypeId::get<Float32Type>());
}

TEST_CASE("a dialect class registered after its types and ops takes them over", "[ir][context]") {
  IrContext* ctx = IrContext::instance();
  // The type and the op name the dialect "geo" before its class exists.
  Type point = MyGeoPointType::get();
  OpInfo op = ctx->op_info<MyGeoOp>();
  REQUIRE(point.dialect());
  CHECK(point.dialect()->name() == "geo");
  CHECK(ctx->dialect(TypeId::get<MyGeoDialect>()) == nullptr);

  MyGeoDialect* geo = ctx->get_or_register_dialect<MyGeoDialect>();
  CHECK(ctx->dialect("geo") == geo);
  CHECK(ctx->dialect(TypeId::get<MyGeoDialect>()) == geo);
  CHECK(point.dialect() == geo);
  CHECK(op.dialect() == geo);
  CHECK(ctx->get_or_register_dialect<MyGeoDialect>() == geo);
}

TEST_CASE("type and attribute kinds are found by name", "[ir][context]") {
  IrContext* ctx = IrContext::instance();
  for (std::string_view n : {"f16", "bf16", "f32", "f64", "i8", "i32", "i64", "bool", "tensor",
                             "vtensor", "vector"}) {
    INFO(n);
    const auto* k = ctx->find_type_kind(n);
    REQUIRE(k);
    CHECK(k->name == n);
  }
  for (std::string_view n :
       {"bool", "i32", "i64", "f32", "f64", "str", "array", "dict", "type", "dtype", "place",
        "tensor"}) {
    INFO(n);
    const auto* k = ctx->find_attribute_kind(n);
    REQUIRE(k);
    CHECK(k->name == n);
  }
  CHECK(ctx->find_type_kind("tensor")->parametric);
  CHECK_FALSE(ctx->find_type_kind("f32")->parametric);
  CHECK(ctx->find_type_kind("nope") == nullptr);
  // Types and attributes have separate names: vtensor is a type only.
  CHECK(ctx->find_attribute_kind("vtensor") == nullptr);
}

TEST_CASE("eight threads asking for the same tensor types get identical pointers",
          "[ir][context]") {
  constexpr int kThreads = 8, kShapes = 200;
  std::vector<std::vector<const TypeStorage*>> seen(kThreads);
  std::vector<std::vector<const AttributeStorage*>> attrs(kThreads);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();  // start together
      for (int i = 0; i < kShapes; ++i) {
        // Shapes no other test uses, so each is created during the race.
        int s = (i * 7 + t) % kShapes;  // threads walk the shapes in different orders
        seen[t].push_back(TensorType::get(DataType::Float32, {9001, s}).storage());
        seen[t].push_back(VTensorType::get(DataType::Int8, {s, 9002}).storage());
        attrs[t].push_back(make_i64_array({9003, s}).storage());
      }
    });
  }
  for (auto& th : threads) th.join();
  int mismatches = 0;
  std::unordered_set<const void*> distinct;
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kShapes; ++i) {
      int s = (i * 7 + t) % kShapes;
      mismatches += seen[t][2 * i] != TensorType::get(DataType::Float32, {9001, s}).storage();
      mismatches += seen[t][2 * i + 1] != VTensorType::get(DataType::Int8, {s, 9002}).storage();
      mismatches += attrs[t][i] != make_i64_array({9003, s}).storage();
      distinct.insert(seen[t][2 * i]);
      distinct.insert(seen[t][2 * i + 1]);
      distinct.insert(attrs[t][i]);
    }
  }
  CHECK(mismatches == 0);
  CHECK(distinct.size() == 3 * kShapes);  // one storage per key, never two
}

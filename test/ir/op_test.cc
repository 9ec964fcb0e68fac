// Op<ConcreteOp, Traits…>: traits and interfaces (has_trait, dyn_cast to an
// interface, isa<Op>), the OpInfo built at registration, Inplace / ViewLike
// verification, and a user-defined op with its own trait, interface and
// verify() hook.
#include "kiln/ir/op.h"

#include <algorithm>

#include "catch.hpp"
#include "ir_test_util.h"
#include "kiln/ir/half_operands.h"

using namespace kiln;
using kiln_test::f32;

namespace {

// A user's trait with a verifier: every operand and result has one type.
class MySameTypes : public OpTraitBase<MySameTypes> {
 public:
  static void verify_trait(Operation* op) {
    Type t = op->num_operands() ? op->operand_source(0).type() : Type();
    for (Value v : op->operands())
      if (v.type() != t) throw_error(ErrorKind::InvalidArgument, "op '", op->name(), "' needs same types");
    for (Value v : op->results())
      if (t && v.type() != t)
        throw_error(ErrorKind::InvalidArgument, "op '", op->name(), "' needs same types");
  }
};

// A user's interface: an op's cost estimate.
class MyCostInterface : public OpInterfaceBase<MyCostInterface> {
 public:
  struct Concept {
    double (*cost)(Operation*);
  };
  template <typename ConcreteOp>
  struct Model : Concept {
    constexpr Model() : Concept{&ConcreteOp::cost} {}
  };
  using OpInterfaceBase::OpInterfaceBase;
  double cost() const { return concept_table<Concept>()->cost(op_); }
};

// A user's op: test.scale(%x) {factor = …} with its trait, its interface, a
// declared attribute struct and a verify() hook (factor must not be 0).
struct MyScaleOp : Op<MyScaleOp, MySameTypes, ReadOnly, MyCostInterface, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "test.scale";
  static constexpr int num_operands = 1, num_results = 1;
  KILN_ATTRIBUTES((double, factor));
  static void build(Builder&, OperationArgument& arg, Value x, double factor) {
    arg.add_operand(x);
    arg.attributes = to_named_attributes(Attributes{factor});
  }
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
    return {in.at(0)};
  }
  static double cost(Operation* op) { return 2.0 * op->attribute<Float64Attribute>("factor").value(); }
  void verify() const {
    if (attrs().factor == 0.0)
      throw_error(ErrorKind::InvalidArgument, "op '", name, "' factor must not be 0");
  }
  double factor() const { return attrs().factor; }
};
KILN_REGISTER_OP(MyScaleOp);

// Registered on first use by Builder::create (no KILN_REGISTER_OP).
struct MyNoteOp : Op<MyNoteOp, SideEffect> {
  using Op::Op;
  static constexpr std::string_view name = "test.note";
  static constexpr int num_operands = 0, num_results = 0;
  static void build(Builder&, OperationArgument&) {}
};

std::vector<TypeId> sorted(std::vector<TypeId> v) {
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace

TEST_CASE("has_trait answers from the op's declared traits only", "[ir][op]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{2, 3});
  auto m = b.create<MatmulOp>(x.result(), b.create<DataOp>("y", std::vector<std::int64_t>{3, 4}).result());
  auto r = b.create<UniformRandomOp>(std::vector<std::int64_t>{2});
  auto f = b.create<FetchOp>(m.result(), "out");
  auto reshape = b.create<ReshapeOp>(x.result(), std::vector<std::int64_t>{6});
  Operation* mo = m;
  CHECK(mo->has_trait<ReadOnly>());
  CHECK(mo->has_trait<ValueSemantics>());
  CHECK_FALSE(mo->has_trait<SideEffect>());
  CHECK_FALSE(mo->has_trait<Inplace>());
  CHECK(r->has_trait<Random>());
  CHECK_FALSE(r->has_trait<ReadOnly>());
  CHECK(f->has_trait<SideEffect>());
  CHECK(reshape->has_trait<ViewLike>());
  CHECK_FALSE(reshape->has_trait<Communication>());
  // DataOp has no traits at all.
  CHECK_FALSE(x->has_trait<ReadOnly>());
  CHECK(x->info().impl()->traits.empty());
}

TEST_CASE("dyn_cast to an interface is null exactly when the op lacks it", "[ir][op]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{2, 3});
  auto f = b.create<FetchOp>(x.result(), "x");
  auto im = x->dyn_cast<InferMetaInterface>();
  REQUIRE(im);
  CHECK(im.operation() == x.operation());
  CHECK(im.infer_meta() == std::vector<Type>{TensorType::get(DataType::Float32, {2, 3})});
  CHECK(x->has_interface<InferMetaInterface>());
  CHECK_FALSE(x->has_interface<VjpInterface>());
  CHECK_FALSE(x->dyn_cast<VjpInterface>());
  CHECK_FALSE(f->dyn_cast<InferMetaInterface>());
  CHECK_FALSE(f->has_interface<InferMetaInterface>());
  CHECK(f->info().impl()->interfaces.empty());
}

TEST_CASE("isa and dyn_cast to an op class check the op's kind", "[ir][op]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{2, 2});
  auto m = b.create<MatmulOp>(x.result(), x.result());
  Operation* op = m;
  CHECK(op->isa<MatmulOp>());
  CHECK_FALSE(op->isa<AddOp>());
  CHECK(op->dyn_cast<MatmulOp>());
  CHECK(op->dyn_cast<MatmulOp>().operation() == op);
  CHECK_FALSE(op->dyn_cast<AddOp>());
  CHECK_FALSE(MatmulOp::classof(nullptr));
  CHECK(MatmulOp::dyn_cast(x.operation()).operation() == nullptr);
  // The typed handle reads the op's attributes through its struct.
  CHECK(m.attrs().transpose_x == false);
  CHECK(m.operand(0) == x.result());
}

TEST_CASE("OpInfo holds the op's sorted trait ids, interfaces and declared attributes",
          "[ir][op]") {
  OpInfo info = IrContext::instance()->op_info<MatmulOp>();
  const auto& traits = info.impl()->traits;
  CHECK(std::is_sorted(traits.begin(), traits.end()));
  CHECK(traits == sorted({TypeId::get<ReadOnly>(), TypeId::get<ValueSemantics>()}));
  const auto& ifaces = info.impl()->interfaces;
  REQUIRE(ifaces.size() == 2);  // InferMeta and Vjp, sorted by id
  CHECK(ifaces[0].first < ifaces[1].first);
  CHECK(((ifaces[0].first == TypeId::get<InferMetaInterface>() &&
          ifaces[1].first == TypeId::get<VjpInterface>()) ||
         (ifaces[1].first == TypeId::get<InferMetaInterface>() &&
          ifaces[0].first == TypeId::get<VjpInterface>())));
  CHECK(info.name() == "kiln.matmul");
  CHECK(info.id() == TypeId::get<MatmulOp>());
  CHECK(info.dialect()->name() == "kiln");
  CHECK(info.impl()->num_operands == 2);
  CHECK(info.impl()->num_results == 1);
  CHECK(info.impl()->attributes ==
        std::vector<std::pair<std::string, std::string>>{{"transpose_x", "bool"},
                                                         {"transpose_y", "bool"}});
  CHECK(info.has_trait<ReadOnly>());
  CHECK_FALSE(info.has_trait<Random>());
  CHECK(info.has_interface<InferMetaInterface>());
  CHECK(info.interface_concept(TypeId::get<VjpInterface>()) != nullptr);
  CHECK(info.interface_concept(TypeId::get<MyCostInterface>()) == nullptr);

  // A user op's traits (five declared, two of them interfaces) come out sorted too.
  OpInfo s = IrContext::instance()->op_info<MyScaleOp>();
  CHECK(s.impl()->traits == sorted({TypeId::get<MySameTypes>(), TypeId::get<ReadOnly>()}));
  CHECK(s.impl()->interfaces.size() == 2);
  CHECK(std::is_sorted(s.impl()->interfaces.begin(), s.impl()->interfaces.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; }));
  CHECK(s.impl()->trait_verifiers.size() == 1);
}

TEST_CASE("the Inplace map of relu_ says output 0 aliases input 0", "[ir][op]") {
  OpInfo info = IrContext::instance()->op_info<Relu_Op>();
  CHECK(info.has_trait<Inplace>());
  CHECK(info.impl()->inplace_map ==
        std::vector<std::pair<std::uint32_t, std::uint32_t>>{{0, 0}});
  CHECK(IrContext::instance()->op_info<ReluOp>().impl()->inplace_map.empty());
  CHECK(IrContext::instance()->op_info<ReshapeOp>().impl()->view_map ==
        std::vector<std::pair<std::uint32_t, std::uint32_t>>{{0, 0}});
}

TEST_CASE("HalfOperandsInterface names the operands an op reads in 16 bits as they are: cross_entropy's "
          "logits, not its label, with the result types of f32 logits; matmul declares none",
          "[ir][op]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{4, 5}).result();
  Value label = b.create<DataOp>("label", std::vector<std::int64_t>{4}, DataType::Int64).result();
  Operation* ce = b.create<CrossEntropyOp>(x, label).operation();
  const auto half = ce->dyn_cast<HalfOperandsInterface>();
  REQUIRE(half);
  CHECK(half.reads_half_as_f32(0));
  CHECK_FALSE(half.reads_half_as_f32(1));
  CHECK_FALSE(b.create<MatmulOp>(x, b.create<TransposeOp>(x, std::vector<std::int64_t>{1, 0}).result())
                  ->dyn_cast<HalfOperandsInterface>());
  const std::vector<Type> f32_types = ce->dyn_cast<InferMetaInterface>().infer_meta();
  for (DataType low : {DataType::BFloat16, DataType::Float16}) {
    const std::vector<Type> in{TensorType::get(low, {4, 5}), label.type()};
    CHECK(CrossEntropyOp::infer_meta(in, ce->attributes()) == f32_types);
  }
}

TEST_CASE("verify rejects relu_ whose output type differs from the input it aliases",
          "[ir][op]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{2, 3});
  auto r = b.create<Relu_Op>(x.result());
  CHECK(r.result().type() == x.result().type());
  CHECK_NOTHROW(p.verify());
  // Make the output a different type than its aliased input.
  r.result().set_type(TensorType::get(DataType::Float32, {3, 2}));
  KILN_CHECK_ERROR(p.verify(), InvalidArgument,
                   {"'kiln.relu_'", "inplace", "tensor<3x2xf32>", "tensor<2x3xf32>"});
  KILN_CHECK_ERROR(r->verify(), InvalidArgument, {"'kiln.relu_'"});
}

TEST_CASE("verify rejects a reshape whose view changes the dtype", "[ir][op]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{2, 3});
  auto r = b.create<ReshapeOp>(x.result(), std::vector<std::int64_t>{6});
  r.result().set_type(TensorType::get(DataType::Int32, {6}));
  KILN_CHECK_ERROR(r->verify(), InvalidArgument, {"'kiln.reshape'", "view"});
}

TEST_CASE("a user-defined op gets its trait, its interface and its verify hook", "[ir][op]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{4});
  auto s = b.create<MyScaleOp>(x.result(), 3.0);
  Operation* op = s;
  CHECK(op->name() == "test.scale");
  CHECK(op->isa<MyScaleOp>());
  CHECK(op->has_trait<MySameTypes>());
  CHECK(op->has_trait<ReadOnly>());
  CHECK_FALSE(op->has_trait<ValueSemantics>());
  auto cost = op->dyn_cast<MyCostInterface>();
  REQUIRE(cost);
  CHECK(cost.cost() == 6.0);
  CHECK_FALSE(x->dyn_cast<MyCostInterface>());
  CHECK(s.factor() == 3.0);
  CHECK(s.result().type() == x.result().type());  // from its InferMeta
  CHECK(op->dialect()->name() == "test");
  CHECK_NOTHROW(p.verify());

  // The op's own verify() hook.
  op->set_attribute("factor", Float64Attribute::get(0.0));
  KILN_CHECK_ERROR(p.verify(), InvalidArgument, {"'test.scale'", "factor must not be 0"});
  // The declared attribute's kind is checked before the hook runs.
  op->set_attribute("factor", Int64Attribute::get(2));
  KILN_CHECK_ERROR(p.verify(), InvalidArgument, {"'test.scale'", "'factor'", "f64"});
  op->erase_attribute("factor");
  KILN_CHECK_ERROR(p.verify(), InvalidArgument, {"'test.scale'", "missing", "'factor'"});
  op->set_attribute("factor", Float64Attribute::get(1.0));
  CHECK_NOTHROW(p.verify());

  // The trait's verifier.
  auto y = b.create<DataOp>("y", std::vector<std::int64_t>{4}, DataType::Float64);
  op->set_operand(0, y.result());
  KILN_CHECK_ERROR(p.verify(), InvalidArgument, {"'test.scale'", "same types"});
}

TEST_CASE("KILN_REGISTER_OP registers a user op before its first use", "[ir][op]") {
  OpInfo info = IrContext::instance()->find_op("test.scale");
  REQUIRE(info);
  CHECK(info.id() == TypeId::get<MyScaleOp>());
  CHECK(IrContext::instance()->find_op(TypeId::get<MyScaleOp>()) == info);
}

TEST_CASE("Builder::create registers an op class on its first use", "[ir][op]") {
  Program p;
  Builder b(p);
  auto n = b.create<MyNoteOp>();
  CHECK(n->name() == "test.note");
  OpInfo info = IrContext::instance()->op_info("test.note");
  CHECK(info == n->info());
  CHECK(info.has_trait<SideEffect>());
}

TEST_CASE("an op handle is an Operation* with results and operands", "[ir][op]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{2});
  auto r = b.create<ReluOp>(x.result());
  Operation* raw = r;
  CHECK(raw == r.operation());
  CHECK(r->name() == "kiln.relu");
  CHECK(r.result() == raw->result(0));
  CHECK(r.operand(0) == x.result());
  CHECK(static_cast<bool>(r));
  CHECK_FALSE(static_cast<bool>(ReluOp(nullptr)));
  static_assert(sizeof(ReluOp) == sizeof(Operation*), "op handles carry no data");
}

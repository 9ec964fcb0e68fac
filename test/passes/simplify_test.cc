// Algebraic simplification as a user sees it: identities disappear where
// the result's type is the operand's, chains of transposes and reshapes
// collapse, no-op casts and scales go; broadcasting identities and values
// updated in place stay.
#include <cmath>

#include "passes/passes_test_util.h"
#include "kiln/exec/executor.h"

using namespace kiln;
using namespace kiln_passes_test;

namespace {

struct Fixture {
  Program p;
  Builder b{p};
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{2, 3}).result();
  Value full(std::vector<std::int64_t> dims, double v) {
    return b.create<FullOp>(dims, v).result();
  }
};

}  // namespace

TEST_CASE("simplify turns x*1, 1*x, x+(-0), (-0)+x, x-0 and x/1 into x", "[passes][simplify]") {
  Fixture f;
  Value one = f.full({3}, 1.0), zero = f.full({2, 3}, 0.0), minus_zero = f.full({2, 3}, -0.0);
  std::vector<Value> outs{
      f.b.create<MulOp>(f.x, one).result(), f.b.create<MulOp>(one, f.x).result(),
      f.b.create<AddOp>(f.x, minus_zero).result(), f.b.create<AddOp>(minus_zero, f.x).result(),
      f.b.create<SubOp>(f.x, zero).result(), f.b.create<DivOp>(f.x, one).result()};
  auto live = run_pipeline(f.p, "simplify,dce", outs);
  for (Value v : live) CHECK(v == f.x);
  CHECK(f.p.block().size() == 1);  // only the data op
}

TEST_CASE("simplify keeps x+0 and x-(-0) on floats, which give +0 for x = -0, but not on integers",
          "[passes][simplify]") {
  Fixture f;
  Value zero = f.full({2, 3}, 0.0), minus_zero = f.full({2, 3}, -0.0);
  Value a = f.b.create<AddOp>(f.x, zero).result();
  Value s = f.b.create<SubOp>(f.x, minus_zero).result();
  Value i = f.b.create<DataOp>("i", std::vector<std::int64_t>{3}, DataType::Int32).result();
  Value izero = f.b.create<FullOp>(std::vector<std::int64_t>{3}, 0.0, DataType::Int32).result();
  Value ia = f.b.create<AddOp>(i, izero).result();
  auto live = run_pipeline(f.p, "simplify", {a, s, ia});
  CHECK(live[0] == a);
  CHECK(live[1] == s);
  CHECK(live[2] == i);
  Executor exe(Place::cpu());  // the default pipeline: -0 + 0 is +0, as written
  auto out = exe.run(f.p, {{"x", Tensor::from_vector<float>({2, 3}, {-0.f, -0.f, 1.f, 2.f, 3.f, 4.f})},
                           {"i", Tensor::from_vector<std::int32_t>({3}, {1, 2, 3})}},
                     {a, s});
  CHECK_FALSE(std::signbit(out[0].to_vector<float>()[0]));
  CHECK_FALSE(std::signbit(out[1].to_vector<float>()[0]));
}

TEST_CASE("simplify keeps identities that broadcast, and 0-x, 1/x", "[passes][simplify]") {
  Fixture f;
  Value ones = f.full({4, 2, 3}, 1.0);  // x * ones broadcasts x to [4, 2, 3]
  Value m = f.b.create<MulOp>(f.x, ones).result();
  Value zero = f.full({2, 3}, 0.0), one = f.full({2, 3}, 1.0);
  Value s = f.b.create<SubOp>(zero, f.x).result();
  Value d = f.b.create<DivOp>(one, f.x).result();
  Value two = f.full({2, 3}, 2.0);
  Value t = f.b.create<MulOp>(f.x, two).result();
  run_pipeline(f.p, "simplify", {m, s, d, t});
  CHECK(count_ops(f.p, "kiln.mul") == 2);
  CHECK(count_ops(f.p, "kiln.sub") == 1);
  CHECK(count_ops(f.p, "kiln.div") == 1);
}

TEST_CASE("simplify composes transposes: back to x, or one transpose", "[passes][simplify]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{2, 3, 4}).result();
  Value t1 = b.create<TransposeOp>(x, std::vector<std::int64_t>{1, 2, 0}).result();  // [3, 4, 2]
  Value back = b.create<TransposeOp>(t1, std::vector<std::int64_t>{2, 0, 1}).result();  // [2, 3, 4]
  Value other = b.create<TransposeOp>(t1, std::vector<std::int64_t>{1, 0, -1}).result();  // [4, 3, 2]
  auto live = run_pipeline(p, "simplify,dce", {back, other});
  CHECK(live[0] == x);
  Operation* t = live[1].defining_op();
  REQUIRE(t->name() == "kiln.transpose");
  CHECK(t->operand_source(0) == x);
  CHECK(live[1].type() == f32({4, 3, 2}));
  CHECK(count_ops(p, "kiln.transpose") == 1);
}

TEST_CASE("simplify folds reshape of reshape into one, resolving 0 dims", "[passes][simplify]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{2, 3, 4}).result();
  Value r1 = b.create<ReshapeOp>(x, std::vector<std::int64_t>{6, 4}).result();
  Value r2 = b.create<ReshapeOp>(r1, std::vector<std::int64_t>{0, 2, 2}).result();  // [6, 2, 2]
  Value same = b.create<ReshapeOp>(x, std::vector<std::int64_t>{2, 3, 4}).result();
  auto live = run_pipeline(p, "simplify,dce", {r2, same});
  Operation* r = live[0].defining_op();
  REQUIRE(r->name() == "kiln.reshape");
  CHECK(r->operand_source(0) == x);
  CHECK(live[0].type() == f32({6, 2, 2}));
  CHECK(live[1] == x);
  CHECK(count_ops(p, "kiln.reshape") == 1);
}

TEST_CASE("simplify drops casts to the same dtype and scales by 1 with bias 0", "[passes][simplify]") {
  Fixture f;
  Value c = f.b.create<CastOp>(f.x, DataType::Float32).result();
  Value c64 = f.b.create<CastOp>(f.x, DataType::Float64).result();
  Value s = f.b.create<ScaleOp>(f.x, 1.0, 0.0).result();
  Value s2 = f.b.create<ScaleOp>(f.x, 1.0, 0.5).result();
  auto live = run_pipeline(f.p, "simplify", {c, c64, s, s2});
  CHECK(live[0] == f.x);
  CHECK(live[1] == c64);
  CHECK(live[2] == f.x);
  CHECK(live[3] == s2);
}

TEST_CASE("simplify never replaces a value that is updated in place", "[passes][simplify]") {
  Fixture f;
  Value one = f.full({2, 3}, 1.0);
  Value m = f.b.create<MulOp>(f.x, one).result();
  f.b.create<Relu_Op>(m);  // m is a buffer of its own, written in place
  Value e = f.b.create<ExpOp>(f.x).result();
  Value m2 = f.b.create<MulOp>(e, one).result();
  f.b.create<Relu_Op>(e);  // e is written in place: m2 must stay a copy
  run_pipeline(f.p, "simplify", {m, m2});
  CHECK(count_ops(f.p, "kiln.mul") == 2);
}

TEST_CASE("simplify keeps x*1 when the result sets a parameter (the parameter would take x's "
          "buffer)",
          "[passes][simplify]") {
  Fixture f;
  f.p.set_parameter("w", Parameter{f32({2, 3})});
  Value m = f.b.create<MulOp>(f.x, f.full({2, 3}, 1.0)).result();
  f.b.create<SetParameterOp>(m, "w");
  run_pipeline(f.p, "simplify");
  CHECK(count_ops(f.p, "kiln.mul") == 1);
}

TEST_CASE("simplify leaves no dead transpose behind: the default pipeline's program runs only "
          "what the fetch needs",
          "[passes][simplify]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{2, 3, 4}).result();
  Value t1 = b.create<TransposeOp>(x, std::vector<std::int64_t>{1, 2, 0}).result();
  Value back = b.create<TransposeOp>(t1, std::vector<std::int64_t>{2, 0, 1}).result();
  Value y = b.create<ReluOp>(back).result();
  run_pipeline(p, kDefaultPasses, {y});
  CHECK(count_ops(p, "kiln.transpose") == 0);
  CHECK(count_ops(p, "kiln.relu") == 1);
}

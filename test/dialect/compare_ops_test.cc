// InferMeta, Vjp and error tests of the ops of kiln/dialect/compare_ops.h:
// result types (bool, broadcast), finite-difference checks of where, clip,
// masked_fill, triu and tril in f64, no gradient through comparisons, and a
// clear kiln::Error for every bad operand or attribute.
#include <cmath>

#include "catch.hpp"
#include "dialect/grad_check.h"
#include "kernel/kernel_test_util.h"
#include "kiln/exec/executor.h"
#include "kiln/frontend/backward.h"
#include "test_util.h"
#include "dialect/dialect_test_util.h"

using namespace kiln;
using namespace kiln_dialect_test;
using namespace kiln_vjp_test;
using kiln_test::build_op;

namespace {
using V = std::vector<std::int64_t>;
constexpr auto I32 = DataType::Int32;
constexpr auto I64 = DataType::Int64;
constexpr auto BOOL = DataType::Bool;

Tensor bools(const Dims& d, const std::vector<bool>& v) { return Tensor::from_vector<bool>(d, v); }
// A deterministic mask with both values.
Tensor mask_of(const Dims& d) {
  std::vector<bool> v(static_cast<std::size_t>(d.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = (i * 7 + 3) % 3 != 0;
  return bools(d, v);
}
}  // namespace

// ---- result types ----

TEST_CASE("comparisons infer a bool result of the broadcast shape", "[dialect][compare]") {
  Program p;
  auto* op = build_op<LessThanOp>(p, {{F32, {4, 1, 3}}, {F32, {5, 1}}});
  CHECK(shaped_data_type(op->result_type(0)) == BOOL);
  CHECK(shaped_dims(op->result_type(0)) == V{4, 5, 3});
  op = build_op<EqualOp>(p, {{BOOL, {-1, 2}}, {BOOL, {2}}});
  CHECK(shaped_dims(op->result_type(0)) == V{-1, 2});
  op = build_op<LogicalXorOp>(p, {{BOOL, {3}}, {BOOL, {}}});
  CHECK(shaped_dims(op->result_type(0)) == V{3});
  op = build_op<IsNanOp>(p, {{F64, {2, 2}}});
  CHECK(shaped_data_type(op->result_type(0)) == BOOL);
  op = build_op<WhereOp>(p, {{BOOL, {2, 1}}, {I64, {3}}, {I64, {}}});
  CHECK(shaped_data_type(op->result_type(0)) == I64);
  CHECK(shaped_dims(op->result_type(0)) == V{2, 3});
  op = build_op<MaskedFillOp>(p, {{F32, {2, 4, 4}}, {BOOL, {4, 4}}}, 0.0);
  CHECK(shaped_dims(op->result_type(0)) == V{2, 4, 4});
  op = build_op<TrilOp>(p, {{F32, {-1, 3, 3}}}, std::int64_t{0});
  CHECK(shaped_dims(op->result_type(0)) == V{-1, 3, 3});
}

// ---- errors at build time ----

TEST_CASE("comparisons reject mixed dtypes, bool orderings and shapes that do not broadcast",
          "[dialect][compare]") {
  Program p;
  KILN_CHECK_ERROR((build_op<LessThanOp>(p, {{F32, {2}}, {F64, {2}}})), InvalidArgument,
                   {"kiln.less_than", "one dtype", "f32", "f64"});
  KILN_CHECK_ERROR((build_op<GreaterThanOp>(p, {{BOOL, {2}}, {BOOL, {2}}})), InvalidArgument,
                   {"kiln.greater_than", "bool", "expected f32, f64, i32 or i64"});
  KILN_CHECK_ERROR((build_op<EqualOp>(p, {{F32, {2, 3}}, {F32, {4}}})), InvalidArgument,
                   {"kiln.equal", "cannot broadcast", "[2, 3]", "[4]"});
}

TEST_CASE("logical ops take only bools and isnan / isfinite only floats", "[dialect][compare]") {
  Program p;
  KILN_CHECK_ERROR((build_op<LogicalAndOp>(p, {{BOOL, {2}}, {I32, {2}}})), InvalidArgument,
                   {"kiln.logical_and", "operand #1", "i32", "expected bool"});
  KILN_CHECK_ERROR((build_op<LogicalNotOp>(p, {{F32, {2}}})), InvalidArgument,
                   {"kiln.logical_not", "f32", "expected bool"});
  KILN_CHECK_ERROR((build_op<IsFiniteOp>(p, {{I64, {2}}})), InvalidArgument,
                   {"kiln.isfinite", "i64", "expected f32 or f64"});
}

TEST_CASE("where needs a bool cond, one dtype for x and y and broadcastable shapes",
          "[dialect][compare]") {
  Program p;
  KILN_CHECK_ERROR((build_op<WhereOp>(p, {{F32, {2}}, {F32, {2}}, {F32, {2}}})), InvalidArgument,
                   {"kiln.where", "operand #0", "expected bool"});
  KILN_CHECK_ERROR((build_op<WhereOp>(p, {{BOOL, {2}}, {F32, {2}}, {F64, {2}}})), InvalidArgument,
                   {"kiln.where", "one dtype", "operand #1", "operand #2"});
  KILN_CHECK_ERROR((build_op<WhereOp>(p, {{BOOL, {3}}, {F32, {2}}, {F32, {2}}})), InvalidArgument,
                   {"kiln.where", "cannot broadcast"});
}

TEST_CASE("clip rejects NaN bounds and non-numeric tensors", "[dialect][compare]") {
  Program p;
  KILN_CHECK_ERROR((build_op<ClipOp>(p, {{F32, {2}}}, std::nan(""), 1.0)), InvalidArgument,
                   {"kiln.clip", "NaN"});
  KILN_CHECK_ERROR((build_op<ClipOp>(p, {{BOOL, {2}}}, 0.0, 1.0)), InvalidArgument,
                   {"kiln.clip", "bool", "expected a floating or an integer type"});
}

TEST_CASE("masked_fill needs a bool mask that broadcasts to x's shape", "[dialect][compare]") {
  Program p;
  KILN_CHECK_ERROR((build_op<MaskedFillOp>(p, {{F32, {2, 3}}, {I32, {2, 3}}}, 0.0)),
                   InvalidArgument, {"kiln.masked_fill", "operand #1", "expected bool"});
  // The mask would broadcast x: [3] vs [2, 3].
  KILN_CHECK_ERROR((build_op<MaskedFillOp>(p, {{F32, {3}}, {BOOL, {2, 3}}}, 0.0)),
                   InvalidArgument, {"kiln.masked_fill", "mask [2, 3]", "shape of x [3]"});
  KILN_CHECK_ERROR((build_op<MaskedFillOp>(p, {{F32, {2, 3}}, {BOOL, {2}}}, 0.0)),
                   InvalidArgument, {"kiln.masked_fill", "cannot broadcast"});
}

TEST_CASE("triu and tril need a tensor of rank >= 2", "[dialect][compare]") {
  Program p;
  KILN_CHECK_ERROR((build_op<TriuOp>(p, {{F32, {5}}}, std::int64_t{0})), InvalidArgument,
                   {"kiln.triu", "rank >= 2", "rank 1"});
  KILN_CHECK_ERROR((build_op<TrilOp>(p, {{F32, {}}}, std::int64_t{0})), InvalidArgument,
                   {"kiln.tril", "rank >= 2"});
}

// ---- gradients ----

TEST_CASE("where's vjp matches finite differences, broadcasting included", "[dialect][vjp][compare]") {
  check_vjp({mask_of({2, 3}), random_f64({2, 3}), random_f64({2, 3}, -1, 1, 2)},
            make_op<WhereOp>());
  // cond [2, 1], x [3], y [2, 3]: x's grad sums over the broadcast rows.
  check_vjp({mask_of({2, 1}), random_f64({3}), random_f64({2, 3}, -1, 1, 3)}, make_op<WhereOp>());
  // A scalar y.
  check_vjp({mask_of({4}), random_f64({4}), random_f64({}, -1, 1, 4)}, make_op<WhereOp>());
  GradCheckOptions o;
  o.unknown_batch = true;
  check_vjp({mask_of({3, 2}), random_f64({3, 2}), random_f64({3, 2}, -1, 1, 5)},
            make_op<WhereOp>(), o);
}

TEST_CASE("where's vjp routes dout to x where cond holds and to y elsewhere",
          "[dialect][vjp][compare]") {
  Program p;
  Builder b(p);
  auto c = b.create<DataOp>("c", V{3}, BOOL).result();
  auto x = b.create<DataOp>("x", V{3}, F64).result();
  auto y = b.create<DataOp>("y", V{1}, F64).result();
  auto w = b.create<DataOp>("w", V{3}, F64).result();
  auto op = b.create<WhereOp>(c, x, y);
  auto g = call_vjp(b, op.operation(), {w});
  CHECK(!g[0]);
  Executor exe;
  auto out = exe.run(p,
                     {{"c", bools({3}, {true, false, true})},
                      {"x", Tensor::from_vector<double>({3}, {1, 2, 3})},
                      {"y", Tensor::from_vector<double>({1}, {0})},
                      {"w", Tensor::from_vector<double>({3}, {10, 20, 30})}},
                     {g[1], g[2]});
  CHECK(out[0].to_vector<double>() == std::vector<double>{10, 0, 30});
  CHECK(out[1].to_vector<double>() == std::vector<double>{20});
}

TEST_CASE("clip's vjp matches finite differences away from the bounds", "[dialect][vjp][compare]") {
  // Values in [-1, 1) with bounds ±0.5, none within 1e-3 of a bound.
  Tensor x = random_f64({3, 4});
  auto* px = x.data<double>();
  for (std::int64_t i = 0; i < x.numel(); ++i)
    if (std::abs(std::abs(px[i]) - 0.5) < 1e-3) px[i] += 0.01;
  check_vjp({x}, make_op<ClipOp>(-0.5, 0.5));
  check_vjp({x}, make_op<ClipOp>(-2.0, 2.0));  // all inside: the identity
}

TEST_CASE("masked_fill's vjp matches finite differences and zeroes masked grads",
          "[dialect][vjp][compare]") {
  check_vjp({random_f64({2, 3}), mask_of({2, 3})}, make_op<MaskedFillOp>(5.0));
  auto r = check_vjp({random_f64({2, 3}), bools({3}, {true, false, true})},
                     make_op<MaskedFillOp>(-1.0));
  REQUIRE(r.grads[0].is_initialized());
  auto g = r.grads[0].to_vector<double>();
  CHECK(g[0] == 0);
  CHECK(g[2] == 0);
  CHECK(g[3] == 0);
  CHECK(g[5] == 0);
}

TEST_CASE("triu's and tril's vjps match finite differences", "[dialect][vjp][compare]") {
  for (std::int64_t diag : {-1, 0, 2}) {
    INFO("diagonal " << diag);
    check_vjp({random_f64({2, 3, 4})}, make_op<TriuOp>(diag));
    check_vjp({random_f64({2, 3, 4})}, make_op<TrilOp>(diag));
  }
}

TEST_CASE("backward passes through where and masked_fill but not into comparisons",
          "[dialect][vjp][compare]") {
  // loss = sum(where(x > 0, x, 0) masked) : the comparison's bool result
  // carries no gradient, so backward needs no Vjp of greater_than.
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", V{4}, F64).result();
  auto zero = b.create<FullOp>(V{}, 0.0, F64).result();
  auto pos = b.create<GreaterThanOp>(x, zero).result();
  auto relu = b.create<WhereOp>(pos, x, zero).result();
  auto loss = b.create<SumOp>(relu, V{}, false).result();
  auto grads = append_backward(loss, {x});
  REQUIRE(grads.size() == 1);
  Executor exe;
  auto out = exe.run(p, {{"x", Tensor::from_vector<double>({4}, {-1, 2, -3, 4})}},
                     {grads[0].second});
  CHECK(out[0].to_vector<double>() == std::vector<double>{0, 1, 0, 1});
}

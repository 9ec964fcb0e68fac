// Vjp of the elementwise and linear-algebra ops (math_ops.h), each checked
// against central finite differences in f64 (grad_check.h): broadcasting
// shapes (including a batch dim only known at run time), transpose flags,
// batches; integer operands and null out_grads give null grads.
#include "dialect/grad_check.h"
#include "kiln/exec/executor.h"

using namespace kiln;
using namespace kiln_vjp_test;

namespace {

// Shapes (x, y) a broadcasting binary op is checked on.
const std::vector<std::pair<Dims, Dims>> kBroadcastCases = {
    {{3, 4}, {3, 4}}, {{3, 4}, {4}},       {{4}, {3, 4}},       {{2, 1, 4}, {3, 1}},
    {{3, 1}, {1, 4}}, {{}, {2, 3}},        {{2, 3}, {}},        {{2, 3, 4}, {1, 3, 1}},
};

template <typename OpT>
void check_binary(double lo = -1.0, double hi = 1.0, double ylo = -1.0, double yhi = 1.0) {
  std::uint32_t seed = 1;
  for (const auto& [xd, yd] : kBroadcastCases) {
    INFO(OpT::name << " x [" << xd.to_string() << "] y [" << yd.to_string() << "]");
    check_vjp({random_f64(xd, lo, hi, seed), random_f64(yd, ylo, yhi, seed + 1)}, make_op<OpT>());
    seed += 2;
  }
  // A batch dim only known at run time, against a bias-like operand.
  GradCheckOptions o;
  o.declared = {{-1, 4}, {4}};
  check_vjp({random_f64({3, 4}, lo, hi, 77), random_f64({4}, ylo, yhi, 78)}, make_op<OpT>(), o);
  // Both operands with an unknown dim that broadcasts at run time ([1, 4] vs [3, 4]).
  o.declared = {{-1, 4}, {-1, 4}};
  check_vjp({random_f64({1, 4}, lo, hi, 79), random_f64({3, 4}, ylo, yhi, 80)}, make_op<OpT>(), o);
  check_vjp({random_f64({3, 4}, lo, hi, 81), random_f64({1, 4}, ylo, yhi, 82)}, make_op<OpT>(), o);
}

}  // namespace

// ---- broadcasting binary ops ----

TEST_CASE("add's vjp matches finite differences, summing broadcast dims back", "[dialect][vjp]") {
  check_binary<AddOp>();
}

TEST_CASE("sub's vjp matches finite differences, summing broadcast dims back", "[dialect][vjp]") {
  check_binary<SubOp>();
}

TEST_CASE("mul's vjp matches finite differences, summing broadcast dims back", "[dialect][vjp]") {
  check_binary<MulOp>();
}

TEST_CASE("div's vjp matches finite differences for both operands", "[dialect][vjp]") {
  check_binary<DivOp>(-1.0, 1.0, 0.5, 2.0);  // divisors away from 0
}

TEST_CASE("maximum's and minimum's vjps route the grad to the chosen operand",
          "[dialect][vjp]") {
  check_binary<MaximumOp>();
  check_binary<MinimumOp>();
}

TEST_CASE("pow's vjp matches finite differences for base and exponent", "[dialect][vjp]") {
  check_binary<PowOp>(0.5, 2.0, -1.5, 1.5);  // positive bases: ln x exists
}

TEST_CASE("mod's and fmod's vjps pass the grad to x and -quotient times it to y",
          "[dialect][vjp]") {
  // Quotients away from integers: the remainder is smooth there.
  check_binary<ModOp>(2.3, 2.5, 1.3, 1.4);
  check_binary<FmodOp>(2.3, 2.5, 1.3, 1.4);
  check_binary<ModOp>(-2.5, -2.3, 1.3, 1.4);
  check_binary<FmodOp>(-2.5, -2.3, 1.3, 1.4);
}

TEST_CASE("maximum's vjp splits the grad evenly where x equals y", "[dialect][vjp]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{3}, DataType::Float64).result();
  auto y = b.create<DataOp>("y", std::vector<std::int64_t>{3}, DataType::Float64).result();
  auto w = b.create<DataOp>("w", std::vector<std::int64_t>{3}, DataType::Float64).result();
  auto m = b.create<MaximumOp>(x, y);
  auto g = call_vjp(b, m.operation(), {w});
  Executor exe;
  auto out = exe.run(p,
                     {{"x", Tensor::from_vector<double>({3}, {1, 2, 3})},
                      {"y", Tensor::from_vector<double>({3}, {0, 2, 4})},
                      {"w", Tensor::from_vector<double>({3}, {10, 20, 30})}},
                     {g[0], g[1]});
  CHECK(out[0].to_vector<double>() == std::vector<double>{10, 10, 0});
  CHECK(out[1].to_vector<double>() == std::vector<double>{0, 10, 30});
}

// ---- matmul ----

TEST_CASE("matmul's vjp matches finite differences for every transpose flag combination",
          "[dialect][vjp]") {
  for (bool tx : {false, true})
    for (bool ty : {false, true}) {
      INFO("transpose_x " << tx << " transpose_y " << ty);
      Dims xd = tx ? Dims{4, 3} : Dims{3, 4};
      Dims yd = ty ? Dims{5, 4} : Dims{4, 5};
      check_vjp({random_f64(xd, -1, 1, 1), random_f64(yd, -1, 1, 2)}, make_op<MatmulOp>(tx, ty));
    }
}

TEST_CASE("matmul's vjp sums broadcast batch dims back to each operand", "[dialect][vjp]") {
  for (bool tx : {false, true})
    for (bool ty : {false, true}) {
      INFO("transpose_x " << tx << " transpose_y " << ty);
      auto mk = [](Dims batch, std::int64_t a, std::int64_t b, bool t) {
        std::vector<std::int64_t> d = batch.to_vector();
        d.push_back(t ? b : a);
        d.push_back(t ? a : b);
        return Dims(d);
      };
      // [2, 3, 4] @ [4, 2]; [2, 1, 3, 4] @ [3, 4, 2]; [1, 3, 4] @ [2, 4, 2]
      check_vjp({random_f64(mk({2}, 3, 4, tx), -1, 1, 3), random_f64(mk({}, 4, 2, ty), -1, 1, 4)},
                make_op<MatmulOp>(tx, ty));
      check_vjp({random_f64(mk({2, 1}, 3, 4, tx), -1, 1, 5),
                 random_f64(mk({3}, 4, 2, ty), -1, 1, 6)},
                make_op<MatmulOp>(tx, ty));
      check_vjp({random_f64(mk({1}, 3, 4, tx), -1, 1, 7), random_f64(mk({2}, 4, 2, ty), -1, 1, 8)},
                make_op<MatmulOp>(tx, ty));
    }
}

TEST_CASE("matmul's vjp works with a batch dim known only at run time", "[dialect][vjp]") {
  GradCheckOptions o;
  o.declared = {{-1, 4}, {4, 2}};
  check_vjp({random_f64({3, 4}, -1, 1, 1), random_f64({4, 2}, -1, 1, 2)}, make_op<MatmulOp>(), o);
  o.declared = {{-1, 3, 4}, {4, 2}};
  check_vjp({random_f64({2, 3, 4}, -1, 1, 3), random_f64({4, 2}, -1, 1, 4)}, make_op<MatmulOp>(),
            o);
}

// ---- unary ops ----

TEST_CASE("relu's vjp passes the grad where x > 0", "[dialect][vjp]") {
  check_vjp({random_away_from_zero({3, 5})}, make_op<ReluOp>());
  GradCheckOptions o;
  o.unknown_batch = true;
  check_vjp({random_away_from_zero({4, 2}, 0.2, 1.0, 3)}, make_op<ReluOp>(), o);
}

TEST_CASE("relu_'s (in place) vjp matches finite differences", "[dialect][vjp]") {
  check_vjp({random_away_from_zero({3, 5}, 0.2, 1.0, 9)}, make_op<Relu_Op>());
}

TEST_CASE("gelu's vjp matches finite differences, exact and tanh forms", "[dialect][vjp]") {
  check_vjp({random_f64({4, 5}, -3, 3, 1)}, make_op<GeluOp>(false));
  check_vjp({random_f64({4, 5}, -3, 3, 2)}, make_op<GeluOp>(true));
}

TEST_CASE("tanh's vjp matches finite differences", "[dialect][vjp]") {
  check_vjp({random_f64({3, 4}, -2, 2)}, make_op<TanhOp>());
}

TEST_CASE("sigmoid's vjp matches finite differences", "[dialect][vjp]") {
  check_vjp({random_f64({3, 4}, -3, 3)}, make_op<SigmoidOp>());
}

TEST_CASE("exp's and log's vjps match finite differences", "[dialect][vjp]") {
  check_vjp({random_f64({2, 3}, -1, 1)}, make_op<ExpOp>());
  check_vjp({random_f64({2, 3}, 0.3, 3)}, make_op<LogOp>());
}

TEST_CASE("sqrt's and sqrt_'s vjps match finite differences", "[dialect][vjp]") {
  check_vjp({random_f64({2, 3}, 0.3, 3)}, make_op<SqrtOp>());
  check_vjp({random_f64({2, 3}, 0.3, 3, 5)}, make_op<Sqrt_Op>());
}

TEST_CASE("square's vjp matches finite differences", "[dialect][vjp]") {
  check_vjp({random_f64({3, 4}, -2, 2)}, make_op<SquareOp>());
}

TEST_CASE("abs's vjp is the sign of x times the grad", "[dialect][vjp]") {
  check_vjp({random_away_from_zero({3, 4})}, make_op<AbsOp>());
}

TEST_CASE("neg's vjp matches finite differences", "[dialect][vjp]") {
  check_vjp({random_f64({3, 4})}, make_op<NegOp>());
}

TEST_CASE("scale's vjp scales the grad and ignores the bias, either bias order",
          "[dialect][vjp]") {
  check_vjp({random_f64({3, 4})}, make_op<ScaleOp>(2.5, 1.0, true));
  check_vjp({random_f64({3, 4})}, make_op<ScaleOp>(-0.5, 3.0, false));
}

TEST_CASE("assign's vjp passes the grad through", "[dialect][vjp]") {
  check_vjp({random_f64({3, 4})}, make_op<AssignOp>());
}

TEST_CASE("cast's vjp casts the grad back between float dtypes", "[dialect][vjp]") {
  check_vjp({random_f64({3, 4})}, make_op<CastOp>(DataType::Float64));
  // f64 -> f32: the f32 grad comes back as f64, the same numbers.
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{-1, 2}, DataType::Float64).result();
  auto w = b.create<DataOp>("w", std::vector<std::int64_t>{-1, 2}, DataType::Float32).result();
  auto c = b.create<CastOp>(x, DataType::Float32);
  auto g = call_vjp(b, c.operation(), {w});
  REQUIRE(g[0]);
  CHECK(shaped_data_type(g[0].type()) == DataType::Float64);
  Executor exe;
  auto out = exe.run(p,
                     {{"x", Tensor::from_vector<double>({3, 2}, {1, 2, 3, 4, 5, 6})},
                      {"w", Tensor::from_vector<float>({3, 2}, {0.5f, -1, 2, 3, -4, 0.25f})}},
                     {g[0]});
  CHECK(out[0].to_vector<double>() == std::vector<double>{0.5, -1, 2, 3, -4, 0.25});
}

TEST_CASE("add_n's vjp gives every operand the grad", "[dialect][vjp]") {
  check_vjp({random_f64({2, 3}, -1, 1, 1), random_f64({2, 3}, -1, 1, 2), random_f64({2, 3}, -1, 1, 3)},
            make_op<AddNOp>());
}

// ---- null grads ----

TEST_CASE("a vjp asked with null out_grads returns null grads", "[dialect][vjp]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{2, 3}, DataType::Float64).result();
  auto y = b.create<DataOp>("y", std::vector<std::int64_t>{3}, DataType::Float64).result();
  for (Operation* op : {b.create<AddOp>(x, y).operation(), b.create<MulOp>(x, y).operation(),
                        b.create<MatmulOp>(x, x, false, true).operation(),
                        b.create<ReluOp>(x).operation(), b.create<AddNOp>(std::vector<Value>{x, x}).operation()}) {
    INFO(op->name());
    std::size_t before = p.block().size();
    auto g = call_vjp(b, op, {Value()});
    REQUIRE(g.size() == op->num_operands());
    for (Value v : g) CHECK(!v);
    CHECK(p.block().size() == before);  // no op was added
  }
}

TEST_CASE("integer operands get a null grad", "[dialect][vjp]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{2, 3}, DataType::Int64).result();
  auto w = b.create<DataOp>("w", std::vector<std::int64_t>{2, 3}, DataType::Int64).result();
  for (Operation* op : {b.create<AddOp>(x, x).operation(), b.create<MulOp>(x, x).operation(),
                        b.create<SquareOp>(x).operation()}) {
    INFO(op->name());
    auto g = call_vjp(b, op, {w});
    for (Value v : g) CHECK(!v);
  }
  // Float → int cast: no grad flows back.
  auto f = b.create<DataOp>("f", std::vector<std::int64_t>{2, 3}, DataType::Float64).result();
  auto c = b.create<CastOp>(f, DataType::Int64);
  CHECK(!call_vjp(b, c.operation(), {w})[0]);
}

TEST_CASE("a vjp given the wrong number of out_grads is an error naming the op",
          "[dialect][vjp]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{2}, DataType::Float64).result();
  auto add = b.create<AddOp>(x, x);
  try {
    call_vjp(b, add.operation(), {x, x});
    FAIL("no kiln::Error");
  } catch (const Error& e) {
    CHECK_THAT(e.message(), Catch::Contains("kiln.add"));
    CHECK_THAT(e.message(), Catch::Contains("2"));
  }
}

// ---- unary math ----

TEST_CASE("the trigonometric, hyperbolic and erf ops' vjps match finite differences",
          "[dialect][vjp]") {
  auto check = [](auto op, double lo, double hi) {
    check_vjp({random_f64({3, 4}, lo, hi, 11)}, op);
  };
  check(make_op<SinOp>(), -3, 3);
  check(make_op<CosOp>(), -3, 3);
  check(make_op<TanOp>(), -1.2, 1.2);
  check(make_op<AsinOp>(), -0.9, 0.9);
  check(make_op<AcosOp>(), -0.9, 0.9);
  check(make_op<AtanOp>(), -3, 3);
  check(make_op<SinhOp>(), -2, 2);
  check(make_op<CoshOp>(), -2, 2);
  check(make_op<AsinhOp>(), -3, 3);
  check(make_op<AcoshOp>(), 1.1, 4);
  check(make_op<AtanhOp>(), -0.9, 0.9);
  check(make_op<ErfOp>(), -2, 2);
}

TEST_CASE("floor, ceil, round and sign have a zero gradient away from their jumps",
          "[dialect][vjp]") {
  // Values in (k + 0.2, k + 0.4): no finite-difference step crosses a jump.
  Tensor x = random_f64({2, 5}, 0.2, 0.4, 5);
  for (std::int64_t i = 0; i < x.numel(); ++i) x.data<double>()[i] += static_cast<double>(i % 5) - 2;
  check_vjp({x}, make_op<FloorOp>());
  check_vjp({x}, make_op<CeilOp>());
  check_vjp({x}, make_op<RoundOp>());
  check_vjp({x}, make_op<SignOp>());
}

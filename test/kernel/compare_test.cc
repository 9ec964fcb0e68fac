// Kernel tests of the ops of kiln/dialect/compare_ops.h against hand-computed
// values: comparisons and logic with broadcasting, isnan / isfinite, where,
// clip, masked_fill, triu / tril and clip_grad.
#include <cmath>
#include <limits>

#include "kernel/kernel_test_util.h"

using namespace kiln;
using namespace kiln_test;

namespace {
using B = std::vector<bool>;
Tensor bools(const Dims& d, const B& v) { return Tensor::from_vector<bool>(d, v); }
}  // namespace

TEST_CASE("comparisons give bool results elementwise", "[kernel][compare]") {
  Tensor x = f32({4}, {1, 2, 3, 4}), y = f32({4}, {2, 2, 2, 2});
  CHECK(run_op<EqualOp>({x, y}).out().to_vector<bool>() == B{false, true, false, false});
  CHECK(run_op<NotEqualOp>({x, y}).out().to_vector<bool>() == B{true, false, true, true});
  CHECK(run_op<LessThanOp>({x, y}).out().to_vector<bool>() == B{true, false, false, false});
  CHECK(run_op<LessEqualOp>({x, y}).out().to_vector<bool>() == B{true, true, false, false});
  CHECK(run_op<GreaterThanOp>({x, y}).out().to_vector<bool>() == B{false, false, true, true});
  CHECK(run_op<GreaterEqualOp>({x, y}).out().to_vector<bool>() == B{false, true, true, true});
  auto r = run_op<LessThanOp>({x, y});
  CHECK(r.out().dtype() == DataType::Bool);
}

TEST_CASE("comparisons broadcast numpy-style", "[kernel][compare]") {
  // [2, 1] vs [3]: out[i][j] = x[i] < y[j].
  Tensor x = f32({2, 1}, {1, 5}), y = f32({3}, {0, 2, 6});
  auto r = run_op<LessThanOp>({x, y});
  CHECK(r.out().dims() == Dims{2, 3});
  CHECK(r.out().to_vector<bool>() == B{false, true, true, false, false, true});
  // A scalar on either side.
  Tensor s = f32({}, {2});
  CHECK(run_op<GreaterEqualOp>({f32({3}, {1, 2, 3}), s}).out().to_vector<bool>() ==
        B{false, true, true});
  CHECK(run_op<GreaterEqualOp>({s, f32({3}, {1, 2, 3})}).out().to_vector<bool>() ==
        B{true, true, false});
  // A middle dim broadcast: [2, 1, 2] vs [2, 3, 2] through the plan.
  Tensor a = Tensor::from_vector<std::int64_t>({2, 1, 2}, {0, 1, 2, 3});
  Tensor b = Tensor::from_vector<std::int64_t>({2, 3, 2}, {0, 0, 1, 1, 2, 2, 2, 2, 3, 3, 0, 0});
  CHECK(run_op<EqualOp>({a, b}).out().to_vector<bool>() ==
        B{true, false, false, true, false, false, true, false, false, true, false, false});
}

TEST_CASE("comparisons take f64, i32, i64, and equal / not_equal take bool", "[kernel][compare]") {
  CHECK(run_op<GreaterThanOp>({Tensor::from_vector<double>({2}, {1.5, -1}),
                               Tensor::from_vector<double>({2}, {1, -1})})
            .out()
            .to_vector<bool>() == B{true, false});
  CHECK(run_op<LessEqualOp>({Tensor::from_vector<std::int32_t>({3}, {-1, 0, 7}),
                             Tensor::from_vector<std::int32_t>({}, {0})})
            .out()
            .to_vector<bool>() == B{true, true, false});
  CHECK(run_op<EqualOp>({bools({3}, {true, false, true}), bools({3}, {true, true, false})})
            .out()
            .to_vector<bool>() == B{true, false, false});
  CHECK(run_op<NotEqualOp>({bools({3}, {true, false, true}), bools({1}, {true})})
            .out()
            .to_vector<bool>() == B{false, true, false});
}

TEST_CASE("NaN compares unequal to everything, itself included", "[kernel][compare]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = f32({2}, {nan, 1}), y = f32({2}, {nan, nan});
  CHECK(run_op<EqualOp>({x, y}).out().to_vector<bool>() == B{false, false});
  CHECK(run_op<NotEqualOp>({x, y}).out().to_vector<bool>() == B{true, true});
  CHECK(run_op<LessEqualOp>({x, y}).out().to_vector<bool>() == B{false, false});
}

TEST_CASE("logical and / or / xor broadcast bools and logical_not negates", "[kernel][compare]") {
  Tensor a = bools({2, 2}, {true, true, false, false}), b = bools({2}, {true, false});
  CHECK(run_op<LogicalAndOp>({a, b}).out().to_vector<bool>() == B{true, false, false, false});
  CHECK(run_op<LogicalOrOp>({a, b}).out().to_vector<bool>() == B{true, true, true, false});
  CHECK(run_op<LogicalXorOp>({a, b}).out().to_vector<bool>() == B{false, true, true, false});
  CHECK(run_op<LogicalNotOp>({b}).out().to_vector<bool>() == B{false, true});
}

TEST_CASE("isnan and isfinite classify NaN, infinities and numbers", "[kernel][compare]") {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor x = Tensor::from_vector<double>({5}, {0, -2.5, inf, -inf, nan});
  CHECK(run_op<IsNanOp>({x}).out().to_vector<bool>() == B{false, false, false, false, true});
  CHECK(run_op<IsFiniteOp>({x}).out().to_vector<bool>() == B{true, true, false, false, false});
  Tensor xf = f32({3}, {1, std::numeric_limits<float>::infinity(), std::nanf("")});
  CHECK(run_op<IsFiniteOp>({xf}).out().to_vector<bool>() == B{true, false, false});
}

TEST_CASE("where picks x where cond holds and y elsewhere, broadcasting all three",
          "[kernel][compare]") {
  Tensor c = bools({3}, {true, false, true});
  CHECK(run_op<WhereOp>({c, f32({3}, {1, 2, 3}), f32({3}, {-1, -2, -3})}).out().to_vector<float>() ==
        std::vector<float>{1, -2, 3});
  // cond [2, 1], x [3], y scalar -> [2, 3].
  Tensor c2 = bools({2, 1}, {true, false});
  auto r = run_op<WhereOp>({c2, f32({3}, {1, 2, 3}), f32({}, {0})});
  CHECK(r.out().dims() == Dims{2, 3});
  CHECK(r.out().to_vector<float>() == std::vector<float>{1, 2, 3, 0, 0, 0});
  // cond [1, 3], x [2, 1], y [2, 3]; integer values.
  Tensor c3 = bools({1, 3}, {false, true, false});
  auto r3 = run_op<WhereOp>({c3, Tensor::from_vector<std::int64_t>({2, 1}, {10, 20}),
                             Tensor::from_vector<std::int64_t>({2, 3}, {1, 2, 3, 4, 5, 6})});
  CHECK(r3.out().to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 10, 3, 4, 20, 6});
}

TEST_CASE("clip clamps into [min, max] as torch.clamp does", "[kernel][compare]") {
  Tensor x = f32({5}, {-3, -1, 0, 1, 3});
  CHECK(run_op<ClipOp>({x}, -1.0, 2.0).out().to_vector<float>() == std::vector<float>{-1, -1, 0, 1, 2});
  // min > max: every element becomes max.
  CHECK(run_op<ClipOp>({x}, 2.0, 1.0).out().to_vector<float>() == std::vector<float>(5, 1));
  // NaN stays NaN.
  auto n = run_op<ClipOp>({f32({1}, {std::nanf("")})}, 0.0, 1.0).out().to_vector<float>();
  CHECK(std::isnan(n[0]));
  // Integers; bounds beyond the type's range saturate.
  Tensor xi = Tensor::from_vector<std::int32_t>({3}, {-5, 0, 5});
  CHECK(run_op<ClipOp>({xi}, -1.0, 1e30).out().to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{-1, 0, 5});
}

TEST_CASE("clip_grad passes dout where min <= x <= max and zeroes it elsewhere, NaN included",
          "[kernel][compare]") {
  Tensor x = f32({6}, {-3, -1, 0, 2, 3, std::nanf("")}), d = f32({6}, {1, 2, 3, 4, 5, 6});
  auto r = run_op<GradOf<ClipOp>>({x, d}, -1.0, 2.0);
  CHECK(r.out().to_vector<float>() == std::vector<float>{0, 2, 3, 4, 0, 0});
}

TEST_CASE("masked_fill writes the value where the broadcast mask holds", "[kernel][compare]") {
  Tensor x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  CHECK(run_op<MaskedFillOp>({x, bools({2, 3}, {true, false, false, false, false, true})}, -9.0)
            .out()
            .to_vector<float>() == std::vector<float>{-9, 2, 3, 4, 5, -9});
  // A row mask [3] broadcast over rows, and a column mask [2, 1].
  CHECK(run_op<MaskedFillOp>({x, bools({3}, {false, true, false})}, 0.0).out().to_vector<float>() ==
        std::vector<float>{1, 0, 3, 4, 0, 6});
  CHECK(run_op<MaskedFillOp>({x, bools({2, 1}, {false, true})}, 7.0).out().to_vector<float>() ==
        std::vector<float>{1, 2, 3, 7, 7, 7});
  // A scalar mask: all or nothing.
  CHECK(run_op<MaskedFillOp>({x, bools({}, {true})}, 1.5).out().to_vector<float>() ==
        std::vector<float>(6, 1.5f));
  CHECK(run_op<MaskedFillOp>({x, bools({}, {false})}, 1.5).out().to_vector<float>() ==
        x.to_vector<float>());
  // -inf, as attention masks use.
  auto r = run_op<MaskedFillOp>({f32({2}, {1, 2}), bools({2}, {false, true})},
                                -std::numeric_limits<double>::infinity());
  CHECK(std::isinf(r.out().to_vector<float>()[1]));
  CHECK(run_op<MaskedFillOp>({Tensor::from_vector<std::int64_t>({2}, {1, 2}), bools({2}, {true, false})}, 4.0)
            .out()
            .to_vector<std::int64_t>() == std::vector<std::int64_t>{4, 2});
}

TEST_CASE("triu and tril keep a triangle of each matrix in a batch", "[kernel][compare]") {
  Tensor x = f32({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(run_op<TriuOp>({x}, std::int64_t{0}).out().to_vector<float>() ==
        std::vector<float>{1, 2, 3, 0, 5, 6, 0, 0, 9});
  CHECK(run_op<TrilOp>({x}, std::int64_t{0}).out().to_vector<float>() ==
        std::vector<float>{1, 0, 0, 4, 5, 0, 7, 8, 9});
  CHECK(run_op<TriuOp>({x}, std::int64_t{1}).out().to_vector<float>() ==
        std::vector<float>{0, 2, 3, 0, 0, 6, 0, 0, 0});
  CHECK(run_op<TrilOp>({x}, std::int64_t{-1}).out().to_vector<float>() ==
        std::vector<float>{0, 0, 0, 4, 0, 0, 7, 8, 0});
  // Diagonals past the matrix keep all or nothing.
  CHECK(run_op<TriuOp>({x}, std::int64_t{-5}).out().to_vector<float>() == x.to_vector<float>());
  CHECK(run_op<TrilOp>({x}, std::int64_t{-5}).out().to_vector<float>() == std::vector<float>(9, 0));
  // A batch of two 2x3 matrices.
  Tensor b = f32({2, 2, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  CHECK(run_op<TrilOp>({b}, std::int64_t{0}).out().to_vector<float>() ==
        std::vector<float>{1, 0, 0, 4, 5, 0, 7, 0, 0, 10, 11, 0});
  // A causal mask from a bool matrix of ones.
  CHECK(run_op<TrilOp>({bools({2, 2}, {true, true, true, true})}, std::int64_t{0})
            .out()
            .to_vector<bool>() == B{true, false, true, true});
}

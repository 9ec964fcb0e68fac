// The CUDA kernels of the elementwise, comparison and logical families,
// gelu, add_n and matmul against their
// CPU kernels on the same inputs ([cuda]: skipped without a device). The
// tolerance is stated per check: exact for integers and for +, -, ·, max,
// min (one IEEE operation each); 1e-6 relative for the transcendental
// functions (CUDA's and glibc's libm differ in the last bits); 1e-5
// absolute and relative for f32 matmul (cuBLAS sums in another order than
// OpenBLAS).
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernel/cuda_test_util.h"

using namespace kiln;
using kiln_test::filled;
using kiln_test::integers;
using kiln_test::have_cuda;
using kiln_test::run_cuda_op;
using kiln_test::run_op;

namespace {


// atol by default: 0 for exact checks, else 1e-12.
template <typename T>
void check_matches(const Tensor& got, const Tensor& want, double rtol, double atol = -1) {
  kiln_test::check_same<T>(got, want, rtol, atol >= 0 ? atol : rtol == 0 ? 0 : 1e-12);
}

const std::vector<std::pair<Dims, Dims>> kShapes = {
    {{3, 4}, {3, 4}}, {{3, 4}, {}},         {{3, 4}, {4}},         {{3, 1, 5}, {1, 4, 1}},
    {{}, {2, 5}},     {{0, 3}, {3}},        {{2, 3, 4, 5}, {3, 1, 5}}, {{257, 129}, {257, 129}},
};

template <typename OpT, typename T>
void compare_binary(double lo, double hi, double rtol) {
  std::uint32_t seed = 11;
  for (const auto& [xd, yd] : kShapes) {
    INFO(OpT::name << " " << to_string(data_type_of<T>) << " [" << xd.to_string() << "] with ["
                   << yd.to_string() << "]");
    Tensor x, y;
    if constexpr (std::is_integral_v<T>) {
      x = integers<T>(xd, seed++, lo, hi);
      y = integers<T>(yd, seed++, lo, hi);
    } else {
      x = filled<T>(xd, lo, hi, seed++);
      y = filled<T>(yd, lo, hi, seed++);
    }
    check_matches<T>(run_cuda_op<OpT>({x, y}).out(), run_op<OpT>({x, y}).out(), rtol);
  }
}

}  // namespace

TEST_CASE("CUDA binary kernels broadcast like the CPU's, exactly for +, -, *, max and min",
          "[cuda][kernel]") {
  if (!have_cuda()) return;
  compare_binary<AddOp, float>(-4, 4, 0);
  compare_binary<SubOp, double>(-4, 4, 0);
  compare_binary<MulOp, float>(-4, 4, 0);
  compare_binary<MaximumOp, double>(-4, 4, 0);
  compare_binary<MinimumOp, float>(-4, 4, 0);
  compare_binary<AddOp, std::int32_t>(-100, 100, 0);
  compare_binary<MulOp, std::int64_t>(-100, 100, 0);
  compare_binary<SubOp, std::uint8_t>(0, 255, 0);
  compare_binary<MaximumOp, std::int16_t>(-300, 300, 0);
  compare_binary<ShiftLeftOp, std::uint32_t>(0, 40, 0);
  compare_binary<ShiftRightOp, std::int64_t>(-1000, 70, 0);
}

TEST_CASE("CUDA div, pow, mod and fmod match the CPU's to 1e-6", "[cuda][kernel]") {
  if (!have_cuda()) return;
  compare_binary<DivOp, float>(0.5, 4, 1e-6);
  compare_binary<DivOp, std::int32_t>(1, 50, 0);
  compare_binary<PowOp, double>(0.5, 3, 1e-12);
  compare_binary<PowOp, float>(0.5, 3, 1e-6);
  compare_binary<ModOp, float>(0.5, 7, 1e-6);
  compare_binary<ModOp, std::int64_t>(1, 50, 0);
  compare_binary<FmodOp, double>(0.5, 7, 1e-12);
  // An integer divisor of 0 gives 0 on CUDA (the CPU raises an error).
  auto x = Tensor::from_vector<std::int32_t>({2}, {7, 8});
  auto z = Tensor::from_vector<std::int32_t>({2}, {0, 2});
  CHECK(run_cuda_op<DivOp>({x, z}).out().to_vector<std::int32_t>() == std::vector<std::int32_t>{0, 4});
}

template <typename OpT>
void compare_unary(double lo, double hi, double rtol) {
  INFO(OpT::name);
  for (const Dims& d : {Dims{}, Dims{7}, Dims{33, 65}, Dims{0, 4}}) {
    Tensor x = filled<float>(d, lo, hi, 5);
    check_matches<float>(run_cuda_op<OpT>({x}).out(), run_op<OpT>({x}).out(), rtol);
    Tensor xd = filled<double>(d, lo, hi, 6);
    check_matches<double>(run_cuda_op<OpT>({xd}).out(), run_op<OpT>({xd}).out(), rtol * 1e-6);
    Tensor dout = filled<float>(d, -1, 1, 7);
    Tensor a = filled<float>(d, lo, hi, 8);
    check_matches<float>(run_cuda_op<GradOf<OpT>>({a, dout}).out(),
                      run_op<GradOf<OpT>>({a, dout}).out(), rtol);
  }
}

TEST_CASE("CUDA unary kernels and their gradients match the CPU's to 1e-6 relative",
          "[cuda][kernel]") {
  if (!have_cuda()) return;
  compare_unary<ReluOp>(-2, 2, 0);
  compare_unary<AbsOp>(-2, 2, 0);
  compare_unary<NegOp>(-2, 2, 0);
  compare_unary<SquareOp>(-2, 2, 1e-6);
  compare_unary<TanhOp>(-3, 3, 2e-6);
  compare_unary<SigmoidOp>(-6, 6, 2e-6);
  compare_unary<ExpOp>(-3, 3, 1e-6);
  compare_unary<LogOp>(0.1, 5, 1e-6);
  compare_unary<SqrtOp>(0.1, 5, 1e-6);
  compare_unary<ErfOp>(-2, 2, 1e-6);
  compare_unary<SinOp>(-3, 3, 1e-6);
  compare_unary<FloorOp>(-3, 3, 0);
  compare_unary<RoundOp>(-3, 3, 0);
  compare_unary<SignOp>(-3, 3, 0);
  auto i = Tensor::from_vector<std::int64_t>({4}, {-3, 0, 5, INT64_MIN + 1});
  CHECK(run_cuda_op<AbsOp>({i}).out().to_vector<std::int64_t>() ==
        run_op<AbsOp>({i}).out().to_vector<std::int64_t>());
}

TEST_CASE("a CUDA in-place unary op overwrites its input's device buffer", "[cuda][kernel]") {
  if (!have_cuda()) return;
  Tensor x = filled<float>({5, 3}, -2, 2, 9);
  auto run = run_cuda_op<Relu_Op>({x});
  CHECK(run.out().to_vector<float>() == run_op<ReluOp>({x}).out().to_vector<float>());
  CHECK(run.outputs[0] == run.inputs[0]);  // one variable
}

TEST_CASE("CUDA matmul (cuBLAS) matches the CPU's for transposes and broadcast batches to 1e-5",
          "[cuda][kernel]") {
  if (!have_cuda()) return;
  struct Case {
    Dims x, y;
    bool tx, ty;
  };
  for (const Case& c : std::vector<Case>{{{16, 16}, {16, 1}, false, false},
                                         {{33, 17}, {17, 65}, false, false},
                                         {{17, 33}, {17, 65}, true, false},
                                         {{33, 17}, {65, 17}, false, true},
                                         {{17, 33}, {65, 17}, true, true},
                                         {{4, 3, 8, 5}, {5, 6}, false, false},
                                         {{4, 3, 8, 5}, {4, 3, 5, 6}, false, false},
                                         {{8, 5}, {2, 5, 6}, false, false},
                                         {{2, 1, 8, 5}, {1, 3, 5, 6}, false, false},
                                         {{3, 0}, {0, 4}, false, false}}) {
    INFO("x [" << c.x.to_string() << "] y [" << c.y.to_string() << "] tx " << c.tx << " ty " << c.ty);
    Tensor x = filled<float>(c.x, -1, 1, 3), y = filled<float>(c.y, -1, 1, 4);
    Tensor want = run_op<MatmulOp>({x, y}, c.tx, c.ty).out();
    // Sums of up to 65 products of [-1, 1) values: absolute error ~1e-6
    // where they cancel.
    check_matches<float>(run_cuda_op<MatmulOp>({x, y}, c.tx, c.ty).out(), want, 1e-5, 1e-5);
    Tensor xd = filled<double>(c.x, -1, 1, 3), yd = filled<double>(c.y, -1, 1, 4);
    check_matches<double>(run_cuda_op<MatmulOp>({xd, yd}, c.tx, c.ty).out(),
                       run_op<MatmulOp>({xd, yd}, c.tx, c.ty).out(), 1e-12, 1e-13);
  }
  KILN_CHECK_ERROR(run_cuda_op<MatmulOp>({filled<float>({2, 3}), filled<float>({2, 3})}),
                   InvalidArgument, {"kiln.matmul"});
}

namespace {

template <typename OpT, typename T>
void compare_bool_result(double lo, double hi) {
  std::uint32_t seed = 21;
  for (const auto& [xd, yd] : kShapes) {
    INFO(OpT::name << " " << to_string(data_type_of<T>) << " [" << xd.to_string() << "] with ["
                   << yd.to_string() << "]");
    // Integers in a small range, so that equal elements occur.
    const Tensor x = integers<T>(xd, seed++, lo, hi), y = integers<T>(yd, seed++, lo, hi);
    const Tensor got = run_cuda_op<OpT>({x, y}).out(), want = run_op<OpT>({x, y}).out();
    REQUIRE(got.dims() == want.dims());
    REQUIRE(got.dtype() == DataType::Bool);
    CHECK(got.to_vector<bool>() == want.to_vector<bool>());
  }
}

Tensor bools(const Dims& d, std::uint32_t seed) {
  auto f = filled<double>(d, 0, 1, seed).to_vector<double>();
  std::vector<bool> v;
  for (double x : f) v.push_back(x < 0.5);
  return Tensor::from_vector<bool>(d, v);
}

}  // namespace

TEST_CASE("CUDA comparisons, logical ops and predicates give the CPU's bools, broadcast",
          "[cuda][kernel]") {
  if (!have_cuda()) return;
  compare_bool_result<EqualOp, float>(-2, 2);
  compare_bool_result<NotEqualOp, std::int64_t>(-2, 2);
  compare_bool_result<LessThanOp, double>(-2, 2);
  compare_bool_result<LessEqualOp, std::int32_t>(-2, 2);
  compare_bool_result<GreaterThanOp, float>(-2, 2);
  compare_bool_result<GreaterEqualOp, std::int64_t>(-2, 2);
  const Tensor a = bools({3, 1, 5}, 1), b = bools({1, 4, 1}, 2);
  CHECK(run_cuda_op<NotEqualOp>({a, b}).out().to_vector<bool>() ==
        run_op<NotEqualOp>({a, b}).out().to_vector<bool>());
  CHECK(run_cuda_op<LogicalAndOp>({a, b}).out().to_vector<bool>() ==
        run_op<LogicalAndOp>({a, b}).out().to_vector<bool>());
  CHECK(run_cuda_op<LogicalOrOp>({a, b}).out().to_vector<bool>() ==
        run_op<LogicalOrOp>({a, b}).out().to_vector<bool>());
  CHECK(run_cuda_op<LogicalXorOp>({a, b}).out().to_vector<bool>() ==
        run_op<LogicalXorOp>({a, b}).out().to_vector<bool>());
  CHECK(run_cuda_op<LogicalNotOp>({a}).out().to_vector<bool>() ==
        run_op<LogicalNotOp>({a}).out().to_vector<bool>());
  const Tensor special = Tensor::from_vector<float>(
      {5}, {1.f, NAN, INFINITY, -INFINITY, -0.f});
  CHECK(run_cuda_op<IsNanOp>({special}).out().to_vector<bool>() ==
        std::vector<bool>{false, true, false, false, false});
  CHECK(run_cuda_op<IsFiniteOp>({special}).out().to_vector<bool>() ==
        std::vector<bool>{true, false, false, false, true});
  KILN_CHECK_ERROR(run_cuda_op<LessThanOp>({filled<float>({2, 3}), filled<float>({4})}),
                   InvalidArgument, {"kiln.less_than"});
}

// The CPU's f32 gelu takes Φ from a vectorized polynomial exp; the device's
// from erfc: 1e-5 apart. f64 is libm's on both.
TEST_CASE("CUDA gelu, both forms, and its gradient match the CPU's to 1e-5 (f32) and 1e-13 (f64)",
          "[cuda][kernel]") {
  if (!have_cuda()) return;
  for (bool approximate : {false, true}) {
    INFO("approximate " << approximate);
    for (const Dims& d : {Dims{}, Dims{7}, Dims{33, 65}, Dims{0, 4}}) {
      const Tensor x = filled<float>(d, -5, 5, 3), dout = filled<float>(d, -1, 1, 4);
      check_matches<float>(run_cuda_op<GeluOp>({x}, approximate).out(),
                        run_op<GeluOp>({x}, approximate).out(), 1e-5, 1e-6);
      check_matches<float>(run_cuda_op<GradOf<GeluOp>>({x, dout}, approximate).out(),
                        run_op<GradOf<GeluOp>>({x, dout}, approximate).out(), 1e-5, 1e-6);
      const Tensor xd = filled<double>(d, -5, 5, 5), dd = filled<double>(d, -1, 1, 6);
      check_matches<double>(run_cuda_op<GeluOp>({xd}, approximate).out(),
                         run_op<GeluOp>({xd}, approximate).out(), 1e-13, 1e-15);
      check_matches<double>(run_cuda_op<GradOf<GeluOp>>({xd, dd}, approximate).out(),
                         run_op<GradOf<GeluOp>>({xd, dd}, approximate).out(), 1e-13, 1e-15);
    }
  }
  KILN_CHECK_ERROR(
      run_cuda_op<GradOf<GeluOp>>({filled<float>({3}), filled<float>({4})}, false),
      InvalidArgument, {"gelu_grad"});
}

TEST_CASE("CUDA add_n sums any number of operands like the CPU", "[cuda][kernel]") {
  if (!have_cuda()) return;
  for (int k : {1, 2, 3, 8, 9, 20}) {
    INFO(k << " operands");
    std::vector<Tensor> in, ind;
    for (int i = 0; i < k; ++i) {
      in.push_back(filled<float>({17, 33}, -1, 1, 100 + i));
      ind.push_back(integers<std::int64_t>({5}, 200 + i, -50, 50));
    }
    // The CPU adds left to right; so does each device thread.
    check_matches<float>(run_cuda_op<AddNOp>(in).out(), run_op<AddNOp>(in).out(), 0);
    CHECK(run_cuda_op<AddNOp>(ind).out().to_vector<std::int64_t>() ==
          run_op<AddNOp>(ind).out().to_vector<std::int64_t>());
  }
  KILN_CHECK_ERROR(run_cuda_op<AddNOp>(std::vector<Tensor>{filled<float>({3}), filled<float>({4})}),
                   InvalidArgument, {"kiln.add_n"});
}

// The CUDA kernels of reduce.cu — sum / mean / max / prod and reduce_as,
// softmax / log_softmax, softmax_with_cross_entropy, layer_norm / rms_norm,
// batch_norm and fused_batch_norm, each with its gradient (and their bf16 /
// f16 forms with f32 parameters, also against the CUDA f32 kernels on the
// widened inputs, rounded once) — against the CPU kernels on the same inputs
// ([cuda]: skipped without a device). Tolerances: exact for max, for
// integer reductions and for the gradients that only copy, scale or pick
// (sum / mean / max / cross-entropy grads); sums and means of floats
// against the CPU's sums in f64 within a bound from the count and Σ|x|
// (compare_float_sum_or_mean); otherwise the results differ in summation
// order (and CUDA's exp / log against glibc's and the CPU's f32 fast_exp),
// so f32 is compared to 1e-5 relative and 1e-6 absolute, f64 to 1e-12
// relative and 1e-13 absolute.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kernel/cuda_test_util.h"
#include "kernel/half_test_util.h"

using namespace kiln;
using kiln_test::filled;
using kiln_test::integers;
using kiln_test::have_cuda;
using kiln_test::run_cuda_op;
using kiln_test::run_op;

namespace {

using Axes = std::vector<std::int64_t>;

template <typename T>
double rtol_of() {
  return std::is_same_v<T, float> ? 1e-5 : 1e-12;
}
template <typename T>
double atol_of() {
  return std::is_same_v<T, float> ? 1e-6 : 1e-13;
}

// got (CUDA) against want (CPU): same dims and dtype, values within rtol /
// atol (0 / 0: bit-equal values, NaN equal to NaN).
template <typename T>
void check_reduced(const Tensor& got, const Tensor& want, double rtol, double atol) {
  REQUIRE(got.dims() == want.dims());
  REQUIRE(got.dtype() == want.dtype());
  kiln_test::check_close<T>(got, want.to_vector<T>(), rtol, atol);
}
template <typename T>
void check_near(const Tensor& got, const Tensor& want) {
  check_reduced<T>(got, want, rtol_of<T>(), atol_of<T>());
}


struct ReduceCase {
  Dims x;
  Axes axes;
  bool keepdim;
};
// Inner, outer, middle and all axes; long rows (a block per output), short
// ones (a thread per output), empty ones, a scalar, and column sums.
const std::vector<ReduceCase> kReduceCases = {
    {{4, 5}, {1}, false},           {{4, 5}, {0}, true},
    {{3, 4, 5}, {1}, false},        {{3, 4, 5}, {0, 2}, true},
    {{3, 4, 5}, {}, false},         {{2, 3000}, {1}, false},
    {{3000, 3}, {0}, false},        {{64, 3}, {1}, true},
    {{2, 1, 7}, {1}, false},        {{}, {}, false},
    {{0, 4}, {1}, false},           {{4, 0}, {1}, true},
    {{5, 2, 3, 2}, {-1, 1}, false},
    // Sums of rows per column in chunks (launch_column_sum): many chunks,
    // columns not a multiple of 32, leading dims merged into one.
    {{1000, 77}, {0}, false},       {{4, 130, 33}, {0, 1}, true},
};

template <typename OpT, typename T>
void compare_reduction(double lo, double hi, double rtol, double atol) {
  std::uint32_t seed = 3;
  for (const auto& c : kReduceCases) {
    if (std::is_same_v<OpT, MaxOp> && c.x.numel() == 0) continue;
    INFO(OpT::name << " " << to_string(data_type_of<T>) << " [" << c.x.to_string() << "] keepdim "
                   << c.keepdim);
    Tensor x;
    if constexpr (std::is_integral_v<T>)
      x = integers<T>(c.x, seed++, lo, hi);
    else
      x = filled<T>(c.x, lo, hi, seed++);
    check_reduced<T>(run_cuda_op<OpT>({x}, c.axes, c.keepdim).out(),
                  run_op<OpT>({x}, c.axes, c.keepdim).out(), rtol, atol);
  }
}

// Sum or mean (OpT) of floating T on the device against the CPU's sum of
// the same values in f64, rounded to T. The device sums f32 in f64 too;
// each f64 sum, in any order, is within (count - 1) · 2^-53 · Σ|x| of the
// exact one, and the result is rounded to T once (a mean: the sum, then the
// quotient, in T). So the two are at most 2 · count · 2^-53 · Σ|x| (a mean:
// its count-th part) plus 4 units of T's rounding (2^-22 relative for f32,
// 2^-51 for f64) apart. An element dropped or added moves a result by |x|,
// far more than that. (The CPU's f32 column sums accumulate in f32: over
// 1000 rows in [-1, 1) they are ~1e-5 off where the sum cancels to ~0.75.)
template <typename OpT, typename T>
void compare_float_sum_or_mean() {
  const double unit = std::is_same_v<T, float> ? 0x1p-22 : 0x1p-51;
  std::uint32_t seed = 3;
  for (const auto& c : kReduceCases) {
    INFO(OpT::name << " " << to_string(data_type_of<T>) << " [" << c.x.to_string() << "] keepdim "
                   << c.keepdim);
    const Tensor x = filled<T>(c.x, -1, 1, seed++);
    const std::vector<T> xv = x.to_vector<T>();
    std::vector<double> wide(xv.begin(), xv.end()), mag(xv.size());
    for (std::size_t i = 0; i < mag.size(); ++i) mag[i] = std::abs(wide[i]);
    const Tensor got = run_cuda_op<OpT>({x}, c.axes, c.keepdim).out();
    const Tensor want = run_op<OpT>({Tensor::from_vector<double>(c.x, wide)}, c.axes, c.keepdim).out();
    const std::vector<double> w = want.to_vector<double>();
    const std::vector<double> abs_sum =
        run_op<OpT>({Tensor::from_vector<double>(c.x, mag)}, c.axes, c.keepdim).out().template to_vector<double>();
    REQUIRE(got.dims() == want.dims());
    REQUIRE(got.dtype() == x.dtype());
    const std::vector<T> g = got.to_vector<T>();
    const double count = want.numel() ? double(x.numel()) / double(want.numel()) : 0;
    for (std::size_t i = 0; i < g.size(); ++i) {
      const double a = g[i], b = static_cast<T>(w[i]);
      const double tol = unit * std::abs(b) + 2 * count * 0x1p-53 * abs_sum[i];
      const bool ok = (std::isnan(a) && std::isnan(b)) || std::abs(a - b) <= tol;
      if (!ok) {
        INFO("element " << i << ": got " << a << ", want " << b << " within " << tol);
        CHECK(ok);
        break;
      }
    }
  }
}

template <typename OpT, typename T>
void compare_reduction_grad(bool with_out, double rtol, double atol) {
  std::uint32_t seed = 30;
  for (const auto& c : kReduceCases) {
    if (c.x.numel() == 0) continue;
    INFO("grad of " << OpT::name << " [" << c.x.to_string() << "]");
    // Few distinct values, so max has ties and prod has zeros.
    Tensor x = integers<T>(c.x, seed++, -2, 3);
    if (!std::is_same_v<OpT, MaxOp> && !std::is_same_v<OpT, ProdOp>)
      x = filled<T>(c.x, -1, 1, seed++);
    const Tensor out = run_op<OpT>({x}, c.axes, c.keepdim).out();
    const Tensor d = filled<T>(out.dims(), -1, 1, seed++);
    std::vector<Tensor> in = with_out ? std::vector<Tensor>{x, out, d} : std::vector<Tensor>{x, d};
    check_reduced<T>(run_cuda_op<GradOf<OpT>>(in, c.axes, c.keepdim).out(),
                  run_op<GradOf<OpT>>(in, c.axes, c.keepdim).out(), rtol, atol);
  }
}

}  // namespace

TEST_CASE("CUDA sum, mean, max and prod over axes match the CPU's", "[cuda][kernel]") {
  if (!have_cuda()) return;
  compare_float_sum_or_mean<SumOp, float>();
  compare_float_sum_or_mean<SumOp, double>();
  compare_reduction<SumOp, std::int32_t>(-100, 100, 0, 0);
  compare_reduction<SumOp, std::int64_t>(-100, 100, 0, 0);
  compare_float_sum_or_mean<MeanOp, float>();
  compare_float_sum_or_mean<MeanOp, double>();
  compare_reduction<MaxOp, float>(-1, 1, 0, 0);
  compare_reduction<MaxOp, std::int64_t>(-100, 100, 0, 0);
  compare_reduction<ProdOp, double>(0.9, 1.1, 1e-12, 1e-14);
  compare_reduction<ProdOp, std::int32_t>(-3, 3, 0, 0);
  // An empty axis: max fails as on the CPU; mean is NaN, prod 1.
  const Tensor e = Tensor::from_vector<float>({2, 0}, {});
  KILN_CHECK_ERROR(run_cuda_op<MaxOp>({e}, Axes{1}, false), InvalidArgument,
                   {"kiln.max", "empty axis"});
  CHECK(std::isnan(run_cuda_op<MeanOp>({e}, Axes{1}, false).out().to_vector<float>()[0]));
  CHECK(run_cuda_op<ProdOp>({e}, Axes{1}, true).out().to_vector<float>() ==
        std::vector<float>{1, 1});
  KILN_CHECK_ERROR(run_cuda_op<SumOp>({filled<float>({2, 3})}, Axes{2}, false), InvalidArgument,
                   {"kiln.sum"});
}

TEST_CASE("CUDA reduction gradients match the CPU's", "[cuda][kernel]") {
  if (!have_cuda()) return;
  compare_reduction_grad<SumOp, float>(false, 0, 0);
  compare_reduction_grad<MeanOp, double>(false, 0, 0);
  compare_reduction_grad<MaxOp, float>(true, 0, 0);
  compare_reduction_grad<ProdOp, double>(false, 1e-12, 1e-13);
  compare_reduction_grad<ProdOp, float>(false, 1e-5, 1e-6);
  KILN_CHECK_ERROR(
      run_cuda_op<GradOf<SumOp>>({filled<float>({2, 3}), filled<float>({3})}, Axes{0}, true),
      InvalidArgument, {"kiln.sum_grad", "[1, 3]"});
}

TEST_CASE("CUDA reduce_as sums down to a target's dims like the CPU", "[cuda][kernel]") {
  if (!have_cuda()) return;
  const std::vector<std::pair<Dims, Dims>> cases = {
      {{4, 3}, {3}},    {{4, 3}, {1, 3}}, {{2, 3, 5}, {3, 1}}, {{8, 6, 7, 7}, {6, 1, 1}},
      {{2, 3}, {2, 3}}, {{5, 4}, {}},     {{0, 3}, {3}},    {{8, 64, 33}, {33}}, {{700, 40}, {1, 40}}};
  for (const auto& [xd, td] : cases) {
    INFO("[" << xd.to_string() << "] down to [" << td.to_string() << "]");
    const Tensor x = filled<float>(xd, -1, 1, 5), t = Tensor::zeros(td, DataType::Float32);
    check_reduced<float>(run_cuda_op<ReduceAsOp>({x, t}).out(), run_op<ReduceAsOp>({x, t}).out(), 1e-6,
                      1e-6);
    const Tensor xd64 = filled<double>(xd, -1, 1, 6), t64 = Tensor::zeros(td, DataType::Float64);
    check_near<double>(run_cuda_op<ReduceAsOp>({xd64, t64}).out(),
                       run_op<ReduceAsOp>({xd64, t64}).out());
  }
}

TEST_CASE("CUDA softmax and log_softmax along any axis match the CPU's", "[cuda][kernel]") {
  if (!have_cuda()) return;
  struct Case {
    Dims x;
    std::int64_t axis;
  };
  for (const Case& c : std::vector<Case>{{{4, 10}, -1},
                                         {{4, 10}, 0},
                                         {{3, 5, 7}, 1},
                                         {{2, 5000}, 1},
                                         {{6, 3}, 1},
                                         {{2, 3, 4}, -3},
                                         {{0, 5}, 1}}) {
    INFO("[" << c.x.to_string() << "] axis " << c.axis);
    for (int log = 0; log < 2; ++log) {
      const Tensor x = filled<float>(c.x, -5, 5, 7), d = filled<float>(c.x, -1, 1, 8);
      const Tensor xd = filled<double>(c.x, -5, 5, 7), dd = filled<double>(c.x, -1, 1, 8);
      if (log) {
        check_near<float>(run_cuda_op<LogSoftmaxOp>({x}, c.axis).out(),
                          run_op<LogSoftmaxOp>({x}, c.axis).out());
        check_near<double>(run_cuda_op<LogSoftmaxOp>({xd}, c.axis).out(),
                           run_op<LogSoftmaxOp>({xd}, c.axis).out());
        const Tensor y = run_op<LogSoftmaxOp>({x}, c.axis).out();
        check_near<float>(run_cuda_op<GradOf<LogSoftmaxOp>>({y, d}, c.axis).out(),
                          run_op<GradOf<LogSoftmaxOp>>({y, d}, c.axis).out());
      } else {
        check_near<float>(run_cuda_op<SoftmaxOp>({x}, c.axis).out(),
                          run_op<SoftmaxOp>({x}, c.axis).out());
        check_near<double>(run_cuda_op<SoftmaxOp>({xd}, c.axis).out(),
                           run_op<SoftmaxOp>({xd}, c.axis).out());
        const Tensor y = run_op<SoftmaxOp>({xd}, c.axis).out();
        check_near<double>(run_cuda_op<GradOf<SoftmaxOp>>({y, dd}, c.axis).out(),
                           run_op<GradOf<SoftmaxOp>>({y, dd}, c.axis).out());
      }
    }
  }
  // A row of -inf: softmax is NaN-free where the CPU's is.
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor m = Tensor::from_vector<float>({2, 3}, {-inf, -inf, -inf, 0, -inf, 1});
  check_near<float>(run_cuda_op<SoftmaxOp>({m}, std::int64_t{-1}).out(),
                    run_op<SoftmaxOp>({m}, std::int64_t{-1}).out());
  KILN_CHECK_ERROR(run_cuda_op<SoftmaxOp>({filled<float>({2, 3})}, std::int64_t{2}),
                   InvalidArgument, {"kiln.softmax", "axis 2"});
}

TEST_CASE("CUDA softmax_with_cross_entropy and its gradient match the CPU's", "[cuda][kernel]") {
  if (!have_cuda()) return;
  const Tensor x = filled<float>({6, 5}, -3, 3, 1);
  const Tensor label = Tensor::from_vector<std::int64_t>({6}, {0, 4, -100, 2, 1, 3});
  const Tensor label32 = Tensor::from_vector<std::int32_t>({6, 1}, {0, 4, 1, 2, 1, -100});
  for (const Tensor& y : {label, label32}) {
    auto got = run_cuda_op<SoftmaxWithCrossEntropyOp>({x, y});
    auto want = run_op<SoftmaxWithCrossEntropyOp>({x, y});
    check_near<float>(got.out(0), want.out(0));
    check_near<float>(got.out(1), want.out(1));
    const Tensor dl = filled<float>({6, 1}, -1, 1, 2);
    check_reduced<float>(
        run_cuda_op<GradOf<SoftmaxWithCrossEntropyOp>>({want.out(0), y, dl}, std::int64_t{-100})
            .out(),
        run_op<GradOf<SoftmaxWithCrossEntropyOp>>({want.out(0), y, dl}, std::int64_t{-100}).out(),
        0, 0);
  }
  const Tensor wide = filled<double>({3, 4000}, -3, 3, 3);  // a block per row
  const Tensor wl = Tensor::from_vector<std::int64_t>({3}, {17, 3999, 0});
  auto got = run_cuda_op<SoftmaxWithCrossEntropyOp>({wide, wl});
  auto want = run_op<SoftmaxWithCrossEntropyOp>({wide, wl});
  check_near<double>(got.out(0), want.out(0));
  check_near<double>(got.out(1), want.out(1));
  // A label outside [0, C): the CPU's error, naming the row and the label.
  const Tensor bad = Tensor::from_vector<std::int64_t>({6}, {0, 1, 2, 5, 1, 7});
  KILN_CHECK_ERROR(run_cuda_op<SoftmaxWithCrossEntropyOp>({x, bad}), InvalidArgument,
                   {"kiln.softmax_with_cross_entropy", "row 3 has label 5", "outside [0, 5)"});
  KILN_CHECK_ERROR(run_cuda_op<GradOf<SoftmaxWithCrossEntropyOp>>({x, bad, filled<float>({6, 1})},
                                                                  std::int64_t{-100}),
                   InvalidArgument, {"row 3 has label 5"});
}

TEST_CASE("CUDA cross_entropy (one read per row, no softmax) and its gradient match the CPU's",
          "[cuda][kernel]") {
  if (!have_cuda()) return;
  const float inf = std::numeric_limits<float>::infinity();
  // Short rows (a warp per row), -inf logits, ignored rows, both label dtypes.
  Tensor x = filled<float>({6, 5}, -3, 3, 1);
  x.data<float>()[2] = -inf;
  for (int j = 0; j < 5; ++j) x.data<float>()[20 + j] = j == 3 ? 2.f : -inf;
  const Tensor label = Tensor::from_vector<std::int64_t>({6}, {0, 4, -100, 2, 3, 3});
  const Tensor label32 = Tensor::from_vector<std::int32_t>({6, 1}, {0, 4, 1, 2, 3, -100});
  for (const Tensor& y : {label, label32}) {
    auto got = run_cuda_op<CrossEntropyOp>({x, y});
    auto want = run_op<CrossEntropyOp>({x, y});
    check_near<float>(got.out(0), want.out(0));
    check_near<float>(got.out(1), want.out(1));
    const Tensor dl = filled<float>({6, 1}, -1, 1, 2);
    check_near<float>(
        run_cuda_op<GradOf<CrossEntropyOp>>({x, want.out(1), y, dl}, std::int64_t{-100}).out(),
        run_op<GradOf<CrossEntropyOp>>({x, want.out(1), y, dl}, std::int64_t{-100}).out());
  }
  // A vocabulary's width (a block per row), where each lane's running max
  // grows many times; f32 and f64.
  const Tensor wl = Tensor::from_vector<std::int64_t>({3}, {17, 50256, 0});
  const Tensor wide = filled<float>({3, 50257}, -8, 8, 3);
  auto got = run_cuda_op<CrossEntropyOp>({wide, wl});
  auto want = run_op<CrossEntropyOp>({wide, wl});
  check_near<float>(got.out(0), want.out(0));
  check_near<float>(got.out(1), want.out(1));
  const Tensor wide64 = filled<double>({3, 4000}, -3, 3, 3);
  const Tensor wl64 = Tensor::from_vector<std::int64_t>({3}, {17, 3999, 0});
  auto got64 = run_cuda_op<CrossEntropyOp>({wide64, wl64});
  auto want64 = run_op<CrossEntropyOp>({wide64, wl64});
  check_near<double>(got64.out(0), want64.out(0));
  check_near<double>(got64.out(1), want64.out(1));
  const Tensor bad = Tensor::from_vector<std::int64_t>({6}, {0, 1, 2, 5, 1, 7});
  KILN_CHECK_ERROR(run_cuda_op<CrossEntropyOp>({x, bad}), InvalidArgument,
                   {"kiln.cross_entropy", "row 3 has label 5", "outside [0, 5)"});
  // bf16 / f16 logits: f32 loss and lse, the gradient in the logits' dtype,
  // within one 16-bit unit of the CPU's.
  for (DataType dt : {DataType::BFloat16, DataType::Float16}) {
    INFO(to_string(dt));
    const Tensor hx = kiln_test::random_half({4, 3000}, dt, 21);
    const Tensor hl = Tensor::from_vector<std::int64_t>({4}, {0, 2999, -100, 17});
    auto hgot = run_cuda_op<CrossEntropyOp>({hx, hl});
    auto hwant = run_op<CrossEntropyOp>({hx, hl});
    check_near<float>(hgot.out(0), hwant.out(0));
    check_near<float>(hgot.out(1), hwant.out(1));
    const Tensor dl = filled<float>({4, 1}, 0.5, 2, 22);
    const Tensor g = run_cuda_op<GradOf<CrossEntropyOp>>({hx, hwant.out(1), hl, dl}, std::int64_t{-100}).out();
    const Tensor w = run_op<GradOf<CrossEntropyOp>>({hx, hwant.out(1), hl, dl}, std::int64_t{-100}).out();
    REQUIRE(g.dtype() == dt);
    const auto* pg = static_cast<const std::uint16_t*>(g.raw_data());
    const auto* pw = static_cast<const std::uint16_t*>(w.raw_data());
    for (std::int64_t i = 0; i < g.numel(); ++i) {
      const float a = kiln_test::from_half(pg[i], dt), b = kiln_test::from_half(pw[i], dt);
      CHECK(std::abs(a - b) <= 1e-3f + std::abs(b) * (dt == DataType::BFloat16 ? 1.0f / 128 : 1.0f / 1024));
    }
  }
}

TEST_CASE("CUDA layer_norm and rms_norm, forward and backward, match the CPU's", "[cuda][kernel]") {
  if (!have_cuda()) return;
  struct Case {
    Dims x;
    std::int64_t axis;
  };
  for (const Case& c : std::vector<Case>{{{4, 16}, 1},
                                         {{2, 3, 8}, -1},
                                         {{2, 3, 8}, 1},
                                         {{3, 3000}, 1},
                                         {{5, 1}, 1},
                                         {{0, 4}, 1},
                                         // dw / db summed in chunks of rows: many
                                         // chunks, columns not a multiple of 32,
                                         // and more chunks than the cap (1024)
                                         {{1000, 77}, 1},
                                         {{40000, 5}, 1}}) {
    INFO("[" << c.x.to_string() << "] begin_norm_axis " << c.axis);
    std::int64_t n = 1;
    const int a = static_cast<int>(c.axis < 0 ? c.axis + c.x.rank() : c.axis);
    for (int i = a; i < c.x.rank(); ++i) n *= c.x[i];
    const Tensor x = filled<double>(c.x, -2, 2, 1), w = filled<double>({n}, 0.5, 1.5, 2);
    const Tensor b = filled<double>({n}, -1, 1, 3), dy = filled<double>(c.x, -1, 1, 4);
    auto got = run_cuda_op<LayerNormOp>({x, w, b}, c.axis, 1e-5);
    auto want = run_op<LayerNormOp>({x, w, b}, c.axis, 1e-5);
    for (int k = 0; k < 3; ++k) check_near<double>(got.out(k), want.out(k));
    auto gg = run_cuda_op<GradOf<LayerNormOp>>({x, w, want.out(1), want.out(2), dy}, c.axis, 1e-5);
    auto gw = run_op<GradOf<LayerNormOp>>({x, w, want.out(1), want.out(2), dy}, c.axis, 1e-5);
    for (int k = 0; k < 3; ++k) check_near<double>(gg.out(k), gw.out(k));

    const Tensor xf = filled<float>(c.x, -2, 2, 5), wf = filled<float>({n}, 0.5, 1.5, 6);
    const Tensor dyf = filled<float>(c.x, -1, 1, 7);
    auto rg = run_cuda_op<RmsNormOp>({xf, wf}, c.axis, 1e-6);
    auto rw = run_op<RmsNormOp>({xf, wf}, c.axis, 1e-6);
    for (int k = 0; k < 2; ++k) check_near<float>(rg.out(k), rw.out(k));
    auto rgg = run_cuda_op<GradOf<RmsNormOp>>({xf, wf, rw.out(1), dyf}, c.axis, 1e-6);
    auto rgw = run_op<GradOf<RmsNormOp>>({xf, wf, rw.out(1), dyf}, c.axis, 1e-6);
    // dw sums m rows of [-2, 2) · [-1, 1) products, in another order than
    // the CPU's: f32 rounding grows with the rows.
    const double tol = c.x[0] > 100 ? 1e-3 : 1e-5;
    for (int k = 0; k < 2; ++k) check_reduced<float>(rgg.out(k), rgw.out(k), tol, tol);
  }
  KILN_CHECK_ERROR(
      run_cuda_op<LayerNormOp>({filled<float>({2, 4}), filled<float>({3}), filled<float>({4})},
                               std::int64_t{1}, 1e-5),
      InvalidArgument, {"kiln.layer_norm"});
}

// f32 rows up to 1024 columns are held in registers: float4 slots when the
// row length is a multiple of 4 (GPT-2's 768, 1024, 260 with lanes past the
// row's end), scalar slots otherwise (130, 1000 + 2), one or many chunks of
// rows for the parameter gradients.
TEST_CASE("CUDA f32 layer_norm and rms_norm on rows of up to 1024 columns match the CPU's, forward and backward",
          "[cuda][kernel]") {
  if (!have_cuda()) return;
  for (const Dims& d : std::vector<Dims>{{4096, 768}, {64, 1024}, {33, 260}, {300, 130}, {7, 1002}, {5, 4}}) {
    INFO("[" << d.to_string() << "]");
    const std::int64_t n = d[1];
    const Tensor x = filled<float>(d, -2, 2, 11), w = filled<float>({n}, 0.5, 1.5, 12);
    const Tensor b = filled<float>({n}, -1, 1, 13), dy = filled<float>(d, -1, 1, 14);
    const double tol = d[0] > 100 ? 1e-3 : 1e-4;  // dw and db sum the rows in another order
    auto got = run_cuda_op<LayerNormOp>({x, w, b}, std::int64_t{1}, 1e-5);
    auto want = run_op<LayerNormOp>({x, w, b}, std::int64_t{1}, 1e-5);
    for (int k = 0; k < 3; ++k) check_reduced<float>(got.out(k), want.out(k), 1e-4, 1e-4);
    auto gg = run_cuda_op<GradOf<LayerNormOp>>({x, w, want.out(1), want.out(2), dy}, std::int64_t{1}, 1e-5);
    auto gw = run_op<GradOf<LayerNormOp>>({x, w, want.out(1), want.out(2), dy}, std::int64_t{1}, 1e-5);
    for (int k = 0; k < 3; ++k) check_reduced<float>(gg.out(k), gw.out(k), tol, tol);
    auto rg = run_cuda_op<RmsNormOp>({x, w}, std::int64_t{1}, 1e-6);
    auto rw = run_op<RmsNormOp>({x, w}, std::int64_t{1}, 1e-6);
    for (int k = 0; k < 2; ++k) check_reduced<float>(rg.out(k), rw.out(k), 1e-4, 1e-4);
    auto rgg = run_cuda_op<GradOf<RmsNormOp>>({x, w, rw.out(1), dy}, std::int64_t{1}, 1e-6);
    auto rgw = run_op<GradOf<RmsNormOp>>({x, w, rw.out(1), dy}, std::int64_t{1}, 1e-6);
    for (int k = 0; k < 2; ++k) check_reduced<float>(rgg.out(k), rgw.out(k), tol, tol);
  }
}

TEST_CASE("CUDA batch_norm, training and test, and its gradient match the CPU's",
          "[cuda][kernel]") {
  if (!have_cuda()) return;
  for (const Dims& d : {Dims{8, 3, 5, 5}, Dims{4, 6}, Dims{2, 4, 3000}}) {
    INFO("x [" << d.to_string() << "]");
    const std::int64_t c = d[1];
    const Tensor x = filled<double>(d, -2, 2, 1), scale = filled<double>({c}, 0.5, 1.5, 2);
    const Tensor bias = filled<double>({c}, -1, 1, 3), rm = filled<double>({c}, -0.1, 0.1, 4);
    const Tensor rv = filled<double>({c}, 0.5, 1.5, 5), dy = filled<double>(d, -1, 1, 6);
    for (bool is_test : {false, true}) {
      INFO("is_test " << is_test);
      // Copies: the op updates the running statistics in place.
      auto got =
          run_cuda_op<BatchNormOp>({x, scale, bias, rm.clone(), rv.clone()}, 0.9, 1e-5, is_test);
      auto want = run_op<BatchNormOp>({x, scale, bias, rm.clone(), rv.clone()}, 0.9, 1e-5, is_test);
      for (int k = 0; k < 5; ++k) check_near<double>(got.out(k), want.out(k));
      auto gg = run_cuda_op<GradOf<BatchNormOp>>({x, scale, want.out(3), want.out(4), dy}, 0.9,
                                                 1e-5, is_test);
      auto gw =
          run_op<GradOf<BatchNormOp>>({x, scale, want.out(3), want.out(4), dy}, 0.9, 1e-5, is_test);
      for (int k = 0; k < 3; ++k) check_near<double>(gg.out(k), gw.out(k));
    }
  }
  const Tensor e = Tensor::zeros({0, 2}, DataType::Float32),
               one = Tensor::zeros({2}, DataType::Float32);
  KILN_CHECK_ERROR(
      run_cuda_op<BatchNormOp>({e, one, one, one.clone(), one.clone()}, 0.9, 1e-5, false),
      InvalidArgument, {"kiln.batch_norm", "empty batch"});
}

namespace {

// fused_batch_norm's operands over NCHW x of dims d (C >= 5). Channels 0
// and 1: pre-activation exactly 0 and 6 at k = 0 (scale 0, bias 0 or 6).
// Channel 2 holds a NaN. Channels 3 and 4: x all 0 and running mean 0, so
// x̂ = 0 and the pre-activation is exactly their bias, 0 and 6, at k != 0
// (dx shows the mask). The rest random on both sides of 0 and 6; for the
// seeds the test uses, in training at least 1e-3 from either (checked off
// line), farther than the two devices' f32 batch statistics differ.
template <typename T>
struct FusedBatchNormCase {
  Tensor x, scale, bias, rm, rv, dy;
  FusedBatchNormCase(const Dims& d, std::uint32_t seed) {
    const std::int64_t c = d[1], s = d.numel() / (d[0] * c);
    auto xv = filled<T>(d, -3, 5, seed).template to_vector<T>();
    for (std::int64_t n = 0; n < d[0]; ++n)
      for (std::int64_t ch : {3, 4}) std::fill_n(xv.begin() + (n * c + ch) * s, s, T(0));
    xv[static_cast<std::size_t>(2 * s)] = std::numeric_limits<T>::quiet_NaN();
    auto sv = filled<T>(Dims({c}), 1, 4, seed + 1).template to_vector<T>();
    auto bv = filled<T>(Dims({c}), 0, 3, seed + 2).template to_vector<T>();
    auto mv = filled<T>(Dims({c}), -0.5, 0.5, seed + 3).template to_vector<T>();
    sv[0] = sv[1] = T(0);
    bv[0] = bv[3] = T(0);
    bv[1] = bv[4] = T(6);
    mv[3] = mv[4] = T(0);
    x = Tensor::from_vector<T>(d, xv);
    scale = Tensor::from_vector<T>(Dims({c}), sv);
    bias = Tensor::from_vector<T>(Dims({c}), bv);
    rm = Tensor::from_vector<T>(Dims({c}), mv);
    rv = filled<T>(Dims({c}), 0.5, 2, seed + 4);
    dy = filled<T>(d, -1, 1, seed + 5);
  }
};

// f32's batch statistics and gradient sums run in another order on each
// device: 1e-4 relative, 1e-3 absolute (a mask flipped moves a result by a
// whole dy). f64: 1e-11 relative and absolute.
template <typename T>
void check_fused_near(const Tensor& got, const Tensor& want) {
  if constexpr (std::is_same_v<T, float>)
    check_reduced<T>(got, want, 1e-4, 1e-3);
  else
    check_reduced<T>(got, want, 1e-11, 1e-11);
}

// fused_batch_norm (activation act) and its gradient on CUDA against the
// CPU kernels on the same inputs: all five forward results (the running
// statistics updated in place alike), then dx, dscale and dbias; dbias
// shows what each activation passes at 0 (relu nothing, relu6 all) and at
// 6 (both all).
template <typename T>
void check_fused_batch_norm_on_cuda(const Dims& d, const std::string& act, bool is_test,
                                    std::uint32_t seed) {
  INFO("x [" << d.to_string() << "] " << to_string(data_type_of<T>) << " " << act << " is_test "
             << is_test);
  const FusedBatchNormCase<T> k(d, seed);
  const std::string nchw = "NCHW";
  auto got = run_cuda_op<FusedBatchNormOp>({k.x, k.scale, k.bias, k.rm.clone(), k.rv.clone()},
                                           0.9, 1e-5, is_test, nchw, act);
  auto want = run_op<FusedBatchNormOp>({k.x, k.scale, k.bias, k.rm.clone(), k.rv.clone()}, 0.9,
                                       1e-5, is_test, nchw, act);
  for (int i = 0; i < 5; ++i) check_fused_near<T>(got.out(i), want.out(i));
  const std::vector<Tensor> in{k.x, k.scale, k.bias, want.out(3), want.out(4), k.dy};
  auto gg = run_cuda_op<GradOf<FusedBatchNormOp>>(in, 0.9, 1e-5, is_test, nchw, act);
  auto gw = run_op<GradOf<FusedBatchNormOp>>(in, 0.9, 1e-5, is_test, nchw, act);
  for (int i = 0; i < 3; ++i) check_fused_near<T>(gg.out(i), gw.out(i));
  const std::vector<T> db = gg.out(2).template to_vector<T>();
  for (std::size_t ch : {0, 3}) CHECK((db[ch] == T(0)) == (act == "relu"));
  for (std::size_t ch : {1, 4}) CHECK(db[ch] != T(0));
}

}  // namespace

TEST_CASE("CUDA fused_batch_norm with relu or relu6 and its gradient match the CPU's, training and "
          "test, f32 and f64, at pre-activations exactly 0 and 6 and at NaN",
          "[cuda][kernel][norm]") {
  if (!have_cuda()) return;
  // Channels and images of no whole number of blocks; a channel long enough
  // for a whole block (2442 elements); one element per image and channel.
  const std::pair<Dims, std::uint32_t> cases[] = {
      {Dims{2, 7, 7, 9}, 41}, {Dims{3, 300, 3, 3}, 42}, {Dims{2, 6, 33, 37}, 42}, {Dims{4, 6}, 41}};
  for (const std::string act : {"relu", "relu6"})
    for (bool is_test : {false, true})
      for (const auto& [d, seed] : cases) {
        check_fused_batch_norm_on_cuda<float>(d, act, is_test, seed);
        check_fused_batch_norm_on_cuda<double>(d, act, is_test, seed);
      }
}

TEST_CASE("CUDA fused_batch_norm and its gradient refuse NHWC and a dy not shaped like x, naming the "
          "op",
          "[cuda][kernel][norm]") {
  if (!have_cuda()) return;
  const Tensor x = filled<float>(Dims{2, 4, 4, 3}, -1, 1, 1), c = filled<float>(Dims{3}, 0.5, 1, 2);
  KILN_CHECK_ERROR(run_cuda_op<FusedBatchNormOp>({x, c, c, c.clone(), c.clone()}, 0.9, 1e-5, false,
                                                 std::string("NHWC"), std::string("relu")),
                   Unimplemented, {"kiln.fused_batch_norm", "NHWC", "CUDA"});
  const Tensor xn = filled<float>(Dims{2, 3, 4, 4}, -1, 1, 3), small = filled<float>(Dims{2, 3, 4, 2});
  KILN_CHECK_ERROR(run_cuda_op<GradOf<FusedBatchNormOp>>({xn, c, c, c, c, small}, 0.9, 1e-5, false,
                                                         std::string("NCHW"), std::string("relu6")),
                   InvalidArgument, {"kiln.fused_batch_norm_grad"});
}

namespace {

using kiln_test::KernelRun;

Tensor widened_half(const Tensor& t) {
  Tensor f = Tensor::empty(t.dims(), DataType::Float32);
  const auto* p = static_cast<const std::uint16_t*>(t.raw_data());
  for (std::int64_t i = 0; i < t.numel(); ++i) f.data<float>()[i] = kiln_test::from_half(p[i], t.dtype());
  return f;
}

// got (16-bit) is want (f32) rounded to got's dtype, element for element.
void check_rounded(const Tensor& got, const Tensor& want) {
  REQUIRE(got.dims() == want.dims());
  const auto* p = static_cast<const std::uint16_t*>(got.raw_data());
  const auto w = want.to_vector<float>();
  for (std::int64_t i = 0; i < got.numel(); ++i) {
    INFO("element " << i);
    CHECK(p[i] == kiln_test::to_half(w[std::size_t(i)], got.dtype()));
  }
}

// got and want (16-bit, one dtype): within a rounding of each other, the
// f32 statistics they were computed from differing in summation order.
void check_half_near(const Tensor& got, const Tensor& want) {
  REQUIRE(got.dims() == want.dims());
  REQUIRE(got.dtype() == want.dtype());
  const DataType dt = got.dtype();
  const auto* pg = static_cast<const std::uint16_t*>(got.raw_data());
  const auto* pw = static_cast<const std::uint16_t*>(want.raw_data());
  for (std::int64_t i = 0; i < got.numel(); ++i) {
    const float a = kiln_test::from_half(pg[i], dt), b = kiln_test::from_half(pw[i], dt);
    INFO("element " << i << ": " << a << " vs " << b);
    CHECK(std::abs(a - b) <= 1e-3f + std::abs(b) * (dt == DataType::BFloat16 ? 1.0f / 128 : 1.0f / 1024));
  }
}

// batch_norm (act empty) or fused_batch_norm, on CUDA when `cuda`.
KernelRun bn_forward(bool cuda, const std::vector<Tensor>& in, bool is_test, const std::string& act) {
  const std::string nchw = "NCHW";
  if (act.empty())
    return cuda ? run_cuda_op<BatchNormOp>(in, 0.9, 1e-5, is_test, nchw)
                : run_op<BatchNormOp>(in, 0.9, 1e-5, is_test, nchw);
  return cuda ? run_cuda_op<FusedBatchNormOp>(in, 0.9, 1e-5, is_test, nchw, act)
              : run_op<FusedBatchNormOp>(in, 0.9, 1e-5, is_test, nchw, act);
}

// Its gradient on {x, scale, (fused: bias,) saved_mean, saved_invstd, dy}.
KernelRun bn_backward(bool cuda, const std::vector<Tensor>& in, bool is_test, const std::string& act) {
  const std::string nchw = "NCHW";
  if (act.empty())
    return cuda ? run_cuda_op<GradOf<BatchNormOp>>(in, 0.9, 1e-5, is_test, nchw)
                : run_op<GradOf<BatchNormOp>>(in, 0.9, 1e-5, is_test, nchw);
  return cuda ? run_cuda_op<GradOf<FusedBatchNormOp>>(in, 0.9, 1e-5, is_test, nchw, act)
              : run_op<GradOf<FusedBatchNormOp>>(in, 0.9, 1e-5, is_test, nchw, act);
}

std::vector<Tensor> bn_grad_inputs(const Tensor& x, const Tensor& scale, const Tensor& bias, const KernelRun& fwd,
                                   const Tensor& dy, const std::string& act) {
  if (act.empty()) return {x, scale, fwd.out(3), fwd.out(4), dy};
  return {x, scale, bias, fwd.out(3), fwd.out(4), dy};
}

// The 16-bit batch norm and its gradient on CUDA: y and dx the CUDA f32
// kernels' results on the widened x and dy rounded once, the f32 results
// their bits; and within a rounding of the CPU's 16-bit kernels.
void check_mixed_batch_norm_on_cuda(const Dims& d, DataType dt, const std::string& act, bool is_test,
                                    unsigned seed) {
  INFO(to_string(dt) << " x [" << d.to_string() << "] '" << act << "' is_test " << is_test);
  const std::int64_t c = d[1];
  const Tensor x = kiln_test::random_half(d, dt, seed), dy = kiln_test::random_half(d, dt, seed + 1);
  const Tensor scale = filled<float>({c}, 0.5, 1.5, seed + 2), bias = filled<float>({c}, -1, 1, seed + 3);
  const Tensor rm = filled<float>({c}, -0.1, 0.1, seed + 4), rv = filled<float>({c}, 0.5, 1.5, seed + 5);
  const Tensor wx = widened_half(x), wdy = widened_half(dy);
  const auto got = bn_forward(true, {x, scale, bias, rm.clone(), rv.clone()}, is_test, act);
  const auto wide = bn_forward(true, {wx, scale, bias, rm.clone(), rv.clone()}, is_test, act);
  const auto cpu = bn_forward(false, {x, scale, bias, rm.clone(), rv.clone()}, is_test, act);
  REQUIRE(got.out(0).dtype() == dt);
  check_rounded(got.out(0), wide.out(0));
  check_half_near(got.out(0), cpu.out(0));
  for (int k = 1; k < 5; ++k) CHECK(kiln_test::same_bits(got.out(k), wide.out(k)));
  const auto gg = bn_backward(true, bn_grad_inputs(x, scale, bias, got, dy, act), is_test, act);
  const auto gw = bn_backward(true, bn_grad_inputs(wx, scale, bias, wide, wdy, act), is_test, act);
  const auto gc = bn_backward(false, bn_grad_inputs(x, scale, bias, got, dy, act), is_test, act);
  REQUIRE(gg.out(0).dtype() == dt);
  check_rounded(gg.out(0), gw.out(0));
  check_half_near(gg.out(0), gc.out(0));
  for (int k = 1; k < 3; ++k) {
    CHECK(kiln_test::same_bits(gg.out(k), gw.out(k)));
    check_fused_near<float>(gg.out(k), gc.out(k));
  }
}

}  // namespace

TEST_CASE("CUDA bf16 and f16 batch_norm and fused_batch_norm with f32 parameters, and their gradients, are the "
          "f32 kernels on the widened x and dy rounded once, and match the CPU's",
          "[cuda][kernel][norm][half]") {
  if (!have_cuda()) return;
  for (DataType dt : {DataType::BFloat16, DataType::Float16})
    for (const std::string act : {"", "relu", "relu6"})
      for (bool is_test : {false, true}) {
        check_mixed_batch_norm_on_cuda(Dims{8, 3, 5, 5}, dt, act, is_test, 51);
        check_mixed_batch_norm_on_cuda(Dims{2, 6, 33, 37}, dt, act, is_test, 52);
        check_mixed_batch_norm_on_cuda(Dims{4, 6}, dt, act, is_test, 53);
      }
}

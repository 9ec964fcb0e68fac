// kiln.cross_entropy and its gradient on the CPU: the loss of
// softmax_with_cross_entropy and each row's log-sum-exp, without a softmax;
// the gradient recomputed from the logits and lse equals the one from the
// softmax. Tolerances: f32 1e-5 relative and absolute (the kernel's exp is
// within 2 ulp of std::exp, and its sums run in 16 lanes), f64 1e-12.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernel/half_test_util.h"
#include "kernel/kernel_test_util.h"

using namespace kiln;
using kiln_test::run_op;

namespace {

// Labels for n rows of c classes, row 1 given `ignore` when n > 2.
template <typename L>
Tensor labels(const Dims& dims, std::int64_t n, std::int64_t c, std::int64_t ignore) {
  std::vector<L> v;
  for (std::int64_t i = 0; i < n; ++i) v.push_back(static_cast<L>((i * 7 + 3) % c));
  if (n > 2) v[1] = static_cast<L>(ignore);
  return Tensor::from_vector<L>(dims, v);
}

// log Σ exp(x) of each row of c, in double.
template <typename T>
std::vector<T> ref_lse(const Tensor& x, std::int64_t c) {
  const auto v = x.to_vector<T>();
  std::vector<T> out;
  for (std::size_t r = 0; r * c < v.size(); ++r) {
    double m = -INFINITY, s = 0;
    for (std::int64_t j = 0; j < c; ++j) m = std::max(m, double(v[r * c + j]));
    for (std::int64_t j = 0; j < c; ++j) s += std::exp(double(v[r * c + j]) - m);
    out.push_back(static_cast<T>(m + std::log(s)));
  }
  return out;
}

// cross_entropy against softmax_with_cross_entropy on the same logits:
// the loss, the lse, and the gradient for a dloss of ones · row index.
template <typename T, typename L>
void check_against_softmax_form(const Dims& ld, const Dims& label_dims, double tol,
                                std::int64_t ignore = -100) {
  const std::int64_t c = ld[ld.rank() - 1], n = ld.numel() / c;
  const Tensor x = kiln_test::filled<T>(ld, -6, 6, 5);
  const Tensor y = labels<L>(label_dims, n, c, ignore);
  auto ce = run_op<CrossEntropyOp>({x, y}, ignore);
  auto swce = run_op<SoftmaxWithCrossEntropyOp>({x, y}, ignore);
  auto lead = ld.to_vector();
  lead.back() = 1;
  CHECK(ce.out(0).dims().to_vector() == lead);
  CHECK(ce.out(1).dims().to_vector() == lead);
  kiln_test::check_close<T>(ce.out(0), swce.out(1).to_vector<T>(), tol, tol);
  kiln_test::check_close<T>(ce.out(1), ref_lse<T>(x, c), tol, tol);
  std::vector<T> g;
  for (std::int64_t i = 0; i < n; ++i) g.push_back(T(1) + T(i) / T(4));
  const Tensor dloss = Tensor::from_vector<T>(Dims(lead), g);
  auto dx = run_op<GradOf<CrossEntropyOp>>({x, ce.out(1), y, dloss}, ignore);
  auto want = run_op<GradOf<SoftmaxWithCrossEntropyOp>>({swce.out(0), y, dloss}, ignore);
  kiln_test::check_close<T>(dx.out(), want.out().to_vector<T>(), tol, tol);
}

}  // namespace

TEST_CASE("cross_entropy gives softmax_with_cross_entropy's loss, each row's lse and the same gradient",
          "[kernel][cross_entropy]") {
  check_against_softmax_form<float, std::int64_t>(Dims{4, 5}, Dims{4, 1}, 1e-5);
  check_against_softmax_form<float, std::int64_t>(Dims{4, 5}, Dims{4}, 1e-5);
  check_against_softmax_form<double, std::int64_t>(Dims{6, 10}, Dims{6, 1}, 1e-12);
  check_against_softmax_form<double, std::int32_t>(Dims{3, 2, 7}, Dims{3, 2}, 1e-12);
  check_against_softmax_form<float, std::int32_t>(Dims{5, 3}, Dims{5, 1}, 1e-5, /*ignore=*/2);
  // Rows longer than the 16 lanes with a tail, and a vocabulary's width.
  check_against_softmax_form<float, std::int64_t>(Dims{3, 37}, Dims{3}, 1e-5);
  check_against_softmax_form<float, std::int64_t>(Dims{3, 50257}, Dims{3, 1}, 1e-5);
}

TEST_CASE("cross_entropy stays exact for huge logits and finite for rows of -inf but one",
          "[kernel][cross_entropy]") {
  const float inf = std::numeric_limits<float>::infinity();
  auto x = Tensor::from_vector<float>({2, 3}, {0.f, 200.f, -1e30f, -inf, 5.f, -inf});
  auto y = Tensor::from_vector<std::int64_t>({2}, {0, 1});
  auto r = run_op<CrossEntropyOp>({x, y});
  // The loss comes from the logits, not from log(rounded p).
  CHECK(r.out(0).to_vector<float>()[0] == Approx(200.f));
  CHECK(r.out(0).to_vector<float>()[1] == 0.f);
  CHECK(r.out(1).to_vector<float>()[0] == Approx(200.f));
  CHECK(r.out(1).to_vector<float>()[1] == 5.f);
  auto dx = run_op<GradOf<CrossEntropyOp>>(
                {x, r.out(1), y, Tensor::from_vector<float>({2, 1}, {1.f, 1.f})}, std::int64_t{-100})
                .out()
                .to_vector<float>();
  CHECK(dx[0] == Approx(-1.f));
  CHECK(dx[1] == Approx(1.f));
  CHECK(dx[2] == 0.f);
  CHECK(dx[3] == 0.f);
  CHECK(dx[4] == 0.f);  // p = 1 at the label: 1 - 1
  CHECK(dx[5] == 0.f);
}

TEST_CASE("cross_entropy: a label out of range names the op, row and label; ignore_index rows give 0",
          "[kernel][cross_entropy]") {
  auto x = kiln_test::filled<float>({3, 4});
  auto y = Tensor::from_vector<std::int64_t>({3, 1}, {0, 3, 7});
  KILN_CHECK_ERROR(run_op<CrossEntropyOp>({x, y}), InvalidArgument,
                   {"kiln.cross_entropy", "row 2", "label 7", "[0, 4)"});
  auto lse = Tensor::from_vector<float>({3, 1}, {1.f, 1.f, 1.f});
  KILN_CHECK_ERROR(run_op<GradOf<CrossEntropyOp>>({x, lse, y, lse}, std::int64_t{-100}),
                   InvalidArgument, {"kiln.cross_entropy_grad", "row 2", "label 7"});
  auto neg = Tensor::from_vector<std::int32_t>({3}, {0, -1, 1});
  KILN_CHECK_ERROR(run_op<CrossEntropyOp>({x, neg}), InvalidArgument, {"row 1", "label -1"});
  auto r = run_op<CrossEntropyOp>({x, neg}, std::int64_t{-1});
  CHECK(r.out(0).to_vector<float>()[1] == 0.f);
  auto dx = run_op<GradOf<CrossEntropyOp>>({x, r.out(1), neg, lse}, std::int64_t{-1}).out();
  for (int j = 0; j < 4; ++j) CHECK(dx.to_vector<float>()[4 + j] == 0.f);
}

TEST_CASE("cross_entropy and its gradient reject bad dtypes and shapes, naming what is wrong",
          "[kernel][cross_entropy]") {
  using kiln_test::build_op;
  Program p;
  KILN_CHECK_ERROR((build_op<CrossEntropyOp>(p, {{DataType::Float32, {4, 5}}, {DataType::Float32, {4, 1}}})),
                   InvalidArgument, {"kiln.cross_entropy", "label", "f32"});
  KILN_CHECK_ERROR((build_op<CrossEntropyOp>(p, {{DataType::Float32, {4, 5}}, {DataType::Int64, {5}}})),
                   InvalidArgument, {"label shape [5]", "[4, 5]"});
  KILN_CHECK_ERROR((build_op<CrossEntropyOp>(p, {{DataType::Int64, {4, 5}}, {DataType::Int64, {4}}})),
                   InvalidArgument, {"kiln.cross_entropy", "floating"});
  KILN_CHECK_ERROR((build_op<CrossEntropyOp>(p, {{DataType::Float32, {5}}, {DataType::Int64, {5}}})),
                   InvalidArgument, {"rank >= 2"});
  Operation* op = build_op<CrossEntropyOp>(p, {{DataType::Float64, {-1, 10}}, {DataType::Int64, {-1, 1}}});
  REQUIRE(op->num_results() == 2);
  CHECK(shaped_dims(op->result_type(0)) == std::vector<std::int64_t>{-1, 1});
  CHECK(shaped_dims(op->result_type(1)) == std::vector<std::int64_t>{-1, 1});
  KILN_CHECK_ERROR((build_op<GradOf<CrossEntropyOp>>(
                       p, {{DataType::Float32, {3, 4}}, {DataType::Float32, {3, 4}}, {DataType::Int64, {3}},
                           {DataType::Float32, {3, 1}}},
                       std::int64_t{-100})),
                   InvalidArgument, {"kiln.cross_entropy_grad", "lse [3, 4]", "[3, 1]"});
  KILN_CHECK_ERROR((build_op<GradOf<CrossEntropyOp>>(
                       p, {{DataType::Float32, {3, 4}}, {DataType::Float32, {3, 1}}, {DataType::Int64, {3}},
                           {DataType::Float64, {3, 1}}},
                       std::int64_t{-100})),
                   InvalidArgument, {"kiln.cross_entropy_grad", "f64"});
  auto x = kiln_test::filled<float>({3, 4});
  auto y = Tensor::from_vector<std::int64_t>({3}, {0, 1, 2});
  KILN_CHECK_ERROR(run_op<GradOf<CrossEntropyOp>>(
                       {x, Tensor::from_vector<float>({3}, {1, 1, 1}), y,
                        Tensor::from_vector<float>({3, 1}, {1, 1, 1})},
                       std::int64_t{-100}),
                   InvalidArgument, {"kiln.cross_entropy_grad", "lse [3]", "[3, 1]"});
}

namespace {

Tensor widened(const Tensor& half) {
  Tensor f = Tensor::empty(half.dims(), DataType::Float32);
  const auto* p = static_cast<const std::uint16_t*>(half.raw_data());
  for (std::int64_t i = 0; i < half.numel(); ++i) f.data<float>()[i] = kiln_test::from_half(p[i], half.dtype());
  return f;
}

}  // namespace

TEST_CASE("cross_entropy reads bf16 and f16 logits as they are: f32 loss and lse, the gradient rounded once",
          "[kernel][cross_entropy][half]") {
  for (DataType dt : {DataType::BFloat16, DataType::Float16}) {
    INFO(to_string(dt));
    for (std::int64_t c : {std::int64_t{5}, std::int64_t{37}, std::int64_t{3000}}) {
      INFO("classes " << c);
      // 7 rows: 3000 classes widen in blocks of 2 rows, the last one alone.
      const Tensor x = kiln_test::random_half({7, c}, dt, 7), wide = widened(x);
      const Tensor y = labels<std::int64_t>(Dims{7}, 7, c, -100);
      auto half = run_op<CrossEntropyOp>({x, y});
      auto f32 = run_op<CrossEntropyOp>({wide, y});
      for (int k = 0; k < 2; ++k) {
        CHECK(half.out(k).dtype() == DataType::Float32);
        CHECK(kiln_test::same_bits(half.out(k), f32.out(k)));
      }
      const Tensor dloss = kiln_test::filled<float>({7, 1}, 0.5, 2, 9);
      const Tensor dx = run_op<GradOf<CrossEntropyOp>>({x, half.out(1), y, dloss}, std::int64_t{-100}).out();
      const Tensor want = run_op<GradOf<CrossEntropyOp>>({wide, f32.out(1), y, dloss}, std::int64_t{-100}).out();
      REQUIRE(dx.dtype() == dt);
      const auto* p = static_cast<const std::uint16_t*>(dx.raw_data());
      for (std::int64_t i = 0; i < dx.numel(); ++i) {
        INFO("element " << i);
        CHECK(p[i] == kiln_test::to_half(want.data<float>()[i], dt));
      }
    }
    // lse and dloss must be the loss's dtype (f32), not the logits'.
    using kiln_test::build_op;
    Program p;
    KILN_CHECK_ERROR((build_op<GradOf<CrossEntropyOp>>(p, {{dt, {3, 4}}, {dt, {3, 1}}, {DataType::Int64, {3}},
                                                           {DataType::Float32, {3, 1}}},
                                                       std::int64_t{-100})),
                     InvalidArgument, {"kiln.cross_entropy_grad", "lse", "f32"});
  }
}

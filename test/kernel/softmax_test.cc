// Reference tests of softmax, log_softmax (any axis, numerically stable)
// and softmax_with_cross_entropy (hard labels, ignore_index, bad labels).
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernel/kernel_test_util.h"

using namespace kiln;
using kiln_test::run_op;

namespace {

// softmax / log_softmax along `axis`, in double, the slow way.
template <typename T>
std::vector<double> ref_softmax(const Tensor& x, int axis, bool log) {
  auto d = x.dims().to_vector();
  const int rank = static_cast<int>(d.size());
  if (axis < 0) axis += rank;
  std::int64_t outer = 1, inner = 1, c = d[axis];
  for (int i = 0; i < axis; ++i) outer *= d[i];
  for (int i = axis + 1; i < rank; ++i) inner *= d[i];
  auto xv = x.to_vector<T>();
  std::vector<double> out(xv.size());
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t k = 0; k < inner; ++k) {
      auto at = [&](std::int64_t j) { return (o * c + j) * inner + k; };
      double m = -INFINITY;
      for (std::int64_t j = 0; j < c; ++j) m = std::max(m, double(xv[at(j)]));
      double s = 0;
      for (std::int64_t j = 0; j < c; ++j) s += std::exp(double(xv[at(j)]) - m);
      for (std::int64_t j = 0; j < c; ++j) {
        double lv = double(xv[at(j)]) - m - std::log(s);
        out[at(j)] = log ? lv : std::exp(lv);
      }
    }
  return out;
}

template <typename OpT, typename T>
void check_softmax(bool log, double tol) {
  struct Case { Dims d; int axis; };
  for (const auto& c : std::vector<Case>{{{5}, -1}, {{3, 7}, -1}, {{3, 7}, 1}, {{3, 7}, 0},
                                         {{2, 3, 4}, 1}, {{2, 3, 4}, -3}, {{4, 1}, 1},
                                         {{2, 130}, -1}, {{0, 3}, 1}, {{37, 1001}, -1}, {{3, 300, 40}, 1}}) {
    INFO(OpT::name << " " << to_string(data_type_of<T>) << " [" << c.d.to_string() << "] axis "
                   << c.axis);
    auto x = kiln_test::filled<T>(c.d, -5, 5, 3);
    auto want = ref_softmax<T>(x, c.axis, log);
    auto r = run_op<OpT>({x}, std::int64_t{c.axis});
    CHECK(r.out().dims() == c.d);
    kiln_test::check_close<T>(r.out(), std::vector<T>(want.begin(), want.end()), tol, tol);
  }
}

}  // namespace

TEST_CASE("softmax matches a reference along any axis in f32 and f64", "[kernel]") {
  check_softmax<SoftmaxOp, float>(false, 1e-6);
  check_softmax<SoftmaxOp, double>(false, 1e-14);
}

TEST_CASE("log_softmax matches a reference along any axis in f32 and f64", "[kernel]") {
  check_softmax<LogSoftmaxOp, float>(true, 1e-5);
  check_softmax<LogSoftmaxOp, double>(true, 1e-13);
}

TEST_CASE("softmax and log_softmax stay finite for huge logits", "[kernel]") {
  auto x = Tensor::from_vector<float>({2, 3}, {1000.f, 1001.f, 1002.f, -1000.f, -1000.f, 88.f});
  auto s = run_op<SoftmaxOp>({x}).out().to_vector<float>();
  CHECK(s[0] == Approx(0.09003057f));
  CHECK(s[2] == Approx(0.66524096f));
  CHECK(s[5] == Approx(1.f));
  auto l = run_op<LogSoftmaxOp>({x}).out().to_vector<float>();
  CHECK(l[0] == Approx(-2.40760596f));
  CHECK(l[3] == Approx(-1088.f));
  for (float v : l) CHECK(std::isfinite(v));
  // Column softmax (axis 0) of the same values.
  auto c = run_op<SoftmaxOp>({x}, std::int64_t{0}).out().to_vector<float>();
  CHECK(c[0] == Approx(1.f));
  CHECK(c[3] == Approx(0.f).margin(1e-30));
}

TEST_CASE("softmax gives exactly 0 where a logit is -inf or far below the row's max, never a denormal",
          "[kernel]") {
  // A causal mask adds -inf above the diagonal; a denormal there would make
  // every later multiply by the probabilities crawl (microcode assists).
  const float inf = std::numeric_limits<float>::infinity();
  auto x = Tensor::from_vector<float>({3, 4}, {0.5f, -inf, -inf, -inf, 0.25f, 1.f, -inf, -inf,
                                               0.f, -90.f, -200.f, -1e30f});
  for (int axis : {1, 0}) {
    auto s = run_op<SoftmaxOp>({x}, std::int64_t{axis}).out().to_vector<float>();
    for (float v : s) CHECK((v == 0.f || std::fpclassify(v) == FP_NORMAL));
  }
  auto s = run_op<SoftmaxOp>({x}).out().to_vector<float>();
  CHECK(s[0] == 1.f);
  CHECK(s[1] == 0.f);
  CHECK(s[7] == 0.f);
  CHECK(s[9] == 0.f);
  CHECK(s[11] == 0.f);
  CHECK(s[8] == Approx(1.f));
}

TEST_CASE("softmax rejects integer operands, rank 0 and bad axes", "[kernel]") {
  using kiln_test::build_op;
  Program p;
  KILN_CHECK_ERROR((build_op<SoftmaxOp>(p, {{DataType::Int32, {2, 3}}})), InvalidArgument,
                     {"kiln.softmax", "i32"});
  KILN_CHECK_ERROR((build_op<LogSoftmaxOp>(p, {{DataType::Float32, {2, 3}}}, std::int64_t{2})),
                     InvalidArgument, {"kiln.log_softmax", "axis 2"});
  KILN_CHECK_ERROR((build_op<SoftmaxOp>(p, {{DataType::Float32, {}}})), InvalidArgument,
                     {"kiln.softmax", "rank"});
}

namespace {
template <typename T, typename L>
void check_cross_entropy(const Dims& ld, std::vector<std::int64_t> label_dims, double tol,
                         std::int64_t ignore = -100) {
  const std::int64_t c = ld[ld.rank() - 1], n = ld.numel() / c;
  auto x = kiln_test::filled<T>(ld, -4, 4, 11);
  std::vector<L> labels;
  for (std::int64_t i = 0; i < n; ++i) labels.push_back(static_cast<L>((i * 7 + 3) % c));
  if (n > 2) labels[1] = static_cast<L>(ignore);
  auto y = Tensor::from_vector<L>(Dims(label_dims), labels);
  auto r = run_op<SoftmaxWithCrossEntropyOp>({x, y}, ignore);
  auto sm = ref_softmax<T>(x, -1, false);
  auto lsm = ref_softmax<T>(x, -1, true);
  std::vector<double> loss;
  for (std::int64_t i = 0; i < n; ++i)
    loss.push_back(labels[i] == ignore ? 0.0 : -lsm[i * c + labels[i]]);
  kiln_test::check_close<T>(r.out(0), std::vector<T>(sm.begin(), sm.end()), tol, tol);
  auto lead = ld.to_vector();
  lead.back() = 1;
  CHECK(r.out(1).dims().to_vector() == lead);
  kiln_test::check_close<T>(r.out(1), std::vector<T>(loss.begin(), loss.end()), tol, tol);
}
}  // namespace

TEST_CASE("softmax_with_cross_entropy gives softmax and -log p[label] per row", "[kernel]") {
  check_cross_entropy<float, std::int64_t>({4, 5}, {4, 1}, 1e-5);
  check_cross_entropy<float, std::int64_t>({4, 5}, {4}, 1e-5);
  check_cross_entropy<double, std::int64_t>({6, 10}, {6, 1}, 1e-12);
  check_cross_entropy<double, std::int32_t>({3, 2, 7}, {3, 2}, 1e-12);
  check_cross_entropy<float, std::int32_t>({5, 3}, {5, 1}, 1e-5, /*ignore=*/2);
  // A huge logit: the loss is computed from logits, not log(rounded p).
  auto x = Tensor::from_vector<float>({1, 2}, {0.f, 200.f});
  auto y = Tensor::from_vector<std::int64_t>({1, 1}, {0});
  auto r = run_op<SoftmaxWithCrossEntropyOp>({x, y});
  CHECK(r.out(1).to_vector<float>()[0] == Approx(200.f));
}

TEST_CASE("softmax_with_cross_entropy: a label out of range names the op, row and label", "[kernel]") {
  auto x = kiln_test::filled<float>({3, 4});
  auto y = Tensor::from_vector<std::int64_t>({3, 1}, {0, 3, 7});
  KILN_CHECK_ERROR(run_op<SoftmaxWithCrossEntropyOp>({x, y}), InvalidArgument,
                     {"kiln.softmax_with_cross_entropy", "row 2", "label 7", "[0, 4)"});
  auto neg = Tensor::from_vector<std::int64_t>({3}, {0, -1, 1});
  KILN_CHECK_ERROR(run_op<SoftmaxWithCrossEntropyOp>({x, neg}), InvalidArgument,
                     {"row 1", "label -1"});
  // -1 is fine when it is the ignore_index.
  auto r = run_op<SoftmaxWithCrossEntropyOp>({x, neg}, std::int64_t{-1});
  CHECK(r.out(1).to_vector<float>()[1] == 0.f);
}

TEST_CASE("softmax_with_cross_entropy rejects bad label dtypes and shapes", "[kernel]") {
  using kiln_test::build_op;
  Program p;
  KILN_CHECK_ERROR((build_op<SoftmaxWithCrossEntropyOp>(
                         p, {{DataType::Float32, {4, 5}}, {DataType::Float32, {4, 1}}})),
                     InvalidArgument, {"kiln.softmax_with_cross_entropy", "label", "f32"});
  KILN_CHECK_ERROR((build_op<SoftmaxWithCrossEntropyOp>(
                         p, {{DataType::Float32, {4, 5}}, {DataType::Int64, {5}}})),
                     InvalidArgument, {"label shape [5]", "[4, 5]"});
  KILN_CHECK_ERROR((build_op<SoftmaxWithCrossEntropyOp>(
                         p, {{DataType::Int64, {4, 5}}, {DataType::Int64, {4}}})),
                     InvalidArgument, {"kiln.softmax_with_cross_entropy", "floating"});
  KILN_CHECK_ERROR((build_op<SoftmaxWithCrossEntropyOp>(
                         p, {{DataType::Float32, {5}}, {DataType::Int64, {5}}})),
                     InvalidArgument, {"rank >= 2"});
  Operation* op = build_op<SoftmaxWithCrossEntropyOp>(
      p, {{DataType::Float64, {-1, 10}}, {DataType::Int64, {-1, 1}}});
  CHECK(op->num_results() == 2);
  CHECK(shaped_dims(op->result_type(0)) == std::vector<std::int64_t>{-1, 10});
  CHECK(shaped_dims(op->result_type(1)) == std::vector<std::int64_t>{-1, 1});
  CHECK(op->attributes().find("ignore_index"));
}

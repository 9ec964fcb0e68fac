// Reference tests of sum / mean / max / prod over axes (keepdim or not, negative
// axes, all axes, non-adjacent axes, size-1 and empty dims) against plain
// loops, and their InferMeta errors.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernel/kernel_test_util.h"

using namespace kiln;
using kiln_test::run_op;

namespace {

enum class R { Sum, Mean, Max, Prod };

// The reduction, the slow way: every input element adds into the output
// element whose coordinates are its own with the reduced ones dropped.
template <typename T>
std::vector<double> ref_reduce(const Tensor& x, std::vector<std::int64_t> axes, R kind,
                               std::vector<std::int64_t>* out_dims, bool keepdim) {
  const auto d = x.dims().to_vector();
  const int rank = static_cast<int>(d.size());
  std::vector<bool> red(rank, axes.empty());
  for (auto a : axes) red[a < 0 ? a + rank : a] = true;
  std::vector<std::int64_t> od, od_keep;
  for (int i = 0; i < rank; ++i) {
    if (!red[i]) od.push_back(d[i]);
    od_keep.push_back(red[i] ? 1 : d[i]);
  }
  *out_dims = keepdim ? od_keep : od;
  std::int64_t on = 1, count = 1;
  for (int i = 0; i < rank; ++i) (red[i] ? count : on) *= d[i];
  std::vector<double> acc(static_cast<std::size_t>(on),
                          kind == R::Max    ? -std::numeric_limits<double>::infinity()
                          : kind == R::Prod ? 1.0
                                            : 0.0);
  auto xv = x.to_vector<T>();
  for (std::size_t f = 0; f < xv.size(); ++f) {
    std::int64_t rem = static_cast<std::int64_t>(f), o = 0, os = 1;
    for (int k = rank - 1; k >= 0; --k) {
      std::int64_t idx = rem % d[k];
      rem /= d[k];
      if (!red[k]) {
        o += idx * os;
        os *= d[k];
      }
    }
    double v = static_cast<double>(xv[f]);
    if (kind == R::Max) acc[o] = std::max(acc[o], v);
    else if (kind == R::Prod) acc[o] *= v;
    else acc[o] += v;
  }
  if (kind == R::Mean)
    for (auto& a : acc) a /= static_cast<double>(count);
  return acc;
}

struct Case {
  Dims dims;
  std::vector<std::int64_t> axes;
};
const std::vector<Case> kCases = {
    {{5}, {}},        {{5}, {0}},          {{3, 4}, {}},          {{3, 4}, {0}},
    {{3, 4}, {1}},    {{3, 4}, {-1}},      {{3, 4}, {0, 1}},      {{2, 3, 4}, {1}},
    {{2, 3, 4}, {0, 2}}, {{2, 3, 4}, {-3, -1}}, {{2, 1, 4}, {1}},    {{4, 1, 3, 1, 5}, {0, 3}},
    {{2, 3, 4, 5}, {1, 2}}, {{2, 3, 4, 5}, {0, 3}}, {{1, 1}, {0}},  {{}, {}},
    {{100, 37}, {0}}, {{100, 37}, {1}},    {{6, 7, 8}, {0, 1, 2}},
};

template <typename OpT, typename T>
void check_reduce(R kind, double tol) {
  std::uint32_t seed = 1;
  for (const auto& c : kCases) {
    for (bool keep : {false, true}) {
      INFO(OpT::name << " " << to_string(data_type_of<T>) << " [" << c.dims.to_string()
                     << "] axes " << meta::dims_string(c.axes) << " keepdim " << keep);
      Tensor x;
      if constexpr (std::is_integral_v<T>) {
        std::vector<T> v;
        for (double u : kiln_test::filled<double>(c.dims, -100, 100, seed++).to_vector<double>())
          v.push_back(static_cast<T>(u));
        x = Tensor::from_vector<T>(c.dims, v);
      } else {
        x = kiln_test::filled<T>(c.dims, -2, 2, seed++);
      }
      std::vector<std::int64_t> od;
      auto want = ref_reduce<T>(x, c.axes, kind, &od, keep);
      auto r = run_op<OpT>({x}, c.axes, keep);
      CHECK(r.out().dims().to_vector() == od);
      std::vector<T> wt(want.begin(), want.end());
      if constexpr (std::is_integral_v<T>)
        CHECK(r.out().template to_vector<T>() == wt);
      else
        kiln_test::check_close<T>(r.out(), wt, tol, tol);
    }
  }
}

}  // namespace

TEST_CASE("sum reduces any set of axes with or without keepdim", "[kernel]") {
  check_reduce<SumOp, float>(R::Sum, 1e-5);
  check_reduce<SumOp, double>(R::Sum, 1e-12);
  check_reduce<SumOp, std::int32_t>(R::Sum, 0);
  check_reduce<SumOp, std::int64_t>(R::Sum, 0);
}

TEST_CASE("mean divides the sum by the reduced element count", "[kernel]") {
  check_reduce<MeanOp, float>(R::Mean, 1e-5);
  check_reduce<MeanOp, double>(R::Mean, 1e-12);
}

TEST_CASE("max reduces any set of axes and lets NaN win", "[kernel]") {
  check_reduce<MaxOp, float>(R::Max, 0);
  check_reduce<MaxOp, double>(R::Max, 0);
  check_reduce<MaxOp, std::int32_t>(R::Max, 0);
  check_reduce<MaxOp, std::int64_t>(R::Max, 0);
  auto x = Tensor::from_vector<float>({2, 3}, {1.f, std::nanf(""), 2.f, -1.f, -2.f, -3.f});
  auto r = run_op<MaxOp>({x}, std::vector<std::int64_t>{1}, false).out().to_vector<float>();
  CHECK(std::isnan(r[0]));
  CHECK(r[1] == -1.f);
  auto n = Tensor::from_vector<double>({2}, {-std::numeric_limits<double>::infinity(), -1e308});
  CHECK(run_op<MaxOp>({n}).out().to_vector<double>()[0] == -1e308);
}

TEST_CASE("prod multiplies over any set of axes; integers exactly, empty axes give 1", "[kernel]") {
  check_reduce<ProdOp, float>(R::Prod, 1e-4);
  check_reduce<ProdOp, double>(R::Prod, 1e-12);
  auto i = Tensor::from_vector<std::int64_t>({2, 3}, {1, -2, 3, 4, 5, 0});
  CHECK(run_op<ProdOp>({i}, std::vector<std::int64_t>{1}, false).out().to_vector<std::int64_t>() ==
        std::vector<std::int64_t>{-6, 0});
  auto e = run_op<ProdOp>({Tensor::from_vector<float>({2, 0}, {})}, std::vector<std::int64_t>{1}, true);
  CHECK(e.out().dims().to_vector() == std::vector<std::int64_t>{2, 1});
  CHECK(e.out().to_vector<float>() == std::vector<float>{1, 1});
}

TEST_CASE("prod_grad is the product of the other elements, exact where x holds zeros", "[kernel]") {
  auto x = Tensor::from_vector<double>({3, 3}, {2, 3, 4, 0, 5, 6, 0, 7, 0});
  auto dout = Tensor::from_vector<double>({3}, {1, 2, 3});
  auto r = run_op<GradOf<ProdOp>>({x, dout}, std::vector<std::int64_t>{1}, false);
  kiln_test::check_close<double>(r.out(), {12, 8, 6, 60, 0, 0, 0, 0, 0});
}

TEST_CASE("a large f32 sum stays accurate", "[kernel]") {
  // 2^20 ones and one 2^24: a naive f32 running sum would stall at 2^24.
  std::vector<float> v(1 << 20, 1.f);
  v[0] = 16777216.f;
  auto r = run_op<SumOp>({Tensor::from_vector<float>({1 << 20}, v)});
  CHECK(r.out().to_vector<float>()[0] == 16777216.f + float((1 << 20) - 1));
}

TEST_CASE("a large f32 sum over rows (an NHWC pool, a bias gradient) stays accurate", "[kernel]") {
  // Column sums of 2^16 rows: a 2^24 then ones. Rounding the running sum
  // to f32 after each row would stall every column at 2^24.
  constexpr std::int64_t kRows = 1 << 16, kCols = 5;
  std::vector<float> v(kRows * kCols, 1.f);
  std::fill(v.begin(), v.begin() + kCols, 16777216.f);
  const auto x = Tensor::from_vector<float>({2, kRows / 2, kCols}, v);
  const float want = 16777216.f + float(kRows - 1);
  auto rows = run_op<SumOp>({x}, std::vector<std::int64_t>{0, 1}, false);
  CHECK(rows.out().to_vector<float>() == std::vector<float>(kCols, want));
  auto pooled = run_op<MeanOp>({x.reshape({1, kRows, kCols})}, std::vector<std::int64_t>{1}, true);
  CHECK(pooled.out().to_vector<float>() == std::vector<float>(kCols, want / float(kRows)));
}

TEST_CASE("reductions over empty axes: sum 0, mean NaN, max an error", "[kernel]") {
  auto e = Tensor::empty({0, 3}, DataType::Float32);
  auto s = run_op<SumOp>({e}, std::vector<std::int64_t>{0}, false);
  CHECK(s.out().to_vector<float>() == std::vector<float>(3, 0.f));
  auto m = run_op<MeanOp>({e}, std::vector<std::int64_t>{0}, true);
  CHECK(m.out().dims() == Dims{1, 3});
  CHECK(std::isnan(m.out().to_vector<float>()[0]));
  KILN_CHECK_ERROR(run_op<MaxOp>({e}, std::vector<std::int64_t>{0}, false), InvalidArgument,
                     {"kiln.max", "empty"});
  // Reducing the non-empty axis of an empty tensor gives an empty result.
  CHECK(run_op<MaxOp>({e}, std::vector<std::int64_t>{1}, false).out().dims() == Dims{0});
}

TEST_CASE("reductions reject bad axes and mean rejects integers", "[kernel]") {
  using kiln_test::build_op;
  using V = std::vector<std::int64_t>;
  Program p;
  KILN_CHECK_ERROR((build_op<SumOp>(p, {{DataType::Float32, {2, 3}}}, V{2}, false)),
                     InvalidArgument, {"kiln.sum", "axis 2", "rank 2"});
  KILN_CHECK_ERROR((build_op<MaxOp>(p, {{DataType::Float32, {2, 3}}}, V{-3}, false)),
                     InvalidArgument, {"kiln.max", "axis -3"});
  KILN_CHECK_ERROR((build_op<SumOp>(p, {{DataType::Float32, {2, 3}}}, V{1, -1}, false)),
                     InvalidArgument, {"kiln.sum", "twice"});
  KILN_CHECK_ERROR((build_op<MeanOp>(p, {{DataType::Int64, {2, 3}}}, V{}, false)),
                     InvalidArgument, {"kiln.mean", "i64"});
  Operation* op = build_op<SumOp>(p, {{DataType::Float32, {-1, 3, 4}}}, V{-1}, true);
  CHECK(shaped_dims(op->result_type(0)) == V{-1, 3, 1});
  Operation* all = build_op<MeanOp>(p, {{DataType::Float64, {-1, 3}}});
  CHECK(shaped_dims(all->result_type(0)).empty());
  CHECK(all->attributes().find("keepdim"));
}

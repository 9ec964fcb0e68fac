// Reference tests of the gradient ops' CPU kernels (grad_ops.h) in f32 and
// f64 against values worked out by hand or by plain loops, and the
// kiln::Error each gives for bad input (at build time and at run time).
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernel/kernel_test_util.h"
#include "kiln/exec/executor.h"

using namespace kiln;
using kiln_test::build_op;
using kiln_test::check_close;
using kiln_test::filled;
using kiln_test::run_op;

namespace {
using Axes = std::vector<std::int64_t>;

template <typename T>
Tensor t(const Dims& d, std::vector<double> v) {
  std::vector<T> c(v.begin(), v.end());
  return Tensor::from_vector<T>(d, c);
}
template <typename T>
std::vector<T> as(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}
}  // namespace

// ---- reduce_as ----

TEMPLATE_TEST_CASE("reduce_as sums leading and size-1 dims down to the target's shape",
                   "[kernel][grad]", float, double) {
  using T = TestType;
  auto x = t<T>({2, 3}, {1, 2, 3, 4, 5, 6});
  check_close<T>(run_op<ReduceAsOp>({x, t<T>({3}, {0, 0, 0})}).out(), {5, 7, 9});
  check_close<T>(run_op<ReduceAsOp>({x, t<T>({2, 1}, {0, 0})}).out(), {6, 15});
  check_close<T>(run_op<ReduceAsOp>({x, t<T>({1, 3}, {0, 0, 0})}).out(), {5, 7, 9});
  check_close<T>(run_op<ReduceAsOp>({x, t<T>({}, {0})}).out(), {21});
  check_close<T>(run_op<ReduceAsOp>({x, t<T>({2, 3}, std::vector<double>(6))}).out(),
                 {1, 2, 3, 4, 5, 6});
  CHECK(run_op<ReduceAsOp>({x, t<T>({1, 3}, {0, 0, 0})}).out().dims() == Dims{1, 3});
}

TEST_CASE("reduce_as matches a plain-loop reference on a rank-4 broadcast", "[kernel][grad]") {
  auto x = filled<double>({2, 3, 4, 5}, -1, 1, 3);
  auto r = run_op<ReduceAsOp>({x, Tensor::zeros({3, 1, 5}, DataType::Float64)});
  auto xv = x.to_vector<double>();
  std::vector<double> want(15, 0.0);
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 3; ++b)
      for (int c = 0; c < 4; ++c)
        for (int d = 0; d < 5; ++d) want[b * 5 + d] += xv[((a * 3 + b) * 4 + c) * 5 + d];
  check_close<double>(r.out(), want, 1e-12, 1e-12);
}

TEST_CASE("reduce_as sums a conv bias's gradient [N, C, H, W] down to [C, 1, 1], with long "
          "inner runs and a short tail",
          "[kernel][grad]") {
  for (std::int64_t hw : {3, 8, 19}) {
    auto x = filled<float>({3, 4, hw, 1}, -1, 1, 5);
    auto r = run_op<ReduceAsOp>({x, Tensor::zeros({4, 1, 1}, DataType::Float32)});
    CHECK(r.out().dims() == Dims{4, 1, 1});
    auto xv = x.to_vector<float>();
    std::vector<double> want(4, 0.0);
    for (int n = 0; n < 3; ++n)
      for (int c = 0; c < 4; ++c)
        for (std::int64_t i = 0; i < hw; ++i) want[c] += xv[(n * 4 + c) * hw + i];
    check_close<float>(r.out(), std::vector<float>(want.begin(), want.end()), 1e-5, 1e-5);
  }
}

TEST_CASE("reduce_as rejects a target x does not broadcast from", "[kernel][grad]") {
  Program p;
  KILN_CHECK_ERROR(build_op<ReduceAsOp>(p, {{DataType::Float32, {2, 3}}, {DataType::Float32, {2}}}),
                     InvalidArgument, {"kiln.reduce_as", "[2, 3]", "[2]"});
  KILN_CHECK_ERROR(build_op<ReduceAsOp>(p, {{DataType::Int64, {2, 3}}, {DataType::Int64, {3}}}),
                     InvalidArgument, {"kiln.reduce_as", "floating"});
  KILN_CHECK_ERROR(run_op<ReduceAsOp>({filled<float>({2, 3}), filled<float>({4, 3})}),
                     InvalidArgument, {"kiln.reduce_as", "[2, 3]", "[4, 3]"});
}

// ---- reshape_as, zeros_like, split_as ----

TEST_CASE("reshape_as views x with the target's run-time dims", "[kernel][grad]") {
  auto x = t<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  auto r = run_op<ReshapeAsOp>({x, Tensor::zeros({3, 2}, DataType::Int64)});
  CHECK(r.out().dims() == Dims{3, 2});
  CHECK(r.out().to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  KILN_CHECK_ERROR(run_op<ReshapeAsOp>({x, Tensor::zeros({4}, DataType::Float32)}),
                     InvalidArgument, {"kiln.reshape_as", "6 elements", "4 elements"});
  Program p;
  KILN_CHECK_ERROR(build_op<ReshapeAsOp>(p, {{DataType::Float32, {2, 3}}, {DataType::Float32, {5}}}),
                     InvalidArgument, {"kiln.reshape_as", "6 elements", "5 elements"});
}

TEST_CASE("zeros_like makes zeros of x's run-time dims and dtype", "[kernel][grad]") {
  auto r = run_op<ZerosLikeOp>({filled<double>({2, 3})});
  CHECK(r.out().to_vector<double>() == std::vector<double>(6, 0.0));
  auto ri = run_op<ZerosLikeOp>({Tensor::from_vector<std::int64_t>({2}, {5, 6})});
  CHECK(ri.out().to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 0});
}

TEMPLATE_TEST_CASE("split_as cuts x into pieces shaped like the refs", "[kernel][grad]", float,
                   double) {
  using T = TestType;
  auto x = t<T>({2, 5}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  auto r = kiln_test::run_kernel(
      {x, Tensor::zeros({2, 2}, DataType::Float32), Tensor::zeros({2, 3}, DataType::Float32)},
      [](Builder& b, const std::vector<Value>& v) {
        return b.create<SplitAsOp>(v[0], std::vector<Value>{v[1], v[2]}, -1).operation();
      });
  check_close<T>(r.out(0), {0, 1, 5, 6});
  check_close<T>(r.out(1), {2, 3, 4, 7, 8, 9});
  auto bad = [&](const Dims& a, const Dims& b) {
    return kiln_test::run_kernel(
        {x, Tensor::zeros(a, DataType::Float32), Tensor::zeros(b, DataType::Float32)},
        [](Builder& bb, const std::vector<Value>& v) {
          return bb.create<SplitAsOp>(v[0], std::vector<Value>{v[1], v[2]}, 1).operation();
        });
  };
  KILN_CHECK_ERROR(bad({2, 2}, {2, 2}), InvalidArgument, {"kiln.split_as", "add up to 4"});
  KILN_CHECK_ERROR(bad({3, 2}, {2, 3}), InvalidArgument, {"kiln.split_as", "ref #1"});
}

// ---- activation grads ----

TEMPLATE_TEST_CASE("activation grads match their closed forms", "[kernel][grad]", float, double) {
  using T = TestType;
  const std::vector<double> a = {-1.5, -0.5, 0.0, 0.25, 2.0}, d = {1, 2, 3, 4, 5};
  auto ta = t<T>({5}, a), td = t<T>({5}, d);
  check_close<T>(run_op<GradOf<ReluOp>>({ta, td}).out(), {0, 0, 0, 4, 5});
  check_close<T>(run_op<GradOf<AbsOp>>({ta, td}).out(), {-1, -2, 0, 4, 5});
  std::vector<double> th, sg, ge, gt;
  for (std::size_t i = 0; i < a.size(); ++i) {
    th.push_back(d[i] * (1 - a[i] * a[i]));
    sg.push_back(d[i] * a[i] * (1 - a[i]));
    const double x = a[i];
    ge.push_back(d[i] * (0.5 * (1 + std::erf(x / std::sqrt(2.0))) +
                         x * std::exp(-x * x / 2) / std::sqrt(2 * M_PI)));
    // derivative of the tanh form by a tiny central difference in long double
    auto f = [](long double z) {
      return 0.5L * z * (1 + std::tanh(std::sqrt(2 / M_PIl) * (z + 0.044715L * z * z * z)));
    };
    const long double h = 1e-6L;
    gt.push_back(d[i] * static_cast<double>((f(x + h) - f(x - h)) / (2 * h)));
  }
  check_close<T>(run_op<GradOf<TanhOp>>({ta, td}).out(), as<T>(th));
  check_close<T>(run_op<GradOf<SigmoidOp>>({ta, td}).out(), as<T>(sg));
  check_close<T>(run_op<GradOf<GeluOp>>({ta, td}, false).out(), as<T>(ge));
  check_close<T>(run_op<GradOf<GeluOp>>({ta, td}, true).out(), as<T>(gt), 1e-5, 1e-5);
}

TEST_CASE("activation grads need operands of one shape and a float dtype", "[kernel][grad]") {
  Program p;
  KILN_CHECK_ERROR(build_op<GradOf<ReluOp>>(p, {{DataType::Float32, {2}}, {DataType::Float32, {3}}}),
                     InvalidArgument, {"kiln.relu_grad", "[2]", "[3]"});
  KILN_CHECK_ERROR(build_op<GradOf<TanhOp>>(p, {{DataType::Int32, {2}}, {DataType::Int32, {2}}}),
                     InvalidArgument, {"kiln.tanh_grad", "floating"});
  KILN_CHECK_ERROR(
      build_op<GradOf<SigmoidOp>>(p, {{DataType::Float32, {2}}, {DataType::Float64, {2}}}),
      InvalidArgument, {"kiln.sigmoid_grad", "f32", "f64"});
}

TEST_CASE("grad ops check at run time the shapes that were -1 at build time", "[kernel][grad]") {
  // The executor runs every op of a program: one program per grad op.
  auto run = [](auto make, const FeedMap& feed) {
    Program p;
    Builder b(p);
    auto x = b.create<DataOp>("x", std::vector<std::int64_t>{-1, 3}).result();
    auto y = b.create<DataOp>("y", std::vector<std::int64_t>{-1, 3}).result();
    Value out = make(b, x, y);
    Executor exe;
    return exe.run(p, feed, {out});
  };
  auto reduce_as = [](Builder& b, Value x, Value y) -> Value {
    return b.create<ReduceAsOp>(x, y).result();
  };
  auto relu_grad = [](Builder& b, Value x, Value y) -> Value {
    return b.create<GradOf<ReluOp>>(x, y).result();
  };
  FeedMap feed = {{"x", filled<float>({2, 3})}, {"y", filled<float>({4, 3})}};
  KILN_CHECK_ERROR(run(reduce_as, feed), InvalidArgument, {"kiln.reduce_as", "2x3", "4x3"});
  KILN_CHECK_ERROR(run(relu_grad, feed), InvalidArgument, {"kiln.relu_grad", "2x3", "4x3"});
  feed["y"] = filled<float>({1, 3});  // now x broadcasts from y
  CHECK(run(reduce_as, feed)[0].dims() == Dims{1, 3});
}

// ---- maximum_grad / minimum_grad ----

TEMPLATE_TEST_CASE("maximum_grad and minimum_grad route dout by comparison, halves on ties",
                   "[kernel][grad]", float, double) {
  using T = TestType;
  auto x = t<T>({2, 2}, {1, 5, 3, 3});
  auto y = t<T>({2}, {2, 3});  // broadcast
  auto d = t<T>({2, 2}, {10, 20, 30, 40});
  auto mx = run_op<GradOf<MaximumOp>>({x, y, d});
  check_close<T>(mx.out(0), {0, 20, 30, 20});
  check_close<T>(mx.out(1), {10, 0, 0, 20});
  auto mn = run_op<GradOf<MinimumOp>>({x, y, d});
  check_close<T>(mn.out(0), {10, 0, 0, 20});
  check_close<T>(mn.out(1), {0, 20, 30, 20});
  KILN_CHECK_ERROR(run_op<GradOf<MaximumOp>>({x, y, t<T>({2}, {1, 2})}), InvalidArgument,
                     {"kiln.maximum_grad", "broadcast"});
}

// ---- reductions ----

TEMPLATE_TEST_CASE("sum_grad, mean_grad and max_grad spread dout back over the reduced axes",
                   "[kernel][grad]", float, double) {
  using T = TestType;
  auto x = t<T>({2, 3}, {1, 9, 3, 7, 2, 7});
  auto d = t<T>({2}, {6, 12});
  check_close<T>(run_op<GradOf<SumOp>>({x, d}, Axes{1}, false).out(), {6, 6, 6, 12, 12, 12});
  check_close<T>(run_op<GradOf<MeanOp>>({x, d}, Axes{-1}, false).out(), {2, 2, 2, 4, 4, 4});
  auto m = t<T>({2}, {9, 7});
  check_close<T>(run_op<GradOf<MaxOp>>({x, m, d}, Axes{1}, false).out(), {0, 6, 0, 6, 0, 6});
  auto dk = t<T>({1, 3}, {1, 2, 3});  // axis 0, keepdim
  check_close<T>(run_op<GradOf<SumOp>>({x, dk}, Axes{0}, true).out(), {1, 2, 3, 1, 2, 3});
  check_close<T>(run_op<GradOf<MeanOp>>({x, t<T>({}, {12})}, Axes{}, false).out(),
                 {2, 2, 2, 2, 2, 2});
}

TEST_CASE("reduction grads reject a dout not shaped like the reduced x", "[kernel][grad]") {
  Program p;
  KILN_CHECK_ERROR(build_op<GradOf<SumOp>>(p, {{DataType::Float32, {2, 3}}, {DataType::Float32, {3}}},
                                         Axes{1}, false),
                     InvalidArgument, {"kiln.sum_grad", "[3]", "[2]"});
  KILN_CHECK_ERROR(build_op<GradOf<MeanOp>>(p, {{DataType::Float32, {2, 3}}, {DataType::Float32, {2}}},
                                          Axes{5}, false),
                     InvalidArgument, {"kiln.mean_grad", "axis 5"});
  KILN_CHECK_ERROR(run_op<GradOf<SumOp>>({filled<float>({2, 3}), filled<float>({3})}, Axes{0}, true),
                     InvalidArgument, {"kiln.sum_grad", "[1, 3]"});
}

// ---- softmax family ----

TEMPLATE_TEST_CASE("softmax_grad and log_softmax_grad match their formulas along an inner axis",
                   "[kernel][grad]", float, double) {
  using T = TestType;
  // [2, 3, 2], axis 1: columns (r, ·, k).
  auto y = filled<double>({2, 3, 2}, 0.05, 0.6, 4).to_vector<double>();
  auto d = filled<double>({2, 3, 2}, -1, 1, 5).to_vector<double>();
  std::vector<double> sm(12), lsm(12);
  for (int r = 0; r < 2; ++r)
    for (int k = 0; k < 2; ++k) {
      double s1 = 0, s2 = 0;
      for (int j = 0; j < 3; ++j) {
        int i = (r * 3 + j) * 2 + k;
        s1 += d[i] * y[i];
        s2 += d[i];
      }
      for (int j = 0; j < 3; ++j) {
        int i = (r * 3 + j) * 2 + k;
        sm[i] = y[i] * (d[i] - s1);
        lsm[i] = d[i] - std::exp(y[i]) * s2;
      }
    }
  check_close<T>(run_op<GradOf<SoftmaxOp>>({t<T>({2, 3, 2}, y), t<T>({2, 3, 2}, d)}, 1).out(), as<T>(sm));
  check_close<T>(run_op<GradOf<LogSoftmaxOp>>({t<T>({2, 3, 2}, y), t<T>({2, 3, 2}, d)}, -2).out(), as<T>(lsm));
  KILN_CHECK_ERROR(run_op<GradOf<SoftmaxOp>>({t<T>({2}, {1, 2}), t<T>({2}, {1, 2})}, 3),
                     InvalidArgument, {"kiln.softmax_grad", "axis 3"});
}

TEMPLATE_TEST_CASE("softmax_grad and log_softmax_grad along the last axis of long rows match the formula",
                   "[kernel][grad]", float, double) {
  using T = TestType;
  const std::int64_t rows = 7, c = 1001;  // lanes of 16 and a tail
  auto y = filled<double>({rows, c}, 0.0001, 0.002, 6).to_vector<double>();
  auto d = filled<double>({rows, c}, -1, 1, 7).to_vector<double>();
  std::vector<double> sm(y.size()), lsm(y.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    double s1 = 0, s2 = 0;
    for (std::int64_t j = 0; j < c; ++j) {
      s1 += d[r * c + j] * y[r * c + j];
      s2 += d[r * c + j];
    }
    for (std::int64_t j = 0; j < c; ++j) {
      const std::int64_t i = r * c + j;
      sm[i] = y[i] * (d[i] - s1);
      lsm[i] = d[i] - std::exp(y[i]) * s2;
    }
  }
  check_close<T>(run_op<GradOf<SoftmaxOp>>({t<T>({rows, c}, y), t<T>({rows, c}, d)}, -1).out(), as<T>(sm));
  check_close<T>(run_op<GradOf<LogSoftmaxOp>>({t<T>({rows, c}, y), t<T>({rows, c}, d)}, 1).out(), as<T>(lsm));
}

TEMPLATE_TEST_CASE("softmax_with_cross_entropy_grad is (softmax - onehot) · dloss, 0 when ignored",
                   "[kernel][grad]", float, double) {
  using T = TestType;
  auto sm = t<T>({3, 2}, {0.25, 0.75, 0.5, 0.5, 0.9, 0.1});
  auto label = Tensor::from_vector<std::int64_t>({3, 1}, {1, -100, 0});
  auto dl = t<T>({3, 1}, {2, 3, 4});
  check_close<T>(run_op<GradOf<SoftmaxWithCrossEntropyOp>>({sm, label, dl}, std::int64_t{-100}).out(),
                 {0.5, -0.5, 0, 0, -0.4, 0.4});
  auto label32 = Tensor::from_vector<std::int32_t>({3}, {0, 0, 1});
  check_close<T>(run_op<GradOf<SoftmaxWithCrossEntropyOp>>({sm, label32, dl}, std::int64_t{-100}).out(),
                 {-1.5, 1.5, -1.5, 1.5, 3.6, -3.6});
  auto bad = Tensor::from_vector<std::int64_t>({3}, {0, 2, 1});
  KILN_CHECK_ERROR(run_op<GradOf<SoftmaxWithCrossEntropyOp>>({sm, bad, dl}, std::int64_t{-100}),
                     InvalidArgument, {"kiln.softmax_with_cross_entropy_grad", "row 1", "label 2"});
  Program p;
  KILN_CHECK_ERROR(build_op<GradOf<SoftmaxWithCrossEntropyOp>>(
                         p, {{DataType::Float32, {3, 2}}, {DataType::Int64, {3}},
                             {DataType::Float32, {3, 2}}},
                         std::int64_t{-100}),
                     InvalidArgument, {"kiln.softmax_with_cross_entropy_grad", "dloss"});
}

// ---- indexing ----

TEMPLATE_TEST_CASE("slice_grad writes dout into zeros at the sliced window", "[kernel][grad]",
                   float, double) {
  using T = TestType;
  auto x = Tensor::zeros({3, 4}, data_type_of<T>);
  auto d = t<T>({2, 2}, {1, 2, 3, 4});
  check_close<T>(run_op<GradOf<SliceOp>>({x, d}, Axes{0, 1}, Axes{1, -3}, Axes{3, 3}).out(),
                 {0, 0, 0, 0, 0, 1, 2, 0, 0, 3, 4, 0});
  KILN_CHECK_ERROR(run_op<GradOf<SliceOp>>({x, t<T>({1, 2}, {1, 2})}, Axes{0, 1}, Axes{1, 1},
                                         Axes{3, 3}),
                     InvalidArgument, {"kiln.slice_grad", "[1, 2]", "[2, 2]"});
}

TEMPLATE_TEST_CASE("gather_grad and embedding_grad scatter-add rows, repeats adding up",
                   "[kernel][grad]", float, double) {
  using T = TestType;
  auto x = Tensor::zeros({3, 2}, data_type_of<T>);
  auto idx = Tensor::from_vector<std::int64_t>({3}, {2, 0, 2});
  auto d = t<T>({3, 2}, {1, 2, 3, 4, 5, 6});
  check_close<T>(run_op<GradOf<GatherOp>>({x, idx, d}, std::int64_t{0}).out(), {3, 4, 0, 0, 6, 8});
  // axis 1: x [2, 3], index [2] → dout [2, 2]
  auto x1 = Tensor::zeros({2, 3}, data_type_of<T>);
  auto i1 = Tensor::from_vector<std::int32_t>({2}, {1, 1});
  check_close<T>(run_op<GradOf<GatherOp>>({x1, i1, t<T>({2, 2}, {1, 2, 3, 4})}, std::int64_t{1}).out(),
                 {0, 3, 0, 0, 7, 0});
  auto w = Tensor::zeros({4, 2}, data_type_of<T>);
  auto ids = Tensor::from_vector<std::int64_t>({3}, {1, 3, 1});
  check_close<T>(run_op<GradOf<EmbeddingOp>>({w, ids, d}, std::int64_t{-1}).out(),
                 {0, 0, 6, 8, 0, 0, 3, 4});
  check_close<T>(run_op<GradOf<EmbeddingOp>>({w, ids, d}, std::int64_t{1}).out(),
                 {0, 0, 0, 0, 0, 0, 3, 4});
  auto out_of_range = Tensor::from_vector<std::int64_t>({3}, {1, 4, 1});
  KILN_CHECK_ERROR(run_op<GradOf<EmbeddingOp>>({w, out_of_range, d}, std::int64_t{-1}), OutOfRange,
                     {"kiln.embedding_grad", "id 4", "[0, 4)"});
  KILN_CHECK_ERROR(run_op<GradOf<GatherOp>>({x, out_of_range, d}, std::int64_t{0}), OutOfRange,
                     {"kiln.gather_grad", "index 4"});
}

// ---- dropout_grad ----

TEMPLATE_TEST_CASE("dropout_grad keeps masked-in elements scaled by 1/(1-p)", "[kernel][grad]",
                   float, double) {
  using T = TestType;
  auto d = t<T>({4}, {1, 2, 3, 4});
  auto mask = Tensor::empty({4}, DataType::Bool);
  const bool keep[4] = {true, false, true, false};
  for (int i = 0; i < 4; ++i) mask.data<bool>()[i] = keep[i];
  check_close<T>(run_op<GradOf<DropoutOp>>({d, mask}, 0.5, false).out(), {2, 0, 6, 0});
  check_close<T>(run_op<GradOf<DropoutOp>>({d, mask}, 0.5, true).out(), {1, 2, 3, 4});
  Program p;
  KILN_CHECK_ERROR(build_op<GradOf<DropoutOp>>(p, {{DataType::Float32, {4}}, {DataType::Float32, {4}}},
                                             0.5, false),
                     InvalidArgument, {"kiln.dropout_grad", "bool"});
  KILN_CHECK_ERROR(build_op<GradOf<DropoutOp>>(p, {{DataType::Float32, {4}}, {DataType::Bool, {4}}},
                                             1.0, false),
                     InvalidArgument, {"kiln.dropout_grad", "[0, 1)"});
}

TEST_CASE("grad ops name themselves and the mismatched operand when built on bad shapes",
          "[kernel][grad]") {
  Program p;
  const auto f32 = DataType::Float32;
  KILN_CHECK_ERROR(build_op<GradOf<MaxOp>>(p, {{f32, {2, 3}}, {f32, {3}}, {f32, {2}}}, Axes{1},
                                         false),
                     InvalidArgument, {"kiln.max_grad", "out [3]", "[2]"});
  KILN_CHECK_ERROR(build_op<GradOf<GatherOp>>(p, {{f32, {5, 3}}, {DataType::Int64, {4}}, {f32, {5, 3}}},
                                            std::int64_t{0}),
                     InvalidArgument, {"kiln.gather_grad", "dout [5, 3]", "[4, 3]"});
  KILN_CHECK_ERROR(build_op<GradOf<GatherOp>>(p, {{f32, {5, 3}}, {f32, {4}}, {f32, {4, 3}}},
                                            std::int64_t{0}),
                     InvalidArgument, {"kiln.gather", "i32 or i64"});
  KILN_CHECK_ERROR(
      build_op<GradOf<EmbeddingOp>>(p, {{f32, {6, 2}}, {DataType::Int64, {3}}, {f32, {3, 4}}},
                                std::int64_t{-1}),
      InvalidArgument, {"kiln.embedding_grad", "dout [3, 4]", "[3, 2]"});
  KILN_CHECK_ERROR(build_op<GradOf<SliceOp>>(p, {{f32, {4, 5}}, {f32, {4, 5}}}, Axes{1}, Axes{1},
                                           Axes{3}),
                     InvalidArgument, {"kiln.slice_grad", "dout [4, 5]", "[4, 2]"});
  KILN_CHECK_ERROR(build_op<GradOf<MinimumOp>>(p, {{f32, {2, 3}}, {f32, {4}}, {f32, {2, 3}}}),
                     InvalidArgument, {"kiln.minimum_grad", "broadcast"});
  KILN_CHECK_ERROR(build_op<GradOf<LogSoftmaxOp>>(p, {{f32, {2, 3}}, {f32, {2, 4}}}, -1),
                     InvalidArgument, {"kiln.log_softmax_grad", "[2, 3]", "[2, 4]"});
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{2, 3}).result();
  KILN_CHECK_ERROR(b.create<SplitAsOp>(x, std::vector<Value>{}, 0), InvalidArgument,
                     {"kiln.split_as", "at least one ref"});
}

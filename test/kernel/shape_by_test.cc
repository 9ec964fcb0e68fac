// The CPU kernels of the run-time shape ops (kiln/dialect/shape_ops.h)
// against values worked out by hand: shape and numel, reshape / expand /
// slice / squeeze / unsqueeze / split / sum / tile / full by a tensor
// operand, strided slices with negative steps, range; and the errors for
// bad operands read at run time.
#include <cstdint>
#include <vector>

#include "kernel/kernel_test_util.h"
#include "kiln/dialect/shape_ops.h"

using namespace kiln;
using kiln_test::build_op;
using kiln_test::run_op;

namespace {

using I64s = std::vector<std::int64_t>;

Tensor ints(const I64s& v) { return Tensor::from_vector<std::int64_t>(Dims{static_cast<std::int64_t>(v.size())}, v); }

Tensor iota_f(const I64s& dims) {
  Dims d(dims);
  std::vector<float> v(static_cast<std::size_t>(d.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  return Tensor::from_vector<float>(d, v);
}

}  // namespace

TEST_CASE("kiln.shape and kiln.numel give a tensor's run-time dims and element count", "[ops][shape]") {
  auto s = run_op<ShapeOp>({iota_f({2, 3, 4})});
  CHECK(s.out().dims() == Dims{3});
  CHECK(s.out().to_vector<std::int64_t>() == I64s{2, 3, 4});
  auto n = run_op<NumelOp>({iota_f({2, 3, 4})});
  CHECK(n.out().dims() == Dims());
  CHECK(n.out().to_vector<std::int64_t>() == I64s{24});
  CHECK(run_op<ShapeOp>({Tensor::from_vector<float>(Dims(), {1.f})}).out().numel() == 0);
}

TEST_CASE("reshape by a shape computed at run time copies 0s, infers one -1 and views the input",
          "[ops][shape]") {
  Tensor x = iota_f({2, 3, 4});
  auto r = run_op<ReshapeByOp>({x, ints({0, -1})}, false);
  CHECK(r.out().dims() == Dims{2, 12});
  CHECK(r.out().to_vector<float>() == x.to_vector<float>());
  CHECK(r.out().raw_data() == x.raw_data());  // a view
  auto r2 = run_op<ReshapeByOp>({x, Tensor::from_vector<std::int32_t>(Dims{3}, {4, 3, 2})}, false);
  CHECK(r2.out().dims() == Dims{4, 3, 2});
  // allowzero: a 0 is a 0 dim.
  auto z = run_op<ReshapeByOp>({Tensor::from_vector<float>(Dims{0, 3}, {}), ints({3, 0})}, true);
  CHECK(z.out().dims() == Dims{3, 0});

  KILN_CHECK_ERROR(run_op<ReshapeByOp>({x, ints({-1, -1})}, false), InvalidArgument,
                   {"kiln.reshape_by", "one -1, got two"});
  KILN_CHECK_ERROR(run_op<ReshapeByOp>({x, ints({5, 5})}, false), InvalidArgument,
                   {"kiln.reshape_by", "24 elements", "[5, 5]"});
  KILN_CHECK_ERROR(run_op<ReshapeByOp>({x, ints({-1, 5})}, false), InvalidArgument,
                   {"kiln.reshape_by", "-1"});
  // Dims a builder knew at build time are checked at run time.
  auto k = run_op<ReshapeByOp>({x, ints({0, -1})}, false, I64s{-1, 12});
  CHECK(shaped_dims(k.op->result_type(0)) == I64s{-1, 12});
  KILN_CHECK_ERROR(run_op<ReshapeByOp>({x, ints({0, -1})}, false, I64s{3, -1}), InvalidArgument,
                   {"kiln.reshape_by", "made dims [2, 12] at run time", "expects [3, -1]"});
  KILN_CHECK_ERROR(run_op<ExpandByOp>({iota_f({3, 1}), ints({2, 1, 2})}, I64s{2, 3, 3}), InvalidArgument,
                   {"kiln.expand_by", "made dims [2, 3, 2]", "expects [2, 3, 3]"});
  Program p;
  KILN_CHECK_ERROR(build_op<ReshapeByOp>(p, {{DataType::Float32, {2, 3}}, {DataType::Int64, {2}}}, false, I64s{4, 1}),
                   InvalidArgument, {"kiln.reshape_by", "cannot reshape [2, 3] into [4, 1]"});
  KILN_CHECK_ERROR(build_op<ReshapeByOp>(p, {{DataType::Float32, {2, 3}}, {DataType::Int64, {2}}}, false, I64s{6}),
                   InvalidArgument, {"kiln.reshape_by", "known_dims [6]", "one entry per result dim"});
  KILN_CHECK_ERROR(build_op<ReshapeByOp>(p, {{DataType::Float32, {2, 3}}, {DataType::Float32, {2}}}, false),
                   InvalidArgument, {"kiln.reshape_by", "shape", "1-D i32 or i64"});
  KILN_CHECK_ERROR(build_op<ReshapeByOp>(p, {{DataType::Float32, {2, 3}}, {DataType::Int64, {2, 1}}}, false),
                   InvalidArgument, {"kiln.reshape_by", "1-D"});
  KILN_CHECK_ERROR(build_op<ReshapeByOp>(p, {{DataType::Float32, {2, 3}}, {DataType::Int64, {-1}}}, false),
                   InvalidArgument, {"kiln.reshape_by", "length known at build time"});
}

TEST_CASE("expand by a run-time shape broadcasts both ways, as ONNX Expand", "[ops][shape]") {
  Tensor x = Tensor::from_vector<float>(Dims{3, 1}, {1, 2, 3});
  auto r = run_op<ExpandByOp>({x, ints({2, 1, 2})});
  CHECK(r.out().dims() == Dims{2, 3, 2});
  CHECK(r.out().to_vector<float>() == std::vector<float>{1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3});
  // A shape of lower rank and 1s keeps x's dims.
  auto k = run_op<ExpandByOp>({x, ints({1})});
  CHECK(k.out().dims() == Dims{3, 1});
  CHECK(k.out().to_vector<float>() == std::vector<float>{1, 2, 3});
  KILN_CHECK_ERROR(run_op<ExpandByOp>({x, ints({2, 2})}), InvalidArgument,
                   {"kiln.expand_by", "cannot expand", "3 and 2"});
  // Dims read at run time whose product overflows are an error, not a short buffer.
  const std::int64_t big = std::int64_t{1} << 40;
  KILN_CHECK_ERROR(run_op<ExpandByOp>({x, ints({big, big, 3, 1})}), OutOfRange,
                   {"kiln.expand_by", "multiply beyond int64"});
  KILN_CHECK_ERROR(run_op<FullByOp>({ints({big, big})}, 0.0, DataType::Float32), OutOfRange,
                   {"kiln.full_by", "multiply beyond int64"});
  KILN_CHECK_ERROR(run_op<TileOp>({x, ints({big, big})}), OutOfRange,
                   {"kiln.tile", "multiply beyond int64"});
}

TEST_CASE("a strided slice takes every step-th element, backwards for a negative step, bounds "
          "clamped as in ONNX",
          "[ops][shape]") {
  Tensor x = iota_f({2, 5});
  // x[:, 4:0:-2] -> columns 4, 2
  auto a = run_op<StridedSliceOp>({x}, I64s{1}, I64s{4}, I64s{0}, I64s{-2});
  CHECK(a.out().dims() == Dims{2, 2});
  CHECK(a.out().to_vector<float>() == std::vector<float>{4, 2, 9, 7});
  // x[::-1, ::3] with out-of-range bounds
  auto b = run_op<StridedSliceOp>({x}, I64s{0, 1}, I64s{-1, -100}, I64s{INT64_MIN, 100}, I64s{-1, 3});
  CHECK(b.out().dims() == Dims{2, 2});
  CHECK(b.out().to_vector<float>() == std::vector<float>{5, 8, 0, 3});
  // a start before the dim with a negative step clamps to 0 (ONNX): one element
  auto c = run_op<StridedSliceOp>({x}, I64s{1}, I64s{-100}, I64s{-100}, I64s{-1});
  CHECK(c.out().dims() == Dims{2, 1});
  CHECK(c.out().to_vector<float>() == std::vector<float>{0, 5});
  // with a positive step, to 0 as well: x[:, -100:2]
  auto d = run_op<StridedSliceOp>({x}, I64s{1}, I64s{-100}, I64s{2}, I64s{1});
  CHECK(d.out().to_vector<float>() == std::vector<float>{0, 1, 5, 6});
  Program p;
  KILN_CHECK_ERROR(build_op<StridedSliceOp>(p, {{DataType::Float32, {2, 5}}}, I64s{1}, I64s{0}, I64s{5}, I64s{0}),
                   InvalidArgument, {"kiln.strided_slice", "steps [0]"});
}

TEST_CASE("slice by run-time starts, ends, axes and steps matches the strided slice", "[ops][shape]") {
  Tensor x = iota_f({3, 4});
  // x[2:0:-1, 1::2]
  auto r = run_op<SliceByOp>({x, ints({2, 1}), ints({0, 100}), ints({0, -1}), ints({-1, 2})});
  CHECK(r.out().dims() == Dims{2, 2});
  CHECK(r.out().to_vector<float>() == std::vector<float>{9, 11, 5, 7});
  KILN_CHECK_ERROR(run_op<SliceByOp>({x, ints({0}), ints({2}), ints({0}), ints({0})}), InvalidArgument,
                   {"kiln.slice_by", "step of 0"});
  KILN_CHECK_ERROR(run_op<SliceByOp>({x, ints({0}), ints({2}), ints({0, 1}), ints({1})}), InvalidArgument,
                   {"kiln.slice_by", "axes"});
  KILN_CHECK_ERROR(run_op<SliceByOp>({x, ints({0, 0}), ints({2, 2}), ints({1, 1}), ints({1, 1})}),
                   InvalidArgument, {"kiln.slice_by", "twice"});
  // The gradient writes dout back where the slice took it.
  auto g = run_op<GradOf<SliceByOp>>({x, ints({2, 1}), ints({0, 100}), ints({0, -1}), ints({-1, 2}),
                                      Tensor::from_vector<float>(Dims{2, 2}, {1, 2, 3, 4})});
  CHECK(g.out().dims() == Dims{3, 4});
  CHECK(g.out().to_vector<float>() == std::vector<float>{0, 0, 0, 0, 0, 3, 0, 4, 0, 1, 0, 2});
}

TEST_CASE("squeeze and unsqueeze by run-time axes view the input", "[ops][shape]") {
  Tensor x = iota_f({2, 1, 3, 1});
  auto s = run_op<SqueezeByOp>({x, ints({-1, 1})});
  CHECK(s.out().dims() == Dims{2, 3});
  CHECK(s.out().raw_data() == x.raw_data());
  KILN_CHECK_ERROR(run_op<SqueezeByOp>({x, ints({0})}), InvalidArgument,
                   {"kiln.squeeze_by", "dim 0", "not 1"});
  auto u = run_op<UnsqueezeByOp>({iota_f({2, 3}), ints({0, -1})});
  CHECK(u.out().dims() == Dims{1, 2, 3, 1});
  KILN_CHECK_ERROR(run_op<UnsqueezeByOp>({iota_f({2, 3}), ints({0, 0})}), InvalidArgument,
                   {"kiln.unsqueeze_by", "twice"});
}

TEST_CASE("split by run-time sizes cuts the dim into parts that must add up", "[ops][shape]") {
  Tensor x = iota_f({2, 5});
  auto r = run_op<SplitByOp>({x, ints({2, 0, 3})}, std::int64_t{1});
  REQUIRE(r.results.size() == 3);
  CHECK(r.out(0).to_vector<float>() == std::vector<float>{0, 1, 5, 6});
  CHECK(r.out(1).dims() == Dims{2, 0});
  CHECK(r.out(2).to_vector<float>() == std::vector<float>{2, 3, 4, 7, 8, 9});
  KILN_CHECK_ERROR(run_op<SplitByOp>({x, ints({2, 2})}, std::int64_t{1}), InvalidArgument,
                   {"kiln.split_by", "add up to 4", "is 5"});
}

TEST_CASE("sum by run-time axes, with and without keepdims", "[ops][shape]") {
  Tensor x = iota_f({2, 3});
  auto a = run_op<SumByOp>({x, ints({0})}, false);
  CHECK(a.out().dims() == Dims{3});
  CHECK(a.out().to_vector<float>() == std::vector<float>{3, 5, 7});
  auto b = run_op<SumByOp>({x, ints({-1})}, true);
  CHECK(b.out().dims() == Dims{2, 1});
  CHECK(b.out().to_vector<float>() == std::vector<float>{3, 12});
  auto c = run_op<SumByOp>({Tensor::from_vector<std::int64_t>(Dims{2, 2}, {1, 2, 3, 4}), ints({1, 0})}, false);
  CHECK(c.out().to_vector<std::int64_t>() == I64s{10});
  KILN_CHECK_ERROR(run_op<SumByOp>({x, ints({1, 1})}, false), InvalidArgument, {"kiln.sum_by", "twice"});
}

TEST_CASE("tile repeats the input along each dim", "[ops][shape]") {
  Tensor x = Tensor::from_vector<std::int32_t>(Dims{2, 2}, {1, 2, 3, 4});
  auto r = run_op<TileOp>({x, ints({2, 1})});
  CHECK(r.out().dims() == Dims{4, 2});
  CHECK(r.out().to_vector<std::int32_t>() == std::vector<std::int32_t>{1, 2, 3, 4, 1, 2, 3, 4});
  auto c = run_op<TileOp>({x, ints({1, 2})});
  CHECK(c.out().to_vector<std::int32_t>() == std::vector<std::int32_t>{1, 2, 1, 2, 3, 4, 3, 4});
  CHECK(run_op<TileOp>({x, ints({0, 3})}).out().dims() == Dims{0, 6});
  KILN_CHECK_ERROR(run_op<TileOp>({x, ints({-1, 1})}), InvalidArgument, {"kiln.tile", ">= 0"});
  Program p;
  KILN_CHECK_ERROR(build_op<TileOp>(p, {{DataType::Float32, {2, 2}}, {DataType::Int64, {3}}}),
                   InvalidArgument, {"kiln.tile", "one entry per dim"});
}

TEST_CASE("full by a run-time shape fills its dtype", "[ops][shape]") {
  auto f = run_op<FullByOp>({ints({2, 3})}, 1.5, DataType::Float64);
  CHECK(f.out().dims() == Dims{2, 3});
  CHECK(f.out().to_vector<double>() == std::vector<double>(6, 1.5));
  auto i = run_op<FullByOp>({ints({0})}, 7.0, DataType::Int32);
  CHECK(i.out().dims() == Dims{0});
  auto b = run_op<FullByOp>({ints({})}, 1.0, DataType::Bool);
  CHECK(b.out().to_vector<bool>() == std::vector<bool>{true});
  KILN_CHECK_ERROR(run_op<FullByOp>({ints({2, -3})}, 0.0, DataType::Float32), InvalidArgument,
                   {"kiln.full_by", "negative dim"});
}

TEST_CASE("range counts from start by delta up to the limit, its length known at run time", "[ops][shape]") {
  auto scalar_f = [](float v) { return Tensor::from_vector<float>(Dims(), {v}); };
  auto r = run_op<RangeOp>({scalar_f(1), scalar_f(2), scalar_f(0.25f)});
  CHECK(r.out().to_vector<float>() == std::vector<float>{1, 1.25f, 1.5f, 1.75f});
  auto scalar_i = [](std::int32_t v) { return Tensor::from_vector<std::int32_t>(Dims(), {v}); };
  auto d = run_op<RangeOp>({scalar_i(10), scalar_i(3), scalar_i(-3)});
  CHECK(d.out().to_vector<std::int32_t>() == std::vector<std::int32_t>{10, 7, 4});
  CHECK(run_op<RangeOp>({scalar_i(3), scalar_i(10), scalar_i(-3)}).out().dims() == Dims{0});
  KILN_CHECK_ERROR(run_op<RangeOp>({scalar_i(0), scalar_i(3), scalar_i(0)}), InvalidArgument,
                   {"kiln.range", "delta is 0"});
  Program p;
  KILN_CHECK_ERROR(build_op<RangeOp>(p, {{DataType::Float32, {}}, {DataType::Int64, {}}, {DataType::Float32, {}}}),
                   InvalidArgument, {"kiln.range", "limit", "one dtype"});
}

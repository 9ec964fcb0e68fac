// Reference tests of the shape-manipulation kernels against hand-computed
// values: expand (new leading dims, -1, int dtypes), stack (every axis),
// flatten / squeeze / unsqueeze (views of the input's buffer), pad (PyTorch
// order, negative pads crop, fill value) and cumsum (exclusive, reverse).
#include <cstdint>
#include <vector>

#include "kernel/kernel_test_util.h"

using namespace kiln;
using kiln_test::check_close;
using kiln_test::run_op;
using kiln_test::f32;

namespace {
using V = std::vector<std::int64_t>;
}  // namespace

TEST_CASE("expand repeats size-1 dims and adds leading dims", "[kernel][manipulation]") {
  auto r = run_op<ExpandOp>({f32({2, 1}, {1, 2})}, V{2, 2, 3});
  CHECK(r.out().dims().to_vector() == V{2, 2, 3});
  check_close<float>(r.out(), {1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2});
  auto k = run_op<ExpandOp>({f32({1, 3}, {1, 2, 3})}, V{2, -1});
  check_close<float>(k.out(), {1, 2, 3, 1, 2, 3});
  auto i = run_op<BroadcastToOp>({Tensor::from_vector<std::int64_t>({}, {7})}, V{3});
  CHECK(i.out().to_vector<std::int64_t>() == std::vector<std::int64_t>{7, 7, 7});
}

TEST_CASE("stack joins tensors along a new axis at any position", "[kernel][manipulation]") {
  Tensor a = f32({2, 2}, {1, 2, 3, 4}), b = f32({2, 2}, {5, 6, 7, 8});
  auto s0 = run_op<StackOp>({a, b}, std::int64_t{0});
  CHECK(s0.out().dims().to_vector() == V{2, 2, 2});
  check_close<float>(s0.out(), {1, 2, 3, 4, 5, 6, 7, 8});
  auto s1 = run_op<StackOp>({a, b}, std::int64_t{1});
  check_close<float>(s1.out(), {1, 2, 5, 6, 3, 4, 7, 8});
  auto s2 = run_op<StackOp>({a, b}, std::int64_t{-1});
  CHECK(s2.out().dims().to_vector() == V{2, 2, 2});
  check_close<float>(s2.out(), {1, 5, 2, 6, 3, 7, 4, 8});
}

TEST_CASE("flatten squeeze and unsqueeze are views of the input's buffer",
          "[kernel][manipulation]") {
  Tensor x = kiln_test::filled<float>({2, 1, 3, 1});
  auto f = run_op<FlattenOp>({x}, std::int64_t{1}, std::int64_t{2});
  CHECK(f.out().dims().to_vector() == V{2, 3, 1});
  CHECK(f.out().raw_data() == x.raw_data());
  auto fa = run_op<FlattenOp>({x});
  CHECK(fa.out().dims().to_vector() == V{6});
  auto sq = run_op<SqueezeOp>({x});
  CHECK(sq.out().dims().to_vector() == V{2, 3});
  CHECK(sq.out().raw_data() == x.raw_data());
  auto sq1 = run_op<SqueezeOp>({x}, V{-1, 0});  // dim 0 is 2: kept
  CHECK(sq1.out().dims().to_vector() == V{2, 1, 3});
  auto us = run_op<UnsqueezeOp>({x}, V{0, -1});
  CHECK(us.out().dims().to_vector() == V{1, 2, 1, 3, 1, 1});
  CHECK(us.out().raw_data() == x.raw_data());
  auto u2 = run_op<UnsqueezeOp>({f32({2, 3}, {1, 2, 3, 4, 5, 6})}, V{1});
  CHECK(u2.out().dims().to_vector() == V{2, 1, 3});
  check_close<float>(u2.out(), {1, 2, 3, 4, 5, 6});
}

TEST_CASE("pad fills new elements with the value, last dim first, negative pads crop",
          "[kernel][manipulation]") {
  Tensor x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  auto p = run_op<PadOp>({x}, V{1, 0}, 9.0);
  CHECK(p.out().dims().to_vector() == V{2, 4});
  check_close<float>(p.out(), {9, 1, 2, 3, 9, 4, 5, 6});
  auto q = run_op<PadOp>({x}, V{0, 1, 1, 0}, 0.0);
  CHECK(q.out().dims().to_vector() == V{3, 4});
  check_close<float>(q.out(), {0, 0, 0, 0, 1, 2, 3, 0, 4, 5, 6, 0});
  auto c = run_op<PadOp>({x}, V{-1, 1, 0, -1}, -1.0);
  CHECK(c.out().dims().to_vector() == V{1, 3});
  check_close<float>(c.out(), {2, 3, -1});
  auto i = run_op<PadOp>({Tensor::from_vector<std::int32_t>({2}, {4, 5})}, V{2, 1}, 7.0);
  CHECK(i.out().to_vector<std::int32_t>() == std::vector<std::int32_t>{7, 7, 4, 5, 7});
}

TEST_CASE("cumsum sums along an axis inclusive or exclusive, forward or reversed",
          "[kernel][manipulation]") {
  Tensor x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  check_close<float>(run_op<CumsumOp>({x}, std::int64_t{1}).out(), {1, 3, 6, 4, 9, 15});
  check_close<float>(run_op<CumsumOp>({x}, std::int64_t{0}).out(), {1, 2, 3, 5, 7, 9});
  check_close<float>(run_op<CumsumOp>({x}, std::int64_t{-1}, true, false).out(),
                     {0, 1, 3, 0, 4, 9});
  check_close<float>(run_op<CumsumOp>({x}, std::int64_t{1}, false, true).out(),
                     {6, 5, 3, 15, 11, 6});
  check_close<float>(run_op<CumsumOp>({x}, std::int64_t{1}, true, true).out(),
                     {5, 3, 0, 11, 6, 0});
  check_close<float>(run_op<CumsumOp>({x}, std::int64_t{0}, true, true).out(),
                     {4, 5, 6, 0, 0, 0});
  auto i = run_op<CumsumOp>({Tensor::from_vector<std::int64_t>({4}, {1, 1, 1, 1})}, std::int64_t{0});
  CHECK(i.out().to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 2, 3, 4});
}

// Kernel tests of the element-wise indexing ops (kiln/dialect/indexing_ops.h)
// against hand-computed values (ONNX's and numpy's documented examples):
// take_along_axis / put_along_axis and gather_nd / scatter_nd, negative
// indices counting from the end, each reduction, i32 and i64 indices; an
// index out of range is a run-time error naming the op and the index.
#include <cstdint>
#include <vector>

#include "kernel/kernel_test_util.h"

using namespace kiln;
using kiln_test::build_op;
using kiln_test::check_close;
using kiln_test::run_op;
using kiln_test::f32;

namespace {

using I64s = std::vector<std::int64_t>;

Tensor i64(const I64s& dims, const I64s& v) { return Tensor::from_vector<std::int64_t>(Dims(dims), v); }
Tensor i32(const I64s& dims, const std::vector<std::int32_t>& v) {
  return Tensor::from_vector<std::int32_t>(Dims(dims), v);
}

}  // namespace

TEST_CASE("take_along_axis picks one element per index along the axis", "[kernel][indexing]") {
  // ONNX GatherElements' examples.
  auto a = run_op<TakeAlongAxisOp>({f32({2, 2}, {1, 2, 3, 4}), i64({2, 2}, {0, 0, 1, 0})}, std::int64_t{1});
  CHECK(a.out().dims().to_vector() == I64s{2, 2});
  CHECK(a.out().to_vector<float>() == std::vector<float>{1, 1, 4, 3});
  Tensor x = f32({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  auto b = run_op<TakeAlongAxisOp>({x, i32({2, 3}, {1, 2, 0, 2, 0, 0})}, std::int64_t{0});
  CHECK(b.out().to_vector<float>() == std::vector<float>{4, 8, 3, 7, 2, 3});
  // An index smaller than x in the other dims reads x's leading corner.
  auto c = run_op<TakeAlongAxisOp>({x, i64({2, 1}, {1, 0})}, std::int64_t{-1});
  CHECK(c.out().dims().to_vector() == I64s{2, 1});
  CHECK(c.out().to_vector<float>() == std::vector<float>{2, 4});
  // Rank 3, axis 1, and integer data.
  Tensor y = Tensor::from_vector<std::int64_t>(Dims({2, 3, 2}), {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  auto d = run_op<TakeAlongAxisOp>({y, i64({2, 1, 2}, {2, 0, 1, 1})}, std::int64_t{1});
  CHECK(d.out().to_vector<std::int64_t>() == I64s{4, 1, 8, 9});
}

TEST_CASE("take_along_axis counts a negative index from the end of the axis", "[kernel][indexing]") {
  Tensor x = f32({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  auto r = run_op<TakeAlongAxisOp>({x, i64({2, 3}, {-1, -2, 0, -3, 0, 0})}, std::int64_t{0});
  CHECK(r.out().to_vector<float>() == std::vector<float>{7, 5, 3, 1, 2, 3});
}

TEST_CASE("put_along_axis writes updates at the indices along the axis into a copy of x",
          "[kernel][indexing]") {
  // ONNX ScatterElements' example (axis 0).
  Tensor x = f32({3, 3}, std::vector<float>(9, 0.f));
  auto a = run_op<PutAlongAxisOp>({x, i64({2, 3}, {1, 0, 2, 0, 2, 1}), f32({2, 3}, {1, 1.1f, 1.2f, 2, 2.1f, 2.2f})},
                                  std::int64_t{0}, std::string("none"));
  CHECK(a.out().to_vector<float>() == std::vector<float>{2, 1.1f, 0, 1, 0, 2.2f, 0, 2.1f, 1.2f});
  CHECK(x.to_vector<float>() == std::vector<float>(9, 0.f));  // x itself is unchanged
  // Axis 1 with a negative index.
  auto b = run_op<PutAlongAxisOp>({f32({1, 5}, {1, 2, 3, 4, 5}), i32({1, 2}, {1, -2}), f32({1, 2}, {1.1f, 2.1f})},
                                  std::int64_t{1}, std::string("none"));
  CHECK(b.out().to_vector<float>() == std::vector<float>{1, 1.1f, 3, 2.1f, 5});
}

TEST_CASE("put_along_axis combines repeated indices by its reduction", "[kernel][indexing]") {
  Tensor x = f32({1, 5}, {1, 2, 3, 4, 5});
  Tensor idx = i64({1, 2}, {1, 1});
  Tensor upd = f32({1, 2}, {1.1f, 2.1f});
  auto run = [&](const char* red) -> Tensor {
    return run_op<PutAlongAxisOp>({x, idx, upd}, std::int64_t{1}, std::string(red)).out();
  };
  check_close(run("add"), std::vector<float>{1, 2 + 1.1f + 2.1f, 3, 4, 5});
  check_close(run("mul"), std::vector<float>{1, 2 * 1.1f * 2.1f, 3, 4, 5});
  CHECK(run("none").to_vector<float>() == std::vector<float>{1, 2.1f, 3, 4, 5});  // the last one wins
  CHECK(run("max").to_vector<float>() == std::vector<float>{1, 2.1f, 3, 4, 5});
  CHECK(run("min").to_vector<float>() == std::vector<float>{1, 1.1f, 3, 4, 5});
}

TEST_CASE("gather_nd picks the slice each index tuple names", "[kernel][indexing]") {
  // ONNX GatherND's examples.
  Tensor x2 = Tensor::from_vector<std::int32_t>(Dims({2, 2}), {0, 1, 2, 3});
  CHECK(run_op<GatherNdOp>({x2, i64({2, 2}, {0, 0, 1, 1})}, std::int64_t{0}).out().to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{0, 3});
  auto rows = run_op<GatherNdOp>({x2, i64({2, 1}, {1, 0})}, std::int64_t{0});
  CHECK(rows.out().dims().to_vector() == I64s{2, 2});
  CHECK(rows.out().to_vector<std::int32_t>() == std::vector<std::int32_t>{2, 3, 0, 1});
  Tensor x3 = f32({2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(run_op<GatherNdOp>({x3, i64({2, 2}, {0, 1, 1, 0})}, std::int64_t{0}).out().to_vector<float>() ==
        std::vector<float>{2, 3, 4, 5});
  auto nested = run_op<GatherNdOp>({x3, i64({2, 1, 2}, {0, 1, 1, 0})}, std::int64_t{0});
  CHECK(nested.out().dims().to_vector() == I64s{2, 1, 2});
  CHECK(nested.out().to_vector<float>() == std::vector<float>{2, 3, 4, 5});
  // batch_dims = 1: batch b's tuple indexes x[b].
  auto batched = run_op<GatherNdOp>({x3, i64({2, 1}, {1, 0})}, std::int64_t{1});
  CHECK(batched.out().dims().to_vector() == I64s{2, 2});
  CHECK(batched.out().to_vector<float>() == std::vector<float>{2, 3, 4, 5});
  // Negative entries count from the end of their dim.
  CHECK(run_op<GatherNdOp>({x2, i32({1, 2}, {-1, -2})}, std::int64_t{0}).out().to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{2});
}

TEST_CASE("scatter_nd writes or combines each update slice where its index tuple points",
          "[kernel][indexing]") {
  // ONNX ScatterND's first example.
  Tensor x = f32({8}, {1, 2, 3, 4, 5, 6, 7, 8});
  auto a = run_op<ScatterNdOp>({x, i64({4, 1}, {4, 3, 1, 7}), f32({4}, {9, 10, 11, 12})}, std::string("none"));
  CHECK(a.out().to_vector<float>() == std::vector<float>{1, 11, 3, 10, 9, 6, 7, 12});
  // Slices of rows, repeated tuples added / multiplied, a negative index.
  Tensor m = f32({3, 2}, {1, 1, 2, 2, 3, 3});
  Tensor idx = i64({3, 1}, {0, -3, 2});
  Tensor upd = f32({3, 2}, {1, 2, 3, 4, 5, 6});
  CHECK(run_op<ScatterNdOp>({m, idx, upd}, std::string("add")).out().to_vector<float>() ==
        std::vector<float>{5, 7, 2, 2, 8, 9});
  CHECK(run_op<ScatterNdOp>({m, idx, upd}, std::string("mul")).out().to_vector<float>() ==
        std::vector<float>{3, 8, 2, 2, 15, 18});
  CHECK(run_op<ScatterNdOp>({m, idx, upd}, std::string("none")).out().to_vector<float>() ==
        std::vector<float>{3, 4, 2, 2, 5, 6});
}

TEST_CASE("an index out of range is a run-time error naming the indexing op and the index",
          "[kernel][indexing]") {
  Tensor x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  KILN_CHECK_ERROR(run_op<TakeAlongAxisOp>({x, i64({2, 1}, {0, 3})}, std::int64_t{1}), OutOfRange,
                   {"kiln.take_along_axis", "index 3", "[-3, 3)"});
  KILN_CHECK_ERROR(run_op<TakeAlongAxisOp>({x, i32({1, 3}, {0, -3, 1})}, std::int64_t{0}), OutOfRange,
                   {"kiln.take_along_axis", "index -3", "[-2, 2)"});
  KILN_CHECK_ERROR(run_op<PutAlongAxisOp>({x, i64({1, 1}, {5}), f32({1, 1}, {9})}, std::int64_t{1},
                                          std::string("add")),
                   OutOfRange, {"kiln.put_along_axis", "index 5"});
  KILN_CHECK_ERROR(run_op<GatherNdOp>({x, i64({1, 2}, {1, 7})}, std::int64_t{0}), OutOfRange,
                   {"kiln.gather_nd", "index 7", "dim 1"});
  KILN_CHECK_ERROR(run_op<ScatterNdOp>({x, i64({1, 1}, {-4}), f32({1, 3}, {0, 0, 0})}, std::string("none")),
                   OutOfRange, {"kiln.scatter_nd", "index -4", "dim 0"});
}

TEST_CASE("the indexing ops reject a non-integer index and mismatched shapes when built",
          "[kernel][indexing]") {
  Program p;
  KILN_CHECK_ERROR(build_op<TakeAlongAxisOp>(p, {{DataType::Float32, {2, 3}}, {DataType::Float32, {2, 3}}},
                                             std::int64_t{0}),
                   InvalidArgument, {"kiln.take_along_axis", "i32 or i64"});
  KILN_CHECK_ERROR(build_op<TakeAlongAxisOp>(p, {{DataType::Float32, {2, 3}}, {DataType::Int64, {2}}},
                                             std::int64_t{0}),
                   InvalidArgument, {"kiln.take_along_axis", "x's rank 2"});
  KILN_CHECK_ERROR(build_op<PutAlongAxisOp>(p,
                                            {{DataType::Float32, {2, 3}}, {DataType::Int64, {2, 2}},
                                             {DataType::Float32, {2, 1}}},
                                            std::int64_t{1}, std::string("none")),
                   InvalidArgument, {"kiln.put_along_axis", "updates [2, 1]", "index's shape [2, 2]"});
  KILN_CHECK_ERROR(build_op<PutAlongAxisOp>(p,
                                            {{DataType::Float32, {2, 3}}, {DataType::Int64, {2, 2}},
                                             {DataType::Float32, {2, 2}}},
                                            std::int64_t{1}, std::string("average")),
                   InvalidArgument, {"kiln.put_along_axis", "reduction 'average'"});
  KILN_CHECK_ERROR(build_op<GatherNdOp>(p, {{DataType::Float32, {2, 3}}, {DataType::Int64, {2, 3}}},
                                        std::int64_t{0}),
                   InvalidArgument, {"kiln.gather_nd", "tuples of length 3"});
  KILN_CHECK_ERROR(build_op<ScatterNdOp>(p,
                                         {{DataType::Float32, {4, 3}}, {DataType::Int64, {2, 1}},
                                          {DataType::Float32, {2}}},
                                         std::string("none")),
                   InvalidArgument, {"kiln.scatter_nd", "updates [2]", "[2, 3]"});
}

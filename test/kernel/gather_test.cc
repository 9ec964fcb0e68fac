// Reference tests of gather (numpy `take` along an axis) and embedding
// lookup: each against plain loops written here, with i32 and i64 indices of
// several shapes and several data dtypes; padding_idx; out-of-range indices
// are errors naming the op and the index, raised before anything is written.
#include <cstdint>
#include <numeric>
#include <vector>

#include "kernel/kernel_test_util.h"

using namespace kiln;
using kiln_test::build_op;
using kiln_test::run_op;
using kiln_test::iota;

namespace {

using I64s = std::vector<std::int64_t>;

// out[a.., k.., b..] = x[a.., index[k..], b..]
template <typename T, typename I>
std::vector<T> ref_gather(const Tensor& x, const Tensor& index, std::int64_t axis) {
  auto xd = x.dims().to_vector();
  if (axis < 0) axis += static_cast<std::int64_t>(xd.size());
  std::int64_t outer = 1, inner = 1, n = xd[axis];
  for (std::int64_t k = 0; k < axis; ++k) outer *= xd[k];
  for (std::size_t k = axis + 1; k < xd.size(); ++k) inner *= xd[k];
  auto xv = x.to_vector<T>();
  auto iv = index.to_vector<I>();
  std::vector<T> out;
  for (std::int64_t o = 0; o < outer; ++o)
    for (I id : iv)
      for (std::int64_t j = 0; j < inner; ++j) out.push_back(xv[(o * n + id) * inner + j]);
  return out;
}

template <typename T, typename I>
void check_gather(const I64s& xdims, const I64s& idims, const std::vector<I>& ids, std::int64_t axis) {
  INFO("x " << Dims(xdims) << " index " << Dims(idims) << " axis " << axis);
  Tensor x = iota<T>(xdims);
  Tensor index = Tensor::from_vector<I>(Dims(idims), ids);
  auto run = run_op<GatherOp>({x, index}, axis);
  std::int64_t a = axis < 0 ? axis + static_cast<std::int64_t>(xdims.size()) : axis;
  I64s od(xdims.begin(), xdims.begin() + a);
  od.insert(od.end(), idims.begin(), idims.end());
  od.insert(od.end(), xdims.begin() + a + 1, xdims.end());
  CHECK(run.out().dims().to_vector() == od);
  CHECK(run.out().to_vector<T>() == ref_gather<T, I>(x, index, axis));
}

}  // namespace

TEST_CASE("gather takes the indexed slices along the axis like the loop", "[kernel]") {
  check_gather<float, std::int64_t>({5, 3}, {4}, {4, 0, 0, 2}, 0);
  check_gather<float, std::int32_t>({5, 3}, {2}, {2, 1}, 1);
  check_gather<float, std::int64_t>({2, 5, 3}, {2, 2}, {1, 4, 3, 3}, 1);  // 2-D index
  check_gather<double, std::int64_t>({2, 5, 3}, {3}, {0, 2, 1}, -1);
  check_gather<std::int64_t, std::int32_t>({6}, {}, {5}, 0);               // scalar index
  check_gather<std::int32_t, std::int64_t>({3, 4}, {0}, {}, 0);            // empty index
  check_gather<bool, std::int64_t>({4, 2}, {2}, {3, 1}, 0);
}

TEST_CASE("gather with an index out of range is an error naming the op and the index", "[kernel]") {
  Tensor x = iota<float>({4, 3});
  KILN_CHECK_ERROR(run_op<GatherOp>({x, Tensor::from_vector<std::int64_t>({3}, {1, 4, 0})}, std::int64_t{0}),
                     OutOfRange, {"kiln.gather", "4", "[0, 4)"});
  KILN_CHECK_ERROR(run_op<GatherOp>({x, Tensor::from_vector<std::int32_t>({1}, {-1})}, std::int64_t{1}),
                     OutOfRange, {"kiln.gather", "-1", "[0, 3)"});
}

TEST_CASE("gather rejects a non-integer index and a bad axis", "[kernel]") {
  Program p;
  KILN_CHECK_ERROR(build_op<GatherOp>(p, {{DataType::Float32, {4, 3}}, {DataType::Float32, {2}}}),
                     InvalidArgument, {"kiln.gather", "i32 or i64"});
  KILN_CHECK_ERROR(build_op<GatherOp>(p, {{DataType::Float32, {4, 3}}, {DataType::Int64, {2}}},
                                        std::int64_t{2}),
                     InvalidArgument, {"kiln.gather", "axis"});
}

TEST_CASE("embedding looks up one weight row per id, for ids of any shape", "[kernel]") {
  Tensor w = kiln_test::filled<float>({6, 4});
  auto wv = w.to_vector<float>();
  auto rows = [&](const std::vector<std::int64_t>& ids) {
    std::vector<float> out;
    for (auto id : ids) out.insert(out.end(), wv.begin() + id * 4, wv.begin() + id * 4 + 4);
    return out;
  };
  std::vector<std::int64_t> ids = {5, 0, 2, 2, 1, 3};
  auto run = run_op<EmbeddingOp>({w, Tensor::from_vector<std::int64_t>({2, 3}, ids)});
  CHECK(run.out().dims() == Dims{2, 3, 4});
  CHECK(run.out().to_vector<float>() == rows(ids));

  auto flat = run_op<EmbeddingOp>({w, Tensor::from_vector<std::int32_t>({3}, {1, 1, 4})});
  CHECK(flat.out().dims() == Dims{3, 4});
  CHECK(flat.out().to_vector<float>() == rows({1, 1, 4}));

  auto one = run_op<EmbeddingOp>({w, Tensor::from_vector<std::int64_t>({}, {3})});
  CHECK(one.out().dims() == Dims{4});
  CHECK(one.out().to_vector<float>() == rows({3}));

  Tensor wd = kiln_test::filled<double>({3, 2});
  auto dbl = run_op<EmbeddingOp>({wd, Tensor::from_vector<std::int64_t>({2}, {2, 0})});
  auto wdv = wd.to_vector<double>();
  CHECK(dbl.out().to_vector<double>() == std::vector<double>{wdv[4], wdv[5], wdv[0], wdv[1]});
}

TEST_CASE("embedding gives zero rows for padding_idx", "[kernel]") {
  Tensor w = kiln_test::filled<float>({4, 3}, 1, 2);  // no zero entries
  auto run = run_op<EmbeddingOp>({w, Tensor::from_vector<std::int64_t>({3}, {2, 1, 2})}, std::int64_t{2});
  auto wv = w.to_vector<float>();
  CHECK(run.out().to_vector<float>() == std::vector<float>{0, 0, 0, wv[3], wv[4], wv[5], 0, 0, 0});
}

TEST_CASE("embedding with an id out of range is an error naming the op and the id", "[kernel]") {
  Tensor w = kiln_test::filled<float>({4, 3});
  KILN_CHECK_ERROR(run_op<EmbeddingOp>({w, Tensor::from_vector<std::int64_t>({2, 2}, {0, 1, 7, 2})}),
                     OutOfRange, {"kiln.embedding", "id 7", "position 2", "[0, 4)"});
  KILN_CHECK_ERROR(run_op<EmbeddingOp>({w, Tensor::from_vector<std::int32_t>({1}, {-3})}),
                     OutOfRange, {"kiln.embedding", "id -3"});
}

TEST_CASE("embedding rejects a weight that is not 2-D, float ids and a bad padding_idx", "[kernel]") {
  Program p;
  KILN_CHECK_ERROR(build_op<EmbeddingOp>(p, {{DataType::Float32, {4}}, {DataType::Int64, {2}}}),
                     InvalidArgument, {"kiln.embedding", "[vocab, dim]"});
  KILN_CHECK_ERROR(build_op<EmbeddingOp>(p, {{DataType::Float32, {4, 3}}, {DataType::Float32, {2}}}),
                     InvalidArgument, {"kiln.embedding", "ids"});
  KILN_CHECK_ERROR(build_op<EmbeddingOp>(p, {{DataType::Float32, {4, 3}}, {DataType::Int64, {2}}},
                                           std::int64_t{4}),
                     InvalidArgument, {"kiln.embedding", "padding_idx"});
}

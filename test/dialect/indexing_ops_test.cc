// InferMeta and Vjp tests of the ops of kiln/dialect/indexing_ops.h: result
// shapes (unknown dims carried through), the build-time errors naming the
// op, and the gradients of take_along_axis / put_along_axis and gather_nd /
// scatter_nd against central finite differences in f64.
#include <vector>

#include "catch.hpp"
#include "dialect/grad_check.h"
#include "kiln/dialect/kiln_dialect.h"
#include "test_util.h"
#include "dialect/dialect_test_util.h"

using namespace kiln;
using namespace kiln_dialect_test;
using namespace kiln_vjp_test;

namespace {
using V = std::vector<std::int64_t>;


template <typename OpT>
std::vector<Type> meta_of(const std::vector<Type>& in, const typename OpT::Attributes& a) {
  return OpT::infer_meta(in, DictionaryAttribute::get(to_named_attributes(a)));
}
}  // namespace

TEST_CASE("indexing ops infer their result shapes from x and the index", "[dialect][indexing]") {
  auto take = meta_of<TakeAlongAxisOp>({tf({-1, 5, 3}), tf({-1, 2, 3}, DataType::Int32)}, {1});
  CHECK(shaped_dims(take[0]) == V{-1, 2, 3});
  CHECK(shaped_data_type(take[0]) == DataType::Float32);
  auto put = meta_of<PutAlongAxisOp>({tf({4, 5}, DataType::Int64), tf({2, 5}, DataType::Int64),
                                      tf({2, 5}, DataType::Int64)},
                                     {0, "add"});
  CHECK(shaped_dims(put[0]) == V{4, 5});
  CHECK(shaped_data_type(put[0]) == DataType::Int64);
  CHECK(shaped_dims(meta_of<GatherNdOp>({tf({2, 3, 4}), tf({5, 2}, DataType::Int64)}, {0})[0]) == V{5, 4});
  CHECK(shaped_dims(meta_of<GatherNdOp>({tf({2, 3, 4}), tf({2, 7, 1}, DataType::Int64)}, {1})[0]) ==
        V{2, 7, 4});
  CHECK(shaped_dims(meta_of<ScatterNdOp>({tf({2, 3, 4}), tf({5, 1}, DataType::Int64), tf({5, 3, 4})},
                                         {"mul"})[0]) == V{2, 3, 4});
}

TEST_CASE("indexing ops reject bad operands and attributes at build time, naming the op",
          "[dialect][indexing]") {
  KILN_CHECK_ERROR(meta_of<TakeAlongAxisOp>({tf({2, 3}), tf({2, 3}, DataType::Int64)}, {2}), InvalidArgument,
                   {"kiln.take_along_axis", "axis 2"});
  KILN_CHECK_ERROR(meta_of<TakeAlongAxisOp>({tf({2, 3}), tf({3, 1}, DataType::Int64)}, {1}), InvalidArgument,
                   {"kiln.take_along_axis", "larger than x", "dim 0"});
  KILN_CHECK_ERROR(meta_of<TakeAlongAxisOp>({tf({}), tf({}, DataType::Int64)}, {0}), InvalidArgument,
                   {"kiln.take_along_axis", "rank >= 1"});
  KILN_CHECK_ERROR(meta_of<PutAlongAxisOp>({tf({2, 3}), tf({2, 3}, DataType::Int64), tf({2, 3}, DataType::Float64)},
                                           {0, "none"}),
                   InvalidArgument, {"kiln.put_along_axis", "f32", "f64"});
  KILN_CHECK_ERROR(meta_of<GatherNdOp>({tf({2, 3}), tf({2, -1}, DataType::Int64)}, {0}), InvalidArgument,
                   {"kiln.gather_nd", "last dim", "known at build time"});
  KILN_CHECK_ERROR(meta_of<GatherNdOp>({tf({2, 3}), tf({3, 1}, DataType::Int64)}, {1}), InvalidArgument,
                   {"kiln.gather_nd", "batch dim 0"});
  KILN_CHECK_ERROR(meta_of<GatherNdOp>({tf({2, 3}), tf({2, 1}, DataType::Int64)}, {-1}), InvalidArgument,
                   {"kiln.gather_nd", "batch_dims -1"});
  KILN_CHECK_ERROR(meta_of<ScatterNdOp>({tf({2, 3}), tf({2, 1}, DataType::Int64), tf({2, 3})}, {"max_abs"}),
                   InvalidArgument, {"kiln.scatter_nd", "reduction 'max_abs'"});
}

TEST_CASE("take_along_axis's vjp adds the grad back at the taken positions", "[dialect][vjp][indexing]") {
  // Repeated and negative indices: their grads add up at one element of x.
  check_vjp({random_f64({3, 4}, -1, 1, 5), i64({2, 4}, {0, 2, -1, 1, 0, 2, 2, -3})},
            make_op<TakeAlongAxisOp>(std::int64_t{0}));
  check_vjp({random_f64({2, 3, 4}, -1, 1, 6), i64({2, 2, 2}, {3, 0, 1, 1, -1, 2, 0, 0})},
            make_op<TakeAlongAxisOp>(std::int64_t{-1}));
  GradCheckOptions unknown;
  unknown.unknown_batch = true;  // zeros_like instead of full for x's grad
  check_vjp({random_f64({3, 4}, -1, 1, 7), i64({3, 2}, {1, 1, 0, 3, 2, 0})},
            make_op<TakeAlongAxisOp>(std::int64_t{1}), unknown);
}

TEST_CASE("put_along_axis's vjp: x gets the grad where no update landed, updates get the grad "
          "they landed on",
          "[dialect][vjp][indexing]") {
  // Distinct indices along the axis (the assignment's grad is exact there).
  const Tensor idx = i64({2, 3}, {2, 0, 1, 0, 1, 2});
  check_vjp({random_f64({3, 3}, -1, 1, 8), idx, random_f64({2, 3}, -1, 1, 9)},
            make_op<PutAlongAxisOp>(std::int64_t{0}, std::string("none")));
  check_vjp({random_f64({3, 3}, -1, 1, 8), i64({2, 2}, {1, 1, 0, 1}), random_f64({2, 2}, -1, 1, 9)},
            make_op<PutAlongAxisOp>(std::int64_t{1}, std::string("add")));
}

TEST_CASE("gather_nd's vjp adds the grad back into the gathered slices, and scatter_nd's splits "
          "it between x and the updates",
          "[dialect][vjp][indexing]") {
  // A repeated tuple (its grads add up) and a negative entry.
  check_vjp({random_f64({3, 4}, -1, 1, 10), i64({3, 1}, {2, 0, -1})}, make_op<GatherNdOp>(std::int64_t{0}));
  check_vjp({random_f64({3, 4, 2}, -1, 1, 11), i64({2, 2, 2}, {0, 1, 2, 3, 0, 1, 1, -1})},
            make_op<GatherNdOp>(std::int64_t{0}));
  const Tensor rows = i64({2, 1}, {2, 0});  // distinct, as "none"'s gradient needs
  check_vjp({random_f64({3, 4}, -1, 1, 12), rows, random_f64({2, 4}, -1, 1, 13)},
            make_op<ScatterNdOp>(std::string("none")));
  check_vjp({random_f64({3, 4}, -1, 1, 12), i64({3, 2}, {1, 1, 1, 1, 2, -1}), random_f64({3}, -1, 1, 14)},
            make_op<ScatterNdOp>(std::string("add")));
}

TEST_CASE("gather_nd with batch_dims and scatter_nd's mul have no gradient: a clear error naming "
          "the op",
          "[dialect][vjp][indexing]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", V{2, 3}, DataType::Float64).result();
  Value idx = b.create<DataOp>("i", V{2, 1}, DataType::Int64).result();
  Value u = b.create<DataOp>("u", V{2, 3}, DataType::Float64).result();
  Operation* g = b.create<GatherNdOp>(x, idx, std::int64_t{1}).operation();
  Value dg = b.create<FullOp>(V{2}, 1.0, DataType::Float64).result();
  KILN_CHECK_ERROR(call_vjp(b, g, {dg}), Unimplemented, {"kiln.gather_nd", "batch_dims"});
  Operation* s = b.create<ScatterNdOp>(x, idx, u, "mul").operation();
  Value ds = b.create<FullOp>(V{2, 3}, 1.0, DataType::Float64).result();
  KILN_CHECK_ERROR(call_vjp(b, s, {ds}), Unimplemented, {"kiln.scatter_nd", "reduction 'mul'"});
}

// InferMeta, Vjp and error tests of the ops of kiln/dialect/search_ops.h:
// result shapes and dtypes (i64 indices), the build-time errors naming the
// op and what was expected, and topk's Vjp against central finite
// differences in f64.
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

TEST_CASE("search ops infer i64 indices and their shapes", "[dialect][search]") {
  auto am = meta_of<ArgMaxOp>({tf({2, -1, 4})}, {1, false});
  CHECK(shaped_dims(am[0]) == V{2, 4});
  CHECK(shaped_data_type(am[0]) == DataType::Int64);
  CHECK(shaped_dims(meta_of<ArgMinOp>({tf({2, 3})}, {-1, true})[0]) == V{2, 1});
  auto tk = meta_of<TopKOp>({tf({-1, 5})}, {3, -1, true, true});
  CHECK(shaped_dims(tk[0]) == V{-1, 3});
  CHECK(shaped_data_type(tk[0]) == DataType::Float32);
  CHECK(shaped_dims(tk[1]) == V{-1, 3});
  CHECK(shaped_data_type(tk[1]) == DataType::Int64);
  auto oh = meta_of<OneHotOp>({tf({-1, 2}, DataType::Int32)}, {10});
  CHECK(shaped_dims(oh[0]) == V{-1, 2, 10});
  CHECK(shaped_data_type(oh[0]) == DataType::Float32);
}

TEST_CASE("search ops reject bad shapes and attributes at build time, naming the op",
          "[dialect][search]") {
  KILN_CHECK_ERROR(meta_of<ArgMaxOp>({tf({2, 3})}, {2, false}), InvalidArgument,
                   {"kiln.argmax", "axis 2"});
  KILN_CHECK_ERROR(meta_of<ArgMinOp>({tf({})}, {0, false}), InvalidArgument,
                   {"kiln.argmin", "rank >= 1"});
  KILN_CHECK_ERROR(meta_of<ArgMaxOp>({tf({2, 0})}, {1, false}), InvalidArgument,
                   {"kiln.argmax", "empty dim"});
  KILN_CHECK_ERROR(meta_of<ArgMaxOp>({tf({2}, DataType::Bool)}, {0, false}), InvalidArgument,
                   {"kiln.argmax", "bool"});
  KILN_CHECK_ERROR(meta_of<TopKOp>({tf({2, 3})}, {4, -1, true, true}), InvalidArgument,
                   {"kiln.topk", "k = 4", "[0, 3]"});
  KILN_CHECK_ERROR(meta_of<TopKOp>({tf({2, 3})}, {-1, -1, true, true}), InvalidArgument,
                   {"kiln.topk", "k = -1"});
  KILN_CHECK_ERROR(meta_of<TopKOp>({tf({2, 3})}, {1, 3, true, true}), InvalidArgument,
                   {"kiln.topk", "axis 3"});
  KILN_CHECK_ERROR(meta_of<OneHotOp>({tf({2})}, {3}), InvalidArgument,
                   {"kiln.one_hot", "i32 or i64", "f32"});
  KILN_CHECK_ERROR(meta_of<OneHotOp>({tf({2}, DataType::Int64)}, {0}), InvalidArgument,
                   {"kiln.one_hot", "num_classes must be >= 1"});
  // topk_grad's operands must match the forward op's shapes.
  KILN_CHECK_ERROR(meta_of<GradOf<TopKOp>>({tf({2, 3}), tf({2, 2}, DataType::Int64), tf({2, 3})},
                                           {2, -1, true, true}),
                   InvalidArgument, {"kiln.topk_grad", "[2, 3]", "[2, 2]"});
  KILN_CHECK_ERROR(meta_of<GradOf<TopKOp>>({tf({2, 3}), tf({2, 2}, DataType::Int32), tf({2, 2})},
                                           {2, -1, true, true}),
                   InvalidArgument, {"kiln.topk_grad", "indices must be i64"});
}

TEST_CASE("topk's vjp routes the grad to the selected elements", "[dialect][vjp][search]") {
  // Distinct values: no ties, so the selection is stable under the
  // finite-difference steps.
  for (std::int64_t axis : {0, 1, -1})
    for (bool largest : {true, false}) {
      INFO("axis " << axis << " largest " << largest);
      check_vjp({random_f64({3, 4}, -1, 1, 7)}, make_op<TopKOp>(std::int64_t{2}, axis, largest, true));
    }
  check_vjp({random_f64({2, 5, 3}, -1, 1, 3)},
            make_op<TopKOp>(std::int64_t{3}, std::int64_t{1}, true, false));
  GradCheckOptions o;
  o.unknown_batch = true;
  check_vjp({random_f64({3, 4}, -1, 1, 9)}, make_op<TopKOp>(std::int64_t{1}, std::int64_t{-1}, true, true), o);
}

TEST_CASE("argmax argmin and one_hot give no gradient", "[dialect][vjp][search]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", V{2, 3}, DataType::Float32).result();
  Value ids = b.create<DataOp>("ids", V{2}, DataType::Int64).result();
  CHECK_FALSE(b.create<ArgMaxOp>(x, std::int64_t{1}, false).operation()->dyn_cast<VjpInterface>());
  CHECK_FALSE(b.create<ArgMinOp>(x, std::int64_t{1}, false).operation()->dyn_cast<VjpInterface>());
  CHECK_FALSE(b.create<OneHotOp>(ids, std::int64_t{3}).operation()->dyn_cast<VjpInterface>());
}

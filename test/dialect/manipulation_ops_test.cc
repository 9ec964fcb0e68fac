// InferMeta, Vjp and error tests of the ops of kiln/dialect/manipulation_ops.h:
// result shapes (static and -1 dims), the build-time errors naming the op
// and what was expected, and each Vjp against central finite differences in
// f64 (expand's reduce_as, stack's split, the views' reshape_as, pad's
// negated pads, cumsum's reversed cumsum).
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
V shape_of(const std::vector<Type>& in, const typename OpT::Attributes& a) {
  auto out = OpT::infer_meta(in, DictionaryAttribute::get(to_named_attributes(a)));
  return shaped_dims(out.at(0));
}
}  // namespace

// ---- InferMeta ----

TEST_CASE("manipulation ops infer their result shapes, -1 dims included", "[dialect][manipulation]") {
  CHECK(shape_of<ExpandOp>({tf({3, 1})}, {V{2, -1, 4}}) == V{2, 3, 4});
  CHECK(shape_of<ExpandOp>({tf({-1, 1})}, {V{-1, 5}}) == V{-1, 5});
  CHECK(shape_of<StackOp>({tf({2, 3}), tf({2, -1}), tf({2, 3})}, {1}) == V{2, 3, 3});
  CHECK(shape_of<StackOp>({tf({2, 3})}, {-1}) == V{2, 3, 1});
  CHECK(shape_of<FlattenOp>({tf({2, 3, 4, 5})}, {1, 2}) == V{2, 12, 5});
  CHECK(shape_of<FlattenOp>({tf({-1, 3, 4})}, {1, -1}) == V{-1, 12});
  CHECK(shape_of<FlattenOp>({tf({-1, 3, 4})}, {0, -1}) == V{-1});
  CHECK(shape_of<FlattenOp>({tf({})}, {0, -1}) == V{1});
  CHECK(shape_of<SqueezeOp>({tf({1, -1, 1, 3})}, {V{}}) == V{-1, 3});
  CHECK(shape_of<SqueezeOp>({tf({1, 2, 1})}, {V{0, 1}}) == V{2, 1});
  CHECK(shape_of<UnsqueezeOp>({tf({2, 3})}, {V{0, 3}}) == V{1, 2, 3, 1});
  CHECK(shape_of<UnsqueezeOp>({tf({-1})}, {V{-1}}) == V{-1, 1});
  CHECK(shape_of<PadOp>({tf({2, 3, 4})}, {V{1, 2, -1, 0}, 0.0}) == V{2, 2, 7});
  CHECK(shape_of<PadOp>({tf({-1, 4})}, {V{1, 1, 1, 1}, 0.0}) == V{-1, 6});
  CHECK(shape_of<CumsumOp>({tf({2, -1})}, {-1, false, false}) == V{2, -1});
}

TEST_CASE("manipulation ops reject bad shapes and attributes at build time, naming the op",
          "[dialect][manipulation]") {
  auto expand = [](V x, V shape) { return shape_of<ExpandOp>({tf(x)}, {shape}); };
  KILN_CHECK_ERROR(expand({2, 3}, {3}), InvalidArgument, {"kiln.expand", "fewer dims"});
  KILN_CHECK_ERROR(expand({2, 3}, {4, 3}), InvalidArgument, {"kiln.expand", "expected 1 or 4"});
  KILN_CHECK_ERROR(expand({3}, {-1, 3}), InvalidArgument, {"kiln.expand", "new leading dim 0"});
  KILN_CHECK_ERROR(expand({3}, {-2, 3}), InvalidArgument, {"kiln.expand", ">= -1"});

  KILN_CHECK_ERROR(shape_of<StackOp>({tf({2, 3}), tf({3, 2})}, {0}), InvalidArgument,
                   {"kiln.stack", "one shape", "[3, 2]"});
  KILN_CHECK_ERROR(shape_of<StackOp>({tf({2}), tf({2}, DataType::Float64)}, {0}), InvalidArgument,
                   {"kiln.stack", "one dtype"});
  KILN_CHECK_ERROR(shape_of<StackOp>({tf({2})}, {2}), InvalidArgument, {"kiln.stack", "axis 2"});
  KILN_CHECK_ERROR(shape_of<StackOp>({}, {0}), InvalidArgument, {"kiln.stack", "at least one"});

  KILN_CHECK_ERROR(shape_of<FlattenOp>({tf({2, 3})}, {1, 0}), InvalidArgument,
                   {"kiln.flatten", "must not come after"});
  KILN_CHECK_ERROR(shape_of<FlattenOp>({tf({2, 3})}, {2, -1}), InvalidArgument,
                   {"kiln.flatten", "start_axis 2"});

  KILN_CHECK_ERROR(shape_of<SqueezeOp>({tf({-1, 3})}, {V{0}}), InvalidArgument,
                   {"kiln.squeeze", "unknown at build time"});
  KILN_CHECK_ERROR(shape_of<SqueezeOp>({tf({1, 3})}, {V{0, -2}}), InvalidArgument,
                   {"kiln.squeeze", "twice"});
  KILN_CHECK_ERROR(shape_of<SqueezeOp>({tf({1, 3})}, {V{2}}), InvalidArgument,
                   {"kiln.squeeze", "axis 2"});

  KILN_CHECK_ERROR(shape_of<UnsqueezeOp>({tf({2})}, {V{}}), InvalidArgument,
                   {"kiln.unsqueeze", "at least one axis"});
  KILN_CHECK_ERROR(shape_of<UnsqueezeOp>({tf({2})}, {V{0, -3}}), InvalidArgument,
                   {"kiln.unsqueeze", "twice"});
  KILN_CHECK_ERROR(shape_of<UnsqueezeOp>({tf({2})}, {V{2}}), InvalidArgument,
                   {"kiln.unsqueeze", "axis 2"});

  KILN_CHECK_ERROR(shape_of<PadOp>({tf({2, 3})}, {V{1}, 0.0}), InvalidArgument,
                   {"kiln.pad", "even number"});
  KILN_CHECK_ERROR(shape_of<PadOp>({tf({2})}, {V{1, 1, 1, 1}, 0.0}), InvalidArgument,
                   {"kiln.pad", "at most 2 per dim"});
  KILN_CHECK_ERROR(shape_of<PadOp>({tf({2, 3})}, {V{-2, -2}, 0.0}), InvalidArgument,
                   {"kiln.pad", "below size 0"});
  KILN_CHECK_ERROR(shape_of<PadOp>({tf({2}, DataType::Bool)}, {V{1, 1}, 0.0}), InvalidArgument,
                   {"kiln.pad", "bool"});

  KILN_CHECK_ERROR(shape_of<CumsumOp>({tf({2, 3})}, {2, false, false}), InvalidArgument,
                   {"kiln.cumsum", "axis 2"});
  KILN_CHECK_ERROR(shape_of<CumsumOp>({tf({})}, {0, false, false}), InvalidArgument,
                   {"kiln.cumsum", "rank >= 1"});
}

// ---- Vjp ----

TEST_CASE("expand's vjp sums the grad back to the input's shape", "[dialect][vjp][manipulation]") {
  check_vjp({random_f64({3, 1})}, make_op<ExpandOp>(V{2, 3, 4}));
  check_vjp({random_f64({1, 4})}, make_op<ExpandOp>(V{3, -1}));
  check_vjp({random_f64({2, 3})}, make_op<ExpandOp>(V{2, 3}));
  GradCheckOptions o;
  o.unknown_batch = true;
  check_vjp({random_f64({3, 1})}, make_op<ExpandOp>(V{-1, 5}), o);
}

TEST_CASE("stack's vjp splits the grad back into the operands", "[dialect][vjp][manipulation]") {
  for (std::int64_t axis : {0, 1, 2, -1})
    check_vjp({random_f64({2, 3}, -1, 1, 1), random_f64({2, 3}, -1, 1, 2),
               random_f64({2, 3}, -1, 1, 3)},
              make_op<StackOp>(axis));
}

TEST_CASE("flatten squeeze and unsqueeze pass the grad back reshaped", "[dialect][vjp][manipulation]") {
  check_vjp({random_f64({2, 3, 4})}, make_op<FlattenOp>(std::int64_t{1}, std::int64_t{-1}));
  check_vjp({random_f64({2, 1, 3})}, make_op<SqueezeOp>(V{}));
  check_vjp({random_f64({2, 1, 3})}, make_op<SqueezeOp>(V{1}));
  check_vjp({random_f64({2, 3})}, make_op<UnsqueezeOp>(V{0, 2}));
  GradCheckOptions o;
  o.unknown_batch = true;
  check_vjp({random_f64({2, 3, 4})}, make_op<FlattenOp>(std::int64_t{0}, std::int64_t{1}), o);
}

TEST_CASE("pad's vjp takes the grad's slice under the input, zeros where it was cropped",
          "[dialect][vjp][manipulation]") {
  check_vjp({random_f64({2, 3})}, make_op<PadOp>(V{1, 2}, 0.5));
  check_vjp({random_f64({2, 3, 4})}, make_op<PadOp>(V{1, 0, -1, 2}, 0.0));
  check_vjp({random_f64({3, 4})}, make_op<PadOp>(V{-1, -2, 1, -1}, 0.0));
}

TEST_CASE("cumsum's vjp is the cumsum of the grad in the other direction",
          "[dialect][vjp][manipulation]") {
  for (bool exclusive : {false, true})
    for (bool reverse : {false, true})
      for (std::int64_t axis : {0, 1, -1}) {
        INFO("axis " << axis << " exclusive " << exclusive << " reverse " << reverse);
        check_vjp({random_f64({3, 4})}, make_op<CumsumOp>(axis, exclusive, reverse));
      }
}

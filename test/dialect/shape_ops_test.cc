// InferMeta and Vjp tests of the run-time shape ops of
// kiln/dialect/shape_ops.h: result types (rank from the shape operand's
// static length, -1 dims), a program whose reshape follows the batch fed at
// run time, and the Vjps of reshape_by, expand_by, slice_by, strided_slice,
// squeeze_by, unsqueeze_by and split_by against finite differences in f64
// (the shape operands get no gradient).
#include <vector>

#include "catch.hpp"
#include "dialect/grad_check.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/dialect/shape_ops.h"
#include "kiln/exec/executor.h"
#include "kiln/io/json.h"
#include "test_util.h"

using namespace kiln;
using namespace kiln_vjp_test;

namespace {
using V = std::vector<std::int64_t>;

Type tf(V d, DataType dt = DataType::Float32) { return TensorType::get(dt, std::move(d)); }
Type ti(V d) { return TensorType::get(DataType::Int64, std::move(d)); }

// The result dims InferMeta gives, the op's attributes defaulted.
template <typename OpT>
V shape_of(const std::vector<Type>& in) {
  DictionaryAttribute attrs = DictionaryAttribute::get({});
  if constexpr (requires { typename OpT::Attributes; })
    attrs = DictionaryAttribute::get(to_named_attributes(typename OpT::Attributes{}));
  return shaped_dims(OpT::infer_meta(in, attrs).at(0));
}
}  // namespace

TEST_CASE("run-time shape ops take their result rank from the shape operand's length", "[dialect][shape]") {
  CHECK(shape_of<ShapeOp>({tf({-1, 3})}) == V{2});
  CHECK(shaped_data_type(ShapeOp::infer_meta({tf({-1, 3})}, DictionaryAttribute::get({}))[0]) ==
        DataType::Int64);
  CHECK(shape_of<NumelOp>({tf({-1, 3})}) == V{});
  CHECK(shape_of<ExpandByOp>({tf({3, 1}), ti({3})}) == V{-1, 3, -1});
  CHECK(shape_of<SqueezeByOp>({tf({2, 1, 3}), ti({1})}) == V{2, 3});
  CHECK(shape_of<SqueezeByOp>({tf({-1, 1, 3}), ti({1})}) == V{-1, -1});
  CHECK(shape_of<UnsqueezeByOp>({tf({2, 3}), ti({2})}) == V{-1, -1, -1, -1});
  CHECK(shape_of<TileOp>({tf({2, 0}), ti({2})}) == V{-1, 0});
  CHECK(shape_of<RangeOp>({ti({}), ti({}), ti({1})}) == V{-1});
  CHECK(shape_of<SliceByOp>({tf({2, 3}), ti({1}), ti({1}), ti({1}), ti({1})}) == V{-1, -1});
  CHECK(shape_of<SliceByOp>({tf({2, 3}), ti({0}), ti({0}), ti({0}), ti({0})}) == V{2, 3});
  KILN_CHECK_ERROR(shape_of<SliceByOp>({tf({2, 3}), ti({1}), ti({2}), ti({1}), ti({1})}), InvalidArgument,
                   {"kiln.slice_by", "ends", "length of starts"});
  KILN_CHECK_ERROR(shape_of<ExpandByOp>({tf({3}), ti({10})}), InvalidArgument,
                   {"kiln.expand_by", "maximum rank"});
  KILN_CHECK_ERROR(shape_of<TileOp>({tf({3}), tf({1})}), InvalidArgument,
                   {"kiln.tile", "repeats", "1-D i32 or i64"});
}

TEST_CASE("reshape by a shape computed at run time follows the fed batch", "[ops][shape]") {
  // y = reshape_by(x, concat(slice(shape(x), [0:1]), [12])): x.reshape(x.shape[0], 12)
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", V{-1, 3, 4}, DataType::Float32).result();
  Value s = b.create<ShapeOp>(x).result();
  Value n = b.create<SliceOp>(s, V{0}, V{0}, V{1}).result();
  Value twelve = b.create<FullOp>(V{1}, 12.0, DataType::Int64).result();
  Value shape = b.create<ConcatOp>(std::vector<Value>{n, twelve}, 0).result();
  Value y = b.create<ReshapeByOp>(x, shape).result();
  CHECK(shaped_dims(y.type()) == V{-1, -1});
  Executor exe;
  for (std::int64_t batch : {1, 3}) {
    std::vector<float> xv(static_cast<std::size_t>(batch * 12));
    for (std::size_t k = 0; k < xv.size(); ++k) xv[k] = static_cast<float>(k);
    auto got = exe.run(p, {{"x", Tensor::from_vector<float>({batch, 3, 4}, xv)}}, {y, s});
    CHECK(got[0].dims() == Dims{batch, 12});
    CHECK(got[0].to_vector<float>() == xv);
    CHECK(got[1].to_vector<std::int64_t>() == V{batch, 3, 4});
  }
}

TEST_CASE("reshape, expand, slice, squeeze, unsqueeze and split by tensor operands keep their "
          "gradients w.r.t. x",
          "[dialect][shape][vjp]") {
  SECTION("reshape_by, the batch unknown at build time") {
    GradCheckOptions o;
    o.declared = {{-1, 3, 4}, {}};
    auto r = check_vjp({random_f64({2, 3, 4}), i64({2}, {0, -1})}, make_op<ReshapeByOp>(false), o);
    CHECK(r.compared == 24);
    CHECK_FALSE(r.grads[1].is_initialized());  // the shape gets none
  }
  SECTION("expand_by") {
    check_vjp({random_f64({3, 1}), i64({3}, {2, 1, 4})},
              [](Builder& b, const std::vector<Value>& v) {
                return b.create<ExpandByOp>(v[0], v[1]).operation();
              });
  }
  SECTION("slice_by with negative and positive steps") {
    check_vjp({random_f64({4, 5}), i64({2}, {-1, 0}), i64({2}, {0, 5}), i64({2}, {0, 1}),
               i64({2}, {-2, 2})},
              [](Builder& b, const std::vector<Value>& v) {
                return b.create<SliceByOp>(v[0], v[1], v[2], v[3], v[4]).operation();
              });
  }
  SECTION("strided_slice") {
    check_vjp({random_f64({4, 5})}, [](Builder& b, const std::vector<Value>& v) {
      return b.create<StridedSliceOp>(v[0], V{1, 0}, V{4, 0}, V{0, 4}, V{-3, 2}).operation();
    });
  }
  SECTION("squeeze_by and unsqueeze_by") {
    check_vjp({random_f64({2, 1, 3}), i64({1}, {1})}, make_op<SqueezeByOp>());
    check_vjp({random_f64({2, 3}), i64({2}, {0, -1})}, make_op<UnsqueezeByOp>());
  }
  SECTION("split_by") {
    check_vjp({random_f64({2, 5}), i64({3}, {1, 0, 4})}, make_op<SplitByOp>(std::int64_t{1}));
  }
}

TEST_CASE("a program of run-time shape ops survives JSON save and load and still runs", "[dialect][shape]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", V{-1, 4}, DataType::Float32).result();
  Value s = b.create<ShapeOp>(x).result();
  Value y = b.create<ReshapeByOp>(x, s, false, V{-1, 4}).result();
  Value z = b.create<StridedSliceOp>(y, V{1}, V{-1}, V{INT64_MIN}, V{-2}).result();
  Value ones = b.create<FullByOp>(s, 1.0, DataType::Int32, V{-1, 4}).result();
  b.create<FetchOp>(z, "z");
  b.create<FetchOp>(ones, "ones");
  const std::string text = save_program_json(p);
  Program q = load_program_json(text);
  CHECK(save_program_json(q) == text);
  Executor exe;
  auto got = exe.run(q, {{"x", Tensor::from_vector<float>({2, 4}, {0, 1, 2, 3, 4, 5, 6, 7})}}, {"z", "ones"});
  CHECK(got[0].to_vector<float>() == std::vector<float>{3, 1, 7, 5});
  CHECK(got[1].dims() == Dims{2, 4});
  CHECK(got[1].to_vector<std::int32_t>() == std::vector<std::int32_t>(8, 1));
}

// The frontend's tensor functions (kiln/frontend/math.h): add … minimum and
// matmul, the shape, dtype and reduction helpers and the elementwise ones
// build one op each (a number becoming a 0-d constant of the other
// operand's dtype), compute what their formulas say, pass gradients, and
// reject bad operands with errors naming the helper or its op. The
// comparisons and constants are tested with the control-flow frontend
// (control_flow_test.cc).
#include "frontend/frontend_test_util.h"
#include "kiln/support/half.h"

using namespace kiln;
using namespace kiln_frontend_test;

TEST_CASE("arithmetic helpers build one op each and compute x op y, broadcasting numpy-style",
          "[frontend]") {
  GuardedPrograms b;
  Value x = data("x", {2, 3});
  Value y = data("y", {3});
  std::vector<Value> got{add(x, y),     subtract(x, y), multiply(x, y),
                         divide(x, y),  maximum(x, y),  minimum(x, y)};
  const std::vector<std::string> names{"kiln.add", "kiln.sub", "kiln.mul",
                                       "kiln.div", "kiln.maximum", "kiln.minimum"};
  for (std::size_t i = 0; i < got.size(); ++i) {
    CHECK(got[i].defining_op()->name() == names[i]);
    CHECK(got[i].type() == TensorType::get(DataType::Float32, {2, 3}));
  }
  const std::vector<float> xs{1, -2, 3, 4, 5, -6}, ys{2, 4, -3};
  Executor exe;
  std::vector<FetchTarget> fetch(got.begin(), got.end());
  auto out = exe.run(b.main, {{"x", f32({2, 3}, xs)}, {"y", f32({3}, ys)}}, fetch);
  for (std::size_t k = 0; k < xs.size(); ++k) {
    const float a = xs[k], c = ys[k % 3];
    INFO("element " << k);
    CHECK(out[0].to_vector<float>()[k] == a + c);
    CHECK(out[1].to_vector<float>()[k] == a - c);
    CHECK(out[2].to_vector<float>()[k] == a * c);
    CHECK(out[3].to_vector<float>()[k] == a / c);
    CHECK(out[4].to_vector<float>()[k] == std::max(a, c));
    CHECK(out[5].to_vector<float>()[k] == std::min(a, c));
  }
}

TEST_CASE("an arithmetic helper given a number makes it a 0-d constant of the tensor's dtype",
          "[frontend]") {
  GuardedPrograms b;
  Value i = data("i", {3}, DataType::Int64);
  Value twice = multiply(i, 2);
  CHECK(twice.type() == TensorType::get(DataType::Int64, {3}));
  Value two = twice.defining_op()->operand_source(1);
  CHECK(two.type() == TensorType::get(DataType::Int64, {}));
  CHECK(FullOp(two.defining_op()).attrs().value == 2.0);
  Value clipped = minimum(maximum(subtract(divide(add(twice, 1), 1), 3), 0), 4);
  Executor exe;
  auto out = exe.run(b.main, {{"i", Tensor::from_vector<std::int64_t>({3}, {0, 2, 5})}},
                     {clipped});
  CHECK(out[0].to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 2, 4});
}

TEST_CASE("matmul multiplies the last two axes, transposing an operand when asked",
          "[frontend]") {
  GuardedPrograms b;
  Value x = data("x", {2, 3});
  Value w = data("w", {2, 3});
  Value xwt = matmul(x, w, /*transpose_x=*/false, /*transpose_y=*/true);
  Value xtw = matmul(x, w, /*transpose_x=*/true, /*transpose_y=*/false);
  CHECK(xwt.defining_op()->name() == "kiln.matmul");
  CHECK(xwt.type() == TensorType::get(DataType::Float32, {2, 2}));
  CHECK(xtw.type() == TensorType::get(DataType::Float32, {3, 3}));
  Executor exe;
  auto out = exe.run(b.main,
                     {{"x", f32({2, 3}, {1, 2, 3, 4, 5, 6})}, {"w", f32({2, 3}, {1, 0, 1, 0, 1, 0})}},
                     {xwt, xtw});
  CHECK(out[0].to_vector<float>() == std::vector<float>{4, 2, 10, 5});
  CHECK(out[1].to_vector<float>() == std::vector<float>{1, 4, 1, 2, 5, 2, 3, 6, 3});
}

TEST_CASE("gradients flow through the arithmetic helpers and matmul", "[frontend]") {
  GuardedPrograms b;
  Value x = data("x", {2, 2}, DataType::Float64);
  Value y = data("y", {2}, DataType::Float64);
  Value w = data("w", {2, 2}, DataType::Float64);
  for (Value v : {x, y, w}) set_stop_gradient(v, false);
  Value h = maximum(divide(multiply(add(x, y), subtract(x, 0.5)), add(y, 3)), minimum(x, y));
  Value loss = main_builder().create<MeanOp>(matmul(h, w, false, true)).result();
  auto grads = append_backward(loss, {x, y, w});
  REQUIRE(grads.size() == 3);
  check_grads_by_finite_differences(b.main, loss, grads, {"x", "y", "w"},
                                    {{0.3, -1.2, 2.1, 0.7}, {0.4, -0.9}, {1.5, -0.5, 0.25, 2.0}},
                                    {{2, 2}, {2}, {2, 2}}, {});
}

TEST_CASE("arithmetic helpers reject bad operands with errors naming the helper", "[frontend]") {
  GuardedPrograms b;
  Value f = data("f", {2});
  Value i = data("i", {2}, DataType::Int64);
  KILN_CHECK_ERROR(add(Value(), f), InvalidArgument, {"add", "x", "null"});
  KILN_CHECK_ERROR(multiply(f, Value()), InvalidArgument, {"multiply", "y", "null"});
  KILN_CHECK_ERROR(subtract(f, i), InvalidArgument, {"kiln.sub"});
  KILN_CHECK_ERROR(matmul(f, data("g", {3})), InvalidArgument, {"kiln.matmul"});
  KILN_CHECK_ERROR(matmul(Value(), f), InvalidArgument, {"matmul", "x", "null"});
  KILN_CHECK_ERROR(multiply(i, 2.5), InvalidArgument, {"multiply", "2.5", "whole number", "i64"});
  CHECK_NOTHROW(multiply(f, 2.5));
  Program other;
  Value foreign;
  {
    ProgramGuard g(other);
    foreign = data("z", {2});
  }
  KILN_CHECK_ERROR(divide(f, foreign), InvalidArgument, {"divide", "current main program"});
}

TEST_CASE("the shape helpers build one op each and move x's elements as numpy's reshape, transpose, "
          "concat, stack, split, slice, squeeze and unsqueeze do",
          "[frontend]") {
  GuardedPrograms b;
  Value x = data("x", {2, 3});
  Value y = data("y", {2, 3});
  Value r = reshape(x, {3, -1});
  Value t = transpose(x, {1, 0});
  Value c = concat({x, y}, -1);
  Value s = stack({x, y}, 0);
  const std::vector<Value> halves = split(c, 2, 1);
  const std::vector<Value> parts = split(x, {1, -1}, 1);
  Value sl = slice(x, {1}, {-2}, {100});
  Value sq = squeeze(unsqueeze(x, {0, 3}));
  CHECK(r.type() == TensorType::get(DataType::Float32, {3, 2}));
  CHECK(t.type() == TensorType::get(DataType::Float32, {3, 2}));
  CHECK(c.type() == TensorType::get(DataType::Float32, {2, 6}));
  CHECK(s.type() == TensorType::get(DataType::Float32, {2, 2, 3}));
  REQUIRE(halves.size() == 2);
  REQUIRE(parts.size() == 2);
  CHECK(parts[1].type() == TensorType::get(DataType::Float32, {2, 2}));
  CHECK(sl.type() == TensorType::get(DataType::Float32, {2, 2}));
  CHECK(unsqueeze(x, {0, 3}).type() == TensorType::get(DataType::Float32, {1, 2, 3, 1}));
  CHECK(sq.type() == TensorType::get(DataType::Float32, {2, 3}));
  const std::vector<std::pair<Value, std::string>> ops{
      {r, "kiln.reshape"}, {t, "kiln.transpose"}, {c, "kiln.concat"}, {s, "kiln.stack"},
      {halves[0], "kiln.split"}, {sl, "kiln.slice"}, {sq, "kiln.squeeze"}};
  for (const auto& [v, name] : ops) CHECK(v.defining_op()->name() == name);
  CHECK(halves[0].defining_op() == halves[1].defining_op());  // one op, two results
  Executor exe;
  const FeedMap feed{{"x", f32({2, 3}, {0, 1, 2, 3, 4, 5})}, {"y", f32({2, 3}, {6, 7, 8, 9, 10, 11})}};
  auto out = exe.run(b.main, feed, {r, t, c, s, halves[1], parts[0], sl, sq});
  using F = std::vector<float>;
  CHECK(out[0].to_vector<float>() == F{0, 1, 2, 3, 4, 5});
  CHECK(out[1].to_vector<float>() == F{0, 3, 1, 4, 2, 5});
  CHECK(out[2].to_vector<float>() == F{0, 1, 2, 6, 7, 8, 3, 4, 5, 9, 10, 11});
  CHECK(out[3].to_vector<float>() == F{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  CHECK(out[4].to_vector<float>() == F{6, 7, 8, 9, 10, 11});
  CHECK(out[5].to_vector<float>() == F{0, 3});
  CHECK(out[6].to_vector<float>() == F{1, 2, 4, 5});
  CHECK(out[7].to_vector<float>() == F{0, 1, 2, 3, 4, 5});
}

TEST_CASE("sum, mean and max reduce over the axes given (all when none), keeping them as 1 when asked; "
          "cast and the elementwise helpers compute what their names say",
          "[frontend]") {
  GuardedPrograms b;
  Value x = data("x", {2, 3});
  std::vector<Value> got{sum(x), mean(x, {0}), max(x, {-1}, true), cast(x, DataType::Int64),
                         exp(x), log(abs(x)), sqrt(square(x)), cast(x, DataType::BFloat16)};
  CHECK(got[0].type() == TensorType::get(DataType::Float32, {}));
  CHECK(got[1].type() == TensorType::get(DataType::Float32, {3}));
  CHECK(got[2].type() == TensorType::get(DataType::Float32, {2, 1}));
  CHECK(got[3].type() == TensorType::get(DataType::Int64, {2, 3}));
  CHECK(got[7].type() == TensorType::get(DataType::BFloat16, {2, 3}));
  const std::vector<std::string> names{"kiln.sum", "kiln.mean", "kiln.max", "kiln.cast",
                                       "kiln.exp", "kiln.log", "kiln.sqrt", "kiln.cast"};
  for (std::size_t k = 0; k < got.size(); ++k) CHECK(got[k].defining_op()->name() == names[k]);
  const std::vector<float> xs{1.5f, -2, 3, 4, -5.25f, 6};
  Executor exe;
  std::vector<FetchTarget> fetch(got.begin(), got.end());
  auto out = exe.run(b.main, {{"x", f32({2, 3}, xs)}}, fetch);
  const auto* bf16 = static_cast<const std::uint16_t*>(out[7].raw_data());
  for (std::size_t k = 0; k < xs.size(); ++k) CHECK(bfloat16_to_float(bf16[k]) == xs[k]);  // exact in bf16
  CHECK(out[0].to_vector<float>() == std::vector<float>{7.25f});
  CHECK(out[1].to_vector<float>() == std::vector<float>{2.75f, -3.625f, 4.5f});
  CHECK(out[2].to_vector<float>() == std::vector<float>{3, 6});
  CHECK(out[3].to_vector<std::int64_t>() == std::vector<std::int64_t>{1, -2, 3, 4, -5, 6});
  for (std::size_t k = 0; k < xs.size(); ++k) {
    INFO("element " << k);
    CHECK(out[4].to_vector<float>()[k] == std::exp(xs[k]));
    CHECK(out[5].to_vector<float>()[k] == std::log(std::abs(xs[k])));
    CHECK(out[6].to_vector<float>()[k] == std::abs(xs[k]));
  }
}

TEST_CASE("gradients flow through the shape, reduction and elementwise helpers", "[frontend]") {
  GuardedPrograms b;
  Value x = data("x", {2, 3}, DataType::Float64);
  Value y = data("y", {2, 3}, DataType::Float64);
  for (Value v : {x, y}) set_stop_gradient(v, false);
  const std::vector<Value> parts = split(concat({x, y}, 1), {2, -1}, 1);
  Value h = add(transpose(reshape(parts[1], {4, 2}), {1, 0}), 1.0);  // [2, 4]
  Value m = mean(multiply(exp(slice(h, {1}, {1}, {4})), log(square(slice(h, {1}, {0}, {3})))), {1}, true);
  Value loss = sum(add(squeeze(stack({m, sqrt(abs(m))}, 0), {2}), max(x, {1}, true)));  // [2, 2]
  auto grads = append_backward(loss, {x, y});
  REQUIRE(grads.size() == 2);
  check_grads_by_finite_differences(b.main, loss, grads, {"x", "y"},
                                    {{0.3, -1.2, 2.1, 0.7, 0.4, -0.9}, {1.5, -0.5, 0.25, 2.0, -0.75, 1.25}},
                                    {{2, 3}, {2, 3}}, {});
}

TEST_CASE("the shape and reduction helpers reject bad operands and shapes with errors naming the helper "
          "or the op",
          "[frontend]") {
  GuardedPrograms b;
  Value x = data("x", {2, 3});
  KILN_CHECK_ERROR(reshape(Value(), {6}), InvalidArgument, {"reshape", "x", "null"});
  KILN_CHECK_ERROR(reshape(x, {4}), InvalidArgument, {"kiln.reshape"});
  KILN_CHECK_ERROR(transpose(x, {0, 0}), InvalidArgument, {"kiln.transpose"});
  KILN_CHECK_ERROR(concat({}, 0), InvalidArgument, {"concat", "no tensors"});
  KILN_CHECK_ERROR(concat({x, data("z", {3, 3})}, 1), InvalidArgument, {"kiln.concat"});
  KILN_CHECK_ERROR(stack({x, Value()}), InvalidArgument, {"stack", "xs[1]", "null"});
  KILN_CHECK_ERROR(split(x, 0, 1), InvalidArgument, {"split", "0 parts"});
  KILN_CHECK_ERROR(split(x, 2, 1), InvalidArgument, {"kiln.split"});
  KILN_CHECK_ERROR(split(x, std::vector<std::int64_t>{}, 1), InvalidArgument, {"split", "no section"});
  KILN_CHECK_ERROR(slice(x, {0, 1}, {0}, {1}), InvalidArgument, {"slice", "2 axes, 1 starts and 1 ends"});
  CHECK(squeeze(x, {0}).type() == x.type());  // a dim that is not 1 stays
  KILN_CHECK_ERROR(squeeze(x, {2}), InvalidArgument, {"kiln.squeeze"});
  KILN_CHECK_ERROR(sum(x, {2}), InvalidArgument, {"kiln.sum"});
  KILN_CHECK_ERROR(mean(data("i", {2}, DataType::Int64)), InvalidArgument, {"kiln.mean"});
  KILN_CHECK_ERROR(exp(Value()), InvalidArgument, {"exp", "x", "null"});
}

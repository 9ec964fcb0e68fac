// The tensor-array ops (kiln/dialect/tensor_array_ops.h) and their frontend
// helpers (kiln/frontend/tensor_array.h): result types, what the kernels do
// with writes past the end, missing elements and stacking, a loop that
// appends to a carried array without copying it, the JSON round trip, and a
// clear kiln::Error for every bad operand.
#include <nlohmann/json.hpp>

#include "frontend/frontend_test_util.h"
#include "kiln/exec/interpreter_core.h"
#include "kiln/io/json.h"

using namespace kiln;
using namespace kiln_frontend_test;
namespace F = kiln::nn::functional;

namespace {

Value i64(double v) { return full({1}, v, DataType::Int64); }

}  // namespace

TEST_CASE("array ops infer their types from the array's element type", "[dialect][array]") {
  GuardedPrograms b;
  Value a = create_array(DataType::Float32, {-1, 4});
  CHECK(a.type() == TensorArrayType::get(DataType::Float32, {-1, 4}));
  CHECK(a.type().to_string() == "tensor_array<-1x4xf32>");
  Value x = data("x", {2, 4});
  Value a1 = array_write(a, i64(0), x);
  CHECK(a1.type() == a.type());
  CHECK(array_read(a1, i64(0)).type() == TensorType::get(DataType::Float32, {-1, 4}));
  CHECK(array_length(a1).type() == TensorType::get(DataType::Int64, {1}));
  CHECK(array_stack(a1).type() == TensorType::get(DataType::Float32, {-1, -1, 4}));
  CHECK(array_stack(a1, -1).type() == TensorType::get(DataType::Float32, {-1, 4, -1}));
  Value t = data("t", {5, 2, 3});
  CHECK(array_from_tensor(t).type() == TensorArrayType::get(DataType::Float32, {2, 3}));
  CHECK(array_from_tensor(t, 1).type() == TensorArrayType::get(DataType::Float32, {5, 3}));
  CHECK_NOTHROW(b.main.verify());
}

TEST_CASE("array ops reject bad operands with errors naming the op or helper", "[dialect][array]") {
  GuardedPrograms b;
  Value a = create_array(DataType::Float32, {2});
  Value x = data("x", {3});
  Value f = data("f", {1});
  KILN_CHECK_ERROR(array_write(a, i64(0), x), InvalidArgument, {"kiln.array_write", "does not fit"});
  KILN_CHECK_ERROR(array_write(a, f, data("y", {2})), InvalidArgument,
                   {"kiln.array_write", "index", "i32 or i64"});
  KILN_CHECK_ERROR(array_write(a, full({2}, 0, DataType::Int64), data("z", {2})), InvalidArgument,
                   {"kiln.array_write", "one element"});
  KILN_CHECK_ERROR(array_read(x, i64(0)), InvalidArgument, {"array_read", "tensor_array"});
  KILN_CHECK_ERROR(array_write(a, i64(0), Value()), InvalidArgument, {"array_write", "null"});
  KILN_CHECK_ERROR(array_stack(a, 3), InvalidArgument, {"kiln.array_stack", "axis"});
  KILN_CHECK_ERROR(array_from_tensor(full({}, 1.0)), InvalidArgument,
                   {"kiln.array_from_tensor", "rank"});
  KILN_CHECK_ERROR(array_write(a, i64(0), data("i", {2}, DataType::Int64)), InvalidArgument,
                   {"kiln.array_write", "does not fit"});
}

TEST_CASE("writing past the end grows the array; reading a gap, a negative or an out-of-range "
          "index is a clear error",
          "[dialect][array]") {
  GuardedPrograms b;
  Value x = data("x", {2});
  Value i = data("i", {1}, DataType::Int64);
  Value a = array_write(create_array(DataType::Float32, {2}), i64(3), x);
  Value len = array_length(a);
  Value back = array_read(a, i);
  Executor exe;
  auto feed = [&](std::int64_t k) {
    return FeedMap{{"x", f32({2}, {1, 2})}, {"i", Tensor::from_vector<std::int64_t>(Dims{1}, {k})}};
  };
  auto got = exe.run(b.main, feed(3), {len, back});
  CHECK(got[0].to_vector<std::int64_t>() == std::vector<std::int64_t>{4});
  CHECK(got[1].to_vector<float>() == std::vector<float>{1, 2});
  KILN_CHECK_ERROR(exe.run(b.main, feed(1), {back}), InvalidArgument,
                   {"kiln.array_read", "element 1", "never written"});
  KILN_CHECK_ERROR(exe.run(b.main, feed(4), {back}), OutOfRange,
                   {"kiln.array_read", "element 4", "length 4"});
  KILN_CHECK_ERROR(exe.run(b.main, feed(-1), {back}), OutOfRange, {"kiln.array_read", "negative"});
  // The executor stays usable.
  CHECK(exe.run(b.main, feed(3), {back})[0].to_vector<float>() == std::vector<float>{1, 2});
}

TEST_CASE("stack and from_tensor are inverses along any axis; an empty array stacks only when "
          "its element dims are known",
          "[dialect][array]") {
  GuardedPrograms b;
  Value t = data("t", {2, 3, 2});
  Value back0 = array_stack(array_from_tensor(t, 0), 0);
  Value back1 = array_stack(array_from_tensor(t, 1), 1);
  Value back2 = array_stack(array_from_tensor(t, -1), -1);
  Value moved = array_stack(array_from_tensor(t, 0), 2);  // [3, 2, 2]: t's axis 0 moved to 2
  Value empty = array_stack(create_array(DataType::Float32, {3, 2}));
  std::vector<float> v(12);
  for (std::size_t k = 0; k < v.size(); ++k) v[k] = static_cast<float>(k);
  FeedMap feed{{"t", f32({2, 3, 2}, v)}};
  Executor exe;
  auto got = exe.run(b.main, feed, {back0, back1, back2, moved, empty});
  for (int k = 0; k < 3; ++k) {
    CHECK(got[k].dims() == Dims{2, 3, 2});
    CHECK(got[k].to_vector<float>() == v);
  }
  CHECK(got[3].dims() == Dims{3, 2, 2});
  // moved[i, j, s] = t[s, i, j]
  CHECK(got[3].to_vector<float>()[1 * 4 + 0 * 2 + 1] == v[1 * 6 + 1 * 2 + 0]);
  CHECK(got[4].dims() == Dims{0, 3, 2});
  Program p;
  ProgramGuard g(p);
  Value unknown = array_stack(create_array(DataType::Float32, {-1, 2}));
  KILN_CHECK_ERROR(exe.run(p, {}, {unknown}), InvalidArgument, {"kiln.array_stack", "empty array"});
}

TEST_CASE("stacking elements of different shapes is a clear error naming the element",
          "[dialect][array]") {
  GuardedPrograms b;
  Value x = data("x", {-1});
  Value y = data("y", {-1});
  Value a = array_write(array_write(create_array(DataType::Float32, {-1}), i64(0), x), i64(1), y);
  Value s = array_stack(a);
  Executor exe;
  KILN_CHECK_ERROR(exe.run(b.main, {{"x", f32({2}, {1, 2})}, {"y", f32({3}, {1, 2, 3})}}, {s}),
                   InvalidArgument, {"kiln.array_stack", "element 1"});
}

TEST_CASE("fetching an array is a clear error that says to stack it", "[dialect][array]") {
  GuardedPrograms b;
  Value a = array_write(create_array(DataType::Float32, {2}), i64(0), data("x", {2}));
  Executor exe;
  KILN_CHECK_ERROR(exe.run(b.main, {{"x", f32({2}, {1, 2})}}, {a}), InvalidArgument,
                   {"tensor_array", "kiln.array_stack"});
}

TEST_CASE("an element keeps its value when an in-place op later writes the tensor it came from",
          "[dialect][array]") {
  GuardedPrograms b;
  Value x = F::tanh(data("x", {2}));
  Value a = array_write(create_array(DataType::Float32, {2}), i64(0), x);
  Value r = main_builder().create<Relu_Op>(x).result();  // x = relu(x), in place
  Value first = array_read(a, i64(0));
  Executor exe;
  auto got = exe.run(b.main, {{"x", f32({2}, {-1, 1})}}, {first, r});
  CHECK(got[0].to_vector<float>()[0] == Approx(std::tanh(-1.0f)));
  CHECK(got[1].to_vector<float>()[0] == 0.0f);
}

TEST_CASE("a while_loop collects its steps in a carried array and reads its input from one, "
          "appending in place",
          "[dialect][array][cf]") {
  GuardedPrograms b;
  Value xs = array_from_tensor(data("x", {-1, 2}));  // T rows of 2
  Value n = array_length(xs);
  Value out0 = create_array(DataType::Float32, {2});
  Value t0 = i64(0);
  Value s0 = full({2}, 0.0);
  auto r = while_loop(
      [&](const std::vector<Value>& v) { return less_than(v[0], n); },
      [&](const std::vector<Value>& v) {
        Value s = main_builder().create<AddOp>(v[1], array_read(xs, v[0])).result();
        return std::vector<Value>{increment(v[0]), s, array_write(v[2], v[0], s)};
      },
      {t0, s0, out0});
  Value sums = array_stack(r[2]);
  const std::int64_t T = 1000;
  std::vector<float> x(static_cast<std::size_t>(2 * T));
  for (std::size_t k = 0; k < x.size(); ++k) x[k] = static_cast<float>(k % 7);
  kiln_test::BothWays exe;  // structured and lowered to dataflow ops, bit-identical
  Tensor got = exe.run(b.main, {{"x", f32({T, 2}, x)}}, {sums})[0];
  CHECK(exe.lowered_runs() == 1);
  REQUIRE(got.dims() == Dims{T, 2});
  auto g = got.to_vector<float>();
  float s0v = 0, s1v = 0;
  for (std::int64_t k = 0; k < T; ++k) {
    s0v += x[static_cast<std::size_t>(2 * k)];
    s1v += x[static_cast<std::size_t>(2 * k + 1)];
    REQUIRE(g[static_cast<std::size_t>(2 * k)] == s0v);
    REQUIRE(g[static_cast<std::size_t>(2 * k + 1)] == s1v);
  }
  // The body's plan writes the carried array itself: no copy instruction.
  REQUIRE(exe.last_core());
  const std::string dot = exe.last_core()->to_dot();
  CHECK_THAT(dot, Catch::Contains(": kiln.array_write\""));
  CHECK_THAT(dot, !Catch::Contains(": copy\""));
}

TEST_CASE("a program with arrays prints the same after a JSON round trip", "[dialect][array]") {
  GuardedPrograms b;
  Value a = array_write(create_array(DataType::Float64, {-1, 3}), i64(0), data("x", {2, 3},
                                                                                  DataType::Float64));
  array_stack(a, 1);
  const std::string text = b.main.to_string();
  Program back = program_from_json(program_to_json(b.main));
  CHECK(back.to_string() == text);
  CHECK(text.find("tensor_array<-1x3xf64>") != std::string::npos);
}

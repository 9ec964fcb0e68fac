// Tests of kiln.resize's CPU kernel against values worked out by hand from
// ONNX Resize's definition: nearest (rounding rules), linear (half_pixel,
// align_corners), cubic (weights summing to 1), sizes or scales given,
// tf_crop_and_resize with its extrapolation value; and bad inputs, at build
// time and at run time.
#include <cstdint>
#include <string>
#include <vector>

#include "kernel/kernel_test_util.h"

using namespace kiln;
using kiln_test::check_close;
using kiln_test::run_op;

namespace {

using V = std::vector<std::int64_t>;

ResizeOp::Attributes attrs(const std::string& mode, const std::string& coordinates = "half_pixel",
                           const std::string& nearest = "round_prefer_floor") {
  return {mode, coordinates, nearest, -0.75, false, 0.0};
}

Tensor none_f32() { return Tensor::from_vector<float>({0}, {}); }
Tensor none_i64() { return Tensor::from_vector<std::int64_t>({0}, {}); }
Tensor scales(const std::vector<float>& s) {
  return Tensor::from_vector<float>({static_cast<std::int64_t>(s.size())}, s);
}
Tensor sizes(const std::vector<std::int64_t>& s) {
  return Tensor::from_vector<std::int64_t>({static_cast<std::int64_t>(s.size())}, s);
}

}  // namespace

TEST_CASE("resize by scales repeats the nearest element under half_pixel coordinates",
          "[kernel][resize]") {
  auto x = Tensor::from_vector<float>({1, 1, 2, 2}, {1, 2, 3, 4});
  auto r = run_op<ResizeOp>({x, none_f32(), scales({1, 1, 2, 3}), none_i64()}, attrs("nearest"));
  CHECK(r.out().dims().to_vector() == V{1, 1, 4, 6});
  check_close<float>(r.out(),
                     {1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4});
}

TEST_CASE("resize by sizes picks elements by the nearest-rounding rule", "[kernel][resize]") {
  auto x = Tensor::from_vector<float>({1, 1, 2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  auto down = run_op<ResizeOp>({x, none_f32(), none_f32(), sizes({1, 1, 1, 2})}, attrs("nearest"));
  CHECK(down.out().dims().to_vector() == V{1, 1, 1, 2});
  check_close<float>(down.out(), {1, 3});
  // 1-D, 2 → 4 asymmetric: positions 0, 0.5, 1, 1.5; ceil rounds the halves up
  auto line = Tensor::from_vector<double>({2}, {10, 20});
  auto ceil = run_op<ResizeOp>({line, none_f32(), none_f32(), sizes({4})},
                               attrs("nearest", "asymmetric", "ceil"));
  check_close<double>(ceil.out(), {10, 20, 20, 20});
  auto floor = run_op<ResizeOp>({line, none_f32(), none_f32(), sizes({4})},
                                attrs("nearest", "asymmetric", "floor"));
  check_close<double>(floor.out(), {10, 10, 20, 20});
}

TEST_CASE("resize interpolates linearly under half_pixel and align_corners", "[kernel][resize]") {
  auto x = Tensor::from_vector<float>({1, 1, 2, 2}, {1, 2, 3, 4});
  auto half = run_op<ResizeOp>({x, none_f32(), scales({1, 1, 2, 2}), none_i64()}, attrs("linear"));
  check_close<float>(
      half.out(), {1, 1.25, 1.75, 2, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3, 3.25, 3.75, 4});
  auto corners = run_op<ResizeOp>({x, none_f32(), scales({1, 1, 2, 2}), none_i64()},
                                  attrs("linear", "align_corners"));
  const float t = 1.0f / 3, u = 2.0f / 3;
  check_close<float>(corners.out(), {1, 1 + t, 1 + u, 2, 1 + u, 2, 2 + t, 2 + u, 2 + t, 2 + u, 3,
                                     3 + t, 3, 3 + t, 3 + u, 4});
}

TEST_CASE("cubic resize keeps a constant input constant, with or without exclude_outside",
          "[kernel][resize]") {
  auto x = Tensor::from_vector<double>({3, 4}, std::vector<double>(12, 2.5));
  for (bool exclude : {false, true}) {
    auto a = attrs("cubic");
    a.exclude_outside = exclude;
    a.cubic_coeff_a = -0.5;
    auto r = run_op<ResizeOp>({x, none_f32(), scales({1.5f, 0.75f}), none_i64()}, a);
    CHECK(r.out().dims().to_vector() == V{4, 3});
    check_close<double>(r.out(), std::vector<double>(12, 2.5), 1e-12, 1e-12);
  }
}

TEST_CASE("tf_crop_and_resize samples the roi and fills positions outside the input",
          "[kernel][resize]") {
  auto x = Tensor::from_vector<float>({4}, {0, 10, 20, 30});
  auto a = attrs("linear", "tf_crop_and_resize");
  a.extrapolation_value = -1;
  auto r = run_op<ResizeOp>(
      {x, Tensor::from_vector<float>({2}, {0.5f, 1.5f}), none_f32(), sizes({3})}, a);
  check_close<float>(r.out(), {15, 30, -1});
}

TEST_CASE("resize rejects integer inputs, unknown modes and mismatched scales at build time",
          "[kernel][resize]") {
  Program p;
  using kiln_test::build_op;
  const std::vector<kiln_test::TypeSpec> ok{{DataType::Float32, {2, 2}},
                                            {DataType::Float32, {0}},
                                            {DataType::Float32, {2}},
                                            {DataType::Int64, {0}}};
  auto with = [&](std::size_t i, kiln_test::TypeSpec t) {
    auto v = ok;
    v[i] = t;
    return v;
  };
  KILN_CHECK_ERROR((build_op<ResizeOp>(p, with(0, {DataType::Int32, {2, 2}}), attrs("linear"))),
                   InvalidArgument, {"kiln.resize", "i32"});
  KILN_CHECK_ERROR((build_op<ResizeOp>(p, ok, attrs("bilinear"))), InvalidArgument,
                   {"kiln.resize", "mode", "'bilinear'"});
  KILN_CHECK_ERROR((build_op<ResizeOp>(p, ok, attrs("nearest", "corners"))), InvalidArgument,
                   {"kiln.resize", "coordinate_transformation_mode", "'corners'"});
  KILN_CHECK_ERROR((build_op<ResizeOp>(p, with(2, {DataType::Float32, {3}}), attrs("linear"))),
                   InvalidArgument, {"kiln.resize", "scales", "3 entries", "rank 2"});
  KILN_CHECK_ERROR((build_op<ResizeOp>(p, with(3, {DataType::Float32, {2}}), attrs("linear"))),
                   InvalidArgument, {"kiln.resize", "sizes", "i32 or i64"});
}

TEST_CASE("resize needs exactly one of scales and sizes at run time", "[kernel][resize]") {
  auto x = Tensor::from_vector<float>({2}, {1, 2});
  KILN_CHECK_ERROR(run_op<ResizeOp>({x, none_f32(), none_f32(), none_i64()}, attrs("linear")),
                   InvalidArgument, {"kiln.resize", "exactly one"});
  KILN_CHECK_ERROR(run_op<ResizeOp>({x, none_f32(), scales({2}), sizes({4})}, attrs("linear")),
                   InvalidArgument, {"kiln.resize", "exactly one"});
  KILN_CHECK_ERROR(run_op<ResizeOp>({x, none_f32(), scales({-2}), none_i64()}, attrs("linear")),
                   InvalidArgument, {"kiln.resize", "scale", "> 0"});
  KILN_CHECK_ERROR(run_op<ResizeOp>({x, none_f32(), none_f32(), sizes({4})},
                                    attrs("linear", "tf_crop_and_resize")),
                   InvalidArgument, {"kiln.resize", "roi"});
}

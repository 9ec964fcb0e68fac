// InferMeta, Vjp and error tests of the ops of kiln/dialect/conv_ops.h.
#include "catch.hpp"
#include "dialect/grad_check.h"
#include "kernel/kernel_test_util.h"
#include "test_util.h"
#include "dialect/dialect_test_util.h"

using namespace kiln;
using namespace kiln_dialect_test;
using namespace kiln_vjp_test;
using kiln_test::build_op;

namespace {
using V = std::vector<std::int64_t>;
}  // namespace

TEST_CASE("conv2d's result shape follows strides, paddings and dilations", "[dialect][conv]") {
  Program p;
  auto* op = build_op<Conv2dOp>(p, {{F32, {64, 1, 28, 28}}, {F32, {6, 1, 5, 5}}}, V{1, 1},
                                V{2, 2}, V{1, 1}, std::int64_t{1});
  CHECK(shaped_dims(op->result_type(0)) == V{64, 6, 28, 28});
  op = build_op<Conv2dOp>(p, {{F32, {-1, 6, 14, 14}}, {F32, {16, 6, 5, 5}}});
  CHECK(shaped_dims(op->result_type(0)) == V{-1, 16, 10, 10});
  op = build_op<Conv2dOp>(p, {{F64, {2, 4, 9, 8}}, {F64, {6, 2, 3, 3}}}, V{2, 3}, V{0, 1, 2, 0},
                          V{2, 1}, std::int64_t{2});
  // H: (9 + 1 - 5) / 2 + 1 = 3; W: (8 + 2 - 3) / 3 + 1 = 3.
  CHECK(shaped_dims(op->result_type(0)) == V{2, 6, 3, 3});
}

TEST_CASE("conv2d_transpose's result shape inverts conv2d's", "[dialect][conv]") {
  Program p;
  auto* op = build_op<Conv2dTransposeOp>(p, {{F32, {2, 4, 5, 5}}, {F32, {4, 3, 3, 3}}}, V{2, 2},
                                         V{1, 1}, V{1, 0}, V{1, 1}, std::int64_t{1});
  // (5 - 1) * 2 - 2 + 2 + op + 1
  CHECK(shaped_dims(op->result_type(0)) == V{2, 3, 10, 9});
  op = build_op<Conv2dTransposeOp>(p, {{F32, {1, 4, 3, 3}}, {F32, {4, 2, 2, 2}}}, V{1, 1}, V{0, 0},
                                   V{0, 0}, V{1, 1}, std::int64_t{2});
  CHECK(shaped_dims(op->result_type(0)) == V{1, 4, 4, 4});
}

TEST_CASE("conv2d rejects bad shapes and attributes at build time, naming the op",
          "[dialect][conv]") {
  Program p;
  KILN_CHECK_ERROR(build_op<Conv2dOp>(p, {{F32, {1, 3, 8, 8}}, {F32, {4, 2, 3, 3}}}),
                   InvalidArgument, {"kiln.conv2d", "channels mismatch", "C = 3"});
  KILN_CHECK_ERROR(build_op<Conv2dOp>(p, {{F32, {1, 4, 8, 8}}, {F32, {3, 2, 3, 3}}}, V{1, 1},
                                      V{0, 0}, V{1, 1}, std::int64_t{2}),
                   InvalidArgument, {"kiln.conv2d", "groups (2)", "output channels"});
  KILN_CHECK_ERROR(build_op<Conv2dOp>(p, {{F32, {1, 3, 8, 8}}, {F32, {4, 1, 3, 3}}}, V{1, 1},
                                      V{0, 0}, V{1, 1}, std::int64_t{2}),
                   InvalidArgument, {"kiln.conv2d", "groups (2)", "input channels"});
  KILN_CHECK_ERROR(build_op<Conv2dOp>(p, {{F32, {1, 1, 4, 4}}, {F32, {1, 1, 5, 5}}}),
                   InvalidArgument, {"kiln.conv2d", "larger than the padded input"});
  KILN_CHECK_ERROR(build_op<Conv2dOp>(p, {{F32, {1, 1, 4, 4}}, {F32, {1, 1, 3, 3}}}, V{1, 1},
                                      V{0, 0}, V{2, 2}, std::int64_t{1}),
                   InvalidArgument, {"kiln.conv2d", "kernel extent 5"});
  KILN_CHECK_ERROR(build_op<Conv2dOp>(p, {{F32, {1, 1, 4, 4}}, {F32, {1, 1, 3, 3}}}, V{0, 1}),
                   InvalidArgument, {"kiln.conv2d", "strides"});
  KILN_CHECK_ERROR(build_op<Conv2dOp>(p, {{F32, {1, 1, 4, 4}}, {F32, {1, 1, 3, 3}}}, V{1, 1},
                                      V{1, 1, 1}),
                   InvalidArgument, {"kiln.conv2d", "paddings"});
  KILN_CHECK_ERROR(build_op<Conv2dOp>(p, {{F32, {1, 1, 4, 4}}, {F32, {1, 1, 3, 3}}}, V{1, 1},
                                      V{-1, 0}),
                   InvalidArgument, {"kiln.conv2d", "paddings must be >= 0"});
  KILN_CHECK_ERROR(build_op<Conv2dOp>(p, {{F32, {1, 1, 4, 4}}, {F32, {1, 1, 3, 3}}}, V{1, 1},
                                      V{0, 0}, V{0, 1}),
                   InvalidArgument, {"kiln.conv2d", "dilations"});
  KILN_CHECK_ERROR(build_op<Conv2dOp>(p, {{F32, {1, 1, 4, 4}}, {F32, {1, 1, 3, 3}}}, V{1, 1},
                                      V{0, 0}, V{1, 1}, std::int64_t{0}),
                   InvalidArgument, {"kiln.conv2d", "groups must be >= 1"});
  KILN_CHECK_ERROR(build_op<Conv2dOp>(p, {{F32, {1, 4, 4}}, {F32, {1, 1, 3, 3}}}),
                   InvalidArgument, {"kiln.conv2d", "[N, C, H, W]"});
  KILN_CHECK_ERROR(build_op<Conv2dOp>(p, {{F32, {1, 1, 4, 4}}, {F64, {1, 1, 3, 3}}}),
                   InvalidArgument, {"kiln.conv2d"});
  KILN_CHECK_ERROR(build_op<Conv2dOp>(p, {{DataType::Int32, {1, 1, 4, 4}}, {DataType::Int32, {1, 1, 3, 3}}}),
                   InvalidArgument, {"kiln.conv2d"});
}

TEST_CASE("conv2d's grad op rejects a dout that is not the forward result's shape",
          "[dialect][conv]") {
  Program p;
  Conv2dOp::Attributes a{V{1, 1}, V{0, 0}, V{1, 1}, 1};
  KILN_CHECK_ERROR(build_op<GradOf<Conv2dOp>>(
                       p, {{F32, {1, 1, 4, 4}}, {F32, {1, 1, 3, 3}}, {F32, {1, 1, 3, 3}}}, a),
                   InvalidArgument, {"kiln.conv2d_grad", "dout", "[1, 1, 2, 2]"});
}

TEST_CASE("conv2d_transpose rejects bad shapes and attributes at build time, naming the op",
          "[dialect][conv]") {
  Program p;
  KILN_CHECK_ERROR(build_op<Conv2dTransposeOp>(p, {{F32, {1, 3, 4, 4}}, {F32, {2, 2, 3, 3}}}),
                   InvalidArgument, {"kiln.conv2d_transpose", "channels mismatch"});
  KILN_CHECK_ERROR(build_op<Conv2dTransposeOp>(p, {{F32, {1, 3, 4, 4}}, {F32, {3, 2, 3, 3}}},
                                               V{1, 1}, V{0, 0}, V{0, 0}, V{1, 1}, std::int64_t{2}),
                   InvalidArgument, {"kiln.conv2d_transpose", "groups (2)"});
  KILN_CHECK_ERROR(build_op<Conv2dTransposeOp>(p, {{F32, {1, 2, 4, 4}}, {F32, {2, 2, 3, 3}}},
                                               V{2, 2}, V{0, 0}, V{2, 0}),
                   InvalidArgument, {"kiln.conv2d_transpose", "output_padding"});
  KILN_CHECK_ERROR(build_op<Conv2dTransposeOp>(p, {{F32, {1, 2, 1, 1}}, {F32, {2, 2, 1, 1}}},
                                               V{1, 1}, V{1, 1}),
                   InvalidArgument, {"kiln.conv2d_transpose", "empty"});
}

TEST_CASE("conv2d's vjp matches finite differences for x and w", "[dialect][vjp][conv]") {
  struct C {
    V x, w, s, p, d;
    std::int64_t g;
  };
  for (const C& c : {C{{2, 2, 5, 4}, {3, 2, 3, 2}, {1, 1}, {0, 0}, {1, 1}, 1},
                     C{{1, 2, 6, 5}, {2, 2, 3, 3}, {2, 1}, {1, 1}, {1, 1}, 1},
                     C{{1, 4, 6, 6}, {4, 2, 2, 3}, {1, 2}, {1, 0, 2, 1}, {2, 1}, 2},
                     C{{2, 3, 3, 3}, {2, 3, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1}}) {
    INFO("x " << meta::dims_string(c.x) << " w " << meta::dims_string(c.w));
    check_vjp({random_f64(Dims(c.x), -1, 1, 1), random_f64(Dims(c.w), -1, 1, 2)},
              make_op<Conv2dOp>(c.s, c.p, c.d, c.g));
  }
  GradCheckOptions o;  // batch known only at run time
  o.unknown_batch = true;
  check_vjp({random_f64({2, 1, 5, 5}), random_f64({2, 1, 3, 3}, -1, 1, 5)},
            make_op<Conv2dOp>(V{1, 1}, V{1, 1}, V{1, 1}, std::int64_t{1}), o);
}

TEST_CASE("conv2d_transpose's vjp matches finite differences for x and w",
          "[dialect][vjp][conv]") {
  check_vjp({random_f64({2, 2, 3, 3}), random_f64({2, 3, 3, 3}, -1, 1, 2)},
            make_op<Conv2dTransposeOp>(V{2, 2}, V{1, 1}, V{1, 0}, V{1, 1}, std::int64_t{1}));
  check_vjp({random_f64({1, 4, 3, 2}), random_f64({4, 1, 2, 3}, -1, 1, 3)},
            make_op<Conv2dTransposeOp>(V{1, 2}, V{0, 1}, V{0, 1}, V{2, 1}, std::int64_t{2}));
}

TEST_CASE("fused_conv2d's vjp matches finite differences for x, w and the bias, without and "
          "with each activation",
          "[dialect][vjp][conv]") {
  for (const char* act : {"none", "relu", "relu6", "silu"}) {
    INFO(act);
    check_vjp({random_f64({2, 2, 5, 4}, -1, 1, 1), random_f64({3, 2, 3, 2}, -1, 1, 2),
               random_f64({3}, -1, 1, 3)},
              make_op<FusedConv2dOp>(V{1, 1}, V{1, 0}, V{1, 1}, std::int64_t{1}, std::string(act)));
    check_vjp({random_f64({1, 4, 6, 6}, -1, 1, 4), random_f64({4, 2, 2, 3}, -1, 1, 5),
               random_f64({4}, -1, 1, 6)},
              make_op<FusedConv2dOp>(V{1, 2}, V{1, 0, 2, 1}, V{2, 1}, std::int64_t{2}, std::string(act)));
  }
}

TEST_CASE("fused_conv2d's vjp with a residual matches finite differences for x, w, the bias and "
          "the residual, NCHW and NHWC",
          "[dialect][vjp][conv]") {
  for (const std::string layout : {"NCHW", "NHWC"})
    for (const std::string act : {"none", "relu", "relu6", "silu"}) {
      INFO(layout << " " << act);
      const bool nhwc = layout == "NHWC";
      auto make = [=](Builder& b, const std::vector<Value>& v) {
        return b.create<FusedConv2dOp>(v[0], v[1], v[2], V{1, 1}, V{1, 0}, V{1, 1}, std::int64_t{1}, act, layout,
                                       v[3])
            .operation();
      };
      // x [2, 2, 5, 4] (NCHW), w 3x2: out [2, 3, 5, 3]
      check_vjp({random_f64(nhwc ? Dims{2, 5, 4, 2} : Dims{2, 2, 5, 4}, -1, 1, 1), random_f64({3, 2, 3, 2}, -1, 1, 2),
                 random_f64({3}, -1, 1, 3), random_f64(nhwc ? Dims{2, 5, 3, 3} : Dims{2, 3, 5, 3}, -1, 1, 4)},
                make);
    }
}

TEST_CASE("fused_conv2d rejects a residual not typed like its result, naming the op", "[dialect][conv]") {
  Program p;
  Builder b(p);
  auto in = [&](const char* name, std::vector<std::int64_t> dims, DataType dt = F32) {
    return b.create<DataOp>(name, dims, dt).result();
  };
  const Value x = in("x", {1, 2, 5, 5}), w = in("w", {4, 2, 3, 3}), bias = in("bias", {4});
  for (const Value residual : {in("small", {1, 4, 2, 3}), in("f64", {1, 4, 3, 3}, F64)})
    KILN_CHECK_ERROR(b.create<FusedConv2dOp>(x, w, bias, V{1, 1}, V{0, 0}, V{1, 1}, std::int64_t{1},
                                             std::string("relu"), std::string("NCHW"), residual),
                     InvalidArgument, {"kiln.fused_conv2d", "residual must be [1, 4, 3, 3] of f32"});
}

TEST_CASE("fused_conv2d in NHWC infers [N, Ho, Wo, O] and its vjp matches finite differences",
          "[dialect][vjp][conv]") {
  Program p;
  Operation* op = build_op<FusedConv2dOp>(p, {{F32, {2, 5, 4, 6}}, {F32, {3, 2, 3, 3}}, {F32, {3}}},
                                          V{2, 1}, V{1, 1}, V{1, 1}, std::int64_t{3}, std::string("relu"),
                                          std::string("NHWC"));
  CHECK(shaped_dims(op->result(0).type()) == std::vector<std::int64_t>{2, 3, 4, 3});
  for (const char* act : {"none", "relu6", "silu"}) {
    INFO(act);
    check_vjp({random_f64({2, 5, 4, 2}, -1, 1, 1), random_f64({3, 2, 3, 2}, -1, 1, 2),
               random_f64({3}, -1, 1, 3)},
              make_op<FusedConv2dOp>(V{1, 1}, V{1, 0}, V{1, 1}, std::int64_t{1}, std::string(act),
                                     std::string("NHWC")));
  }
}

TEST_CASE("fused_conv2d rejects a bias of the wrong length or dtype and an unknown activation",
          "[dialect][conv]") {
  Program p;
  KILN_CHECK_ERROR(build_op<FusedConv2dOp>(p, {{F32, {1, 2, 5, 5}}, {F32, {3, 2, 3, 3}}, {F32, {4}}}),
                   InvalidArgument, {"kiln.fused_conv2d", "bias must be [3]"});
  KILN_CHECK_ERROR(build_op<FusedConv2dOp>(p, {{F32, {1, 2, 5, 5}}, {F32, {3, 2, 3, 3}}, {F64, {3}}}),
                   InvalidArgument, {"kiln.fused_conv2d", "bias must be [3] of f32"});
  KILN_CHECK_ERROR(build_op<FusedConv2dOp>(p, {{F32, {1, 2, 5, 5}}, {F32, {3, 2, 3, 3}}, {F32, {3}}},
                                           V{1, 1}, V{0, 0}, V{1, 1}, std::int64_t{1},
                                           std::string("tanh")),
                   InvalidArgument, {"kiln.fused_conv2d", "activation 'tanh'"});
  KILN_CHECK_ERROR(build_op<FusedConv2dOp>(p, {{F32, {1, 2, 5, 5}}, {F32, {3, 2, 3, 3}}, {F32, {3}}},
                                           V{1, 1}, V{0, 0}, V{1, 1}, std::int64_t{1},
                                           std::string("none"), std::string("NCWH")),
                   InvalidArgument, {"kiln.fused_conv2d", "data_format 'NCWH'"});
}

TEST_CASE("channel_scaled_conv2d infers fused_conv2d's result and names factors that are not one per image "
          "(or for all) and channel of x",
          "[dialect][conv]") {
  Program p;
  const FusedConv2dOp::Attributes nhwc{V{1, 1}, V{0, 0}, V{1, 1}, 1, "silu", "NHWC", false};
  auto build = [&](V scale, DataType dt = DataType::Float32, const FusedConv2dOp::Attributes* a = nullptr) {
    return build_op<ChannelScaledConv2dOp>(p, {{F32, {-1, 5, 5, 4}}, {dt, scale}, {F32, {3, 4, 1, 1}}, {F32, {3}}},
                                           a ? *a : nhwc);
  };
  CHECK(shaped_dims(build({-1, 1, 1, 4})->result_type(0)) == V{-1, 5, 5, 3});
  CHECK(shaped_dims(build({1, 1, 1, 4})->result_type(0)) == V{-1, 5, 5, 3});
  for (const V& bad : {V{2, 4, 1, 1}, V{-1, 1, 5, 4}, V{-1, 1, 1, 3}, V{-1, 4}})
    KILN_CHECK_ERROR(build(bad), InvalidArgument, {"kiln.channel_scaled_conv2d", "scale must be [-1, 1, 1, 4]"});
  KILN_CHECK_ERROR(build({-1, 1, 1, 4}, DataType::Float64), InvalidArgument,
                   {"kiln.channel_scaled_conv2d", "scale must be"});
  FusedConv2dOp::Attributes gelu = nhwc;
  gelu.activation = "gelu";
  KILN_CHECK_ERROR(build({-1, 1, 1, 4}, DataType::Float32, &gelu), InvalidArgument,
                   {"kiln.channel_scaled_conv2d", "activation 'gelu'"});
  FusedConv2dOp::Attributes nchw = nhwc;
  nchw.data_format = "NCHW";
  KILN_CHECK_ERROR(build_op<ChannelScaledConv2dOp>(
                       p, {{F32, {2, 4, 5, 5}}, {F32, {2, 1, 1, 4}}, {F32, {3, 4, 1, 1}}, {F32, {3}}}, nchw),
                   InvalidArgument, {"kiln.channel_scaled_conv2d", "scale must be [2, 4, 1, 1]"});
}

TEST_CASE("pointwise_depthwise_conv2d infers the depthwise convolution's NHWC result and names weights that are "
          "not a 1x1 expansion and one filter per expanded channel",
          "[dialect][conv]") {
  Program p;
  const PointwiseDepthwiseConv2dOp::Attributes a{V{2, 2}, V{1, 1}, V{1, 1}, "relu6", "relu6"};
  auto build = [&](V pw, V dw, V x = V{-1, 9, 9, 4}) {
    return build_op<PointwiseDepthwiseConv2dOp>(p, {{F32, x}, {F32, pw}, {F32, {pw[0]}}, {F32, dw}, {F32, {dw[0]}}},
                                                a);
  };
  CHECK(shaped_dims(build({16, 4, 1, 1}, {16, 1, 3, 3})->result_type(0)) == V{-1, 5, 5, 16});
  CHECK(shaped_dims(build({16, 4, 1, 1}, {16, 1, 3, 3}, V{2, -1, -1, 4})->result_type(0)) == V{2, -1, -1, 16});
  KILN_CHECK_ERROR(build({16, 4, 3, 3}, {16, 1, 3, 3}), InvalidArgument,
                   {"kiln.pointwise_depthwise_conv2d", "pw must be [E, C, 1, 1]", "[16, 4, 3, 3]"});
  KILN_CHECK_ERROR(build({16, 5, 1, 1}, {16, 1, 3, 3}), InvalidArgument, {"kiln.pointwise_depthwise_conv2d"});
  for (const V& dw : {V{8, 1, 3, 3}, V{16, 2, 3, 3}, V{16, 3, 3}})
    KILN_CHECK_ERROR(build({16, 4, 1, 1}, dw), InvalidArgument,
                     {"kiln.pointwise_depthwise_conv2d", "dw must be [16, 1, kh, kw]"});
  PointwiseDepthwiseConv2dOp::Attributes gelu = a;
  gelu.pointwise_activation = "gelu";
  KILN_CHECK_ERROR(build_op<PointwiseDepthwiseConv2dOp>(
                       p, {{F32, {1, 9, 9, 4}}, {F32, {16, 4, 1, 1}}, {F32, {16}}, {F32, {16, 1, 3, 3}}, {F32, {16}}},
                       gelu),
                   InvalidArgument, {"kiln.pointwise_depthwise_conv2d", "activation 'gelu'"});
}

TEST_CASE("fused_conv2d_mean infers fused_conv2d's NHWC result and its [N, 1, 1, O] mean, and names NCHW data",
          "[dialect][conv]") {
  Program p;
  FusedConv2dOp::Attributes a{V{1, 1}, V{1, 1}, V{1, 1}, 1, "silu", "NHWC", false};
  auto* op = build_op<FusedConv2dMeanOp>(p, {{F32, {-1, 7, 7, 4}}, {F32, {6, 4, 3, 3}}, {F32, {6}}}, a);
  CHECK(shaped_dims(op->result_type(0)) == V{-1, 7, 7, 6});
  CHECK(shaped_dims(op->result_type(1)) == V{-1, 1, 1, 6});
  a.data_format = "NCHW";
  KILN_CHECK_ERROR(build_op<FusedConv2dMeanOp>(p, {{F32, {2, 4, 7, 7}}, {F32, {6, 4, 3, 3}}, {F32, {6}}}, a),
                   InvalidArgument, {"kiln.fused_conv2d_mean", "NHWC data only"});
  a.data_format = "NHWC";
  KILN_CHECK_ERROR(build_op<FusedConv2dMeanOp>(p, {{F32, {2, 7, 7, 4}}, {F32, {6, 4, 3, 3}}, {F32, {5}}}, a),
                   InvalidArgument, {"kiln.fused_conv2d_mean", "bias must be [6]"});
}

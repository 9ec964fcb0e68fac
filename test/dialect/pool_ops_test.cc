// InferMeta, Vjp and error tests of the ops of kiln/dialect/pool_ops.h.
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

TEST_CASE("pool result shapes follow kernel, strides, paddings and ceil_mode",
          "[dialect][pool]") {
  Program p;
  auto* op = build_op<MaxPool2dOp>(p, {{F32, {64, 6, 28, 28}}}, V{2, 2});
  CHECK(shaped_dims(op->result_type(0)) == V{64, 6, 14, 14});
  op = build_op<MaxPool2dOp>(p, {{F32, {-1, 3, 7, 7}}}, V{3, 3}, V{2, 2}, V{1, 1}, true);
  CHECK(shaped_dims(op->result_type(0)) == V{-1, 3, 4, 4});
  op = build_op<AvgPool2dOp>(p, {{F32, {1, 3, 5, 5}}}, V{2, 2}, V{2, 2}, V{0, 0}, true);
  CHECK(shaped_dims(op->result_type(0)) == V{1, 3, 3, 3});
  // ceil_mode drops a last window that would start in the bottom padding.
  op = build_op<AvgPool2dOp>(p, {{F32, {1, 1, 4, 4}}}, V{2, 2}, V{2, 2}, V{1, 1}, true);
  CHECK(shaped_dims(op->result_type(0)) == V{1, 1, 3, 3});
  op = build_op<AdaptiveAvgPool2dOp>(p, {{F32, {2, 8, 9, 9}}}, V{1, 1});
  CHECK(shaped_dims(op->result_type(0)) == V{2, 8, 1, 1});
}

TEST_CASE("pools reject bad shapes and attributes at build time, naming the op",
          "[dialect][pool]") {
  Program p;
  KILN_CHECK_ERROR(build_op<MaxPool2dOp>(p, {{F32, {1, 1, 3, 3}}}, V{4, 4}), InvalidArgument,
                   {"kiln.max_pool2d", "pool window 4", "larger than the padded input"});
  KILN_CHECK_ERROR(build_op<AvgPool2dOp>(p, {{F32, {1, 1, 3, 3}}}, V{2, 2}, V{0, 1}),
                   InvalidArgument, {"kiln.avg_pool2d", "strides"});
  KILN_CHECK_ERROR(build_op<MaxPool2dOp>(p, {{F32, {1, 1, 6, 6}}}, V{2, 2}, V{2, 2}, V{2, 0}),
                   InvalidArgument, {"kiln.max_pool2d", "at most half the kernel"});
  KILN_CHECK_ERROR(build_op<MaxPool2dOp>(p, {{F32, {1, 1, 6, 6}}}, V{2}), InvalidArgument,
                   {"kiln.max_pool2d", "kernel_size"});
  KILN_CHECK_ERROR(build_op<MaxPool2dOp>(p, {{F32, {1, 1, 6, 6}}}, V{2, 2}, V{2, 2}, V{0, 0, 0}),
                   InvalidArgument, {"kiln.max_pool2d", "paddings"});
  KILN_CHECK_ERROR(build_op<AvgPool2dOp>(p, {{F32, {1, 6, 6}}}, V{2, 2}), InvalidArgument,
                   {"kiln.avg_pool2d", "[N, C, H, W]"});
  KILN_CHECK_ERROR(build_op<MaxPool2dOp>(p, {{DataType::Bool, {1, 1, 6, 6}}}, V{2, 2}),
                   InvalidArgument, {"kiln.max_pool2d", "bool"});
  KILN_CHECK_ERROR(build_op<AvgPool2dOp>(p, {{DataType::Int64, {1, 1, 6, 6}}}, V{2, 2}),
                   InvalidArgument, {"kiln.avg_pool2d", "i64"});
  KILN_CHECK_ERROR(build_op<AdaptiveAvgPool2dOp>(p, {{F32, {1, 1, 6, 6}}}, V{0, 2}),
                   InvalidArgument, {"kiln.adaptive_avg_pool2d", "output_size"});
  KILN_CHECK_ERROR(build_op<AdaptiveAvgPool2dOp>(p, {{F32, {6, 6}}}, V{2, 2}), InvalidArgument,
                   {"kiln.adaptive_avg_pool2d", "[N, C, H, W]"});
}

TEST_CASE("pool grad ops reject a dout that is not the forward result's shape",
          "[dialect][pool]") {
  Program p;
  KILN_CHECK_ERROR(build_op<GradOf<MaxPool2dOp>>(p, {{F32, {1, 1, 4, 4}}, {F32, {1, 1, 4, 4}}},
                                                 MaxPool2dOp::Attributes{V{2, 2}, V{2, 2}, V{0, 0}, false, "NCHW"}),
                   InvalidArgument, {"kiln.max_pool2d_grad", "dout", "[1, 1, 2, 2]"});
  KILN_CHECK_ERROR(build_op<GradOf<AdaptiveAvgPool2dOp>>(
                       p, {{F32, {1, 1, 4, 4}}, {F32, {1, 1, 3, 3}}},
                       AdaptiveAvgPool2dOp::Attributes{V{2, 2}}),
                   InvalidArgument, {"kiln.adaptive_avg_pool2d_grad", "dout"});
}

TEST_CASE("max_pool2d's vjp matches finite differences", "[dialect][vjp][pool]") {
  check_vjp({random_f64({2, 2, 4, 4})}, make_op<MaxPool2dOp>(V{2, 2}));
  check_vjp({random_f64({1, 2, 5, 6}, -1, 1, 2)},
            make_op<MaxPool2dOp>(V{3, 2}, V{2, 1}, V{1, 1}, true));
  GradCheckOptions o;
  o.unknown_batch = true;
  check_vjp({random_f64({2, 1, 4, 4}, -1, 1, 3)}, make_op<MaxPool2dOp>(V{2, 2}), o);
}

TEST_CASE("max_pool2d in NHWC infers [N, Ho, Wo, C], names a bad data_format, and its vjp "
          "matches finite differences",
          "[dialect][vjp][pool]") {
  Program p;
  Operation* op = build_op<MaxPool2dOp>(p, {{F32, {2, 5, 6, 3}}}, V{3, 3}, V{2, 2}, V{1, 1}, false,
                                        std::string("NHWC"));
  CHECK(shaped_dims(op->result(0).type()) == std::vector<std::int64_t>{2, 3, 3, 3});
  KILN_CHECK_ERROR(build_op<MaxPool2dOp>(p, {{F32, {2, 5, 6, 3}}}, V{3, 3}, V{2, 2}, V{1, 1}, false,
                                         std::string("HWCN")),
                   InvalidArgument, {"kiln.max_pool2d", "data_format 'HWCN'"});
  check_vjp({random_f64({1, 5, 6, 2}, -1, 1, 2)},
            make_op<MaxPool2dOp>(V{3, 2}, V{2, 1}, V{1, 1}, true, std::string("NHWC")));
}

TEST_CASE("max_pool2d's vjp on an NHWC op builds one NHWC max_pool2d_grad and no transposes",
          "[dialect][vjp][pool]") {
  Program p;
  Builder b(p);
  const Value x = b.create<DataOp>("x", V{2, 8, 8, 5}, DataType::Float32).result();
  Operation* op = b.create<MaxPool2dOp>(x, V{3, 3}, V{2, 2}, V{1, 1}, false, std::string("NHWC")).operation();
  const Value d = b.create<DataOp>("d", V{2, 4, 4, 5}, DataType::Float32).result();
  const std::size_t before = p.block().size();
  auto g = call_vjp(b, op, {d});
  REQUIRE(g.size() == 1);
  REQUIRE(p.block().size() == before + 1);
  Operation* grad = g[0].defining_op();
  REQUIRE(grad->isa<GradOf<MaxPool2dOp>>());
  CHECK(GradOf<MaxPool2dOp>(grad).attrs().data_format == "NHWC");
  CHECK(grad->operand_source(0) == x);
  CHECK(grad->operand_source(1) == d);
  CHECK(shaped_dims(g[0].type()) == V{2, 8, 8, 5});
  // Its check takes dout [N, Ho, Wo, C] and names the NHWC shape otherwise.
  KILN_CHECK_ERROR(build_op<GradOf<MaxPool2dOp>>(p, {{F32, {2, 8, 8, 5}}, {F32, {2, 5, 4, 4}}},
                                                 MaxPool2dOp::Attributes{V{3, 3}, V{2, 2}, V{1, 1}, false, "NHWC"}),
                   InvalidArgument, {"kiln.max_pool2d_grad", "dout", "[2, 4, 4, 5]"});
  KILN_CHECK_ERROR(build_op<GradOf<MaxPool2dOp>>(p, {{F32, {8, 8, 5}}, {F32, {4, 4, 5}}},
                                                 MaxPool2dOp::Attributes{V{3, 3}, V{2, 2}, V{1, 1}, false, "NHWC"}),
                   InvalidArgument, {"kiln.max_pool2d_grad", "[N, H, W, C]", "[8, 8, 5]"});
  KILN_CHECK_ERROR(build_op<MaxPool2dOp>(p, {{F32, {8, 8, 5}}}, V{3, 3}, V{2, 2}, V{1, 1}, false, std::string("NHWC")),
                   InvalidArgument, {"kiln.max_pool2d", "[N, H, W, C]", "[8, 8, 5]"});
  // A 3x3 stride-2 NHWC pool's vjp against finite differences.
  check_vjp({random_f64({2, 7, 6, 3}, -1, 1, 4)},
            make_op<MaxPool2dOp>(V{3, 3}, V{2, 2}, V{1, 1}, false, std::string("NHWC")));
}

TEST_CASE("avg_pool2d's vjp matches finite differences, padding counted or not",
          "[dialect][vjp][pool]") {
  for (bool exclusive : {true, false})
    for (bool ceil_mode : {false, true}) {
      INFO("exclusive " << exclusive << " ceil_mode " << ceil_mode);
      check_vjp({random_f64({1, 2, 5, 5})},
                make_op<AvgPool2dOp>(V{3, 2}, V{2, 2}, V{1, 1}, ceil_mode, exclusive));
    }
}

TEST_CASE("adaptive_avg_pool2d's vjp matches finite differences", "[dialect][vjp][pool]") {
  check_vjp({random_f64({2, 2, 5, 7})}, make_op<AdaptiveAvgPool2dOp>(V{3, 2}));
  check_vjp({random_f64({1, 1, 2, 3})}, make_op<AdaptiveAvgPool2dOp>(V{4, 4}));
}

TEST_CASE("roi_align gives one [C, oh, ow] result per region and names bad regions, indices and attributes",
          "[dialect][pool]") {
  Program p;
  const DataType I64 = DataType::Int64, I32 = DataType::Int32;
  auto* op = build_op<RoiAlignOp>(p, {{F32, {2, 256, 50, 68}}, {F32, {-1, 4}}, {I64, {-1}}}, V{7, 7});
  CHECK(shaped_dims(op->result_type(0)) == V{-1, 256, 7, 7});
  op = build_op<RoiAlignOp>(p, {{F64, {1, 3, 8, 8}}, {F64, {-1, 4}}, {I32, {5}}}, V{2, 3}, 0.25);
  CHECK(shaped_dims(op->result_type(0)) == V{5, 3, 2, 3});
  CHECK(shaped_data_type(op->result_type(0)) == F64);
  KILN_CHECK_ERROR(build_op<RoiAlignOp>(p, {{F32, {1, 3, 8}}, {F32, {2, 4}}, {I64, {2}}}, V{2, 2}),
                   InvalidArgument, {"kiln.roi_align", "[N, C, H, W]"});
  KILN_CHECK_ERROR(build_op<RoiAlignOp>(p, {{F32, {1, 3, 8, 8}}, {F32, {2, 5}}, {I64, {2}}}, V{2, 2}),
                   InvalidArgument, {"kiln.roi_align", "rois must be [R, 4]"});
  KILN_CHECK_ERROR(build_op<RoiAlignOp>(p, {{F32, {1, 3, 8, 8}}, {F64, {2, 4}}, {I64, {2}}}, V{2, 2}),
                   InvalidArgument, {"kiln.roi_align"});
  KILN_CHECK_ERROR(build_op<RoiAlignOp>(p, {{F32, {1, 3, 8, 8}}, {F32, {2, 4}}, {I64, {3}}}, V{2, 2}),
                   InvalidArgument, {"kiln.roi_align", "batch_indices must be i32 or i64 [R]"});
  KILN_CHECK_ERROR(build_op<RoiAlignOp>(p, {{F32, {1, 3, 8, 8}}, {F32, {2, 4}}, {F32, {2}}}, V{2, 2}),
                   InvalidArgument, {"kiln.roi_align", "batch_indices must be i32 or i64"});
  const std::vector<kiln_test::TypeSpec> ok{{F32, {1, 3, 8, 8}}, {F32, {2, 4}}, {I64, {2}}};
  KILN_CHECK_ERROR(build_op<RoiAlignOp>(p, ok, V{0, 2}), InvalidArgument, {"kiln.roi_align", "output_size"});
  KILN_CHECK_ERROR(build_op<RoiAlignOp>(p, ok, V{2, 2}, 0.0), InvalidArgument,
                   {"kiln.roi_align", "spatial_scale", "> 0"});
  CHECK_NOTHROW(build_op<RoiAlignOp>(p, ok, V{2, 2}, 1.0, std::int64_t{-1}));  // adaptive, as torchvision's -1
  KILN_CHECK_ERROR(build_op<RoiAlignOp>(p, ok, V{2, 2}, 1.0, std::int64_t{0}, true, std::string("mean")),
                   InvalidArgument, {"kiln.roi_align", "mode", "'mean'"});
  KILN_CHECK_ERROR(build_op<GradOf<RoiAlignOp>>(p, {{F32, {1, 3, 8, 8}}, {F32, {2, 4}}, {I64, {2}}, {F32, {2, 3, 2, 3}}},
                                                V{2, 2}, 1.0, std::int64_t{0}, true, std::string("avg")),
                   InvalidArgument, {"kiln.roi_align_grad", "dout", "[2, 3, 2, 2]"});
}

TEST_CASE("roi_align's vjp matches finite differences for x, averaged or maxed, aligned or not, and gives the "
          "regions none",
          "[dialect][vjp][pool]") {
  // Regions inside, across the edge and past it; corners off the pixel grid
  // so that no sample sits on a kink of the bilinear weights.
  const std::vector<double> corners{0.3, 0.7, 3.9, 4.6, -1.7, 2.2, 2.9, 6.1, 3.1, -0.6, 7.4, 2.35};
  for (const char* mode : {"avg", "max"})
    for (bool aligned : {true, false})
      for (std::int64_t ratio : {0, 2}) {
        INFO("mode " << mode << " aligned " << aligned << " sampling_ratio " << ratio);
        GradCheckOptions options;
        options.without_grad = {1};
        const Tensor rois = Tensor::from_vector<double>({3, 4}, corners);
        auto report = check_vjp({random_f64({2, 2, 6, 7}), rois, i64({3}, {1, 0, 1})},
                                make_op<RoiAlignOp>(V{2, 3}, 1.0, ratio, aligned, std::string(mode)), options);
        CHECK(report.compared == 2 * 2 * 6 * 7);
      }
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", V{1, 1, 4, 4}, F64).result();
  Value rois = b.create<DataOp>("rois", V{1, 4}, F64).result();
  Value bi = b.create<DataOp>("bi", V{1}, DataType::Int64).result();
  auto* op = b.create<RoiAlignOp>(x, rois, bi, V{2, 2}).operation();
  Value dout = b.create<DataOp>("dout", V{1, 1, 2, 2}, F64).result();
  auto grads = call_vjp(b, op, {dout});
  REQUIRE(grads.size() == 3);
  CHECK(grads[0]);
  CHECK(!grads[1]);
  CHECK(!grads[2]);
}

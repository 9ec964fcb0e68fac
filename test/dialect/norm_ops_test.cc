// layer_norm, rms_norm and batch_norm as ops: their Vjps (one fused gradient
// op each) against central finite differences in f64 for every
// differentiable operand, and the InferMeta errors that name the op (shapes
// of weight / bias / per-channel operands, begin_norm_axis, epsilon,
// momentum).
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "dialect/grad_check.h"
#include "kernel/kernel_test_util.h"
#include "kiln/exec/executor.h"
#include "test_util.h"
#include "dialect/dialect_test_util.h"

using namespace kiln;
using namespace kiln_dialect_test;
using namespace kiln_vjp_test;
using kiln_test::build_op;

namespace {


// batch_norm's Vjp (5 operands, the running statistics getting no grad)
// against central differences of Σ y·w over x, scale and bias; the running
// statistics are kiln.full values inside the program.
void check_batch_norm_vjp(const kiln::Dims& xd, std::int64_t c, bool is_test) {
  const std::vector<Tensor> in{random_f64(xd, -1, 1, 1), random_f64({c}, 0.5, 1.5, 2),
                               random_f64({c}, -1, 1, 3)};
  const Tensor w = random_f64(xd, -1, 1, 4);
  auto build = [&](Program& p, bool grad) {
    Builder b(p);
    std::vector<Value> v;
    for (int i = 0; i < 3; ++i)
      v.push_back(b.create<DataOp>("in" + std::to_string(i), in[i].dims().to_vector(), F64).result());
    Value rm = b.create<FullOp>(std::vector<std::int64_t>{c}, 0.25, F64).result();
    Value rv = b.create<FullOp>(std::vector<std::int64_t>{c}, 1.5, F64).result();
    auto op = b.create<BatchNormOp>(v[0], v[1], v[2], rm, rv, 0.9, 1e-5, is_test);
    if (!grad) return std::vector<Value>{op.result(0)};
    Value dy = b.create<DataOp>("w", xd.to_vector(), F64).result();
    auto g = call_vjp(b, op.operation(), {dy, Value(), Value(), Value(), Value()});
    REQUIRE(g.size() == 5);
    CHECK((!g[3] && !g[4]));
    return std::vector<Value>{g[0], g[1], g[2]};
  };
  Program fwd, bwd;
  auto y = build(fwd, false);
  auto grads = build(bwd, true);
  Executor exe;
  auto feeds = [&](const std::vector<Tensor>& x, bool with_w) {
    FeedMap f;
    for (int i = 0; i < 3; ++i) f.emplace("in" + std::to_string(i), x[i]);
    if (with_w) f.emplace("w", w);
    return f;
  };
  auto objective = [&](const std::vector<Tensor>& x) {
    auto out = exe.run(fwd, feeds(x, false), {y[0]})[0].to_vector<double>();
    auto wv = w.to_vector<double>();
    double s = 0;
    for (std::size_t k = 0; k < out.size(); ++k) s += out[k] * wv[k];
    return s;
  };
  auto got = exe.run(bwd, feeds(in, true), {grads[0], grads[1], grads[2]});
  const double eps = 1e-6;
  for (int i = 0; i < 3; ++i) {
    INFO("input #" << i << " is_test " << is_test);
    auto analytic = got[i].to_vector<double>();
    auto base = in[i].to_vector<double>();
    REQUIRE(analytic.size() == base.size());
    for (std::size_t k = 0; k < base.size(); ++k) {
      auto at = [&](double d) {
        auto x = in;
        auto v = base;
        v[k] += d;
        x[i] = Tensor::from_vector<double>(in[i].dims(), v);
        return objective(x);
      };
      const double numeric = (at(eps) - at(-eps)) / (2 * eps);
      INFO("element " << k << ": analytic " << analytic[k] << ", numeric " << numeric);
      CHECK(std::abs(analytic[k] - numeric) <= 1e-6 + 1e-5 * std::abs(numeric));
    }
  }
}

MakeOp layer_norm_op(std::int64_t axis, double eps) {
  return [=](Builder& b, const std::vector<Value>& v) -> Operation* {
    REQUIRE(v.size() == 3);
    return b.create<LayerNormOp>(v[0], v[1], v[2], axis, eps).operation();
  };
}

}  // namespace

TEST_CASE("layer_norm's vjp matches finite differences for x, weight and bias",
          "[dialect][vjp][norm]") {
  GradCheckOptions o;
  o.result_grads = {true, false, false};  // mean / rstd are saved statistics
  o.rtol = 1e-5;
  o.atol = 1e-6;
  check_vjp({random_f64({4, 6}, -1, 1, 1), random_f64({6}, 0.5, 1.5, 2), random_f64({6}, -1, 1, 3)},
            layer_norm_op(-1, 1e-5), o);
  // Over the last two axes, weight shaped like them.
  check_vjp({random_f64({2, 3, 4}, -1, 1, 4), random_f64({3, 4}, 0.5, 1.5, 5),
             random_f64({3, 4}, -1, 1, 6)},
            layer_norm_op(1, 1e-3), o);
  // Over all of x (begin_norm_axis 0), and with a batch dim unknown at build time.
  check_vjp({random_f64({5}, -1, 1, 7), random_f64({5}, 0.5, 1.5, 8), random_f64({5}, -1, 1, 9)},
            layer_norm_op(0, 1e-5), o);
  GradCheckOptions u = o;
  u.declared = {{-1, 8}, {8}, {8}};
  check_vjp({random_f64({3, 8}, -1, 1, 10), random_f64({8}, 0.5, 1.5, 11),
             random_f64({8}, -1, 1, 12)},
            layer_norm_op(1, 1e-5), u);
}

TEST_CASE("rms_norm's vjp matches finite differences for x and weight", "[dialect][vjp][norm]") {
  GradCheckOptions o;
  o.result_grads = {true, false};
  o.rtol = 1e-5;
  o.atol = 1e-6;
  check_vjp({random_f64({3, 7}, -1, 1, 1), random_f64({7}, 0.5, 1.5, 2)},
            make_op<RmsNormOp>(std::int64_t{-1}, 1e-6), o);
  check_vjp({random_f64({2, 2, 3}, -1, 1, 3), random_f64({2, 3}, 0.5, 1.5, 4)},
            make_op<RmsNormOp>(std::int64_t{1}, 1e-4), o);
}

TEST_CASE("batch_norm's vjp matches finite differences for x, scale and bias in training and test "
          "mode",
          "[dialect][vjp][norm]") {
  for (bool is_test : {false, true}) {
    check_batch_norm_vjp(kiln::Dims({3, 2, 4}), 2, is_test);
    check_batch_norm_vjp(kiln::Dims({5, 3}), 3, is_test);
  }
}

TEST_CASE("norm ops give no gradients when no grad flows into y", "[dialect][vjp][norm]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{2, 3}, F64).result();
  auto w = b.create<DataOp>("w", std::vector<std::int64_t>{3}, F64).result();
  auto ln = b.create<LayerNormOp>(x, w, w, std::int64_t{-1}, 1e-5);
  auto g = call_vjp(b, ln.operation(), {Value(), ln.result(1), Value()});
  REQUIRE(g.size() == 3);
  CHECK((!g[0] && !g[1] && !g[2]));
  auto rms = b.create<RmsNormOp>(x, w, std::int64_t{-1}, 1e-5);
  auto gr = call_vjp(b, rms.operation(), {Value(), Value()});
  CHECK((!gr[0] && !gr[1]));
}

TEST_CASE("layer_norm and rms_norm reject weights, axes and epsilons that do not fit, naming the op",
          "[dialect][norm]") {
  Program p;
  const std::int64_t last = -1;
  // weight / bias not shaped like the normalized dims.
  KILN_CHECK_ERROR(build_op<LayerNormOp>(p, {{F32, {2, 4}}, {F32, {3}}, {F32, {4}}}, last, 1e-5),
                   InvalidArgument, {"kiln.layer_norm", "weight", "[3]", "normalized shape", "[4]"});
  KILN_CHECK_ERROR(build_op<LayerNormOp>(p, {{F32, {2, 4}}, {F32, {4}}, {F32, {2, 4}}}, last, 1e-5),
                   InvalidArgument, {"kiln.layer_norm", "bias"});
  KILN_CHECK_ERROR(
      build_op<LayerNormOp>(p, {{F32, {2, 3, 4}}, {F32, {4, 3}}, {F32, {12}}}, std::int64_t{1}, 1e-5),
      InvalidArgument, {"kiln.layer_norm", "weight", "[3, 4]"});
  KILN_CHECK_ERROR(build_op<RmsNormOp>(p, {{F32, {2, 4}}, {F32, {5}}}, last, 1e-5),
                   InvalidArgument, {"kiln.rms_norm", "weight", "[5]"});
  // A flattened [N] weight is accepted.
  CHECK(build_op<LayerNormOp>(p, {{F32, {2, 3, 4}}, {F32, {12}}, {F32, {12}}}, std::int64_t{1}, 1e-5));
  // begin_norm_axis out of range.
  KILN_CHECK_ERROR(build_op<LayerNormOp>(p, {{F32, {2, 4}}, {F32, {4}}, {F32, {4}}}, std::int64_t{2}, 1e-5),
                   InvalidArgument, {"kiln.layer_norm", "begin_norm_axis 2"});
  KILN_CHECK_ERROR(build_op<RmsNormOp>(p, {{F32, {2, 4}}, {F32, {4}}}, std::int64_t{-3}, 1e-5),
                   InvalidArgument, {"kiln.rms_norm", "begin_norm_axis -3"});
  // epsilon <= 0.
  KILN_CHECK_ERROR(build_op<LayerNormOp>(p, {{F32, {2, 4}}, {F32, {4}}, {F32, {4}}}, last, 0.0),
                   InvalidArgument, {"kiln.layer_norm", "epsilon", "> 0"});
  KILN_CHECK_ERROR(build_op<RmsNormOp>(p, {{F32, {2, 4}}, {F32, {4}}}, last, -1e-5),
                   InvalidArgument, {"kiln.rms_norm", "epsilon"});
  // dtypes: integer x, mixed weight.
  KILN_CHECK_ERROR(build_op<RmsNormOp>(p, {{DataType::Int64, {2, 4}}, {DataType::Int64, {4}}}, last, 1e-5),
                   InvalidArgument, {"kiln.rms_norm"});
  KILN_CHECK_ERROR(build_op<LayerNormOp>(p, {{F32, {2, 4}}, {F64, {4}}, {F32, {4}}}, last, 1e-5),
                   InvalidArgument, {"kiln.layer_norm"});
  // The results: y like x, mean / rstd [prod(leading dims)].
  Operation* op = build_op<LayerNormOp>(p, {{F32, {2, 3, 4}}, {F32, {4}}, {F32, {4}}}, last, 1e-5);
  CHECK(shaped_dims(op->result_type(0)) == std::vector<std::int64_t>{2, 3, 4});
  CHECK(shaped_dims(op->result_type(1)) == std::vector<std::int64_t>{6});
  Operation* unk = build_op<RmsNormOp>(p, {{F32, {-1, 4}}, {F32, {4}}}, last, 1e-5);
  CHECK(shaped_dims(unk->result_type(1)) == std::vector<std::int64_t>{-1});
}

TEST_CASE("batch_norm rejects per-channel operands of the wrong C and bad attributes, naming the op",
          "[dialect][norm]") {
  Program p;
  auto bn = [&](std::vector<std::int64_t> xd, std::vector<std::vector<std::int64_t>> ch,
                double momentum = 0.9, double eps = 1e-5) {
    std::vector<kiln_test::TypeSpec> in{{F32, xd}};
    for (auto& d : ch) in.push_back({F32, d});
    return build_op<BatchNormOp>(p, in, momentum, eps, false);
  };
  KILN_CHECK_ERROR(bn({4, 3, 5}, {{2}, {3}, {3}, {3}}), InvalidArgument,
                   {"kiln.batch_norm", "scale", "[2]", "[C] = [3]"});
  KILN_CHECK_ERROR(bn({4, 3, 5}, {{3}, {3}, {4}, {3}}), InvalidArgument,
                   {"kiln.batch_norm", "running_mean", "[C] = [3]"});
  KILN_CHECK_ERROR(bn({4, 3, 5}, {{3}, {3}, {3}, {3, 1}}), InvalidArgument,
                   {"kiln.batch_norm", "running_var"});
  KILN_CHECK_ERROR(bn({4}, {{4}, {4}, {4}, {4}}), InvalidArgument, {"kiln.batch_norm", "rank >= 2"});
  KILN_CHECK_ERROR(bn({4, 3}, {{3}, {3}, {3}, {3}}, 0.9, 0.0), InvalidArgument,
                   {"kiln.batch_norm", "epsilon"});
  KILN_CHECK_ERROR(bn({4, 3}, {{3}, {3}, {3}, {3}}, 1.5), InvalidArgument,
                   {"kiln.batch_norm", "momentum"});
  Operation* op = bn({-1, 3, 2, 2}, {{3}, {3}, {3}, {3}});
  CHECK(shaped_dims(op->result_type(0)) == std::vector<std::int64_t>{-1, 3, 2, 2});
  CHECK(shaped_dims(op->result_type(3)) == std::vector<std::int64_t>{3});
  // The running statistics' results alias their operands.
  CHECK(op->info().impl()->inplace_map.size() == 2);
}

TEST_CASE("batch_norm in NHWC takes its channels from the last axis, and names a rank-3 x or an unknown "
          "data_format",
          "[dialect][norm]") {
  Program p;
  auto bn = [&](std::vector<std::int64_t> xd, std::int64_t c, std::string format) {
    std::vector<kiln_test::TypeSpec> in{{F32, xd}};
    for (int i = 0; i < 4; ++i) in.push_back({F32, {c}});
    return build_op<BatchNormOp>(p, in, 0.9, 1e-5, false, format);
  };
  Operation* op = bn({2, 5, 5, 3}, 3, "NHWC");
  CHECK(shaped_dims(op->result_type(0)) == std::vector<std::int64_t>{2, 5, 5, 3});
  CHECK(shaped_dims(op->result_type(3)) == std::vector<std::int64_t>{3});
  KILN_CHECK_ERROR(bn({2, 3, 5, 5}, 3, "NHWC"), InvalidArgument, {"kiln.batch_norm", "scale", "[C] = [5]"});
  KILN_CHECK_ERROR(bn({2, 5, 3}, 3, "NHWC"), InvalidArgument, {"kiln.batch_norm", "NHWC needs a rank-4 x"});
  KILN_CHECK_ERROR(bn({2, 3, 5, 5}, 3, "CHWN"), InvalidArgument, {"kiln.batch_norm", "data_format 'CHWN'"});
}

TEST_CASE("batch_norm and fused_batch_norm take a bf16 or f16 x with f32 parameters: y in x's dtype, saved "
          "statistics f32, and their gradients dx in x's dtype, dscale and dbias f32",
          "[dialect][norm][half]") {
  Program p;
  const std::vector<std::int64_t> xd{2, 3, 4, 4}, cd{3};
  for (DataType dt : {DataType::BFloat16, DataType::Float16}) {
    INFO(to_string(dt));
    std::vector<kiln_test::TypeSpec> in{{dt, xd}, {F32, cd}, {F32, cd}, {F32, cd}, {F32, cd}};
    for (Operation* op : {build_op<BatchNormOp>(p, in, 0.9, 1e-5, false),
                          build_op<FusedBatchNormOp>(p, in, 0.9, 1e-5, false, std::string("NCHW"),
                                                     std::string("relu"))}) {
      CHECK(shaped_data_type(op->result_type(0)) == dt);
      for (std::uint32_t r = 1; r < 5; ++r) CHECK(shaped_data_type(op->result_type(r)) == F32);
    }
    Operation* g = build_op<GradOf<BatchNormOp>>(p, {{dt, xd}, {F32, cd}, {F32, cd}, {F32, cd}, {dt, xd}}, 0.9,
                                                  1e-5, false, std::string("NCHW"));
    CHECK(shaped_data_type(g->result_type(0)) == dt);
    CHECK(shaped_data_type(g->result_type(1)) == F32);
    CHECK(shaped_data_type(g->result_type(2)) == F32);
    Operation* fg = build_op<GradOf<FusedBatchNormOp>>(
        p, {{dt, xd}, {F32, cd}, {F32, cd}, {F32, cd}, {F32, cd}, {dt, xd}}, 0.9, 1e-5, false,
        std::string("NCHW"), std::string("relu6"));
    CHECK(shaped_data_type(fg->result_type(0)) == dt);
    CHECK(shaped_data_type(fg->result_type(1)) == F32);
  }
}

TEST_CASE("batch_norm and its gradients name the op and the operand for any other mix of dtypes",
          "[dialect][norm][half]") {
  Program p;
  const auto BF16 = DataType::BFloat16, F16 = DataType::Float16, F64 = DataType::Float64;
  const std::vector<std::int64_t> xd{2, 3, 4}, cd{3};
  auto bn = [&](DataType x, DataType s, DataType rm) {
    return build_op<BatchNormOp>(p, {{x, xd}, {s, cd}, {s, cd}, {rm, cd}, {rm, cd}}, 0.9, 1e-5, false);
  };
  KILN_CHECK_ERROR(bn(F16, BF16, F32), InvalidArgument, {"kiln.batch_norm", "scale (operand #1)", "bf16", "f32"});
  KILN_CHECK_ERROR(bn(BF16, BF16, BF16), InvalidArgument, {"kiln.batch_norm", "scale (operand #1)", "bf16"});
  KILN_CHECK_ERROR(bn(F32, F64, F64), InvalidArgument, {"kiln.batch_norm", "scale (operand #1)", "f64"});
  KILN_CHECK_ERROR(bn(BF16, F32, F16), InvalidArgument, {"kiln.batch_norm", "running_mean (operand #3)", "f16"});
  KILN_CHECK_ERROR(bn(F64, F32, F32), InvalidArgument, {"kiln.batch_norm", "scale (operand #1)", "f32"});
  KILN_CHECK_ERROR(build_op<FusedBatchNormOp>(p, {{F16, xd}, {F32, cd}, {F16, cd}, {F32, cd}, {F32, cd}}, 0.9, 1e-5,
                                              false, std::string("NCHW"), std::string("relu")),
                   InvalidArgument, {"kiln.fused_batch_norm", "bias (operand #2)", "f16"});
  auto grad = [&](DataType x, DataType s, DataType dy) {
    return build_op<GradOf<BatchNormOp>>(p, {{x, xd}, {s, cd}, {F32, cd}, {F32, cd}, {dy, xd}}, 0.9, 1e-5, false,
                                         std::string("NCHW"));
  };
  KILN_CHECK_ERROR(grad(BF16, F32, F32), InvalidArgument, {"kiln.batch_norm_grad", "#4"});
  KILN_CHECK_ERROR(grad(BF16, F32, F16), InvalidArgument, {"kiln.batch_norm_grad", "#4"});
  KILN_CHECK_ERROR(grad(F16, BF16, F16), InvalidArgument, {"kiln.batch_norm_grad", "scale (operand #1)"});
  KILN_CHECK_ERROR(build_op<GradOf<FusedBatchNormOp>>(p, {{BF16, xd}, {F32, cd}, {F32, cd}, {BF16, cd}, {F32, cd},
                                                          {BF16, xd}},
                                                      0.9, 1e-5, false, std::string("NCHW"), std::string("relu")),
                   InvalidArgument, {"kiln.fused_batch_norm_grad", "saved_mean (operand #3)", "bf16"});
}

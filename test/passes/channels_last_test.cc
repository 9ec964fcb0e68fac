// channels_last (kiln/passes/channels_last.h): which ops go NHWC, where the
// transposes are, and that the converted program computes what the NCHW
// one did.
#include <cmath>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "catch.hpp"
#include "test_util.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/executor.h"
#include "kiln/frontend/amp.h"
#include "kiln/frontend/frontend.h"
#include "kiln/frontend/optimizer.h"
#include "kiln/kernel/cpu_convolution.h"
#include "kiln/kernel/random.h"
#include "kiln/passes/channels_last.h"
#include "kiln/passes/fusion.h"
#include "kiln/passes/pass_manager.h"

using namespace kiln;
using kiln_test::count_top_ops;

namespace {

using V = std::vector<std::int64_t>;

std::size_t nhwc_convs(const Program& p) {
  std::size_t n = 0;
  for (Operation* op : p.block())
    n += op->isa<FusedConv2dOp>() && FusedConv2dOp(op).attrs().data_format == "NHWC";
  return n;
}

Tensor filled(const V& dims, float scale, int seed) { return kiln_test::pattern_f32(dims, scale, seed); }

// A small CNN as importers write it: a 3x3 conv (relu), a depthwise 3x3
// stride-2 conv (relu6), a 1x1 conv added back (a residual), relu, a
// squeeze-excite gate (global mean, 1x1 convs, sigmoid, mul), a concat
// with the gated value, and a global mean as the result.
struct SmallCnn {
  Program p;
  Value out, residual;
  FeedMap feeds;
  SmallCnn() {
    Builder b(p);
    auto data = [&](const char* name, V dims, float scale, int seed) {
      feeds.emplace(name, filled(dims, scale, seed));
      return b.create<DataOp>(name, dims).result();
    };
    Value x = data("x", {2, 4, 10, 10}, 0.25f, 1);
    auto conv = [&](Value in, const char* w, V wd, V s, V pad, std::int64_t g, const char* act, int seed) {
      Value bias = data((std::string(w) + "_b").c_str(), {wd[0]}, 0.1f, seed + 1);
      return b.create<FusedConv2dOp>(in, data(w, wd, 0.05f, seed), bias, s, pad, V{1, 1}, g, act).result();
    };
    Value y1 = conv(x, "w1", {8, 4, 3, 3}, {1, 1}, {1, 1}, 1, "relu", 2);
    Value y2 = conv(y1, "w2", {8, 1, 3, 3}, {2, 2}, {1, 1}, 8, "relu6", 4);
    Value y3 = conv(y2, "w3", {8, 8, 1, 1}, {1, 1}, {0, 0}, 1, "none", 6);
    residual = b.create<ReluOp>(b.create<AddOp>(y3, y2).result()).result();
    Value m = b.create<MeanOp>(residual, V{2, 3}, true).result();
    Value s = b.create<SigmoidOp>(conv(conv(m, "w4", {4, 8, 1, 1}, {1, 1}, {0, 0}, 1, "silu", 8), "w5",
                                       {8, 4, 1, 1}, {1, 1}, {0, 0}, 1, "none", 10))
                  .result();
    Value gated = b.create<MulOp>(residual, s).result();
    Value joined = b.create<ConcatOp>(std::vector<Value>{gated, residual}, 1).result();
    out = b.create<MeanOp>(joined, V{2, 3}, false).result();
  }
};

void check_close(const Tensor& got, const Tensor& want) {
  REQUIRE(got.dims() == want.dims());
  const auto g = got.to_vector<float>(), w = want.to_vector<float>();
  for (std::size_t i = 0; i < g.size(); ++i) CHECK(g[i] == Approx(w[i]).margin(1e-5).epsilon(1e-4));
}

}  // namespace

TEST_CASE("a CNN's convolutions and the ops between them go NHWC with one transpose in, and "
          "compute what the NCHW program does",
          "[passes][channels_last]") {
  SmallCnn plain, nhwc;
  PassContext ctx({nhwc.out});
  CHECK(convert_to_channels_last(nhwc.p.block(), {nhwc.out.impl()}, &ctx, true) == 5);
  nhwc.p.verify();
  CHECK(nhwc_convs(nhwc.p) == 5);
  // x goes NHWC once; the residual's add and relu, the means, the gate
  // and the concat read NHWC values: no transpose back.
  CHECK(count_top_ops(nhwc.p, "kiln.transpose") == 1);
  CHECK(shaped_dims(ctx.live_out()[0].type()) == std::vector<std::int64_t>{2, 16});
  Executor exe(Place::cpu(), {.passes = ""});
  check_close(exe.run(nhwc.p, nhwc.feeds, {ctx.live_out()[0]})[0],
              exe.run(plain.p, plain.feeds, {plain.out})[0]);
}

TEST_CASE("a convolution with a residual goes NHWC with its residual, and computes what the NCHW "
          "program does",
          "[passes][channels_last]") {
  SmallCnn plain, nhwc;
  CHECK(fuse_conv_residual(nhwc.p.block(), {nhwc.out.impl()}) == 1);  // w3's conv + y2, relu
  PassContext ctx({nhwc.out});
  CHECK(convert_to_channels_last(nhwc.p.block(), {nhwc.out.impl()}, &ctx, true) == 5);
  nhwc.p.verify();
  CHECK(nhwc_convs(nhwc.p) == 5);
  CHECK(count_top_ops(nhwc.p, "kiln.transpose") == 1);
  for (Operation* op : nhwc.p.block())
    if (op->isa<FusedConv2dOp>() && op->num_operands() == 4)
      CHECK(shaped_dims(op->operand_source(3).type()) == std::vector<std::int64_t>{2, 5, 5, 8});
  Executor exe(Place::cpu(), {.passes = ""});
  check_close(exe.run(nhwc.p, nhwc.feeds, {ctx.live_out()[0]})[0],
              exe.run(plain.p, plain.feeds, {plain.out})[0]);
}

TEST_CASE("a fetched value between NHWC ops comes back in NCHW through one transpose",
          "[passes][channels_last]") {
  SmallCnn plain, nhwc;
  PassContext ctx({nhwc.out, nhwc.residual});
  convert_to_channels_last(nhwc.p.block(), {nhwc.out.impl(), nhwc.residual.impl()}, &ctx, true);
  nhwc.p.verify();
  CHECK(count_top_ops(nhwc.p, "kiln.transpose") == 2);
  CHECK(shaped_dims(ctx.live_out()[1].type()) == std::vector<std::int64_t>{2, 8, 5, 5});
  Executor exe(Place::cpu(), {.passes = ""});
  const auto got = exe.run(nhwc.p, nhwc.feeds, {ctx.live_out()[0], ctx.live_out()[1]});
  const auto want = exe.run(plain.p, plain.feeds, {plain.out, plain.residual});
  check_close(got[0], want[0]);
  check_close(got[1], want[1]);
}

TEST_CASE("a transpose to NHWC of a converted value disappears into it, and one back to NCHW "
          "before a convolution is read through",
          "[passes][channels_last]") {
  // ConvNeXt's block: conv, permute to NHWC, an op there, permute back, conv.
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", V{1, 4, 6, 6}).result();
  Value w = b.create<DataOp>("w", V{4, 1, 3, 3}).result(), bias = b.create<DataOp>("b", V{4}).result();
  Value y = b.create<FusedConv2dOp>(x, w, bias, V{1, 1}, V{1, 1}, V{1, 1}, 4, "none").result();
  Value t = b.create<TransposeOp>(y, V{0, 2, 3, 1}).result();
  Value g = b.create<GeluOp>(t, false).result();
  Value back = b.create<TransposeOp>(g, V{0, 3, 1, 2}).result();
  Value out = b.create<FusedConv2dOp>(back, w, bias, V{1, 1}, V{1, 1}, V{1, 1}, 4, "none").result();
  const FeedMap feeds{{"x", filled({1, 4, 6, 6}, 0.3f, 1)}, {"w", filled({4, 1, 3, 3}, 0.1f, 2)},
                      {"b", filled({4}, 0.2f, 3)}};
  Executor exe(Place::cpu(), {.passes = ""});
  const Tensor want = exe.run(p, feeds, {out})[0];
  PassContext ctx({out});
  CHECK(convert_to_channels_last(p.block(), {out.impl()}, &ctx, true) == 2);
  p.verify();
  // In: x to NHWC; out: the result back to NCHW (fetched). The model's own
  // two transposes are gone.
  CHECK(count_top_ops(p, "kiln.transpose") == 2);
  check_close(exe.run(p, feeds, {ctx.live_out()[0]})[0], want);
}

TEST_CASE("a max pool between convolutions runs NHWC too: one transpose in, one out",
          "[passes][channels_last]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", V{2, 4, 11, 11}).result();
  Value w = b.create<DataOp>("w", V{4, 4, 3, 3}).result(), bias = b.create<DataOp>("b", V{4}).result();
  Value y = b.create<FusedConv2dOp>(x, w, bias, V{1, 1}, V{1, 1}, V{1, 1}, 1, "relu").result();
  Value pooled = b.create<MaxPool2dOp>(y, V{3, 3}, V{2, 2}, V{1, 1}).result();
  Value out = b.create<FusedConv2dOp>(pooled, w, bias, V{1, 1}, V{1, 1}, V{1, 1}, 1, "none").result();
  const FeedMap feeds{{"x", filled({2, 4, 11, 11}, 0.3f, 1)}, {"w", filled({4, 4, 3, 3}, 0.1f, 2)},
                      {"b", filled({4}, 0.2f, 3)}};
  Executor exe(Place::cpu(), {.passes = ""});
  const Tensor want = exe.run(p, feeds, {out})[0];
  PassContext ctx({out});
  CHECK(convert_to_channels_last(p.block(), {out.impl()}, &ctx, true) == 2);
  p.verify();
  CHECK(count_top_ops(p, "kiln.transpose") == 2);
  for (Operation* op : p.block())
    if (op->isa<MaxPool2dOp>()) CHECK(MaxPool2dOp(op).attrs().data_format == "NHWC");
  check_close(exe.run(p, feeds, {ctx.live_out()[0]})[0], want);
}

TEST_CASE("ShuffleNet's channel shuffle and channel split stay NHWC between convolutions; "
          "one transpose in, one out",
          "[passes][channels_last]") {
  // A ShuffleNet v2 unit as PyTorch exports it, with a run-time batch:
  // concat(branch, conv(x)) → reshape [0, 2, 4, H, W] → transpose
  // [0, 2, 1, 3, 4] → reshape [0, -1, H, W] → the two channel halves, the
  // second through a depthwise conv, concatenated again.
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", V{-1, 4, 6, 6}).result();
  Value w = b.create<DataOp>("w", V{4, 4, 1, 1}).result(), dw = b.create<DataOp>("dw", V{4, 1, 3, 3}).result();
  Value bias = b.create<DataOp>("b", V{4}).result();
  Value a = b.create<FusedConv2dOp>(x, dw, bias, V{1, 1}, V{1, 1}, V{1, 1}, 4, "none").result();
  Value c = b.create<FusedConv2dOp>(a, w, bias, V{1, 1}, V{0, 0}, V{1, 1}, 1, "relu").result();
  Value joined = b.create<ConcatOp>(std::vector<Value>{a, c}, 1).result();
  Value split = b.create<ReshapeOp>(joined, V{0, 2, 4, 6, 6}).result();
  Value swapped = b.create<TransposeOp>(split, V{0, 2, 1, 3, 4}).result();
  Value shuffled = b.create<ReshapeOp>(swapped, V{0, -1, 6, 6}).result();
  REQUIRE(shaped_dims(shuffled.type()) == V{-1, 8, 6, 6});
  Value left = b.create<SliceOp>(shuffled, V{1}, V{0}, V{4}).result();
  Value right = b.create<SliceOp>(shuffled, V{1}, V{4}, V{8}).result();
  Value r = b.create<FusedConv2dOp>(right, dw, bias, V{1, 1}, V{1, 1}, V{1, 1}, 4, "relu").result();
  Value out = b.create<ConcatOp>(std::vector<Value>{left, r}, 1).result();
  const FeedMap feeds{{"x", filled({3, 4, 6, 6}, 0.3f, 1)}, {"w", filled({4, 4, 1, 1}, 0.1f, 2)},
                      {"dw", filled({4, 1, 3, 3}, 0.1f, 4)}, {"b", filled({4}, 0.2f, 3)}};
  Executor exe(Place::cpu(), {.passes = ""});
  const Tensor want = exe.run(p, feeds, {out})[0];
  PassContext ctx({out});
  CHECK(convert_to_channels_last(p.block(), {out.impl()}, &ctx, true) == 3);
  p.verify();
  CHECK(count_top_ops(p, "kiln.transpose") == 3);  // x in, the shuffle's own, the result out
  for (Operation* op : p.block()) {
    if (op->isa<SliceOp>()) CHECK(SliceOp(op).attrs().axes == V{3});
    if (op->isa<TransposeOp>() && shaped_dims(op->result_type(0)).size() == 5)
      CHECK(TransposeOp(op).attrs().perm == V{0, 1, 2, 4, 3});
  }
  check_close(exe.run(p, feeds, {ctx.live_out()[0]})[0], want);
}

TEST_CASE("ConvNeXt's permute back to NCHW, its [C, 1, 1] layer scale and its residual add stay NHWC; "
          "one transpose in, none between the blocks",
          "[passes][channels_last]") {
  // x → depthwise conv → permute to NHWC → relu (the block's MLP) →
  // permute back → · gamma [C, 1, 1] → + x → conv → mean over H, W.
  Program p;
  Builder b(p);
  FeedMap feeds;
  auto data = [&](const char* name, V dims, float scale, int seed) {
    feeds.emplace(name, filled(dims, scale, seed));
    return b.create<DataOp>(name, dims).result();
  };
  Value x = data("x", {2, 8, 6, 6}, 0.25f, 1);
  Value dw = b.create<FusedConv2dOp>(x, data("w1", {8, 1, 3, 3}, 0.05f, 2), data("b1", {8}, 0.1f, 3), V{1, 1},
                                     V{1, 1}, V{1, 1}, 8, "none")
                 .result();
  Value mlp = b.create<ReluOp>(b.create<TransposeOp>(dw, V{0, 2, 3, 1}).result()).result();
  Value scaled = b.create<MulOp>(b.create<TransposeOp>(mlp, V{0, 3, 1, 2}).result(), data("gamma", {8, 1, 1}, 0.2f, 4))
                     .result();
  Value y = b.create<AddOp>(scaled, x).result();
  Value z = b.create<FusedConv2dOp>(y, data("w2", {8, 8, 3, 3}, 0.05f, 5), data("b2", {8}, 0.1f, 6), V{1, 1},
                                    V{1, 1}, V{1, 1}, 1, "relu")
                .result();
  Value out = b.create<MeanOp>(z, V{2, 3}, false).result();
  Executor exe(Place::cpu(), {.passes = ""});
  const Tensor want = exe.run(p, feeds, {out})[0];
  CHECK(convert_to_channels_last(p.block(), {out.impl()}, nullptr, true) == 2);
  p.verify();
  CHECK(count_top_ops(p, "kiln.transpose") == 1);
  for (Operation* op : p.block())
    if (op->isa<MulOp>() || op->isa<AddOp>()) CHECK(shaped_dims(op->result_type(0)) == V{2, 6, 6, 8});
  check_close(exe.run(p, feeds, {out})[0], want);
}

TEST_CASE("the fuse pass marks a training program's fused convolutions weights_trained, an inference "
          "program's not",
          "[passes][channels_last]") {
  for (const bool train : {true, false}) {
    INFO("training " << train);
    Program main, startup;
    Value loss;
    {
      UniqueNameGuard names;
      ProgramGuard guard(main, startup);
      Value y = nn::functional::relu(nn::Conv2D(3, 16, 3, 1, 1)(data("x", {2, 3, 8, 8})));
      loss = main_builder().create<MeanOp>(y).result();
      if (train) optim::Momentum(0.1, 0.9).minimize(loss);
    }
    PassContext ctx({loss});
    PassManager::parse("fuse").run(main, ctx);
    std::size_t fused = 0;
    for (Operation* op : main.block())
      if (op->isa<FusedConv2dOp>()) {
        ++fused;
        CHECK(FusedConv2dOp(op).attrs().weights_trained == train);
      }
    CHECK(fused == 1);
  }
}

TEST_CASE("without oneDNN's preference for NHWC nothing changes unless forced", "[passes][channels_last]") {
  SmallCnn cnn;
  const std::size_t made = convert_to_channels_last(cnn.p.block(), {cnn.out.impl()}, nullptr);
  CHECK(made == (cpu_convolutions_prefer_channels_last() ? 5u : 0u));
}

namespace {

// A small ResNet's training program, as the frontend builds it: a 3x3
// conv + batch norm + relu stem, a 3x3 stride-2 max pool, a basic block,
// a stride-2 basic block with a 1x1 conv on its skip path, a global average
// pool, a linear classifier, cross-entropy and momentum SGD.
// amp: mixed precision O1 in bf16 with the convolutions on its allow list.
struct TinyResNet {
  Program main, startup;
  Value loss;
  FeedMap feeds;
  explicit TinyResNet(bool amp = false) {
    UniqueNameGuard names;
    {
      ProgramGuard guard(main, startup);
      auto conv_bn = [](Value v, std::int64_t in, std::int64_t out, std::int64_t k, std::int64_t stride) {
        nn::Conv2D conv(in, out, k, stride, k / 2, 1, 1, /*bias=*/false);
        nn::BatchNorm2D bn(out);
        return bn(conv(v));
      };
      auto add = [](Value a, Value b) { return main_builder().create<AddOp>(a, b).result(); };
      using nn::functional::relu;
      Value x = data("x", {4, 3, 12, 12});
      Value label = data("label", {4}, DataType::Int64);
      Value y = nn::functional::max_pool2d(relu(conv_bn(x, 3, 8, 3, 1)), {3, 3}, {2, 2}, {1, 1});
      y = relu(add(conv_bn(relu(conv_bn(y, 8, 8, 3, 1)), 8, 8, 3, 1), y));
      y = relu(add(conv_bn(relu(conv_bn(y, 8, 16, 3, 2)), 16, 16, 3, 1), conv_bn(y, 8, 16, 1, 2)));
      Value features = nn::functional::flatten(nn::functional::adaptive_avg_pool2d(y, {1, 1}));
      loss = nn::functional::cross_entropy(nn::Linear(16, 5)(features), label);
      optim::Momentum opt(0.05, 0.9);
      amp::Options options;
      options.dtype = DataType::BFloat16;
      options.allow = {"kiln.matmul", "kiln.conv2d"};
      if (amp) amp::decorate(opt, options).minimize(loss);
      else opt.minimize(loss);
    }
    feeds = {{"x", filled({4, 3, 12, 12}, 0.1f, 3)},
             {"label", Tensor::from_vector<std::int64_t>({4}, std::vector<std::int64_t>{0, 3, 1, 4})}};
  }
};

// The ops named `name` whose data_format is NHWC, and all of them.
template <typename OpT>
std::pair<std::size_t, std::size_t> nhwc_of_all(const Program& p) {
  std::size_t nhwc = 0, all = 0;
  for (Operation* op : p.block())
    if (op->isa<OpT>()) ++all, nhwc += OpT(op).attrs().data_format == "NHWC";
  return {nhwc, all};
}

// Each (converted, all) pair counts some ops, all of them NHWC.
void check_all_nhwc(std::initializer_list<std::pair<std::size_t, std::size_t>> counts) {
  for (auto [converted, all] : counts) {
    CHECK(all > 0);
    CHECK(converted == all);
  }
}

// plain's and nhwc's losses, each run from seed 5 on its own executor, over
// `steps` steps: within `epsilon` of each other.
void check_same_losses(TinyResNet& plain, TinyResNet& nhwc, Executor& a, Executor& b, int steps, double epsilon) {
  set_random_seed(5);
  a.run(plain.startup);
  set_random_seed(5);
  b.run(nhwc.startup);
  for (int step = 0; step < steps; ++step) {
    const float la = a.run(plain.main, plain.feeds, {plain.loss})[0].to_vector<float>()[0];
    const float lb = b.run(nhwc.main, nhwc.feeds, {nhwc.loss})[0].to_vector<float>()[0];
    INFO("step " << step);
    CHECK(lb == Approx(la).epsilon(epsilon));
  }
}

}  // namespace

TEST_CASE("a training program's convolutions, batch norms, max pool and their gradients go NHWC between "
          "one transpose in and the classifier, and it trains as the NCHW program does",
          "[passes][channels_last]") {
  TinyResNet plain, nhwc;
  CHECK(convert_to_channels_last(nhwc.main.block(), {nhwc.loss.impl()}, nullptr, true) == 12);  // 6 convs, 6 grads
  nhwc.main.verify();
  check_all_nhwc({nhwc_of_all<Conv2dOp>(nhwc.main), nhwc_of_all<GradOf<Conv2dOp>>(nhwc.main),
                  nhwc_of_all<BatchNormOp>(nhwc.main), nhwc_of_all<GradOf<BatchNormOp>>(nhwc.main),
                  nhwc_of_all<MaxPool2dOp>(nhwc.main), nhwc_of_all<GradOf<MaxPool2dOp>>(nhwc.main)});
  // x in; the last block's output back for the average pool, and its gradient in.
  CHECK(count_top_ops(nhwc.main, "kiln.transpose") == 3);

  Executor a(Place::cpu(), {.passes = ""}), b(Place::cpu(), {.passes = ""});
  check_same_losses(plain, nhwc, a, b, 6, 1e-4);  // the convolutions' and norms' summation orders differ
  for (const auto& [name, p] : plain.main.parameters()) {
    INFO(name);
    check_close(b.scope().find_var(name)->get<Tensor>(), a.scope().find_var(name)->get<Tensor>());
  }
}

TEST_CASE("a mixed-precision bf16 training program goes NHWC with its casts where the CPU convolves bf16 "
          "natively, and trains as its NCHW program does",
          "[passes][channels_last][amp]") {
  TinyResNet plain(/*amp=*/true), nhwc(/*amp=*/true);
  const bool native = cpu_convolutions_compute_bf16();
  CHECK(convert_to_channels_last(nhwc.main.block(), {nhwc.loss.impl()}, nullptr, true) == (native ? 12u : 0u));
  nhwc.main.verify();
  if (!native) return;  // bf16 convolutions through f32 kernels: NCHW stays
  check_all_nhwc({nhwc_of_all<Conv2dOp>(nhwc.main), nhwc_of_all<GradOf<Conv2dOp>>(nhwc.main),
                  nhwc_of_all<BatchNormOp>(nhwc.main), nhwc_of_all<GradOf<BatchNormOp>>(nhwc.main)});
  // The casts between the bf16 convolutions and the f32 batch norms need no transposes.
  CHECK(count_top_ops(nhwc.main, "kiln.transpose") == 3);
  Executor a(Place::cpu(), {.passes = ""}), b(Place::cpu(), {.passes = ""});
  check_same_losses(plain, nhwc, a, b, 4, 2e-2);  // bf16 results, rounded after sums in other orders
}

TEST_CASE("the fuse pass gives an imported-style CNN NHWC convolutions where the CPU prefers them, "
          "with the same result",
          "[passes][channels_last]") {
  SmallCnn plain, fused;
  Executor none(Place::cpu(), {.passes = ""});
  const Tensor want = none.run(plain.p, plain.feeds, {plain.out})[0];
  PassContext ctx({fused.out});
  PassManager::parse("fuse").run(fused.p, ctx);
  fused.p.verify();
  CHECK(nhwc_convs(fused.p) == (cpu_convolutions_prefer_channels_last() ? 5u : 0u));
  check_close(none.run(fused.p, fused.feeds, {ctx.live_out()[0]})[0], want);
  Executor defaults(Place::cpu());  // the default pipeline, as a user runs it
  check_close(defaults.run(plain.p, plain.feeds, {plain.out})[0], want);
}

TEST_CASE("a convolution whose transposes in and out cost what its reorders would stays NCHW, as "
          "does a 1x1 convolution (one GEMM in NCHW)",
          "[passes][channels_last]") {
  for (std::int64_t k : {1, 3}) {
    INFO("kernel " << k);
    Program p;
    Builder b(p);
    Value x = b.create<DataOp>("x", V{1, 4, 6, 6}).result();
    Value w = b.create<DataOp>("w", V{8, 4, k, k}).result(), bias = b.create<DataOp>("b", V{8}).result();
    Value y = b.create<FusedConv2dOp>(x, w, bias, V{1, 1}, V{k / 2, k / 2}, V{1, 1}, 1, "relu").result();
    Value out = b.create<ReshapeOp>(y, V{1, -1}).result();
    PassContext ctx({out});
    CHECK(convert_to_channels_last(p.block(), {out.impl()}, &ctx, true) == 0);
    CHECK(count_top_ops(p, "kiln.transpose") == 0);
  }
}

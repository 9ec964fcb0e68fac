// fold_attention_transposes (kiln/passes/fold_attention_transposes.h): a
// transformer layer's head transposes leave its training program (forward
// and gradient), training gives the same numbers bit for bit, and what the
// rewrite must leave alone (a value kept, a source written in place, an
// operand that is no transpose) stays.
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "catch.hpp"
#include "kiln/dialect/attention_ops.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/executor.h"
#include "kiln/exec/interpreter_core.h"
#include "kiln/frontend/control_flow.h"
#include "kiln/frontend/frontend.h"
#include "kiln/frontend/optimizer.h"
#include "kiln/ir/parser.h"
#include "kiln/kernel/random.h"
#include "kiln/passes/fold_attention_transposes.h"
#include "kiln/runtime/cuda_context.h"
#include "passes_test_util.h"

using namespace kiln;
using kiln_passes_test::count_ops;
using kiln_passes_test::same_bits;

namespace {

// Transposes by [0, 2, 1, 3] in the program.
std::size_t head_swaps(const Program& p) {
  std::size_t n = 0;
  for (Operation* op : p.block())
    if (auto t = op->dyn_cast<TransposeOp>(); t && t.attrs().perm == std::vector<std::int64_t>{0, 2, 1, 3})
      ++n;
  return n;
}

// The layouts of the program's attention ops (forward and gradient).
std::vector<std::string> layouts(const Program& p) {
  std::vector<std::string> out;
  for (Operation* op : p.block())
    if (op->isa<ScaledDotProductAttentionOp>() || op->isa<GradOf<ScaledDotProductAttentionOp>>())
      out.push_back(from_attributes<ScaledDotProductAttentionOp::Attributes>(op->attributes(), op->name())
                        .layout);
  return out;
}

// A causal transformer encoder layer (4 heads of 8) over [2, 6, 32]
// inputs with a mean loss, trained by Adam: the attention forward and its
// gradient, each between head transposes.
struct Model {
  Program main, startup;
  Value loss;
  FeedMap feeds;
  // `heads` heads of embed / heads dims each.
  explicit Model(std::int64_t heads = 4, std::int64_t embed = 32, double dropout = 0.0) {
    UniqueNameGuard names;
    {
      ProgramGuard guard(main, startup);
      Value x = data("x", {2, 6, embed});
      nn::TransformerEncoderLayer layer(embed, heads, 64, dropout, "gelu");
      Value y = layer(x, /*causal=*/true);
      loss = main_builder().create<MeanOp>(main_builder().create<MulOp>(y, y).result()).result();
      optim::Adam(1e-2).minimize(loss);
    }
    std::mt19937 rng(3);
    std::normal_distribution<float> normal(0.f, 1.f);
    std::vector<float> xs(static_cast<std::size_t>(2 * 6 * embed));
    for (float& v : xs) v = normal(rng);
    feeds = {{"x", Tensor::from_vector<float>({2, 6, embed}, xs)}};
  }
};

}  // namespace

TEST_CASE("a transformer layer's head transposes go into its attention ops' layout",
          "[passes][fold_attention_transposes]") {
  Model m;
  REQUIRE(head_swaps(m.main) == 8);  // q, k, v, out forward; dout, dq, dk, dv backward
  REQUIRE(layouts(m.main) == std::vector<std::string>{"BHLD", "BHLD"});
  CHECK(fold_attention_transposes(m.main) == 2);
  m.main.verify();
  CHECK(head_swaps(m.main) == 0);
  CHECK(layouts(m.main) == std::vector<std::string>{"BLHD", "BLHD"});
  // The text form carries the layout and parses back to the same program.
  const std::string text = m.main.to_string();
  CHECK(text.find("layout = \"BLHD\"") != std::string::npos);
  CHECK(parse_program(text).to_string() == text);
}

TEST_CASE("training a transformer layer with its head transposes folded gives the same numbers "
          "bit for bit",
          "[passes][fold_attention_transposes]") {
  Model plain, folded;
  Executor a(Place::cpu(), {.passes = ""});
  Executor b(Place::cpu(), {.passes = "fold_attention_transposes"});
  set_random_seed(7);
  a.run(plain.startup);
  set_random_seed(7);
  b.run(folded.startup);
  for (int step = 0; step < 4; ++step) {
    INFO("step " << step);
    const Tensor la = a.run(plain.main, plain.feeds, {plain.loss})[0];
    const Tensor lb = b.run(folded.main, folded.feeds, {folded.loss})[0];
    REQUIRE(same_bits(la, lb));
  }
  // Eight transposes fewer ran.
  CHECK(b.last_core()->num_instructions() + 8 == a.last_core()->num_instructions());
  for (const auto& [name, p] : plain.main.parameters()) {
    INFO(name);
    CHECK(same_bits(a.scope().find_var(name)->get<Tensor>(), b.scope().find_var(name)->get<Tensor>()));
  }
}

TEST_CASE("the default pipeline folds the head transposes of a CPU program",
          "[passes][fold_attention_transposes]") {
  Model m;
  std::vector<Value> live{m.loss};
  kiln_passes_test::run_pipeline(m.main, "fuse", live);
  CHECK(head_swaps(m.main) == 0);
  CHECK(layouts(m.main) == std::vector<std::string>{"BLHD", "BLHD"});
}

TEST_CASE("attention whose operands are not all head transposes, or whose result is kept, "
          "keeps its layout",
          "[passes][fold_attention_transposes]") {
  Program p, startup;
  Value swapped_out, plain_out, q4;
  {
    ProgramGuard guard(p, startup);
    Builder b = main_builder();
    Value x = data("x", {2, 5, 3, 4});
    const std::vector<std::int64_t> swap{0, 2, 1, 3};
    Value q = b.create<TransposeOp>(x, swap).result();
    // k is no transpose: nothing to fold.
    q4 = data("k", {2, 3, 5, 4});
    plain_out = b.create<ScaledDotProductAttentionOp>(q, q4, q4, false).result(0);
    // All three swapped, but out is kept (live-out): left as it is.
    swapped_out = b.create<ScaledDotProductAttentionOp>(q, q, q, true).result(0);
  }
  ValueSet keep{swapped_out.impl()};
  CHECK(fold_attention_transposes(p, keep) == 0);
  CHECK(count_ops(p, "kiln.transpose") == 1);
  CHECK(layouts(p) == std::vector<std::string>{"BHLD", "BHLD"});
}

TEST_CASE("attention reading a head transpose of a value written in place keeps its layout",
          "[passes][fold_attention_transposes]") {
  Program p, startup;
  {
    ProgramGuard guard(p, startup);
    Builder b = main_builder();
    Value x = data("x", {2, 5, 3, 4});
    Value q = b.create<TransposeOp>(x, std::vector<std::int64_t>{0, 2, 1, 3}).result();
    (void)b.create<Relu_Op>(x);  // x changes after the transpose read it
    Value out = b.create<ScaledDotProductAttentionOp>(q, q, q, false).result(0);
    (void)b.create<TransposeOp>(out, std::vector<std::int64_t>{0, 2, 1, 3});
  }
  CHECK(fold_attention_transposes(p) == 0);
  CHECK(head_swaps(p) == 2);
}

TEST_CASE("a reader of attention's out that is no transpose reads a transpose of the new out",
          "[passes][fold_attention_transposes]") {
  Program p, startup;
  Value y, z;
  {
    ProgramGuard guard(p, startup);
    Builder b = main_builder();
    Value x = data("x", {2, 5, 3, 4});
    Value q = b.create<TransposeOp>(x, std::vector<std::int64_t>{0, 2, 1, 3}).result();
    Value out = b.create<ScaledDotProductAttentionOp>(q, q, q, true).result(0);
    y = b.create<TransposeOp>(out, std::vector<std::int64_t>{0, 2, 1, 3}).result();
    z = b.create<ScaleOp>(out, 2.0).result();  // reads out in [B, H, L, D]
  }
  Executor plain(Place::cpu(), {.passes = ""});
  std::vector<float> xs(2 * 5 * 3 * 4);
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>((i * 37) % 23) / 11.f - 1.f;
  const FeedMap feed{{"x", Tensor::from_vector<float>({2, 5, 3, 4}, xs)}};
  const auto want = plain.run(p, feed, {y, z});
  PassContext ctx({y, z});
  PassManager::parse("fold_attention_transposes").run(p, ctx);
  p.verify();
  CHECK(layouts(p) == std::vector<std::string>{"BLHD"});
  CHECK(head_swaps(p) == 1);  // the swap back for the scale
  Executor folded(Place::cpu(), {.passes = ""});
  const auto got = folded.run(p, feed, {ctx.live_out()[0], ctx.live_out()[1]});
  CHECK(same_bits(got[0], want[0]));
  CHECK(same_bits(got[1], want[1]));
}

TEST_CASE("attention whose out is written in place before its gradient reads it keeps its "
          "layout, and the gradient sees the write",
          "[passes][fold_attention_transposes]") {
  Program p, startup;
  Value dq;
  {
    ProgramGuard guard(p, startup);
    Builder b = main_builder();
    Value x = data("x", {2, 5, 3, 4});
    Value dout = data("dout", {2, 3, 5, 4});
    Value q = b.create<TransposeOp>(x, std::vector<std::int64_t>{0, 2, 1, 3}).result();
    auto att = b.create<ScaledDotProductAttentionOp>(q, q, q, true);
    Value out = att.result(0), lse = att.result(1);
    (void)b.create<Relu_Op>(out);  // out changes before the gradient reads it
    auto g = b.create<GradOf<ScaledDotProductAttentionOp>>(att.operation(), q, q, q, out, lse, dout);
    dq = b.create<TransposeOp>(g.operation()->result(0), std::vector<std::int64_t>{0, 2, 1, 3})
             .result();
  }
  std::vector<float> xs(2 * 5 * 3 * 4), ds(xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>((i * 37) % 23) / 11.f - 1.f;
  for (std::size_t i = 0; i < ds.size(); ++i) ds[i] = static_cast<float>((i * 17) % 13) / 7.f - 1.f;
  const FeedMap feed{{"x", Tensor::from_vector<float>({2, 5, 3, 4}, xs)},
                     {"dout", Tensor::from_vector<float>({2, 3, 5, 4}, ds)}};
  Executor plain(Place::cpu(), {.passes = ""});
  const auto want = plain.run(p, feed, {dq});
  // Through a pass manager: the context's alias information is cached.
  PassContext ctx({dq});
  PassManager::parse("fold_attention_transposes").run(p, ctx);
  p.verify();
  CHECK(layouts(p)[0] == "BHLD");  // the forward op's out is a buffer
  Executor folded(Place::cpu(), {.passes = ""});
  const auto got = folded.run(p, feed, {ctx.live_out()[0]});
  CHECK(same_bits(got[0], want[0]));
}

TEST_CASE("attention in a branch folds its head transposes there",
          "[passes][fold_attention_transposes]") {
  Program p, startup;
  Value result;
  {
    ProgramGuard guard(p, startup);
    Value x = data("x", {2, 5, 3, 4});
    Value flag = data("flag", {1}, DataType::Bool);
    // if (flag) { transpose → attention → transpose } else { x }
    auto branches = cond(flag, [&] {
      Builder b = main_builder();
      Value q = b.create<TransposeOp>(x, std::vector<std::int64_t>{0, 2, 1, 3}).result();
      Value o = b.create<ScaledDotProductAttentionOp>(q, q, q, false).result(0);
      return std::vector<Value>{b.create<TransposeOp>(o, std::vector<std::int64_t>{0, 2, 1, 3}).result()};
    }, [&] { return std::vector<Value>{x}; });
    result = branches[0];
  }
  std::vector<float> xs(2 * 5 * 3 * 4);
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>((i * 29) % 19) / 9.f - 1.f;
  const FeedMap feed{{"x", Tensor::from_vector<float>({2, 5, 3, 4}, xs)},
                     {"flag", Tensor::from_vector<bool>({1}, {true})}};
  Executor plain(Place::cpu(), {.passes = ""});
  const auto want = plain.run(p, feed, {result});
  PassContext ctx({result});
  PassManager::parse("fold_attention_transposes").run(p, ctx);
  p.verify();
  CHECK(count_ops(p, "kiln.transpose") == 0);
  Executor folded(Place::cpu(), {.passes = ""});
  CHECK(same_bits(folded.run(p, feed, {ctx.live_out()[0]})[0], want[0]));
}

TEST_CASE("for a CUDA target the pass folds the attention its flash kernels read in place and leaves head dims "
          "above 128 as they are",
          "[passes][fold_attention_transposes]") {
  Model m;
  PassContext ctx({m.loss});
  ctx.target_place = Place::cuda(0);
  PassManager::parse("fold_attention_transposes").run(m.main, ctx);
  CHECK(head_swaps(m.main) == 0);
  CHECK(layouts(m.main) == std::vector<std::string>{"BLHD", "BLHD"});
  Model wide(/*heads=*/2, /*embed=*/272);  // head dim 136: the cuBLAS path's
  PassContext wide_ctx({wide.loss});
  wide_ctx.target_place = Place::cuda(0);
  PassManager::parse("fold_attention_transposes").run(wide.main, wide_ctx);
  CHECK(head_swaps(wide.main) == 8);
}

TEST_CASE("a transformer layer trained on CUDA with its head transposes folded tracks the CPU's training",
          "[passes][fold_attention_transposes][cuda]") {
  if (cuda_device_count() == 0) return;
  Model cpu_model, gpu_model;
  Executor cpu(Place::cpu(), {.passes = ""}), gpu(Place::cuda(0), {.passes = "fold_attention_transposes"});
  set_random_seed(5);
  cpu.run(cpu_model.startup);
  set_random_seed(5);
  gpu.run(gpu_model.startup);
  for (int step = 0; step < 5; ++step) {
    const float a = cpu.run(cpu_model.main, cpu_model.feeds, {cpu_model.loss})[0].to_vector<float>()[0];
    const float b = gpu.run(gpu_model.main, gpu_model.feeds, {gpu_model.loss})[0].to_vector<float>()[0];
    INFO("step " << step);
    CHECK(std::abs(a - b) <= 1e-4f * std::abs(a) + 1e-6f);
  }
}

namespace {

// Three training steps of `plain` and `folded` (programs over x [3, 5, 16]
// and key_lengths n, from one seed) give bit-identical losses.
template <typename M>
void check_trains_the_same(M& plain, M& folded, const Tensor& lengths) {
  std::vector<float> xs(3 * 5 * 16);
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>((i * 37) % 23) / 11.f - 1.f;
  const FeedMap feeds{{"x", Tensor::from_vector<float>({3, 5, 16}, xs)}, {"n", lengths}};
  Executor a(Place::cpu(), {.passes = ""}), b(Place::cpu(), {.passes = ""});
  set_random_seed(7);
  a.run(plain.startup);
  set_random_seed(7);
  b.run(folded.startup);
  for (int step = 0; step < 3; ++step) {
    INFO("step " << step);
    REQUIRE(same_bits(a.run(plain.main, feeds, {plain.loss})[0], b.run(folded.main, feeds, {folded.loss})[0]));
  }
}

}  // namespace

TEST_CASE("attention with key_lengths folds its head transposes, keeps its lengths and trains the "
          "same bit for bit",
          "[passes][fold_attention_transposes]") {
  struct Masked {
    Program main, startup;
    Value loss;
    Masked() {
      UniqueNameGuard names;
      ProgramGuard guard(main, startup);
      nn::MultiHeadAttention mha(16, 2);
      Value x = data("x", {3, 5, 16});
      Value y = mha(x, x, x, true, data("n", {3}, DataType::Int32));
      loss = main_builder().create<MeanOp>(main_builder().create<MulOp>(y, y).result()).result();
      optim::Adam(1e-2).minimize(loss);
    }
  } plain, folded;
  CHECK(fold_attention_transposes(folded.main) == 2);
  folded.main.verify();
  CHECK(layouts(folded.main) == std::vector<std::string>{"BLHD", "BLHD"});
  for (Operation* op : folded.main.block()) {
    if (op->isa<ScaledDotProductAttentionOp>()) CHECK(op->num_operands() == 4);
    if (op->isa<GradOf<ScaledDotProductAttentionOp>>()) CHECK(op->num_operands() == 7);
  }
  check_trains_the_same(plain, folded, Tensor::from_vector<std::int32_t>({3}, {5, 2, 0}));
}

TEST_CASE("grouped-query attention folds its head transposes and trains the same bit for bit",
          "[passes][fold_attention_transposes][gqa]") {
  // q: 4 heads of 4; k and v: 2 heads of 4 (two query heads each).
  struct Grouped {
    Program main, startup;
    Value loss;
    Grouped() {
      UniqueNameGuard names;
      ProgramGuard guard(main, startup);
      Builder b = main_builder();
      Value x = data("x", {3, 5, 16});
      auto heads = [&](Value w, std::int64_t h) {
        Value r = b.create<ReshapeOp>(nn::functional::linear(x, w), std::vector<std::int64_t>{0, 0, h, 4}).result();
        return b.create<TransposeOp>(r, std::vector<std::int64_t>{0, 2, 1, 3}).result();
      };
      auto weight = [](const char* name, std::int64_t out) {
        return create_parameter(name, {16, out}, DataType::Float32, init::Uniform(-0.5, 0.5));
      };
      Value q = heads(weight("wq", 16), 4), k = heads(weight("wk", 8), 2), v = heads(weight("wv", 8), 2);
      Value o = nn::functional::scaled_dot_product_attention(q, k, v, true, 0.0, data("n", {3}, DataType::Int32),
                                                             Value(), /*enable_gqa=*/true);
      o = b.create<TransposeOp>(o, std::vector<std::int64_t>{0, 2, 1, 3}).result();
      Value y = b.create<ReshapeOp>(o, std::vector<std::int64_t>{0, 0, 16}).result();
      loss = b.create<MeanOp>(b.create<MulOp>(y, y).result()).result();
      optim::Adam(1e-2).minimize(loss);
    }
  } plain, folded;
  CHECK(fold_attention_transposes(folded.main) == 2);
  folded.main.verify();
  CHECK(layouts(folded.main) == std::vector<std::string>{"BLHD", "BLHD"});
  check_trains_the_same(plain, folded, Tensor::from_vector<std::int32_t>({3}, {5, 3, 1}));
}

TEST_CASE("attention with a learned mask folds its head transposes, for the CPU or CUDA, keeps its mask and "
          "trains the same bit for bit",
          "[passes][fold_attention_transposes][mask]") {
  struct Biased {
    Program main, startup;
    Value loss;
    Biased() {
      UniqueNameGuard names;
      ProgramGuard guard(main, startup);
      nn::MultiHeadAttention mha(16, 2);
      Value x = data("x", {3, 5, 16});
      Value bias = create_parameter("bias", {1, 2, 5, 5}, DataType::Float32, init::Uniform(-1, 1));
      Value y = mha(x, x, x, false, data("n", {3}, DataType::Int64), bias);
      loss = main_builder().create<MeanOp>(main_builder().create<MulOp>(y, y).result()).result();
      optim::Adam(1e-2).minimize(loss);
    }
  } plain, folded, cuda;
  PassContext cuda_ctx({cuda.loss});
  cuda_ctx.target_place = Place::cuda(0);
  PassManager::parse("fold_attention_transposes").run(cuda.main, cuda_ctx);
  cuda.main.verify();
  CHECK(layouts(cuda.main) == std::vector<std::string>{"BLHD", "BLHD"});  // the fused kernels read masks
  for (Operation* op : cuda.main.block())  // the mask's gradient (cuBLAS) stays BHLD
    if (op->isa<AttentionMaskGradOp>())
      CHECK(from_attributes<ScaledDotProductAttentionOp::Attributes>(op->attributes(), op->name()).layout == "BHLD");
  CHECK(fold_attention_transposes(folded.main) == 3);  // the forward, its gradient and the mask's
  folded.main.verify();
  CHECK(layouts(folded.main) == std::vector<std::string>{"BLHD", "BLHD"});
  CHECK(head_swaps(folded.main) == 0);
  std::size_t mask_grads = 0;
  for (Operation* op : folded.main.block()) {
    if (op->isa<ScaledDotProductAttentionOp>()) CHECK(op->num_operands() == 5);
    if (op->isa<GradOf<ScaledDotProductAttentionOp>>()) CHECK(op->num_operands() == 8);
    if (!op->isa<AttentionMaskGradOp>()) continue;
    ++mask_grads;
    CHECK(from_attributes<ScaledDotProductAttentionOp::Attributes>(op->attributes(), op->name()).layout == "BLHD");
  }
  CHECK(mask_grads == 1);
  check_trains_the_same(plain, folded, Tensor::from_vector<std::int64_t>({3}, {5, 3, 1}));
}

TEST_CASE("a transformer layer with attention dropout folds its head transposes, drops the same "
          "probabilities and trains to the same bits",
          "[passes][fold_attention_transposes][dropout]") {
  Model plain(4, 32, 0.2), folded(4, 32, 0.2);
  CHECK(fold_attention_transposes(folded.main) == 2);
  folded.main.verify();
  CHECK(layouts(folded.main) == std::vector<std::string>{"BLHD", "BLHD"});
  Executor a(Place::cpu(), {.passes = ""}), b(Place::cpu(), {.passes = ""});
  set_random_seed(7);
  a.run(plain.startup);
  set_random_seed(7);
  b.run(folded.startup);
  for (int step = 0; step < 3; ++step) {
    INFO("step " << step);
    set_random_seed(100 + step);  // both runs draw the same keys
    const Tensor la = a.run(plain.main, plain.feeds, {plain.loss})[0];
    set_random_seed(100 + step);
    const Tensor lb = b.run(folded.main, folded.feeds, {folded.loss})[0];
    REQUIRE(same_bits(la, lb));
  }
  for (const auto& [name, p] : plain.main.parameters()) {
    INFO(name);
    CHECK(same_bits(a.scope().find_var(name)->get<Tensor>(), b.scope().find_var(name)->get<Tensor>()));
  }
}

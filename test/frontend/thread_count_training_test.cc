// A CNN's training steps give the same bits at any thread count: the
// executor's plans (program order at one thread; graph workers or the
// kernels' own threads at two) change where the work runs, never the result.
#include "frontend/frontend_test_util.h"

using namespace kiln;
using namespace kiln_frontend_test;
namespace F = kiln::nn::functional;

namespace {

Value conv_bn(Value x, std::int64_t in, std::int64_t out, std::int64_t k, std::int64_t stride) {
  nn::Conv2D conv(in, out, k, stride, k / 2, 1, 1, /*bias=*/false);
  nn::BatchNorm2D bn(out);
  return bn(conv(x));
}

// ResNet's stem and one basic block with a strided 1x1 shortcut, a global
// pool and a linear head: the ops of a ResNet-18 step, at a test's size.
Value basic_block(Value x, std::int64_t in, std::int64_t out) {
  Value y = F::relu(conv_bn(x, in, out, 3, 2));
  y = conv_bn(y, out, out, 3, 1);
  return F::relu(main_builder().create<AddOp>(y, conv_bn(x, in, out, 1, 2)).result());
}

// ResNet's stem, two basic blocks with strided 1x1 shortcuts, a global pool
// and ResNet-18's head (512 features, 1000 classes): the ops and the head's
// GEMM shapes of a ResNet-18 step, at a test's size.
Value small_resnet(Value x) {
  x = F::relu(conv_bn(x, 3, 32, 7, 2));
  x = F::max_pool2d(x, {3, 3}, {2, 2}, {1, 1});
  x = basic_block(basic_block(x, 32, 64), 64, 512);
  nn::Linear head(512, 1000);
  return head(F::flatten(F::adaptive_avg_pool2d(x, {1, 1})));
}

// A ResNet on 16 random 64x64 images against labels, momentum SGD.
Value resnet_loss(FeedMap& feeds) {
  auto x = data("x", {16, 3, 64, 64});
  auto label = data("label", {16}, DataType::Int64);
  Value loss = F::cross_entropy(small_resnet(x), label);
  optim::Momentum(0.01, 0.9).minimize(loss);
  std::vector<std::int64_t> labels(16);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = std::int64_t(i * 37 % 1000);
  feeds = {{"x", normal_f32({16, 3, 64, 64}, 5)}, {"label", Tensor::from_vector<std::int64_t>({16}, labels)}};
  return loss;
}

// A two-block causal transformer (token and position embeddings, GELU,
// layer norms, a 500-token head) on next-token targets, AdamW.
Value transformer_loss(FeedMap& feeds) {
  constexpr std::int64_t kBatch = 8, kSeq = 64, kVocab = 500, kModel = 128;
  auto ids = data("ids", {kBatch, kSeq}, DataType::Int64);
  auto pos = data("pos", {kSeq}, DataType::Int64);
  auto label = data("label", {kBatch, kSeq}, DataType::Int64);
  nn::Embedding tok_emb(kVocab, kModel), pos_emb(kSeq, kModel);
  nn::TransformerEncoderLayer block1(kModel, 4, 512, 0.0, "gelu"), block2(kModel, 4, 512, 0.0, "gelu");
  nn::LayerNorm norm({kModel});
  nn::Linear head(kModel, kVocab);
  Value x = main_builder().create<AddOp>(tok_emb(ids), pos_emb(pos)).result();
  x = block2(block1(x, /*causal=*/true), /*causal=*/true);
  Value loss = F::cross_entropy(head(norm(x)), label);
  optim::AdamW(3e-4, 0.9, 0.999, 1e-8, 0.01).minimize(loss);
  std::vector<std::int64_t> tokens(kBatch * kSeq), next(tokens.size()), positions(kSeq);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = std::int64_t(i * 131 % kVocab);
    next[i] = std::int64_t((i * 131 + 7) % kVocab);
  }
  for (std::int64_t t = 0; t < kSeq; ++t) positions[std::size_t(t)] = t;
  feeds = {{"ids", Tensor::from_vector<std::int64_t>({kBatch, kSeq}, tokens)},
           {"pos", Tensor::from_vector<std::int64_t>({kSeq}, positions)},
           {"label", Tensor::from_vector<std::int64_t>({kBatch, kSeq}, next)}};
  return loss;
}

// A training program, its feeds and its initialized parameters.
struct TrainingProgram {
  GuardedPrograms g;
  FeedMap feeds;
  Value loss;
  Executor init{Place::cpu()};  // holds the start every run copies

  explicit TrainingProgram(Value (*build)(FeedMap&)) : loss(build(feeds)) { init.run(g.startup); }

  // The persistables after `steps` steps from the common start, at
  // `threads` threads under `plan`.
  std::map<std::string, Tensor> train(ThreadPlan plan, unsigned threads, int steps) {
    ExecutionOptions options;
    options.num_threads = threads;
    options.thread_plan = plan;
    Executor exe(Place::cpu(), options);
    copy_scope(init, exe);
    for (int i = 0; i < steps; ++i) exe.run(g.main, feeds, std::vector<FetchTarget>{loss});
    return persistables(exe);
  }
};

// Two steps at one thread, then at two under each plan: every parameter
// and optimizer state the same bits.
void same_bits_under_every_plan(Value (*build)(FeedMap&)) {
  TrainingProgram m(build);
  const auto want = m.train(ThreadPlan::Sequential, 1, 2);
  for (ThreadPlan plan : {ThreadPlan::Sequential, ThreadPlan::Graph, ThreadPlan::Blas}) {
    INFO("plan " << to_string(plan) << " at 2 threads");
    const auto got = m.train(plan, 2, 2);
    REQUIRE(got.size() == want.size());
    for (const auto& [name, tensor] : want) {
      INFO(name);
      REQUIRE(got.count(name) == 1);
      CHECK(kiln_test::same_bits(got.at(name), tensor));
    }
  }
}

}  // namespace

TEST_CASE("a ResNet's training steps give the same bits at one thread and at two, under every plan",
          "[frontend][intra_op]") {
  same_bits_under_every_plan(resnet_loss);
}

TEST_CASE("a transformer's training steps give the same bits at one thread and at two, under every plan",
          "[frontend][intra_op]") {
  same_bits_under_every_plan(transformer_loss);
}

// The models the benchmarks train, built with the frontend as a user
// builds them: the seed's linear model, the 784-512-512-10 MLP, LeNet-5 and
// the small GPT (each with its feeds, made once, outside timed loops).
// Shared by train_bench, model_bench and cuda_bench, so every figure of one
// model measures the same program. `feed_place`: where the data ops take
// their batch (cuda_bench keeps it on the device, as PyTorch's peer does).
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/executor.h"
#include "kiln/runtime/scope.h"
#include "kiln/frontend/amp.h"
#include "kiln/frontend/frontend.h"
#include "kiln/frontend/optimizer.h"
#include "kiln/runtime/cuda_context.h"

namespace bench {

struct Model {
  kiln::Program main, startup;
  kiln::Value loss;
  kiln::FeedMap feeds;  // made once, outside the timed loops
  // Where a recompute would cut the forward (the GPT: the embedding and
  // each block's output); empty for the others.
  std::vector<kiln::Value> checkpoints;
};

// The feeds moved to `place` (once, outside the timed loops).
inline void place_feeds(Model& m, kiln::Place place) {
  if (place == kiln::Place::cpu()) return;
  for (auto& [name, t] : m.feeds) t = kiln::copy_to_place(t, place);
}

// The seed's program: x[16,16] → Linear(16,1) → MSE vs label[16,1], Adam.
inline std::unique_ptr<Model> seed_model(kiln::Place feed_place = kiln::Place::cpu()) {
  auto m = std::make_unique<Model>();
  {
    kiln::ProgramGuard guard(m->main, m->startup);
    auto x = kiln::data("x", {16, 16}, kiln::DataType::Float32, feed_place);
    auto label = kiln::data("label", {16, 1}, kiln::DataType::Float32, feed_place);
    auto out = kiln::nn::Linear(16, 1)(x);
    m->loss = kiln::nn::MSELoss()(out, label);
    kiln::optim::Adam(/*learning_rate=*/1e-3).minimize(m->loss);
  }
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> xs(16 * 16), ys(16);
  for (auto& v : xs) v = normal(rng);
  for (auto& v : ys) v = normal(rng);
  m->feeds = {{"x", kiln::Tensor::from_vector<float>({16, 16}, xs)},
              {"label", kiln::Tensor::from_vector<float>({16, 1}, ys)}};
  place_feeds(*m, feed_place);
  return m;
}

inline constexpr std::int64_t kFeatures = 784, kHidden = 512, kClasses = 10;

// 784-512-512-10, ReLU, CrossEntropyLoss (int64 labels), Adam.
inline std::unique_ptr<Model> mlp_model(std::int64_t batch,
                                         kiln::Place feed_place = kiln::Place::cpu()) {
  auto m = std::make_unique<Model>();
  {
    kiln::ProgramGuard guard(m->main, m->startup);
    auto x = kiln::data("x", {-1, kFeatures}, kiln::DataType::Float32, feed_place);
    kiln::nn::Linear fc1(kFeatures, kHidden), fc2(kHidden, kHidden), fc3(kHidden, kClasses);
    kiln::nn::ReLU relu;
    auto logits = fc3(relu(fc2(relu(fc1(x)))));
    auto label = kiln::data("label", {-1}, kiln::DataType::Int64, feed_place);
    m->loss = kiln::nn::CrossEntropyLoss()(logits, label);
    kiln::optim::Adam(/*learning_rate=*/1e-3).minimize(m->loss);
  }
  std::mt19937 rng(2);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<std::int64_t> pick(0, kClasses - 1);
  std::vector<float> xs(static_cast<std::size_t>(batch * kFeatures));
  std::vector<std::int64_t> ys(static_cast<std::size_t>(batch));
  for (auto& v : xs) v = normal(rng);
  for (auto& v : ys) v = pick(rng);
  m->feeds = {{"x", kiln::Tensor::from_vector<float>({batch, kFeatures}, xs)},
              {"label", kiln::Tensor::from_vector<std::int64_t>({batch}, ys)}};
  place_feeds(*m, feed_place);
  return m;
}

inline constexpr std::int64_t kLenetBatch = 64, kLenetClasses = 10;

inline std::unique_ptr<Model> lenet_model() {
  auto m = std::make_unique<Model>();
  {
    kiln::ProgramGuard guard(m->main, m->startup);
    auto x = kiln::data("x", {-1, 1, 28, 28});
    auto label = kiln::data("label", {-1}, kiln::DataType::Int64);
    kiln::nn::Sequential net;
    net.emplace<kiln::nn::Conv2D>(1, 6, 5, 1, 2);
    net.emplace<kiln::nn::ReLU>();
    net.emplace<kiln::nn::MaxPool2D>(2);
    net.emplace<kiln::nn::Conv2D>(6, 16, 5);
    net.emplace<kiln::nn::ReLU>();
    net.emplace<kiln::nn::MaxPool2D>(2);
    net.emplace<kiln::nn::Flatten>();
    net.emplace<kiln::nn::Linear>(400, 120);
    net.emplace<kiln::nn::ReLU>();
    net.emplace<kiln::nn::Linear>(120, 84);
    net.emplace<kiln::nn::ReLU>();
    net.emplace<kiln::nn::Linear>(84, kLenetClasses);
    auto logits = net(x);
    m->loss = kiln::nn::functional::cross_entropy(logits, label);
    kiln::optim::Adam(/*learning_rate=*/1e-3).minimize(m->loss);
  }
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<std::int64_t> pick(0, kLenetClasses - 1);
  std::vector<float> xs(static_cast<std::size_t>(kLenetBatch * 28 * 28));
  std::vector<std::int64_t> ys(static_cast<std::size_t>(kLenetBatch));
  for (auto& v : xs) v = normal(rng);
  for (auto& v : ys) v = pick(rng);
  m->feeds = {{"x", kiln::Tensor::from_vector<float>({kLenetBatch, 1, 28, 28}, xs)},
              {"label", kiln::Tensor::from_vector<std::int64_t>({kLenetBatch}, ys)}};
  return m;
}

inline constexpr std::int64_t kVocab = 96, kModel = 128, kHeads = 4, kFF = 512, kLayers = 2,
                       kSeq = 64, kBatch = 16;

// A GPT's sizes: the small char GPT by default; gpt2_small() is GPT-2
// small's (124M parameters) at sequence 512, batch 8; gpt_d512() between.
struct GptShape {
  std::int64_t vocab = kVocab, model = kModel, heads = kHeads, ff = kFF, layers = kLayers, seq = kSeq,
               batch = kBatch;
};
inline GptShape gpt2_small() { return {50257, 768, 12, 3072, 12, 512, 8}; }
// A GPT of the size a CPU trains (17 M parameters, 1024 tokens a step).
inline GptShape gpt_d512() { return {8192, 512, 8, 2048, 4, 128, 8}; }

// Token and position embeddings, `layers` causal pre-norm blocks (GELU, as GPT-2's),
// a final layer norm and a linear head; next-token cross-entropy; AdamW.
// `amp`: mixed precision O1 in bf16 (kiln/frontend/amp.h), its kernels
// looked up at `feed_place`.
inline std::unique_ptr<Model> gpt_model(kiln::Place feed_place = kiln::Place::cpu(), const GptShape& s = {},
                                        bool amp = false) {
  auto m = std::make_unique<Model>();
  {
    kiln::ProgramGuard guard(m->main, m->startup);
    auto ids = kiln::data("ids", {s.batch, s.seq}, kiln::DataType::Int64, feed_place);
    auto pos = kiln::data("pos", {s.seq}, kiln::DataType::Int64, feed_place);
    auto label = kiln::data("label", {s.batch, s.seq}, kiln::DataType::Int64, feed_place);
    kiln::nn::Embedding tok_emb(s.vocab, s.model), pos_emb(s.seq, s.model);
    std::vector<std::unique_ptr<kiln::nn::TransformerEncoderLayer>> blocks;
    for (int i = 0; i < s.layers; ++i)
      blocks.push_back(std::make_unique<kiln::nn::TransformerEncoderLayer>(
          s.model, s.heads, s.ff, /*dropout=*/0.0, "gelu"));
    kiln::nn::LayerNorm norm({s.model});
    kiln::nn::Linear head(s.model, s.vocab);
    kiln::Builder b = kiln::main_builder();
    // [B, L, E] + [L, E] (broadcast over the batch)
    kiln::Value x = b.create<kiln::AddOp>(tok_emb(ids), pos_emb(pos)).result();
    m->checkpoints.push_back(x);
    for (auto& blk : blocks) {
      x = (*blk)(x, /*causal=*/true);
      m->checkpoints.push_back(x);
    }
    // [B, L, V] logits against [B, L] labels, not reshaped to [B·L, V]: a
    // reshape is a view, so the logits would not die at the gradient, which
    // the inplace pass then could not write over them.
    kiln::Value logits = head(norm(x));
    m->loss = kiln::nn::functional::cross_entropy(logits, label);
    kiln::optim::AdamW opt(/*learning_rate=*/3e-4, 0.9, 0.999, 1e-8, /*weight_decay=*/0.01);
    if (amp) {
      kiln::amp::Options options;
      options.place = feed_place;
      kiln::amp::decorate(opt, options).minimize(m->loss);
    } else {
      opt.minimize(m->loss);
    }
  }
  std::mt19937 rng(12);
  std::uniform_int_distribution<std::int64_t> tok(0, s.vocab - 1);
  std::vector<std::int64_t> seq(static_cast<std::size_t>(s.batch * (s.seq + 1)));
  for (auto& v : seq) v = tok(rng);
  // Next-token targets of random sequences: ids = s[0..L), label = s[1..L].
  std::vector<std::int64_t> ids(static_cast<std::size_t>(s.batch * s.seq)), label(ids.size()),
      pos(static_cast<std::size_t>(s.seq));
  for (std::int64_t bi = 0; bi < s.batch; ++bi)
    for (std::int64_t t = 0; t < s.seq; ++t) {
      ids[std::size_t(bi * s.seq + t)] = seq[std::size_t(bi * (s.seq + 1) + t)];
      label[std::size_t(bi * s.seq + t)] = seq[std::size_t(bi * (s.seq + 1) + t + 1)];
    }
  for (std::int64_t t = 0; t < s.seq; ++t) pos[std::size_t(t)] = t;
  m->feeds = {{"ids", kiln::Tensor::from_vector<std::int64_t>({s.batch, s.seq}, ids)},
              {"pos", kiln::Tensor::from_vector<std::int64_t>({s.seq}, pos)},
              {"label", kiln::Tensor::from_vector<std::int64_t>({s.batch, s.seq}, label)}};
  place_feeds(*m, feed_place);
  return m;
}

}  // namespace bench

// char_transformer: a decoder-only character model (a small GPT) trained on
// a text every Debian system has, the GNU GPL version 3. Token and learned
// position embeddings, pre-norm transformer blocks with causal
// self-attention, a final LayerNorm and a linear head to the characters;
// cross-entropy of each next character, AdamW with warm-up + cosine decay.
// Reports the loss against the text's unigram entropy (what a model that
// ignores context reaches) and exits non-zero unless the loss ends below
// 75 % of it; then samples a few lines from the for-test clone.
//
//   char_transformer [steps (default 300)] [text (default GPL-3)]
//                    [--device cpu|cuda] [--amp off|o1|o2]   (../common/train_options.h)
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "../common/train_options.h"
#include "kiln/kiln.h"

namespace {

constexpr std::int64_t kSeq = 64, kBatch = 16, kModel = 64, kHeads = 4, kLayers = 2;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw kiln::Error(kiln::ErrorKind::NotFound, "cannot open '" + path + "'");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

int main(int argc, char** argv) try {
  const kiln_examples::TrainOptions options = kiln_examples::parse_train_options(argc, argv);
  const auto& args = options.positional;
  const int steps = args.size() > 0 ? std::atoi(args[0].c_str()) : 300;
  const std::string path = args.size() > 1 ? args[1] : "/usr/share/common-licenses/GPL-3";
  const std::string text = read_text(path);
  if (text.size() < 4 * kSeq)
    throw kiln::Error(kiln::ErrorKind::InvalidArgument, "'" + path + "' is too short");

  // ---- the vocabulary: the characters of the text ----
  std::array<int, 256> id_of{};
  id_of.fill(-1);
  std::vector<unsigned char> chars;
  std::map<unsigned char, double> freq;
  for (unsigned char c : text) freq[c] += 1;
  for (const auto& [c, n] : freq) {
    id_of[c] = static_cast<int>(chars.size());
    chars.push_back(c);
  }
  const auto vocab = static_cast<std::int64_t>(chars.size());
  double unigram = 0;  // entropy of the character frequencies, in nats
  for (const auto& [c, n] : freq) unigram -= n / text.size() * std::log(n / text.size());
  std::vector<std::int64_t> tokens(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) tokens[i] = id_of[(unsigned char)text[i]];

  // ---- the model ----
  kiln::Program main_prog, startup;
  kiln::Value logits, loss;
  {
    kiln::ProgramGuard guard(main_prog, startup);
    auto ids = kiln::data("ids", {-1, kSeq}, kiln::DataType::Int64);
    auto targets = kiln::data("targets", {-1, kSeq}, kiln::DataType::Int64);
    kiln::nn::Embedding tok(vocab, kModel, -1, std::make_shared<kiln::init::Normal>(0.0, 0.02));
    auto pos = kiln::create_parameter("pos_emb", {kSeq, kModel}, kiln::DataType::Float32,
                                      kiln::init::Normal(0.0, 0.02));
    kiln::Value h = kiln::add(tok(ids), pos);  // [B, L, d] + [L, d]
    std::vector<std::unique_ptr<kiln::nn::TransformerEncoderLayer>> blocks;
    for (int l = 0; l < kLayers; ++l) {
      blocks.push_back(std::make_unique<kiln::nn::TransformerEncoderLayer>(
          kModel, kHeads, 4 * kModel, /*dropout=*/0.0, "gelu"));
      h = (*blocks.back())(h, /*causal=*/true);
    }
    h = kiln::nn::LayerNorm({kModel})(h);
    logits = kiln::nn::Linear(kModel, vocab)(h);  // [B, L, vocab]
    // Classes along the last dim, [B, L] targets: no reshape, so the
    // gradient is written over the logits (the inplace pass).
    loss = kiln::nn::functional::cross_entropy(logits, targets);
    kiln::optim::AdamW opt(kiln::lr::CosineWithWarmup(/*base_lr=*/3e-3, steps / 10, steps, 3e-4),
                           /*beta1=*/0.9, /*beta2=*/0.99, /*epsilon=*/1e-8, /*weight_decay=*/0.01);
    options.minimize(opt, loss);
  }

  // ---- train on random windows of the text ----
  std::printf("training on %s\n", options.describe().c_str());
  kiln::Executor exe(options.place);
  exe.run(startup);
  std::mt19937 rng(5);
  std::uniform_int_distribution<std::size_t> start(0, tokens.size() - kSeq - 1);
  std::vector<std::int64_t> x(kBatch * kSeq), y(kBatch * kSeq);
  double smoothed = 0;
  for (int step = 1; step <= steps; ++step) {
    for (std::int64_t r = 0; r < kBatch; ++r) {
      const std::size_t s = start(rng);
      std::copy_n(tokens.begin() + s, kSeq, x.begin() + r * kSeq);
      std::copy_n(tokens.begin() + s + 1, kSeq, y.begin() + r * kSeq);
    }
    const float l = exe.run(main_prog,
                            {{"ids", kiln::Tensor::from_vector<std::int64_t>({kBatch, kSeq}, x)},
                             {"targets", kiln::Tensor::from_vector<std::int64_t>({kBatch, kSeq}, y)}},
                            {loss})[0].to_vector<float>()[0];
    smoothed = step == 1 ? l : 0.9 * smoothed + 0.1 * l;
    if (step == 1 || step % 50 == 0 || step == steps)
      std::printf("step %4d  loss %.3f (smoothed %.3f)\n", step, l, smoothed);
  }
  std::printf("unigram entropy of the text: %.3f nats; final loss %.3f (%.0f %%)\n", unigram,
              smoothed, 100 * smoothed / unigram);

  // ---- sample: the for-test clone, pruned to the logits, one window at a time ----
  kiln::IrMapping to_clone, to_pruned;
  const kiln::Program clone = kiln::clone_for_test(main_prog, &to_clone);
  const kiln::Program sampler = kiln::prune(clone, {to_clone.lookup(logits)}, &to_pruned);
  const kiln::Value sample_logits = to_pruned.lookup(to_clone.lookup(logits));
  std::string out = "This ";
  std::vector<std::int64_t> window(kSeq, 0);
  std::mt19937 pick(9);
  while (out.size() < 240) {
    // The last kSeq characters, left-aligned: with the causal mask, position
    // n - 1 sees only the n real characters before it.
    const std::size_t n = std::min<std::size_t>(out.size(), kSeq);
    for (std::size_t i = 0; i < n; ++i)
      window[i] = id_of[(unsigned char)out[out.size() - n + i]];
    auto lv = exe.run(sampler, {{"ids", kiln::Tensor::from_vector<std::int64_t>({1, kSeq}, window)}},
                      {sample_logits})[0];
    const std::vector<float> lv_f = kiln_examples::to_floats(lv);
    std::vector<double> p(vocab);
    const float* row = &lv_f[(n - 1) * vocab];
    const float mx = *std::max_element(row, row + vocab);
    for (std::int64_t v = 0; v < vocab; ++v) p[v] = std::exp((row[v] - mx) / 0.8);  // temperature 0.8
    std::discrete_distribution<std::int64_t> d(p.begin(), p.end());
    out += static_cast<char>(chars[d(pick)]);
  }
  std::printf("--- sample ---\n%s\n--------------\n", out.c_str());
  return smoothed < 0.75 * unigram ? 0 : 1;
} catch (const kiln::Error& e) {
  std::fprintf(stderr, "char_transformer: %s\n", e.what());
  return 1;
}

// kiln's trained models, exported to ONNX (kiln/onnx/export.h), run in ONNX
// Runtime — the runtime a kiln user deploys with — and give kiln's outputs.
// ONNX Runtime is npm's onnxruntime-node, run by test/onnx/onnxruntime_run.js;
// ./run test installs it and names its node_modules folder in
// KILN_ORT_NODE_PATH (without it these tests are skipped with a warning).
#include <string>
#include <utility>
#include <vector>

#include "catch.hpp"
#include "kiln/extension.h"
#include "kiln/onnx/export.h"
#include "kiln/onnx/test_data.h"
#include "onnxruntime_runner.h"

using namespace kiln;
using kiln_test::have_onnxruntime;
using kiln_test::run_in_onnxruntime;

namespace {

// The for-test clone of `main` pruned to `target`; `*in_test` its value there.
Program inference(const Program& main, Value target, Value* in_test) {
  IrMapping to_clone, to_pruned;
  const Program clone = clone_for_test(main, &to_clone);
  Program pruned = prune(clone, {to_clone.lookup(target)}, &to_pruned);
  *in_test = to_pruned.lookup(to_clone.lookup(target));
  return pruned;
}

Tensor uniform(const Dims& dims, unsigned seed) {
  Tensor t = Tensor::empty(dims, DataType::Float32);
  std::uint32_t s = seed * 2654435761u + 1;
  float* p = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    s = s * 1664525u + 1013904223u;
    p[i] = static_cast<float>(s >> 8) / static_cast<float>(1 << 24) * 2.0f - 1.0f;
  }
  return t;
}

Tensor tokens(const Dims& dims, std::int64_t vocab, unsigned seed) {
  Tensor t = Tensor::empty(dims, DataType::Int64);
  std::int64_t* p = t.data<std::int64_t>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = (i * 7 + seed * 13 + i / 5) % vocab;
  return t;
}

void check_matches(const Tensor& ort, const Tensor& kiln_out) {
  const auto c = onnx::compare_tensors(ort, kiln_out, 1e-4, 1e-4);
  INFO(c.first << " (max abs " << c.max_abs << ", max rel " << c.max_rel << ")");
  CHECK(c.matches);
}

}  // namespace

TEST_CASE("kiln's trained digits CNN, exported, gives kiln's logits in ONNX Runtime",
          "[onnx][onnxruntime]") {
  if (!have_onnxruntime()) return;
  // examples/digits_cnn's network, a few Adam steps on random digits.
  Program main, startup;
  Value logits, loss;
  {
    ProgramGuard guard(main, startup);
    auto x = data("x", {-1, 1, 8, 8});
    auto label = data("label", {-1}, DataType::Int64);
    nn::Sequential net;
    net.emplace<nn::Conv2D>(1, 16, 3, /*stride=*/1, /*padding=*/1);
    net.emplace<nn::ReLU>();
    net.emplace<nn::MaxPool2D>(2);
    net.emplace<nn::Conv2D>(16, 32, 3, 1, 1);
    net.emplace<nn::ReLU>();
    net.emplace<nn::MaxPool2D>(2);
    net.emplace<nn::Flatten>();
    net.emplace<nn::Linear>(32 * 2 * 2, 10);
    logits = net(x);
    loss = nn::functional::cross_entropy(logits, label);
    optim::Adam(5e-3).minimize(loss);
  }
  Executor exe;
  exe.run(startup);
  const Tensor labels = tokens(Dims{32}, 10, 1);
  for (int step = 0; step < 5; ++step)
    exe.run(main, {{"x", uniform(Dims{32, 1, 8, 8}, 1)}, {"label", labels}}, {loss});
  Value test_logits;
  const Program test = inference(main, logits, &test_logits);
  const std::string model = onnx::export_model_to_bytes(test, exe.scope(), {"x"}, {test_logits});

  const Tensor x = uniform(Dims{5, 1, 8, 8}, 2);
  const Tensor want = exe.run(test, {{"x", x}}, {test_logits})[0];
  const auto got = run_in_onnxruntime(model, {{"x", x}});
  REQUIRE(got.size() == 1);
  check_matches(got[0], want);
}

TEST_CASE("kiln's trained char transformer, exported, gives kiln's logits in ONNX Runtime",
          "[onnx][onnxruntime]") {
  if (!have_onnxruntime()) return;
  // examples/char_transformer's network (causal, GELU, pre-LN blocks), a few
  // AdamW steps on random text.
  constexpr std::int64_t kSeq = 64, kModel = 64, kHeads = 4, kLayers = 2, kVocab = 65;
  Program main, startup;
  Value logits, loss;
  {
    ProgramGuard guard(main, startup);
    auto ids = data("ids", {-1, kSeq}, DataType::Int64);
    auto targets = data("targets", {-1, kSeq}, DataType::Int64);
    nn::Embedding tok(kVocab, kModel, -1, std::make_shared<init::Normal>(0.0, 0.02));
    auto pos = create_parameter("pos_emb", {kSeq, kModel}, DataType::Float32, init::Normal(0.0, 0.02));
    auto b = main_builder();
    Value h = b.create<AddOp>(tok(ids), pos).result();
    std::vector<std::unique_ptr<nn::TransformerEncoderLayer>> blocks;
    for (int l = 0; l < kLayers; ++l) {
      blocks.push_back(std::make_unique<nn::TransformerEncoderLayer>(kModel, kHeads, 4 * kModel,
                                                                     /*dropout=*/0.0, "gelu"));
      h = (*blocks.back())(h, /*causal=*/true);
    }
    h = nn::LayerNorm({kModel})(h);
    logits = nn::Linear(kModel, kVocab)(h);
    auto flat = b.create<ReshapeOp>(logits, std::vector<std::int64_t>{-1, kVocab}).result();
    auto flat_targets = b.create<ReshapeOp>(targets, std::vector<std::int64_t>{-1}).result();
    loss = nn::functional::cross_entropy(flat, flat_targets);
    optim::AdamW(3e-3, 0.9, 0.99, 1e-8, 0.01).minimize(loss);
  }
  Executor exe;
  exe.run(startup);
  for (int step = 0; step < 3; ++step)
    exe.run(main, {{"ids", tokens(Dims{4, kSeq}, kVocab, 3)}, {"targets", tokens(Dims{4, kSeq}, kVocab, 4)}},
            {loss});
  Value test_logits;
  const Program test = inference(main, logits, &test_logits);
  const std::string model = onnx::export_model_to_bytes(test, exe.scope(), {"ids"}, {test_logits});

  const Tensor ids = tokens(Dims{3, kSeq}, kVocab, 5);
  const Tensor want = exe.run(test, {{"ids", ids}}, {test_logits})[0];
  const auto got = run_in_onnxruntime(model, {{"ids", ids}});
  REQUIRE(got.size() == 1);
  check_matches(got[0], want);
}

TEST_CASE("kiln.roi_align, exported, gives kiln's regions in ONNX Runtime, averaged or maxed, aligned or not",
          "[onnx][onnxruntime]") {
  if (!have_onnxruntime()) return;
  Program main, startup;
  std::vector<Value> outs;
  {
    ProgramGuard guard(main, startup);
    auto x = data("x", {-1, 3, 12, 16});
    auto rois = data("rois", {-1, 4});
    auto images = data("images", {-1}, DataType::Int32);
    auto b = main_builder();
    outs.push_back(nn::functional::roi_align(x, rois, images, {3, 2}, 0.5, 2, true));
    outs.push_back(nn::functional::roi_align(x, rois, images, {2}, 0.5, 0, false));
    outs.push_back(b.create<RoiAlignOp>(x, rois, images, std::vector<std::int64_t>{2, 2}, 0.5, 3, true,
                                        std::string("max"))
                       .result());
  }
  // Regions inside the image, across its edges, past them, and of no area.
  const Tensor rois = Tensor::from_vector<float>(
      {5, 4}, {1.2f, 2.5f, 20.f, 17.f, -6.f, -3.f, 9.f, 30.f, 28.f, 1.f, 40.f, 30.f, 5.f, 5.f, 5.f, 5.f, 0, 0, 32, 24});
  const Tensor images = Tensor::from_vector<std::int32_t>({5}, {1, 0, 1, 0, 1});
  const Tensor x = uniform(Dims{2, 3, 12, 16}, 3);
  Executor exe;
  const std::vector<FetchTarget> fetch(outs.begin(), outs.end());
  const auto want = exe.run(main, {{"x", x}, {"rois", rois}, {"images", images}}, fetch);
  const std::string model = onnx::export_model_to_bytes(main, exe.scope(), {"x", "rois", "images"}, fetch);
  const auto got = run_in_onnxruntime(model, {{"x", x}, {"rois", rois}, {"images", images}});
  REQUIRE(got.size() == 3);
  for (std::size_t k = 0; k < 3; ++k) {
    INFO("output #" << k);
    check_matches(got[k], want[k]);
  }
}

// The real CNNs the benchmarks train, built with kiln's frontend as a user
// builds them: ResNet-18 and MobileNetV2 (torchvision's layer for layer:
// convs without bias, batch norm in training mode, ReLU / ReLU6, residual
// adds, global average pool, a 1000-way linear head), 224x224 images,
// cross-entropy, SGD with momentum 0.9 (lr 0.01). Shared by cnn_train_bench
// (the CPU) and cuda_bench (a CUDA device, the batch kept there).
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_models.h"

namespace bench {

inline constexpr std::int64_t kImage = 224, kImageClasses = 1000;

inline kiln::Value relu6(kiln::Value x) {
  return kiln::main_builder().create<kiln::ClipOp>(x, 0.0, 6.0).result();
}

// conv (no bias) + batch norm, as torchvision's blocks.
inline kiln::Value conv_bn(kiln::Value x, std::int64_t in, std::int64_t out, std::int64_t k,
                           std::int64_t stride, std::int64_t groups = 1) {
  kiln::nn::Conv2D conv(in, out, k, stride, k / 2, 1, groups, /*bias=*/false);
  kiln::nn::BatchNorm2D bn(out);
  return bn(conv(x));
}

// ResNet's basic block: two 3x3 convs, the input added back (through a 1x1
// conv when the shape changes).
inline kiln::Value basic_block(kiln::Value x, std::int64_t in, std::int64_t out, std::int64_t stride) {
  kiln::Value y = kiln::nn::functional::relu(conv_bn(x, in, out, 3, stride));
  y = conv_bn(y, out, out, 3, 1);
  kiln::Value skip = stride != 1 || in != out ? conv_bn(x, in, out, 1, stride) : x;
  return kiln::nn::functional::relu(kiln::add(y, skip));
}

inline kiln::Value resnet18(kiln::Value x) {
  x = kiln::nn::functional::relu(conv_bn(x, 3, 64, 7, 2));
  x = kiln::nn::functional::max_pool2d(x, {3, 3}, {2, 2}, {1, 1});
  std::int64_t in = 64;
  for (std::int64_t out : {64, 128, 256, 512}) {
    x = basic_block(x, in, out, out == 64 ? 1 : 2);
    x = basic_block(x, out, out, 1);
    in = out;
  }
  return x;
}

// MobileNetV2's inverted residual: 1x1 expand (ReLU6), 3x3 depthwise (ReLU6),
// 1x1 project; the input added back at stride 1 with equal channels.
inline kiln::Value inverted_residual(kiln::Value x, std::int64_t in, std::int64_t out,
                                     std::int64_t stride, std::int64_t expand) {
  const std::int64_t hidden = in * expand;
  kiln::Value y = expand == 1 ? x : relu6(conv_bn(x, in, hidden, 1, 1));
  y = relu6(conv_bn(y, hidden, hidden, 3, stride, hidden));
  y = conv_bn(y, hidden, out, 1, 1);
  return stride == 1 && in == out ? kiln::add(y, x) : y;
}

inline kiln::Value mobilenet_v2(kiln::Value x) {
  // (expansion, channels, repeats, first stride), torchvision's table.
  const std::int64_t table[7][4] = {{1, 16, 1, 1},  {6, 24, 2, 2},  {6, 32, 3, 2}, {6, 64, 4, 2},
                                    {6, 96, 3, 1},  {6, 160, 3, 2}, {6, 320, 1, 1}};
  x = relu6(conv_bn(x, 3, 32, 3, 2));
  std::int64_t in = 32;
  for (const auto& row : table)
    for (std::int64_t i = 0; i < row[2]; ++i) {
      x = inverted_residual(x, in, row[1], i == 0 ? row[3] : 1, row[0]);
      in = row[1];
    }
  return relu6(conv_bn(x, in, 1280, 1, 1));
}

// name: "resnet18", "mobilenet_v2", or either + "_amp_bf16": mixed
// precision O1 in bf16 with the convolutions on its allow list (PyTorch's
// autocast runs them in bf16 too), its kernels looked up at `feed_place`.
inline std::unique_ptr<Model> cnn_model(const std::string& name, std::int64_t batch,
                                        kiln::Place feed_place = kiln::Place::cpu()) {
  const bool amp = name.ends_with("_amp_bf16");
  const bool resnet = name.starts_with("resnet18");
  auto m = std::make_unique<Model>();
  {
    kiln::ProgramGuard guard(m->main, m->startup);
    auto x = kiln::data("x", {batch, 3, kImage, kImage}, kiln::DataType::Float32, feed_place);
    auto label = kiln::data("label", {batch}, kiln::DataType::Int64, feed_place);
    kiln::Value features = resnet ? resnet18(x) : mobilenet_v2(x);
    const std::int64_t width = resnet ? 512 : 1280;
    features = kiln::nn::functional::flatten(
        kiln::nn::functional::adaptive_avg_pool2d(features, {1, 1}));
    kiln::nn::Linear head(width, kImageClasses);
    m->loss = kiln::nn::functional::cross_entropy(head(features), label);
    kiln::optim::Momentum opt(/*learning_rate=*/0.01, /*momentum=*/0.9);
    if (amp) {
      kiln::amp::Options options;
      options.allow = {"kiln.matmul", "kiln.conv2d"};
      options.place = feed_place;
      kiln::amp::decorate(opt, options).minimize(m->loss);
    } else {
      opt.minimize(m->loss);
    }
  }
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<std::int64_t> pick(0, kImageClasses - 1);
  std::vector<float> xs(static_cast<std::size_t>(batch * 3 * kImage * kImage));
  std::vector<std::int64_t> ys(static_cast<std::size_t>(batch));
  for (auto& v : xs) v = normal(rng);
  for (auto& v : ys) v = pick(rng);
  m->feeds = {{"x", kiln::Tensor::from_vector<float>({batch, 3, kImage, kImage}, xs)},
              {"label", kiln::Tensor::from_vector<std::int64_t>({batch}, ys)}};
  place_feeds(*m, feed_place);
  return m;
}

}  // namespace bench

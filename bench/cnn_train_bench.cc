// Training steps of real CNNs built with kiln's frontend, as a user builds
// them: ResNet-18 and MobileNetV2 (torchvision's layer for layer: convs
// without bias, batch norm in training mode, ReLU / ReLU6, residual adds,
// global average pool, a 1000-way linear head), batch 16, 224x224 images,
// cross-entropy, SGD with momentum 0.9 (lr 0.01). bench/peers/cnn_train_torch.py
// runs the same networks in PyTorch eager beside it (`./run bench models`).
//   BENCH model.{resnet18,mobilenet_v2}.t1, .t2     ms/step (medians after warm-up)
//   BENCH model.{resnet18,mobilenet_v2}.t1.min      the fastest step at 1 thread
//   BENCH model.{resnet18,mobilenet_v2}.amp_bf16.*  the same under mixed precision
//                                                   O1 in bf16, convolutions included
// Random but fixed data, fed every step. Filters: "", "models", "model",
// "model.resnet18", "model.mobilenet_v2", "model.<net>.amp_bf16".
#include <algorithm>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_models.h"
#include "bench_util.h"

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/interpreter_core.h"
#include "kiln/frontend/amp.h"
#include "kiln/exec/thread_plan.h"

namespace bench {
namespace {

constexpr std::int64_t kBatch = 16, kImage = 224, kClasses = 1000;

kiln::Value relu6(kiln::Value x) {
  return kiln::main_builder().create<kiln::ClipOp>(x, 0.0, 6.0).result();
}

// conv (no bias) + batch norm, as torchvision's blocks.
kiln::Value conv_bn(kiln::Value x, std::int64_t in, std::int64_t out, std::int64_t k,
                    std::int64_t stride, std::int64_t groups = 1) {
  kiln::nn::Conv2D conv(in, out, k, stride, k / 2, 1, groups, /*bias=*/false);
  kiln::nn::BatchNorm2D bn(out);
  return bn(conv(x));
}

// ResNet's basic block: two 3x3 convs, the input added back (through a 1x1
// conv when the shape changes).
kiln::Value basic_block(kiln::Value x, std::int64_t in, std::int64_t out, std::int64_t stride) {
  kiln::Value y = kiln::nn::functional::relu(conv_bn(x, in, out, 3, stride));
  y = conv_bn(y, out, out, 3, 1);
  kiln::Value skip = stride != 1 || in != out ? conv_bn(x, in, out, 1, stride) : x;
  return kiln::nn::functional::relu(kiln::add(y, skip));
}

kiln::Value resnet18(kiln::Value x) {
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
kiln::Value inverted_residual(kiln::Value x, std::int64_t in, std::int64_t out,
                              std::int64_t stride, std::int64_t expand) {
  const std::int64_t hidden = in * expand;
  kiln::Value y = expand == 1 ? x : relu6(conv_bn(x, in, hidden, 1, 1));
  y = relu6(conv_bn(y, hidden, hidden, 3, stride, hidden));
  y = conv_bn(y, hidden, out, 1, 1);
  return stride == 1 && in == out ? kiln::add(y, x) : y;
}

kiln::Value mobilenet_v2(kiln::Value x) {
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
// CPU autocast runs them in bf16 too).
std::unique_ptr<Model> cnn_model(const std::string& name) {
  const bool amp = name.ends_with("_amp_bf16");
  const bool resnet = name.starts_with("resnet18");
  auto m = std::make_unique<Model>();
  {
    kiln::ProgramGuard guard(m->main, m->startup);
    auto x = kiln::data("x", {kBatch, 3, kImage, kImage});
    auto label = kiln::data("label", {kBatch}, kiln::DataType::Int64);
    kiln::Value features = resnet ? resnet18(x) : mobilenet_v2(x);
    const std::int64_t width = resnet ? 512 : 1280;
    features = kiln::nn::functional::flatten(
        kiln::nn::functional::adaptive_avg_pool2d(features, {1, 1}));
    kiln::nn::Linear head(width, kClasses);
    m->loss = kiln::nn::functional::cross_entropy(head(features), label);
    kiln::optim::Momentum opt(/*learning_rate=*/0.01, /*momentum=*/0.9);
    if (amp)
      kiln::amp::decorate(opt, {.dtype = kiln::DataType::BFloat16, .allow = {"kiln.matmul", "kiln.conv2d"}})
          .minimize(m->loss);
    else
      opt.minimize(m->loss);
  }
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<std::int64_t> pick(0, kClasses - 1);
  std::vector<float> xs(static_cast<std::size_t>(kBatch * 3 * kImage * kImage));
  std::vector<std::int64_t> ys(static_cast<std::size_t>(kBatch));
  for (auto& v : xs) v = normal(rng);
  for (auto& v : ys) v = pick(rng);
  m->feeds = {{"x", kiln::Tensor::from_vector<float>({kBatch, 3, kImage, kImage}, xs)},
              {"label", kiln::Tensor::from_vector<std::int64_t>({kBatch}, ys)}};
  return m;
}

// KILN_BENCH_PLAN=sequential|graph|blas forces a thread plan (default: auto).
kiln::ThreadPlan thread_plan_named(const std::string& name) {
  for (auto p : {kiln::ThreadPlan::Sequential, kiln::ThreadPlan::Graph, kiln::ThreadPlan::Blas})
    if (name == to_string(p)) return p;
  return kiln::ThreadPlan::Auto;
}

// ms per step of `steps` steps after the warm-up the thread-plan tuner needs.
std::vector<double> step_ms(Model& m, unsigned threads, int steps) {
  kiln::ExecutionOptions opts;
  opts.num_threads = threads;
  opts.profile = std::getenv("KILN_BENCH_TRACE") != nullptr;
  if (const char* plan = std::getenv("KILN_BENCH_PLAN")) opts.thread_plan = thread_plan_named(plan);
  kiln::Executor exe(kiln::Place::cpu(), opts);
  exe.run(m.startup);
  const std::vector<kiln::FetchTarget> fetch{m.loss};
  std::vector<kiln::Tensor> out(1);
  const int warm = threads > 1 ? 2 + 2 * kiln::ThreadPlanTuner::kTrials : 2;
  for (int i = 0; i < warm; ++i) exe.run(m.main, m.feeds, fetch, out);
  std::vector<double> t;
  for (int i = 0; i < steps; ++i) t.push_back(time_ns([&] { exe.run(m.main, m.feeds, fetch, out); }) / 1e6);
  if (detail())
    std::printf("# t%u: loss after %d steps %.9g, thread plan %s\n", threads, warm + steps,
                out[0].to_vector<float>()[0],
                exe.last_core() ? std::string(to_string(exe.last_core()->thread_plan())).c_str() : "?");
  if (const char* trace = std::getenv("KILN_BENCH_TRACE"); trace && exe.last_core()) {
    std::ofstream f(std::string(trace) + ".t" + std::to_string(threads) + ".json");
    f << exe.last_core()->chrome_trace();
  }
  return t;
}

}  // namespace
}  // namespace bench

int main(int argc, char** argv) {
  const std::string filter = argc > 1 ? argv[1] : "";
  for (const std::string name : {"resnet18", "mobilenet_v2", "resnet18_amp_bf16", "mobilenet_v2_amp_bf16"}) {
    const bool amp = name.ends_with("_amp_bf16");
    const std::string key = "model." + name.substr(0, name.find("_amp")) + (amp ? ".amp_bf16" : "");
    if (!(filter.empty() || filter == "models" || filter == "model" || filter == key)) continue;
    auto m = bench::cnn_model(name);
    const auto t1 = bench::step_ms(*m, 1, 4), t2 = bench::step_ms(*m, 2, 4);
    bench::emit(key + ".t1", bench::median(t1), "ms");
    bench::emit(key + ".t1.min", *std::min_element(t1.begin(), t1.end()), "ms");
    bench::emit(key + ".t2", bench::median(t2), "ms");
  }
}

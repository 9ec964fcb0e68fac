// digits_cnn: a small CNN on the handwritten digits that Debian's
// python3-sklearn ships (1797 8×8 images, pixel values 0..16; `./run test`
// fetches them as data/digits.csv). Conv 3×3 1→16, ReLU, max-pool 2;
// conv 3×3 16→32, ReLU, max-pool 2; Linear 128→10; cross-entropy, Adam
// with a warm-up + cosine learning-rate schedule.
// Trains on a shuffled 80 % with a DataLoader (its reader thread batches
// ahead of the executor), printing a progress bar per epoch; evaluates the
// for-test clone, pruned to the logits, on the held-out 20 %; exports the inference model, loads it
// into a fresh scope and executor as another process would, and checks it
// predicts the same classes. Exits non-zero below 97 % held-out accuracy or
// on any difference after the reload.
//
//   digits_cnn <digits.csv> [epochs (default 20)] [export prefix]
//              [--device cpu|cuda] [--amp off|o1|o2]   (../common/train_options.h)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

#include "../common/train_options.h"
#include "kiln/kiln.h"

namespace {

constexpr std::int64_t kPixels = 64, kClasses = 10, kBatch = 32;

// Rows `idx` of the [N, 65] table as images [n, 1, 8, 8] (scaled to 0..1)
// and int64 labels [n].
std::pair<kiln::Tensor, kiln::Tensor> split(const std::vector<float>& table,
                                            const std::vector<std::int64_t>& idx) {
  const auto n = static_cast<std::int64_t>(idx.size());
  std::vector<float> x(n * kPixels);
  std::vector<std::int64_t> y(n);
  for (std::int64_t i = 0; i < n; ++i) {
    const float* row = &table[idx[i] * (kPixels + 1)];
    for (std::int64_t p = 0; p < kPixels; ++p) x[i * kPixels + p] = row[p] / 16.f;
    y[i] = static_cast<std::int64_t>(row[kPixels]);
  }
  return {kiln::Tensor::from_vector<float>({n, 1, 8, 8}, x),
          kiln::Tensor::from_vector<std::int64_t>({n}, y)};
}

std::vector<std::int64_t> argmax_rows(const kiln::Tensor& logits) {
  const std::vector<float> v = kiln_examples::to_floats(logits);  // bf16 under amp
  std::vector<std::int64_t> out(v.size() / kClasses);
  for (std::size_t i = 0; i < out.size(); ++i) {
    auto row = v.begin() + static_cast<std::ptrdiff_t>(i * kClasses);
    out[i] = std::max_element(row, row + kClasses) - row;
  }
  return out;
}

void progress(int epoch, int epochs, std::int64_t done, std::int64_t total, double loss,
              bool final_line) {
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * done / total);
  std::printf("\repoch %2d/%d [%s%s] %3lld/%lld  loss %.4f", epoch, epochs,
              std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(),
              static_cast<long long>(done), static_cast<long long>(total), loss);
  if (final_line) std::printf("\n");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) try {
  const kiln_examples::TrainOptions options = kiln_examples::parse_train_options(argc, argv);
  const auto& args = options.positional;
  if (args.empty()) {
    std::fprintf(stderr, "usage: %s <digits.csv> [epochs] [export prefix] [--device cpu|cuda] [--amp off|o1|o2]\n",
                 argv[0]);
    return 2;
  }
  const int epochs = args.size() > 1 ? std::atoi(args[1].c_str()) : 20;
  const std::string prefix =
      args.size() > 2 ? args[2]
                      : (std::filesystem::temp_directory_path() /
                         ("kiln_digits_cnn_" + std::to_string(::getpid())))
                            .string();

  // ---- data: 80 % train, 20 % held out ----
  kiln::Tensor table = kiln::read_csv_f32(args[0]);
  if (table.dims().size() != 2 || table.dims()[1] != kPixels + 1)
    throw kiln::Error(kiln::ErrorKind::InvalidArgument,
                      args[0] + ": expected rows of 64 pixels and a label, got " +
                          table.type_string());
  const auto values = table.to_vector<float>();
  std::vector<std::int64_t> order(table.dims()[0]);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(7));
  const auto n_train = static_cast<std::ptrdiff_t>(order.size() * 4 / 5);
  auto [train_x, train_y] = split(values, {order.begin(), order.begin() + n_train});
  auto [test_x, test_y] = split(values, {order.begin() + n_train, order.end()});
  const auto test_labels = test_y.to_vector<std::int64_t>();

  // ---- the model ----
  kiln::Program main_prog, startup;
  kiln::Value logits, loss;
  {
    kiln::ProgramGuard guard(main_prog, startup);
    auto x = kiln::data("x", {-1, 1, 8, 8});
    auto label = kiln::data("label", {-1}, kiln::DataType::Int64);
    kiln::nn::Sequential net;
    net.emplace<kiln::nn::Conv2D>(1, 16, 3, /*stride=*/1, /*padding=*/1);
    net.emplace<kiln::nn::ReLU>();
    net.emplace<kiln::nn::MaxPool2D>(2);
    net.emplace<kiln::nn::Conv2D>(16, 32, 3, 1, 1);
    net.emplace<kiln::nn::ReLU>();
    net.emplace<kiln::nn::MaxPool2D>(2);
    net.emplace<kiln::nn::Flatten>();
    net.emplace<kiln::nn::Linear>(32 * 2 * 2, kClasses);
    logits = net(x);
    loss = kiln::nn::functional::cross_entropy(logits, label);
    // A rate that warms up over the first epoch, then follows a cosine to 0
    // over the rest (computed in the program from its step counter).
    const std::int64_t steps_per_epoch = (n_train + kBatch - 1) / kBatch;
    kiln::optim::Adam opt(
        kiln::lr::CosineWithWarmup(/*base_lr=*/5e-3, steps_per_epoch, epochs * steps_per_epoch));
    options.minimize(opt, loss);
  }
  // The evaluation program: inference mode, without backward and updates,
  // pruned to the logits (so it needs no label feed).
  kiln::IrMapping to_clone, to_pruned;
  const kiln::Program clone = kiln::clone_for_test(main_prog, &to_clone);
  const kiln::Program test_prog = kiln::prune(clone, {to_clone.lookup(logits)}, &to_pruned);
  const kiln::Value test_logits = to_pruned.lookup(to_clone.lookup(logits));

  // ---- train ----
  std::printf("training on %s\n", options.describe().c_str());
  kiln::Executor exe(options.place);
  exe.run(startup);
  kiln::DataLoader loader(kiln::TensorDataset({train_x, train_y}, {"x", "label"}),
                          {.batch_size = kBatch, .shuffle = true, .seed = 1});
  const std::int64_t batches = (n_train + kBatch - 1) / kBatch;
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    double sum = 0;
    std::int64_t seen = 0;
    for (const kiln::Batch& batch : loader.epoch()) {
      sum += exe.run(main_prog, batch.feed(), {loss})[0].to_vector<float>()[0] * batch.size();
      seen += batch.size();
      if (isatty(STDOUT_FILENO)) progress(epoch, epochs, batch.number() + 1, batches, sum / seen, false);
    }
    progress(epoch, epochs, batches, batches, sum / seen, true);
  }

  // ---- held-out accuracy (the for-test clone, same scope) ----
  auto predicted =
      argmax_rows(exe.run(test_prog, {{"x", test_x}}, {test_logits})[0]);
  std::int64_t correct = 0;
  for (std::size_t i = 0; i < predicted.size(); ++i) correct += predicted[i] == test_labels[i];
  const double accuracy = double(correct) / double(predicted.size());
  std::printf("held-out accuracy: %.2f%% (%lld / %zu)\n", 100 * accuracy,
              static_cast<long long>(correct), predicted.size());

  // ---- export for inference, reload as a fresh process would, predict ----
  kiln::save_inference_model(prefix, {"x"}, {logits}, main_prog, exe.scope());
  kiln::Scope fresh;
  kiln::InferenceModel model = kiln::load_inference_model(prefix, fresh);
  kiln::Executor inference(options.place);
  auto reloaded = argmax_rows(
      inference.run(model.program, {{model.feed_names[0], test_x}}, model.fetch_targets, fresh)[0]);
  std::filesystem::remove(kiln::inference_program_path(prefix));
  std::filesystem::remove(kiln::inference_weights_path(prefix));
  const bool same = reloaded == predicted;
  std::printf("exported to %s.{json,weights}; the reloaded model predicts %s\n", prefix.c_str(),
              same ? "the same classes" : "DIFFERENT classes");
  return accuracy >= 0.97 && same ? 0 : 1;
} catch (const kiln::Error& e) {
  std::fprintf(stderr, "digits_cnn: %s\n", e.what());
  return 1;
}

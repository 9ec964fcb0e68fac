// rnn: an Elman RNN (tanh cell, nn::SimpleRNN: a while_loop over time with
// tensor arrays) and a linear head, trained with SGD to fit a fixed batch
// of sequences x [T, B, 64] → y [T, B, 10] (MSE), y_t the mean of x_t and
// x_{t-1} on ten features. Before training it checks
// the loop's gradients against those of the same network unrolled by hand
// (T copies of the cell, no loop, no arrays) on the same parameters.
// Exits non-zero when they differ by more than 1e-5 or the loss does not
// fall to a tenth of its first value.
//
//   rnn [steps]      (default 300)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/executor.h"
#include "kiln/frontend/frontend.h"
#include "kiln/frontend/optimizer.h"

namespace {

constexpr std::int64_t kSteps = 32, kBatch = 32, kInput = 64, kHidden = 128, kOut = 10;

// The network unrolled by hand: h_t = tanh(x_t · W_ih + b + h_{t-1} · W_hh).
kiln::Value unrolled_outputs(const kiln::nn::SimpleRNN& rnn, kiln::Value x) {
  using namespace kiln;
  Builder b = main_builder();
  // The layer's parameters as values of this program (they share the scope).
  Value w_ih = parameter_value(parameter_name(rnn.weight_ih()), rnn.weight_ih().type());
  Value w_hh = parameter_value(parameter_name(rnn.weight_hh()), rnn.weight_hh().type());
  Value bias = parameter_value(parameter_name(rnn.bias()), rnn.bias().type());
  Value h = full({kBatch, kHidden}, 0.0);
  std::vector<Value> hs;
  for (std::int64_t t = 0; t < kSteps; ++t) {
    Value x_t = b.create<ReshapeOp>(b.create<SliceOp>(x, std::vector<std::int64_t>{0},
                                                      std::vector<std::int64_t>{t},
                                                      std::vector<std::int64_t>{t + 1})
                                        .result(),
                                    std::vector<std::int64_t>{kBatch, kInput})
                    .result();
    Value pre = b.create<AddOp>(nn::functional::linear(x_t, w_ih, bias),
                                b.create<MatmulOp>(h, w_hh).result())
                    .result();
    h = nn::functional::tanh(pre);
    hs.push_back(h);
  }
  return b.create<StackOp>(hs, 0).result();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kiln;
  const int steps = argc > 1 ? std::atoi(argv[1]) : 300;

  // ---- build: the training program, and the unrolled one for the check ----
  Program main_prog, startup, unrolled, unrolled_startup;
  Value loss, unrolled_loss;
  std::vector<std::pair<Value, Value>> grads, unrolled_grads;
  {
    ProgramGuard guard(main_prog, startup);
    nn::SimpleRNN rnn(kInput, kHidden);
    Value x = data("x", {kSteps, kBatch, kInput});
    Value y = data("y", {kSteps, kBatch, kOut});
    nn::Linear head(kHidden, kOut);
    loss = nn::functional::mse_loss(head(rnn(x).first), y);
    grads = optim::SGD(/*learning_rate=*/0.2).minimize(loss);
    ProgramGuard unrolled_guard(unrolled, unrolled_startup);
    Value ux = data("x", {kSteps, kBatch, kInput});
    Value uy = data("y", {kSteps, kBatch, kOut});
    unrolled_loss = nn::functional::mse_loss(head(unrolled_outputs(rnn, ux)), uy);
    std::vector<Value> params;
    for (auto& [p, g] : grads)
      params.push_back(parameter_value(parameter_name(p), p.type()));
    unrolled_grads = append_backward(unrolled_loss, params);
  }

  // ---- data: a fixed batch ----
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> xs(kSteps * kBatch * kInput), ys(kSteps * kBatch * kOut);
  for (auto& v : xs) v = normal(rng);
  // A target that needs memory: y_t = (x_t + x_{t-1}) / 2 on the first 10
  // input features.
  for (std::int64_t t = 0; t < kSteps; ++t)
    for (std::int64_t b = 0; b < kBatch; ++b)
      for (std::int64_t o = 0; o < kOut; ++o) {
        const float now = xs[(t * kBatch + b) * kInput + o];
        const float before = t ? xs[((t - 1) * kBatch + b) * kInput + o] : 0.0f;
        ys[(t * kBatch + b) * kOut + o] = 0.5f * (now + before);
      }
  const FeedMap feed{{"x", Tensor::from_vector<float>({kSteps, kBatch, kInput}, xs)},
                     {"y", Tensor::from_vector<float>({kSteps, kBatch, kOut}, ys)}};

  Executor exe;
  exe.run(startup);

  // ---- the loop's gradients = the unrolled network's ----
  std::vector<FetchTarget> fetch_unrolled{unrolled_loss}, fetch_main{loss};
  for (auto& [p, g] : unrolled_grads) fetch_unrolled.push_back(g);
  for (auto& [p, g] : grads) fetch_main.push_back(g);
  auto want = exe.run(unrolled, feed, fetch_unrolled);
  auto got = exe.run(main_prog, feed, fetch_main);  // the first training step
  double worst = 0;
  for (std::size_t i = 0; i < grads.size(); ++i) {
    auto a = got[i + 1].to_vector<float>(), b = want[i + 1].to_vector<float>();
    if (a.size() != b.size()) {
      std::printf("gradient of '%s': %zu values, unrolled %zu\n",
                  parameter_name(grads[i].first).c_str(), a.size(), b.size());
      return 1;
    }
    double err = 0;
    for (std::size_t k = 0; k < a.size(); ++k)
      err = std::max(err, std::abs(double(a[k]) - b[k]) / (1.0 + std::abs(double(b[k]))));
    std::printf("gradient of %-22s max relative difference to the unrolled network %.2e\n",
                parameter_name(grads[i].first).c_str(), err);
    worst = std::max(worst, err);
  }
  const float first = got[0].to_vector<float>()[0];
  std::printf("loss %.5f (unrolled %.5f)\n", first, want[0].to_vector<float>()[0]);
  if (worst > 1e-5) {
    std::printf("FAIL: the loop's gradients differ from the unrolled network's by %.2e\n", worst);
    return 1;
  }

  // ---- train ----
  float last = first;
  for (int step = 2; step <= steps; ++step) {
    last = exe.run(main_prog, feed, {loss})[0].to_vector<float>()[0];
    if (step % 50 == 0) std::printf("step %4d  loss %.5f\n", step, last);
  }
  std::printf("loss %.5f -> %.5f after %d SGD steps\n", first, last, steps);
  return last <= 0.1f * first ? 0 : 1;
}

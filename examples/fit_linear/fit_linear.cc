// fit_linear: the seed's program (seed 001 §一), trained. x[16,16] →
// Linear(16, 1) → MSE against label[16,1], minimized with Adam, on synthetic
// data y = x·W + b + noise. Prints the loss every 100 steps and exits
// non-zero unless the loss ends below the noise floor's threshold.
//
//   fit_linear [steps]      (default 1500)
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "kiln/exec/executor.h"
#include "kiln/frontend/frontend.h"
#include "kiln/frontend/optimizer.h"

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 1500;
  constexpr std::int64_t kBatch = 16, kIn = 16;
  constexpr double kNoise = 0.01;       // label noise (std)
  constexpr double kThreshold = 1e-3;   // the noise floor is kNoise² = 1e-4

  // ---- build (nothing runs) ----
  kiln::Program main_prog, startup;
  kiln::Value loss;
  {
    kiln::ProgramGuard guard(main_prog, startup);
    auto x = kiln::data("x", {kBatch, kIn});
    auto label = kiln::data("label", {kBatch, 1});
    auto out = kiln::nn::Linear(kIn, 1)(x);
    loss = kiln::nn::MSELoss()(out, label);
    kiln::optim::Adam(/*learning_rate=*/0.01).minimize(loss);
  }

  // ---- synthetic data: y = x·W + b + noise ----
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> w_true(kIn);
  for (auto& w : w_true) w = normal(rng);
  const float b_true = 0.5f;

  // ---- run ----
  kiln::Executor exe;
  exe.run(startup);
  double last = 0;
  std::vector<float> xs(kBatch * kIn), ys(kBatch);
  for (int step = 1; step <= steps; ++step) {
    for (auto& v : xs) v = normal(rng);
    for (std::int64_t i = 0; i < kBatch; ++i) {
      double y = b_true + kNoise * normal(rng);
      for (std::int64_t j = 0; j < kIn; ++j) y += xs[i * kIn + j] * w_true[j];
      ys[i] = static_cast<float>(y);
    }
    auto fetched = exe.run(main_prog,
                           {{"x", kiln::Tensor::from_vector<float>({kBatch, kIn}, xs)},
                            {"label", kiln::Tensor::from_vector<float>({kBatch, 1}, ys)}},
                           {loss});
    last = fetched[0].to_vector<float>().at(0);
    if (step % 100 == 0 || step == 1) std::printf("step %5d  loss %.6f\n", step, last);
  }
  if (last < kThreshold) {
    std::printf("converged: loss %.6f < %.0e\n", last, kThreshold);
    return 0;
  }
  std::printf("did NOT converge: loss %.6f >= %.0e\n", last, kThreshold);
  return 1;
}

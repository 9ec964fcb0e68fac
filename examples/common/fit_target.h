// A small regression harness the examples share: fits x[64, 8] → a smooth
// target through Linear(8, 16) → hidden(·) → Linear(16, 1) with MSE and Adam,
// printing the loss; returns 0 when it fell at least 20×, else 1.
#pragma once

#include <cmath>
#include <cstdio>
#include <functional>
#include <vector>

#include "kiln/kiln.h"

namespace kiln_examples {

inline int fit_target(const std::function<kiln::Value(kiln::Value)>& hidden, int steps = 500) {
  using namespace kiln;
  Program prog, startup;
  Value loss;
  {
    ProgramGuard guard(prog, startup);
    Value x = data("x", {64, 8}), y = data("y", {64, 1});
    nn::Linear fc1(8, 16), fc2(16, 1);
    loss = nn::MSELoss()(fc2(hidden(fc1(x))), y);
    optim::Adam(0.01).minimize(loss);
  }
  std::vector<float> xs(512), ys(64);
  for (int i = 0; i < 512; ++i) xs[i] = std::sin(0.37f * static_cast<float>(i));
  for (int i = 0; i < 64; ++i)  // y = sin(x0 + x1) + x2 · x3
    ys[i] = std::sin(xs[8 * i] + xs[8 * i + 1]) + xs[8 * i + 2] * xs[8 * i + 3];
  Executor exe;
  exe.run(startup);
  float first = 0, last = 0;
  for (int step = 1; step <= steps; ++step) {
    auto out = exe.run(prog,
                       {{"x", Tensor::from_vector<float>({64, 8}, xs)},
                        {"y", Tensor::from_vector<float>({64, 1}, ys)}},
                       {loss});
    last = out[0].to_vector<float>().at(0);
    if (step == 1) first = last;
    if (step == 1 || step % 100 == 0) std::printf("step %4d  loss %.5f\n", step, last);
  }
  const bool ok = last * 20 < first;
  std::printf("%s: loss %.5f -> %.5f\n", ok ? "trained" : "did NOT train", first, last);
  return ok ? 0 : 1;
}

}  // namespace kiln_examples

// A user's program linking kiln, as a host project compiles it: one include
// (kiln/kiln.h), the seed's model (x[16,16] -> Linear(16, 1) -> MSE, Adam)
// built, trained until its loss is below the label noise's threshold, and a
// kiln::Error caught. Exits non-zero when anything is off.
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace {

// A feed of the wrong shape is a kiln::Error naming the feed, not a crash.
bool bad_feed_is_an_error(kiln::Executor& exe, const kiln::Program& program, kiln::Value loss) {
  try {
    exe.run(program,
            {{"x", kiln::Tensor::from_vector<float>({2, 2}, {1, 2, 3, 4})},
             {"label", kiln::Tensor::from_vector<float>({16, 1}, std::vector<float>(16))}},
            {loss});
  } catch (const kiln::Error& e) {
    if (std::string(e.what()).find("feed 'x'") != std::string::npos) return true;
    std::fprintf(stderr, "host_app: the error does not name feed 'x': %s\n", e.what());
  }
  return false;
}

}  // namespace

int main() {
  constexpr std::int64_t kBatch = 16, kIn = 16;
  kiln::Program main_prog, startup;
  kiln::Value loss;
  {
    kiln::ProgramGuard guard(main_prog, startup);
    auto x = kiln::data("x", {kBatch, kIn});
    auto label = kiln::data("label", {kBatch, 1});
    loss = kiln::nn::MSELoss()(kiln::nn::Linear(kIn, 1)(x), label);
    kiln::optim::Adam(/*learning_rate=*/0.01).minimize(loss);
  }

  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> w(kIn), xs(kBatch * kIn), ys(kBatch);
  for (auto& v : w) v = normal(rng);

  kiln::Executor exe;
  exe.run(startup);
  float last = 0;
  for (int step = 0; step < 1500; ++step) {
    for (auto& v : xs) v = normal(rng);
    for (std::int64_t i = 0; i < kBatch; ++i) {
      float y = 0.5f;
      for (std::int64_t j = 0; j < kIn; ++j) y += xs[i * kIn + j] * w[j];
      ys[i] = y;
    }
    auto fetched = exe.run(main_prog,
                           {{"x", kiln::Tensor::from_vector<float>({kBatch, kIn}, xs)},
                            {"label", kiln::Tensor::from_vector<float>({kBatch, 1}, ys)}},
                           {loss});
    last = fetched[0].to_vector<float>().at(0);
  }
  if (!(last < 1e-3f)) {
    std::fprintf(stderr, "host_app: the seed model did not train (loss %g)\n", last);
    return 1;
  }
  if (!bad_feed_is_an_error(exe, main_prog, loss)) {
    std::fprintf(stderr, "host_app: a feed of the wrong shape was not a kiln::Error\n");
    return 1;
  }
  std::printf("host_app: kiln links and trains the seed model (loss %g)\n", last);
  return 0;
}

// save_load: train a small model, export it for inference with
// save_inference_model (its for-test, pruned program as JSON + its weights,
// kiln/io/inference_model.h), then load it with load_inference_model in a
// fresh process and check that its predictions are bit-identical.
//
//   save_load [dir]        train, save into dir (default: a new /tmp dir), then
//                          run `save_load --load dir` as a separate process
//   save_load --load dir   load dir/model.json + dir/model.weights, predict,
//                          compare with dir/expected.bin
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/executor.h"
#include "kiln/frontend/frontend.h"
#include "kiln/frontend/optimizer.h"
#include "kiln/io/inference_model.h"

namespace {

constexpr std::int64_t kIn = 4, kHidden = 32, kRows = 8;

// The fixed inputs both processes predict on.
kiln::Tensor probe_input() {
  std::vector<float> xs(kRows * kIn);
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i % 7) * 0.25f - 0.8f;
  return kiln::Tensor::from_vector<float>({kRows, kIn}, xs);
}

std::vector<char> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

int save(const std::string& dir, const char* self) {
  kiln::Program main_prog, startup;
  kiln::Value pred;
  {
    kiln::ProgramGuard guard(main_prog, startup);
    auto x = kiln::data("x", {-1, kIn});
    kiln::nn::Linear fc1(kIn, kHidden), fc2(kHidden, 1);
    pred = fc2(kiln::nn::functional::tanh(fc1(x)));
    auto y = kiln::data("y", {-1, 1});
    auto loss = kiln::nn::MSELoss()(pred, y);
    kiln::optim::Adam(0.01).minimize(loss);
  }
  kiln::Executor exe;
  exe.run(startup);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> xs(64 * kIn), ys(64);
  for (int step = 0; step < 200; ++step) {  // fit y = x0·x1 − x2 + 0.5·x3
    for (auto& v : xs) v = u(rng);
    for (int i = 0; i < 64; ++i) ys[i] = xs[i * 4] * xs[i * 4 + 1] - xs[i * 4 + 2] + 0.5f * xs[i * 4 + 3];
    exe.run(main_prog, {{"x", kiln::Tensor::from_vector<float>({64, kIn}, xs)},
                        {"y", kiln::Tensor::from_vector<float>({64, 1}, ys)}});
  }

  // The program to export is the training one: save_inference_model drops
  // the backward and optimizer ops and keeps what `pred` needs from `x`.
  kiln::save_inference_model(dir + "/model", {"x"}, {pred}, main_prog, exe.scope());
  kiln::IrMapping map;
  kiln::Program test = kiln::clone_for_test(main_prog, &map);
  // The for-test program still computes the loss: it is fed a label too.
  const kiln::Tensor y0 = kiln::Tensor::from_vector<float>({kRows, 1}, std::vector<float>(kRows, 0.f));
  auto expected = exe.run(test, {{"x", probe_input()}, {"y", y0}}, {map.lookup(pred)})[0]
                      .to_vector<float>();
  std::ofstream(dir + "/expected.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(expected.data()),
             static_cast<std::streamsize>(expected.size() * 4));
  std::printf("saved %s/model.json and %s/model.weights\n", dir.c_str(), dir.c_str());

  std::fflush(stdout);  // before the child's output
  const std::string cmd = std::string("'") + self + "' --load '" + dir + "'";
  const int status = std::system(cmd.c_str());
  return status == 0 ? 0 : 1;
}

int load(const std::string& dir) {
  kiln::Executor exe;
  kiln::InferenceModel model = kiln::load_inference_model(dir + "/model", exe.scope());
  auto pred = exe.run(model.program, {{model.feed_names.at(0), probe_input()}},
                      model.fetch_targets)[0].to_vector<float>();
  auto expected = read_file(dir + "/expected.bin");
  const bool same = expected.size() == pred.size() * 4 &&
                    std::memcmp(expected.data(), pred.data(), expected.size()) == 0;
  std::printf("process %d loaded the model (%zu parameters, feed '%s'): predictions %s (first %.6f)\n",
              static_cast<int>(getpid()), model.program.parameters().size(),
              model.feed_names.at(0).c_str(), same ? "bit-identical" : "DIFFER",
              pred.empty() ? 0.0 : pred[0]);
  return same ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 3 && std::string(argv[1]) == "--load") return load(argv[2]);
    if (argc == 2) return save(argv[1], argv[0]);
    char tmpl[] = "/tmp/kiln_save_load_XXXXXX";
    if (!mkdtemp(tmpl)) return std::perror("mkdtemp"), 1;
    const int rc = save(tmpl, argv[0]);
    std::filesystem::remove_all(tmpl);  // ours: leave nothing behind
    return rc;
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "save_load: %s\n", e.what());
    return 1;
  }
}

// Writes the inputs of the `kiln-onnx export` tests into the directory given
// as argv[1]: mlp.json / mlp.weights, a trained-shaped MLP saved by
// save_inference_model (feed "x", fetch "probs"), and print.json /
// print.weights, a program whose fetch goes through kiln.print, an op with
// no ONNX equivalent.
#include <cstdio>
#include <string>

#include "kiln/extension.h"

int main(int argc, char** argv) try {
  if (argc != 2) {
    std::fputs("usage: export_fixtures OUTDIR\n", stderr);
    return 2;
  }
  const std::string dir = argv[1];
  {
    kiln::Program main, startup;
    kiln::Value probs;
    {
      kiln::ProgramGuard guard(main, startup);
      auto x = kiln::data("x", {-1, 4});
      auto label = kiln::data("label", {-1}, kiln::DataType::Int64);
      auto logits = kiln::nn::Linear(8, 3)(kiln::nn::ReLU()(kiln::nn::Linear(4, 8)(x)));
      probs = kiln::nn::Softmax()(logits);
      kiln::main_builder().create<kiln::FetchOp>(probs, "probs");
      kiln::optim::SGD(0.1).minimize(kiln::nn::functional::cross_entropy(logits, label));
    }
    kiln::Executor exe;
    exe.run(startup);
    kiln::save_inference_model(dir + "/mlp", {"x"}, {probs}, main, exe.scope());
  }
  {
    kiln::Program main, startup;
    {
      kiln::ProgramGuard guard(main, startup);
      auto x = kiln::data("x", {-1, 4});
      auto b = kiln::main_builder();
      auto h = b.create<kiln::PrintOp>(kiln::nn::Linear(4, 2)(x)).result();
      b.create<kiln::FetchOp>(h, "out");
    }
    kiln::Executor exe;
    exe.run(startup);
    kiln::save_program_file(main, dir + "/print.json");
    kiln::save_weights(dir + "/print.weights", exe.scope(), main);
  }
  return 0;
} catch (const kiln::Error& e) {
  std::fprintf(stderr, "export_fixtures: %s\n", e.what());
  return 1;
}

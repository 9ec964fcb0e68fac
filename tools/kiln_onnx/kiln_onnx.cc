// kiln-onnx: ONNX models from the command line.
//
//   kiln-onnx info MODEL    opset, inputs and outputs (dtypes, dims with
//                           their symbolic names), initializers, op counts
//   kiln-onnx export PROGRAM WEIGHTS OUT.onnx [--feed NAME]... [--fetch NAME]...
//                           a kiln program (JSON, kiln/io/json.h) and its
//                           weights file (kiln/io/weights.h) — e.g. what
//                           save_inference_model writes — as an ONNX model
//                           (kiln/onnx/export.h). --feed names kiln.data ops
//                           (default: every one, in program order), --fetch
//                           kiln.fetch ops (default: every one); both repeat.
//
// Exit status: 0, or 1 with the error on stderr (a file that cannot be read
// or is not an ONNX model / kiln program / weights file, an unknown feed or
// fetch, an op with no ONNX equivalent, an output that cannot be written),
// 2 for a bad command line.
#include <cstdio>
#include <string>
#include <vector>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/io/json.h"
#include "kiln/io/weights.h"
#include "kiln/onnx/export.h"
#include "kiln/onnx/model_info.h"
#include "kiln/support/error.h"

namespace {

int usage() {
  std::fputs(
      "usage: kiln-onnx info MODEL\n"
      "       kiln-onnx export PROGRAM WEIGHTS OUT.onnx [--feed NAME]... [--fetch NAME]...\n",
      stderr);
  return 2;
}

int export_command(int argc, char** argv) {
  std::vector<std::string> positional, feeds;
  std::vector<kiln::FetchTarget> fetches;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--feed" || a == "--fetch") {
      if (i + 1 >= argc) return usage();
      if (a == "--feed") feeds.emplace_back(argv[++i]);
      else fetches.emplace_back(std::string(argv[++i]));
    } else if (a.rfind("--", 0) == 0) {
      return usage();
    } else {
      positional.push_back(a);
    }
  }
  if (positional.size() != 3) return usage();
  const kiln::Program program = kiln::load_program_file(positional[0]);
  kiln::Scope scope;
  kiln::load_weights(positional[1], scope, program);
  const bool all_feeds = feeds.empty(), all_fetches = fetches.empty();
  for (kiln::Operation* op = program.block().front(); op; op = op->next_in_block()) {
    if (auto d = kiln::DataOp::dyn_cast(op); d && all_feeds) feeds.push_back(d.attrs().name);
    if (auto f = kiln::FetchOp::dyn_cast(op); f && all_fetches)
      fetches.emplace_back(f.attrs().name);
  }
  kiln::onnx::export_model(program, scope, feeds, fetches, positional[2]);
  std::printf("wrote %s (%zu inputs, %zu outputs)\n", positional[2].c_str(), feeds.size(),
              fetches.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string cmd = argv[1];
  try {
    if (cmd == "info" && argc == 3) {
      std::fputs(kiln::onnx::to_string(kiln::onnx::read_model_info(argv[2])).c_str(), stdout);
      return 0;
    }
    if (cmd == "export") return export_command(argc, argv);
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "kiln-onnx %s: %s\n", cmd.c_str(), e.what());
    return 1;
  }
  return usage();
}

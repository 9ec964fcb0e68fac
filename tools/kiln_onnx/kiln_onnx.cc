// kiln-onnx: ONNX models from the command line.
//
//   kiln-onnx info MODEL    opset, inputs and outputs (dtypes, dims with
//                           their symbolic names), initializers, op counts
//
// Exit status: 0, or 1 with the error on stderr (a file that cannot be read
// or is not an ONNX model), 2 for a bad command line.
#include <cstdio>
#include <string>

#include "kiln/onnx/model_info.h"
#include "kiln/support/error.h"

namespace {

int usage() {
  std::fputs("usage: kiln-onnx info MODEL\n", stderr);
  return 2;
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
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "kiln-onnx %s: %s\n", cmd.c_str(), e.what());
    return 1;
  }
  return usage();
}

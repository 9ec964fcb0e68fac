// kiln::onnx::read_model_info (kiln/onnx/model_info.h) on models of ONNX's
// backend test suite, and the errors for files that are not ONNX models.
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <thread>

#include "catch.hpp"
#include "kiln/onnx/model_info.h"
#include "test_util.h"

using namespace kiln;

namespace {

std::string temp_file(const std::string& name, const std::string& bytes) {
  const std::string path = "/tmp/kiln_onnx_test_" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// ONNX's backend test suite as Debian's libonnx-testdata installs it.
constexpr const char* kSuite = "/usr/share/libonnx-testdata/data";

bool have_suite() {
  if (std::filesystem::is_directory(kSuite)) return true;
  WARN("libonnx-testdata is not installed: the suite-model checks are skipped");
  return false;
}

std::string suite_model(const std::string& test) {
  return std::string(kSuite) + "/" + test + "/model.onnx";
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("model info lists a suite model's opset, inputs, outputs and op counts", "[onnx]") {
  if (!have_suite()) return;
  onnx::ModelInfo info = onnx::read_model_info(suite_model("node/test_add"));
  CHECK(info.opsets.count(""));
  CHECK(info.opsets.at("") >= 7);
  REQUIRE(info.inputs.size() == 2);
  CHECK(info.inputs[0].name == "x");
  CHECK(info.inputs[0].elem_type == "float");
  CHECK(info.inputs[0].dims == std::vector<std::int64_t>{3, 4, 5});
  REQUIRE(info.outputs.size() == 1);
  CHECK(info.op_counts == std::map<std::string, std::size_t>{{"Add", 1}});
  CHECK(info.num_initializers == 0);
  const std::string text = onnx::to_string(info);
  CHECK_THAT(text, Catch::Contains("input x: float [3, 4, 5]"));
  CHECK_THAT(text, Catch::Contains("  Add 1"));
}

TEST_CASE("model info counts the nodes of subgraphs and leaves initializers out of the inputs",
          "[onnx]") {
  if (!have_suite()) return;
  onnx::ModelInfo loop = onnx::read_model_info(suite_model("node/test_loop11"));
  CHECK(loop.op_counts.at("Loop") == 1);
  CHECK(loop.num_nodes > 1);  // the body's nodes count too
  // A converted PyTorch model: weights are initializers, not inputs.
  onnx::ModelInfo conv = onnx::read_model_info(suite_model("pytorch-converted/test_Conv2d"));
  CHECK(conv.num_initializers > 0);
  CHECK(conv.inputs.size() == 1);
  CHECK(conv.op_counts.count("Conv"));
}

TEST_CASE("a truncated ONNX model is a clear error naming the file", "[onnx]") {
  if (!have_suite()) return;
  const std::string bytes = file_bytes(suite_model("pytorch-converted/test_Conv2d"));
  REQUIRE(bytes.size() > 100);
  const std::string path = temp_file("truncated.onnx", bytes.substr(0, bytes.size() / 2));
  KILN_CHECK_ERROR(onnx::read_model_info(path), InvalidArgument,
                   {"truncated.onnx", "not a valid ONNX ModelProto"});
}
TEST_CASE("a file that is not ONNX, a missing file and a folder are clear errors naming the file",
          "[onnx]") {
  const std::string text = temp_file("text.onnx", "this is not a protobuf message at all\n");
  KILN_CHECK_ERROR(onnx::read_model_info(text), InvalidArgument, {"text.onnx", "ONNX"});
  KILN_CHECK_ERROR(onnx::read_model_info("/nonexistent/model.onnx"), NotFound,
                   {"/nonexistent/model.onnx", "No such file"});
  const std::string folder = std::filesystem::temp_directory_path().string();
  KILN_CHECK_ERROR(onnx::read_model_info(folder), InvalidArgument, {"'" + folder + "'", "folder"});
  // Valid protobuf, but no graph: an empty file parses as an empty message.
  const std::string empty = temp_file("empty.onnx", "");
  KILN_CHECK_ERROR(onnx::read_model_info(empty), InvalidArgument, {"empty.onnx", "no graph"});
  KILN_CHECK_ERROR(onnx::read_model_info_from_bytes("\x08\x07", "bytes"), InvalidArgument,
                   {"bytes", "no graph"});
}

TEST_CASE("a model read through a pipe in many chunks gives the info its file gives", "[onnx]") {
  const char* root = std::getenv("KILN_SOURCE_ROOT");
  const std::string file = std::string(root ? root : ".") + "/test/onnx/models/lenet/model.onnx";
  if (!std::filesystem::exists(file)) {
    WARN("KILN_SOURCE_ROOT is not set (meson test sets it): " << file << " not found, skipped");
    return;
  }
  const std::string bytes = file_bytes(file);
  REQUIRE(bytes.size() > 3 * 65536);  // more than one read of the pipe
  const std::string fifo = "/tmp/kiln_onnx_test_fifo_" + std::to_string(::getpid()) + ".onnx";
  std::remove(fifo.c_str());
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::thread writer([&] {  // EPIPE instead of SIGPIPE if the reader gives up
    sigset_t pipe_signal;
    sigemptyset(&pipe_signal);
    sigaddset(&pipe_signal, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_signal, nullptr);
    const int fd = ::open(fifo.c_str(), O_WRONLY);
    for (std::size_t at = 0; fd >= 0 && at < bytes.size();) {
      const ssize_t n = ::write(fd, bytes.data() + at, bytes.size() - at);
      if (n <= 0) break;
      at += static_cast<std::size_t>(n);
    }
    if (fd >= 0) ::close(fd);
  });
  std::optional<onnx::ModelInfo> piped;
  std::string error;
  try {
    piped = onnx::read_model_info(fifo);
  } catch (const std::exception& e) {
    error = e.what();
    ::close(::open(fifo.c_str(), O_RDONLY | O_NONBLOCK));  // lets a writer still opening go
  }
  writer.join();
  std::remove(fifo.c_str());
  REQUIRE(error.empty());
  CHECK(onnx::to_string(*piped) == onnx::to_string(onnx::read_model_info(file)));
}

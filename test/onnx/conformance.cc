// ONNX backend-test conformance: imports every model of ONNX's own test
// suite (Debian's libonnx-testdata), runs each of its data sets through the
// Executor and compares with the expected outputs, with the tolerances of
// ONNX's backend runner (rtol 1e-3, atol 1e-7; integers and bools exact).
// Each test ends as exactly one of
//   passed       every output of every data set matches
//   unsupported  the import raised a kiln::Error naming what kiln lacks
//   wrong        it ran and an output differs (a bug)
//   crashed      anything else: an error while running, a foreign exception
// Prints one line per test that is not "passed" or "unsupported", the
// unsupported reasons counted by op, and last
//   ONNX conformance: P passed, U unsupported, W wrong, C crashed of N
// Exit status 1 when W + C > 0.
//
//   onnx_conformance [-v] [SUITE_DIR]   (default /usr/share/libonnx-testdata/data)
// -v also prints one line per unsupported test with kiln's message.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "kiln/exec/executor.h"
#include "kiln/onnx/import.h"
#include "kiln/support/error.h"

namespace fs = std::filesystem;
using namespace kiln;

namespace {

std::vector<fs::path> sorted_entries(const fs::path& dir, const std::string& prefix) {
  std::vector<fs::path> v;
  if (!fs::is_directory(dir)) return v;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind(prefix, 0) == 0) v.push_back(e.path());
  // input_10 after input_9: by the number after the prefix when there is one.
  std::sort(v.begin(), v.end(), [&](const fs::path& a, const fs::path& b) {
    auto num = [&](const fs::path& p) {
      const std::string s = p.stem().string().substr(prefix.size());
      return s.empty() || !std::isdigit(static_cast<unsigned char>(s[0])) ? -1L : std::stol(s);
    };
    return num(a) != num(b) ? num(a) < num(b) : a < b;
  });
  return v;
}

// "" when they match, else what differs.
std::string compare(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype())
    return "dtype " + std::string(to_string(got.dtype())) + ", expected " +
           std::string(to_string(want.dtype()));
  if (got.dims() != want.dims())
    return "dims [" + got.dims().to_string() + "], expected [" + want.dims().to_string() + "]";
  auto check = [&](auto tag) -> std::string {
    using T = decltype(tag);
    const T* a = got.data<T>();
    const T* b = want.data<T>();
    for (std::int64_t i = 0; i < got.numel(); ++i) {
      const double x = static_cast<double>(a[i]), y = static_cast<double>(b[i]);
      bool ok;
      if constexpr (std::is_floating_point_v<T>)
        ok = (std::isnan(x) && std::isnan(y)) || x == y || std::abs(x - y) <= 1e-7 + 1e-3 * std::abs(y);
      else
        ok = x == y;
      if (!ok)
        return "element " + std::to_string(i) + ": " + std::to_string(x) + ", expected " +
               std::to_string(y);
    }
    return "";
  };
  switch (got.dtype()) {
    case DataType::Float32: return check(float());
    case DataType::Float64: return check(double());
    case DataType::Int32: return check(std::int32_t());
    case DataType::Int64: return check(std::int64_t());
    case DataType::Bool: return check(bool());
    default: return "dtype " + std::string(to_string(got.dtype())) + " not compared";
  }
}

// The op type a message names ("... (Softmax): ..."), for the tally.
std::string op_of(const std::string& message) {
  auto close = message.find("): ");
  auto open = close == std::string::npos ? close : message.rfind('(', close);
  if (open == std::string::npos) return "(model)";
  return message.substr(open + 1, close - open - 1);
}

}  // namespace

int main(int argc, char** argv) {
  bool verbose = false;
  fs::path suite = "/usr/share/libonnx-testdata/data";
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "-v") verbose = true;
    else suite = argv[i];
  }
  int passed = 0, unsupported = 0, wrong = 0, crashed = 0;
  std::map<std::string, int> unsupported_by_op;
  for (const char* folder : {"node", "pytorch-converted", "pytorch-operator", "simple"}) {
    for (const fs::path& test : sorted_entries(suite / folder, "test_")) {
      const std::string name = std::string(folder) + "/" + test.filename().string();
      onnx::ImportedModel m;
      try {
        m = onnx::import_model((test / "model.onnx").string());
      } catch (const Error& e) {
        ++unsupported;
        ++unsupported_by_op[op_of(e.message())];
        if (verbose) std::printf("unsupported %s: %s\n", name.c_str(), e.message().c_str());
        continue;
      } catch (const std::exception& e) {
        std::printf("crashed %s: import threw %s\n", name.c_str(), e.what());
        ++crashed;
        continue;
      }
      std::string failure;
      bool ran_wrong = false;
      try {
        Executor exe;
        exe.run(m.startup);  // the initializers
        for (const fs::path& set : sorted_entries(test, "test_data_set_")) {
          FeedMap feed;
          const auto ins = sorted_entries(set, "input_");
          for (std::size_t i = 0; i < ins.size() && i < m.inputs.size(); ++i)
            feed[m.inputs[i]] = onnx::read_tensor_proto(ins[i].string());
          std::vector<FetchTarget> fetch(m.outputs.begin(), m.outputs.end());
          auto got = exe.run(m.main, feed, fetch);
          const auto outs = sorted_entries(set, "output_");
          for (std::size_t k = 0; k < outs.size() && k < got.size() && failure.empty(); ++k) {
            const std::string d = compare(got[k], onnx::read_tensor_proto(outs[k].string()));
            if (!d.empty()) {
              failure = set.filename().string() + " output '" + m.outputs[k] + "': " + d;
              ran_wrong = true;
            }
          }
          if (!failure.empty()) break;
        }
      } catch (const Error& e) {
        // The data set's tensor is of a dtype kiln lacks: unsupported, not run.
        if (e.kind() == ErrorKind::Unimplemented && e.message().find("ONNX tensor") == 0) {
          ++unsupported;
          ++unsupported_by_op["(test data dtype)"];
          if (verbose) std::printf("unsupported %s: %s\n", name.c_str(), e.message().c_str());
          continue;
        }
        failure = std::string("run: ") + e.what();
      } catch (const std::exception& e) {
        failure = std::string("run threw: ") + e.what();
      }
      if (failure.empty()) {
        ++passed;
      } else if (ran_wrong) {
        ++wrong;
        std::printf("wrong %s: %s\n", name.c_str(), failure.c_str());
      } else {
        ++crashed;
        std::printf("crashed %s: %s\n", name.c_str(), failure.c_str());
      }
    }
  }
  std::vector<std::pair<std::string, int>> ops(unsupported_by_op.begin(), unsupported_by_op.end());
  std::stable_sort(ops.begin(), ops.end(), [](auto& a, auto& b) { return a.second > b.second; });
  std::printf("unsupported, by op:");
  for (const auto& [op, n] : ops) std::printf(" %s %d,", op.c_str(), n);
  std::printf("\nONNX conformance: %d passed, %d unsupported, %d wrong, %d crashed of %d\n", passed,
              unsupported, wrong, crashed, passed + unsupported + wrong + crashed);
  return wrong + crashed > 0 ? 1 : 0;
}

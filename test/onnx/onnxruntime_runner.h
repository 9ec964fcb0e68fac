// Runs an ONNX model in ONNX Runtime — npm's onnxruntime-node, driven by
// test/onnx/onnxruntime_run.js — for tests that compare kiln with it.
// ./run test installs it and names its node_modules folder in
// KILN_ORT_NODE_PATH; without it have_onnxruntime() warns and is false.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "catch.hpp"
#include "kiln/runtime/tensor.h"

namespace kiln_test {

using kiln::DataType;
using kiln::Dims;
using kiln::Tensor;
namespace fs = std::filesystem;

inline bool have_onnxruntime() {
  if (std::getenv("KILN_ORT_NODE_PATH") && std::getenv("KILN_SOURCE_ROOT")) return true;
  WARN("KILN_ORT_NODE_PATH / KILN_SOURCE_ROOT not set (./run test sets them): ONNX Runtime "
       "tests skipped");
  return false;
}

inline std::string ort_dtype(DataType t) {
  switch (t) {
    case DataType::Float32: return "float32";
    case DataType::Float64: return "float64";
    case DataType::Int32: return "int32";
    case DataType::Int64: return "int64";
    case DataType::Bool: return "bool";
    default: FAIL("dtype " << kiln::to_string(t) << " not handled"); return "";
  }
}

inline DataType kiln_dtype(const std::string& t) {
  if (t == "float32") return DataType::Float32;
  if (t == "float64") return DataType::Float64;
  if (t == "int32") return DataType::Int32;
  if (t == "int64") return DataType::Int64;
  if (t == "bool") return DataType::Bool;
  FAIL("ONNX Runtime output dtype " << t);
  return DataType::Undefined;
}

// The model's outputs for `inputs`, computed by ONNX Runtime.
inline std::vector<Tensor> run_in_onnxruntime(const std::string& model,
                                              const std::vector<std::pair<std::string, Tensor>>& inputs) {
  const fs::path dir = fs::temp_directory_path() / ("kiln_ort_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "model.onnx", std::ios::binary) << model;
  nlohmann::json desc = nlohmann::json::array();
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i].second;
    const std::string file = "input_" + std::to_string(i) + ".bin";
    std::ofstream(dir / file, std::ios::binary)
        .write(static_cast<const char*>(t.raw_data()), static_cast<std::streamsize>(t.bytes()));
    desc.push_back({{"name", inputs[i].first}, {"dtype", ort_dtype(t.dtype())},
                    {"dims", t.dims().to_vector()}, {"file", file}});
  }
  std::ofstream(dir / "inputs.json") << desc.dump();
  const std::string script =
      std::string(std::getenv("KILN_SOURCE_ROOT")) + "/test/onnx/onnxruntime_run.js";
  const std::string cmd = "NODE_PATH='" + std::string(std::getenv("KILN_ORT_NODE_PATH")) +
                          "' node '" + script + "' '" + (dir / "model.onnx").string() + "' '" +
                          dir.string() + "' 2>&1";
  std::string log;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) log.append(buf, n);
  const int st = pclose(p);
  INFO(log);
  REQUIRE((WIFEXITED(st) && WEXITSTATUS(st) == 0));
  std::vector<Tensor> outs;
  for (const auto& o : nlohmann::json::parse(std::ifstream(dir / "outputs.json"))) {
    Tensor t = Tensor::empty(Dims(o["dims"].get<std::vector<std::int64_t>>()),
                             kiln_dtype(o["dtype"].get<std::string>()));
    std::ifstream(dir / o["file"].get<std::string>(), std::ios::binary)
        .read(static_cast<char*>(t.raw_data()), static_cast<std::streamsize>(t.bytes()));
    outs.push_back(std::move(t));
  }
  fs::remove_all(dir);
  return outs;
}

}  // namespace kiln_test

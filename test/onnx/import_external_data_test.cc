// ONNX external data: initializers whose bytes live in a side file beside
// the model (data_location EXTERNAL; location, offset, length). Models and
// side files are written here with ONNX's protobuf classes into a temporary
// folder: they import and run with the right values, through
// import_model(path), import_model_from_bytes with a folder, and the
// kiln-onnx tool; each broken form is a kiln::Error naming the tensor and
// the side file.
#include <onnx/onnx_pb.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "catch.hpp"
#include "kiln/exec/executor.h"
#include "kiln/onnx/import.h"
#include "kiln/support/error.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace {

const std::vector<float> kW{1, 2, 3, 4, 5, 6};  // [3, 2]
const std::vector<float> kB{0.5f, -1.0f};        // [2]
constexpr std::int64_t kBOffset = 32;            // B after W (24 bytes) and 8 bytes of padding

// A fresh temporary folder of its own.
fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("kiln_external_data_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out);
}

std::string float_bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

// The side file: W at 0, 8 bytes of padding, B at kBOffset.
std::string side_file() {
  return float_bytes(kW) + std::string(8, '\0') + float_bytes(kB);
}

// An initializer with external data; `entries` are its external_data
// key/value pairs (empty values are left out).
void add_external(::onnx::GraphProto* g, const std::string& name, const std::vector<std::int64_t>& dims,
                  const std::map<std::string, std::string>& entries) {
  auto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(::onnx::TensorProto_DataType_FLOAT);
  for (auto d : dims) t->add_dims(d);
  t->set_data_location(::onnx::TensorProto_DataLocation_EXTERNAL);
  for (const auto& [k, v] : entries) {
    if (v.empty()) continue;
    auto* e = t->add_external_data();
    e->set_key(k);
    e->set_value(v);
  }
}

// y = x · W + B, x: float [2, 3]; W and B external, with these entries.
std::string model(const std::map<std::string, std::string>& w_entries,
                  const std::map<std::string, std::string>& b_entries) {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  auto* g = m.mutable_graph();
  g->set_name("linear");
  auto* in = g->add_input();
  in->set_name("x");
  auto* tt = in->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(::onnx::TensorProto_DataType_FLOAT);
  tt->mutable_shape()->add_dim()->set_dim_value(2);
  tt->mutable_shape()->add_dim()->set_dim_value(3);
  add_external(g, "W", {3, 2}, w_entries);
  add_external(g, "B", {2}, b_entries);
  auto* mm = g->add_node();
  mm->set_op_type("MatMul");
  mm->set_name("matmul");
  mm->add_input("x");
  mm->add_input("W");
  mm->add_output("xw");
  auto* add = g->add_node();
  add->set_op_type("Add");
  add->set_name("add");
  add->add_input("xw");
  add->add_input("B");
  add->add_output("y");
  g->add_output()->set_name("y");
  std::string bytes;
  REQUIRE(m.SerializeToString(&bytes));
  return bytes;
}

std::map<std::string, std::string> w_at(const std::string& location) {
  return {{"location", location}, {"offset", "0"}, {"length", "24"}};
}
std::map<std::string, std::string> b_at(const std::string& location) {
  return {{"location", location}, {"offset", std::to_string(kBOffset)}, {"length", "8"}};
}

const std::vector<float> kX{1, 0, -1, 2, 1, 0};
// x · W + B by hand: row 0 = (1-5, 2-6) + B, row 1 = (2+3, 4+4) + B.
const std::vector<float> kY{-3.5f, -5.0f, 5.5f, 7.0f};

void check_runs(kiln::onnx::ImportedModel& m) {
  kiln::Executor exe;
  exe.run(m.startup);
  const kiln::Tensor x = kiln::Tensor::from_vector<float>(kiln::Dims(std::vector<std::int64_t>{2, 3}), kX);
  kiln::FeedMap feed;
  feed["x"] = x;
  const std::vector<kiln::FetchTarget> fetch{std::string("y")};
  std::vector<kiln::Tensor> out = exe.run(m.main, feed, fetch);
  REQUIRE(out.size() == 1);
  const auto y = out[0].to_vector<float>();
  REQUIRE(y.size() == kY.size());
  for (std::size_t i = 0; i < y.size(); ++i) CHECK(y[i] == Approx(kY[i]));
}

}  // namespace

TEST_CASE("ONNX initializers kept in a side file at offsets load relative to the model's folder "
          "and run with their values",
          "[onnx]") {
  const fs::path dir = fresh_dir("loads");
  fs::create_directories(dir / "weights");
  write_file(dir / "weights" / "linear.bin", side_file());
  const std::string bytes = model(w_at("weights/linear.bin"), b_at("weights/linear.bin"));
  write_file(dir / "linear.onnx", bytes);

  SECTION("import_model(path)") {
    kiln::onnx::ImportedModel m = kiln::onnx::import_model((dir / "linear.onnx").string());
    check_runs(m);
    CHECK(kiln::onnx::import_problems((dir / "linear.onnx").string()).empty());
  }
  SECTION("import_model_from_bytes with the folder") {
    kiln::onnx::ImportedModel m = kiln::onnx::import_model_from_bytes(bytes, "linear", dir.string());
    check_runs(m);
  }
  SECTION("no length: the rest of the file") {
    auto b = b_at("weights/linear.bin");
    b.erase("length");
    kiln::onnx::ImportedModel m =
        kiln::onnx::import_model_from_bytes(model(w_at("weights/linear.bin"), b), "linear", dir.string());
    check_runs(m);
  }
  SECTION("a model file in the working folder (a path without a folder)") {
    const fs::path cwd = fs::current_path();
    fs::current_path(dir);
    kiln::onnx::ImportedModel m;
    CHECK_NOTHROW(m = kiln::onnx::import_model("linear.onnx"));
    fs::current_path(cwd);
    check_runs(m);
  }
  fs::remove_all(dir);
}

TEST_CASE("ONNX external data from bytes without a folder is an error saying how to give one",
          "[onnx]") {
  KILN_CHECK_ERROR(kiln::onnx::import_model_from_bytes(model(w_at("w.bin"), b_at("w.bin")), "linear"),
                   InvalidArgument, {"initializer 'W'", "'w.bin'", "folder is unknown"});
}

TEST_CASE("ONNX external data errors name the tensor and the side file", "[onnx]") {
  const fs::path dir = fresh_dir("errors");
  write_file(dir / "linear.bin", side_file());
  const std::string d = dir.string();
  auto import = [&](const std::map<std::string, std::string>& w, const std::map<std::string, std::string>& b) {
    return kiln::onnx::import_model_from_bytes(model(w, b), "linear", d);
  };

  SECTION("a missing side file") {
    KILN_CHECK_ERROR(import(w_at("linear.bin"), b_at("missing.bin")), NotFound,
                     {"initializer 'B'", "'missing.bin'", "no file"});
  }
  SECTION("an offset past the file's end") {
    auto b = b_at("linear.bin");
    b["offset"] = "4096";
    KILN_CHECK_ERROR(import(w_at("linear.bin"), b), OutOfRange,
                     {"initializer 'B'", "offset 4096", "'linear.bin'", "40 bytes"});
  }
  SECTION("a length past the file's end") {
    auto b = b_at("linear.bin");
    b["offset"] = "36";
    KILN_CHECK_ERROR(import(w_at("linear.bin"), b), OutOfRange,
                     {"initializer 'B'", "8 bytes at offset 36", "'linear.bin'"});
  }
  SECTION("a length that is not the tensor's byte size") {
    auto w = w_at("linear.bin");
    w["length"] = "20";
    KILN_CHECK_ERROR(import(w, b_at("linear.bin")), InvalidArgument,
                     {"initializer 'W'", "20 bytes of 'linear.bin'", "need 24"});
  }
  SECTION("an offset that is not a number") {
    auto w = w_at("linear.bin");
    w["offset"] = "-8";
    KILN_CHECK_ERROR(import(w, b_at("linear.bin")), InvalidArgument,
                     {"initializer 'W'", "offset '-8'"});
  }
  SECTION("no location") {
    KILN_CHECK_ERROR(import({{"offset", "0"}}, b_at("linear.bin")), InvalidArgument,
                     {"initializer 'W'", "names none"});
  }
  SECTION("locations that leave the model's folder") {
    fs::create_directories(dir / "inner");
    const std::string inner = (dir / "inner").string();
    auto from_inner = [&](const std::string& loc) {
      return kiln::onnx::import_model_from_bytes(model(w_at(loc), b_at("linear.bin")), "linear", inner);
    };
    // The file exists there: only the location's form is refused.
    KILN_CHECK_ERROR(from_inner("../linear.bin"), InvalidArgument, {"initializer 'W'", "'../linear.bin'", "'..'"});
    KILN_CHECK_ERROR(from_inner("sub/../../linear.bin"), InvalidArgument, {"initializer 'W'", "'..'"});
    KILN_CHECK_ERROR(from_inner((dir / "linear.bin").string()), InvalidArgument,
                     {"initializer 'W'", "absolute path"});
    fs::create_symlink(dir / "linear.bin", dir / "inner" / "link.bin");
    KILN_CHECK_ERROR(from_inner("link.bin"), InvalidArgument,
                     {"initializer 'W'", "'link.bin'", "outside the model's folder"});
  }
  SECTION("import_problems lists each failing tensor once") {
    write_file(dir / "linear.onnx", model(w_at("nope.bin"), b_at("../linear.bin")));
    const auto problems = kiln::onnx::import_problems((dir / "linear.onnx").string());
    REQUIRE(problems.size() == 2);
    CHECK_THAT(problems[0], Catch::Contains("initializer 'W'") && Catch::Contains("'nope.bin'"));
    CHECK_THAT(problems[1], Catch::Contains("initializer 'B'") && Catch::Contains("'..'"));
  }
  fs::remove_all(dir);
}

namespace {

int tool(const std::string& args, std::string& out) {
  const char* exe = std::getenv("KILN_ONNX_TOOL");
  FILE* p = popen(("'" + std::string(exe) + "' " + args + " 2>&1").c_str(), "r");
  REQUIRE(p);
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

std::string tensor_proto(const std::vector<std::int64_t>& dims, const std::vector<float>& v) {
  ::onnx::TensorProto t;
  t.set_data_type(::onnx::TensorProto_DataType_FLOAT);
  for (auto d : dims) t.add_dims(d);
  t.set_raw_data(float_bytes(v));
  std::string bytes;
  REQUIRE(t.SerializeToString(&bytes));
  return bytes;
}

}  // namespace

TEST_CASE("kiln-onnx info and run read a model's external data", "[onnx][tool]") {
  if (!std::getenv("KILN_ONNX_TOOL")) {
    WARN("KILN_ONNX_TOOL not set (meson test sets it): skipped");
    return;
  }
  const fs::path dir = fresh_dir("tool");
  write_file(dir / "linear.bin", side_file());
  write_file(dir / "linear.onnx", model(w_at("linear.bin"), b_at("linear.bin")));
  fs::create_directories(dir / "data");
  write_file(dir / "data" / "input_0.pb", tensor_proto({2, 3}, kX));
  write_file(dir / "data" / "output_0.pb", tensor_proto({2, 2}, kY));
  std::string info, run;
  CHECK(tool("info " + (dir / "linear.onnx").string(), info) == 0);
  INFO(info);
  CHECK_THAT(info, Catch::Contains("kiln imports every node"));
  CHECK(tool("run " + (dir / "linear.onnx").string() + " --data " + (dir / "data").string(), run) == 0);
  INFO(run);
  CHECK_THAT(run, Catch::Contains("matches"));
  fs::remove_all(dir);
}

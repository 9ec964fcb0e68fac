// Real models exported by PyTorch (bench/peers/onnx_export.py: torch.onnx.export,
// opset 13, a dynamic batch axis), committed under test/onnx/models/ with
// one data set each (PyTorch's output for a sample input): the LeNet-5 and
// the char-transformer GPT of kiln's model benchmarks. They import, give
// PyTorch's outputs, run at other batch sizes, and train.
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "catch.hpp"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/executor.h"
#include "kiln/frontend/amp.h"
#include "kiln/frontend/data.h"
#include "kiln/frontend/functional.h"
#include "kiln/frontend/optimizer.h"
#include "kiln/frontend/program_guard.h"
#include "kiln/onnx/import.h"
#include "kiln/onnx/test_data.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

// test/onnx/models/<name>; empty (and a warning) when the source root is unknown.
fs::path model_dir(const std::string& name) {
  const char* root = std::getenv("KILN_SOURCE_ROOT");
  const fs::path dir = fs::path(root ? root : ".") / "test/onnx/models" / name;
  if (!fs::exists(dir / "model.onnx")) {
    WARN("KILN_SOURCE_ROOT is not set (meson test sets it): " << dir << " not found, skipped");
    return {};
  }
  return dir;
}

// The value the fetch op named `name` returns.
Value fetched(const Program& p, const std::string& name) {
  for (Operation* op : p.block())
    if (op->isa<FetchOp>() && FetchOp(op).attrs().name == name) return op->operand_source(0);
  return {};
}

// The model's output for its data set next to PyTorch's, within `tol`;
// with bf16, the imported program rewritten as mixed precision O1 with its
// convolutions and matmuls in bf16.
void check_matches_pytorch(const fs::path& dir, double tol, bool bf16 = false) {
  onnx::ImportedModel m = onnx::import_model((dir / "model.onnx").string());
  if (bf16)
    CHECK(amp::rewrite(m.main.block(), {.dtype = DataType::BFloat16,
                                        .allow = {"kiln.conv2d", "kiln.fused_conv2d", "kiln.matmul"}})
              .lowered_ops > 0);
  REQUIRE(m.inputs.size() == 1);
  REQUIRE(m.outputs.size() == 1);
  Executor exe;
  exe.run(m.startup);
  Tensor x = onnx::read_tensor_proto((dir / "test_data_set_0/input_0.pb").string());
  Tensor want = onnx::read_tensor_proto((dir / "test_data_set_0/output_0.pb").string());
  Tensor got = exe.run(m.main, {{m.inputs[0], x}}, {m.outputs[0]})[0];
  const auto c = onnx::compare_tensors(got, want, tol, tol);
  INFO(c.first << " (max abs " << c.max_abs << ", max rel " << c.max_rel << ")");
  CHECK(c.matches);
}

}  // namespace

TEST_CASE("a LeNet-5 exported by PyTorch gives PyTorch's logits to 1e-4", "[onnx][models]") {
  const fs::path dir = model_dir("lenet");
  if (dir.empty()) return;
  check_matches_pytorch(dir, 1e-4);
}

TEST_CASE("a LeNet-5 exported by PyTorch, its convolutions and matmuls made bf16 by mixed precision, gives "
          "PyTorch's logits to bf16's precision",
          "[onnx][models][amp]") {
  const fs::path dir = model_dir("lenet");
  if (dir.empty()) return;
  check_matches_pytorch(dir, 3e-2, /*bf16=*/true);
}

TEST_CASE("a char-transformer GPT exported by PyTorch gives PyTorch's logits to 1e-4",
          "[onnx][models]") {
  const fs::path dir = model_dir("gpt");
  if (dir.empty()) return;
  check_matches_pytorch(dir, 1e-4);
}

TEST_CASE("an exported model's dynamic batch axis stays dynamic: each sample's output is the "
          "same at any batch size",
          "[onnx][models]") {
  for (const char* name : {"lenet", "gpt"}) {
    const fs::path dir = model_dir(name);
    if (dir.empty()) return;
    INFO(name);
    onnx::ImportedModel m = onnx::import_model((dir / "model.onnx").string());
    Executor exe;
    exe.run(m.startup);
    const Tensor x = onnx::read_tensor_proto((dir / "test_data_set_0/input_0.pb").string());
    const Tensor want = onnx::read_tensor_proto((dir / "test_data_set_0/output_0.pb").string());
    const std::int64_t batch = x.dims()[0];
    // Batch 1 (the first sample) and 3·batch (the samples three times over).
    for (std::int64_t copies : {0, 3}) {
      std::vector<std::int64_t> dims = x.dims().to_vector();
      dims[0] = copies ? batch * copies : 1;
      Tensor xi = Tensor::empty(Dims(dims), x.dtype());
      const std::size_t per_sample = x.bytes() / static_cast<std::size_t>(batch);
      for (std::int64_t k = 0; k < dims[0]; ++k)
        std::memcpy(static_cast<char*>(xi.raw_data()) + k * per_sample,
                    static_cast<const char*>(x.raw_data()) + (k % batch) * per_sample, per_sample);
      Tensor got = exe.run(m.main, {{m.inputs[0], xi}}, {m.outputs[0]})[0];
      REQUIRE(got.dims()[0] == dims[0]);
      const auto g = got.to_vector<float>();
      const auto w = want.to_vector<float>();
      const std::size_t per_out = w.size() / static_cast<std::size_t>(batch);
      for (std::size_t i = 0; i < g.size(); ++i)
        CHECK(g[i] == Approx(w[i % (per_out * static_cast<std::size_t>(batch))]).margin(1e-4));
    }
  }
}

TEST_CASE("an imported LeNet-5 fine-tunes: Adam steps on its initializers lower the loss",
          "[onnx][models]") {
  const fs::path dir = model_dir("lenet");
  if (dir.empty()) return;
  onnx::ImportedModel m = onnx::import_model((dir / "model.onnx").string());
  Value logits = fetched(m.main, "logits");
  REQUIRE(logits);
  Value loss;
  {
    ProgramGuard guard(m.main, m.startup);
    Value label = data("label", {-1}, DataType::Int64);
    loss = nn::functional::cross_entropy(logits, label);
    optim::Adam(5e-3).minimize(loss);
  }
  Executor exe;
  exe.run(m.startup);
  const Tensor x = onnx::read_tensor_proto((dir / "test_data_set_0/input_0.pb").string());
  Tensor label = Tensor::from_vector<std::int64_t>({8}, {3, 1, 4, 1, 5, 9, 2, 6});
  const FeedMap feed{{m.inputs[0], x}, {"label", label}};
  std::vector<float> losses;
  for (int step = 0; step < 20; ++step) losses.push_back(exe.run(m.main, feed, {loss})[0].to_vector<float>()[0]);
  INFO("loss " << losses.front() << " -> " << losses.back());
  CHECK(std::isfinite(losses.back()));
  CHECK(losses.back() < 0.5f * losses.front());
  // The parameters changed in the scope: the logits for the same input moved.
  Tensor before = onnx::read_tensor_proto((dir / "test_data_set_0/output_0.pb").string());
  Tensor after = exe.run(m.main, feed, {logits})[0];
  CHECK_FALSE(onnx::compare_tensors(after, before, 1e-3, 1e-3).matches);
}

TEST_CASE("an ONNX data set whose tensor does not fit the model's input is a clear error naming "
          "the feed",
          "[onnx][models]") {
  const fs::path dir = model_dir("lenet");
  if (dir.empty()) return;
  onnx::ImportedModel m = onnx::import_model((dir / "model.onnx").string());
  Executor exe;
  exe.run(m.startup);
  Tensor wrong = Tensor::zeros(Dims{2, 3, 28, 28}, DataType::Float32);
  CHECK_THROWS_WITH(exe.run(m.main, {{"image", wrong}}, {m.outputs[0]}),
                    Catch::Contains("image"));
  Tensor ints = Tensor::zeros(Dims{2, 1, 28, 28}, DataType::Int64);
  CHECK_THROWS_WITH(exe.run(m.main, {{"image", ints}}, {m.outputs[0]}),
                    Catch::Contains("image") && Catch::Contains("i64"));
}

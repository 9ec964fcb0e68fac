// kiln::onnx::export_model (kiln/onnx/export.h): inference programs built
// with the frontend (an MLP, a small CNN like examples/digits_cnn, a
// transformer block like examples/char_transformer) exported, checked by
// ONNX's own checker and shape inference, imported back and run against the
// original; dynamic batch; and the errors for what cannot be exported.
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <cmath>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "catch.hpp"
#include "kiln/ir/tensor_attribute.h"
#include "kiln/extension.h"
#include "kiln/onnx/export.h"
#include "kiln/onnx/import.h"
#include "test_util.h"

namespace {

// Deterministic values in [-1, 1).
std::vector<float> values(std::size_t n, unsigned seed) {
  std::vector<float> v(n);
  std::uint32_t s = seed * 2654435761u + 1;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>(s >> 8) / static_cast<float>(1 << 24) * 2.0f - 1.0f;
  }
  return v;
}

// ONNX's full check: the model checker, then shape inference in strict mode
// with type checks (what onnx.checker.check_model(full_check=True) runs).
void full_check(const std::string& bytes) {
  ::onnx::ModelProto m;
  REQUIRE(m.ParseFromString(bytes));
  ::onnx::checker::check_model(m);
  ::onnx::shape_inference::InferShapes(m, ::onnx::OpSchemaRegistry::Instance(),
                                       ::onnx::ShapeInferenceOptions(true, 1, false));
}

::onnx::ModelProto parse(const std::string& bytes) {
  ::onnx::ModelProto m;
  REQUIRE(m.ParseFromString(bytes));
  return m;
}

// Runs the exported bytes through kiln's importer with `feed`; the outputs.
std::vector<kiln::Tensor> run_imported(const std::string& bytes, const kiln::FeedMap& feed) {
  kiln::onnx::ImportedModel m = kiln::onnx::import_model_from_bytes(bytes, "exported");
  kiln::Executor exe;
  exe.run(m.startup);
  std::vector<kiln::FetchTarget> fetch(m.outputs.begin(), m.outputs.end());
  return exe.run(m.main, feed, fetch);
}

void check_close(const kiln::Tensor& got, const kiln::Tensor& want) {
  REQUIRE(got.dims().to_vector() == want.dims().to_vector());
  const auto g = got.to_vector<float>();
  const auto w = want.to_vector<float>();
  for (std::size_t i = 0; i < g.size(); ++i) {
    INFO("element " << i);
    CHECK(g[i] == Approx(w[i]).margin(1e-6).epsilon(1e-6));
  }
}

// The inference form of a training program for `target`: its for-test
// clone pruned to the target (as the examples sample); `*in_test` the
// target's value there.
kiln::Program inference(const kiln::Program& main, kiln::Value target, kiln::Value* in_test) {
  kiln::IrMapping to_clone, to_pruned;
  const kiln::Program clone = kiln::clone_for_test(main, &to_clone);
  kiln::Program pruned = kiln::prune(clone, {to_clone.lookup(target)}, &to_pruned);
  *in_test = to_pruned.lookup(to_clone.lookup(target));
  return pruned;
}

// A trained-shaped MLP: x [-1, 6] → Linear → ReLU → Linear → softmax, with a
// cross-entropy loss and an SGD step in the training program.
struct Mlp {
  kiln::Program main, startup, test;
  kiln::Value probs, test_probs;
  kiln::Executor exe;

  Mlp() {
    kiln::Value loss;
    {
      kiln::ProgramGuard guard(main, startup);
      auto x = kiln::data("x", {-1, 6});
      auto label = kiln::data("label", {-1}, kiln::DataType::Int64);
      kiln::nn::Linear fc1(6, 8), fc2(8, 3);
      auto logits = fc2(kiln::nn::ReLU()(fc1(x)));
      probs = kiln::nn::Softmax()(logits);
      loss = kiln::nn::functional::cross_entropy(logits, label);
      kiln::optim::SGD(0.1).minimize(loss);
    }
    exe.run(startup);
    exe.run(main,
            {{"x", kiln::Tensor::from_vector<float>({4, 6}, values(24, 1))},
             {"label", kiln::Tensor::from_vector<std::int64_t>({4}, {0, 1, 2, 1})}},
            {loss});
    test = inference(main, probs, &test_probs);
  }
};

}  // namespace

TEST_CASE("an exported MLP passes ONNX's full check and imports back to the same outputs",
          "[onnx][export]") {
  Mlp m;
  const std::string bytes =
      kiln::onnx::export_model_to_bytes(m.test, m.exe.scope(), {"x"}, {m.test_probs});
  full_check(bytes);
  const ::onnx::ModelProto model = parse(bytes);
  CHECK(model.opset_import(0).version() == 17);
  CHECK(model.graph().initializer_size() == 4);  // two weights, two biases
  REQUIRE(model.graph().input_size() == 1);
  CHECK(model.graph().input(0).name() == "x");
  CHECK(model.graph().output(0).name() == "fetch_0");

  const kiln::Tensor x = kiln::Tensor::from_vector<float>({5, 6}, values(30, 2));
  const auto want = m.exe.run(m.test, {{"x", x}}, {m.test_probs});
  const auto got = run_imported(bytes, {{"x", x}});
  check_close(got.at(0), want.at(0));
}

TEST_CASE("a data op with an unknown dim exports as a symbolic dim and runs at any batch size",
          "[onnx][export]") {
  Mlp m;
  const std::string bytes =
      kiln::onnx::export_model_to_bytes(m.test, m.exe.scope(), {"x"}, {m.test_probs});
  const ::onnx::ModelProto model = parse(bytes);
  const auto& dim0 = model.graph().input(0).type().tensor_type().shape().dim(0);
  CHECK_FALSE(dim0.has_dim_value());
  CHECK(dim0.dim_param() == "x_dim0");
  CHECK(model.graph().input(0).type().tensor_type().shape().dim(1).dim_value() == 6);

  kiln::onnx::ImportedModel back = kiln::onnx::import_model_from_bytes(bytes);
  kiln::Executor exe;
  exe.run(back.startup);
  for (std::int64_t batch : {2, 7}) {
    INFO("batch " << batch);
    const kiln::Tensor x = kiln::Tensor::from_vector<float>(
        {batch, 6}, values(static_cast<std::size_t>(batch) * 6, static_cast<unsigned>(batch)));
    const auto want = m.exe.run(m.test, {{"x", x}}, {m.test_probs});
    const auto got = exe.run(back.main, {{"x", x}}, {back.outputs[0]});
    check_close(got.at(0), want.at(0));
  }
}

TEST_CASE("an exported CNN like digits_cnn imports back to the same logits", "[onnx][export]") {
  kiln::Program main, startup;
  kiln::Value logits;
  {
    kiln::ProgramGuard guard(main, startup);
    auto x = kiln::data("x", {-1, 1, 8, 8});
    auto label = kiln::data("label", {-1}, kiln::DataType::Int64);
    kiln::nn::Sequential net;
    net.emplace<kiln::nn::Conv2D>(1, 4, 3, /*stride=*/1, /*padding=*/1);
    net.emplace<kiln::nn::ReLU>();
    net.emplace<kiln::nn::MaxPool2D>(2);
    net.emplace<kiln::nn::Conv2D>(4, 6, 3, 1, 1);
    net.emplace<kiln::nn::ReLU>();
    net.emplace<kiln::nn::AvgPool2D>(2);
    net.emplace<kiln::nn::Flatten>();
    net.emplace<kiln::nn::Linear>(6 * 2 * 2, 5);
    logits = net(x);
    auto loss = kiln::nn::functional::cross_entropy(logits, label);
    kiln::optim::Adam(1e-3).minimize(loss);
  }
  kiln::Executor exe;
  exe.run(startup);
  kiln::Value test_logits;
  const kiln::Program test = inference(main, logits, &test_logits);
  const std::string bytes =
      kiln::onnx::export_model_to_bytes(test, exe.scope(), {"x"}, {test_logits});
  full_check(bytes);

  const kiln::Tensor x = kiln::Tensor::from_vector<float>({3, 1, 8, 8}, values(192, 3));
  const auto want = exe.run(test, {{"x", x}}, {test_logits});
  check_close(run_imported(bytes, {{"x", x}}).at(0), want.at(0));
}

TEST_CASE("an exported transformer block with causal attention imports back to the same outputs",
          "[onnx][export]") {
  constexpr std::int64_t kSeq = 6, kModel = 16, kVocab = 11;
  kiln::Program main, startup;
  kiln::Value probs;
  {
    kiln::ProgramGuard guard(main, startup);
    auto ids = kiln::data("ids", {-1, kSeq}, kiln::DataType::Int64);
    kiln::nn::Embedding tok(kVocab, kModel);
    auto pos = kiln::create_parameter("pos_emb", {kSeq, kModel}, kiln::DataType::Float32,
                                      kiln::init::Normal(0.0, 0.5));
    auto b = kiln::main_builder();
    kiln::Value h = b.create<kiln::AddOp>(tok(ids), pos).result();
    kiln::nn::TransformerEncoderLayer block(kModel, 2, 2 * kModel, /*dropout=*/0.1, "gelu");
    h = block(h, /*causal=*/true);
    h = kiln::nn::LayerNorm({kModel})(h);
    auto logits = kiln::nn::Linear(kModel, kVocab)(h);
    probs = kiln::nn::Softmax()(logits);
    b.create<kiln::FetchOp>(probs, "probs");
  }
  kiln::Executor exe;
  exe.run(startup);
  const kiln::Program test = kiln::clone_for_test(main);
  const std::string bytes = kiln::onnx::export_model_to_bytes(test, exe.scope(), {"ids"}, {"probs"});
  full_check(bytes);
  const ::onnx::ModelProto model = parse(bytes);
  std::set<std::string> types;
  for (const auto& n : model.graph().node()) types.insert(n.op_type());
  CHECK(types.count("LayerNormalization"));
  CHECK(types.count("Erf"));  // gelu, composed
  CHECK(model.graph().output(0).name() == "probs");

  kiln::onnx::ImportedModel back = kiln::onnx::import_model_from_bytes(bytes);
  kiln::Executor back_exe;
  back_exe.run(back.startup);
  for (std::int64_t batch : {2, 3}) {  // the batch dim is symbolic
    INFO("batch " << batch);
    std::vector<std::int64_t> tokens(static_cast<std::size_t>(batch * kSeq));
    for (std::size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = static_cast<std::int64_t>((i * 7 + 3) % kVocab);
    const kiln::Tensor ids = kiln::Tensor::from_vector<std::int64_t>({batch, kSeq}, tokens);
    const auto want = exe.run(test, {{"ids", ids}}, {"probs"});
    check_close(back_exe.run(back.main, {{"ids", ids}}, {back.outputs[0]}).at(0), want.at(0));
  }
}

TEST_CASE("a model exported to a file is written whole and imports like the bytes",
          "[onnx][export]") {
  Mlp m;
  const auto dir = std::filesystem::temp_directory_path() / "kiln_export_test";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "mlp.onnx").string();
  kiln::onnx::export_model(m.test, m.exe.scope(), {"x"}, {m.test_probs}, path);
  CHECK(kiln::onnx::import_model(path).outputs == std::vector<std::string>{"fetch_0"});
  ::onnx::checker::check_model(path);
  std::filesystem::remove_all(dir);
}

TEST_CASE("exporting to a path that cannot be written fails and leaves no file", "[onnx][export]") {
  Mlp m;
  const std::string path = "/nonexistent-kiln-dir/model.onnx";
  KILN_CHECK_ERROR(kiln::onnx::export_model(m.test, m.exe.scope(), {"x"}, {m.test_probs}, path),
                   Unavailable, {"/nonexistent-kiln-dir/model.onnx"});
  CHECK_FALSE(std::filesystem::exists(path));
}

TEST_CASE("export names an unknown feed, a repeated feed and a feed the fetches need but lack",
          "[onnx][export]") {
  Mlp m;
  KILN_CHECK_ERROR(kiln::onnx::export_model_to_bytes(m.test, m.exe.scope(), {"y"}, {m.test_probs}),
                   NotFound, {"feed 'y'", "no kiln.data op"});
  KILN_CHECK_ERROR(
      kiln::onnx::export_model_to_bytes(m.test, m.exe.scope(), {"x", "x"}, {m.test_probs}),
      InvalidArgument, {"feed 'x'", "twice"});
  KILN_CHECK_ERROR(kiln::onnx::export_model_to_bytes(m.test, m.exe.scope(), {}, {m.test_probs}),
                   InvalidArgument, {"kiln.data 'x'", "not among the feeds"});
}

TEST_CASE("export names an unknown fetch and a fetch the program does not compute",
          "[onnx][export]") {
  Mlp m;
  KILN_CHECK_ERROR(kiln::onnx::export_model_to_bytes(m.test, m.exe.scope(), {"x"}, {"nope"}),
                   NotFound, {"fetch #0 'nope'", "no kiln.fetch op"});
  // m.probs is a value of the training program, not of its for-test clone.
  KILN_CHECK_ERROR(kiln::onnx::export_model_to_bytes(m.test, m.exe.scope(), {"x"}, {m.probs}),
                   InvalidArgument, {"fetch #0", "not computed by the program"});
  KILN_CHECK_ERROR(kiln::onnx::export_model_to_bytes(m.test, m.exe.scope(), {"x"}, {}),
                   InvalidArgument, {"no fetches"});
}

TEST_CASE("an op with no ONNX equivalent is an error naming its kind and position",
          "[onnx][export]") {
  kiln::Program main, startup;
  kiln::Value out;
  {
    kiln::ProgramGuard guard(main, startup);
    auto x = kiln::data("x", {2, 3});
    auto b = kiln::main_builder();
    out = b.create<kiln::PrintOp>(b.create<kiln::ReluOp>(x).result()).result();
  }
  kiln::Scope scope;
  KILN_CHECK_ERROR(kiln::onnx::export_model_to_bytes(main, scope, {"x"}, {out}), Unimplemented,
                   {"op #2 'kiln.print'", "no ONNX equivalent"});
}

TEST_CASE("a training program's attention dropout is an export error; its for-test clone exports without it",
          "[onnx][export][dropout]") {
  kiln::Program main, startup;
  kiln::Value out;
  {
    kiln::ProgramGuard guard(main, startup);
    auto x = kiln::data("x", {2, 5, 8});
    out = kiln::nn::MultiHeadAttention(8, 2, true, kiln::DataType::Float32, 0.3)(x, true);
  }
  kiln::Executor exe;
  exe.run(startup);
  KILN_CHECK_ERROR(kiln::onnx::export_model_to_bytes(main, exe.scope(), {"x"}, {out}), Unimplemented,
                   {"'kiln.scaled_dot_product_attention'", "attention dropout in training mode", "clone_for_test"});
  kiln::IrMapping map;
  const kiln::Program test = kiln::clone_for_test(main, &map);
  const std::string bytes = kiln::onnx::export_model_to_bytes(test, exe.scope(), {"x"}, {map.lookup(out)});
  full_check(bytes);
  std::vector<float> xs(80);
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(0.7f * static_cast<float>(i));
  const kiln::Tensor x = kiln::Tensor::from_vector<float>({2, 5, 8}, xs);
  kiln::onnx::ImportedModel back = kiln::onnx::import_model_from_bytes(bytes);
  kiln::Executor back_exe;
  back_exe.run(back.startup);
  check_close(back_exe.run(back.main, {{"x", x}}, {back.outputs[0]}).at(0),
              exe.run(test, {{"x", x}}, {map.lookup(out)}).at(0));
}

TEST_CASE("a training program's dropout and a parameter missing from the scope are errors",
          "[onnx][export]") {
  kiln::Program main, startup;
  kiln::Value out;
  {
    kiln::ProgramGuard guard(main, startup);
    auto x = kiln::data("x", {-1, 4});
    out = kiln::nn::Dropout(0.5)(kiln::nn::Linear(4, 4)(x));
  }
  kiln::Executor exe;
  KILN_CHECK_ERROR(kiln::onnx::export_model_to_bytes(main, exe.scope(), {"x"}, {out}), NotFound,
                   {"parameter 'linear_", "run the startup program"});
  exe.run(startup);
  KILN_CHECK_ERROR(kiln::onnx::export_model_to_bytes(main, exe.scope(), {"x"}, {out}),
                   Unimplemented, {"'kiln.dropout'", "training mode", "clone_for_test"});
  kiln::IrMapping map;
  const kiln::Program test = kiln::clone_for_test(main, &map);
  full_check(kiln::onnx::export_model_to_bytes(test, exe.scope(), {"x"}, {map.lookup(out)}));
}

TEST_CASE("a fetch named like a feed is an error, and an opset other than 17 is refused",
          "[onnx][export]") {
  Mlp m;
  kiln::Program p = m.test.clone();
  KILN_CHECK_ERROR(kiln::onnx::export_model_to_bytes(m.test, m.exe.scope(), {"x"}, {m.test_probs},
                                                     kiln::onnx::ExportOptions{13, "g", "kiln"}),
                   Unimplemented, {"opset 13"});
  // The data op itself fetched under the feed's name: the name is taken.
  kiln::Value x;
  for (kiln::Operation* op = p.block().front(); op; op = op->next_in_block())
    if (auto d = kiln::DataOp::dyn_cast(op); d && d.attrs().name == "x") x = op->result(0);
  kiln::Builder b(p);
  b.create<kiln::FetchOp>(x, "x");
  KILN_CHECK_ERROR(kiln::onnx::export_model_to_bytes(p, m.exe.scope(), {"x"}, {"x"}),
                   InvalidArgument, {"'x'", "already a name of the graph"});
}

namespace {

// Each fetched value of `program` (feeds `feed`) against the same value
// computed by the exported, ONNX-checked and re-imported model; any dtype
// kiln exports, to 1e-6.
void check_round_trip(const kiln::Program& program, const kiln::Scope& scope,
                      const kiln::FeedMap& feed, const std::vector<kiln::Value>& fetch) {
  std::vector<std::string> feeds;
  for (const auto& [name, t] : feed) feeds.push_back(name);
  std::vector<kiln::FetchTarget> targets(fetch.begin(), fetch.end());
  const std::string bytes = kiln::onnx::export_model_to_bytes(program, scope, feeds, targets);
  full_check(bytes);
  kiln::Executor exe;
  const auto want = exe.run(program, feed, targets, const_cast<kiln::Scope&>(scope));
  const auto got = run_imported(bytes, feed);
  REQUIRE(got.size() == want.size());
  for (std::size_t k = 0; k < got.size(); ++k) {
    INFO("fetch #" << k << " (" << fetch[k].defining_op()->name() << ")");
    REQUIRE(got[k].dtype() == want[k].dtype());
    REQUIRE(got[k].dims().to_vector() == want[k].dims().to_vector());
    auto as_double = [](const kiln::Tensor& t) {
      std::vector<double> v;
      switch (t.dtype()) {
        case kiln::DataType::Float32: for (float x : t.to_vector<float>()) v.push_back(x); break;
        case kiln::DataType::Float64: v = t.to_vector<double>(); break;
        case kiln::DataType::Int32: for (auto x : t.to_vector<std::int32_t>()) v.push_back(x); break;
        case kiln::DataType::Int64: for (auto x : t.to_vector<std::int64_t>()) v.push_back(static_cast<double>(x)); break;
        case kiln::DataType::Bool: for (bool x : t.to_vector<bool>()) v.push_back(x); break;
        case kiln::DataType::UInt8: for (auto x : t.to_vector<std::uint8_t>()) v.push_back(x); break;
        case kiln::DataType::Int8: for (auto x : t.to_vector<std::int8_t>()) v.push_back(x); break;
        case kiln::DataType::UInt16: for (auto x : t.to_vector<std::uint16_t>()) v.push_back(x); break;
        default: FAIL("unexpected dtype");
      }
      return v;
    };
    const auto g = as_double(got[k]), w = as_double(want[k]);
    for (std::size_t i = 0; i < g.size(); ++i) {
      INFO("element " << i);
      if (std::isnan(w[i])) CHECK(std::isnan(g[i]));
      else CHECK(g[i] == Approx(w[i]).margin(1e-6).epsilon(1e-6));
    }
  }
}

kiln::Tensor floats(const std::vector<std::int64_t>& dims, unsigned seed) {
  std::size_t n = 1;
  for (auto d : dims) n *= static_cast<std::size_t>(d);
  return kiln::Tensor::from_vector<float>(kiln::Dims(dims), values(n, seed));
}

}  // namespace

TEST_CASE("the elementwise, unary and comparison families export op by op", "[onnx][export]") {
  kiln::Program p, startup;
  std::vector<kiln::Value> f;
  {
    kiln::ProgramGuard guard(p, startup);
    auto x = kiln::data("x", {-1, 3, 4});
    auto y = kiln::data("y", {3, 4});
    auto b = kiln::main_builder();
    auto pos = b.create<kiln::AddOp>(b.create<kiln::AbsOp>(x).result(),
                                     b.create<kiln::FullOp>(std::vector<std::int64_t>{}, 1.5).result())
                   .result();  // > 1 for log, sqrt, acosh
    auto small = b.create<kiln::ScaleOp>(x, 0.5).result();  // in (-0.5, 0.5) for asin, atanh
    f.push_back(b.create<kiln::AddOp>(x, y).result());
    f.push_back(b.create<kiln::SubOp>(x, y).result());
    f.push_back(b.create<kiln::MulOp>(x, y).result());
    f.push_back(b.create<kiln::DivOp>(x, pos).result());
    f.push_back(b.create<kiln::MaximumOp>(x, y).result());
    f.push_back(b.create<kiln::MinimumOp>(x, y).result());
    f.push_back(b.create<kiln::PowOp>(pos, y).result());
    f.push_back(b.create<kiln::AddNOp>(std::vector<kiln::Value>{x, x, x}).result());
    for (kiln::Value v : {b.create<kiln::ReluOp>(x).result(), b.create<kiln::TanhOp>(x).result(),
                          b.create<kiln::SigmoidOp>(x).result(), b.create<kiln::ExpOp>(x).result(),
                          b.create<kiln::LogOp>(pos).result(), b.create<kiln::SqrtOp>(pos).result(),
                          b.create<kiln::SquareOp>(x).result(), b.create<kiln::NegOp>(x).result(),
                          b.create<kiln::SinOp>(x).result(), b.create<kiln::CosOp>(x).result(),
                          b.create<kiln::TanOp>(x).result(), b.create<kiln::AsinOp>(small).result(),
                          b.create<kiln::AcosOp>(small).result(), b.create<kiln::AtanOp>(x).result(),
                          b.create<kiln::SinhOp>(x).result(), b.create<kiln::CoshOp>(x).result(),
                          b.create<kiln::AsinhOp>(x).result(), b.create<kiln::AcoshOp>(pos).result(),
                          b.create<kiln::AtanhOp>(small).result(), b.create<kiln::ErfOp>(x).result(),
                          b.create<kiln::FloorOp>(x).result(), b.create<kiln::CeilOp>(x).result(),
                          b.create<kiln::RoundOp>(b.create<kiln::ScaleOp>(x, 3.0).result()).result(),
                          b.create<kiln::SignOp>(x).result(),
                          b.create<kiln::GeluOp>(x, false).result(),
                          b.create<kiln::GeluOp>(x, true).result(),
                          b.create<kiln::ScaleOp>(x, 2.0, 0.5, false).result(),
                          b.create<kiln::AssignOp>(x).result(),
                          b.create<kiln::CastOp>(b.create<kiln::ScaleOp>(x, 4.0).result(),
                                                 kiln::DataType::Int64).result(),
                          b.create<kiln::ClipOp>(x, -0.3, 0.4).result(),
                          b.create<kiln::TriuOp>(x, 1).result(), b.create<kiln::TrilOp>(x, 0).result()})
      f.push_back(v);
    auto lt = b.create<kiln::LessThanOp>(x, y).result();
    auto ge = b.create<kiln::GreaterEqualOp>(x, y).result();
    for (kiln::Value v : {b.create<kiln::EqualOp>(x, x).result(), b.create<kiln::NotEqualOp>(x, y).result(),
                          lt, b.create<kiln::LessEqualOp>(x, y).result(),
                          b.create<kiln::GreaterThanOp>(x, y).result(), ge,
                          b.create<kiln::LogicalAndOp>(lt, ge).result(),
                          b.create<kiln::LogicalOrOp>(lt, ge).result(),
                          b.create<kiln::LogicalXorOp>(lt, ge).result(),
                          b.create<kiln::LogicalNotOp>(lt).result(),
                          b.create<kiln::IsNanOp>(b.create<kiln::LogOp>(x).result()).result(),
                          b.create<kiln::IsFiniteOp>(b.create<kiln::LogOp>(x).result()).result(),
                          b.create<kiln::WhereOp>(lt, x, y).result(),
                          b.create<kiln::MaskedFillOp>(x, lt, -2.0).result()})
      f.push_back(v);
  }
  kiln::Scope scope;
  check_round_trip(p, scope, {{"x", floats({2, 3, 4}, 5)}, {"y", floats({3, 4}, 6)}}, f);
}

TEST_CASE("the shape, indexing, constant and reduction ops export op by op", "[onnx][export]") {
  kiln::Program p, startup;
  std::vector<kiln::Value> f;
  {
    kiln::ProgramGuard guard(p, startup);
    auto x = kiln::data("x", {-1, 3, 4});
    auto idx = kiln::data("idx", {2}, kiln::DataType::Int64);
    auto b = kiln::main_builder();
    auto parts = b.create<kiln::SplitOp>(x, std::vector<std::int64_t>{1, -1}, 1);
    f.push_back(parts->result(0));
    f.push_back(parts->result(1));
    auto thirds = b.create<kiln::SplitOp>(x, std::int64_t{2}, 2);
    f.push_back(thirds->result(1));
    for (kiln::Value v :
         {b.create<kiln::ReshapeOp>(x, std::vector<std::int64_t>{0, 12}).result(),
          b.create<kiln::FlattenOp>(x, 1, 2).result(), b.create<kiln::FlattenOp>(x, 0, 1).result(),
          b.create<kiln::SqueezeOp>(b.create<kiln::UnsqueezeOp>(x, std::vector<std::int64_t>{1, -1}).result(),
                                    std::vector<std::int64_t>{1}).result(),
          b.create<kiln::UnsqueezeOp>(x, std::vector<std::int64_t>{0}).result(),
          b.create<kiln::TransposeOp>(x, std::vector<std::int64_t>{2, 0, 1}).result(),
          b.create<kiln::ConcatOp>(std::vector<kiln::Value>{x, x}, -1).result(),
          b.create<kiln::StackOp>(std::vector<kiln::Value>{x, x}, 1).result(),
          b.create<kiln::SliceOp>(x, std::vector<std::int64_t>{1, 2}, std::vector<std::int64_t>{1, -3},
                                  std::vector<std::int64_t>{3, 100}).result(),
          b.create<kiln::GatherOp>(x, idx, 2).result(),
          b.create<kiln::ExpandOp>(b.create<kiln::SliceOp>(x, std::vector<std::int64_t>{1},
                                                           std::vector<std::int64_t>{0},
                                                           std::vector<std::int64_t>{1}).result(),
                                   std::vector<std::int64_t>{2, -1, 3, 4}).result(),
          b.create<kiln::PadOp>(x, std::vector<std::int64_t>{1, 2, 0, 1}, 0.25).result(),
          b.create<kiln::CumsumOp>(x, 2).result(), b.create<kiln::CumsumOp>(x, 1, true, true).result(),
          b.create<kiln::FullOp>(std::vector<std::int64_t>{2, 2}, 3.5).result(),
          b.create<kiln::FullOp>(std::vector<std::int64_t>{3}, 7.0, kiln::DataType::Int32).result(),
          b.create<kiln::SumOp>(x, std::vector<std::int64_t>{1}, true).result(),
          b.create<kiln::SumOp>(x).result(),
          b.create<kiln::MeanOp>(x, std::vector<std::int64_t>{-1}).result(),
          b.create<kiln::MaxOp>(x, std::vector<std::int64_t>{0, 2}).result(),
          b.create<kiln::ArgMaxOp>(x, 2).result(), b.create<kiln::ArgMinOp>(x, 1, true).result(),
          b.create<kiln::ShapeOp>(x).result(), b.create<kiln::NumelOp>(x).result()})
      f.push_back(v);
    const std::vector<double> c{1.5, -2.0, 0.25};
    f.push_back(b.create<kiln::ConstantOp>(
                     kiln::TensorAttribute::get(kiln::DataType::Float64, {3},
                                                std::string(reinterpret_cast<const char*>(c.data()),
                                                            c.size() * sizeof(double))),
                     kiln::TensorType::get(kiln::DataType::Float64, {3}))
                    .result());
  }
  kiln::Scope scope;
  check_round_trip(p, scope,
                   {{"x", floats({2, 3, 4}, 7)},
                    {"idx", kiln::Tensor::from_vector<std::int64_t>({2}, {3, 1})}},
                   f);
}

TEST_CASE("conv2d_transpose, fused_conv2d, channel_scaled_conv2d, fused_conv2d_mean, pointwise_depthwise_conv2d, "
          "batch_norm, fused_batch_norm, rms_norm, pools and attention export op by op",
          "[onnx][export]") {
  kiln::Program p, startup;
  std::vector<kiln::Value> f;
  {
    kiln::ProgramGuard guard(p, startup);
    auto x = kiln::data("x", {-1, 2, 6, 6});
    auto q = kiln::data("q", {2, 2, -1, 4});
    auto b = kiln::main_builder();
    auto param = [](const std::string& name, std::vector<std::int64_t> dims) {
      return kiln::create_parameter(name, std::move(dims), kiln::DataType::Float32,
                                    kiln::init::Normal(0.5, 0.2));
    };
    auto w = param("w", {2, 3, 3, 3});
    f.push_back(b.create<kiln::Conv2dTransposeOp>(x, w, std::vector<std::int64_t>{2, 2},
                                                  std::vector<std::int64_t>{1, 1},
                                                  std::vector<std::int64_t>{1, 1})
                    .result());
    f.push_back(b.create<kiln::Conv2dOp>(x, param("cw", {4, 1, 3, 3}), std::vector<std::int64_t>{2, 1},
                                         std::vector<std::int64_t>{1, 0, 2, 1},
                                         std::vector<std::int64_t>{1, 2}, 2)
                    .result());
    for (const char* act : {"none", "relu", "relu6", "silu"})
      f.push_back(b.create<kiln::FusedConv2dOp>(x, param(std::string("fw_") + act, {3, 2, 3, 3}),
                                                param(std::string("fb_") + act, {3}),
                                                std::vector<std::int64_t>{1, 1},
                                                std::vector<std::int64_t>{1, 1},
                                                std::vector<std::int64_t>{1, 1}, 1, act)
                      .result());
    f.push_back(b.create<kiln::FusedConv2dOp>(
                     b.create<kiln::TransposeOp>(x, std::vector<std::int64_t>{0, 2, 3, 1}).result(),
                     param("fw_nhwc", {3, 2, 3, 3}), param("fb_nhwc", {3}), std::vector<std::int64_t>{1, 1},
                     std::vector<std::int64_t>{1, 1}, std::vector<std::int64_t>{1, 1}, 1, "relu", "NHWC")
                    .result());
    // with residuals: the NCHW "none" result above, the NHWC one
    const kiln::Value nchw_skip = f[f.size() - 5], nhwc_skip = f.back();
    f.push_back(b.create<kiln::FusedConv2dOp>(x, param("fw_res", {3, 2, 3, 3}), param("fb_res", {3}),
                                              std::vector<std::int64_t>{1, 1}, std::vector<std::int64_t>{1, 1},
                                              std::vector<std::int64_t>{1, 1}, 1, "relu", "NCHW", nchw_skip)
                    .result());
    f.push_back(b.create<kiln::FusedConv2dOp>(
                     b.create<kiln::TransposeOp>(x, std::vector<std::int64_t>{0, 2, 3, 1}).result(),
                     param("fw_nhwc_res", {3, 2, 3, 3}), param("fb_nhwc_res", {3}), std::vector<std::int64_t>{1, 1},
                     std::vector<std::int64_t>{1, 1}, std::vector<std::int64_t>{1, 1}, 1, "relu6", "NHWC", nhwc_skip)
                    .result());
    f.push_back(b.create<kiln::MaxPool2dOp>(
                     b.create<kiln::TransposeOp>(x, std::vector<std::int64_t>{0, 2, 3, 1}).result(),
                     std::vector<std::int64_t>{3, 3}, std::vector<std::int64_t>{2, 2},
                     std::vector<std::int64_t>{1, 1}, false, "NHWC")
                    .result());
    // channel-scaled, by factors per image (NHWC, silu) and by one set (NCHW, with a residual)
    {
      const auto xt = b.create<kiln::TransposeOp>(x, std::vector<std::int64_t>{0, 2, 3, 1}).result();
      const auto per_image = b.create<kiln::MeanOp>(xt, std::vector<std::int64_t>{1, 2}, true).result();
      const std::vector<std::int64_t> one{1, 1}, zero{0, 0};
      f.push_back(b.create<kiln::ChannelScaledConv2dOp>(xt, per_image, param("sw", {3, 2, 1, 1}), param("sb", {3}),
                                                        kiln::FusedConv2dOp::Attributes{one, zero, one, 1, "silu",
                                                                                        "NHWC", false})
                      .result());
      f.push_back(b.create<kiln::ChannelScaledConv2dOp>(x, param("ss", {1, 2, 1, 1}), param("sw_res", {3, 2, 3, 3}),
                                                        param("sb_res", {3}),
                                                        kiln::FusedConv2dOp::Attributes{one, one, one, 1, "relu",
                                                                                        "NCHW", false},
                                                        nchw_skip)
                      .result());
      auto pooled = b.create<kiln::FusedConv2dMeanOp>(xt, param("mw", {3, 2, 3, 3}), param("mb", {3}),
                                                      kiln::FusedConv2dOp::Attributes{one, one, one, 1, "silu",
                                                                                      "NHWC", false});
      f.push_back(pooled->result(0));
      f.push_back(pooled->result(1));
      // an expansion to 16 channels and a stride-2 depthwise convolution
      f.push_back(b.create<kiln::PointwiseDepthwiseConv2dOp>(
                       xt, param("pw", {16, 2, 1, 1}), param("pb", {16}), param("dw", {16, 1, 3, 3}),
                       param("db", {16}),
                       kiln::PointwiseDepthwiseConv2dOp::Attributes{{2, 2}, one, one, "relu6", "silu"})
                      .result());
    }
    auto bn = b.create<kiln::BatchNormOp>(x, param("s", {2}), param("bb", {2}), param("m", {2}),
                                          param("v", {2}), 0.9, 1e-5, true);
    f.push_back(bn->result(0));
    f.push_back(b.create<kiln::BatchNormOp>(b.create<kiln::TransposeOp>(x, std::vector<std::int64_t>{0, 2, 3, 1}).result(),
                                            param("ns", {2}), param("nbb", {2}), param("nm", {2}), param("nv", {2}),
                                            0.9, 1e-5, true, "NHWC")
                    ->result(0));
    // fused with its activation, NCHW and NHWC
    f.push_back(b.create<kiln::FusedBatchNormOp>(x, param("fs", {2}), param("fbb", {2}), param("fm", {2}),
                                                 param("fv", {2}), 0.9, 1e-5, true, "NCHW", "relu")
                    ->result(0));
    f.push_back(b.create<kiln::FusedBatchNormOp>(
                     b.create<kiln::TransposeOp>(x, std::vector<std::int64_t>{0, 2, 3, 1}).result(),
                     param("fs6", {2}), param("fbb6", {2}), param("fm6", {2}), param("fv6", {2}), 0.9, 1e-5,
                     true, "NHWC", "relu6")
                    ->result(0));
    auto rms = b.create<kiln::RmsNormOp>(x, param("g", {6, 6}), 2, 1e-6);
    f.push_back(rms->result(0));
    f.push_back(rms->result(1));
    auto ln = b.create<kiln::LayerNormOp>(x, param("lw", {36}), param("lb", {36}), -2, 1e-5);
    f.push_back(ln->result(0));
    f.push_back(ln->result(1));
    f.push_back(ln->result(2));
    f.push_back(b.create<kiln::MaxPool2dOp>(x, std::vector<std::int64_t>{3, 3},
                                            std::vector<std::int64_t>{2, 2},
                                            std::vector<std::int64_t>{1, 1}, true)
                    .result());
    f.push_back(b.create<kiln::AvgPool2dOp>(x, std::vector<std::int64_t>{3, 3},
                                            std::vector<std::int64_t>{2, 2},
                                            std::vector<std::int64_t>{1, 1}, false, false)
                    .result());
    f.push_back(b.create<kiln::AdaptiveAvgPool2dOp>(x, std::vector<std::int64_t>{3, 2}).result());
    f.push_back(b.create<kiln::AdaptiveAvgPool2dOp>(x, std::vector<std::int64_t>{1, 1}).result());
    f.push_back(b.create<kiln::LogSoftmaxOp>(x, 1).result());
    f.push_back(b.create<kiln::MatmulOp>(x, x, true, false).result());
    f.push_back(b.create<kiln::EmbeddingOp>(param("e", {5, 3}), b.create<kiln::CastOp>(
        b.create<kiln::ReshapeOp>(b.create<kiln::SliceOp>(x, std::vector<std::int64_t>{1, 2, 3},
            std::vector<std::int64_t>{0, 0, 0}, std::vector<std::int64_t>{1, 1, 4}).result(),
            std::vector<std::int64_t>{-1}).result(), kiln::DataType::Int64).result(), 0).result());
    // Attention with a sequence length known only at run time (the causal
    // mask is computed from the scores' shape).
    auto att = b.create<kiln::ScaledDotProductAttentionOp>(q, q, q, true, 0.0);
    f.push_back(att->result(0));
    f.push_back(att->result(1));
    f.push_back(b.create<kiln::ScaledDotProductAttentionOp>(q, q, q, false, 0.3)->result(0));
    // Layout BLHD ([B, L, H, D]: here 2 positions of a run-time head count)
    // exports as BHLD between transposes.
    auto blhd = b.create<kiln::ScaledDotProductAttentionOp>(q, q, q, true, 0.0, "BLHD");
    f.push_back(blhd->result(0));
    f.push_back(blhd->result(1));
    // key_lengths: a mask from the lengths, with and without the causal one.
    auto n = kiln::data("n", {2}, kiln::DataType::Int32);
    f.push_back(b.create<kiln::ScaledDotProductAttentionOp>(q, q, q, true, 0.0, "BHLD", n)->result(0));
    f.push_back(b.create<kiln::ScaledDotProductAttentionOp>(q, q, q, false, 0.0, "BLHD", n)->result(0));
    // Masks: a float one added to the scores; a bool one And-ed with the
    // causal and key_lengths masks.
    auto fm = kiln::data("score_bias", {5, 5});
    auto bm = kiln::data("key_mask", {2, 1, 1, 5}, kiln::DataType::Bool);
    f.push_back(b.create<kiln::ScaledDotProductAttentionOp>(q, q, q, false, 0.0, "BHLD", kiln::Value(), fm)
                    ->result(0));
    f.push_back(b.create<kiln::ScaledDotProductAttentionOp>(q, q, q, true, 0.0, "BHLD", n, bm)->result(0));
  }
  kiln::Tensor bm = kiln::Tensor::empty(kiln::Dims({2, 1, 1, 5}), kiln::DataType::Bool);
  for (int i = 0; i < 10; ++i) bm.data<bool>()[i] = i != 1;  // batch 0's key 1 (no row left without keys)
  kiln::Executor exe;
  exe.run(startup);
  // Embedding ids in [0, 5) from the first row of x, scaled.
  kiln::Tensor x = floats({2, 2, 6, 6}, 8);
  float* px = x.data<float>();
  for (int i = 0; i < 4; ++i) px[i] = static_cast<float>(i);
  check_round_trip(p, exe.scope(),
                   {{"x", x}, {"q", floats({2, 2, 5, 4}, 9)}, {"n", kiln::Tensor::from_vector<std::int32_t>({2}, {2, 1})},
                    {"score_bias", floats({5, 5}, 12)}, {"key_mask", bm}},
                   f);
}

TEST_CASE("grouped-query attention exports with k and v repeated to q's heads and imports back to the same "
          "outputs",
          "[onnx][export][gqa]") {
  kiln::Program p, startup;
  std::vector<kiln::Value> f;
  {
    kiln::ProgramGuard guard(p, startup);
    auto q = kiln::data("q", {2, 4, -1, 4}), k = kiln::data("k", {2, 2, -1, 4}), v = kiln::data("v", {2, 2, -1, 3});
    auto b = kiln::main_builder();
    auto att = b.create<kiln::ScaledDotProductAttentionOp>(q, k, v, true, 0.0);
    f.push_back(att->result(0));
    f.push_back(att->result(1));
    // Multi-query in layout BLHD: [B, L, H, D] with one k / v head.
    auto qi = kiln::data("qi", {2, -1, 4, 4}), ki = kiln::data("ki", {2, -1, 1, 4}), vi = kiln::data("vi", {2, -1, 1, 3});
    f.push_back(b.create<kiln::ScaledDotProductAttentionOp>(qi, ki, vi, false, 0.0, "BLHD")->result(0));
    // A head count known only at run time exports as multi-head attention.
    auto qd = kiln::data("qd", {2, -1, 5, 4}), kd = kiln::data("kd", {2, 3, 6, 4});
    f.push_back(b.create<kiln::ScaledDotProductAttentionOp>(qd, kd, kd, true, 0.0)->result(0));
  }
  kiln::Scope scope;
  check_round_trip(p, scope,
                   {{"q", floats({2, 4, 5, 4}, 1)}, {"k", floats({2, 2, 6, 4}, 2)}, {"v", floats({2, 2, 6, 3}, 3)},
                    {"qi", floats({2, 5, 4, 4}, 4)}, {"ki", floats({2, 6, 1, 4}, 5)}, {"vi", floats({2, 6, 1, 3}, 6)},
                    {"qd", floats({2, 3, 5, 4}, 7)}, {"kd", floats({2, 3, 6, 4}, 8)}},
                   f);
  // Imported back, the multi-query attention (the one without a causal
  // Where, which the import fuses) reads its one k / v head as it is.
  const std::vector<kiln::FetchTarget> targets(f.begin(), f.end());
  const auto m = kiln::onnx::import_model_from_bytes(
      kiln::onnx::export_model_to_bytes(p, scope, {"q", "k", "v", "qi", "ki", "vi", "qd", "kd"}, targets));
  std::vector<std::int64_t> kv_heads;
  for (kiln::Operation* op : m.main.block())
    if (op->isa<kiln::ScaledDotProductAttentionOp>())
      for (std::uint32_t i : {1u, 2u}) kv_heads.push_back(kiln::shaped_dims(op->operand_source(i).type())[1]);
  CHECK(kv_heads == std::vector<std::int64_t>{1, 1, 3, 3});
}

TEST_CASE("kiln's exported causal attention imports back as one causal attention op, lengths known at "
          "import or not",
          "[onnx][export][fusion]") {
  kiln::Program p, startup;
  std::vector<kiln::Value> f;
  {
    kiln::ProgramGuard guard(p, startup);
    auto q = kiln::data("q", {2, 3, 5, 4}), k = kiln::data("k", {2, 3, 6, 4}), qd = kiln::data("qd", {2, 3, -1, 4});
    auto b = kiln::main_builder();
    f.push_back(b.create<kiln::ScaledDotProductAttentionOp>(q, k, k, true, 0.0)->result(0));
    f.push_back(b.create<kiln::ScaledDotProductAttentionOp>(qd, qd, qd, true, 0.0)->result(0));
  }
  kiln::Scope scope;
  const kiln::FeedMap feeds{{"q", floats({2, 3, 5, 4}, 1)}, {"k", floats({2, 3, 6, 4}, 2)}, {"qd", floats({2, 3, 7, 4}, 3)}};
  check_round_trip(p, scope, feeds, f);
  const std::vector<kiln::FetchTarget> targets(f.begin(), f.end());
  const auto m = kiln::onnx::import_model_from_bytes(kiln::onnx::export_model_to_bytes(p, scope, {"q", "k", "qd"}, targets));
  int causal = 0, softmax = 0;
  for (kiln::Operation* op : m.main.block()) {
    if (auto a = kiln::ScaledDotProductAttentionOp::dyn_cast(op)) causal += a.attrs().causal;
    softmax += op->name() == "kiln.softmax";
  }
  CHECK(causal == 2);
  CHECK(softmax == 0);
}

TEST_CASE("grouped-query attention with a head size known only at run time does not export, naming the op",
          "[onnx][export][gqa]") {
  kiln::Program p, startup;
  kiln::Value out;
  {
    kiln::ProgramGuard guard(p, startup);
    auto q = kiln::data("q", {2, 4, 5, -1}), k = kiln::data("k", {2, 2, 6, -1}), v = kiln::data("v", {2, 2, 6, 3});
    out = kiln::main_builder().create<kiln::ScaledDotProductAttentionOp>(q, k, v, false, 0.5)->result(0);
  }
  kiln::Scope scope;
  KILN_CHECK_ERROR(kiln::onnx::export_model_to_bytes(p, scope, {"q", "k", "v"}, {out}), Unimplemented,
                   {"'kiln.scaled_dot_product_attention'", "grouped-query attention", "head size"});
}

TEST_CASE("an in-place op exports unless a later op reads the operand it overwrites",
          "[onnx][export]") {
  kiln::Program p, startup;
  kiln::Value alone, overwritten, later;
  {
    kiln::ProgramGuard guard(p, startup);
    auto x = kiln::data("x", {2, 3});
    auto y = kiln::data("y", {2, 3});
    auto b = kiln::main_builder();
    alone = b.create<kiln::Relu_Op>(b.create<kiln::ScaleOp>(x, 2.0).result()).result();
    overwritten = b.create<kiln::Sqrt_Op>(y).result();
    later = b.create<kiln::AddOp>(y, overwritten).result();
  }
  kiln::Scope scope;
  check_round_trip(p, scope, {{"x", floats({2, 3}, 10)}, {"y", floats({2, 3}, 11)}}, {alone});
  KILN_CHECK_ERROR(kiln::onnx::export_model_to_bytes(p, scope, {"x", "y"}, {later}), Unimplemented,
                   {"'kiln.sqrt_'", "in place", "later op"});
}

TEST_CASE("a feed named like a parameter the fetches read is an error", "[onnx][export]") {
  kiln::Program p, startup;
  kiln::Value out;
  {
    kiln::ProgramGuard guard(p, startup);
    auto w = kiln::create_parameter("w", {3}, kiln::DataType::Float32, kiln::init::Constant(1.0));
    auto x = kiln::data("w", {3});
    out = kiln::main_builder().create<kiln::AddOp>(x, w).result();
  }
  kiln::Executor exe;
  exe.run(startup);
  KILN_CHECK_ERROR(kiln::onnx::export_model_to_bytes(p, exe.scope(), {"w"}, {out}),
                   InvalidArgument, {"feed 'w'", "named like a parameter"});
}

namespace {

// A builtin.constant holding `v` (i64 [v.size()], or i32 when `i32`).
kiln::Value int_constant(kiln::Builder& b, const std::vector<std::int64_t>& v, bool i32 = false) {
  std::string bytes;
  if (i32) {
    std::vector<std::int32_t> w(v.begin(), v.end());
    bytes.assign(reinterpret_cast<const char*>(w.data()), w.size() * sizeof(std::int32_t));
  } else {
    bytes.assign(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(std::int64_t));
  }
  const auto dt = i32 ? kiln::DataType::Int32 : kiln::DataType::Int64;
  const std::vector<std::int64_t> dims{static_cast<std::int64_t>(v.size())};
  return b.create<kiln::ConstantOp>(kiln::TensorAttribute::get(dt, dims, bytes),
                                    kiln::TensorType::get(dt, dims))
      .result();
}

}  // namespace

TEST_CASE("the run-time shape ops and the indexing and search ops export op by op",
          "[onnx][export]") {
  kiln::Program p, startup;
  std::vector<kiln::Value> f;
  {
    kiln::ProgramGuard guard(p, startup);
    auto x = kiln::data("x", {2, 3, 4});
    auto shape = kiln::data("shape", {2}, kiln::DataType::Int32);  // fed: a run-time shape
    auto ids = kiln::data("ids", {2, 3}, kiln::DataType::Int64);
    auto b = kiln::main_builder();
    auto c = [&b](const std::vector<std::int64_t>& v, bool i32 = false) { return int_constant(b, v, i32); };
    f.push_back(b.create<kiln::ReshapeByOp>(x, shape).result());
    f.push_back(b.create<kiln::ExpandByOp>(
        b.create<kiln::SliceOp>(x, std::vector<std::int64_t>{0, 2}, std::vector<std::int64_t>{0, 0},
                                std::vector<std::int64_t>{1, 1}).result(), c({3, 3, 4})).result());
    f.push_back(b.create<kiln::StridedSliceOp>(x, std::vector<std::int64_t>{2, 1},
                                               std::vector<std::int64_t>{3, 0},
                                               std::vector<std::int64_t>{0, 3},
                                               std::vector<std::int64_t>{-1, 2}).result());
    f.push_back(b.create<kiln::SliceByOp>(x, c({1}, true), c({-1}), c({2}), c({1})).result());
    auto one = b.create<kiln::UnsqueezeByOp>(x, c({1})).result();
    f.push_back(one);
    f.push_back(b.create<kiln::SqueezeByOp>(one, c({1}, true)).result());
    auto parts = b.create<kiln::SplitByOp>(x, c({1, 3}), 2);
    f.push_back(parts->result(0));
    f.push_back(parts->result(1));
    f.push_back(b.create<kiln::SumByOp>(x, c({0, 2}), true).result());
    f.push_back(b.create<kiln::TileOp>(x, c({1, 2, 1}, true)).result());
    f.push_back(b.create<kiln::FullByOp>(shape, 2.5).result());
    auto s = [&b](double v) {
      return b.create<kiln::FullOp>(std::vector<std::int64_t>{}, v, kiln::DataType::Float32).result();
    };
    f.push_back(b.create<kiln::RangeOp>(s(0.5), s(3.0), s(0.75)).result());
    // indexing and search
    auto index = b.create<kiln::ArgMaxOp>(x, 2, true).result();  // i64 [2, 3, 1]
    f.push_back(b.create<kiln::TakeAlongAxisOp>(x, index, 2).result());
    f.push_back(b.create<kiln::PutAlongAxisOp>(x, index, b.create<kiln::TakeAlongAxisOp>(x, index, 2).result(),
                                               2, "add").result());
    auto tuples = b.create<kiln::ReshapeOp>(c({1, 2, 0, 1}), std::vector<std::int64_t>{2, 2}).result();
    f.push_back(b.create<kiln::GatherNdOp>(x, tuples).result());
    f.push_back(b.create<kiln::ScatterNdOp>(x, tuples, b.create<kiln::GatherNdOp>(x, tuples).result(),
                                            "mul").result());
    auto top = b.create<kiln::TopKOp>(x, 2, 1, true, true);
    f.push_back(top->result(0));
    f.push_back(top->result(1));
    f.push_back(b.create<kiln::TopKOp>(x, 3, -1, false, true)->result(0));
    f.push_back(b.create<kiln::OneHotOp>(ids, 5).result());
  }
  kiln::Scope scope;
  check_round_trip(p, scope,
                   {{"x", floats({2, 3, 4}, 12)},
                    {"shape", kiln::Tensor::from_vector<std::int32_t>({2}, {4, 6})},
                    {"ids", kiln::Tensor::from_vector<std::int64_t>({2, 3}, {0, 4, 2, 1, 1, 3})}},
                   f);
}

TEST_CASE("kiln.lstm, kiln.gru and kiln.rnn export as ONNX's LSTM, GRU and RNN and import back",
          "[onnx][export][rnn]") {
  kiln::Program p, startup;
  std::vector<kiln::Value> f;
  {
    kiln::ProgramGuard guard(p, startup);
    constexpr std::int64_t I = 3, H = 4;
    auto x = kiln::data("x", {5, -1, I});
    auto lens = kiln::data("lens", {-1}, kiln::DataType::Int64);
    auto h0 = kiln::data("h0", {2, -1, H});
    auto b = kiln::main_builder();
    auto param = [](const std::string& name, std::vector<std::int64_t> dims) {
      return kiln::create_parameter(name, std::move(dims), kiln::DataType::Float32,
                                    kiln::init::Normal(0.0, 0.5));
    };
    kiln::LstmOp::Attributes la{};
    la.hidden_size = H, la.direction = "bidirectional", la.clip = 2.5;
    la.activations = "HardSigmoid(0.3,0.4),Tanh,LeakyRelu(0.2)";
    auto lstm = b.create<kiln::LstmOp>(
        kiln::RecurrentInputs{x, param("lw", {2, 4 * H, I}), param("lr", {2, 4 * H, H}),
                              param("lb", {2, 8 * H}), lens, h0, h0, param("lp", {2, 3 * H})},
        la);
    for (int i = 0; i < 3; ++i) f.push_back(lstm->result(i));
    kiln::GruOp::Attributes ga{};
    ga.hidden_size = H, ga.direction = "forward", ga.linear_before_reset = true;
    auto gru = b.create<kiln::GruOp>(
        kiln::RecurrentInputs{x, param("gw", {1, 3 * H, I}), param("gr", {1, 3 * H, H}),
                              param("gb", {1, 6 * H}), {}, {}, {}, {}},
        ga);
    f.push_back(gru->result(1));  // Y unused: only Y_h is exported
    kiln::RnnOp::Attributes ra{};
    ra.hidden_size = H, ra.direction = "reverse", ra.activations = "Relu";
    auto rnn = b.create<kiln::RnnOp>(
        kiln::RecurrentInputs{x, param("rw", {1, H, I}), param("rr", {1, H, H}), {}, {}, {}, {}, {}},
        ra);
    f.push_back(rnn->result(0));
  }
  kiln::Executor exe;
  exe.run(startup);
  check_round_trip(p, exe.scope(),
                   {{"x", floats({5, 3, 3}, 11)},
                    {"lens", kiln::Tensor::from_vector<std::int64_t>({3}, {5, 2, 0})},
                    {"h0", floats({2, 3, 4}, 12)}},
                   f);
}

TEST_CASE("the storage dtypes export as ONNX's element types: shifts, remainders and casts of "
          "u8, i8 and u16 come back",
          "[onnx][export]") {
  kiln::Program p, startup;
  std::vector<kiln::Value> out;
  {
    kiln::ProgramGuard guard(p, startup);
    auto x = kiln::data("x", {2, 3}, kiln::DataType::UInt8);
    auto n = kiln::data("n", {2, 3}, kiln::DataType::UInt8);
    auto s = kiln::data("s", {2, 3}, kiln::DataType::Int8);
    auto b = kiln::main_builder();
    out.push_back(b.create<kiln::ShiftLeftOp>(x, n).result());
    out.push_back(b.create<kiln::ShiftRightOp>(x, n).result());
    out.push_back(b.create<kiln::ModOp>(s, b.create<kiln::FullOp>(std::vector<std::int64_t>{}, 3.0,
                                                                     kiln::DataType::Int8)
                                              .result())
                      .result());
    auto wide = b.create<kiln::CastOp>(x, kiln::DataType::UInt16).result();
    out.push_back(b.create<kiln::MulOp>(wide, wide).result());
    out.push_back(b.create<kiln::CastOp>(s, kiln::DataType::Float32).result());
  }
  kiln::Scope scope;
  check_round_trip(
      p, scope,
      {{"x", kiln::Tensor::from_vector<std::uint8_t>({2, 3}, {1, 2, 255, 128, 7, 0})},
       {"n", kiln::Tensor::from_vector<std::uint8_t>({2, 3}, {0, 1, 1, 7, 2, 3})},
       {"s", kiln::Tensor::from_vector<std::int8_t>({2, 3}, {-7, 7, -128, 127, 0, -1})}},
      out);
}

TEST_CASE("kiln.mod of floats and shifts of signed integers have no ONNX form: errors naming "
          "the op",
          "[onnx][export]") {
  kiln::Scope scope;
  kiln::Program p, startup;
  kiln::Value y;
  {
    kiln::ProgramGuard guard(p, startup);
    auto x = kiln::data("x", {2});
    y = kiln::main_builder().create<kiln::ModOp>(x, x).result();
  }
  KILN_CHECK_ERROR(kiln::onnx::export_model_to_bytes(p, scope, {"x"}, {y}), Unimplemented,
                   {"'kiln.mod'", "f32", "fmod"});
  kiln::Program q, q_startup;
  {
    kiln::ProgramGuard guard(q, q_startup);
    auto x = kiln::data("x", {2}, kiln::DataType::Int32);
    y = kiln::main_builder().create<kiln::ShiftLeftOp>(x, x).result();
  }
  KILN_CHECK_ERROR(kiln::onnx::export_model_to_bytes(q, scope, {"x"}, {y}), Unimplemented,
                   {"'kiln.shift_left'", "i32", "BitShift"});
}

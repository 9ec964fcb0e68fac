// Inference export: a model trained with an optimizer, saved with
// save_inference_model and loaded with load_inference_model into a fresh
// scope and executor, predicts what its for-test program predicts; feeds and
// fetches keep the order given; bad arguments, files that cannot be written,
// and missing, corrupt or mismatched files are kiln::Errors naming what is
// wrong, with existing files and the scope unchanged; extra weights warn.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "catch.hpp"
#include "io/io_test_util.h"
#include "test_util.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/executor.h"
#include "kiln/frontend/clone_for_test.h"
#include "kiln/frontend/frontend.h"
#include "kiln/io/inference_model.h"
#include "kiln/io/json.h"
#include "kiln/io/weights.h"
#include "kiln/runtime/cuda_context.h"
#include "kiln/support/warning.h"

using namespace kiln;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;
using kiln_io_test::read_all;
using kiln_io_test::TempDir;

namespace {

// x[-1,4] → Linear(4,8) → tanh → Dropout(0.3) → Linear(8,1) → pred (with a
// kiln.fetch op "pred"); MSE against label; Adam; trained 2 steps.
struct Trained {
  explicit Trained(Place place = Place::cpu()) : exe(place) {}
  Program main, startup;
  Value pred;
  std::vector<std::pair<Value, Value>> params_grads;
  Executor exe;
};

Tensor batch(std::int64_t rows, float shift) {
  std::vector<float> v(rows * 4);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 7) * 0.3f - 0.9f + shift;
  return Tensor::from_vector<float>(Dims{rows, 4}, v);
}

void train(Trained& t) {
  {
    UniqueNameGuard names;
    ProgramGuard guard(t.main, t.startup);
    Value x = data("x", {-1, 4});
    nn::Linear fc1(4, 8), fc2(8, 1);
    nn::Dropout drop(0.3, /*seed=*/7);
    t.pred = fc2(drop(nn::functional::tanh(fc1(x))));
    main_builder().create<FetchOp>(t.pred, "pred");
    Value label = data("label", {-1, 1});
    t.params_grads = optim::Adam(0.05).minimize(nn::MSELoss()(t.pred, label));
  }
  t.exe.run(t.startup);
  for (int step = 0; step < 2; ++step)
    t.exe.run(t.main, {{"x", batch(6, 0.1f * step)},
                       {"label", Tensor::from_vector<float>(Dims{6, 1}, {1, -1, 0.5, 0, 2, -0.5})}});
}

// What the original program's for-test clone predicts for `x` (it still
// computes the loss, so it needs a label too).
std::vector<float> reference(Trained& t, const Tensor& x) {
  IrMapping map;
  Program test = clone_for_test(t.main, &map);
  const Tensor label = Tensor::from_vector<float>(
      Dims{x.dims()[0], 1}, std::vector<float>(static_cast<std::size_t>(x.dims()[0]), 0.f));
  return t.exe.run(test, {{"x", x}, {"label", label}}, {map.lookup(t.pred)})[0].to_vector<float>();
}

std::vector<std::string> parameter_names(const Program& p) {
  std::vector<std::string> out;
  for (const auto& [name, param] : p.parameters()) out.push_back(name);
  return out;
}

// Captures warnings while alive.
struct WarningCapture {
  std::vector<std::string> messages;
  WarningHandler previous;
  WarningCapture()
      : previous(set_warning_handler([this](std::string_view m) { messages.emplace_back(m); })) {}
  ~WarningCapture() { set_warning_handler(previous); }
};

}  // namespace

TEST_CASE("a trained model saved with save_inference_model predicts the same after "
          "load_inference_model into a fresh scope",
          "[io][inference_model]") {
  Trained t;
  train(t);
  TempDir dir;
  const std::string prefix = dir.file("model");
  save_inference_model(prefix, {"x"}, {t.pred}, t.main, t.exe.scope());
  CHECK(dir.entries() == std::vector<std::string>{"model.json", "model.weights"});
  CHECK(inference_program_path(prefix) == prefix + ".json");
  CHECK(inference_weights_path(prefix) == prefix + ".weights");

  Executor fresh;
  WarningCapture warnings;
  InferenceModel m = load_inference_model(prefix, fresh.scope());
  CHECK(warnings.messages.empty());
  CHECK(m.feed_names == std::vector<std::string>{"x"});
  REQUIRE(m.fetch_targets.size() == 1);
  // Only the forward ops the prediction needs, in inference mode.
  CHECK(parameter_names(m.program) == std::vector<std::string>{"linear_0.b_0", "linear_0.w_0",
                                                               "linear_1.b_0", "linear_1.w_0"});
  for (Operation* op : m.program.block()) {
    INFO(op->name());
    CHECK(op->name() != "kiln.adam_");
    if (auto d = op->dyn_cast<DataOp>()) CHECK(d.attrs().name == "x");
    if (auto b = op->attribute("is_test").dyn_cast<BoolAttribute>()) CHECK(b.value());
  }
  CHECK(fresh.scope().local_var_names() == parameter_names(m.program));

  for (std::int64_t rows : {5, 1}) {
    const Tensor x = batch(rows, 0.37f);
    auto got = fresh.run(m.program, {{m.feed_names[0], x}}, m.fetch_targets)[0].to_vector<float>();
    CHECK(got == reference(t, x));
    // The kiln.fetch op keeps the original's name: fetching by name works too.
    CHECK(fresh.run(m.program, {{"x", x}}, {"pred"})[0].to_vector<float>() == got);
  }
}

TEST_CASE("a model trained on CUDA saves from the device and predicts the same loaded on CUDA or "
          "the CPU; weights loaded over device parameters stay on the device",
          "[io][inference_model][cuda]") {
  if (cuda_device_count() == 0) return;
  Trained t(Place::cuda(0));
  train(t);
  TempDir dir;
  const std::string prefix = dir.file("model");
  save_inference_model(prefix, {"x"}, {t.pred}, t.main, t.exe.scope());
  const Tensor x = batch(5, 0.37f);
  const std::vector<float> want = reference(t, x);
  for (Place place : {Place::cuda(0), Place::cpu()}) {
    INFO("loaded for " << place.to_string());
    Executor fresh(place);
    InferenceModel m = load_inference_model(prefix, fresh.scope());
    const auto got = fresh.run(m.program, {{m.feed_names[0], x}}, m.fetch_targets)[0].to_vector<float>();
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(1e-5));
    for (const std::string& name : parameter_names(m.program))
      CHECK(fresh.scope().find_var(name)->get<Tensor>().place() == place);  // moved by the run
  }
  load_inference_model(prefix, t.exe.scope());  // its weights over the device's parameters
  CHECK(t.exe.scope().find_var("linear_0.w_0")->get<Tensor>().place() == Place::cuda(0));
  CHECK(reference(t, x) == want);
}

TEST_CASE("a CNN saved with save_inference_model has each batch norm folded into the convolution "
          "before it, and predicts what its for-test program predicts",
          "[io][inference_model]") {
  Program main, startup;
  Value pred, loss;
  {
    UniqueNameGuard names;
    ProgramGuard guard(main, startup);
    Value x = data("x", {-1, 3, 8, 8});
    // The first convolution with a bias (the frontend adds it after the conv), the second without.
    nn::Conv2D c1(3, 8, 3, 1, 1, 1, 1, /*bias=*/true), c2(8, 8, 3, 2, 1, 1, 1, /*bias=*/false);
    nn::BatchNorm2D b1(8), b2(8);
    nn::Linear head(8 * 4 * 4, 3);
    Value h = nn::functional::relu(b2(c2(nn::functional::relu(b1(c1(x))))));
    pred = head(nn::functional::flatten(h));
    loss = nn::functional::cross_entropy(pred, data("label", {-1}, DataType::Int64));
    optim::Momentum(0.1, 0.9).minimize(loss);
  }
  Executor exe;
  exe.run(startup);
  std::vector<float> xs(4 * 3 * 8 * 8);
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = float(int(i * 29 % 23) - 11) / 5.f;
  const Tensor x = Tensor::from_vector<float>({4, 3, 8, 8}, xs);
  // Steps move the running statistics away from 0 and 1.
  for (int step = 0; step < 3; ++step)
    exe.run(main, {{"x", x}, {"label", Tensor::from_vector<std::int64_t>({4}, {0, 1, 2, 1})}});
  TempDir dir;
  save_inference_model(dir.file("cnn"), {"x"}, {pred}, main, exe.scope());

  Executor fresh;
  InferenceModel m = load_inference_model(dir.file("cnn"), fresh.scope());
  int norms = 0, convs = 0;
  for (Operation* op : m.program.block()) {
    norms += op->isa<BatchNormOp>();
    convs += op->isa<Conv2dOp>();
  }
  CHECK(norms == 0);
  CHECK(convs == 2);
  // The norms' four tensors and the convolutions' weights are folded into
  // a new weight and bias per convolution.
  CHECK(parameter_names(m.program) ==
        std::vector<std::string>{"batch_norm2d_0.w_0.folded_bias", "batch_norm2d_0.w_0.folded_weight",
                                 "batch_norm2d_1.w_0.folded_bias", "batch_norm2d_1.w_0.folded_weight",
                                 "linear_0.b_0", "linear_0.w_0"});
  IrMapping map;
  Program test = clone_for_test(main, &map);
  const auto want = exe.run(test, {{"x", x}, {"label", Tensor::from_vector<std::int64_t>({4}, {0, 0, 0, 0})}},
                            {map.lookup(pred)})[0]
                        .to_vector<float>();
  const auto got = fresh.run(m.program, {{"x", x}}, m.fetch_targets)[0].to_vector<float>();
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(1e-5).margin(1e-5));
}

TEST_CASE("feed names and fetch targets load in the order they were saved",
          "[io][inference_model]") {
  Program main, startup;
  Value u, v;
  {
    UniqueNameGuard names;
    ProgramGuard guard(main, startup);
    Value a = data("a", {2, 2});
    Value b = data("b", {2, 2});
    u = nn::Linear(2, 2)(a);
    v = main_builder().create<AddOp>(nn::functional::tanh(b), u).result();
  }
  Executor exe;
  exe.run(startup);
  TempDir dir;
  save_inference_model(dir.file("m"), {"b", "a"}, {v, u}, main, exe.scope());

  Executor fresh;
  InferenceModel m = load_inference_model(dir.file("m"), fresh.scope());
  CHECK(m.feed_names == std::vector<std::string>{"b", "a"});
  REQUIRE(m.fetch_targets.size() == 2);
  const Tensor ta = Tensor::from_vector<float>(Dims{2, 2}, {1, 2, 3, 4});
  const Tensor tb = Tensor::from_vector<float>(Dims{2, 2}, {-1, 0.5, 0, 2});
  auto want = exe.run(main, {{"a", ta}, {"b", tb}}, {v, u});
  auto got = fresh.run(m.program, {{"a", ta}, {"b", tb}}, m.fetch_targets);
  REQUIRE(got.size() == 2);
  CHECK(got[0].to_vector<float>() == want[0].to_vector<float>());
  CHECK(got[1].to_vector<float>() == want[1].to_vector<float>());
}

TEST_CASE("bad save_inference_model arguments are errors naming them, and write nothing",
          "[io][inference_model]") {
  Trained t;
  train(t);
  TempDir dir;
  const std::string prefix = dir.file("model");
  save_inference_model(prefix, {"x"}, {t.pred}, t.main, t.exe.scope());
  const std::string json_before = read_all(prefix + ".json");
  const std::string weights_before = read_all(prefix + ".weights");

  Program other;
  Value foreign = Builder(other).create<DataOp>("z", std::vector<std::int64_t>{2}).result();
  const Value grad = t.params_grads.at(0).second;
  const Scope& scope = t.exe.scope();
  KILN_CHECK_ERROR(save_inference_model(prefix, {"x"}, {}, t.main, scope), InvalidArgument,
                   {"no fetch targets"});
  KILN_CHECK_ERROR(save_inference_model(prefix, {"x"}, {t.pred, foreign}, t.main, scope),
                   InvalidArgument, {"fetch target #1", "'kiln.data'", "not a value of the program"});
  KILN_CHECK_ERROR(save_inference_model(prefix, {"x"}, {Value()}, t.main, scope), InvalidArgument,
                   {"fetch target #0", "null"});
  KILN_CHECK_ERROR(save_inference_model(prefix, {"x"}, {grad}, t.main, scope), InvalidArgument,
                   {"fetch target #0", "training-only"});
  KILN_CHECK_ERROR(save_inference_model(prefix, {"x", "nope"}, {t.pred}, t.main, scope), NotFound,
                   {"feed 'nope'", "not a kiln.data op"});
  KILN_CHECK_ERROR(save_inference_model(prefix, {"x", "label"}, {t.pred}, t.main, scope),
                   InvalidArgument, {"feed 'label'", "not needed"});
  KILN_CHECK_ERROR(save_inference_model(prefix, {}, {t.pred}, t.main, scope), InvalidArgument,
                   {"data 'x'", "not among the feed names"});
  KILN_CHECK_ERROR(save_inference_model(prefix, {"x", "x"}, {t.pred}, t.main, scope),
                   InvalidArgument, {"feed 'x'", "twice"});
  KILN_CHECK_ERROR(save_inference_model(prefix, {""}, {t.pred}, t.main, scope), InvalidArgument,
                   {"feed name is empty"});
  Scope empty;
  KILN_CHECK_ERROR(save_inference_model(prefix, {"x"}, {t.pred}, t.main, empty), NotFound,
                   {prefix + ".weights", "'linear_0.b_0'", "no initialized tensor"});

  CHECK(dir.entries() == std::vector<std::string>{"model.json", "model.weights"});
  CHECK(read_all(prefix + ".json") == json_before);
  CHECK(read_all(prefix + ".weights") == weights_before);
}

TEST_CASE("a save whose second file cannot be written leaves both existing files untouched",
          "[io][inference_model]") {
  Trained t;
  train(t);
  TempDir dir;
  const std::string prefix = dir.file("model");
  save_inference_model(prefix, {"x"}, {t.pred}, t.main, t.exe.scope());
  const std::string weights_before = read_all(prefix + ".weights");
  // Train on, so the new weights differ; the program file's path is now a
  // directory, so its rename fails after the weights file was replaced.
  t.exe.run(t.main, {{"x", batch(6, 0.5f)},
                     {"label", Tensor::from_vector<float>(Dims{6, 1}, {3, 3, 3, 3, 3, 3})}});
  fs::remove(prefix + ".json");
  fs::create_directory(prefix + ".json");
  KILN_CHECK_ERROR(save_inference_model(prefix, {"x"}, {t.pred}, t.main, t.exe.scope()),
                   Unavailable, {prefix + ".json"});
  CHECK(read_all(prefix + ".weights") == weights_before);
  CHECK(fs::is_directory(prefix + ".json"));
  CHECK(dir.entries() == std::vector<std::string>{"model.json", "model.weights"});
}

TEST_CASE("a weights file with tensors the program lacks loads with a warning naming them",
          "[io][inference_model]") {
  Trained t;
  train(t);
  TempDir dir;
  const std::string prefix = dir.file("model");
  save_inference_model(prefix, {"x"}, {t.pred}, t.main, t.exe.scope());
  // The whole training state (learning rate, Adam moments) instead.
  save_weights(inference_weights_path(prefix), t.exe.scope(), t.main);

  Executor fresh;
  WarningCapture warnings;
  InferenceModel m = load_inference_model(prefix, fresh.scope());
  REQUIRE(warnings.messages.size() == 1);
  CHECK_THAT(warnings.messages[0], Contains(prefix + ".weights"));
  CHECK_THAT(warnings.messages[0], Contains("'learning_rate_0'"));
  CHECK_THAT(warnings.messages[0], Contains("moment1"));
  CHECK(fresh.scope().local_var_names() == parameter_names(m.program));
  const Tensor x = batch(3, 0.f);
  CHECK(fresh.run(m.program, {{"x", x}}, m.fetch_targets)[0].to_vector<float>() ==
        reference(t, x));
}

TEST_CASE("a weights file missing a parameter of the model is an error naming it",
          "[io][inference_model]") {
  Trained t;
  train(t);
  TempDir dir;
  const std::string prefix = dir.file("model");
  save_inference_model(prefix, {"x"}, {t.pred}, t.main, t.exe.scope());
  Program partial;
  partial.set_parameter("linear_0.w_0", t.main.parameter("linear_0.w_0"));
  save_weights(inference_weights_path(prefix), t.exe.scope(), partial);

  Scope scope;
  KILN_CHECK_ERROR(load_inference_model(prefix, scope), NotFound,
                   {prefix + ".weights", "'linear_0.b_0'"});
  CHECK(scope.local_var_names().empty());
}

TEST_CASE("missing or corrupt inference model files are errors naming the file",
          "[io][inference_model]") {
  Trained t;
  train(t);
  TempDir dir;
  const std::string prefix = dir.file("model");
  const std::string json = prefix + ".json", weights = prefix + ".weights";
  Scope scope;

  KILN_CHECK_ERROR(load_inference_model(prefix, scope), NotFound, {json});
  save_inference_model(prefix, {"x"}, {t.pred}, t.main, t.exe.scope());
  const std::string good_json = read_all(json), good_weights = read_all(weights);
  auto write = [](const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  };

  fs::remove(weights);
  KILN_CHECK_ERROR(load_inference_model(prefix, scope), NotFound, {weights});

  write(weights, good_weights.substr(0, good_weights.size() / 2));
  KILN_CHECK_ERROR(load_inference_model(prefix, scope), DataLoss, {weights, "truncated"});
  std::string flipped = good_weights;
  flipped[flipped.size() / 2] ^= 0x5a;
  write(weights, flipped);
  KILN_CHECK_ERROR(load_inference_model(prefix, scope), DataLoss, {weights});
  write(weights, good_weights);

  write(json, good_json.substr(0, good_json.size() / 2));
  KILN_CHECK_ERROR(load_inference_model(prefix, scope), InvalidArgument, {json});
  write(json, "not json at all");
  KILN_CHECK_ERROR(load_inference_model(prefix, scope), InvalidArgument, {json});

  // A program file that does not say what to fetch, or says it badly.
  Program no_fetch;
  Value x = Builder(no_fetch).create<DataOp>("x", std::vector<std::int64_t>{2}).result();
  save_program_file(no_fetch, json);
  KILN_CHECK_ERROR(load_inference_model(prefix, scope), InvalidArgument,
                   {json, "no kiln.fetch op"});
  Builder(no_fetch).create<FetchOp>(x, "a", 1);
  save_program_file(no_fetch, json);
  KILN_CHECK_ERROR(load_inference_model(prefix, scope), InvalidArgument, {json, "col 0 is missing"});
  Builder(no_fetch).create<FetchOp>(x, "b", 1);
  Builder(no_fetch).create<FetchOp>(x, "c", 0);
  save_program_file(no_fetch, json);
  KILN_CHECK_ERROR(load_inference_model(prefix, scope), InvalidArgument,
                   {json, "col 1 is repeated"});
  CHECK(scope.local_var_names().empty());

  write(json, good_json);
  CHECK(load_inference_model(prefix, scope).fetch_targets.size() == 1);
}

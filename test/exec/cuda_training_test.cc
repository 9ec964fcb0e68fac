// Training on a CUDA device as a user does it — `Executor(Place::cuda(0))`,
// the startup program, then steps — against the same program on the CPU:
// the parameters the startup program draws are bit-identical (one
// counter-based generator on both places), and the loss of 20 steps follows
// the CPU's to 1e-4 relative (the device's GEMMs and reductions sum in
// another order). Every op without a CUDA kernel runs on the CPU between
// copies, so these also check the placement's copies and write-backs.
// [cuda]: each case skips itself on a machine without a device.
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "catch.hpp"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/executor.h"
#include "kiln/frontend/frontend.h"
#include "kiln/frontend/optimizer.h"
#include "kiln/kernel/random.h"
#include "kiln/runtime/cuda_context.h"
#include "test_util.h"

using namespace kiln;

namespace {

bool have_device() {
  if (cuda_device_count() > 0) return true;
  WARN("no CUDA device: the [cuda] training checks are skipped");
  return false;
}

struct Model {
  Program main, startup;
  Value loss;
  FeedMap feeds;
};

using BuildFn = std::function<void(Model&)>;

std::vector<float> normal(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<std::int64_t> labels(std::size_t n, std::int64_t classes, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::int64_t> d(0, classes - 1);
  std::vector<std::int64_t> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

void mlp(Model& m) {
  {
    ProgramGuard guard(m.main, m.startup);
    auto x = data("x", {-1, 32});
    auto label = data("label", {-1}, DataType::Int64);
    nn::Linear fc1(32, 64), fc2(64, 10);
    nn::ReLU relu;
    m.loss = nn::CrossEntropyLoss()(fc2(relu(fc1(x))), label);
    optim::Adam(1e-2).minimize(m.loss);
  }
  m.feeds = {{"x", Tensor::from_vector<float>({16, 32}, normal(16 * 32, 1))},
             {"label", Tensor::from_vector<std::int64_t>({16}, labels(16, 10, 2))}};
}

void cnn(Model& m) {
  {
    ProgramGuard guard(m.main, m.startup);
    auto x = data("x", {-1, 1, 8, 8});
    auto label = data("label", {-1}, DataType::Int64);
    nn::Sequential net;
    net.emplace<nn::Conv2D>(1, 8, 3, 1, 1);
    net.emplace<nn::ReLU>();
    net.emplace<nn::MaxPool2D>(2);
    net.emplace<nn::Flatten>();
    net.emplace<nn::Linear>(8 * 4 * 4, 10);
    m.loss = nn::CrossEntropyLoss()(net(x), label);
    optim::Adam(1e-2).minimize(m.loss);
  }
  m.feeds = {{"x", Tensor::from_vector<float>({16, 1, 8, 8}, normal(16 * 64, 3))},
             {"label", Tensor::from_vector<std::int64_t>({16}, labels(16, 10, 4))}};
}

void transformer(Model& m) {
  constexpr std::int64_t vocab = 20, d = 32, seq = 8, batch = 4;
  {
    ProgramGuard guard(m.main, m.startup);
    auto ids = data("ids", {batch, seq}, DataType::Int64);
    auto label = data("label", {batch * seq}, DataType::Int64);
    nn::Embedding tok(vocab, d);
    nn::TransformerEncoderLayer block(d, 4, 64, /*dropout=*/0.0, "gelu");
    nn::LayerNorm norm({d});
    nn::Linear head(d, vocab);
    Builder b = main_builder();
    Value logits = head(norm(block(tok(ids), /*causal=*/true)));
    logits = b.create<ReshapeOp>(logits, std::vector<std::int64_t>{-1, vocab}).result();
    m.loss = nn::functional::cross_entropy(logits, label);
    optim::AdamW(3e-3, 0.9, 0.999, 1e-8, 0.01).minimize(m.loss);
  }
  m.feeds = {{"ids", Tensor::from_vector<std::int64_t>({batch, seq}, labels(batch * seq, vocab, 5))},
             {"label", Tensor::from_vector<std::int64_t>({batch * seq}, labels(batch * seq, vocab, 6))}};
}

// Startup then 20 steps at `place`: (the parameters after startup, the losses).
std::pair<std::vector<std::pair<std::string, Tensor>>, std::vector<double>> train(
    const BuildFn& build, Place place) {
  UniqueNameGuard names;     // the same parameter names on both places
  set_random_seed(0x5eed);   // and the same draws from the process generator
  Model m;
  build(m);
  Executor exe(place, {.num_threads = 1});
  exe.run(m.startup);
  std::vector<std::pair<std::string, Tensor>> params;
  for (const std::string& name : exe.scope().local_var_names()) {
    const Variable* v = exe.scope().find_local_var(name);
    if (v && v->is<Tensor>()) params.emplace_back(name, copy_to_place(v->get<Tensor>(), Place::cpu()));
  }
  std::vector<double> losses;
  for (int step = 0; step < 20; ++step) {
    Tensor loss = exe.run(m.main, m.feeds, {m.loss})[0];
    REQUIRE(loss.place() == Place::cpu());
    losses.push_back(loss.to_vector<float>()[0]);
  }
  return {params, losses};
}

void check_like_cpu(const BuildFn& build) {
  auto [cpu_params, cpu_losses] = train(build, Place::cpu());
  auto [cuda_params, cuda_losses] = train(build, Place::cuda(0));
  REQUIRE(cpu_params.size() == cuda_params.size());
  for (std::size_t k = 0; k < cpu_params.size(); ++k) {
    INFO("parameter " << cpu_params[k].first);
    REQUIRE(cpu_params[k].first == cuda_params[k].first);
    const Tensor& a = cpu_params[k].second;
    const Tensor& b = cuda_params[k].second;
    REQUIRE(a.type_string() == b.type_string());
    CHECK(std::memcmp(a.raw_data(), b.raw_data(), a.bytes()) == 0);  // bit-identical
  }
  for (std::size_t s = 0; s < cpu_losses.size(); ++s) {
    INFO("step " << s << ": cpu " << cpu_losses[s] << ", cuda " << cuda_losses[s]);
    CHECK(std::abs(cuda_losses[s] - cpu_losses[s]) <= 1e-4 * std::max(1.0, std::abs(cpu_losses[s])));
  }
  CHECK(cuda_losses.back() < cuda_losses.front());
}

}  // namespace

TEST_CASE("an MLP trains on CUDA with the CPU's parameters and loss curve", "[cuda][train]") {
  if (!have_device()) return;
  check_like_cpu(mlp);
}

TEST_CASE("a small CNN trains on CUDA with the CPU's parameters and loss curve", "[cuda][train]") {
  if (!have_device()) return;
  check_like_cpu(cnn);
}

TEST_CASE("a causal transformer block trains on CUDA with the CPU's parameters and loss curve",
          "[cuda][train]") {
  if (!have_device()) return;
  check_like_cpu(transformer);
}

TEST_CASE("a CUDA graph replays the seed model's step with the launches' losses", "[cuda][train]") {
  if (!have_device()) return;
  auto losses = [](bool graph, Place feed_place) {
    UniqueNameGuard names;
    set_random_seed(0x5eed);
    Model m;
    {
      ProgramGuard guard(m.main, m.startup);
      auto x = data("x", {16, 16}, DataType::Float32, feed_place);
      auto label = data("label", {16, 1}, DataType::Float32, feed_place);
      m.loss = nn::MSELoss()(nn::Linear(16, 1)(x), label);
      optim::Adam(1e-2).minimize(m.loss);
    }
    m.feeds = {{"x", copy_to_place(Tensor::from_vector<float>({16, 16}, normal(256, 7)), feed_place)},
               {"label", copy_to_place(Tensor::from_vector<float>({16, 1}, normal(16, 8)), feed_place)}};
    ExecutionOptions o;
    o.num_threads = 1;
    o.cuda_graph = graph;
    Executor exe(Place::cuda(0), o);
    exe.run(m.startup);
    std::vector<double> out;
    for (int step = 0; step < 20; ++step)
      out.push_back(exe.run(m.main, m.feeds, {m.loss})[0].to_vector<float>()[0]);
    return out;
  };
  const auto launches = losses(false, Place::cpu());
  // Host feeds (staged in page-locked memory) and a batch kept on the device
  // (staged in device memory) replay alike.
  for (Place feed_place : {Place::cpu(), Place::cuda(0)}) {
    INFO("feeds on " << feed_place.to_string());
    const auto replays = losses(true, feed_place);
    for (std::size_t s = 0; s < launches.size(); ++s) {
      INFO("step " << s);
      CHECK(replays[s] == launches[s]);  // the same kernels in the same order
    }
  }
}

TEST_CASE("a batch kept on the device (data ops placed there) trains as the host-fed one does",
          "[cuda][train]") {
  if (!have_device()) return;
  auto losses = [](Place feed_place) {
    UniqueNameGuard names;
    set_random_seed(0x5eed);
    Model m;
    {
      ProgramGuard guard(m.main, m.startup);
      auto x = data("x", {16, 32}, DataType::Float32, feed_place);
      auto label = data("label", {16}, DataType::Int64, feed_place);
      m.loss = nn::CrossEntropyLoss()(nn::Linear(32, 10)(x), label);
      optim::Adam(1e-2).minimize(m.loss);
    }
    m.feeds = {{"x", copy_to_place(Tensor::from_vector<float>({16, 32}, normal(16 * 32, 9)),
                                   feed_place)},
               {"label", copy_to_place(Tensor::from_vector<std::int64_t>({16}, labels(16, 10, 10)),
                                       feed_place)}};
    Executor exe(Place::cuda(0), {.num_threads = 1});
    exe.run(m.startup);
    std::vector<double> out;
    for (int step = 0; step < 5; ++step)
      out.push_back(exe.run(m.main, m.feeds, {m.loss})[0].to_vector<float>()[0]);
    // A host tensor fed to a data op on the device is refused, naming it.
    if (feed_place != Place::cpu()) {
      FeedMap host{{"x", Tensor::zeros({16, 32}, DataType::Float32)}, {"label", m.feeds.at("label")}};
      KILN_CHECK_ERROR(exe.run(m.main, host, {m.loss}), InvalidArgument, {"'x'", "cuda:0"});
    }
    return out;
  };
  CHECK(losses(Place::cuda(0)) == losses(Place::cpu()));
}

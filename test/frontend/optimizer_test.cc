// Optimizers end to end: the seed model — x[16,16] → Linear(16,
// 1) → MSE against label[16,1] — from fixed weights and data, trained for 5
// steps through kiln::Executor with SGD, Momentum (plain and Nesterov), Adam
// and AdamW, with and without global-norm clipping and L2 regularization,
// each compared with the same training computed by hand in plain loops
// (forward, gradients, update) within 1e-6 relative. Plus the programs'
// shape (learning rate and state as startup-initialized parameters), a
// learning-rate schedule, a save/load of the whole training state, and errors.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <unistd.h>
#include <string>
#include <vector>

#include "catch.hpp"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/dialect/optimizer_ops.h"
#include "kiln/exec/executor.h"
#include "kiln/frontend/frontend.h"
#include "kiln/frontend/optimizer.h"
#include "kiln/io/weights.h"

using namespace kiln;

namespace {

constexpr int kN = 16, kIn = 16;

// ---- the hand computation ----

enum class Kind { Sgd, Momentum, Nesterov, Adam, AdamW };

struct Hyper {
  Kind kind = Kind::Sgd;
  double lr = 0.1;
  double momentum = 0.9;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weight_decay = 0.0;  // L2 coefficient; AdamW: the decoupled coefficient
  double clip = 0.0;          // global-norm max; 0: no clipping
};

struct RefParam {
  std::vector<double> p, v, m1, m2;
  double b1p = 0, b2p = 0;
  void init(std::vector<double> value, const Hyper& h) {
    p = std::move(value);
    v.assign(p.size(), 0.0);
    m1.assign(p.size(), 0.0);
    m2.assign(p.size(), 0.0);
    b1p = h.beta1;
    b2p = h.beta2;
  }
};

struct Data {
  std::vector<double> x, label, w0;  // x row-major [16, 16]
  double b0 = 0.05;
};

Data make_data() {
  Data d;
  for (int i = 0; i < kN; ++i)
    for (int k = 0; k < kIn; ++k) d.x.push_back(std::sin(0.3 * i + 0.7 * k + 0.1));
  for (int i = 0; i < kN; ++i) d.label.push_back(std::cos(0.5 * i) + 0.5);
  for (int k = 0; k < kIn; ++k) d.w0.push_back(0.1 * ((k % 5) - 2) + 0.01 * k);
  return d;
}

// One update of one parameter with its (final) gradient.
void ref_update(RefParam& s, const std::vector<double>& g, const Hyper& h) {
  switch (h.kind) {
    case Kind::Sgd:
      for (std::size_t i = 0; i < s.p.size(); ++i) s.p[i] -= h.lr * g[i];
      break;
    case Kind::Momentum:
    case Kind::Nesterov:
      for (std::size_t i = 0; i < s.p.size(); ++i) {
        s.v[i] = h.momentum * s.v[i] + g[i];
        s.p[i] -= h.kind == Kind::Nesterov ? h.lr * (g[i] + h.momentum * s.v[i]) : h.lr * s.v[i];
      }
      break;
    case Kind::Adam:
    case Kind::AdamW: {
      const double lr_t = h.lr * std::sqrt(1 - s.b2p) / (1 - s.b1p);
      for (std::size_t i = 0; i < s.p.size(); ++i) {
        if (h.kind == Kind::AdamW) s.p[i] -= h.lr * h.weight_decay * s.p[i];
        s.m1[i] = h.beta1 * s.m1[i] + (1 - h.beta1) * g[i];
        s.m2[i] = h.beta2 * s.m2[i] + (1 - h.beta2) * g[i] * g[i];
        s.p[i] -= lr_t * s.m1[i] / (std::sqrt(s.m2[i]) + h.eps * std::sqrt(1 - s.b2p));
      }
      s.b1p *= h.beta1;
      s.b2p *= h.beta2;
      break;
    }
  }
}

struct RefModel {
  Hyper h;
  RefParam w, b;
  bool clipped = false;  // whether the last step's global norm exceeded the clip

  RefModel(const Data& d, Hyper hyper) : h(hyper) {
    w.init(d.w0, h);
    b.init({d.b0}, h);
  }

  // The loss before the update, as the executor's fetch sees it.
  double step(const Data& d) {
    std::vector<double> r(kN);
    double loss = 0;
    for (int i = 0; i < kN; ++i) {
      double y = b.p[0];
      for (int k = 0; k < kIn; ++k) y += d.x[i * kIn + k] * w.p[k];
      r[i] = y - d.label[i];
      loss += r[i] * r[i];
    }
    loss /= kN;
    // d loss / d y_i = 2 r_i / N
    std::vector<double> gw(kIn, 0.0), gb(1, 0.0);
    for (int i = 0; i < kN; ++i) {
      const double gy = 2 * r[i] / kN;
      for (int k = 0; k < kIn; ++k) gw[k] += d.x[i * kIn + k] * gy;
      gb[0] += gy;
    }
    if (h.clip > 0) {
      double sq = 0;
      for (double g : gw) sq += g * g;
      for (double g : gb) sq += g * g;
      const double norm = std::sqrt(sq);
      clipped = norm > h.clip;
      const double scale = h.clip / std::max(norm, h.clip);
      for (double& g : gw) g *= scale;
      for (double& g : gb) g *= scale;
    }
    if (h.weight_decay > 0 && h.kind != Kind::AdamW) {
      for (int k = 0; k < kIn; ++k) gw[k] += h.weight_decay * w.p[k];
      gb[0] += h.weight_decay * b.p[0];
    }
    ref_update(w, gw, h);
    ref_update(b, gb, h);
    return loss;
  }
};

// ---- the same through kiln ----

std::unique_ptr<optim::Optimizer> make_optimizer(const Hyper& h) {
  std::optional<optim::ClipGradByGlobalNorm> clip;
  if (h.clip > 0) clip = optim::ClipGradByGlobalNorm(h.clip);
  switch (h.kind) {
    case Kind::Sgd: return std::make_unique<optim::SGD>(h.lr, h.weight_decay, clip);
    case Kind::Momentum:
    case Kind::Nesterov:
      return std::make_unique<optim::Momentum>(h.lr, h.momentum, h.kind == Kind::Nesterov,
                                               h.weight_decay, clip);
    case Kind::Adam:
      return std::make_unique<optim::Adam>(h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, clip);
    case Kind::AdamW:
      return std::make_unique<optim::AdamW>(h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, clip);
  }
  return nullptr;
}

struct KilnModel {
  Program main, startup;
  Value loss;
  std::string w_name, b_name;
  std::unique_ptr<optim::Optimizer> opt;

  explicit KilnModel(const Hyper& h) {
    UniqueNameGuard names;
    ProgramGuard guard(main, startup);
    auto x = data("x", {kN, kIn}, DataType::Float64);
    auto label = data("label", {kN, 1}, DataType::Float64);
    nn::Linear fc(kIn, 1, true, nullptr, nullptr, DataType::Float64);
    loss = nn::MSELoss()(fc(x), label);
    w_name = parameter_name(fc.weight());
    b_name = parameter_name(fc.bias());
    opt = make_optimizer(h);
    opt->minimize(loss);
  }

  FeedMap feed(const Data& d) const {
    return {{"x", Tensor::from_vector<double>(Dims{kN, kIn}, d.x)},
            {"label", Tensor::from_vector<double>(Dims{kN, 1}, d.label)}};
  }

  // Startup, then the fixed weights written over the random initial ones.
  void init(Executor& exe, const Data& d) const {
    exe.run(startup);
    exe.scope().var(w_name).set(Tensor::from_vector<double>(Dims{kIn, 1}, d.w0));
    exe.scope().var(b_name).set(Tensor::from_vector<double>(Dims{1}, {d.b0}));
  }

  std::vector<double> param(Executor& exe, const std::string& name) const {
    return exe.scope().find_var(name)->get<Tensor>().to_vector<double>();
  }
};

void check_rel(double got, double want, const std::string& what) {
  INFO(what << ": got " << got << ", want " << want);
  CHECK(std::abs(got - want) <= 1e-6 * std::max(std::abs(want), 1e-12));
}

void check_rel(const std::vector<double>& got, const std::vector<double>& want,
               const std::string& what) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) check_rel(got[i], want[i], what + "[" + std::to_string(i) + "]");
}

// Trains kiln and the hand computation side by side for `steps` steps and
// compares losses and parameters after every step. Returns the hand model.
RefModel train_and_compare(const Hyper& h, int steps = 5, unsigned threads = 1) {
  const Data d = make_data();
  KilnModel m(h);
  Executor exe(Place::cpu(), {.num_threads = threads});
  m.init(exe, d);
  RefModel ref(d, h);
  const FeedMap feed = m.feed(d);
  for (int s = 0; s < steps; ++s) {
    INFO("step " << s);
    const double want = ref.step(d);
    auto out = exe.run(m.main, feed, {m.loss});
    REQUIRE(out.size() == 1);
    check_rel(out[0].to_vector<double>().at(0), want, "loss");
    check_rel(m.param(exe, m.w_name), ref.w.p, m.w_name);
    check_rel(m.param(exe, m.b_name), ref.b.p, m.b_name);
  }
  return ref;
}

std::vector<double> final_weights(const Hyper& h) {
  const Data d = make_data();
  KilnModel m(h);
  Executor exe(Place::cpu(), {.num_threads = 1});
  m.init(exe, d);
  for (int s = 0; s < 5; ++s) exe.run(m.main, m.feed(d), {m.loss});
  return m.param(exe, m.w_name);
}

bool differ(const std::vector<double>& a, const std::vector<double>& b) {
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::abs(a[i] - b[i]) > 1e-6 * std::abs(b[i])) return true;
  return false;
}

}  // namespace

TEST_CASE("5 SGD steps of the seed model match the hand computation", "[frontend][optim]") {
  train_and_compare({.kind = Kind::Sgd, .lr = 0.1});
}

TEST_CASE("5 Momentum steps (plain and Nesterov) match the hand computation",
          "[frontend][optim]") {
  train_and_compare({.kind = Kind::Momentum, .lr = 0.05, .momentum = 0.9});
  train_and_compare({.kind = Kind::Nesterov, .lr = 0.05, .momentum = 0.8});
}

TEST_CASE("5 Adam steps of the seed model match Paddle's adam computed by hand",
          "[frontend][optim]") {
  train_and_compare({.kind = Kind::Adam, .lr = 0.01});
  train_and_compare({.kind = Kind::Adam, .lr = 0.02, .beta1 = 0.8, .beta2 = 0.9, .eps = 1e-6});
  // Two threads: the WAR/WAW order of the in-place updates still holds.
  train_and_compare({.kind = Kind::Adam, .lr = 0.01}, 5, 2);
}

TEST_CASE("5 AdamW steps match the hand computation (decoupled weight decay)",
          "[frontend][optim]") {
  const Hyper h{.kind = Kind::AdamW, .lr = 0.01, .weight_decay = 0.5};
  train_and_compare(h);
  Hyper no_decay = h;
  no_decay.kind = Kind::Adam;
  no_decay.weight_decay = 0.0;
  CHECK(differ(final_weights(h), final_weights(no_decay)));
}

TEST_CASE("global-norm clipping changes the steps as computed by hand", "[frontend][optim]") {
  for (Kind k : {Kind::Sgd, Kind::Momentum, Kind::Adam}) {
    INFO("kind " << int(k));
    const Hyper h{.kind = k, .lr = 0.05, .clip = 0.05};
    RefModel ref = train_and_compare(h);
    CHECK(ref.clipped);  // the clip was active, so the comparison tested it
    Hyper unclipped = h;
    unclipped.clip = 0;
    CHECK(differ(final_weights(h), final_weights(unclipped)));
  }
  // A max_norm above the gradients' norm changes nothing.
  Hyper loose{.kind = Kind::Sgd, .lr = 0.05, .clip = 1e6};
  RefModel ref = train_and_compare(loose);
  CHECK_FALSE(ref.clipped);
  Hyper none = loose;
  none.clip = 0;
  CHECK_FALSE(differ(final_weights(loose), final_weights(none)));
}

TEST_CASE("L2 regularization (weight_decay) changes the steps as computed by hand",
          "[frontend][optim]") {
  for (Kind k : {Kind::Sgd, Kind::Nesterov, Kind::Adam}) {
    INFO("kind " << int(k));
    const Hyper h{.kind = k, .lr = 0.05, .weight_decay = 0.3};
    train_and_compare(h);
    Hyper plain = h;
    plain.weight_decay = 0;
    CHECK(differ(final_weights(h), final_weights(plain)));
  }
  // Clipping first, then L2 (Paddle's order).
  train_and_compare({.kind = Kind::Momentum, .lr = 0.05, .weight_decay = 0.2, .clip = 0.05});
}

TEST_CASE("the learning rate and optimizer state are non-trainable parameters set by startup",
          "[frontend][optim]") {
  KilnModel m({.kind = Kind::Adam, .lr = 0.025, .beta1 = 0.85, .beta2 = 0.95});
  REQUIRE(m.opt->learning_rate_names() == std::vector<std::string>{"learning_rate_0"});
  const std::vector<std::string> state{"learning_rate_0",
                                       m.w_name + "_moment1_0",
                                       m.w_name + "_moment2_0",
                                       m.w_name + "_beta1_pow_acc_0",
                                       m.w_name + "_beta2_pow_acc_0",
                                       m.b_name + "_moment1_0",
                                       m.b_name + "_beta2_pow_acc_0"};
  for (const auto& n : state) {
    INFO(n);
    CHECK(m.main.has_parameter(n));
    CHECK(m.startup.has_parameter(n));
  }
  // Only the model's weights are trainable: the state gets no gradient.
  auto trainable = trainable_parameters(m.main);
  std::vector<std::string> names;
  for (Value v : trainable) names.push_back(parameter_name(v));
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{m.b_name, m.w_name});

  Executor exe;
  exe.run(m.startup);
  auto get = [&](const std::string& n) {
    return exe.scope().find_var(n)->get<Tensor>().to_vector<double>();
  };
  CHECK(get("learning_rate_0") == std::vector<double>{0.025});
  CHECK(get(m.w_name + "_moment1_0") == std::vector<double>(kIn, 0.0));
  CHECK(get(m.w_name + "_beta1_pow_acc_0") == std::vector<double>{0.85});
  CHECK(get(m.b_name + "_beta2_pow_acc_0") == std::vector<double>{0.95});

  // One adam_ per parameter, at the end of the main program, updating it in place.
  int updates = 0;
  for (Operation* op : m.main.block())
    if (op->isa<Adam_Op>()) {
      ++updates;
      CHECK(op->result_type(0) == op->operand_source(0).type());
    }
  CHECK(updates == 2);
  CHECK(m.main.block().back()->isa<Adam_Op>());
}

TEST_CASE("a learning-rate schedule writes the learning-rate parameter between steps",
          "[frontend][optim]") {
  const Data d = make_data();
  const Hyper h{.kind = Kind::Momentum, .lr = 0.1};
  KilnModel m(h);
  Executor exe(Place::cpu(), {.num_threads = 1});
  m.init(exe, d);
  RefModel ref(d, h);
  for (int s = 0; s < 5; ++s) {
    const double lr = 0.1 * std::pow(0.5, s);  // halve every step
    m.opt->set_learning_rate(exe.scope(), lr);
    ref.h.lr = lr;
    const double want = ref.step(d);
    check_rel(exe.run(m.main, m.feed(d), {m.loss})[0].to_vector<double>()[0], want, "loss");
  }
  check_rel(m.param(exe, m.w_name), ref.w.p, "w");
  Scope empty;
  CHECK_THROWS_AS(m.opt->set_learning_rate(empty, 0.1), Error);
}

TEST_CASE("training saved with its optimizer state resumes exactly in a fresh executor",
          "[frontend][optim]") {
  const Data d = make_data();
  const Hyper h{.kind = Kind::Adam, .lr = 0.01};
  KilnModel m(h);
  const std::string path = "/tmp/kiln_optim_test_" + std::to_string(::getpid()) + ".kw";
  Executor a(Place::cpu(), {.num_threads = 1});
  m.init(a, d);
  for (int s = 0; s < 2; ++s) a.run(m.main, m.feed(d), {m.loss});
  save_weights(path, a.scope(), m.main);  // weights, moments, beta powers, learning rate
  for (int s = 0; s < 3; ++s) a.run(m.main, m.feed(d), {m.loss});

  Executor b(Place::cpu(), {.num_threads = 1});
  load_weights(path, b.scope(), m.main);
  for (int s = 0; s < 3; ++s) b.run(m.main, m.feed(d), {m.loss});
  std::remove(path.c_str());
  CHECK(m.param(b, m.w_name) == m.param(a, m.w_name));
  CHECK(m.param(b, m.b_name) == m.param(a, m.b_name));
}

TEST_CASE("optimizers reject bad settings and losses with kiln::Error", "[frontend][optim]") {
  CHECK_THROWS_AS(optim::ClipGradByGlobalNorm(0.0), Error);
  CHECK_THROWS_AS(optim::ClipGradByGlobalNorm(-1.0), Error);
  CHECK_THROWS_AS(optim::Adam(0.1, 1.0), Error);
  CHECK_THROWS_AS(optim::Adam(0.1, 0.9, -0.1), Error);
  CHECK_THROWS_AS(optim::SGD(0.1, -1.0), Error);
  CHECK_THROWS_AS(optim::SGD(std::nan("")), Error);
  CHECK_THROWS_AS(optim::Momentum(0.1, -0.9), Error);
  try {
    optim::AdamW(0.1, 0.9, 2.0);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK_THAT(e.message(), Catch::Contains("AdamW") && Catch::Contains("beta2"));
  }

  // No ProgramGuard: nothing to build into.
  {
    Program p, s;
    Value loss;
    {
      ProgramGuard g(p, s);
      auto x = data("x", {2, 2}, DataType::Float64);
      loss = nn::MSELoss()(nn::Linear(2, 2, true, nullptr, nullptr, DataType::Float64)(x), x);
    }
    const auto before = p.num_ops();
    try {
      optim::SGD(0.1).minimize(loss);
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::PreconditionNotMet);
    }
    CHECK(p.num_ops() == before);
  }
  // A loss that depends on no trainable parameter.
  {
    Program p, s;
    ProgramGuard g(p, s);
    auto x = data("x", {2, 2}, DataType::Float64);
    auto y = data("y", {2, 2}, DataType::Float64);
    Value loss = nn::MSELoss()(x, y);
    try {
      optim::Adam(0.1).minimize(loss);
      FAIL("no error");
    } catch (const Error& e) {
      CHECK_THAT(e.message(), Catch::Contains("Adam") && Catch::Contains("no trainable parameter"));
    }
  }
}

TEST_CASE("a minimize that fails on a parameter's dtype leaves both programs unchanged",
          "[frontend][optim]") {
  using namespace kiln;
  UniqueNameGuard names;
  Program main_prog, startup;
  ProgramGuard guard(main_prog, startup);
  Value w = create_parameter("w", {4}, DataType::Int32, init::Constant(1));
  Value w32 = main_builder().create<CastOp>(w, DataType::Float32).result();
  Value loss = main_builder().create<MeanOp>(w32).result();
  const std::size_t main_ops = main_prog.block().size(), startup_ops = startup.block().size();
  const std::size_t params = main_prog.parameters().size();
  try {
    optim::Adam(0.1).minimize(loss);
    FAIL("no kiln::Error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::InvalidArgument);
    CHECK_THAT(e.message(), Catch::Contains("f32 or f64") && Catch::Contains("'w'"));
  }
  CHECK(main_prog.block().size() == main_ops);
  CHECK(startup.block().size() == startup_ops);
  CHECK(main_prog.parameters().size() == params);
}

TEST_CASE("apply_gradients points an update at the bf16 or f16 value whose exact f32 cast is its gradient, "
          "and at no other cast's input",
          "[frontend][optim]") {
  using namespace kiln;
  UniqueNameGuard names;
  Program main_prog, startup;
  ProgramGuard guard(main_prog, startup);
  Builder b = main_builder();
  const std::vector<std::int64_t> dims{3};
  Value h16 = b.create<DataOp>("h16", dims, DataType::Float16).result();
  Value h32 = b.create<DataOp>("h32", dims, DataType::Float32).result();
  Value up = b.create<CastOp>(h16, DataType::Float32).result();        // exact: f16 → f32
  Value rounded = b.create<CastOp>(h16, DataType::BFloat16).result();  // f16 → bf16 rounds
  Value same = b.create<CastOp>(h32, DataType::Float32).result();      // f32 → f32
  std::vector<std::pair<Value, Value>> pairs;
  for (Value g : {up, rounded, same}) {
    Value w = create_parameter(unique_name("w"), dims, DataType::Float32, init::Constant(1));
    pairs.emplace_back(w, g);
  }
  const auto ops = optim::AdamW(0.1).apply_gradients(pairs);
  REQUIRE(ops.size() == 3);  // sorted by parameter name: w_0, w_1, w_2
  CHECK(ops[0]->operand_source(kGradOperand) == h16);
  CHECK(ops[1]->operand_source(kGradOperand) == rounded);
  CHECK(ops[2]->operand_source(kGradOperand) == same);
  main_prog.verify();
}

// Mixed precision O1 (kiln/frontend/amp.h) on the CPU: the forward's
// matmuls read bf16 casts, one per value, the rest reads f32 casts back;
// the parameters and their gradients stay f32; an MLP and transformer
// blocks trained in bf16 end within 2 % of the f32 loss; bad options are
// errors that change nothing.
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "frontend/frontend_test_util.h"
#include "kiln/frontend/amp.h"
#include "kiln/frontend/clone_for_test.h"
#include "kiln/io/json.h"
#include "kiln/ir/parser.h"
#include "kiln/runtime/cuda_context.h"
#include "kiln/frontend/op_role.h"

using namespace kiln;
using namespace kiln_frontend_test;

namespace {


DataType dtype_of(Value v) { return shaped_data_type(v.type()); }

struct Model {
  GuardedPrograms g;
  Value loss;
  std::vector<std::pair<Value, Value>> grads;
  FeedMap feed;
};

// x[128, 16] -> Linear(16, 64), GELU -> (two heads of one hidden value:
// the hidden read by two matmuls) -> MSE; Adam, decorated when `amp`.
std::unique_ptr<Model> mlp(const amp::Options* amp_options) {
  auto m = std::make_unique<Model>();
  Value x = data("x", {128, 16});
  Value label = data("label", {128, 1});
  Value h = nn::functional::gelu(nn::Linear(16, 64)(x));
  Value a = nn::Linear(64, 32)(h), b = nn::Linear(64, 32)(h);
  Value ab = main_builder().create<MulOp>(nn::functional::gelu(a), nn::functional::tanh(b)).result();
  Value out = nn::Linear(32, 1)(ab);
  m->loss = nn::MSELoss()(out, label);
  auto opt = optim::Adam(1e-2);
  m->grads = amp_options ? amp::decorate(opt, *amp_options).minimize(m->loss) : opt.minimize(m->loss);
  m->feed = {{"x", normal_f32({128, 16}, 1)}, {"label", normal_f32({128, 1}, 2)}};
  return m;
}

// Two causal transformer blocks and a linear head over x[4, 16, 32].
std::unique_ptr<Model> transformer(const amp::Options* amp_options) {
  auto m = std::make_unique<Model>();
  Value h = data("x", {4, 16, 32});
  Value label = data("label", {4, 16, 32});
  for (int k = 0; k < 2; ++k) h = nn::TransformerEncoderLayer(32, 4, 64, 0.0, "gelu")(h, true);
  m->loss = nn::MSELoss()(nn::Linear(32, 32)(h), label);
  auto opt = optim::Adam(3e-3);
  m->grads = amp_options ? amp::decorate(opt, *amp_options).minimize(m->loss) : opt.minimize(m->loss);
  m->feed = {{"x", normal_f32({4, 16, 32}, 3)}, {"label", normal_f32({4, 16, 32}, 4)}};
  return m;
}

// Trains both from the same parameters; returns the two last losses.
std::pair<float, float> train_both(Model& f32_model, Model& amp_model, int steps, Place place = Place::cpu()) {
  Executor a(place), b(place);
  a.run(f32_model.g.startup);
  b.run(amp_model.g.startup);
  copy_scope(a, b);
  float la = 0, lb = 0;
  for (int s = 0; s < steps; ++s) {
    la = a.run(f32_model.g.main, f32_model.feed, {f32_model.loss})[0].to_vector<float>().at(0);
    lb = b.run(amp_model.g.main, amp_model.feed, {amp_model.loss})[0].to_vector<float>().at(0);
  }
  return {la, lb};
}

}  // namespace

TEST_CASE("amp O1: forward matmuls read bf16 casts, one per value; other ops read f32 casts back; "
          "parameters and gradients stay f32",
          "[frontend][amp]") {
  const amp::Options o;  // O1, bf16
  auto m = mlp(&o);
  INFO(m->g.main.to_string());
  m->g.main.verify();
  std::size_t forward_matmuls = 0;
  for (Operation* op : m->g.main.block()) {
    if (op_role(op) != OpRole::Forward) continue;
    if (op->isa<MatmulOp>()) {
      ++forward_matmuls;
      CHECK(dtype_of(op->result(0)) == DataType::BFloat16);
      for (std::uint32_t i = 0; i < 2; ++i) {
        Operation* def = op->operand(i).source().defining_op();
        REQUIRE(def);
        CHECK(def->isa<CastOp>());
        CHECK(dtype_of(op->operand(i).source()) == DataType::BFloat16);
      }
      for (OpOperand use : op->result(0).uses())
        if (op_role(use.owner()) == OpRole::Forward) CHECK(use.owner()->isa<CastOp>());
    }
    // One cast per value: no two casts of one value to one dtype.
    if (op->isa<CastOp>())
      for (OpOperand use : op->operand(0).source().uses())
        if (use.owner() != op && use.owner()->isa<CastOp>() && op_role(use.owner()) == OpRole::Forward)
          CHECK(dtype_of(use.owner()->result(0)) != dtype_of(op->result(0)));
  }
  CHECK(forward_matmuls == 4);
  for (auto [param, grad] : m->grads) {
    CHECK(dtype_of(param) == DataType::Float32);
    CHECK(dtype_of(grad) == DataType::Float32);
  }
}

TEST_CASE("amp O1 bf16 trains an MLP and transformer blocks to within 2 % of the f32 loss",
          "[frontend][amp]") {
  const amp::Options o;
  SECTION("the MLP, 30 steps") {
    auto plain = mlp(nullptr);
    auto low = mlp(&o);
    const auto [lf, lb] = train_both(*plain, *low, 30);
    INFO("f32 loss " << lf << ", bf16 loss " << lb);
    CHECK(std::isfinite(lb));
    CHECK(std::abs(lb - lf) <= 0.02 * std::abs(lf));
  }
  SECTION("two transformer blocks, 20 steps") {
    auto plain = transformer(nullptr);
    auto low = transformer(&o);
    const auto [lf, lb] = train_both(*plain, *low, 20);
    INFO("f32 loss " << lf << ", bf16 loss " << lb);
    CHECK(std::isfinite(lb));
    CHECK(std::abs(lb - lf) <= 0.02 * std::abs(lf));
  }
}

TEST_CASE("amp O1 bf16 on CUDA (cuBLAS on tensor cores) trains the MLP to within 2 % of the f32 loss",
          "[frontend][amp][cuda]") {
  if (cuda_device_count() == 0) {
    WARN("no CUDA device: the amp training on CUDA is not tried");
    return;
  }
  const amp::Options o;
  auto plain = mlp(nullptr);
  auto low = mlp(&o);
  const auto [lf, lb] = train_both(*plain, *low, 30, Place::cuda(0));
  INFO("f32 loss " << lf << ", bf16 loss " << lb);
  CHECK(std::abs(lb - lf) <= 0.02 * std::abs(lf));
}

TEST_CASE("amp: f16 O1 builds and runs; O0 changes nothing", "[frontend][amp]") {
  amp::Options o;
  o.dtype = DataType::Float16;
  auto plain = mlp(nullptr);
  auto low = mlp(&o);
  const auto [lf, lh] = train_both(*plain, *low, 10);
  INFO("f32 loss " << lf << ", f16 loss " << lh);
  CHECK(std::abs(lh - lf) <= 0.02 * std::abs(lf));
  o.level = amp::Level::O0;
  auto same = mlp(&o);
  CHECK(count_ops(same->g.main, "kiln.cast") == 0);
}

TEST_CASE("amp: an unsupported level or dtype, an unknown or kernel-less allow-list op, a program "
          "with a backward are errors that change nothing",
          "[frontend][amp]") {
  GuardedPrograms g;
  Value x = data("x", {4, 8});
  Value y = nn::Linear(8, 2)(x);
  Block& block = g.main.block();
  const std::string before = g.main.to_string();
  auto fails = [&](amp::Options o, ErrorKind kind, const std::vector<std::string>& parts) {
    kiln_test::expect_error([&] { amp::rewrite(block, o); }, kind, parts);
    CHECK(g.main.to_string() == before);
  };
  amp::Options o;
  o.level = amp::Level::O2;
  fails(o, ErrorKind::Unimplemented, {"O2"});
  o = {};
  o.dtype = DataType::Float64;
  fails(o, ErrorKind::InvalidArgument, {"bf16 or f16", "f64"});
  o = {};
  o.allow = {"kiln.no_such_op"};
  fails(o, ErrorKind::InvalidArgument, {"'kiln.no_such_op'", "not a registered op"});
  o.allow = {"kiln.softmax"};
  fails(o, ErrorKind::InvalidArgument, {"'kiln.softmax'", "no CPU kernel", "bf16"});
  Value loss = main_builder().create<MeanOp>(y, std::vector<std::int64_t>{}, false).result();
  optim::SGD(0.1).minimize(loss);
  kiln_test::expect_error([&] { amp::rewrite(block, {}); }, ErrorKind::InvalidArgument,
                          {"already has backward ops", "before append_backward or minimize"});
}

TEST_CASE("an amp program prints and parses back, round-trips through JSON, and its for-test clone "
          "computes the trained program's loss bit for bit",
          "[frontend][amp]") {
  const amp::Options o;
  auto m = mlp(&o);
  const std::string text = m->g.main.to_string();
  CHECK(parse_program(text).to_string() == text);
  const std::string json = save_program_json(m->g.main);
  CHECK(save_program_json(load_program_json(json)) == json);
  IrMapping map;
  const Program test = clone_for_test(m->g.main, &map);
  std::size_t low_matmuls = 0;
  for (Operation* op : test.block())
    if (op->isa<MatmulOp>() && dtype_of(op->result(0)) == DataType::BFloat16) ++low_matmuls;
  CHECK(low_matmuls == 4);
  Executor exe;
  exe.run(m->g.startup);
  const Tensor before_step = exe.run(test, m->feed, {map.lookup(m->loss)})[0];
  const Tensor in_step = exe.run(m->g.main, m->feed, {m->loss})[0];
  CHECK(std::memcmp(before_step.raw_data(), in_step.raw_data(), 4) == 0);
}

TEST_CASE("amp O1 leaves a matmul of f64 values, or of the other 16-bit float, as it is", "[frontend][amp]") {
  GuardedPrograms g;
  Builder b = main_builder();
  Value x64 = data("x64", {4, 4}, DataType::Float64);
  Value p64 = b.create<MatmulOp>(x64, x64).result();
  Value h = data("h", {4, 4}, DataType::Float16);
  Value x = data("x", {4, 4});
  Value ph = b.create<MatmulOp>(h, b.create<CastOp>(x, DataType::Float16).result()).result();
  const amp::RewriteResult r = amp::rewrite(g.main.block());
  CHECK(r.lowered_ops == 0);
  CHECK(r.casts == 0);
  CHECK(dtype_of(p64) == DataType::Float64);
  CHECK(dtype_of(ph) == DataType::Float16);
}

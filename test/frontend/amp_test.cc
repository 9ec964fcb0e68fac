// Mixed precision (kiln/frontend/amp.h) on the CPU. O1: matmuls and
// attention run bf16, with linear layers' bias adds; follow-list ops run
// in their operands' dtype; the rest reads f32 casts back, one cast per
// value and dtype; the parameters and their gradients stay f32; models
// trained in bf16 end within 2 % of the f32 loss; bad options are errors
// that change nothing. Then O2, the loss, and f16's loss scaling.
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "frontend/frontend_test_util.h"
#include "kernel/cuda_test_util.h"
#include "kiln/dialect/optimizer_ops.h"
#include "kiln/frontend/amp.h"
#include "kiln/ir/half_operands.h"
#include "kiln/ir/mixed_half.h"
#include "kiln/kernel/kernel_registry.h"
#include "kiln/kernel/random.h"
#include "kiln/frontend/clone_for_test.h"
#include "kiln/io/json.h"
#include "kiln/ir/parser.h"
#include "kiln/runtime/cuda_context.h"
#include "kiln/frontend/op_role.h"
#include "kiln/frontend/parameter.h"
#include "kiln/exec/execution_options.h"
#include "kiln/passes/fuse_optimizer.h"
#include "kiln/passes/pass_manager.h"
#include "kiln/support/warning.h"

using namespace kiln;
using kiln_test::same_bits;
using namespace kiln_frontend_test;

namespace {


DataType dtype_of(Value v) { return shaped_data_type(v.type()); }

struct AmpModel {
  GuardedPrograms g;
  Value loss;
  std::vector<std::pair<Value, Value>> grads;
  FeedMap feed;
  std::string scale_name;  // loss scaling's parameter, when it scales
  Value found_inf;
  Value logits;  // a classifier's, the loss's input

  void minimize(optim::Optimizer& opt, const amp::Options* o) {
    if (!o) {
      grads = opt.minimize(loss);
      return;
    }
    auto decorated = amp::decorate(opt, *o);
    grads = decorated.minimize(loss);
    scale_name = decorated.scales_loss() ? decorated.loss_scale_name() : "";
    found_inf = decorated.found_inf();
  }
};

// x[128, 16] -> Linear(16, 64), GELU -> (two heads of one hidden value:
// the hidden read by two matmuls) -> MSE; Adam, decorated when `amp`.
std::unique_ptr<AmpModel> mlp(const amp::Options* amp_options) {
  auto m = std::make_unique<AmpModel>();
  Value x = data("x", {128, 16});
  Value label = data("label", {128, 1});
  Value h = nn::functional::gelu(nn::Linear(16, 64)(x));
  Value a = nn::Linear(64, 32)(h), b = nn::Linear(64, 32)(h);
  Value ab = main_builder().create<MulOp>(nn::functional::gelu(a), nn::functional::tanh(b)).result();
  Value out = nn::Linear(32, 1)(ab);
  m->loss = nn::MSELoss()(out, label);
  auto opt = optim::Adam(1e-2);
  m->minimize(opt, amp_options);
  m->feed = {{"x", normal_f32({128, 16}, 1)}, {"label", normal_f32({128, 1}, 2)}};
  return m;
}

// Two causal transformer blocks and a linear head over x[4, 16, 32].
std::unique_ptr<AmpModel> transformer(const amp::Options* amp_options) {
  auto m = std::make_unique<AmpModel>();
  Value h = data("x", {4, 16, 32});
  Value label = data("label", {4, 16, 32});
  for (int k = 0; k < 2; ++k) h = nn::TransformerEncoderLayer(32, 4, 64, 0.0, "gelu")(h, true);
  m->loss = nn::MSELoss()(nn::Linear(32, 32)(h), label);
  auto opt = optim::Adam(3e-3);
  m->minimize(opt, amp_options);
  m->feed = {{"x", normal_f32({4, 16, 32}, 3)}, {"label", normal_f32({4, 16, 32}, 4)}};
  return m;
}

// A small CNN over x[8, 3, 12, 12]: conv, batch norm, relu, max pool, a
// grouped conv, avg pool, adaptive avg pool, a linear head and
// cross-entropy against 10 classes; Momentum, decorated when `amp`.
std::unique_ptr<AmpModel> cnn(const amp::Options* amp_options) {
  auto m = std::make_unique<AmpModel>();
  Value x = data("x", {8, 3, 12, 12});
  Value label = data("label", {8}, DataType::Int64);
  namespace F = nn::functional;
  Value h = F::relu(nn::BatchNorm2D(8)(nn::Conv2D(3, 8, 3, 1, 1)(x)));
  h = F::max_pool2d(h, {2, 2});
  h = F::relu(nn::Conv2D(8, 16, 3, 1, 1, 1, /*groups=*/2)(h));
  h = F::adaptive_avg_pool2d(F::avg_pool2d(h, {2, 2}), {1, 1});
  m->loss = F::cross_entropy(nn::Linear(16, 10)(F::flatten(h)), label);
  auto opt = optim::Momentum(0.05, 0.9);
  m->minimize(opt, amp_options);
  std::vector<std::int64_t> y(8);
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = static_cast<std::int64_t>(i * 3 % 10);
  m->feed = {{"x", normal_f32({8, 3, 12, 12}, 5)},
             {"label", Tensor::from_vector<std::int64_t>(Dims({8}), y)}};
  return m;
}

// x[8, 3, 12, 12] → two blocks of conv (with a bias when `conv_bias`),
// batch norm, relu → adaptive avg pool → linear head → cross-entropy
// against 10 classes; Momentum, decorated when `amp`.
std::unique_ptr<AmpModel> conv_bn_with(const amp::Options* amp_options, bool conv_bias) {
  auto m = std::make_unique<AmpModel>();
  Value h = data("x", {8, 3, 12, 12});
  Value label = data("label", {8}, DataType::Int64);
  namespace F = nn::functional;
  h = F::relu(nn::BatchNorm2D(8)(nn::Conv2D(3, 8, 3, 1, 1, 1, 1, conv_bias)(h)));
  h = F::relu(nn::BatchNorm2D(8)(nn::Conv2D(8, 8, 3, 1, 1, 1, 1, conv_bias)(h)));
  m->loss = F::cross_entropy(nn::Linear(8, 10)(F::flatten(F::adaptive_avg_pool2d(h, {1, 1}))), label);
  auto opt = optim::Momentum(0.05, 0.9);
  m->minimize(opt, amp_options);
  std::vector<std::int64_t> y(8);
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = static_cast<std::int64_t>(i * 3 % 10);
  m->feed = {{"x", normal_f32({8, 3, 12, 12}, 5)}, {"label", Tensor::from_vector<std::int64_t>(Dims({8}), y)}};
  return m;
}

// conv_bn_with, its convs without bias (as before a batch norm).
std::unique_ptr<AmpModel> conv_bn(const amp::Options* amp_options) { return conv_bn_with(amp_options, false); }

// A GPT in miniature (bench's gpt_model): token and position embeddings,
// two causal pre-norm blocks (GELU), a final layer norm and a linear head
// over a 50-token vocabulary; next-token cross-entropy on [4, 16] ids;
// Adam, decorated when `amp`.
std::unique_ptr<AmpModel> gpt(const amp::Options* amp_options) {
  constexpr std::int64_t kB = 4, kL = 16, kV = 50, kE = 32;
  auto m = std::make_unique<AmpModel>();
  Value ids = data("ids", {kB, kL}, DataType::Int64), pos = data("pos", {kL}, DataType::Int64);
  Value label = data("label", {kB, kL}, DataType::Int64);
  Value x = main_builder().create<AddOp>(nn::Embedding(kV, kE)(ids), nn::Embedding(kL, kE)(pos)).result();
  for (int k = 0; k < 2; ++k) x = nn::TransformerEncoderLayer(kE, 4, 64, 0.0, "gelu")(x, true);
  m->logits = nn::Linear(kE, kV)(nn::LayerNorm({kE})(x));
  m->loss = nn::functional::cross_entropy(m->logits, label);
  auto opt = optim::Adam(3e-3);
  m->minimize(opt, amp_options);
  std::vector<std::int64_t> tokens(kB * kL), next(kB * kL), where(kL);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<std::int64_t>(i * 7 % kV);
    next[i] = static_cast<std::int64_t>((i * 7 + 7) % kV);
  }
  for (std::int64_t t = 0; t < kL; ++t) where[std::size_t(t)] = t;
  m->feed = {{"ids", Tensor::from_vector<std::int64_t>(Dims({kB, kL}), tokens)},
             {"pos", Tensor::from_vector<std::int64_t>(Dims({kL}), where)},
             {"label", Tensor::from_vector<std::int64_t>(Dims({kB, kL}), next)}};
  return m;
}

// Whether no two forward casts of `p` cast one value to one dtype.
bool one_cast_per_value_and_dtype(const Program& p) {
  std::map<std::pair<const void*, DataType>, int> casts;
  for (Operation* op : p.block())
    if (op_role(op) == OpRole::Forward && op->isa<CastOp>())
      ++casts[{op->operand_source(0).impl(), dtype_of(op->result(0))}];
  for (const auto& [key, n] : casts)
    if (n != 1) return false;
  return true;
}

// The forward ops of `p` but casts, by (name, result 0's dtype); and its
// forward casts from f32 to bf16 (`down`) and back (`up`).
struct ForwardCensus {
  std::map<std::pair<std::string, DataType>, int> ops;
  int down = 0, up = 0;
  explicit ForwardCensus(const Program& p) {
    for (Operation* op : p.block()) {
      if (op_role(op) != OpRole::Forward || op->num_results() == 0 || !is_shaped(op->result_type(0))) continue;
      const DataType dt = dtype_of(op->result(0));
      if (!op->isa<CastOp>()) ++ops[{std::string(op->name()), dt}];
      else if (const DataType from = dtype_of(op->operand_source(0)); from == DataType::Float32)
        down += dt == DataType::BFloat16;
      else up += from == DataType::BFloat16 && dt == DataType::Float32;
    }
  }
  int bf16(const std::string& name) const { return count(name, DataType::BFloat16); }
  int f32(const std::string& name) const { return count(name, DataType::Float32); }
  int count(const std::string& name, DataType dt) const {
    const auto it = ops.find({name, dt});
    return it == ops.end() ? 0 : it->second;
  }
};

// Trains both from the same parameters; returns the two last losses.
// Both from the same initial values, drawn as in a fresh process (the
// generator reset): the losses do not depend on what ran before.
std::pair<float, float> train_both(AmpModel& f32_model, AmpModel& amp_model, int steps, Place place = Place::cpu()) {
  set_random_seed(kDefaultRandomSeed);
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

TEST_CASE("amp O1 runs an MLP's linear layers with their bias adds, its activations and their product in bf16, "
          "casts the input, each weight and each bias down once and the output up once for the f32 loss; "
          "parameters and gradients stay f32",
          "[frontend][amp]") {
  const amp::Options o;  // O1, bf16
  auto m = mlp(&o);
  INFO(m->g.main.to_string());
  m->g.main.verify();
  const ForwardCensus c(m->g.main);
  CHECK(c.bf16("kiln.matmul") == 4);
  CHECK(c.bf16("kiln.add") == 4);  // the bias adds
  CHECK(c.bf16("kiln.gelu") == 2);
  CHECK(c.bf16("kiln.tanh") == 1);
  CHECK(c.bf16("kiln.mul") == 1);
  CHECK(c.f32("kiln.matmul") + c.f32("kiln.add") + c.f32("kiln.gelu") + c.f32("kiln.mul") == 0);
  CHECK(c.down == 9);  // x, four weights, four biases
  CHECK(c.up == 1);    // the output, subtracted from the f32 label
  CHECK(one_cast_per_value_and_dtype(m->g.main));
  for (auto [param, grad] : m->grads) {
    CHECK(dtype_of(param) == DataType::Float32);
    CHECK(dtype_of(grad) == DataType::Float32);
  }
}

TEST_CASE("amp O1 bf16: each update reads its weight's or bias's bf16 gradient as it is, with the bits of "
          "updates that read the gradient's f32 cast, which nothing then reads",
          "[frontend][amp]") {
  const amp::Options o;
  auto low = mlp(&o), widened = mlp(&o);  // each with its own names, the same ones
  int updates = 0;
  for (Operation* op : low->g.main.block())
    if (op->isa<Adam_Op>()) {
      ++updates;
      CHECK(dtype_of(op->operand_source(kGradOperand)) == DataType::BFloat16);
    }
  CHECK(updates == 8);  // four weights, four biases
  // minimize's gradients are the f32 casts backward made; no update reads them.
  for (auto [param, grad] : low->grads) CHECK(grad.use_empty());
  // `widened`: every update put back on the f32 cast of its gradient.
  for (auto [param, grad] : widened->grads)
    for (OpOperand use : grad.defining_op()->operand_source(0).uses())
      if (use.owner()->isa<Adam_Op>()) use.owner()->set_operand(kGradOperand, grad);
  for (Operation* op : widened->g.main.block())
    if (op->isa<Adam_Op>()) CHECK(dtype_of(op->operand_source(kGradOperand)) == DataType::Float32);
  Executor a(Place::cpu()), b(Place::cpu());
  a.run(low->g.startup);
  b.run(widened->g.startup);
  copy_scope(a, b);
  for (int step = 0; step < 3; ++step) {
    const Tensor la = a.run(low->g.main, low->feed, {low->loss})[0];
    const Tensor lb = b.run(widened->g.main, widened->feed, {widened->loss})[0];
    CHECK(same_bits(la, lb));
  }
  for (auto [param, grad] : low->grads) {
    const std::string name = parameter_name(param);
    INFO(name);
    CHECK(same_bits(a.scope().find_var(name)->get<Tensor>(), b.scope().find_var(name)->get<Tensor>()));
  }
}

TEST_CASE("amp O1 runs a GPT's linear layers with their bias adds, its attention, GELU and the data movement "
          "between them in bf16, its logits in bf16 read as they are by the f32 loss, its layer norms and "
          "residual adds in f32, with one cast per value and dtype",
          "[frontend][amp]") {
  const amp::Options o;
  auto m = gpt(&o);
  INFO(m->g.main.to_string());
  m->g.main.verify();
  const ForwardCensus c(m->g.main);
  CHECK(c.bf16("kiln.matmul") == 9);
  CHECK(c.bf16("kiln.add") == 9);  // the bias adds
  CHECK(c.f32("kiln.add") == 5);   // the embeddings' sum and the residual adds
  CHECK(c.bf16("kiln.scaled_dot_product_attention") == 2);
  CHECK(c.bf16("kiln.gelu") == 2);
  CHECK(c.bf16("kiln.split") == 2);
  CHECK(c.bf16("kiln.transpose") == 8);
  CHECK(c.bf16("kiln.reshape") == 8);
  CHECK(c.f32("kiln.layer_norm") == 5);
  CHECK(c.bf16("kiln.layer_norm") == 0);
  // Down: each block's two layer-norm outputs, four weights and four biases,
  // and the head's input, weight and bias; up: each block's two sublayer
  // outputs, added to the f32 residual stream.
  CHECK(c.down == 2 * 10 + 3);
  CHECK(c.up == 2 * 2);
  CHECK(one_cast_per_value_and_dtype(m->g.main));
  CHECK(dtype_of(m->logits) == DataType::BFloat16);
  CHECK(dtype_of(m->loss) == DataType::Float32);
  std::size_t losses = 0, attention_grads = 0;
  for (Operation* op : m->g.main.block()) {
    if (op->isa<CrossEntropyOp>()) {
      ++losses;
      CHECK(op->operand_source(0) == m->logits);
    }
    if (op->name() == "kiln.scaled_dot_product_attention_grad") {
      ++attention_grads;
      CHECK(dtype_of(op->operand_source(0)) == DataType::BFloat16);
    }
  }
  CHECK(losses == 1);
  CHECK(attention_grads == 2);
  for (auto [param, grad] : m->grads) CHECK(dtype_of(grad) == DataType::Float32);
}

// The MLP (30 steps) and the transformer blocks (20 steps) trained plain
// and under `o` end within 2 % of each other's loss.
static void check_tracks_f32(const amp::Options& o) {
  SECTION("the MLP, 30 steps") {
    auto plain = mlp(nullptr);
    auto low = mlp(&o);
    const auto [lf, lb] = train_both(*plain, *low, 30);
    INFO("f32 loss " << lf << ", low-precision loss " << lb);
    CHECK(std::isfinite(lb));
    CHECK(std::abs(lb - lf) <= 0.02 * std::abs(lf));
  }
  SECTION("two transformer blocks, 20 steps") {
    auto plain = transformer(nullptr);
    auto low = transformer(&o);
    const auto [lf, lb] = train_both(*plain, *low, 20);
    INFO("f32 loss " << lf << ", low-precision loss " << lb);
    CHECK(std::isfinite(lb));
    CHECK(std::abs(lb - lf) <= 0.02 * std::abs(lf));
  }
  SECTION("a GPT in miniature (attention, cross-entropy over the logits), 20 steps") {
    auto plain = gpt(nullptr);
    auto low = gpt(&o);
    const auto [lf, lb] = train_both(*plain, *low, 20);
    INFO("f32 loss " << lf << ", low-precision loss " << lb);
    CHECK(std::isfinite(lb));
    CHECK(std::abs(lb - lf) <= 0.02 * std::abs(lf));
  }
  SECTION("a small CNN (convolutions and pools), 20 steps") {
    auto plain = cnn(nullptr);
    auto low = cnn(&o);
    const auto [lf, lb] = train_both(*plain, *low, 20);
    INFO("f32 loss " << lf << ", low-precision loss " << lb);
    CHECK(std::isfinite(lb));
    CHECK(std::abs(lb - lf) <= 0.02 * std::abs(lf));
  }
}

TEST_CASE("amp O1 bf16 trains an MLP, transformer blocks, a GPT and a CNN to within 2 % of the f32 loss",
          "[frontend][amp]") {
  check_tracks_f32(amp::Options{});
}

namespace {

// Two transformer blocks over x[4, 16, 32] padded to each batch's key_lengths
// n, sharing a learned attention bias [1, 4, 16, 16] (a float mask), and a
// linear head; Adam, decorated when `amp`.
std::unique_ptr<AmpModel> masked_transformer(const amp::Options* amp_options) {
  auto m = std::make_unique<AmpModel>();
  Value h = data("x", {4, 16, 32});
  Value label = data("label", {4, 16, 32});
  Value lengths = data("n", {4}, DataType::Int32);
  Value bias = create_parameter("bias", {1, 4, 16, 16}, DataType::Float32, init::Uniform(-0.5, 0.5, 7));
  for (int k = 0; k < 2; ++k) h = nn::TransformerEncoderLayer(32, 4, 64, 0.0, "gelu")(h, false, lengths, bias);
  m->loss = nn::MSELoss()(nn::Linear(32, 32)(h), label);
  auto opt = optim::Adam(3e-3);
  m->minimize(opt, amp_options);
  m->feed = {{"x", normal_f32({4, 16, 32}, 3)},
             {"label", normal_f32({4, 16, 32}, 4)},
             {"n", Tensor::from_vector<std::int32_t>(Dims({4}), {16, 12, 9, 16})}};
  return m;
}

}  // namespace

TEST_CASE("amp O1 and O2 bf16 run attention with key_lengths and a learned mask low (the mask through one bf16 "
          "cast, the lengths as they are), give the mask its gradient (f32 under O1) and train to within 2 % of the f32 "
          "loss",
          "[frontend][amp][mask]") {
  for (const amp::Level level : {amp::Level::O1, amp::Level::O2}) {
    INFO("level " << (level == amp::Level::O1 ? "O1" : "O2"));
    amp::Options o;
    o.level = level;
    auto low = masked_transformer(&o);
    low->g.main.verify();
    std::size_t forwards = 0, mask_grads = 0;
    for (Operation* op : low->g.main.block()) {
      if (op->isa<ScaledDotProductAttentionOp>()) {
        ++forwards;
        CHECK(dtype_of(op->operand_source(0)) == DataType::BFloat16);
        CHECK(dtype_of(op->operand_source(3)) == DataType::Int32);
        CHECK(dtype_of(op->operand_source(4)) == DataType::BFloat16);
      }
      if (op->isa<AttentionMaskGradOp>()) {
        ++mask_grads;
        CHECK(dtype_of(op->result(0)) == DataType::BFloat16);
      }
    }
    CHECK(forwards == 2);
    CHECK(mask_grads == 2);
    CHECK(one_cast_per_value_and_dtype(low->g.main));
    bool bias_grad = false;
    for (auto [param, grad] : low->grads)
      if (parameter_name(param) == "bias") {
        bias_grad = true;
        if (level == amp::Level::O1) CHECK(dtype_of(grad) == DataType::Float32);
      }
    CHECK(bias_grad);
    auto plain = masked_transformer(nullptr);
    const auto [lf, lb] = train_both(*plain, *low, 20);
    INFO("f32 loss " << lf << ", low-precision loss " << lb);
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

namespace {

// `model` built plain and decorated with bf16 at `level` (its kernels
// looked up on CUDA), trained side by side on CUDA for `steps` steps: the
// losses within 2 %. The ops that still run on the CPU, as the plan's
// warnings name them, are reported.
void check_tracks_f32_on_cuda(std::unique_ptr<AmpModel> (*model)(const amp::Options*), int steps,
                              amp::Level level = amp::Level::O2) {
  amp::Options o;
  o.level = level;
  o.place = Place::cuda(0);
  auto plain = model(nullptr);
  auto low = model(&o);
  std::vector<std::string> warnings;
  const WarningHandler previous = set_warning_handler([&](std::string_view m) { warnings.emplace_back(m); });
  const auto [lf, lb] = train_both(*plain, *low, steps, Place::cuda(0));
  set_warning_handler(previous);
  for (const std::string& w : warnings) WARN(w);
  INFO("f32 loss " << lf << ", bf16 loss " << lb);
  CHECK(std::abs(lb - lf) <= 0.02 * std::abs(lf));
}

}  // namespace

TEST_CASE("amp O2 bf16 on CUDA (16-bit kernels through the f32 ones on the device) trains the MLP to "
          "within 2 % of the f32 loss",
          "[frontend][amp][cuda]") {
  if (cuda_device_count() == 0) {
    WARN("no CUDA device: the amp O2 training on CUDA is not tried");
    return;
  }
  check_tracks_f32_on_cuda(&mlp, 30);
}

TEST_CASE("amp O2 bf16 on CUDA trains a small CNN (convolutions and pools in bf16) to within 2 % of the "
          "f32 loss",
          "[frontend][amp][cuda]") {
  if (cuda_device_count() == 0) {
    WARN("no CUDA device: the amp O2 CNN training on CUDA is not tried");
    return;
  }
  check_tracks_f32_on_cuda(&cnn, 20);
}

TEST_CASE("amp O1 and O2 bf16 on CUDA train transformer blocks and a GPT in miniature (fused attention, "
          "layer norm and cross-entropy on the device) to within 2 % of the f32 loss",
          "[frontend][amp][cuda]") {
  if (cuda_device_count() == 0) {
    WARN("no CUDA device: the amp transformer training on CUDA is not tried");
    return;
  }
  SECTION("transformer blocks, O1") { check_tracks_f32_on_cuda(&transformer, 20, amp::Level::O1); }
  SECTION("transformer blocks, O2") { check_tracks_f32_on_cuda(&transformer, 20, amp::Level::O2); }
  SECTION("a GPT, O1") { check_tracks_f32_on_cuda(&gpt, 20, amp::Level::O1); }
  SECTION("a GPT, O2") { check_tracks_f32_on_cuda(&gpt, 20, amp::Level::O2); }
}

TEST_CASE("amp: f16 O1 without loss scaling builds and runs; O0 changes nothing", "[frontend][amp]") {
  amp::Options o;
  o.dtype = DataType::Float16;
  o.scaling = amp::Scaling::Off;
  auto plain = mlp(nullptr);
  auto low = mlp(&o);
  const auto [lf, lh] = train_both(*plain, *low, 10);
  INFO("f32 loss " << lf << ", f16 loss " << lh);
  CHECK(std::abs(lh - lf) <= 0.02 * std::abs(lf));
  CHECK(low->scale_name.empty());
  CHECK(count_top_ops(low->g.main, "kiln.check_finite_and_unscale") == 0);
  o.level = amp::Level::O0;
  o.scaling = amp::Scaling::Auto;
  auto same = mlp(&o);
  CHECK(count_top_ops(same->g.main, "kiln.cast") == 0);
  CHECK(same->scale_name.empty());  // O0 scales nothing
}

namespace {

// amp_test.no_meta: a bf16 CPU kernel but no InferMeta (amp could not
// retype its results).
struct AmpNoMetaOp : Op<AmpNoMetaOp, ReadOnly, ValueSemantics> {
  using Op::Op;
  static constexpr std::string_view name = "amp_test.no_meta";
  static constexpr int num_operands = 1, num_results = 1;
  static void build(Builder&, OperationArgument& arg, Value x) { arg.add_operand(x); }
};
KILN_REGISTER_OP(AmpNoMetaOp);
void amp_test_no_meta_kernel(KernelContext&) {}
KILN_REGISTER_KERNEL(AmpNoMetaOp, Cpu, BFloat16, amp_test_no_meta_kernel);

}  // namespace

TEST_CASE("amp: an unknown level, an unsupported dtype, an unknown or kernel-less allow- or follow-list op, "
          "one without InferMeta, an op on two given lists, an unknown deny-list op, a program with a "
          "backward are errors that change nothing",
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
  o.level = static_cast<amp::Level>(7);
  fails(o, ErrorKind::InvalidArgument, {"unknown level"});
  o = {};
  o.level = amp::Level::O2;
  o.deny = {"kiln.no_such_op"};
  fails(o, ErrorKind::InvalidArgument, {"deny-list op 'kiln.no_such_op'", "not a registered op"});
  o = {};
  o.dtype = DataType::Float64;
  fails(o, ErrorKind::InvalidArgument, {"bf16 or f16", "f64"});
  o = {};
  o.allow = {"kiln.no_such_op"};
  fails(o, ErrorKind::InvalidArgument, {"'kiln.no_such_op'", "not a registered op"});
  o.allow = {"kiln.softmax_with_cross_entropy"};
  fails(o, ErrorKind::InvalidArgument, {"'kiln.softmax_with_cross_entropy'", "no CPU kernel", "bf16"});
  o = {};
  o.follow = {"kiln.relu", "kiln.no_such_op"};
  fails(o, ErrorKind::InvalidArgument, {"follow-list op 'kiln.no_such_op'", "not a registered op"});
  o.follow = {"kiln.softmax_with_cross_entropy"};
  fails(o, ErrorKind::InvalidArgument, {"follow-list op 'kiln.softmax_with_cross_entropy'", "no CPU kernel"});
  o.follow = {"amp_test.no_meta"};
  fails(o, ErrorKind::InvalidArgument, {"follow-list op 'amp_test.no_meta'", "no InferMeta"});
  o = {};
  o.allow = {"kiln.matmul", "kiln.gelu"};
  o.follow = {"kiln.gelu"};
  fails(o, ErrorKind::InvalidArgument, {"'kiln.gelu'", "both the allow and the follow list"});
  o = {};
  o.deny = {"kiln.no_such_op"};
  fails(o, ErrorKind::InvalidArgument, {"deny-list op 'kiln.no_such_op'", "not a registered op"});
  Value loss = main_builder().create<MeanOp>(y, std::vector<std::int64_t>{}, false).result();
  optim::SGD(0.1).minimize(loss);
  kiln_test::expect_error([&] { amp::rewrite(block, {}); }, ErrorKind::InvalidArgument,
                          {"already has backward ops", "before append_backward or minimize"});
}

// The model's main program prints and parses back and round-trips through
// JSON; its for-test clone.
static Program round_trip_and_clone_for_test(const AmpModel& m, IrMapping& map) {
  const std::string text = m.g.main.to_string();
  CHECK(parse_program(text).to_string() == text);
  const std::string json = save_program_json(m.g.main);
  CHECK(save_program_json(load_program_json(json)) == json);
  return clone_for_test(m.g.main, &map);
}

// The for-test clone computes the loss the training step computes, bit for bit.
static void check_test_clone_loss(AmpModel& m, const Program& test, const IrMapping& map) {
  Executor exe;
  exe.run(m.g.startup);
  const Tensor before_step = exe.run(test, m.feed, {map.lookup(m.loss)})[0];
  const Tensor in_step = exe.run(m.g.main, m.feed, {m.loss})[0];
  CHECK(std::memcmp(before_step.raw_data(), in_step.raw_data(), 4) == 0);
}

TEST_CASE("an amp program prints and parses back, round-trips through JSON, and its for-test clone "
          "computes the trained program's loss bit for bit",
          "[frontend][amp]") {
  const amp::Options o;
  auto m = mlp(&o);
  IrMapping map;
  const Program test = round_trip_and_clone_for_test(*m, map);
  std::size_t low_matmuls = 0;
  for (Operation* op : test.block())
    if (op->isa<MatmulOp>() && dtype_of(op->result(0)) == DataType::BFloat16) ++low_matmuls;
  CHECK(low_matmuls == 4);
  check_test_clone_loss(*m, test, map);
}

TEST_CASE("an amp O1 GPT (attention, its gradient and the bias adds in bf16) prints and parses back, "
          "round-trips through JSON, and its for-test clone computes the trained program's loss bit for bit",
          "[frontend][amp]") {
  const amp::Options o;
  auto m = gpt(&o);
  IrMapping map;
  const Program test = round_trip_and_clone_for_test(*m, map);
  std::size_t low_attention = 0;
  for (Operation* op : test.block())
    if (op->name() == "kiln.scaled_dot_product_attention" && dtype_of(op->result(0)) == DataType::BFloat16)
      ++low_attention;
  CHECK(low_attention == 2);
  check_test_clone_loss(*m, test, map);
}

// ---- O1's lists and rules ----

TEST_CASE("amp O1 runs a follow-list op low when its floating operands are all low, else in f32 with its low "
          "operands cast up once; a deny-list op stays f32",
          "[frontend][amp]") {
  GuardedPrograms g;
  Builder b = main_builder();
  Value y = b.create<MatmulOp>(data("x", {4, 8}), data("w", {8, 5})).result();
  Value z = data("z", {4, 5});
  Value r = b.create<ReluOp>(y).result();   // low: y is
  Value t = b.create<MulOp>(y, r).result();  // low: both are
  Value s = b.create<AddOp>(t, z).result();  // f32: z is
  Value u = b.create<SubOp>(z, t).result();  // f32, through the same cast of t
  Value e = b.create<ExpOp>(r).result();     // denied
  const amp::RewriteResult res = amp::rewrite(g.main.block());
  INFO(g.main.to_string());
  g.main.verify();
  CHECK(dtype_of(r) == DataType::BFloat16);
  CHECK(dtype_of(t) == DataType::BFloat16);
  CHECK(dtype_of(s) == DataType::Float32);
  CHECK(dtype_of(u) == DataType::Float32);
  CHECK(dtype_of(e) == DataType::Float32);
  Value t_up = s.defining_op()->operand_source(0);
  CHECK(t_up.defining_op()->isa<CastOp>());
  CHECK(u.defining_op()->operand_source(1) == t_up);
  CHECK(res.lowered_ops == 3);  // matmul, relu, mul
  CHECK(res.casts == 4);        // x and w down; t and r up
}

TEST_CASE("amp O1 runs a follow-list op low beside a 0-dim f32 operand, which reads a low cast, as PyTorch's "
          "promotion does; an f32 operand with dims, or 0-dim operands alone, still promote",
          "[frontend][amp]") {
  GuardedPrograms g;
  Builder b = main_builder();
  Value y = b.create<MatmulOp>(data("x", {4, 8}), data("w", {8, 5})).result();
  Value s0 = data("s0", {});                   // 0-dim f32
  Value s1 = data("s1", {1});                  // one element, with a dim
  Value a = b.create<MulOp>(y, s0).result();   // low
  Value c = b.create<DivOp>(s0, a).result();   // low, the scalar first, through the same cast of s0
  Value d = b.create<MulOp>(y, s1).result();   // f32: s1 has a dim
  Value y11 = b.create<MatmulOp>(data("x1", {1, 8}), data("w1", {8, 1})).result();
  Value r = b.create<ReshapeOp>(y11, std::vector<std::int64_t>{}).result();  // low, 0-dim
  Value e = b.create<MulOp>(r, s0).result();   // f32: 0-dim operands alone
  const amp::RewriteResult res = amp::rewrite(g.main.block());
  INFO(g.main.to_string());
  g.main.verify();
  CHECK(dtype_of(a) == DataType::BFloat16);
  CHECK(dtype_of(c) == DataType::BFloat16);
  CHECK(dtype_of(d) == DataType::Float32);
  CHECK(dtype_of(r) == DataType::BFloat16);
  CHECK(dtype_of(e) == DataType::Float32);
  Value s0_low = a.defining_op()->operand_source(1);
  REQUIRE(s0_low.defining_op()->isa<CastOp>());
  CHECK(dtype_of(s0_low) == DataType::BFloat16);
  CHECK(c.defining_op()->operand_source(0) == s0_low);
  CHECK(res.lowered_ops == 5);  // the matmuls, both ops on s0, the reshape
}

TEST_CASE("amp O1 runs a matmul's bias add low, reading its f32 bias row through one cast shared by every "
          "such add; an f32 value that is no row of the product, or a row added to another op's low result, "
          "keeps its add f32",
          "[frontend][amp]") {
  GuardedPrograms g;
  Builder b = main_builder();
  auto param = [](const char* name, std::vector<std::int64_t> dims) {
    return create_parameter(name, dims, DataType::Float32, init::Constant(0.1));
  };
  Value x = data("x", {4, 8}), w = param("w", {8, 5}), row = param("b", {5});
  Value y = b.create<MatmulOp>(x, w).result(), y2 = b.create<MatmulOp>(x, w).result();
  Value biased = b.create<AddOp>(y, row).result();
  Value flipped = b.create<AddOp>(param("b2", {1, 5}), y2).result();
  Value shared = b.create<AddOp>(y2, row).result();
  Value scalar = b.create<AddOp>(y, param("one", {1})).result();
  Value column = b.create<AddOp>(y, param("col", {4, 1})).result();
  Value full = b.create<AddOp>(y, param("full", {4, 5})).result();
  Value after_relu = b.create<AddOp>(b.create<ReluOp>(y).result(), row).result();
  amp::rewrite(g.main.block());
  INFO(g.main.to_string());
  g.main.verify();
  for (Value v : {biased, flipped, shared, scalar}) CHECK(dtype_of(v) == DataType::BFloat16);
  for (Value v : {column, full, after_relu}) CHECK(dtype_of(v) == DataType::Float32);
  CHECK(biased.defining_op()->operand_source(1) == shared.defining_op()->operand_source(1));
  CHECK(biased.defining_op()->operand_source(1).defining_op()->isa<CastOp>());
  CHECK(after_relu.defining_op()->operand_source(1) == row);
}

namespace {

// x[4, 8] · w → gelu, tanh and softmax; attention over q, k, v [2, 2, 4, 8].
struct ListProbe {
  GuardedPrograms g;
  Value gelu, tanh, softmax, attention;
  ListProbe() {
    Builder b = main_builder();
    Value y = b.create<MatmulOp>(data("x", {4, 8}), data("w", {8, 5})).result();
    gelu = nn::functional::gelu(y);
    tanh = nn::functional::tanh(y);
    softmax = nn::functional::softmax(y);
    Value q = data("q", {2, 2, 4, 8}), k = data("k", {2, 2, 4, 8}), v = data("v", {2, 2, 4, 8});
    attention = nn::functional::scaled_dot_product_attention(q, k, v, true);
  }
  bool low(Value v) const { return dtype_of(v) == DataType::BFloat16; }
};

}  // namespace

TEST_CASE("amp's lists are overridable: a given follow list replaces the default, a given deny list takes "
          "its ops off the default follow list, a given allow list without attention leaves it f32 and one "
          "with softmax takes it off the default deny list, in O1 and O2",
          "[frontend][amp]") {
  amp::Options o;
  SECTION("the defaults") {
    ListProbe p;
    amp::rewrite(p.g.main.block(), o);
    CHECK((p.low(p.gelu) && p.low(p.tanh) && p.low(p.attention) && !p.low(p.softmax)));
  }
  SECTION("allow = matmul, softmax") {
    o.allow = {"kiln.matmul", "kiln.softmax"};
    ListProbe p;
    amp::rewrite(p.g.main.block(), o);
    CHECK((p.low(p.softmax) && !p.low(p.attention)));
  }
  SECTION("O2, allow = softmax") {
    o.level = amp::Level::O2;
    ListProbe denied;
    amp::rewrite(denied.g.main.block(), o);
    CHECK(!denied.low(denied.softmax));
    o.allow = {"kiln.softmax"};
    ListProbe p;
    amp::rewrite(p.g.main.block(), o);
    CHECK(p.low(p.softmax));
  }
  SECTION("follow = tanh") {
    o.follow = {"kiln.tanh"};
    ListProbe p;
    amp::rewrite(p.g.main.block(), o);
    CHECK((!p.low(p.gelu) && p.low(p.tanh)));
  }
  SECTION("deny = gelu") {
    o.deny = {"kiln.gelu"};
    ListProbe p;
    amp::rewrite(p.g.main.block(), o);
    CHECK((!p.low(p.gelu) && p.low(p.tanh)));
  }
  SECTION("allow = matmul, gelu") {
    o.allow = {"kiln.matmul", "kiln.gelu"};
    ListProbe p;
    amp::rewrite(p.g.main.block(), o);
    CHECK((p.low(p.gelu) && p.low(p.tanh) && !p.low(p.attention)));
  }
}

TEST_CASE("amp's default allow, follow and deny lists name registered ops, none on two lists, and each allow- "
          "and follow-list op has CPU kernels for bf16 and f16",
          "[frontend][amp]") {
  std::map<std::string, int> lists;
  for (const auto* list : {&amp::default_allow_list(), &amp::default_follow_list(), &amp::default_deny_list()})
    for (const std::string& name : *list) {
      INFO(name);
      CHECK(IrContext::instance()->find_op(name));
      ++lists[name];
    }
  for (const auto& [name, n] : lists) {
    INFO(name);
    CHECK(n == 1);
  }
  for (const auto* list : {&amp::default_allow_list(), &amp::default_follow_list()})
    for (const std::string& name : *list)
      for (DataType dt : {DataType::BFloat16, DataType::Float16}) {
        INFO(name << " " << to_string(dt));
        const OpInfo info = IrContext::instance()->find_op(name);
        CHECK((info && KernelRegistry::instance().find(info.id(), PlaceKind::Cpu, dt)));
      }
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

// ---- ops that read 16-bit operands as they are ----

namespace {

// amp_test.half_sum(x): f32 [1] for any floating x, read as it is
// (HalfOperandsInterface), with a CPU kernel for bf16; _no_bf16 has an f32
// kernel only; _like's result takes x's dtype, against its declaration.
// The programs are rewritten, never run: the kernels only need to exist.
template <typename Self>
struct AmpHalfReader : Op<Self, ReadOnly, ValueSemantics, InferMetaInterface, HalfOperandsInterface> {
  using Op<Self, ReadOnly, ValueSemantics, InferMetaInterface, HalfOperandsInterface>::Op;
  static constexpr int num_operands = 1, num_results = 1;
  static constexpr std::array<std::uint32_t, 1> half_operands{0};
  static void build(Builder&, OperationArgument& arg, Value x) { arg.add_operand(x); }
};
struct AmpHalfSumOp : AmpHalfReader<AmpHalfSumOp> {
  using AmpHalfReader::AmpHalfReader;
  static constexpr std::string_view name = "amp_test.half_sum";
  static std::vector<Type> infer_meta(const std::vector<Type>&, DictionaryAttribute) {
    return {TensorType::get(DataType::Float32, {1})};
  }
};
struct AmpHalfSumNoBf16Op : AmpHalfReader<AmpHalfSumNoBf16Op> {
  using AmpHalfReader::AmpHalfReader;
  static constexpr std::string_view name = "amp_test.half_sum_no_bf16";
  static std::vector<Type> infer_meta(const std::vector<Type>&, DictionaryAttribute) {
    return {TensorType::get(DataType::Float32, {1})};
  }
};
struct AmpHalfLikeOp : AmpHalfReader<AmpHalfLikeOp> {
  using AmpHalfReader::AmpHalfReader;
  static constexpr std::string_view name = "amp_test.half_like";
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
    return {TensorType::get(shaped_data_type(in.at(0)), {1})};
  }
};
KILN_REGISTER_OP(AmpHalfSumOp, AmpHalfSumNoBf16Op, AmpHalfLikeOp);
void amp_test_unrun_kernel(KernelContext&) {}
KILN_REGISTER_KERNEL(AmpHalfSumOp, Cpu, Float32, amp_test_unrun_kernel);
KILN_REGISTER_KERNEL(AmpHalfSumOp, Cpu, BFloat16, amp_test_unrun_kernel);
KILN_REGISTER_KERNEL(AmpHalfSumNoBf16Op, Cpu, Float32, amp_test_unrun_kernel);
KILN_REGISTER_KERNEL(AmpHalfLikeOp, Cpu, Float32, amp_test_unrun_kernel);
KILN_REGISTER_KERNEL(AmpHalfLikeOp, Cpu, BFloat16, amp_test_unrun_kernel);

// x[4, 8] · w (bf16 under O1), read by cross_entropy and the three readers.
struct HalfReaders {
  GuardedPrograms g;
  Value logits, loss, sum, no_bf16, like;
  HalfReaders() {
    Builder b = main_builder();
    Value x = data("x", {4, 8});
    Value w = create_parameter("w", {8, 5}, DataType::Float32, init::Constant(0.1));
    logits = b.create<MatmulOp>(x, w).result();
    loss = b.create<CrossEntropyOp>(logits, data("label", {4}, DataType::Int64)).result(0);
    sum = b.create<AmpHalfSumOp>(logits).result();
    no_bf16 = b.create<AmpHalfSumNoBf16Op>(logits).result();
    like = b.create<AmpHalfLikeOp>(logits).result();
  }
  // Whether `v`'s op reads the low logits as they are (else an f32 cast).
  bool reads_as_is(Value v) const { return v.defining_op()->operand_source(0) == logits; }
};

}  // namespace

TEST_CASE("amp reads a bf16 value as it is where the op declares that operand (HalfOperandsInterface) and "
          "has a kernel for bf16, else through one shared f32 cast",
          "[frontend][amp]") {
  HalfReaders h;
  amp::rewrite(h.g.main.block());
  INFO(h.g.main.to_string());
  h.g.main.verify();
  REQUIRE(dtype_of(h.logits) == DataType::BFloat16);
  CHECK(h.reads_as_is(h.loss));  // cross_entropy's logits: no f32 copy
  CHECK(dtype_of(h.loss) == DataType::Float32);
  CHECK(h.reads_as_is(h.sum));
  CHECK_FALSE(h.reads_as_is(h.no_bf16));  // no bf16 kernel
  CHECK_FALSE(h.reads_as_is(h.like));     // its result would turn bf16
  CHECK(dtype_of(h.like) == DataType::Float32);
  CHECK(h.no_bf16.defining_op()->operand_source(0) == h.like.defining_op()->operand_source(0));
  CHECK(count_top_ops(h.g.main, "kiln.cast") == 3);  // x and w down, the logits back up once
}

TEST_CASE("amp looks kernels up at Options::place: a host stream's are the CPU's, a device's its own; a "
          "place without kernels in this build is an error that changes nothing",
          "[frontend][amp]") {
  SECTION("a host stream") {
    HalfReaders h;
    amp::Options o;
    o.place = Place::host_stream(1);
    amp::rewrite(h.g.main.block(), o);
    CHECK(h.reads_as_is(h.loss));
    CHECK(h.reads_as_is(h.sum));
  }
  SECTION("CUDA, in a build with CUDA kernels: half_sum has a bf16 kernel on the CPU only") {
    if (!built_with_cuda()) return;
    HalfReaders h;
    amp::Options o;
    o.place = Place::cuda(0);
    amp::rewrite(h.g.main.block(), o);
    CHECK(h.reads_as_is(h.loss));
    CHECK_FALSE(h.reads_as_is(h.sum));
    o.allow = {"amp_test.half_sum"};
    HalfReaders again;
    KILN_CHECK_ERROR(amp::rewrite(again.g.main.block(), o), InvalidArgument,
                     {"'amp_test.half_sum'", "no CUDA kernel", "bf16"});
  }
  SECTION("an undefined place, or CUDA in a build without it") {
    HalfReaders h;
    const std::string before = h.g.main.to_string();
    amp::Options o;
    o.place = Place{PlaceKind::Undefined, 0};
    KILN_CHECK_ERROR(amp::rewrite(h.g.main.block(), o), InvalidArgument,
                     {"place undefined", "no kernels in this build"});
    o.place = Place::cuda(0);
    if (!built_with_cuda())
      KILN_CHECK_ERROR(amp::rewrite(h.g.main.block(), o), InvalidArgument, {"place cuda:0", "no kernels"});
    CHECK(h.g.main.to_string() == before);
  }
}

// The ops of `m`'s main program, after the default passes for a CUDA
// target (as an Executor on cuda:0 runs them), that have no CUDA kernel for
// their dtype: a device run would take them to the CPU and back.
std::vector<std::string> ops_without_cuda_kernels(AmpModel& m) {
  Program& p = m.g.main;
  PassContext ctx;
  ctx.target_place = Place::cuda(0);
  ctx.add_live_out(m.loss);
  PassManager::parse(kDefaultPasses).run(p, ctx);
  return kiln_test::ops_without_cuda_kernels(p);
}

// Checked without a device: the kernels are registered in any build with CUDA.
TEST_CASE("the MLP, transformer, GPT and CNN training programs, f32 and under amp O1 and O2 in bf16 and "
          "f16, have a CUDA kernel for every op after a CUDA executor's passes, so none runs on the CPU",
          "[frontend][amp]") {
  if (!built_with_cuda()) return;  // no CUDA kernels registered to look at
  using Build = std::unique_ptr<AmpModel> (*)(const amp::Options*);
  const std::pair<const char*, Build> models[] = {
      {"mlp", mlp}, {"transformer", transformer}, {"gpt", gpt}, {"cnn", cnn}, {"conv_bn", conv_bn}};
  for (const auto& [name, build] : models)
    for (int mode = 0; mode < 5; ++mode) {
      amp::Options o;
      o.place = Place::cuda(0);
      if (std::string(name) == "conv_bn") o.allow = {"kiln.conv2d", "kiln.matmul"};  // batch norms read low x
      o.level = mode >= 3 ? amp::Level::O2 : amp::Level::O1;
      o.dtype = mode == 2 || mode == 4 ? DataType::Float16 : DataType::BFloat16;
      auto m = build(mode == 0 ? nullptr : &o);
      static constexpr const char* kModes[] = {"f32", "O1 bf16", "O1 f16", "O2 bf16", "O2 f16"};
      INFO(name << " " << kModes[mode]);
      CHECK(ops_without_cuda_kernels(*m) == std::vector<std::string>{});
      if (mode == 2) CHECK_FALSE(m->scale_name.empty());  // f16 scales its loss
    }
}

TEST_CASE("amp gives kiln.shape and kiln.numel a bf16 value as it is: they read only its dims", "[frontend][amp]") {
  GuardedPrograms g;
  Builder b = main_builder();
  Value h = b.create<MatmulOp>(data("x", {4, 8}), data("w", {8, 5})).result();
  Value dims = b.create<ShapeOp>(h).result(), count = b.create<NumelOp>(h).result();
  const amp::RewriteResult r = amp::rewrite(g.main.block());
  INFO(g.main.to_string());
  REQUIRE(dtype_of(h) == DataType::BFloat16);
  CHECK(dims.defining_op()->operand_source(0) == h);
  CHECK(count.defining_op()->operand_source(0) == h);
  CHECK(r.casts == 2);  // x and w down; no f32 copy of h
  Executor exe;
  const auto out = exe.run(g.main, {{"x", normal_f32({4, 8}, 1)}, {"w", normal_f32({8, 5}, 2)}}, {dims, count});
  CHECK(out[0].to_vector<std::int64_t>() == std::vector<std::int64_t>{4, 5});
  CHECK(out[1].to_vector<std::int64_t>() == std::vector<std::int64_t>{20});
}

// ---- O2 ----

TEST_CASE("amp O2: activations flow in bf16 from op to op; denied ops (norms, softmax, losses) read f32 "
          "casts; parameters and their gradients stay f32",
          "[frontend][amp]") {
  amp::Options o;
  o.level = amp::Level::O2;
  auto m = transformer(&o);
  INFO(m->g.main.to_string());
  m->g.main.verify();
  std::size_t low = 0, gelus = 0;
  for (Operation* op : m->g.main.block()) {
    if (op_role(op) != OpRole::Forward || op->isa<CastOp>() || op->num_results() == 0) continue;
    const bool is_low = dtype_of(op->result(0)) == DataType::BFloat16;
    low += is_low;
    if (op->name() == "kiln.gelu") {
      ++gelus;
      CHECK(is_low);
      // Its operand comes straight from a low op (the bias add), not a cast.
      Operation* def = op->operand(0).source().defining_op();
      REQUIRE(def);
      CHECK_FALSE(def->isa<CastOp>());
    }
    if (op->name() == "kiln.layer_norm" || op->name() == "kiln.mean") {
      CHECK(dtype_of(op->result(0)) == DataType::Float32);
      for (std::uint32_t i = 0; i < op->num_operands(); ++i)
        CHECK(dtype_of(op->operand(i).source()) != DataType::BFloat16);
    }
  }
  CHECK(gelus == 2);
  CHECK(low > 20);
  for (auto [param, grad] : m->grads) {
    CHECK(dtype_of(param) == DataType::Float32);
    CHECK(dtype_of(grad) == DataType::Float32);
  }
}

TEST_CASE("amp O2 bf16 trains an MLP, transformer blocks, a GPT and a CNN to within 2 % of the f32 loss",
          "[frontend][amp]") {
  amp::Options o;
  o.level = amp::Level::O2;
  check_tracks_f32(o);
}

TEST_CASE("amp O2 bf16 runs a CNN's convolutions, their gradients, its pools and its loss's logits in bf16",
          "[frontend][amp]") {
  amp::Options o;
  o.level = amp::Level::O2;
  auto m = cnn(&o);
  std::map<std::string, int> in_bf16;
  for (Operation* op : m->g.main.block())
    if (op->num_operands() > 0 && is_shaped(op->operand_source(0).type()) &&
        dtype_of(op->operand_source(0)) == DataType::BFloat16)
      ++in_bf16[op->name()];
  CHECK(in_bf16["kiln.conv2d"] == 2);
  CHECK(in_bf16["kiln.conv2d_grad"] == 2);
  CHECK(in_bf16["kiln.max_pool2d"] == 1);
  CHECK(in_bf16["kiln.avg_pool2d"] == 1);
  CHECK(in_bf16["kiln.adaptive_avg_pool2d"] == 1);
  CHECK(in_bf16["kiln.batch_norm"] == 1);  // its x as it is, its parameters f32
  CHECK(in_bf16["kiln.batch_norm_grad"] == 1);
  // The loss reads the head's bf16 logits as they are (no f32 copy), and its
  // gradient comes back in bf16.
  CHECK(in_bf16["kiln.cross_entropy"] == 1);
  CHECK(in_bf16["kiln.cross_entropy_grad"] == 1);
}

// ---- batch norm in its x's dtype ----

namespace {

// One batch norm and what it reads: x straight from a conv (no cast
// between them), x and y low, the running statistics the f32 parameters
// themselves (never a cast), the saved statistics f32.
void check_batch_norm_reads_conv(Operation* bn, DataType low) {
  Operation* def = bn->operand_source(0).defining_op();
  REQUIRE(def);
  CHECK(def->name() == "kiln.conv2d");
  CHECK(dtype_of(bn->operand_source(0)) == low);
  CHECK(dtype_of(bn->result(0)) == low);
  for (std::uint32_t i = 1; i < 5; ++i) {
    INFO("operand #" << i);
    CHECK(dtype_of(bn->operand_source(i)) == DataType::Float32);
    REQUIRE(bn->operand_source(i).defining_op());
    CHECK(bn->operand_source(i).defining_op()->isa<ParameterOp>());
  }
  for (std::uint32_t r = 1; r < 5; ++r) CHECK(dtype_of(bn->result(r)) == DataType::Float32);
}

// Every batch norm of `p` as above (`n` of them), and their gradients: dx
// low, dscale and dbias f32.
void check_batch_norms_low(const Program& p, DataType low, int n) {
  int norms = 0, grads = 0;
  for (Operation* op : p.block()) {
    if (op->isa<BatchNormOp>()) ++norms, check_batch_norm_reads_conv(op, low);
    if (!op->isa<GradOf<BatchNormOp>>()) continue;
    ++grads;
    CHECK(dtype_of(op->operand_source(4)) == low);
    CHECK(dtype_of(op->result(0)) == low);
    CHECK(dtype_of(op->result(1)) == DataType::Float32);
    CHECK(dtype_of(op->result(2)) == DataType::Float32);
  }
  CHECK(norms == n);
  CHECK(grads == n);
}

// A BatchNorm2D's running statistic: "<layer>.mean_<k>" or "<layer>.variance_<k>".
bool is_running_stat(const std::string& name) {
  const bool stat = name.find(".mean_") != std::string::npos || name.find(".variance_") != std::string::npos;
  return stat && name.find("velocity") == std::string::npos;
}

// The batch norms' running statistics in b's scope: f32, within `tol` of
// a's (relative, plus `tol` absolute); how many.
int check_running_stats(Executor& a, Executor& b, float tol) {
  int stats = 0;
  for (const std::string& name : b.scope().local_var_names()) {
    if (!is_running_stat(name)) continue;
    INFO(name);
    const Tensor& t = b.scope().find_var(name)->get<Tensor>();
    CHECK(t.dtype() == DataType::Float32);
    const auto tv = t.to_vector<float>(), fv = a.scope().find_var(name)->get<Tensor>().to_vector<float>();
    for (std::size_t i = 0; i < tv.size(); ++i) CHECK(std::abs(tv[i] - fv[i]) <= tol * (1 + std::abs(fv[i])));
    ++stats;
  }
  return stats;
}

}  // namespace

TEST_CASE("amp O1 (conv2d allowed) and O2 run conv, batch norm, relu blocks with no cast between conv and batch "
          "norm, the running statistics f32 variables, and train within 2 % of the f32 loss",
          "[frontend][amp]") {
  for (amp::Level level : {amp::Level::O1, amp::Level::O2}) {
    INFO("level O" << int(level));
    amp::Options o;
    o.level = level;
    if (level == amp::Level::O1) o.allow = {"kiln.conv2d", "kiln.matmul"};
    auto plain = conv_bn(nullptr);
    auto low = conv_bn(&o);
    INFO(low->g.main.to_string());
    low->g.main.verify();
    check_batch_norms_low(low->g.main, DataType::BFloat16, 2);
    Executor a, b;
    set_random_seed(kDefaultRandomSeed);  // the initial values of a fresh process
    a.run(plain->g.startup);
    b.run(low->g.startup);
    copy_scope(a, b);
    float la = 0, lb = 0;
    for (int s = 0; s < 20; ++s) {
      la = a.run(plain->g.main, plain->feed, {plain->loss})[0].to_vector<float>().at(0);
      lb = b.run(low->g.main, low->feed, {low->loss})[0].to_vector<float>().at(0);
    }
    INFO("f32 loss " << la << ", bf16 loss " << lb);
    CHECK(std::isfinite(lb));
    CHECK(std::abs(lb - la) <= 0.02 * std::abs(la));
    CHECK(check_running_stats(a, b, 0.05f) == 4);
  }
}

TEST_CASE("amp O1 (conv2d allowed) runs a MobileNet block's relu6 (kiln.clip) and its gradient in bf16 with "
          "no cast around them, as autocast runs hardtanh, and trains within 2 % of the f32 loss",
          "[frontend][amp]") {
  struct Relu6Net {
    AmpModel m;
    explicit Relu6Net(const amp::Options* o) {
      Value h = data("x", {8, 3, 12, 12});
      Value label = data("label", {8}, DataType::Int64);
      namespace F = nn::functional;
      for (std::int64_t in : {3, 8})
        h = main_builder().create<ClipOp>(nn::BatchNorm2D(8)(nn::Conv2D(in, 8, 3, 1, 1, 1, 1, false)(h)), 0.0, 6.0)
                .result();
      m.loss = F::cross_entropy(nn::Linear(8, 10)(F::flatten(F::adaptive_avg_pool2d(h, {1, 1}))), label);
      auto opt = optim::Momentum(0.05, 0.9);
      m.minimize(opt, o);
      std::vector<std::int64_t> y(8);
      for (std::size_t i = 0; i < y.size(); ++i) y[i] = static_cast<std::int64_t>(i * 3 % 10);
      m.feed = {{"x", normal_f32({8, 3, 12, 12}, 5)}, {"label", Tensor::from_vector<std::int64_t>(Dims({8}), y)}};
    }
  };
  amp::Options o;
  o.allow = {"kiln.conv2d", "kiln.matmul"};
  Relu6Net plain(nullptr), low(&o);
  INFO(low.m.g.main.to_string());
  int clips = 0;
  for (Operation* op : low.m.g.main.block()) {
    if (op->isa<ClipOp>() || op->isa<GradOf<ClipOp>>()) {
      ++clips;
      CHECK(dtype_of(op->result(0)) == DataType::BFloat16);
    }
    if (!op->isa<CastOp>()) continue;
    const Operation* from = op->operand_source(0).defining_op();
    CHECK_FALSE((from && from->isa<BatchNormOp>()));
  }
  CHECK(clips == 4);
  Executor a, b;
  set_random_seed(kDefaultRandomSeed);
  a.run(plain.m.g.startup);
  b.run(low.m.g.startup);
  copy_scope(a, b);
  float la = 0, lb = 0;
  for (int s = 0; s < 20; ++s) {
    la = a.run(plain.m.g.main, plain.m.feed, {plain.m.loss})[0].to_vector<float>().at(0);
    lb = b.run(low.m.g.main, low.m.feed, {low.m.loss})[0].to_vector<float>().at(0);
  }
  INFO("f32 loss " << la << ", bf16 loss " << lb);
  CHECK(std::abs(lb - la) <= 0.02 * std::abs(la));
}

TEST_CASE("amp O1 adds a conv's bias low, as autocast does: with conv2d allowed, the batch norm after a "
          "biased conv reads the low sum with no cast, and training tracks f32 within 2 %",
          "[frontend][amp]") {
  amp::Options o;
  o.allow = {"kiln.conv2d", "kiln.matmul"};
  auto plain = conv_bn_with(nullptr, true);
  auto low = conv_bn_with(&o, true);
  INFO(low->g.main.to_string());
  low->g.main.verify();
  int norms = 0;
  for (Operation* op : low->g.main.block()) {
    if (!op->isa<BatchNormOp>()) continue;
    ++norms;
    Operation* add = op->operand_source(0).defining_op();
    REQUIRE(add);
    CHECK(add->isa<AddOp>());
    CHECK(dtype_of(add->result(0)) == DataType::BFloat16);
    Operation* conv = add->operand_source(0).defining_op();
    REQUIRE(conv);
    CHECK(conv->isa<Conv2dOp>());
    CHECK(dtype_of(add->operand_source(1)) == DataType::BFloat16);  // the [1, C, 1, 1] bias, cast once
    CHECK(dtype_of(op->result(0)) == DataType::BFloat16);
  }
  CHECK(norms == 2);
  const auto [la, lb] = train_both(*plain, *low, 20);
  INFO("f32 loss " << la << ", bf16 loss " << lb);
  CHECK(std::isfinite(lb));
  CHECK(std::abs(lb - la) <= 0.02 * std::abs(la));
}

TEST_CASE("amp lowers only a batch norm's x when a given allow list names it: its parameters and running "
          "statistics stay f32",
          "[frontend][amp]") {
  REQUIRE(IrContext::instance()->find_op("kiln.batch_norm").has_interface<MixedHalfInterface>());
  REQUIRE(IrContext::instance()->find_op("kiln.fused_batch_norm").has_interface<MixedHalfInterface>());
  amp::Options o;
  o.allow = {"kiln.conv2d", "kiln.batch_norm"};
  auto m = conv_bn(&o);
  INFO(m->g.main.to_string());
  m->g.main.verify();
  check_batch_norms_low(m->g.main, DataType::BFloat16, 2);
  Executor exe;
  exe.run(m->g.startup);
  CHECK(std::isfinite(exe.run(m->g.main, m->feed, {m->loss})[0].to_vector<float>().at(0)));
}

// ---- the loss ----

namespace {

// x[8, 16] → Linear(16, 10) → cross_entropy (Mean) against label[8]; with
// `tail`, that loss plus 0.5 × the Sum one (a loss's scalar tail). SGD,
// decorated with `o`.
std::unique_ptr<AmpModel> classifier(const amp::Options& o, bool tail) {
  auto m = std::make_unique<AmpModel>();
  Value label = data("label", {8}, DataType::Int64);
  Value logits = nn::Linear(16, 10)(data("x", {8, 16}));
  m->loss = nn::functional::cross_entropy(logits, label);
  if (tail) {
    Builder b = main_builder();
    Value sum = nn::functional::cross_entropy(logits, label, nn::Reduction::Sum);
    Value half = b.create<FullOp>(std::vector<std::int64_t>{}, 0.5, DataType::Float32).result();
    m->loss = b.create<AddOp>(m->loss, b.create<MulOp>(sum, half).result()).result();
  }
  auto opt = optim::SGD(0.1);
  m->minimize(opt, &o);
  std::vector<std::int64_t> y{3, 1, 4, 1, 5, 9, 2, 6};
  m->feed = {{"x", normal_f32({8, 16}, 7)}, {"label", Tensor::from_vector<std::int64_t>(Dims({8}), y)}};
  return m;
}

// The loss a step of `m` fetches.
Tensor step_loss(AmpModel& m) {
  Executor exe;
  exe.run(m.g.startup);
  return exe.run(m.g.main, m.feed, {m.loss})[0];
}

}  // namespace

TEST_CASE("amp O1 and O2, bf16 and f16, give cross_entropy's mean an f32 loss, as PyTorch's autocast does",
          "[frontend][amp]") {
  for (amp::Level level : {amp::Level::O1, amp::Level::O2})
    for (DataType low : {DataType::BFloat16, DataType::Float16}) {
      INFO("level O" << int(level) << ", " << to_string(low));
      amp::Options o;
      o.level = level;
      o.dtype = low;
      auto m = classifier(o, false);
      INFO(m->g.main.to_string());
      CHECK(dtype_of(m->loss) == DataType::Float32);
      const Tensor loss = step_loss(*m);
      CHECK(loss.dtype() == DataType::Float32);
      CHECK(std::isfinite(loss.to_vector<float>().at(0)));
    }
}

TEST_CASE("amp O2 keeps a loss's scalar tail in f32 (the mean's division, a weighted sum of two losses) "
          "while the ops on whole tensors still run low",
          "[frontend][amp]") {
  amp::Options o;
  o.level = amp::Level::O2;
  auto m = classifier(o, true);
  INFO(m->g.main.to_string());
  m->g.main.verify();
  std::size_t tail = 0, low = 0;
  for (Operation* op : m->g.main.block()) {
    if (op_role(op) != OpRole::Forward || op->num_results() == 0 || !is_shaped(op->result_type(0))) continue;
    const bool scalar = Dims(shaped_dims(op->result_type(0))).numel() == 1;
    if (scalar && (op->isa<DivOp>() || op->isa<MulOp>() || op->isa<AddOp>())) {
      ++tail;
      CHECK(dtype_of(op->result(0)) == DataType::Float32);
    }
    if (op->isa<AddOp>() && !scalar) CHECK(dtype_of(op->result(0)) == DataType::BFloat16);  // the bias
    low += dtype_of(op->result(0)) == DataType::BFloat16;
  }
  CHECK(tail == 3);
  CHECK(low >= 2);  // the head's matmul and bias add
  CHECK(dtype_of(m->loss) == DataType::Float32);
}

// ---- loss scaling (f16) ----

namespace {

amp::Options f16_options() {
  amp::Options o;
  o.dtype = DataType::Float16;
  return o;
}

float scale_in(Executor& exe, const AmpModel& m) {
  return copy_to_place(exe.scope().find_var(m.scale_name)->get<Tensor>(), Place::cpu()).to_vector<float>().at(0);
}

// One step; returns whether it found an overflow.
bool step(Executor& exe, AmpModel& m, const FeedMap& feed) {
  return exe.run(m.g.main, feed, {m.found_inf})[0].to_vector<bool>().at(0);
}

}  // namespace

TEST_CASE("amp f16: minimize scales the loss, unscales and checks every gradient in one op, moves the "
          "scale, and gives every update the overflow flag as its skip operand",
          "[frontend][amp]") {
  const amp::Options o = f16_options();
  auto m = mlp(&o);
  INFO(m->g.main.to_string());
  m->g.main.verify();
  REQUIRE(!m->scale_name.empty());
  REQUIRE(m->found_inf);
  CHECK(count_top_ops(m->g.main, "kiln.check_finite_and_unscale") == 1);
  CHECK(count_top_ops(m->g.main, "kiln.update_loss_scaling_") == 1);
  std::size_t updates = 0;
  for (Operation* op : m->g.main.block()) {
    if (op->name() != "kiln.adam_") continue;
    ++updates;
    REQUIRE(op->num_operands() == 8);
    CHECK(op->operand(7).source() == m->found_inf);
  }
  CHECK(updates == m->grads.size());
  // The gradients minimize returns are the unscaled ones.
  for (auto [param, grad] : m->grads) CHECK(grad.defining_op()->isa<CheckFiniteAndUnscaleOp>());
  // Auto scales f16 only; On scales bf16 too.
  amp::Options bf16;
  CHECK(mlp(&bf16)->scale_name.empty());
  bf16.scaling = amp::Scaling::On;
  CHECK(!mlp(&bf16)->scale_name.empty());
}

TEST_CASE("amp f16: an injected overflow skips exactly that step (parameters and optimizer state keep "
          "their bits) and halves the scale; the next steps update again",
          "[frontend][amp]") {
  amp::Options o = f16_options();
  o.loss_scaling.init_scale = 256.0;  // no overflow from the scale itself
  for (const char* passes : {"", "fuse_optimizer"}) {
    INFO("passes '" << passes << "'");
    auto m = mlp(&o);
    ExecutionOptions eo;
    eo.passes = passes;
    Executor exe(Place::cpu(), eo);
    exe.run(m->g.startup);
    for (int s = 0; s < 3; ++s) CHECK_FALSE(step(exe, *m, m->feed));
    CHECK(scale_in(exe, *m) == 256.f);
    FeedMap poisoned = m->feed;
    Tensor x = poisoned.at("x").clone();
    x.data<float>()[17] = 1e30f;  // inf once cast to f16
    poisoned["x"] = x;
    const auto before = persistables(exe);
    CHECK(step(exe, *m, poisoned));
    const auto after = persistables(exe);
    CHECK(scale_in(exe, *m) == 128.f);
    for (const auto& [name, t] : before) {
      if (name.rfind(m->scale_name, 0) == 0) continue;  // the scale and its counters move
      INFO(name);
      CHECK(same_bits(t, after.at(name)));
    }
    CHECK_FALSE(step(exe, *m, m->feed));
    const auto updated = persistables(exe);
    std::size_t changed = 0;
    for (auto [param, grad] : m->grads) changed += !same_bits(after.at(parameter_name(param)), updated.at(parameter_name(param)));
    CHECK(changed == m->grads.size());
  }
}

TEST_CASE("amp f16: fuse_optimizer merges the updates that share the overflow flag into one op that skips, "
          "and training gives the unmerged program's bits through an overflow",
          "[frontend][amp]") {
  amp::Options o = f16_options();
  o.loss_scaling.init_scale = 512.0;
  o.loss_scaling.incr_every_n_steps = 2;
  auto plain = mlp(&o), merged = mlp(&o);
  const std::size_t made = fuse_optimizer_updates(merged->g.main.block());
  CHECK(made == 1);
  CHECK(count_top_ops(merged->g.main, "kiln.adam_") == 0);
  for (Operation* op : merged->g.main.block())
    if (op->name() == "kiln.merged_adam_") CHECK(op->operand(op->num_operands() - 1).source() == merged->found_inf);
  ExecutionOptions none;
  none.passes = "";
  Executor a(Place::cpu(), none), b(Place::cpu(), none);
  a.run(plain->g.startup);
  b.run(merged->g.startup);
  copy_scope(a, b);
  FeedMap poisoned = plain->feed;
  Tensor x = poisoned.at("x").clone();
  x.data<float>()[0] = -1e30f;
  poisoned["x"] = x;
  for (int s = 0; s < 6; ++s) {
    const FeedMap& feed = s == 3 ? poisoned : plain->feed;
    CHECK(step(a, *plain, feed) == (s == 3));
    CHECK(step(b, *merged, feed) == (s == 3));
  }
  const auto pa = persistables(a), pb = persistables(b);
  REQUIRE(pa.size() == pb.size());
  for (const auto& [name, t] : pa) {
    INFO(name);
    CHECK(same_bits(t, pb.at(name)));
  }
}

TEST_CASE("amp f16 with loss scaling trains the MLP and transformer blocks to within 2 % of the f32 loss "
          "after as many applied updates",
          "[frontend][amp]") {
  const amp::Options o = f16_options();  // PyTorch's defaults: 65536, halve on every overflow
  auto check = [&](std::unique_ptr<AmpModel> plain, std::unique_ptr<AmpModel> low, int steps) {
    Executor a, b;
    set_random_seed(kDefaultRandomSeed);  // the initial values of a fresh process
    a.run(plain->g.startup);
    b.run(low->g.startup);
    copy_scope(a, b);
    int skipped = 0;
    for (int s = 0; s < steps; ++s) skipped += step(b, *low, low->feed);
    INFO("skipped " << skipped << " of " << steps << " steps; scale now " << scale_in(b, *low));
    CHECK(skipped < steps / 2);
    float lf = 0;
    for (int s = 0; s <= steps - skipped; ++s)
      lf = a.run(plain->g.main, plain->feed, {plain->loss})[0].to_vector<float>().at(0);
    const float lh = b.run(low->g.main, low->feed, {low->loss})[0].to_vector<float>().at(0);
    INFO("f32 loss " << lf << ", f16 loss " << lh);
    CHECK(std::isfinite(lh));
    CHECK(std::abs(lh - lf) <= 0.02 * std::abs(lf));
  };
  SECTION("the MLP, 30 steps") { check(mlp(nullptr), mlp(&o), 30); }
  SECTION("two transformer blocks, 20 steps") { check(transformer(nullptr), transformer(&o), 20); }
}

TEST_CASE("amp f16: a scale too large for f16 overflows, backs off by halves over the first steps, and "
          "then trains",
          "[frontend][amp]") {
  amp::Options o = f16_options();
  o.loss_scaling.init_scale = 1e9;
  auto m = mlp(&o);
  Executor exe;
  exe.run(m->g.startup);
  const float first = exe.run(m->g.main, m->feed, {m->loss})[0].to_vector<float>().at(0);
  int skipped = 0, last_skip = -1;
  float loss = first;
  for (int s = 0; s < 60; ++s) {
    auto out = exe.run(m->g.main, m->feed, {m->found_inf, m->loss});
    if (out[0].to_vector<bool>().at(0)) {
      ++skipped;
      last_skip = s;
    }
    loss = out[1].to_vector<float>().at(0);
  }
  INFO("skipped " << skipped << " (last at step " << last_skip << "), scale " << scale_in(exe, *m) << ", loss "
                  << first << " -> " << loss);
  CHECK(skipped >= 5);
  CHECK(last_skip < 40);
  CHECK(scale_in(exe, *m) <= 1e9f / float(1 << skipped) * 1.0001f);
  CHECK(std::isfinite(loss));
  CHECK(loss < 0.8f * first);
}

TEST_CASE("amp f16: bad loss-scaling settings are errors naming the field, before the program changes",
          "[frontend][amp]") {
  GuardedPrograms g;
  Value x = data("x", {4, 8});
  Value loss = main_builder().create<MeanOp>(nn::Linear(8, 2)(x), std::vector<std::int64_t>{}, false).result();
  const std::string before = g.main.to_string();
  auto opt = optim::SGD(0.1);
  auto fails = [&](const amp::LossScaling& l, std::vector<std::string> parts) {
    amp::Options o = f16_options();
    o.loss_scaling = l;
    kiln_test::expect_error([&] { amp::decorate(opt, o).minimize(loss); }, ErrorKind::InvalidArgument, parts);
    CHECK(g.main.to_string() == before);
  };
  amp::LossScaling l;
  l.init_scale = 0.0;
  fails(l, {"LossScaling::init_scale", "> 0"});
  l = {};
  l.init_scale = 1e300;
  fails(l, {"LossScaling::init_scale", "finite f32"});
  l = {};
  l.decr_ratio = 2.0;
  fails(l, {"LossScaling::decr_ratio", "(0, 1]"});
  l = {};
  l.incr_every_n_steps = 0;
  fails(l, {"LossScaling::incr_every_n_steps"});
  auto d = amp::decorate(opt, f16_options());
  Scope scope;
  KILN_CHECK_ERROR(d.loss_scale(scope), NotFound, {"no loss scale"});
}

TEST_CASE("a loss-scaled f16 program prints and parses back, round-trips through JSON, and its for-test "
          "clone has no scaling and computes the trained program's loss bit for bit",
          "[frontend][amp]") {
  const amp::Options o = f16_options();
  auto m = mlp(&o);
  IrMapping map;
  const Program test = round_trip_and_clone_for_test(*m, map);
  CHECK(count_top_ops(test, "kiln.check_finite_and_unscale") == 0);
  CHECK(count_top_ops(test, "kiln.update_loss_scaling_") == 0);
  for (Operation* op : test.block())
    for (std::uint32_t i = 0; i < op->num_operands(); ++i)
      if (auto def = op->operand(i).source().defining_op(); def && def->isa<ParameterOp>())
        CHECK(def->dyn_cast<ParameterOp>().attrs().parameter_name != m->scale_name);
  check_test_clone_loss(*m, test, map);
}

TEST_CASE("amp f16 on CUDA: an injected overflow skips that step and halves the scale; training tracks "
          "the CPU's",
          "[frontend][amp][cuda]") {
  if (cuda_device_count() == 0) {
    WARN("no CUDA device: loss scaling on CUDA is not tried");
    return;
  }
  amp::Options o = f16_options();
  o.loss_scaling.init_scale = 256.0;
  auto m = mlp(&o);
  Executor exe(Place::cuda(0));
  exe.run(m->g.startup);
  for (int s = 0; s < 3; ++s) CHECK_FALSE(step(exe, *m, m->feed));
  FeedMap poisoned = m->feed;
  Tensor x = poisoned.at("x").clone();
  x.data<float>()[17] = 1e30f;
  poisoned["x"] = x;
  const auto before = persistables(exe);
  CHECK(step(exe, *m, poisoned));
  const auto after = persistables(exe);
  CHECK(scale_in(exe, *m) == 128.f);
  for (auto [param, grad] : m->grads) CHECK(same_bits(before.at(parameter_name(param)), after.at(parameter_name(param))));
  CHECK_FALSE(step(exe, *m, m->feed));
}

namespace {

// An inference MLP over x[8, 16], lowered by amp O1 bf16, its startup run
// into `exe`'s scope; also one parameter read in f32 (a bias row added to
// the f32 output), which keeps its f32 reads.
struct LoweredInference {
  GuardedPrograms g;
  Value out;
  std::string f32_bias;
  FeedMap feed{{"x", normal_f32({8, 16}, 5)}};
  LoweredInference() {
    Value h = nn::functional::gelu(nn::Linear(16, 32)(data("x", {8, 16})));
    Value y = main_builder().create<CastOp>(nn::Linear(32, 4)(h), DataType::Float32).result();
    Value bias = create_parameter("f32_bias", {4}, DataType::Float32, init::Normal(0, 1));
    f32_bias = ParameterOp(bias.defining_op()).parameter_name();
    out = main_builder().create<AddOp>(y, bias).result();
    amp::rewrite(g.main.block(), {});
  }
};

}  // namespace

TEST_CASE("amp::cast_parameters rounds an inference program's weights into the scope once; the casts of them "
          "go, the results keep their bits, and the f32 parameters stay",
          "[frontend][amp]") {
  LoweredInference m;
  Executor exe;
  exe.run(m.g.startup);
  std::map<std::string, Tensor> before;
  for (const auto& name : exe.scope().local_var_names())
    before[name] = exe.scope().find_var(name)->get<Tensor>().clone();
  REQUIRE(before.size() == 5);  // two weights, two biases, the f32 bias
  const Tensor want = exe.run(m.g.main, m.feed, {m.out})[0];
  const std::size_t casts_before = count_top_ops(m.g.main, "kiln.cast");
  CHECK(amp::cast_parameters(m.g.main, exe.scope(), DataType::BFloat16) == 4);
  m.g.main.verify();
  CHECK(count_top_ops(m.g.main, "kiln.cast") == casts_before - 4);
  for (Operation* op : m.g.main.block())
    if (op->isa<ParameterOp>())
      CHECK(shaped_data_type(op->result(0).type()) ==
            (ParameterOp(op).parameter_name() == m.f32_bias ? DataType::Float32 : DataType::BFloat16));
  CHECK(same_bits(exe.run(m.g.main, m.feed, {m.out})[0], want));
  for (const auto& [name, t] : before) {
    INFO(name);
    CHECK(same_bits(exe.scope().find_var(name)->get<Tensor>(), t));
    const Variable* low = exe.scope().find_var(name + "@bf16");
    REQUIRE((low != nullptr) == (name != m.f32_bias));
    if (low) CHECK(low->get<Tensor>().dtype() == DataType::BFloat16);
  }
  CHECK(amp::cast_parameters(m.g.main, exe.scope(), DataType::BFloat16) == 0);  // nothing left to cast
}

TEST_CASE("amp::cast_parameters names a dtype that is no 16-bit float, a parameter the scope lacks or holds in "
          "another dtype, and changes nothing then",
          "[frontend][amp]") {
  LoweredInference m;
  Executor exe;
  const std::string text = m.g.main.to_string();
  KILN_CHECK_ERROR(amp::cast_parameters(m.g.main, exe.scope(), DataType::Float32), InvalidArgument,
                   {"amp::cast_parameters", "f32 is not bf16 or f16"});
  KILN_CHECK_ERROR(amp::cast_parameters(m.g.main, exe.scope(), DataType::BFloat16), NotFound,
                   {"amp::cast_parameters", "no parameter", "run the startup program first"});
  CHECK(m.g.main.to_string() == text);
  exe.run(m.g.startup);
  Operation* first = nullptr;
  for (Operation* op : m.g.main.block())
    if (!first && op->isa<ParameterOp>() && ParameterOp(op).parameter_name() != m.f32_bias) first = op;
  REQUIRE(first);
  const std::string name = ParameterOp(first).parameter_name();
  Variable& v = exe.scope().var(name);
  v.set(Tensor::zeros(v.get<Tensor>().dims(), DataType::Float64));
  KILN_CHECK_ERROR(amp::cast_parameters(m.g.main, exe.scope(), DataType::BFloat16), InvalidArgument,
                   {"amp::cast_parameters", "parameter '" + name + "' is", "f64", "the program reads an f32 CPU tensor"});
  CHECK(m.g.main.to_string() == text);
  CHECK(exe.scope().find_var(name + "@bf16") == nullptr);
}

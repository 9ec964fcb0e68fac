// fuse_elementwise (kiln/passes/fusion.h): which chains become one
// kiln.fused_elementwise, where it goes, what stays a result — and that a
// fused program computes what the unfused one did, bit for bit.
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "catch.hpp"
#include "kernel/cuda_test_util.h"
#include "test_util.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/execution_options.h"
#include "kiln/exec/executor.h"
#include "kiln/exec/interpreter_core.h"
#include "kiln/frontend/frontend.h"
#include "kiln/frontend/optimizer.h"
#include "kiln/kernel/random.h"
#include "kiln/io/json.h"
#include <nlohmann/json.hpp>
#include "kiln/ir/parser.h"
#include "kiln/kernel/cpu_convolution.h"
#include "kiln/kernel/kernel_registry.h"
#include "kiln/passes/channels_last.h"
#include "kiln/passes/fusion.h"
#include "kiln/passes/pass_manager.h"
#include "kiln/runtime/cuda_context.h"

using namespace kiln;
using kiln_test::same_bits;
using kiln_test::count_top_ops;
using kiln_test::pattern_f32;

namespace {

// The seed's model: a 16×16 linear layer, MSE, Adam.
struct SeedModel {
  Program main, startup;
  Value loss;
  FeedMap feeds;
  SeedModel() {
    UniqueNameGuard names;
    set_random_seed(0x5eed);
    {
      ProgramGuard guard(main, startup);
      Value x = data("x", {16, 16});
      Value label = data("label", {16, 1});
      Value out = nn::Linear(16, 1)(x);
      loss = nn::MSELoss()(out, label);
      optim::Adam(1e-2).minimize(loss);
    }
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.f, 1.f);
    std::vector<float> xs(256), ys(16);
    for (float& v : xs) v = normal(rng);
    for (float& v : ys) v = normal(rng);
    feeds = {{"x", Tensor::from_vector<float>({16, 16}, xs)}, {"label", Tensor::from_vector<float>({16, 1}, ys)}};
  }
};

// Every parameter of `program` holds the same bits in a's scope as in b's.
void require_same_parameters(const Program& program, Executor& a, Executor& b) {
  for (const auto& [name, p] : program.parameters()) {
    INFO(name);
    CHECK(same_bits(a.scope().find_var(name)->get<Tensor>(), b.scope().find_var(name)->get<Tensor>()));
  }
}

// Runs both models' startup programs from the same draws, then `steps`
// training steps on each: every loss, and at the end every parameter,
// bit for bit the same.
template <typename Model>
void require_same_training(Model& plain, Model& other, Executor& a, Executor& b, int steps) {
  set_random_seed(11);  // the initializers draw when the startup program runs
  a.run(plain.startup);
  set_random_seed(11);
  b.run(other.startup);
  for (int step = 0; step < steps; ++step) {
    const Tensor la = a.run(plain.main, plain.feeds, {plain.loss})[0];
    const Tensor lb = b.run(other.main, other.feeds, {other.loss})[0];
    INFO("step " << step);
    REQUIRE(same_bits(la, lb));
  }
  require_same_parameters(plain.main, a, b);
}

}  // namespace

TEST_CASE("the seed model's loss and gradient chain fuse into one op, and it trains bit for bit as before",
          "[passes][fusion]") {
  SeedModel plain, fused;
  const std::size_t made = fuse_elementwise(fused.main);
  CHECK(made == 1);
  CHECK(count_top_ops(fused.main, "kiln.fused_elementwise") == 1);
  // add, sub, square, full, mean_grad, square_grad went into it.
  for (std::string_view gone : {"kiln.add", "kiln.sub", "kiln.square", "kiln.full", "kiln.mean_grad",
                                "kiln.square_grad"})
    CHECK(count_top_ops(fused.main, gone) == 0);
  CHECK(count_top_ops(fused.main, "kiln.mean") == 1);  // the loss itself is a reduction
  fused.main.verify();

  Executor a, b;
  require_same_training(plain, fused, a, b, 20);
}

TEST_CASE("a value read between the group's members by an op outside it stays a result of the fused op",
          "[passes][fusion]") {
  // t = tanh(x); u = exp(t); m = mean(t) (outside); v = u * t.
  Program p;
  Builder bl(p);
  Value x = bl.create<DataOp>("x", std::vector<std::int64_t>{8}).result();
  Value t = bl.create<TanhOp>(x).result();
  Value u = bl.create<ExpOp>(t).result();
  Value m = bl.create<MeanOp>(t).result();
  Value v = bl.create<MulOp>(u, t).result();
  (void)m;
  Program q = p.clone();
  REQUIRE(fuse_elementwise(q) == 1);
  q.verify();
  Operation* fused = nullptr;
  for (Operation* op : q.block())
    if (op->name() == "kiln.fused_elementwise") fused = op;
  REQUIRE(fused);
  CHECK(fused->num_results() == 2);  // tanh's (read by mean) and mul's (read by nobody: DCE's to judge)
  CHECK(count_top_ops(q, "kiln.mean") == 1);
  (void)v;
}

TEST_CASE("fusion never moves an op across an in-place update of what it reads", "[passes][fusion]") {
  // a = exp(w); sgd_(w, g, lr); b = a * w: b reads the updated w.
  Program p;
  const Type wt = TensorType::get(DataType::Float32, {4});
  p.set_parameter("w", Parameter{wt});
  Builder bl(p);
  Value w = bl.create<ParameterOp>("w", wt).result();
  Value g = bl.create<DataOp>("g", std::vector<std::int64_t>{4}).result();
  Value lr = bl.create<FullOp>(std::vector<std::int64_t>{1}, 0.5).result();
  Value a = bl.create<ExpOp>(w).result();
  bl.create<Sgd_Op>(w, g, lr);
  Value b = bl.create<MulOp>(a, w).result();
  CHECK(fuse_elementwise(p) == 0);
  CHECK(count_top_ops(p, "kiln.fused_elementwise") == 0);
  (void)b;
}

TEST_CASE("fusion never moves a read to before an in-place update that came before it", "[passes][fusion]") {
  // relu_(w) updates w's buffer; tanh(w) after it reads the update; the
  // group {tanh, exp} must not go up to where w was defined.
  auto build = [](Program& p, Value& out) {
    Builder bl(p);
    Value w = bl.create<DataOp>("w", std::vector<std::int64_t>{6}).result();
    bl.create<InplaceUnaryOp<ReluMath>>(w);
    Value t = bl.create<TanhOp>(w).result();
    out = bl.create<ExpOp>(t).result();
  };
  Program p, q;
  Value out_p, out_q;
  build(p, out_p);
  build(q, out_q);
  REQUIRE(fuse_elementwise(q) == 0);
  Executor exe;
  const FeedMap feed{{"w", Tensor::from_vector<float>({6}, {-1.f, 2.f, -3.f, 4.f, -5.f, 6.f})}};
  CHECK(same_bits(exe.run(p, feed, {out_p})[0], exe.run(q, feed, {out_q})[0]));
}

TEST_CASE("a value the caller keeps (fetches) is never fused away", "[passes][fusion]") {
  Program p;
  Builder bl(p);
  Value x = bl.create<DataOp>("x", std::vector<std::int64_t>{8}).result();
  Value t = bl.create<TanhOp>(x).result();
  Value u = bl.create<ExpOp>(t).result();
  Value v = bl.create<SqrtOp>(u).result();
  ValueSet keep{u.impl()};
  // tanh alone, then sqrt alone: neither group reaches two ops.
  CHECK(fuse_elementwise(p, keep) == 0);
  CHECK(count_top_ops(p, "kiln.exp") == 1);
  (void)v;
}

TEST_CASE("a constant the caller fetches stays when the group that read it is fused", "[passes][fusion]") {
  Program p;
  Builder bl(p);
  Value x = bl.create<DataOp>("x", std::vector<std::int64_t>{4}).result();
  Value c = bl.create<FullOp>(std::vector<std::int64_t>{4}, 2.0).result();
  Value y = bl.create<ExpOp>(bl.create<MulOp>(x, c).result()).result();
  Executor exe(Place::cpu(), {.passes = "fuse"});
  auto out = exe.run(p, {{"x", Tensor::from_vector<float>({4}, {0.f, 1.f, 2.f, 3.f})}}, {y, c});
  CHECK(out[1].to_vector<float>() == std::vector<float>(4, 2.f));
  CHECK(out[0].to_vector<float>()[1] == std::exp(2.f));
}

TEST_CASE("a full that an in-place op updated is read as a value, not folded into the body as a constant",
          "[passes][fusion]") {
  Program p;
  Builder bl(p);
  Value x = bl.create<DataOp>("x", std::vector<std::int64_t>{4}).result();
  Value c = bl.create<FullOp>(std::vector<std::int64_t>{4}, -1.0).result();
  Value r = bl.create<Relu_Op>(c).result();  // c's variable is 0 from here on
  Value y = bl.create<ExpOp>(bl.create<AddOp>(bl.create<AddOp>(x, r).result(), c).result()).result();
  Executor exe(Place::cpu(), {.passes = "fuse"});
  auto out = exe.run(p, {{"x", Tensor::from_vector<float>({4}, {0.f, 1.f, 2.f, 3.f})}}, {y});
  CHECK(count_top_ops(exe.last_core()->plan().program, "kiln.fused_elementwise") == 1);
  CHECK(out[0].to_vector<float>() == std::vector<float>{1.f, std::exp(1.f), std::exp(2.f), std::exp(3.f)});
}

TEST_CASE("a fused op over one element takes one-element operands of any rank", "[passes][fusion]") {
  // x is [1,1], s is a scalar [] and t is [1]: all one element, dims differ.
  Program p;
  Builder bl(p);
  Value x = bl.create<DataOp>("x", std::vector<std::int64_t>{1, 1}).result();
  Value s = bl.create<DataOp>("s", std::vector<std::int64_t>{}).result();
  Value t = bl.create<DataOp>("t", std::vector<std::int64_t>{1}).result();
  Value y = bl.create<ExpOp>(bl.create<AddOp>(bl.create<MulOp>(x, s).result(), t).result()).result();
  const FeedMap feed{{"x", Tensor::from_vector<float>({1, 1}, {0.5f})},
                     {"s", Tensor::from_vector<float>(Dims(std::vector<std::int64_t>{}), {3.f})},
                     {"t", Tensor::from_vector<float>({1}, {-1.f})}};
  Executor fused(Place::cpu(), {.passes = "fuse"});
  auto out = fused.run(p, feed, {y});
  CHECK(count_top_ops(fused.last_core()->plan().program, "kiln.fused_elementwise") == 1);
  CHECK(out[0].dims() == Dims({1, 1}));
  CHECK(out[0].to_vector<float>() == std::vector<float>{std::exp(0.5f * 3.f - 1.f)});
}

TEST_CASE("a fused op broadcasts one-element operands and computes each step as its op's kernel does",
          "[passes][fusion]") {
  // y = sigmoid(scale(x·s + c) - b) with b one element, f64 and f32.
  for (DataType dt : {DataType::Float32, DataType::Float64}) {
    INFO(to_string(dt));
    auto build = [&](Program& p, Value& out) {
      Builder bl(p);
      Value x = bl.create<DataOp>("x", std::vector<std::int64_t>{3, 700}, dt).result();
      Value c = bl.create<DataOp>("c", std::vector<std::int64_t>{1}, dt).result();
      Value s = bl.create<ScaleOp>(x, 1.5, 0.25, false).result();
      Value d = bl.create<SubOp>(s, c).result();
      Value e = bl.create<SigmoidOp>(d).result();
      out = bl.create<GradOf<TanhOp>>(e, d).result();
    };
    Program p, q;
    Value out_p, out_q;
    build(p, out_p);
    build(q, out_q);
    REQUIRE(fuse_elementwise(q, {out_q.impl()}) == 1);
    std::vector<double> xs(2100);
    for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(0.37 * static_cast<double>(i)) * 3;
    std::vector<float> xf(xs.begin(), xs.end());
    const Tensor xt = dt == DataType::Float64 ? Tensor::from_vector<double>({3, 700}, xs)
                                              : Tensor::from_vector<float>({3, 700}, xf);
    const Tensor ct = dt == DataType::Float64 ? Tensor::from_vector<double>({1}, {0.125})
                                              : Tensor::from_vector<float>({1}, {0.125f});
    Executor exe;
    const FeedMap feed{{"x", xt}, {"c", ct}};
    CHECK(same_bits(exe.run(p, feed, {out_p})[0], exe.run(q, feed, {out_q})[0]));
  }
}

TEST_CASE("a fused op whose operand has neither operand 0's dims nor one element fails naming it",
          "[passes][fusion]") {
  Program p;
  Builder bl(p);
  Value x = bl.create<DataOp>("x", std::vector<std::int64_t>{-1}).result();
  Value y = bl.create<DataOp>("y", std::vector<std::int64_t>{-1}).result();
  FusedBody body("$2 = kiln.add($0, $1)");
  Value r = bl.create<FusedElementwiseOp>(std::vector<Value>{x, y}, body, std::vector<std::int64_t>{2})
                .operation()
                ->result(0);
  Executor exe;
  CHECK_THROWS_WITH(exe.run(p, {{"x", Tensor::from_vector<float>({3}, {1, 2, 3})},
                                {"y", Tensor::from_vector<float>({2}, {1, 2})}},
                            {r}),
                    Catch::Contains("kiln.fused_elementwise") && Catch::Contains("operand #1"));
}

TEST_CASE("a fused mean_grad of one element reads a step computed in the same run", "[passes][fusion]") {
  // One element, operands of equal dims: every register is full, so the
  // mean_grad's operand is only known once the step before it has run.
  Program p;
  Builder bl(p);
  Value x = bl.create<DataOp>("x", std::vector<std::int64_t>{1}).result();
  Value y = bl.create<DataOp>("y", std::vector<std::int64_t>{1}).result();
  FusedBody body("$2 = kiln.add($0, $1); $3 = kiln.mean_grad($2); $4 = kiln.mul($3, $0)");
  Operation* op =
      bl.create<FusedElementwiseOp>(std::vector<Value>{x, y}, body, std::vector<std::int64_t>{3, 4}).operation();
  Executor exe;
  const auto out = exe.run(p, {{"x", Tensor::from_vector<float>({1}, {3})}, {"y", Tensor::from_vector<float>({1}, {4})}},
                           {op->result(0), op->result(1)});
  CHECK(out[0].data<float>()[0] == 7.0f);
  CHECK(out[1].data<float>()[0] == 21.0f);
}

TEST_CASE("a fused_elementwise body prints back the text it was parsed from; a bad one names the problem",
          "[passes][fusion]") {
  const std::string text =
      "$2 = kiln.sub($0, $1); $3 = kiln.square($2); $4 = const(0.0625); $5 = kiln.square_grad($2, $4); "
      "$6 = kiln.scale($5){2, 1e-08}; $7 = kiln.mean_grad($1)";
  FusedBody body(text);
  CHECK(body.text() == text);
  CHECK(body.steps().size() == 6);
  CHECK_THROWS_WITH(FusedBody("$2 = kiln.matmul($0, $1)"), Catch::Contains("'kiln.matmul' is not a fusable op"));
  CHECK_THROWS_WITH(FusedBody("$2 = kiln.exp($3)"), Catch::Contains("defined later"));
  CHECK_THROWS_WITH(FusedBody("$2 = kiln.exp($0); $4 = kiln.exp($2)"), Catch::Contains("must define $3"));
  CHECK_THROWS_WITH(FusedBody("$2 = kiln.add($0 $1)"), Catch::Contains("expected ','"));
  // An op whose body does not start at its operand count fails verification.
  Program p;
  Builder bl(p);
  Value x = bl.create<DataOp>("x", std::vector<std::int64_t>{2}).result();
  bl.create<FusedElementwiseOp>(std::vector<Value>{x}, FusedBody("$3 = kiln.exp($0)"), std::vector<std::int64_t>{3});
  CHECK_THROWS_WITH(p.verify(), Catch::Contains("must define $1"));
}

namespace {

// A small MLP: 32-64-64-10, ReLU, cross entropy, Adam; batch 24.
// Three linear layers, relu (or gelu: "gelu", "gelu_tanh") after the
// first two, trained by Adam.
struct MlpModel {
  Program main, startup;
  Value loss;
  FeedMap feeds;
  explicit MlpModel(const std::string& activation = "relu") {
    UniqueNameGuard names;
    {
      ProgramGuard guard(main, startup);
      Value x = data("x", {-1, 32});
      nn::Linear fc1(32, 64), fc2(64, 64), fc3(64, 10);
      nn::ReLU relu;
      nn::GELU gelu(activation == "gelu_tanh");
      const auto act = [&](Value v) { return activation == "relu" ? relu(v) : gelu(v); };
      Value logits = fc3(act(fc2(act(fc1(x)))));
      Value label = data("label", {-1}, DataType::Int64);
      loss = nn::CrossEntropyLoss()(logits, label);
      optim::Adam(1e-2).minimize(loss);
    }
    std::mt19937 rng(3);
    std::normal_distribution<float> normal(0.f, 1.f);
    std::vector<float> xs(24 * 32);
    std::vector<std::int64_t> ys(24);
    for (float& v : xs) v = normal(rng);
    for (std::size_t i = 0; i < ys.size(); ++i) ys[i] = static_cast<std::int64_t>(i % 10);
    feeds = {{"x", Tensor::from_vector<float>({24, 32}, xs)}, {"label", Tensor::from_vector<std::int64_t>({24}, ys)}};
  }
};

}  // namespace

TEST_CASE("an MLP's matmul, bias add and relu become one fused_matmul per layer, and it trains bit for bit",
          "[passes][fusion]") {
  MlpModel plain, fused;
  CHECK(fuse_matmul_epilogue(fused.main) == 3);  // two with relu, the logits' without
  fuse_elementwise(fused.main);
  fused.main.verify();
  std::size_t with_relu = 0;
  for (Operation* op : fused.main.block())
    if (op->name() == "kiln.fused_matmul")
      with_relu += from_attributes<FusedMatmulOp::Attributes>(op->attributes(), "").activation.name == "kiln.relu";
  CHECK(with_relu == 2);
  CHECK(count_top_ops(fused.main, "kiln.relu") == 0);
  Executor a, b;
  require_same_training(plain, fused, a, b, 15);
}

TEST_CASE("in training, a linear layer's gelu fuses into its fused_matmul, which keeps the pre-activation "
          "gelu_grad reads, and it trains bit for bit",
          "[passes][fusion]") {
  for (const std::string form : {"gelu", "gelu_tanh"}) {
    INFO(form);
    MlpModel plain(form), fused(form);
    CHECK(fuse_matmul_epilogue(fused.main) == 3);
    fused.main.verify();
    std::size_t kept = 0;
    for (Operation* op : fused.main.block())
      if (op->name() == "kiln.fused_matmul") {
        const auto a = from_attributes<FusedMatmulOp::Attributes>(op->attributes(), "");
        if (!a.keep_pre_activation) continue;
        ++kept;
        CHECK(a.activation.name == "kiln." + form);
        REQUIRE(op->num_results() == 2);
        // The pre-activation's only reader is gelu's gradient.
        for (auto use : op->result(1).uses()) CHECK(use.owner()->name() == "kiln.gelu_grad");
        CHECK(!op->result(1).use_empty());
      }
    CHECK(kept == 2);
    CHECK(count_top_ops(fused.main, "kiln.gelu") == 0);
    CHECK(count_top_ops(fused.main, "kiln.gelu_grad") == 2);
    Executor a, b;
    require_same_training(plain, fused, a, b, 10);
  }
}

namespace {

// x · w + b, then what `between` builds, then gelu of the sum, fused:
// gelu stays an op of its own, and the bias alone goes into the one
// fused_matmul (no activation, one result).
void check_gelu_stays_out(const std::function<void(Builder&, Value)>& between) {
  Program p;
  Builder bl(p);
  Value x = bl.create<DataOp>("x", std::vector<std::int64_t>{4, 8}).result();
  Value w = bl.create<DataOp>("w", std::vector<std::int64_t>{8, 3}).result();
  Value bias = bl.create<DataOp>("b", std::vector<std::int64_t>{3}).result();
  Value sum = bl.create<AddOp>(bl.create<MatmulOp>(x, w).result(), bias).result();
  between(bl, sum);
  bl.create<GeluOp>(sum);
  CHECK(fuse_matmul_epilogue(p) == 1);
  p.verify();
  CHECK(count_top_ops(p, "kiln.gelu") == 1);
  for (Operation* op : p.block())
    if (op->name() == "kiln.fused_matmul") {
      CHECK(op->num_results() == 1);
      CHECK(from_attributes<FusedMatmulOp::Attributes>(op->attributes(), "").activation.name.empty());
    }
}

}  // namespace

TEST_CASE("a gelu is not fused where another op reads its input first or an in-place update lies between, "
          "and the bias still is",
          "[passes][fusion]") {
  SECTION("a mean reads the sum before gelu does") {
    check_gelu_stays_out([](Builder& bl, Value sum) { bl.create<MeanOp>(sum); });
  }
  SECTION("an in-place relu of another value, which nothing may move across") {
    check_gelu_stays_out([](Builder& bl, Value) {
      bl.create<Relu_Op>(bl.create<DataOp>("o", std::vector<std::int64_t>{3}).result());
    });
  }
}

TEST_CASE("a fused_matmul keeping its pre-activation prints, parses and round-trips through JSON, and one "
          "saved before that attribute existed loads with one result",
          "[passes][fusion]") {
  MlpModel mlp("gelu");
  fuse_matmul_epilogue(mlp.main);
  const std::string text = mlp.main.to_string();
  CHECK(text.find("keep_pre_activation = true") != std::string::npos);
  Program parsed = parse_program(text);
  CHECK(parsed.to_string() == text);
  Program loaded = program_from_json(program_to_json(mlp.main));
  CHECK(loaded.to_string() == text);
  // An old program's fused_matmul: no keep_pre_activation attribute.
  Program old;
  Builder bl(old);
  Value x = bl.create<DataOp>("x", std::vector<std::int64_t>{4, 8}).result();
  Value w = bl.create<DataOp>("w", std::vector<std::int64_t>{8, 3}).result();
  bl.create<FusedMatmulOp>(x, w, Value(), false, false, "kiln.relu");
  std::string old_text = old.to_string();
  const std::size_t at = old_text.find(", keep_pre_activation = false");
  REQUIRE(at != std::string::npos);
  old_text.erase(at, std::string(", keep_pre_activation = false").size());
  nlohmann::json j = program_to_json(old);
  std::size_t dropped = 0;
  for (nlohmann::json& op : j["body"]["ops"]) dropped += op["attrs"].erase("keep_pre_activation");
  REQUIRE(dropped == 1);
  const auto one_result = [](const Program& reloaded) {
    reloaded.verify();
    for (Operation* op : reloaded.block())
      if (op->name() == "kiln.fused_matmul") CHECK(op->num_results() == 1);
  };
  one_result(parse_program(old_text));
  one_result(program_from_json(j));
}

namespace {

// x · w + b, then `activation` (a unary op), all of dtype dt.
template <typename ActOp>
Program linear_then(DataType dt) {
  Program p;
  Builder bl(p);
  Value x = bl.create<DataOp>("x", std::vector<std::int64_t>{4, 8}, dt).result();
  Value w = bl.create<DataOp>("w", std::vector<std::int64_t>{8, 3}, dt).result();
  Value bias = bl.create<DataOp>("b", std::vector<std::int64_t>{3}, dt).result();
  bl.create<ActOp>(bl.create<AddOp>(bl.create<MatmulOp>(x, w).result(), bias).result());
  return p;
}

std::size_t fuse_for(Program& p, Place target) {
  PassContext ctx;
  ctx.target_place = target;
  PassManager::parse("fuse").run(p, ctx);
  return count_top_ops(p, "kiln.fused_matmul");
}

}  // namespace

TEST_CASE("for a CUDA target, matmul, bias and relu become one fused_matmul in f32 and 16-bit, and other "
          "activations stay ops of their own",
          "[passes][fusion]") {
  if (!built_with_cuda()) return;
  MlpModel mlp;
  PassContext ctx(std::vector<Value>{mlp.loss});
  ctx.target_place = Place::cuda(0);
  PassManager::parse("fuse").run(mlp.main, ctx);
  mlp.main.verify();
  std::size_t fused = 0, with_relu = 0;
  for (Operation* op : mlp.main.block())
    if (op->name() == "kiln.fused_matmul") {
      ++fused;
      with_relu += from_attributes<FusedMatmulOp::Attributes>(op->attributes(), "").activation.name == "kiln.relu";
    }
  CHECK(fused == 3);
  CHECK(with_relu == 2);
  CHECK(count_top_ops(mlp.main, "kiln.fused_elementwise") == 0);  // no CUDA kernel
  // tanh is no cuBLASLt epilogue: the bias is fused, tanh stays.
  Program tanh = linear_then<TanhOp>(DataType::Float32);
  CHECK(fuse_for(tanh, Place::cuda(0)) == 1);
  CHECK(count_top_ops(tanh, "kiln.tanh") == 1);
  // bf16: fused on CUDA (rounded once) and on the CPU (rounded after the
  // add and after relu, the unfused ops' bits).
  Program bf16 = linear_then<ReluOp>(DataType::BFloat16), cpu = bf16.clone();
  CHECK(fuse_for(bf16, Place::cuda(0)) == 1);
  CHECK(count_top_ops(bf16, "kiln.relu") == 0);
  CHECK(fuse_for(cpu, Place::cpu()) == 1);
  CHECK(count_top_ops(cpu, "kiln.relu") == 0);
  // gelu, either form: fused, its pre-activation kept for gelu_grad.
  for (const std::string form : {"gelu", "gelu_tanh"}) {
    MlpModel gelu(form);
    PassContext gctx(std::vector<Value>{gelu.loss});
    gctx.target_place = Place::cuda(0);
    PassManager::parse("fuse").run(gelu.main, gctx);
    gelu.main.verify();
    CHECK(count_top_ops(gelu.main, "kiln.gelu") == 0);
    std::size_t kept = 0;
    for (Operation* op : gelu.main.block())
      kept += op->name() == "kiln.fused_matmul" && op->num_results() == 2;
    CHECK(kept == 2);
  }
}

TEST_CASE("an MLP trained on CUDA with its matmuls fused into cuBLASLt's epilogues tracks the unfused "
          "training, with relu or either gelu",
          "[passes][fusion][cuda]") {
  if (cuda_device_count() == 0) return;
  // gelu's tanh form runs in cuBLASLt's GELU_AUX_BIAS epilogue, with
  // cuBLASLt's own (likely approximate) tanh: its loss within 1e-3 of the
  // unfused one's.
  const std::string form = GENERATE("relu", "gelu", "gelu_tanh");
  INFO(form);
  const float tolerance = form == "gelu_tanh" ? 1e-3f : 1e-5f;
  MlpModel plain(form), fused(form);
  ExecutionOptions with;
  with.passes = "fuse";
  Executor a(Place::cuda(0), {.passes = ""}), b(Place::cuda(0), with);
  set_random_seed(11);
  a.run(plain.startup);
  set_random_seed(11);
  b.run(fused.startup);
  for (int step = 0; step < 15; ++step) {
    const float la = a.run(plain.main, plain.feeds, {plain.loss})[0].to_vector<float>()[0];
    const float lb = b.run(fused.main, fused.feeds, {fused.loss})[0].to_vector<float>()[0];
    INFO("step " << step);
    CHECK(std::abs(la - lb) <= tolerance * std::abs(la) + 1e-6f);
  }
  std::size_t fused_instructions = 0;
  InterpreterCore* core = b.last_core();
  REQUIRE(core);
  for (std::uint32_t i = 0; i < core->num_instructions(); ++i)
    fused_instructions += core->instruction(i).op_name == "kiln.fused_matmul";
  CHECK(fused_instructions == 3);
}

TEST_CASE("a product or sum the caller keeps is not fused into a fused_matmul", "[passes][fusion]") {
  Program p;
  Builder bl(p);
  Value x = bl.create<DataOp>("x", std::vector<std::int64_t>{4, 8}).result();
  Value w = bl.create<DataOp>("w", std::vector<std::int64_t>{8, 3}).result();
  Value bias = bl.create<DataOp>("b", std::vector<std::int64_t>{3}).result();
  Value mm = bl.create<MatmulOp>(x, w).result();
  Value sum = bl.create<AddOp>(mm, bias).result();
  Value act = bl.create<TanhOp>(sum).result();
  (void)act;
  Program q = p.clone();
  CHECK(fuse_matmul_epilogue(p, {mm.impl()}) == 0);
  // Keeping the sum fuses matmul + add but leaves tanh on its own.
  CHECK(fuse_matmul_epilogue(q) == 1);
  CHECK(count_top_ops(q, "kiln.tanh") == 0);
  Program r;
  Builder br(r);
  Value rx = br.create<DataOp>("x", std::vector<std::int64_t>{4, 8}).result();
  Value rw = br.create<DataOp>("w", std::vector<std::int64_t>{8, 3}).result();
  Value rb = br.create<DataOp>("b", std::vector<std::int64_t>{3}).result();
  Value rs = br.create<AddOp>(br.create<MatmulOp>(rx, rw).result(), rb).result();
  br.create<TanhOp>(rs);
  CHECK(fuse_matmul_epilogue(r, {rs.impl()}) == 1);
  CHECK(count_top_ops(r, "kiln.tanh") == 1);
}

TEST_CASE("a fused_matmul with a bias of the wrong size, an unknown activation or a pre-activation kept "
          "without one is refused, naming it",
          "[passes][fusion]") {
  Program p;
  Builder bl(p);
  Value x = bl.create<DataOp>("x", std::vector<std::int64_t>{4, 8}).result();
  Value w = bl.create<DataOp>("w", std::vector<std::int64_t>{8, 3}).result();
  Value b5 = bl.create<DataOp>("b", std::vector<std::int64_t>{5}).result();
  Value b3 = bl.create<DataOp>("c", std::vector<std::int64_t>{3}).result();
  CHECK_THROWS_WITH(bl.create<FusedMatmulOp>(x, w, b5, false, false, ""),
                    Catch::Contains("kiln.fused_matmul") && Catch::Contains("bias has 5 elements"));
  CHECK_THROWS_WITH(bl.create<FusedMatmulOp>(x, w, b3, false, false, "kiln.softmax"),
                    Catch::Contains("activation 'kiln.softmax' is not an op of the unary family, kiln.gelu "
                                    "or kiln.gelu_tanh"));
  // A pre-activation kept with no activation would be the product itself.
  CHECK_THROWS_WITH(bl.create<FusedMatmulOp>(x, w, b3, false, false, "", true),
                    Catch::Contains("kiln.fused_matmul") && Catch::Contains("has no activation"));
  // A dynamic bias whose size is wrong only at run time.
  Value bd = bl.create<DataOp>("d", std::vector<std::int64_t>{-1}).result();
  Value r = bl.create<FusedMatmulOp>(x, w, bd, false, false, "kiln.relu").operation()->result(0);
  Executor exe;
  FeedMap feed{{"x", Tensor::from_vector<float>({4, 8}, std::vector<float>(32, 1.f))},
               {"w", Tensor::from_vector<float>({8, 3}, std::vector<float>(24, 1.f))},
               {"b", Tensor::from_vector<float>({5}, std::vector<float>(5, 0.f))},
               {"c", Tensor::from_vector<float>({3}, std::vector<float>(3, 0.f))},
               {"d", Tensor::from_vector<float>({2}, {1.f, 2.f})}};
  CHECK_THROWS_WITH(exe.run(p, feed, {r}), Catch::Contains("bias has 2 elements"));
}

TEST_CASE("the fuse pass, named in an executor's pipeline, fuses the seed model and trains it bit for bit",
          "[passes][fusion]") {
  SeedModel plain, model;
  ExecutionOptions with;
  with.passes = "dce,cse,fold,simplify,fuse";
  Executor a, b(Place::cpu(), with);
  require_same_training(plain, model, a, b, 10);
  // The executor ran a fused copy; the user's program is as it was.
  CHECK(count_top_ops(model.main, "kiln.fused_elementwise") == 0);
  CHECK(count_top_ops(model.main, "kiln.square") == 1);
  std::size_t fused_instructions = 0;
  InterpreterCore* core = b.last_core();
  REQUIRE(core);
  for (std::uint32_t i = 0; i < core->num_instructions(); ++i)
    fused_instructions += core->instruction(i).op_name == "kiln.fused_elementwise" ||
                          core->instruction(i).op_name == "kiln.fused_matmul";
  CHECK(fused_instructions == 2);  // the product with its bias, the loss and gradient chain
}

TEST_CASE("operands of unknown dims that may broadcast at run time are not fused as if their dims were equal",
          "[passes][fusion]") {
  // x [-1, 4] and y [-1, 4] fed [1, 4] and [3, 4]: add broadcasts.
  auto build = [](Program& p, Value& out) {
    Builder bl(p);
    Value x = bl.create<DataOp>("x", std::vector<std::int64_t>{-1, 4}).result();
    Value y = bl.create<DataOp>("y", std::vector<std::int64_t>{-1, 4}).result();
    Value s = bl.create<AddOp>(x, y).result();
    Value e = bl.create<ExpOp>(s).result();
    out = bl.create<MulOp>(e, s).result();  // e and s share add's dims: these two may fuse
  };
  Program p, q;
  Value out_p, out_q;
  build(p, out_p);
  build(q, out_q);
  fuse_elementwise(q, {out_q.impl()});
  CHECK(count_top_ops(q, "kiln.add") == 1);
  Executor exe;
  const FeedMap feed{{"x", Tensor::from_vector<float>({1, 4}, {1, 2, 3, 4})},
                     {"y", Tensor::from_vector<float>({3, 4}, std::vector<float>(12, 0.5f))}};
  ExecutionOptions fused;
  fused.passes = "fuse";
  Executor exe_fused(Place::cpu(), fused);
  const Tensor want = exe.run(p, feed, {out_p})[0];
  CHECK(want.dims() == Dims({3, 4}));
  CHECK(same_bits(want, exe_fused.run(p, feed, {out_p})[0]));
  CHECK(same_bits(want, exe.run(q, feed, {out_q})[0]));
}

namespace {

// conv2d (x [2, 3, 9, 9] -> 8 channels, 3x3 with padding 1, or 1x1) + the
// bias reshaped as the frontend ([O, 1, 1]) or the ONNX importer
// ([1, O, 1, 1]) writes it, then `act`: "relu", "relu6" (clip to [0, 6]),
// "clip5" (clip to [0, 5], not fusable), "silu" (z · sigmoid(z)),
// "silu_swapped" (sigmoid(z) · z), "gate" (sigmoid(z) · sigmoid(z), not a
// SiLU) or "none".
struct ConvBlock {
  Program p;
  Value out;
  std::int64_t k;
  ConvBlock(const std::string& act, bool four_d, std::int64_t kernel) : k(kernel) {
    Builder b(p);
    Value x = b.create<DataOp>("x", std::vector<std::int64_t>{2, 3, 9, 9}).result();
    Value w = b.create<DataOp>("w", std::vector<std::int64_t>{8, 3, k, k}).result();
    Value bias = b.create<DataOp>("b", std::vector<std::int64_t>{8}).result();
    Value y = b.create<Conv2dOp>(x, w, std::vector<std::int64_t>{1, 1},
                                 std::vector<std::int64_t>{k / 2, k / 2})
                  .result();
    const auto shape = four_d ? std::vector<std::int64_t>{1, 8, 1, 1} : std::vector<std::int64_t>{8, 1, 1};
    out = b.create<AddOp>(y, b.create<ReshapeOp>(bias, shape).result()).result();
    if (act == "relu") out = b.create<ReluOp>(out).result();
    if (act == "relu6" || act == "clip5") out = b.create<ClipOp>(out, 0.0, act == "relu6" ? 6.0 : 5.0).result();
    if (act == "silu" || act == "silu_swapped" || act == "gate") {
      Value s = b.create<SigmoidOp>(out).result();
      out = act == "silu"           ? b.create<MulOp>(out, s).result()
            : act == "silu_swapped" ? b.create<MulOp>(s, out).result()
                                    : b.create<MulOp>(s, s).result();
    }
  }
};

// The result of the block's last op (a fused op replaced the one built last).
Value last_result(Program& p) {
  Operation* last = nullptr;
  for (Operation* op : p.block()) last = op;
  return last->result(0);
}

Tensor run_block(ConvBlock& c) {
  const auto fill = pattern_f32;
  ExecutionOptions options;
  options.passes = "";  // the program as written (the fuse pass would fuse the plain one too)
  Executor exe(Place::cpu(), options);
  return exe.run(c.p, {{"x", fill({2, 3, 9, 9}, 0.5f, 1)}, {"w", fill({8, 3, c.k, c.k}, 0.25f, 2)},
                       {"b", fill({8}, 1.0f, 3)}},
                 {last_result(c.p)})[0];
}

}  // namespace

TEST_CASE("conv2d, a channel bias and relu, relu6 or silu become one fused_conv2d with the same "
          "result",
          "[passes][fusion]") {
  for (const std::string act : {"none", "relu", "relu6", "clip5", "silu", "silu_swapped", "gate"})
    for (bool four_d : {false, true})
      for (std::int64_t k : {1, 3}) {
        INFO(act << (four_d ? ", bias [1, O, 1, 1]" : ", bias [O, 1, 1]") << ", kernel " << k);
        ConvBlock plain(act, four_d, k), fused(act, four_d, k);
        CHECK(fuse_conv_epilogue(fused.p.block(), {}) == 1);
        fused.p.verify();
        CHECK(count_top_ops(fused.p, "kiln.conv2d") == 0);
        CHECK(count_top_ops(fused.p, "kiln.relu") == 0);
        CHECK(count_top_ops(fused.p, "kiln.clip") == (act == "clip5" ? 1u : 0u));
        CHECK(count_top_ops(fused.p, "kiln.sigmoid") == (act == "gate" ? 1u : 0u));
        CHECK(count_top_ops(fused.p, "kiln.mul") == (act == "gate" ? 1u : 0u));
        CHECK(count_top_ops(fused.p, "kiln.reshape") == 0);
        for (Operation* op : fused.p.block())
          if (op->isa<FusedConv2dOp>())
            CHECK(FusedConv2dOp(op).attrs().activation ==
                  (act == "silu_swapped" ? "silu" : act == "clip5" || act == "gate" ? "none" : act));
        const auto want = run_block(plain).to_vector<float>(), got = run_block(fused).to_vector<float>();
        REQUIRE(got.size() == want.size());
        for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(1e-5));
      }
}

namespace {

// A ResNet block's end: conv2d (x [2, 8, 9, 9] -> 8 channels, 3x3, padding
// 1) + bias, plus the skip (x itself, or `skip` when given: a broadcast
// [1, 8, 1, 1] is not a residual), then `act` ("relu", "relu6" or "none").
struct ResidualBlock {
  Program p;
  Value out, sum;
  explicit ResidualBlock(const std::string& act, bool broadcast_skip = false) {
    Builder b(p);
    Value x = b.create<DataOp>("x", std::vector<std::int64_t>{2, 8, 9, 9}).result();
    Value w = b.create<DataOp>("w", std::vector<std::int64_t>{8, 8, 3, 3}).result();
    Value bias = b.create<DataOp>("b", std::vector<std::int64_t>{8}).result();
    Value y = b.create<Conv2dOp>(x, w, std::vector<std::int64_t>{1, 1}, std::vector<std::int64_t>{1, 1}).result();
    y = b.create<AddOp>(y, b.create<ReshapeOp>(bias, std::vector<std::int64_t>{1, 8, 1, 1}).result()).result();
    Value skip = broadcast_skip ? b.create<ReshapeOp>(bias, std::vector<std::int64_t>{1, 8, 1, 1}).result() : x;
    out = sum = b.create<AddOp>(skip, y).result();
    if (act == "relu") out = b.create<ReluOp>(sum).result();
    if (act == "relu6") out = b.create<ClipOp>(sum, 0.0, 6.0).result();
  }
  Tensor run() {
    const auto fill = pattern_f32;
    ExecutionOptions options;
    options.passes = "";
    Executor exe(Place::cpu(), options);
    return exe.run(p, {{"x", fill({2, 8, 9, 9}, 0.5f, 1)}, {"w", fill({8, 8, 3, 3}, 0.05f, 2)}, {"b", fill({8}, 1.0f, 3)}},
                   {last_result(p)})[0];
  }
};

}  // namespace

TEST_CASE("a fused_conv2d plus a skip connection of its type, and its relu or relu6, become one "
          "fused_conv2d with a residual and the same result",
          "[passes][fusion]") {
  for (const std::string act : {"none", "relu", "relu6"}) {
    INFO(act);
    ResidualBlock plain(act), fused(act);
    CHECK(fuse_conv_epilogue(fused.p.block(), {}) == 1);
    CHECK(fuse_conv_residual(fused.p.block(), {}) == 1);
    fused.p.verify();
    CHECK(count_top_ops(fused.p, "kiln.add") == 0);
    CHECK(count_top_ops(fused.p, "kiln.relu") + count_top_ops(fused.p, "kiln.clip") == 0);
    Operation* conv = last_result(fused.p).defining_op();
    REQUIRE(conv->isa<FusedConv2dOp>());
    CHECK(conv->num_operands() == 4);
    CHECK(FusedConv2dOp(conv).attrs().activation == act);
    const auto want = plain.run().to_vector<float>(), got = fused.run().to_vector<float>();
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(1e-5));
  }
}

TEST_CASE("a conv result read twice or a broadcast add is not fused as a residual, and a kept skip sum "
          "keeps its relu",
          "[passes][fusion]") {
  ResidualBlock kept("relu");
  fuse_conv_epilogue(kept.p.block(), {});
  CHECK(fuse_conv_residual(kept.p.block(), {kept.sum.impl()}) == 1);  // conv + skip, no relu
  CHECK(count_top_ops(kept.p, "kiln.relu") == 1);
  ResidualBlock broadcast("relu", true);
  fuse_conv_epilogue(broadcast.p.block(), {});
  CHECK(fuse_conv_residual(broadcast.p.block(), {}) == 0);
  ResidualBlock twice("none");
  fuse_conv_epilogue(twice.p.block(), {});
  Value conv = twice.sum.defining_op()->operand_source(1);
  Builder b(twice.p);
  b.create<ReluOp>(conv);
  CHECK(fuse_conv_residual(twice.p.block(), {}) == 0);
}

TEST_CASE("a conv output or sum the caller keeps is not fused into a fused_conv2d, and a kept reshaped bias stays", "[passes][fusion]") {
  ConvBlock c("relu", false, 3);
  Operation* add = c.out.defining_op()->operand_source(0).defining_op();
  CHECK(fuse_conv_epilogue(c.p.block(), {add->result(0).impl()}) == 1);  // conv + bias, no relu
  CHECK(count_top_ops(c.p, "kiln.relu") == 1);
  ConvBlock d("relu", false, 3);
  Value conv = d.out.defining_op()->operand_source(0).defining_op()->operand_source(0);
  CHECK(fuse_conv_epilogue(d.p.block(), {conv.impl()}) == 0);
  ConvBlock e("none", true, 3);  // the reshaped bias is kept: fused, the reshape stays
  Value reshaped = e.out.defining_op()->operand_source(1);
  REQUIRE(reshaped.defining_op()->isa<ReshapeOp>());
  CHECK(fuse_conv_epilogue(e.p.block(), {reshaped.impl()}) == 1);
  CHECK(count_top_ops(e.p, "kiln.reshape") == 1);
  e.p.verify();
  ConvBlock f("silu", true, 3);  // the sigmoid is kept: conv + bias fused, the SiLU stays
  Value sigmoid = f.out.defining_op()->operand_source(1);
  REQUIRE(sigmoid.defining_op()->isa<SigmoidOp>());
  CHECK(fuse_conv_epilogue(f.p.block(), {sigmoid.impl()}) == 1);
  CHECK(count_top_ops(f.p, "kiln.sigmoid") == 1);
  CHECK(count_top_ops(f.p, "kiln.mul") == 1);
}

namespace {

Tensor bn_filled(std::vector<std::int64_t> dims, float scale, int seed) {
  std::vector<float> v(static_cast<std::size_t>(Dims(dims).numel()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = scale * float(int((i * 37 + seed) % 23) - 11);
  return Tensor::from_vector<float>(Dims(dims), v);
}

// A small CNN's training program as the frontend builds it: conv, batch
// norm, relu; a stride-2 conv, batch norm, relu6 (a clip to [0, 6]); a
// global average pool, a linear classifier, cross-entropy, momentum SGD.
struct BatchNormNet {
  Program main, startup;
  Value loss;
  FeedMap feeds;
  BatchNormNet() {
    UniqueNameGuard names;
    {
      ProgramGuard guard(main, startup);
      Value x = data("x", {4, 3, 10, 10});
      Value label = data("label", {4}, DataType::Int64);
      nn::BatchNorm2D bn1(8), bn2(8);
      Value y = nn::functional::relu(bn1(nn::Conv2D(3, 8, 3, 1, 1, 1, 1, false)(x)));
      y = main_builder().create<ClipOp>(bn2(nn::Conv2D(8, 8, 3, 2, 1, 1, 1, false)(y)), 0.0, 6.0).result();
      Value features = nn::functional::flatten(nn::functional::adaptive_avg_pool2d(y, {1, 1}));
      loss = nn::functional::cross_entropy(nn::Linear(8, 5)(features), label);
      optim::Momentum(0.05, 0.9).minimize(loss);
    }
    feeds = {{"x", bn_filled({4, 3, 10, 10}, 0.1f, 3)},
             {"label", Tensor::from_vector<std::int64_t>({4}, std::vector<std::int64_t>{0, 3, 1, 4})}};
  }
};

}  // namespace

TEST_CASE("a training program's batch norms and their relu or relu6 fuse with their gradients, and it trains "
          "bit for bit as the unfused program does, in either layout and after a JSON round trip",
          "[passes][fusion]") {
  for (bool nhwc : {false, true}) {
    INFO((nhwc ? "NHWC" : "NCHW"));
    BatchNormNet plain, fused;
    if (nhwc)
      for (BatchNormNet* net : {&plain, &fused})
        REQUIRE(convert_to_channels_last(net->main.block(), {net->loss.impl()}, nullptr, true) > 0);
    CHECK(fuse_batch_norm_activation(fused.main.block(), {fused.loss.impl()}) == 4);
    fused.main.verify();
    CHECK(count_top_ops(fused.main, "kiln.fused_batch_norm") == 2);
    CHECK(count_top_ops(fused.main, "kiln.fused_batch_norm_grad") == 2);
    for (const char* gone : {"kiln.batch_norm", "kiln.batch_norm_grad", "kiln.relu", "kiln.relu_grad", "kiln.clip",
                             "kiln.clip_grad"})
      CHECK(count_top_ops(fused.main, gone) == 0);
    Program loaded = load_program_json(save_program_json(fused.main));
    Value loaded_loss;  // the op at the loss's place in the loaded program
    for (auto it = fused.main.block().begin(), lt = loaded.block().begin(); it != fused.main.block().end(); ++it, ++lt)
      if (*it == fused.loss.defining_op()) loaded_loss = (*lt)->result(0);
    Executor a(Place::cpu(), {.passes = ""}), b(Place::cpu(), {.passes = ""}), c(Place::cpu(), {.passes = ""});
    for (Executor* e : {&a, &b, &c}) {
      set_random_seed(5);
      e->run(plain.startup);
    }
    for (int step = 0; step < 5; ++step) {
      INFO("step " << step);
      const Tensor la = a.run(plain.main, plain.feeds, {plain.loss})[0];
      CHECK(same_bits(b.run(fused.main, fused.feeds, {fused.loss})[0], la));
      CHECK(same_bits(c.run(loaded, fused.feeds, {loaded_loss})[0], la));
    }
    for (const auto& [name, p] : plain.main.parameters()) {  // the running statistics too
      INFO(name);
      CHECK(same_bits(b.scope().find_var(name)->get<Tensor>(), a.scope().find_var(name)->get<Tensor>()));
    }
  }
}

namespace {

// The default passes over `main` as an Executor on cuda:0 runs them, `loss`
// live out; `main` then verifies.
void run_default_passes_for_cuda(Program& main, Value loss) {
  PassContext ctx;
  ctx.target_place = Place::cuda(0);
  ctx.add_live_out(loss);
  PassManager::parse(kDefaultPasses).run(main, ctx);
  main.verify();
}

}  // namespace

// Checked without a device: the kernels are registered in any build with CUDA.
TEST_CASE("for a CUDA target a training program's batch norms fuse with their relu or relu6 and their "
          "gradients, and every op after the default passes has a CUDA kernel",
          "[passes][fusion]") {
  if (!built_with_cuda()) return;  // no CUDA kernels registered to look at
  BatchNormNet net;
  run_default_passes_for_cuda(net.main, net.loss);
  CHECK(count_top_ops(net.main, "kiln.fused_batch_norm") == 2);
  CHECK(count_top_ops(net.main, "kiln.fused_batch_norm_grad") == 2);
  for (const char* gone : {"kiln.batch_norm", "kiln.batch_norm_grad", "kiln.relu", "kiln.relu_", "kiln.relu_grad",
                           "kiln.clip", "kiln.clip_grad"})
    CHECK(count_top_ops(net.main, gone) == 0);
  CHECK(kiln_test::ops_without_cuda_kernels(net.main) == std::vector<std::string>{});
}

namespace {

// Linear, relu6 as a clip to [0, 6] that follows no batch norm, Linear,
// cross entropy, Momentum.
struct Relu6Mlp {
  Program main, startup;
  Value loss;
  Relu6Mlp() {
    UniqueNameGuard names;
    ProgramGuard guard(main, startup);
    Value x = data("x", {8, 16});
    Value label = data("label", {8}, DataType::Int64);
    Value h = main_builder().create<ClipOp>(nn::Linear(16, 32)(x), 0.0, 6.0).result();
    loss = nn::functional::cross_entropy(nn::Linear(32, 5)(h), label);
    optim::Momentum(0.05, 0.9).minimize(loss);
  }
};

}  // namespace

// Checked without a device: the kernels are registered in any build with CUDA.
TEST_CASE("for a CUDA target a training program's relu6 that follows no batch norm stays a clip and a "
          "clip_grad after the default passes, and every op has a CUDA kernel",
          "[passes][fusion]") {
  if (!built_with_cuda()) return;  // no CUDA kernels registered to look at
  Relu6Mlp net;
  run_default_passes_for_cuda(net.main, net.loss);
  CHECK(count_top_ops(net.main, "kiln.clip") == 1);
  CHECK(count_top_ops(net.main, "kiln.clip_grad") == 1);
  CHECK(kiln_test::ops_without_cuda_kernels(net.main) == std::vector<std::string>{});
}

namespace {

// batch_norm (x [2, 3, 4, 4]) then `act` ("relu" or "relu6"), and, with
// `grads`, the activation's gradient and batch_norm_grad of it.
struct BatchNormBlock {
  Program p;
  Operation *bn = nullptr, *act = nullptr, *act_grad = nullptr, *grad = nullptr;
  BatchNormBlock(const std::string& activation, bool grads, bool is_test = false) {
    Builder b(p);
    auto in = [&](const char* name, std::vector<std::int64_t> dims) { return b.create<DataOp>(name, dims).result(); };
    Value x = in("x", {2, 3, 4, 4}), scale = in("scale", {3}), bias = in("bias", {3});
    bn = b.create<BatchNormOp>(x, scale, bias, in("mean", {3}), in("var", {3}), 0.9, 1e-5, is_test).operation();
    Value y = bn->result(0);
    act = activation == "relu" ? b.create<ReluOp>(y).operation() : b.create<ClipOp>(y, 0.0, 6.0).operation();
    if (!grads) return;
    Value dr = in("dr", {2, 3, 4, 4});
    act_grad = activation == "relu" ? b.create<GradOf<ReluOp>>(act, act->result(0), dr).operation()
                                    : b.create<GradOf<ClipOp>>(act, y, dr).operation();
    grad = b.create<GradOf<BatchNormOp>>(bn, x, scale, bn->result(3), bn->result(4), act_grad->result(0)).operation();
  }
};

}  // namespace

TEST_CASE("a batch norm whose y is kept or read elsewhere stays; a relu whose gradient cannot fuse fuses "
          "forward only, a clip (whose gradient reads y) not at all",
          "[passes][fusion]") {
  for (const std::string act : {"relu", "relu6"}) {
    INFO(act);
    BatchNormBlock kept(act, true);
    CHECK(fuse_batch_norm_activation(kept.p.block(), {kept.bn->result(0).impl()}) == 0);
    BatchNormBlock read(act, false);
    Builder(read.p.block()).create<AddOp>(read.bn->result(0), read.bn->result(0));
    CHECK(fuse_batch_norm_activation(read.p.block(), {}) == 0);
    BatchNormBlock inference(act, false, true);
    CHECK(fuse_batch_norm_activation(inference.p.block(), {}) == 1);
    CHECK(count_top_ops(inference.p, "kiln.fused_batch_norm") == 1);
    BatchNormBlock dz_kept(act, true);  // the activation's gradient fetched
    CHECK(fuse_batch_norm_activation(dz_kept.p.block(), {dz_kept.act_grad->result(0).impl()}) ==
          (act == "relu" ? 1u : 0u));
    dz_kept.p.verify();
    CHECK(count_top_ops(dz_kept.p, "kiln.batch_norm_grad") == 1);
    CHECK(count_top_ops(dz_kept.p, "kiln.fused_batch_norm") == (act == "relu" ? 1u : 0u));
  }
}

namespace {

using Dims4 = std::vector<std::int64_t>;

// A squeeze-and-excitation block's end as the fuse pass finds it after
// channels_last: x [2, hw, hw, 8] (NHWC) times factors s of dims `s_dims`,
// the product read by a pointwise NHWC fused_conv2d to `o` channels with a
// SiLU (and a residual when asked).
struct ScaledProjection {
  Program p;
  Value product, out;
  FeedMap feeds;
  struct Shape {
    std::int64_t hw = 9, o = 6, k = 1;
    Dims4 s_dims{2, 1, 1, 8};
    bool swapped = false, residual = false, trained = false;
    std::string data_format = "NHWC";
  };
  explicit ScaledProjection(const Shape& s) {
    Builder b(p);
    const bool nhwc = s.data_format == "NHWC";
    const Dims4 xd = nhwc ? Dims4{2, s.hw, s.hw, 8} : Dims4{2, 8, s.hw, s.hw};
    Value x = b.create<DataOp>("x", xd).result(), f = b.create<DataOp>("s", s.s_dims).result();
    Value w = b.create<DataOp>("w", Dims4{s.o, 8, s.k, s.k}).result(), bias = b.create<DataOp>("b", Dims4{s.o}).result();
    product = s.swapped ? b.create<MulOp>(f, x).result() : b.create<MulOp>(x, f).result();
    const Dims4 od = nhwc ? Dims4{2, s.hw, s.hw, s.o} : Dims4{2, s.o, s.hw, s.hw};
    Value r = s.residual ? b.create<DataOp>("r", od).result() : Value();
    out = b.create<FusedConv2dOp>(product, w, bias, Dims4{1, 1}, Dims4{s.k / 2, s.k / 2}, Dims4{1, 1}, 1, "silu",
                                  s.data_format, r, s.trained)
              .result();
    feeds = {{"x", pattern_f32(xd, 0.25f, 1)}, {"s", pattern_f32(s.s_dims, 0.1f, 2)},
             {"w", pattern_f32({s.o, 8, s.k, s.k}, 0.125f, 3)}, {"b", pattern_f32({s.o}, 0.5f, 4)}};
    if (s.residual) feeds["r"] = pattern_f32(od, 0.5f, 5);
  }
  Tensor run() {
    Executor exe(Place::cpu(), {.passes = ""});
    return exe.run(p, feeds, {last_result(p)})[0];
  }
};

}  // namespace

TEST_CASE("a pointwise NHWC conv that alone reads x times per-channel factors becomes one "
          "channel_scaled_conv2d, within f32's rounding of the unfused result",
          "[passes][fusion]") {
  using S = ScaledProjection::Shape;
  for (const S& s : {S{}, S{.s_dims = {1, 1, 1, 8}}, S{.swapped = true}, S{.residual = true}}) {
    INFO("factors " << Dims(s.s_dims).to_string() << (s.swapped ? ", s · x" : "") << (s.residual ? ", residual" : ""));
    ScaledProjection plain(s), fused(s);
    CHECK(fuse_conv_input_scale(fused.p.block(), {}) == 1);
    fused.p.verify();
    CHECK(count_top_ops(fused.p, "kiln.mul") == 0);
    CHECK(count_top_ops(fused.p, "kiln.fused_conv2d") == 0);
    Operation* op = last_result(fused.p).defining_op();
    REQUIRE(op->isa<ChannelScaledConv2dOp>());
    CHECK(op->num_operands() == (s.residual ? 5u : 4u));
    CHECK(ChannelScaledConv2dOp(op).attrs().activation == "silu");
    const auto want = plain.run().to_vector<float>(), got = fused.run().to_vector<float>();
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(1e-5).margin(1e-5));
    // It saves and prints like any op, and loads back to the same program.
    const Program loaded = load_program_json(save_program_json(fused.p));
    CHECK(loaded.to_string() == fused.p.to_string());
    CHECK(parse_program(fused.p.to_string()).to_string() == fused.p.to_string());
  }
}

TEST_CASE("a scaled x is not fused into its conv where the kernel would not fold the factors into the weights, "
          "the weights are trained, the product is kept or read again, or the factors are not per channel",
          "[passes][fusion]") {
  using S = ScaledProjection::Shape;
  for (const S& s : {S{.hw = 4},  // 16 pixels an image < 4 x 6 outputs: the mul's own pass is as fast
                     S{.k = 3}, S{.s_dims = {2, 8, 1, 1}, .data_format = "NCHW"}, S{.trained = true},
                     S{.s_dims = {2, 9, 9, 8}}, S{.s_dims = {2, 1, 9, 8}}}) {
    INFO("hw " << s.hw << " k " << s.k << " " << s.data_format << " factors " << Dims(s.s_dims).to_string()
               << (s.trained ? ", trained" : ""));
    ScaledProjection c(s);
    CHECK(fuse_conv_input_scale(c.p.block(), {}) == 0);
  }
  ScaledProjection kept(S{});
  CHECK(fuse_conv_input_scale(kept.p.block(), {kept.product.impl()}) == 0);
  ScaledProjection twice(S{});
  Builder b(twice.p);
  b.create<ReluOp>(twice.product);
  CHECK(fuse_conv_input_scale(twice.p.block(), {}) == 0);
}

TEST_CASE("the fuse pass gives a squeeze-and-excitation block built in NCHW one fused_conv2d_mean and one "
          "channel_scaled_conv2d where the CPU prefers NHWC, with the unfused result",
          "[passes][fusion]") {
  struct SqueezeExcitation {
    Program p;
    Value out;
    SqueezeExcitation() {
      Builder b(p);
      auto conv = [&](Value x, std::int64_t in, std::int64_t o, std::int64_t k, const std::string& name, bool silu) {
        Value w = b.create<DataOp>(name + ".w", Dims4{o, in, k, k}).result();
        Value bias = b.create<DataOp>(name + ".b", Dims4{o}).result();
        Value y = b.create<Conv2dOp>(x, w, Dims4{1, 1}, Dims4{k / 2, k / 2}).result();
        y = b.create<AddOp>(y, b.create<ReshapeOp>(bias, Dims4{1, o, 1, 1}).result()).result();
        return silu ? b.create<MulOp>(y, b.create<SigmoidOp>(y).result()).result() : y;
      };
      Value x = b.create<DataOp>("x", Dims4{2, 3, 12, 12}).result();
      Value y = conv(x, 3, 8, 3, "stem", true);
      Value squeezed = conv(b.create<MeanOp>(y, Dims4{2, 3}, true).result(), 8, 2, 1, "squeeze", true);
      Value gate = b.create<SigmoidOp>(conv(squeezed, 2, 8, 1, "excite", false)).result();
      Value projected = conv(b.create<MulOp>(y, gate).result(), 8, 4, 1, "project", false);
      out = conv(projected, 4, 4, 3, "head", true);
    }
  };
  SqueezeExcitation plain, fused;
  FeedMap feeds{{"x", pattern_f32({2, 3, 12, 12}, 0.25f, 1)}};
  for (const auto& [name, dims] : std::vector<std::pair<std::string, Dims4>>{
           {"stem.w", {8, 3, 3, 3}}, {"squeeze.w", {2, 8, 1, 1}}, {"excite.w", {8, 2, 1, 1}},
           {"project.w", {4, 8, 1, 1}}, {"head.w", {4, 4, 3, 3}}}) {
    feeds[name] = pattern_f32(dims, 0.0625f, int(feeds.size()));
    feeds[name.substr(0, name.size() - 1) + "b"] = pattern_f32({dims[0]}, 0.25f, int(feeds.size()));
  }
  Executor none(Place::cpu(), {.passes = ""});
  const Tensor want = none.run(plain.p, feeds, {plain.out})[0];
  PassContext ctx({fused.out});
  PassManager::parse("fuse").run(fused.p, ctx);
  fused.p.verify();
  const std::size_t nhwc = cpu_convolutions_prefer_channels_last() ? 1 : 0;
  CHECK(count_top_ops(fused.p, "kiln.channel_scaled_conv2d") == nhwc);
  CHECK(count_top_ops(fused.p, "kiln.fused_conv2d_mean") == nhwc);  // the stem and the squeeze's mean
  CHECK(count_top_ops(fused.p, "kiln.mean") == 1 - nhwc);
  const auto got = none.run(fused.p, feeds, {ctx.live_out()[0]})[0].to_vector<float>();
  const auto w = want.to_vector<float>();
  REQUIRE(got.size() == w.size());
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(w[i]).epsilon(1e-5).margin(1e-5));
}

namespace {

// An inverted residual block as an importer writes it, in NCHW, over two
// hw x hw images: a 1x1 expansion of 8 channels to `e` (bias, clip to [0,
// 6]), a 3x3 depthwise convolution (bias, clip), a 1x1 projection back to 8
// channels. 128 x 128 x 64 floats: 4 MiB an image expanded.
struct InvertedResidual {
  struct Shape {
    std::int64_t e = 64, stride = 1, hw = 128;
  };
  Program p;
  Value expanded, out;
  FeedMap feeds;
  explicit InvertedResidual(Shape s) {
    Builder b(p);
    auto conv = [&](Value x, std::int64_t in, std::int64_t o, std::int64_t k, std::int64_t stride,
                    std::int64_t groups, const std::string& name, bool relu6) {
      Value w = b.create<DataOp>(name + ".w", Dims4{o, in / groups, k, k}).result();
      Value bias = b.create<DataOp>(name + ".b", Dims4{o}).result();
      feeds[name + ".w"] = pattern_f32({o, in / groups, k, k}, 0.0625f, int(feeds.size()));
      feeds[name + ".b"] = pattern_f32({o}, 0.25f, int(feeds.size()));
      Value y = b.create<Conv2dOp>(x, w, Dims4{stride, stride}, Dims4{k / 2, k / 2}, Dims4{1, 1}, groups).result();
      y = b.create<AddOp>(y, b.create<ReshapeOp>(bias, Dims4{1, o, 1, 1}).result()).result();
      return relu6 ? b.create<ClipOp>(y, 0.0, 6.0).result() : y;
    };
    Value x = b.create<DataOp>("x", Dims4{2, 8, s.hw, s.hw}).result();
    feeds["x"] = pattern_f32({2, 8, s.hw, s.hw}, 0.25f, 99);
    expanded = conv(x, 8, s.e, 1, 1, 1, "expand", true);
    out = conv(conv(expanded, s.e, s.e, 3, s.stride, s.e, "depthwise", true), s.e, 8, 1, 1, 1, "project", false);
  }
  // The "fuse" pass, `also_kept` kept beside the result; the fused ops it made.
  std::size_t fuse(std::vector<Value> also_kept = {}) {
    also_kept.insert(also_kept.begin(), out);
    PassContext ctx(also_kept);
    PassManager::parse("fuse").run(p, ctx);
    p.verify();
    out = ctx.live_out()[0];
    return count_top_ops(p, "kiln.pointwise_depthwise_conv2d");
  }
  Tensor run() {
    Executor exe(Place::cpu(), {.passes = ""});
    return exe.run(p, feeds, {out})[0];
  }
};

// Whether the fuse pass makes an expansion of 8 channels to e and a 3x3
// depthwise convolution over hw x hw images one op on this CPU.
bool fuses_here(std::int64_t e, std::int64_t stride, std::int64_t hw) {
  const Conv2dGeometry g1 =
      conv::geometry("test", Dims{1, 8, hw, hw}, Dims{e, 8, 1, 1}, Dims4{1, 1}, Dims4{0, 0}, Dims4{1, 1}, 1);
  const Conv2dGeometry g2 =
      conv::geometry("test", Dims{1, e, hw, hw}, Dims{e, 1, 3, 3}, Dims4{stride, stride}, Dims4{1, 1}, Dims4{1, 1}, e);
  return cpu_convolutions_prefer_channels_last() && cpu_fuses_pointwise_depthwise(g1, g2);
}

}  // namespace

TEST_CASE("the fuse pass gives an inverted residual block's expansion and depthwise convolution one "
          "pointwise_depthwise_conv2d where the CPU computes them in one pass, within f32's rounding of the "
          "unfused result, and it saves, prints and exports",
          "[passes][fusion]") {
  for (const std::int64_t stride : {1, 2}) {
    INFO("stride " << stride);
    InvertedResidual plain({.stride = stride}), fused({.stride = stride});
    const Tensor want = plain.run();
    const bool here = fuses_here(64, stride, 128);
    REQUIRE(fused.fuse() == (here ? 1u : 0u));
    if (!here) continue;
    Operation* op = nullptr;
    for (Operation* o : fused.p.block())
      if (o->isa<PointwiseDepthwiseConv2dOp>()) op = o;
    REQUIRE(op != nullptr);
    const auto a = PointwiseDepthwiseConv2dOp(op).attrs();
    CHECK(a.pointwise_activation == "relu6");
    CHECK(a.activation == "relu6");
    CHECK(a.strides == std::vector<std::int64_t>{stride, stride});
    CHECK(count_top_ops(fused.p, "kiln.fused_conv2d") == 1);  // the projection
    const auto w = want.to_vector<float>(), got = fused.run().to_vector<float>();
    REQUIRE(got.size() == w.size());
    for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(w[i]).epsilon(1e-5).margin(1e-5));
    const Program loaded = load_program_json(save_program_json(fused.p));
    CHECK(loaded.to_string() == fused.p.to_string());
    CHECK(parse_program(fused.p.to_string()).to_string() == fused.p.to_string());
  }
}

TEST_CASE("an expansion is not fused into its depthwise convolution where its result is kept or read again, the "
          "CPU would run the two convolutions anyway, or its images stay in cache between them",
          "[passes][fusion]") {
  InvertedResidual kept({});
  CHECK(kept.fuse({kept.expanded}) == 0);
  InvertedResidual twice({});
  Builder b(twice.p);
  twice.out = b.create<AddOp>(twice.out, b.create<SumOp>(twice.expanded, std::vector<std::int64_t>{0, 1, 2, 3}).result()).result();
  CHECK(twice.fuse() == 0);
  InvertedResidual narrow({.e = 24});  // not a multiple of 16 channels
  CHECK(narrow.fuse() == 0);
  InvertedResidual small({.hw = 40});  // 400 KB an image expanded: it stays in a cache between the two
  CHECK(!fuses_here(64, 1, 40));
  CHECK(small.fuse() == 0);
}

TEST_CASE("channel_scaled_conv2d names factors whose dims at run time fit neither x's images nor its channels",
          "[passes][fusion]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", Dims4{-1, 5, 5, 4}).result(), s = b.create<DataOp>("s", Dims4{-1, 1, 1, 4}).result();
  Value w = b.create<DataOp>("w", Dims4{3, 4, 1, 1}).result(), bias = b.create<DataOp>("b", Dims4{3}).result();
  Value y = b.create<ChannelScaledConv2dOp>(x, s, w, bias,
                                            FusedConv2dOp::Attributes{Dims4{1, 1}, Dims4{0, 0}, Dims4{1, 1}, 1, "none",
                                                                      "NHWC", false})
                .result();
  Executor exe(Place::cpu(), {.passes = ""});
  const FeedMap feeds{{"x", pattern_f32({2, 5, 5, 4}, 1, 1)}, {"s", pattern_f32({3, 1, 1, 4}, 1, 2)},
                      {"w", pattern_f32({3, 4, 1, 1}, 1, 3)}, {"b", pattern_f32({3}, 1, 4)}};
  KILN_CHECK_ERROR(exe.run(p, feeds, {y}), InvalidArgument,
                   {"kiln.channel_scaled_conv2d", "scale is [3x1x1x4]", "needs [Nx1x1xC] with N = 2 or 1, C = 4"});
}

namespace {

// An NHWC depthwise fused_conv2d (silu) over x [2, hw, hw, 8] and the mean
// of its result over `axes`, both read by a product (the squeeze and the
// activation it gates, as in a squeeze-and-excitation block; a relu of the
// result where the mean drops its axes).
struct PooledConv {
  Program p;
  Value y, mean, out;
  struct Shape {
    std::int64_t hw = 9;
    Dims4 axes{1, 2};
    bool keepdim = true, trained = false;
  };
  explicit PooledConv(const Shape& s) {
    Builder b(p);
    Value x = b.create<DataOp>("x", Dims4{2, s.hw, s.hw, 8}).result();
    Value w = b.create<DataOp>("w", Dims4{8, 1, 3, 3}).result(), bias = b.create<DataOp>("b", Dims4{8}).result();
    y = b.create<FusedConv2dOp>(x, w, bias, Dims4{1, 1}, Dims4{1, 1}, Dims4{1, 1}, 8, "silu", "NHWC", Value(),
                                s.trained)
            .result();
    mean = b.create<MeanOp>(y, s.axes, s.keepdim).result();
    out = s.keepdim ? b.create<MulOp>(y, mean).result() : b.create<ReluOp>(y).result();
  }
  std::vector<Tensor> run(const std::vector<Value>& fetch) {
    Executor exe(Place::cpu(), {.passes = ""});
    return exe.run(p, {{"x", pattern_f32({2, 9, 9, 8}, 0.25f, 1)}, {"w", pattern_f32({8, 1, 3, 3}, 0.125f, 2)},
                       {"b", pattern_f32({8}, 0.5f, 3)}},
                   std::vector<FetchTarget>(fetch.begin(), fetch.end()));
  }
};

}  // namespace

TEST_CASE("an NHWC conv's mean over its pixels becomes fused_conv2d_mean's second result, with the unfused bits",
          "[passes][fusion]") {
  for (const Dims4& axes : {Dims4{1, 2}, Dims4{-3, -2}}) {
    INFO("axes " << Dims(axes).to_string());
    PooledConv plain({.axes = axes}), fused({.axes = axes});
    PassContext ctx({fused.out, fused.mean});
    CHECK(fuse_conv_channel_mean(fused.p.block(), {}, &ctx) == 1);
    fused.p.verify();
    CHECK(count_top_ops(fused.p, "kiln.mean") == 0);
    CHECK(count_top_ops(fused.p, "kiln.fused_conv2d") == 0);
    const auto want = plain.run({plain.out, plain.mean});
    const auto got = fused.run({ctx.live_out()[0], ctx.live_out()[1]});
    CHECK(same_bits(got[0], want[0]));
    CHECK(same_bits(got[1], want[1]));
    // Both results save and print like any op's, and load back.
    CHECK(load_program_json(save_program_json(fused.p)).to_string() == fused.p.to_string());
    CHECK(parse_program(fused.p.to_string()).to_string() == fused.p.to_string());
  }
}

TEST_CASE("a mean that drops its axes or spans other axes, of a trained conv's result, or over one pixel, stays "
          "a kiln.mean",
          "[passes][fusion]") {
  using S = PooledConv::Shape;
  for (const S& s : {S{.keepdim = false}, S{.axes = {2}}, S{.axes = {1, 2, 3}}, S{.trained = true}, S{.hw = 1}}) {
    INFO("hw " << s.hw << " axes " << Dims(s.axes).to_string() << (s.keepdim ? "" : ", dropped")
               << (s.trained ? ", trained" : ""));
    PooledConv c(s);
    CHECK(fuse_conv_channel_mean(c.p.block(), {}) == 0);
  }
}

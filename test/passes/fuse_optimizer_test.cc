// fuse_optimizer_updates (kiln/passes/fuse_optimizer.h) and the merged
// update ops (kiln/dialect/merged_optimizer_ops.h): which updates merge,
// which stay (a reader between, another rate or attributes), the merged
// op's alias pairs, errors and text form — and that training with merged
// updates gives the parameters the unmerged updates gave, bit for bit.
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "catch.hpp"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/dialect/merged_optimizer_ops.h"
#include "kiln/exec/executor.h"
#include "kiln/exec/interpreter_core.h"
#include "kiln/frontend/frontend.h"
#include "kiln/frontend/optimizer.h"
#include "kiln/ir/inplace_pairs.h"
#include "kiln/ir/parser.h"
#include "kiln/kernel/random.h"
#include "kiln/passes/fuse_optimizer.h"
#include "passes_test_util.h"

using namespace kiln;
using kiln_test::same_bits;
using kiln_passes_test::count_ops;
using kiln_passes_test::with_passes;
using kiln_passes_test::f32;

namespace {

using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>()>;

// A 12-16-16-4 MLP (tanh, cross entropy; 6 parameters), batch 10, trained
// by the optimizer `make` builds, as a user writes it.
struct OptimizedModel {
  Program main, startup;
  Value loss;
  FeedMap feeds;
  explicit OptimizedModel(const MakeOptimizer& make) {
    UniqueNameGuard names;
    {
      ProgramGuard guard(main, startup);
      Value x = data("x", {-1, 12});
      nn::Linear fc1(12, 16), fc2(16, 16), fc3(16, 4);
      nn::Tanh tanh;
      Value logits = fc3(tanh(fc2(tanh(fc1(x)))));
      Value label = data("label", {-1}, DataType::Int64);
      loss = nn::CrossEntropyLoss()(logits, label);
      make()->minimize(loss);
    }
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.f, 1.f);
    std::vector<float> xs(10 * 12);
    std::vector<std::int64_t> ys(10);
    for (float& v : xs) v = normal(rng);
    for (std::size_t i = 0; i < ys.size(); ++i) ys[i] = static_cast<std::int64_t>(i % 4);
    feeds = {{"x", Tensor::from_vector<float>({10, 12}, xs)},
             {"label", Tensor::from_vector<std::int64_t>({10}, ys)}};
  }
};

// Trains one model with no passes and one with `passes` for `steps` steps
// from the same start; every loss and, at the end, every parameter and
// optimizer state (all persistable values) bit for bit the same.
void require_same_training(const MakeOptimizer& make, const char* passes, int steps) {
  OptimizedModel plain(make), merged(make);
  Executor a(Place::cpu(), with_passes("")), b(Place::cpu(), with_passes(passes));
  set_random_seed(11);
  a.run(plain.startup);
  set_random_seed(11);
  b.run(merged.startup);
  for (int step = 0; step < steps; ++step) {
    const Tensor la = a.run(plain.main, plain.feeds, {plain.loss})[0];
    const Tensor lb = b.run(merged.main, merged.feeds, {merged.loss})[0];
    INFO("step " << step);
    REQUIRE(same_bits(la, lb));
  }
  // The run with the pass ran one merged update instead of six.
  if (std::string_view(passes) == "fuse_optimizer")
    CHECK(b.last_core()->num_instructions() + 5 == a.last_core()->num_instructions());
  REQUIRE(plain.main.parameters().size() >= 6);
  for (const auto& [name, p] : plain.main.parameters()) {
    INFO(name);
    CHECK(same_bits(a.scope().find_var(name)->get<Tensor>(), b.scope().find_var(name)->get<Tensor>()));
  }
}

// The pass over a clone of the model's main program: the single updates
// of `single` all go into one `merged`.
void require_all_merged(const MakeOptimizer& make, std::string_view single, std::string_view merged) {
  OptimizedModel m(make);
  const std::size_t n = count_ops(m.main, single);
  REQUIRE(n == 6);
  CHECK(fuse_optimizer_updates(m.main) == 1);
  m.main.verify();
  CHECK(count_ops(m.main, single) == 0);
  CHECK(count_ops(m.main, merged) == 1);
}

}  // namespace

TEST_CASE("SGD, momentum, Adam and AdamW updates of one optimizer merge into one op and train bit for bit",
          "[passes][fuse_optimizer]") {
  struct Case {
    const char* name;
    MakeOptimizer make;
    std::string_view single, merged;
  };
  const std::vector<Case> cases{
      {"sgd", [] { return std::make_unique<optim::SGD>(0.1); }, "kiln.sgd_", "kiln.merged_sgd_"},
      {"momentum", [] { return std::make_unique<optim::Momentum>(0.05, 0.9); }, "kiln.momentum_",
       "kiln.merged_momentum_"},
      {"nesterov", [] { return std::make_unique<optim::Momentum>(0.05, 0.8, true); }, "kiln.momentum_",
       "kiln.merged_momentum_"},
      {"adam", [] { return std::make_unique<optim::Adam>(1e-2); }, "kiln.adam_", "kiln.merged_adam_"},
      {"adamw", [] { return std::make_unique<optim::AdamW>(1e-2, 0.9, 0.99, 1e-8, 0.05); }, "kiln.adamw_",
       "kiln.merged_adamw_"},
      // A scheduled rate: one value the schedule's ops compute each step.
      {"adamw_scheduled",
       [] { return std::make_unique<optim::AdamW>(lr::CosineWithWarmup(1e-2, 2, 6, 1e-3)); },
       "kiln.adamw_", "kiln.merged_adamw_"},
  };
  for (const Case& c : cases) {
    SECTION(c.name) {
      require_all_merged(c.make, c.single, c.merged);
      // The pass alone, and the default pipeline (whose "fuse" runs it).
      require_same_training(c.make, "fuse_optimizer", 6);
      require_same_training(c.make, kDefaultPasses, 6);
    }
  }
}

namespace {

// param_i, grad_i (f32 [n_i]) and a learning rate, as program values.
struct Updates {
  Program p;
  Builder b{p};
  Value lr = b.create<DataOp>("lr", std::vector<std::int64_t>{1}).result();
  Value lr2 = b.create<DataOp>("lr2", std::vector<std::int64_t>{1}).result();
  std::vector<Value> params, grads;
  Updates() {
    for (int i = 0; i < 4; ++i) {
      params.push_back(b.create<ParameterOp>("w" + std::to_string(i), f32({3 + i})).result());
      grads.push_back(b.create<DataOp>("g" + std::to_string(i), std::vector<std::int64_t>{3 + i}).result());
    }
  }
  Operation* sgd(int i, Value rate) { return b.create<Sgd_Op>(params[i], grads[i], rate).operation(); }
};

// The merged op's parameters' names, in its operand order.
std::vector<std::string> merged_params(const Program& p, std::string_view name) {
  for (Operation* op : p.block())
    if (op->name() == name) {
      std::vector<std::string> out;
      for (std::uint32_t i = 1; i < op->num_operands(); i += 2)
        out.push_back(op->operand_source(i).defining_op()->dyn_cast<ParameterOp>().attrs().parameter_name);
      return out;
    }
  return {};
}

}  // namespace

TEST_CASE("an update whose parameter is read before the group's last update stays where it is",
          "[passes][fuse_optimizer]") {
  Updates u;
  u.sgd(0, u.lr);
  // A reader of w0's variable (another builtin.parameter value of it)
  // between: w0's update may not move past it.
  Value w0 = u.b.create<ParameterOp>("w0", f32({3})).result();
  Value m = u.b.create<MeanOp>(w0).result();
  u.sgd(1, u.lr);
  u.sgd(2, u.lr);
  u.b.create<FetchOp>(m, "m");
  REQUIRE(fuse_optimizer_updates(u.p) == 1);
  u.p.verify();
  CHECK(count_ops(u.p, "kiln.sgd_") == 1);
  CHECK(merged_params(u.p, "kiln.merged_sgd_") == std::vector<std::string>{"w1", "w2"});
  // DCE keeps it, though nothing reads its results: it writes parameters
  // (its written operands come from its per-operation alias pairs).
  kiln_passes_test::run_pipeline(u.p, "dce");
  CHECK(count_ops(u.p, "kiln.merged_sgd_") == 1);
  // The merged op took the last update's place: after the mean.
  bool seen_mean = false;
  for (Operation* op : u.p.block()) {
    seen_mean = seen_mean || op->name() == "kiln.mean";
    if (op->name() == "kiln.merged_sgd_") CHECK(seen_mean);
  }
}

TEST_CASE("updates with another learning rate, other attributes or a gradient written between stay apart",
          "[passes][fuse_optimizer]") {
  SECTION("learning rates") {
    Updates u;
    u.sgd(0, u.lr);
    u.sgd(1, u.lr2);
    u.sgd(2, u.lr);
    u.sgd(3, u.lr2);
    CHECK(fuse_optimizer_updates(u.p) == 2);
    CHECK(merged_params(u.p, "kiln.merged_sgd_") == std::vector<std::string>{"w0", "w2"});
  }
  SECTION("attributes") {
    Updates u;
    std::vector<Value> vel;
    for (int i = 0; i < 3; ++i) vel.push_back(u.b.create<ParameterOp>("v" + std::to_string(i), f32({3 + i})).result());
    u.b.create<Momentum_Op>(u.params[0], u.grads[0], vel[0], u.lr, 0.9, false);
    u.b.create<Momentum_Op>(u.params[1], u.grads[1], vel[1], u.lr, 0.8, false);
    u.b.create<Momentum_Op>(u.params[2], u.grads[2], vel[2], u.lr, 0.9, true);
    CHECK(fuse_optimizer_updates(u.p) == 0);
    CHECK(count_ops(u.p, "kiln.momentum_") == 3);
  }
  SECTION("a parameter set between, by name") {
    Updates u;
    u.sgd(0, u.lr);
    u.sgd(1, u.lr);
    u.b.create<SetParameterOp>(u.grads[0], "w0");  // w0's variable: its update stays
    u.sgd(2, u.lr);
    CHECK(fuse_optimizer_updates(u.p) == 1);
    CHECK(merged_params(u.p, "kiln.merged_sgd_") == std::vector<std::string>{"w1", "w2"});
  }
  SECTION("another kind of update between moves nothing and is passed") {
    Updates u;
    Value v3 = u.b.create<ParameterOp>("v3", f32({6})).result();
    u.sgd(0, u.lr);
    u.b.create<Momentum_Op>(u.params[3], u.grads[3], v3, u.lr, 0.9, false);
    u.sgd(1, u.lr);
    CHECK(fuse_optimizer_updates(u.p) == 1);
    CHECK(merged_params(u.p, "kiln.merged_sgd_") == std::vector<std::string>{"w0", "w1"});
    CHECK(count_ops(u.p, "kiln.momentum_") == 1);
  }
  SECTION("a gradient written in place between") {
    Updates u;
    u.sgd(0, u.lr);
    u.b.create<ScaleOp>(u.grads[0], 2.0, 0.0, true);  // a reader only: no effect
    u.b.create<Relu_Op>(u.grads[0]);                   // writes g0 in place: w0's update stays
    u.sgd(1, u.lr);
    u.sgd(2, u.lr);
    CHECK(fuse_optimizer_updates(u.p) == 1);
    CHECK(merged_params(u.p, "kiln.merged_sgd_") == std::vector<std::string>{"w1", "w2"});
  }
}

TEST_CASE("a group of more than 64 results becomes merged ops of even size, in order",
          "[passes][fuse_optimizer]") {
  // 70 sgd_ updates (one result each): two merged ops of 35.
  Program p;
  Builder b(p);
  Value lr = b.create<DataOp>("lr", std::vector<std::int64_t>{1}).result();
  for (int i = 0; i < 70; ++i) {
    Value w = b.create<ParameterOp>("w" + std::to_string(i), f32({2})).result();
    Value g = b.create<DataOp>("g" + std::to_string(i), std::vector<std::int64_t>{2}).result();
    b.create<Sgd_Op>(w, g, lr);
  }
  CHECK(fuse_optimizer_updates(p) == 2);
  p.verify();
  std::vector<std::string> order;
  for (Operation* op : p.block())
    if (op->name() == "kiln.merged_sgd_") {
      CHECK(op->num_results() == 35);
      for (std::uint32_t i = 1; i < op->num_operands(); i += 2)
        order.push_back(op->operand_source(i).defining_op()->dyn_cast<ParameterOp>().attrs().parameter_name);
    }
  REQUIRE(order.size() == 70);
  for (int i = 0; i < 70; ++i) CHECK(order[i] == "w" + std::to_string(i));
}

TEST_CASE("a merged op's alias pairs follow its operand count", "[passes][fuse_optimizer]") {
  Updates u;
  std::vector<Value> members;
  for (int i = 0; i < 2; ++i) {
    const auto t = f32({3 + i});
    members.insert(members.end(), {u.params[i], u.grads[i], u.b.create<ParameterOp>("m1_" + std::to_string(i), t).result(),
                                   u.b.create<ParameterOp>("m2_" + std::to_string(i), t).result(),
                                   u.b.create<ParameterOp>("b1_" + std::to_string(i), f32({1})).result(),
                                   u.b.create<ParameterOp>("b2_" + std::to_string(i), f32({1})).result()});
  }
  Operation* op = u.b.create<MergedAdam_Op>(u.lr, members, Adam_Op::Attributes{0.9, 0.999, 1e-8}).operation();
  REQUIRE(op->num_results() == 10);
  std::vector<AliasPair> pairs;
  for (auto pr : inplace_pairs(*op)) pairs.push_back(pr);
  // adam_'s {0,0},{1,3},{2,4},{3,5},{4,6} per parameter, the rate (#2) at #0.
  const std::vector<AliasPair> want{{0, 1}, {1, 3}, {2, 4}, {3, 5}, {4, 6},
                                    {5, 7}, {6, 9}, {7, 10}, {8, 11}, {9, 12}};
  CHECK(pairs == want);
  // A single op's pairs are its type's static map.
  Operation* s = u.sgd(0, u.lr);
  const InplacePairs sp = inplace_pairs(*s);
  REQUIRE(sp.size() == 1);
  CHECK(*sp.begin() == AliasPair{0, 0});
  u.p.verify();
}

TEST_CASE("a malformed merged op is refused, naming the op, the parameter and the operand",
          "[passes][fuse_optimizer]") {
  Updates u;
  // Operands not 1 + 2k.
  CHECK_THROWS_WITH(u.b.create<MergedSgd_Op>(u.lr, std::vector<Value>{u.params[0], u.grads[0], u.params[1]}),
                    Catch::Contains("kiln.merged_sgd_") && Catch::Contains("2 operands per parameter"));
  // The same in the text form: the parser runs InferMeta too.
  {
    Program p;
    Builder b(p);
    Value lr = b.create<DataOp>("lr", std::vector<std::int64_t>{1}).result();
    Value w = b.create<ParameterOp>("w", f32({3})).result();
    Value g = b.create<DataOp>("g", std::vector<std::int64_t>{3}).result();
    b.create<MergedSgd_Op>(lr, std::vector<Value>{w, g});
    std::string text = p.to_string();
    const std::size_t at = text.find("kiln.merged_sgd_(");
    REQUIRE(at != std::string::npos);
    INFO(text);
    // Drop the gradient: "(%0, %1, %2)" → "(%0, %1)" and its type.
    const std::size_t open = text.find('(', at), close = text.find(')', open);
    const std::string operands = text.substr(open, close - open + 1);
    const std::size_t last_comma = operands.rfind(',');
    text.replace(open, close - open + 1, operands.substr(0, last_comma) + ")");
    const std::size_t types = text.find('(', text.find(':', open));
    const std::size_t types_end = text.find(')', types);
    const std::string tl = text.substr(types, types_end - types + 1);
    text.replace(types, types_end - types + 1, tl.substr(0, tl.rfind(',')) + ")");
    CHECK_THROWS_WITH(parse_program(text), Catch::Contains("kiln.merged_sgd_") && Catch::Contains("got 2 operands"));
  }
  // Parameter #1's gradient has another shape.
  CHECK_THROWS_WITH(
      u.b.create<MergedSgd_Op>(u.lr, std::vector<Value>{u.params[0], u.grads[0], u.params[1], u.grads[2]}),
      Catch::Contains("op 'kiln.merged_sgd_' parameter #1 (operands #3..#4, learning rate #0)") &&
          Catch::Contains("'grad'") &&
          Catch::Contains("must have the shape of 'param'"));
  // The learning rate of another dtype.
  Value lr64 = u.b.create<DataOp>("lr64", std::vector<std::int64_t>{1}, DataType::Float64).result();
  CHECK_THROWS_WITH(u.b.create<MergedSgd_Op>(lr64, std::vector<Value>{u.params[0], u.grads[0]}),
                    Catch::Contains("kiln.merged_sgd_") && Catch::Contains("'learning_rate'"));
}

TEST_CASE("a program with merged updates prints, parses back and prints the same", "[passes][fuse_optimizer]") {
  OptimizedModel m([] { return std::make_unique<optim::AdamW>(1e-2); });
  REQUIRE(fuse_optimizer_updates(m.main) == 1);
  const std::string text = m.main.to_string();
  CHECK(text.find("kiln.merged_adamw_") != std::string::npos);
  Program q = parse_program(text);
  q.verify();
  CHECK(q.to_string() == text);
}

TEST_CASE("merged updates run in a program lowered to dataflow ops, bit for bit, past 64 results",
          "[passes][fuse_optimizer]") {
  // 7 layers (14 parameters, 70 adam_ results: two merged ops), and a loop
  // beside them that lower_to_dataflow turns into dataflow ops, so the run
  // goes through the frame plan.
  struct Deep {
    Program main, startup;
    Value loss, counter;
    FeedMap feeds;
    Deep() {
      UniqueNameGuard names;
      {
        ProgramGuard guard(main, startup);
        Value x = data("x", {4, 6});
        Value h = x;
        for (int i = 0; i < 7; ++i) h = nn::Tanh()(nn::Linear(6, 6)(h));
        loss = nn::MSELoss()(h, data("label", {4, 6}));
        optim::Adam(1e-2).minimize(loss);
        Value i0 = full({1}, 0.0, DataType::Int64);
        counter = while_loop([](const std::vector<Value>& v) { return less_than(v[0], 3); },
                             [](const std::vector<Value>& v) -> std::vector<Value> { return {increment(v[0])}; },
                             {i0})[0];
      }
      std::vector<float> xs(24), ys(24);
      for (int i = 0; i < 24; ++i) xs[i] = 0.1f * static_cast<float>(i % 7) - 0.3f, ys[i] = 0.05f * static_cast<float>(i % 5);
      feeds = {{"x", Tensor::from_vector<float>({4, 6}, xs)}, {"label", Tensor::from_vector<float>({4, 6}, ys)}};
    }
  };
  {
    Deep d;
    Program q = d.main.clone();
    kiln_passes_test::run_pipeline(q, "lower_to_dataflow,fuse_optimizer");
    CHECK(count_ops(q, "kiln.merged_adam_") == 2);
    CHECK(count_ops(q, "kiln.adam_") == 0);
    CHECK(count_ops(q, "kiln.while") == 0);
  }
  Deep plain, merged;
  Executor a(Place::cpu(), with_passes("")), b(Place::cpu(), with_passes("lower_to_dataflow,fuse_optimizer"));
  set_random_seed(3);
  a.run(plain.startup);
  set_random_seed(3);
  b.run(merged.startup);
  for (int step = 0; step < 4; ++step) {
    const auto ra = a.run(plain.main, plain.feeds, {plain.loss, plain.counter});
    const auto rb = b.run(merged.main, merged.feeds, {merged.loss, merged.counter});
    INFO("step " << step);
    REQUIRE(same_bits(ra[0], rb[0]));
    REQUIRE(same_bits(ra[1], rb[1]));
  }
  for (const auto& [name, p] : plain.main.parameters()) {
    INFO(name);
    CHECK(same_bits(a.scope().find_var(name)->get<Tensor>(), b.scope().find_var(name)->get<Tensor>()));
  }
}

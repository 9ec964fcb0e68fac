// Activation recompute (kiln/frontend/recompute.h): the backward reads
// clones of the forward's values between checkpoints, training gives the
// same bits as without, the live temporaries shrink, ops with effects are
// never run twice, and bad checkpoints are clear errors.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "frontend/frontend_test_util.h"
#include "kiln/exec/interpreter_core.h"
#include "kiln/exec/memory_plan.h"
#include "kiln/frontend/op_role.h"
#include "kiln/frontend/recompute.h"

using namespace kiln;
using kiln_test::same_bits;
using namespace kiln_frontend_test;

namespace {

// A training program (Adam on MSE) and the values a user would checkpoint.
struct Model {
  GuardedPrograms g;
  Value loss;
  std::vector<Value> checkpoints;
  FeedMap feed;
};


// x[256, 32] -> 4 x (Linear, GELU) -> Linear(64, 1), checkpointed at each
// GELU's output; `dropout` > 0 adds a dropout after the second GELU.
std::unique_ptr<Model> mlp(double dropout = 0) {
  auto m = std::make_unique<Model>();
  Value h = data("x", {256, 32});
  Value label = data("label", {256, 1});
  std::int64_t in = 32;
  for (int k = 0; k < 4; ++k) {
    h = nn::functional::gelu(nn::Linear(in, 64)(h));
    if (k == 1 && dropout > 0) h = nn::functional::dropout(h, dropout, true, 7);
    m->checkpoints.push_back(h);
    in = 64;
  }
  m->loss = nn::MSELoss()(nn::Linear(64, 1)(h), label);
  optim::Adam(1e-2).minimize(m->loss);
  m->feed = {{"x", normal_f32({256, 32}, 1)}, {"label", normal_f32({256, 1}, 2)}};
  return m;
}

// Three causal transformer blocks over x[4, 32, 64], checkpointed at
// their input and at each block's output.
std::unique_ptr<Model> transformer() {
  auto m = std::make_unique<Model>();
  Value h = data("x", {4, 32, 64});
  Value label = data("label", {4, 32, 64});
  m->checkpoints.push_back(h);
  for (int k = 0; k < 3; ++k) {
    h = nn::TransformerEncoderLayer(64, 4, 128, 0.0, "gelu")(h, true);
    m->checkpoints.push_back(h);
  }
  m->loss = nn::MSELoss()(h, label);
  optim::Adam(1e-3).minimize(m->loss);
  m->feed = {{"x", normal_f32({4, 32, 64}, 3)}, {"label", normal_f32({4, 32, 64}, 4)}};
  return m;
}

// Trains `plain` and `recomputed` (the same model built twice) from the same
// parameters for `steps` steps: every loss and, at the end, every
// parameter and optimizer state are the same bits. Returns the two runs'
// live temporaries (the memory plan's live-set minimum), plain first.
std::pair<std::size_t, std::size_t> train_side_by_side(Model& plain, Model& recomputed, int steps) {
  Executor a, b;
  a.run(plain.g.startup);
  b.run(recomputed.g.startup);
  copy_scope(a, b);
  for (int s = 0; s < steps; ++s) {
    INFO("step " << s);
    const Tensor la = a.run(plain.g.main, plain.feed, {plain.loss})[0];
    const Tensor lb = b.run(recomputed.g.main, recomputed.feed, {recomputed.loss})[0];
    CHECK(same_bits(la, lb));
  }
  for (const std::string& name : a.scope().local_var_names()) {
    INFO("variable " << name);
    const Variable* va = a.scope().find_var(name);
    const Variable* vb = b.scope().find_var(name);
    REQUIRE(vb);
    if (va->is<Tensor>()) CHECK(same_bits(va->get<Tensor>(), vb->get<Tensor>()));
  }
  REQUIRE(a.last_core()->memory_plan());
  REQUIRE(b.last_core()->memory_plan());
  return {a.last_core()->memory_plan()->temporaries_live_bytes,
          b.last_core()->memory_plan()->temporaries_live_bytes};
}

// How many values forward ops define that a backward op reads, other than
// the checkpoints, parameters and feeds (which stay alive anyway).
std::size_t forward_values_read_by_backward(const Program& p, const std::vector<Value>& checkpoints) {
  std::size_t n = 0;
  for (Operation* op : p.block()) {
    if (op_role(op) != OpRole::Forward || op->isa<ParameterOp>() || op->isa<DataOp>()) continue;
    for (std::uint32_t r = 0; r < op->num_results(); ++r) {
      Value v = op->result(r);
      if (std::find(checkpoints.begin(), checkpoints.end(), v) != checkpoints.end()) continue;
      for (OpOperand use : v.uses())
        if (op_role(use.owner()) == OpRole::Backward) {
          ++n;
          break;
        }
    }
  }
  return n;
}

}  // namespace

TEST_CASE("recompute: an MLP's backward reads clones between its checkpoints, trains to the same "
          "bits, and keeps fewer temporaries alive",
          "[frontend][recompute]") {
  auto plain = mlp();
  auto rec = mlp();
  const std::size_t ops_before = rec->g.main.num_ops();
  const std::size_t read_before = forward_values_read_by_backward(rec->g.main, rec->checkpoints);
  const RecomputeResult r = recompute(rec->g.main, rec->checkpoints);
  INFO(rec->g.main.to_string());
  rec->g.main.verify();
  CHECK(r.segments == 3);  // (gelu 1, gelu 2], (gelu 2, gelu 3], (gelu 3, gelu 4]
  CHECK(r.ops == 6);       // each segment's matmul and bias add (its GELU is the checkpoint)
  CHECK(rec->g.main.num_ops() == ops_before + r.ops);
  // The segments' activations reach the backward only through clones; what
  // is left is the first layer's and the head's (outside every segment).
  CHECK(forward_values_read_by_backward(rec->g.main, rec->checkpoints) + r.values == read_before);
  const auto [plain_bytes, rec_bytes] = train_side_by_side(*plain, *rec, 3);
  INFO("live temporaries: " << plain_bytes << " bytes plain, " << rec_bytes << " recomputed");
  CHECK(rec_bytes < plain_bytes);
}

TEST_CASE("recompute: transformer blocks checkpointed at their outputs train to the same bits",
          "[frontend][recompute]") {
  auto plain = transformer();
  auto rec = transformer();
  const RecomputeResult r = recompute(rec->g.main, rec->checkpoints);
  rec->g.main.verify();
  CHECK(r.segments == 3);  // each block
  CHECK(r.ops > 30);
  const auto [plain_bytes, rec_bytes] = train_side_by_side(*plain, *rec, 2);
  INFO("live temporaries: " << plain_bytes << " bytes plain, " << rec_bytes << " recomputed");
  CHECK(rec_bytes < plain_bytes);
}

TEST_CASE("recompute never runs an op with an effect twice: a dropout's mask is kept, not drawn again",
          "[frontend][recompute]") {
  auto m = mlp(0.5);
  const std::size_t dropouts = count_top_ops(m->g.main, "kiln.dropout");
  REQUIRE(dropouts == 1);
  const RecomputeResult r = recompute(m->g.main, m->checkpoints);
  CHECK(r.segments == 3);
  CHECK(count_top_ops(m->g.main, "kiln.dropout") == dropouts);
  auto plain = mlp(0.5);
  train_side_by_side(*plain, *m, 2);
}

TEST_CASE("recompute: bad checkpoints and programs without a backward are clear errors that change "
          "nothing",
          "[frontend][recompute]") {
  auto m = mlp();
  const std::string before = m->g.main.to_string();
  KILN_CHECK_ERROR(recompute(m->g.main, {m->checkpoints[0]}), InvalidArgument, {"at least two checkpoints"});
  KILN_CHECK_ERROR(recompute(m->g.main, {m->checkpoints[0], Value()}), InvalidArgument,
                   {"checkpoint #1", "null"});
  KILN_CHECK_ERROR(recompute(m->g.main, {m->checkpoints[0], m->checkpoints[0]}), InvalidArgument,
                   {"checkpoint #1", "given twice"});
  Value gradient;
  for (Operation* op : m->g.main.block())
    if (op_role(op) == OpRole::Backward && op->num_results()) gradient = op->result(0);
  KILN_CHECK_ERROR(recompute(m->g.main, {m->checkpoints[0], gradient}), InvalidArgument,
                   {"checkpoint #1", "not a result of a forward op"});
  CHECK(m->g.main.to_string() == before);
  GuardedPrograms inference;
  Value h = nn::functional::gelu(nn::Linear(4, 4)(data("x", {2, 4})));
  Value out = nn::functional::gelu(h);
  KILN_CHECK_ERROR(recompute(inference.main, {h, out}), InvalidArgument, {"no backward ops"});
}

TEST_CASE("recompute clones attention with dropout but not its random key: the recomputed forward drops the "
          "same probabilities and training gives the same bits",
          "[frontend][recompute][dropout]") {
  // Two attention blocks over x [2, 2, 16, 8] (BHLD), dropout 0.3 with
  // seeds, so that both programs draw the same keys.
  auto build = [] {
    auto m = std::make_unique<Model>();
    Value h = data("x", {2, 2, 16, 8});
    Value label = data("label", {2, 2, 16, 8});
    m->checkpoints.push_back(h);
    for (int k = 0; k < 2; ++k) {
      Value q = nn::Linear(8, 8)(h), kk = nn::Linear(8, 8)(h), v = nn::Linear(8, 8)(h);
      h = nn::functional::gelu(
          nn::functional::scaled_dot_product_attention(q, kk, v, true, 0.0, Value(), Value(), false, 0.3, 11 + k));
      m->checkpoints.push_back(h);
    }
    m->loss = nn::MSELoss()(h, label);
    optim::Adam(1e-2).minimize(m->loss);
    m->feed = {{"x", normal_f32({2, 2, 16, 8}, 5)}, {"label", normal_f32({2, 2, 16, 8}, 6)}};
    return m;
  };
  auto plain = build();
  auto rec = build();
  const std::size_t attentions = count_top_ops(rec->g.main, "kiln.scaled_dot_product_attention");
  const RecomputeResult r = recompute(rec->g.main, rec->checkpoints);
  rec->g.main.verify();
  CHECK(r.segments == 2);
  CHECK(count_top_ops(rec->g.main, "kiln.random_key") == 2);
  CHECK(count_top_ops(rec->g.main, "kiln.scaled_dot_product_attention") == attentions + 2);
  train_side_by_side(*plain, *rec, 3);
}

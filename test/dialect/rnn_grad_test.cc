// The gradients of kiln.rnn, kiln.gru and kiln.lstm (RecurrentGradOp of
// kiln/dialect/rnn_ops.h) against finite differences in f64: each cell,
// forward / reverse / bidirectional, sequence_lens (padding steps get no
// gradient), initial states, peepholes, clip, input_forget,
// linear_before_reset, every activation; results no gradient reaches; the
// f32 kernel against the f64 one; and the grad op's errors.
#include <string>
#include <vector>

#include "catch.hpp"
#include "dialect/grad_check.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/executor.h"
#include "test_util.h"

using namespace kiln;
using namespace kiln_vjp_test;

namespace {

using Shape = std::vector<std::int64_t>;

// One recurrent op under test: which operands it has, and its attributes.
struct Case {
  rnn::Cell cell = rnn::Cell::Lstm;
  std::int64_t seq = 3, batch = 2, input = 3, hidden = 2;
  std::string direction = "forward", activations;
  double clip = 0;
  bool bias = false, h0 = false, c0 = false, peep = false;
  bool input_forget = false, linear_before_reset = false;
  std::vector<std::int64_t> lens;  // empty: no sequence_lens operand

  std::int64_t dirs() const { return direction == "bidirectional" ? 2 : 1; }
  std::int64_t gates() const {
    return cell == rnn::Cell::Rnn ? 1 : cell == rnn::Cell::Gru ? 3 : 4;
  }
  std::uint32_t seed = 1;

  // The operands' tensors, in the op's order.
  std::vector<Tensor> inputs() const {
    const std::int64_t gh = gates() * hidden, D = dirs();
    std::vector<Tensor> in{random_f64({seq, batch, input}, -1, 1, seed),
                           random_f64({D, gh, input}, -0.8, 0.8, seed + 1),
                           random_f64({D, gh, hidden}, -0.8, 0.8, seed + 2)};
    if (bias) in.push_back(random_f64({D, 2 * gh}, -0.5, 0.5, seed + 3));
    if (!lens.empty()) in.push_back(i64({batch}, lens));
    if (h0) in.push_back(random_f64({D, batch, hidden}, -1, 1, seed + 4));
    if (c0) in.push_back(random_f64({D, batch, hidden}, -1, 1, seed + 5));
    if (peep) in.push_back(random_f64({D, 3 * hidden}, -0.8, 0.8, seed + 6));
    return in;
  }

  // Builds the op on the data values (one per inputs() entry).
  MakeOp make() const {
    const Case c = *this;
    return [c](Builder& b, const std::vector<Value>& v) -> Operation* {
      RecurrentInputs in{v[0], v[1], v[2], {}, {}, {}, {}, {}};
      std::size_t i = 3;
      if (c.bias) in.b = v[i++];
      if (!c.lens.empty()) in.sequence_lens = v[i++];
      if (c.h0) in.initial_h = v[i++];
      if (c.c0) in.initial_c = v[i++];
      if (c.peep) in.p = v[i++];
      REQUIRE(i == v.size());
      auto common = [&](auto& a) {
        a.hidden_size = c.hidden;
        a.direction = c.direction;
        a.activations = c.activations;
        a.clip = c.clip;
      };
      if (c.cell == rnn::Cell::Rnn) {
        RnnOp::Attributes a{};
        common(a);
        return b.create<RnnOp>(in, a).operation();
      }
      if (c.cell == rnn::Cell::Gru) {
        GruOp::Attributes a{};
        common(a);
        a.linear_before_reset = c.linear_before_reset;
        return b.create<GruOp>(in, a).operation();
      }
      LstmOp::Attributes a{};
      common(a);
      a.input_forget = c.input_forget;
      return b.create<LstmOp>(in, a).operation();
    };
  }

  GradCheckReport check(GradCheckOptions o = {}) const {
    o.rtol = 1e-5;
    o.atol = 1e-7;
    GradCheckReport r = check_vjp(inputs(), make(), o);
    CHECK(r.compared > 0);
    return r;
  }
};

// t's values as dt (f32 or f64).
Tensor as(const Tensor& t, DataType dt) {
  if (t.dtype() == dt) return t;
  if (dt == DataType::Float64) {
    const auto v = t.to_vector<float>();
    return Tensor::from_vector<double>(t.dims(), std::vector<double>(v.begin(), v.end()));
  }
  const auto v = t.to_vector<double>();
  std::vector<float> f(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) f[i] = static_cast<float>(v[i]);
  return Tensor::from_vector<float>(t.dims(), f);
}

const char* const kDirections[] = {"forward", "reverse", "bidirectional"};

}  // namespace

TEST_CASE("kiln.rnn's gradient matches finite differences in every direction and with every "
          "activation",
          "[dialect][vjp][rnn]") {
  for (const char* dir : kDirections) {
    INFO(dir);
    Case c;
    c.cell = rnn::Cell::Rnn;
    c.direction = dir;
    c.check();
    c.bias = c.h0 = true;
    c.seed = 11;
    c.check();
  }
  for (const char* act : {"Sigmoid", "Tanh", "Relu", "HardSigmoid(0.3,0.4)", "LeakyRelu(0.2)",
                          "Affine(0.7,0.1)", "ScaledTanh(0.8,1.3)", "Elu(0.9)",
                          "ThresholdedRelu(0.1)", "Softsign", "Softplus"}) {
    INFO(act);
    Case c;
    c.cell = rnn::Cell::Rnn;
    c.bias = c.h0 = true;
    c.activations = act;
    c.seed = 21;
    c.check();
  }
}

TEST_CASE("kiln.gru's gradient matches finite differences with and without linear_before_reset",
          "[dialect][vjp][rnn]") {
  for (bool lbr : {false, true})
    for (const char* dir : kDirections) {
      INFO(dir << (lbr ? ", linear_before_reset" : ""));
      Case c;
      c.cell = rnn::Cell::Gru;
      c.direction = dir;
      c.linear_before_reset = lbr;
      c.check();
      c.bias = c.h0 = true;
      c.hidden = 3;
      c.seed = 31;
      c.check();
    }
}

TEST_CASE("kiln.lstm's gradient matches finite differences with initial states and peepholes",
          "[dialect][vjp][rnn]") {
  for (const char* dir : kDirections) {
    INFO(dir);
    Case c;
    c.direction = dir;
    c.check();
    c.bias = c.h0 = c.c0 = c.peep = true;
    c.seed = 41;
    c.check();
  }
  SECTION("input_forget, with peepholes (f's has no effect, so no gradient)") {
    Case c;
    c.bias = c.h0 = c.c0 = c.peep = true;
    c.input_forget = true;
    const auto report = c.check();
    const auto dp = report.grads.back().to_vector<double>();
    for (std::int64_t j = 0; j < c.hidden; ++j) CHECK(dp[2 * c.hidden + j] == 0.0);
  }
  SECTION("other activations, different per direction") {
    Case c;
    c.direction = "bidirectional";
    c.bias = c.peep = true;
    c.activations = "HardSigmoid,Softsign,Elu(0.5),Sigmoid,ScaledTanh(1.1,0.9),Tanh";
    c.check();
  }
}

TEST_CASE("a recurrent op's gradient with clip is zero where clip clamps", "[dialect][vjp][rnn]") {
  // Large weights: many pre-activations lie beyond the clip, others within.
  for (rnn::Cell cell : {rnn::Cell::Rnn, rnn::Cell::Gru, rnn::Cell::Lstm}) {
    INFO(static_cast<int>(cell));
    Case c;
    c.cell = cell;
    c.bias = c.h0 = true;
    c.clip = 0.6;
    c.direction = "bidirectional";
    c.check();
  }
}

TEST_CASE("with sequence_lens, padding steps get no gradient and pass the state's on",
          "[dialect][vjp][rnn]") {
  for (rnn::Cell cell : {rnn::Cell::Rnn, rnn::Cell::Gru, rnn::Cell::Lstm})
    for (const char* dir : kDirections) {
      INFO(static_cast<int>(cell) << " " << dir);
      Case c;
      c.cell = cell;
      c.direction = dir;
      c.seq = 4, c.batch = 3;
      c.lens = {4, 2, 0};
      c.bias = c.h0 = true;
      c.c0 = c.peep = cell == rnn::Cell::Lstm;
      const auto report = c.check();
      // X's gradient is 0 at every padding step of each batch entry.
      const auto dx = report.grads[0].to_vector<double>();
      for (std::int64_t t = 0; t < c.seq; ++t)
        for (std::int64_t b = 0; b < c.batch; ++b)
          if (t >= c.lens[static_cast<std::size_t>(b)])
            for (std::int64_t k = 0; k < c.input; ++k)
              CHECK(dx[static_cast<std::size_t>((t * c.batch + b) * c.input + k)] == 0.0);
      // sequence_lens (an integer operand) gets none.
      CHECK_FALSE(report.grads[4].is_initialized());
    }
}

TEST_CASE("a recurrent op's gradient takes zeros for the results no gradient reaches",
          "[dialect][vjp][rnn]") {
  Case c;
  c.bias = c.h0 = c.c0 = true;
  c.direction = "bidirectional";
  for (std::vector<bool> flows : {std::vector<bool>{false, true, false},
                                  std::vector<bool>{true, false, false},
                                  std::vector<bool>{false, false, true}}) {
    GradCheckOptions o;
    o.result_grads = flows;
    c.check(o);
  }
  c.cell = rnn::Cell::Gru;
  c.c0 = false;
  GradCheckOptions o;
  o.result_grads = {false, true};
  c.check(o);
  SECTION("no gradient at all: no grad op") {
    Program p;
    Builder b(p);
    std::vector<Value> v;
    int i = 0;
    for (const Tensor& t : c.inputs())
      v.push_back(
          b.create<DataOp>("v" + std::to_string(i++), t.dims().to_vector(), t.dtype()).result());
    Operation* op = c.make()(b, v);
    const std::size_t before = p.block().size();
    auto grads = call_vjp(b, op, {Value(), Value()});
    CHECK(grads.size() == op->num_operands());
    for (Value g : grads) CHECK_FALSE(g);
    CHECK(p.block().size() == before);
  }
}

TEST_CASE("the f32 recurrent gradient kernels agree with the f64 ones", "[dialect][vjp][rnn]") {
  for (rnn::Cell cell : {rnn::Cell::Rnn, rnn::Cell::Gru, rnn::Cell::Lstm}) {
    INFO(static_cast<int>(cell));
    Case c;
    c.cell = cell;
    c.direction = "bidirectional";
    c.seq = 5, c.batch = 3, c.input = 4, c.hidden = 5;
    c.bias = c.h0 = true;
    c.lens = {5, 3, 1};
    c.c0 = c.peep = cell == rnn::Cell::Lstm;
    auto grads_of = [&](DataType dt) {
      Program p;
      Builder b(p);
      std::vector<Tensor> in = c.inputs();
      FeedMap feed;
      std::vector<Value> v;
      for (std::size_t i = 0; i < in.size(); ++i) {
        Tensor t = in[i].dtype() == DataType::Float64 ? as(in[i], dt) : in[i];
        const std::string name = "v" + std::to_string(i);
        v.push_back(b.create<DataOp>(name, t.dims().to_vector(), t.dtype()).result());
        feed.emplace(name, t);
      }
      Operation* op = c.make()(b, v);
      std::vector<Value> dys;  // as if the loss were Σ sin(result)
      for (Value r : op->results()) dys.push_back(b.create<CosOp>(r).result());
      auto grads = call_vjp(b, op, dys);
      std::vector<FetchTarget> fetch;
      for (Value g : grads)
        if (g) fetch.emplace_back(g);
      Executor exe;
      std::vector<std::vector<double>> out;
      for (const Tensor& t : exe.run(p, feed, fetch))
        out.push_back(as(t, DataType::Float64).to_vector<double>());
      return out;
    };
    const auto g32 = grads_of(DataType::Float32), g64 = grads_of(DataType::Float64);
    REQUIRE(g32.size() == g64.size());
    for (std::size_t i = 0; i < g32.size(); ++i) {
      INFO("grad " << i);
      REQUIRE(g32[i].size() == g64[i].size());
      for (std::size_t k = 0; k < g32[i].size(); ++k)
        CHECK(g32[i][k] == Approx(g64[i][k]).margin(2e-4));
    }
  }
}

TEST_CASE("a recurrent grad op checks its operands and names itself", "[dialect][rnn]") {
  auto tf = [](Shape d, DataType dt = DataType::Float32) {
    return TensorType::get(dt, std::move(d));
  };
  LstmOp::Attributes a{};
  a.hidden_size = 4, a.direction = "forward";
  const auto attrs = DictionaryAttribute::get(to_named_attributes(a));
  using G = RecurrentGradOp<LstmOp>;
  CHECK(G::name == "kiln.lstm_grad");
  CHECK(RecurrentGradOp<GruOp>::name == "kiln.gru_grad");
  CHECK(RecurrentGradOp<RnnOp>::name == "kiln.rnn_grad");
  const Type x = tf({5, 2, 3}), w = tf({1, 16, 3}), r = tf({1, 16, 4});
  const Type dy = tf({5, 1, 2, 4}), dh = tf({1, 2, 4});
  auto res = G::infer_meta({x, w, r, dy, dh, dh}, attrs);
  REQUIRE(res.size() == 3);
  CHECK(res[0] == x);
  CHECK(res[1] == w);
  CHECK(res[2] == r);
  CHECK(G::infer_meta({x, w, r, tf({-1, 1, -1, 4}), dh, dh}, attrs).size() == 3);
  KILN_CHECK_ERROR(G::infer_meta({x, w, r, dy, dh}, attrs), InvalidArgument,
                   {"'kiln.lstm_grad' needs 6 operands", "the gradients of its 3 results",
                    "got 5"});
  KILN_CHECK_ERROR(G::infer_meta({x, w, r, tf({5, 1, 2, 3}), dh, dh}, attrs), InvalidArgument,
                   {"'kiln.lstm_grad' dY (operand #3)", "[5, 1, 2, 4]", "got [5, 1, 2, 3]"});
  KILN_CHECK_ERROR(G::infer_meta({x, w, r, dy, dh, tf({2, 2, 4})}, attrs), InvalidArgument,
                   {"dY_c (operand #5)"});
  KILN_CHECK_ERROR(G::infer_meta({x, w, r, dy, tf({1, 2, 4}, DataType::Float64), dh}, attrs),
                   InvalidArgument, {"'kiln.lstm_grad'"});
  // The forward operands are checked as the forward checks them.
  KILN_CHECK_ERROR(G::infer_meta({x, tf({1, 12, 3}), r, dy, dh, dh}, attrs), InvalidArgument,
                   {"'kiln.lstm_grad' W (operand #1)"});

  Program p;
  Builder b(p);
  Value vx = b.create<DataOp>("x", Shape{5, 2, 3}, DataType::Float32).result();
  Value vw = b.create<DataOp>("w", Shape{1, 16, 3}, DataType::Float32).result();
  Value vr = b.create<DataOp>("r", Shape{1, 16, 4}, DataType::Float32).result();
  Operation* lstm =
      b.create<LstmOp>(RecurrentInputs{vx, vw, vr, {}, {}, {}, {}, {}}, a).operation();
  KILN_CHECK_ERROR(b.create<RecurrentGradOp<GruOp>>(lstm, std::vector<Value>(3)), InvalidArgument,
                   {"'kiln.gru_grad' is built from a 'kiln.gru' op, got 'kiln.lstm'"});
  KILN_CHECK_ERROR(b.create<G>(lstm, std::vector<Value>(2)), InvalidArgument, {"kiln.lstm"});
  // Built from the op: every result's gradient an operand (zeros where none flows).
  auto g = b.create<G>(lstm, std::vector<Value>{Value(), lstm->result(1), Value()});
  CHECK(g.operation()->num_operands() == 6);
  CHECK(g.operation()->num_results() == 3);
}

TEST_CASE("a recurrent grad kernel refuses gradients shaped unlike the results at run time",
          "[dialect][rnn]") {
  Program p;
  Builder b(p);
  RnnOp::Attributes a{};
  a.hidden_size = 2, a.direction = "forward";
  Value x = b.create<DataOp>("x", Shape{3, 1, 2}, DataType::Float64).result();
  Value w = b.create<DataOp>("w", Shape{1, 2, 2}, DataType::Float64).result();
  Value r = b.create<DataOp>("r", Shape{1, 2, 2}, DataType::Float64).result();
  Value dy = b.create<DataOp>("dy", Shape{-1, 1, 1, 2}, DataType::Float64).result();
  Operation* op = b.create<RnnOp>(RecurrentInputs{x, w, r, {}, {}, {}, {}, {}}, a).operation();
  auto g = b.create<RecurrentGradOp<RnnOp>>(op, std::vector<Value>{dy, Value()});
  FeedMap feed{{"x", random_f64({3, 1, 2})},
               {"w", random_f64({1, 2, 2})},
               {"r", random_f64({1, 2, 2})},
               {"dy", random_f64({4, 1, 1, 2})}};
  Executor exe;
  KILN_CHECK_ERROR(exe.run(p, feed, {FetchTarget(g.operation()->result(0))}), InvalidArgument,
                   {"'kiln.rnn_grad' dY (input #3)", "expected [3, 1, 1, 2]"});
}

// nn::SimpleRNN (kiln/frontend/rnn.h): its outputs against a plain C++
// recurrence on the same parameters, any sequence length from one program
// (zero steps included), a batch known only at run time, and its errors;
// nn::LSTM / nn::GRU against PyTorch's equations, and both trained by Adam.
#include <cmath>

#include "frontend/frontend_test_util.h"

using namespace kiln;
using namespace kiln_frontend_test;

namespace {

// h_t = tanh(x_t · W_ih + b + h_{t-1} · W_hh), in f64 from f32 inputs.
std::vector<double> reference(const std::vector<float>& x, std::int64_t T, std::int64_t B,
                              std::int64_t I, std::int64_t H, const std::vector<float>& w_ih,
                              const std::vector<float>& w_hh, const std::vector<float>& bias) {
  std::vector<double> h(static_cast<std::size_t>(B * H), 0.0), out;
  for (std::int64_t t = 0; t < T; ++t) {
    std::vector<double> next(h.size());
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t j = 0; j < H; ++j) {
        double s = bias[j];
        for (std::int64_t i = 0; i < I; ++i) s += x[(t * B + b) * I + i] * double(w_ih[i * H + j]);
        for (std::int64_t k = 0; k < H; ++k) s += h[b * H + k] * double(w_hh[k * H + j]);
        next[b * H + j] = std::tanh(s);
      }
    h = next;
    out.insert(out.end(), h.begin(), h.end());
  }
  return out;
}

}  // namespace

TEST_CASE("SimpleRNN's outputs and last state follow the tanh recurrence for any sequence "
          "length and a batch known at run time",
          "[frontend][rnn]") {
  constexpr std::int64_t I = 3, H = 4;
  Program main_prog, startup;
  UniqueNameGuard names;
  Value outs, last;
  std::unique_ptr<nn::SimpleRNN> rnn;
  {
    ProgramGuard guard(main_prog, startup);
    rnn = std::make_unique<nn::SimpleRNN>(I, H);
    Value x = data("x", {-1, -1, I});
    Value h0 = data("h0", {-1, H});
    std::tie(outs, last) = (*rnn)(x, h0);
  }
  CHECK(outs.type() == TensorType::get(DataType::Float32, {-1, -1, H}));
  Executor exe;
  exe.run(startup);
  auto param = [&](Value p) {
    return exe.scope().find_var(parameter_name(p))->get<Tensor>().to_vector<float>();
  };
  const auto w_ih = param(rnn->weight_ih()), w_hh = param(rnn->weight_hh()), b = param(rnn->bias());
  for (std::int64_t T : {0, 1, 5}) {
    const std::int64_t B = 2;
    INFO("T = " << T);
    std::vector<float> x(static_cast<std::size_t>(T * B * I));
    for (std::size_t k = 0; k < x.size(); ++k) x[k] = std::sin(0.7f * static_cast<float>(k));
    FeedMap feed{{"x", f32({T, B, I}, x)}, {"h0", f32({B, H}, std::vector<float>(B * H, 0.0f))}};
    auto got = exe.run(main_prog, feed, {outs, last});
    CHECK(got[0].dims() == Dims{T, B, H});
    auto want = reference(x, T, B, I, H, w_ih, w_hh, b);
    auto o = got[0].to_vector<float>();
    REQUIRE(o.size() == want.size());
    for (std::size_t k = 0; k < o.size(); ++k) CHECK(o[k] == Approx(want[k]).margin(1e-5));
    auto l = got[1].to_vector<float>();
    for (std::size_t k = 0; k < l.size(); ++k)
      CHECK(l[k] == Approx(T ? want[want.size() - l.size() + k] : 0.0).margin(1e-5));
  }
}

TEST_CASE("SimpleRNN rejects bad sizes and inputs, naming itself", "[frontend][rnn]") {
  Program main_prog, startup;
  UniqueNameGuard names;
  ProgramGuard guard(main_prog, startup);
  KILN_CHECK_ERROR(nn::SimpleRNN(0, 4), InvalidArgument, {"SimpleRNN", "> 0"});
  nn::SimpleRNN rnn(3, 4);
  KILN_CHECK_ERROR(rnn(data("a", {2, 3})), InvalidArgument, {"SimpleRNN", "[T, B, 3]"});
  KILN_CHECK_ERROR(rnn(data("b", {2, 2, 5})), InvalidArgument, {"SimpleRNN", "[T, B, 3]"});
  KILN_CHECK_ERROR(rnn(data("c", {2, 2, 3}, DataType::Float64)), InvalidArgument,
                   {"SimpleRNN", "f32"});
  KILN_CHECK_ERROR(rnn(Value()), InvalidArgument, {"SimpleRNN", "null"});
}

namespace {

double sigmoid(double v) { return 1 / (1 + std::exp(-v)); }

// One direction of a one-layer LSTM in f64 on f32 parameters laid out as
// ONNX's (gates i, o, f, c; bias: ih's then hh's), x [T, B, I]; returns
// every step's h [T, B, H] and the last h and c [B, H].
struct LstmRef {
  std::vector<double> y, h, c;
};
LstmRef lstm_reference(const std::vector<float>& x, std::int64_t T, std::int64_t B,
                       std::int64_t I, std::int64_t H, const float* w, const float* r,
                       const float* bias, bool reverse) {
  LstmRef out;
  out.y.assign(static_cast<std::size_t>(T * B * H), 0.0);
  out.h.assign(static_cast<std::size_t>(B * H), 0.0);
  out.c.assign(static_cast<std::size_t>(B * H), 0.0);
  for (std::int64_t s = 0; s < T; ++s) {
    const std::int64_t t = reverse ? T - 1 - s : s;
    std::vector<double> nh(out.h.size()), nc(out.c.size());
    for (std::int64_t b = 0; b < B; ++b) {
      auto pre = [&](std::int64_t gate, std::int64_t j) {
        const std::int64_t row = gate * H + j;
        double a = bias[row] + bias[4 * H + row];
        for (std::int64_t i = 0; i < I; ++i) a += x[(t * B + b) * I + i] * double(w[row * I + i]);
        for (std::int64_t k = 0; k < H; ++k) a += out.h[b * H + k] * double(r[row * H + k]);
        return a;
      };
      for (std::int64_t j = 0; j < H; ++j) {
        const double i_ = sigmoid(pre(0, j)), o = sigmoid(pre(1, j)), f = sigmoid(pre(2, j));
        const double g = std::tanh(pre(3, j));
        nc[b * H + j] = f * out.c[b * H + j] + i_ * g;
        nh[b * H + j] = o * std::tanh(nc[b * H + j]);
      }
    }
    out.h = nh;
    out.c = nc;
    std::copy(nh.begin(), nh.end(), out.y.begin() + t * B * H);
  }
  return out;
}

}  // namespace

TEST_CASE("a bidirectional LSTM layer gives PyTorch's outputs: y [T, B, 2·hidden], h and c "
          "[2, B, hidden]",
          "[frontend][rnn]") {
  constexpr std::int64_t I = 3, H = 4, T = 5, B = 2;
  Program main_prog, startup;
  UniqueNameGuard names;
  std::unique_ptr<nn::LSTM> lstm;
  nn::RecurrentOutput out;
  {
    ProgramGuard guard(main_prog, startup);
    lstm = std::make_unique<nn::LSTM>(I, H, /*bidirectional=*/true);
    Value x = data("x", {-1, -1, I});
    out = (*lstm)(x);
  }
  CHECK(out.y.type() == TensorType::get(DataType::Float32, {-1, -1, 2 * H}));
  CHECK(out.c.type() == TensorType::get(DataType::Float32, {2, -1, H}));
  CHECK(lstm->parameters().size() == 3);
  Executor exe;
  exe.run(startup);
  auto param = [&](Value p) {
    return exe.scope().find_var(parameter_name(p))->get<Tensor>().to_vector<float>();
  };
  const auto w = param(lstm->weight_ih()), r = param(lstm->weight_hh()), b = param(lstm->bias());
  std::vector<float> x(static_cast<std::size_t>(T * B * I));
  for (std::size_t k = 0; k < x.size(); ++k) x[k] = std::sin(0.7f * static_cast<float>(k));
  auto got = exe.run(main_prog, {{"x", f32({T, B, I}, x)}}, {out.y, out.h, out.c});
  REQUIRE(got[0].dims() == Dims{T, B, 2 * H});
  const auto y = got[0].to_vector<float>(), h = got[1].to_vector<float>(),
             c = got[2].to_vector<float>();
  for (int d = 0; d < 2; ++d) {
    INFO("direction " << d);
    const std::int64_t gh = 4 * H;
    auto want = lstm_reference(x, T, B, I, H, w.data() + d * gh * I, r.data() + d * gh * H,
                               b.data() + d * 2 * gh, d == 1);
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t bb = 0; bb < B; ++bb)
        for (std::int64_t j = 0; j < H; ++j)
          CHECK(y[(t * B + bb) * 2 * H + d * H + j] ==
                Approx(want.y[(t * B + bb) * H + j]).margin(1e-5));
    for (std::int64_t k = 0; k < B * H; ++k) {
      CHECK(h[d * B * H + k] == Approx(want.h[k]).margin(1e-5));
      CHECK(c[d * B * H + k] == Approx(want.c[k]).margin(1e-5));
    }
  }
}

TEST_CASE("a GRU layer runs as one kiln.gru op", "[frontend][rnn]") {
  Program main_prog, startup;
  UniqueNameGuard names;
  ProgramGuard guard(main_prog, startup);
  nn::GRU gru(3, 5);
  Value x = data("x", {7, 2, 3});
  nn::RecurrentOutput out = gru(x);
  CHECK(out.y.type() == TensorType::get(DataType::Float32, {7, 2, 5}));
  CHECK(out.h.type() == TensorType::get(DataType::Float32, {1, 2, 5}));
  CHECK_FALSE(out.c);
  int grus = 0;
  for (Operation* op : main_prog.block()) grus += op->name() == "kiln.gru";
  CHECK(grus == 1);
  KILN_CHECK_ERROR(nn::LSTM(3, 0), InvalidArgument, {"LSTM", "> 0"});
  KILN_CHECK_ERROR(gru(data("bad", {7, 2, 4})), InvalidArgument, {"GRU: x must be"});
}

namespace {

// Trains the layer `make` builds (x [T, B, 3] -> its outputs -> a loss
// against target [T·B, 1] and target_h [B, 1]) with Adam and returns the
// losses of `steps` steps: the task is a running sum of x's first feature,
// squashed by tanh, at every step (target) and at the last (target_h).
template <typename Make>
std::vector<float> train(Make make, int steps) {
  constexpr std::int64_t T = 6, B = 4, I = 3;
  Program main_prog, startup;
  UniqueNameGuard names;
  Value loss;
  {
    ProgramGuard guard(main_prog, startup);
    Value x = data("x", {T, B, I});
    Value target = data("target", {T * B, 1});
    Value target_h = data("target_h", {B, 1});
    loss = make(x, target, target_h);
    optim::Adam(2e-2).minimize(loss);
  }
  std::vector<float> xs(T * B * I), ys(T * B), hs(B);
  for (std::int64_t b = 0; b < B; ++b) {
    float sum = 0;
    for (std::int64_t t = 0; t < T; ++t) {
      for (std::int64_t i = 0; i < I; ++i)
        xs[(t * B + b) * I + i] = std::sin(1.3f * float(t * B * I + b * I + i) + 0.2f);
      sum += xs[(t * B + b) * I];
      ys[t * B + b] = std::tanh(sum);
    }
    hs[b] = ys[(T - 1) * B + b];
  }
  Executor exe;
  exe.run(startup);
  const FeedMap feed{{"x", Tensor::from_vector<float>({T, B, I}, xs)},
                     {"target", Tensor::from_vector<float>({T * B, 1}, ys)},
                     {"target_h", Tensor::from_vector<float>({B, 1}, hs)}};
  std::vector<float> losses;
  for (int s = 0; s < steps; ++s)
    losses.push_back(exe.run(main_prog, feed, {loss})[0].to_vector<float>()[0]);
  return losses;
}

// The MSE of a linear head over x [rows, features] against target [rows, 1].
Value head_loss(Value x, std::int64_t rows, std::int64_t features, Value target) {
  nn::Linear head(features, 1);
  x = main_builder().create<ReshapeOp>(x, std::vector<std::int64_t>{rows, features}).result();
  return nn::MSELoss()(head(x), target);
}

}  // namespace

TEST_CASE("a bidirectional LSTM layer trains: Adam steps through kiln.lstm lower the loss",
          "[frontend][rnn]") {
  constexpr std::int64_t H = 8;
  auto losses = train(
      [&](Value x, Value target, Value target_h) {
        nn::LSTM lstm(3, H, /*bidirectional=*/true);
        nn::RecurrentOutput out = lstm(x);
        Builder b = main_builder();
        // Every result reaches the loss: y, h (both directions' last states side
        // by side) and a small penalty on c.
        Value h = b.create<TransposeOp>(out.h, std::vector<std::int64_t>{1, 0, 2}).result();
        Value c = b.create<MeanOp>(b.create<MulOp>(out.c, out.c).result()).result();
        Value l = b.create<AddOp>(head_loss(out.y, 24, 2 * H, target),
                                  head_loss(h, 4, 2 * H, target_h)).result();
        return b.create<AddOp>(l, b.create<ScaleOp>(c, 0.01).result()).result();
      },
      40);
  INFO("loss " << losses.front() << " -> " << losses.back());
  for (float l : losses) CHECK(std::isfinite(l));
  CHECK(losses.back() < 0.3f * losses.front());
}

TEST_CASE("a GRU layer trains: Adam steps through kiln.gru lower the loss", "[frontend][rnn]") {
  constexpr std::int64_t H = 8;
  auto losses = train(
      [&](Value x, Value target, Value) {
        nn::GRU gru(3, H);
        return head_loss(gru(x).y, 24, H, target);
      },
      40);
  INFO("loss " << losses.front() << " -> " << losses.back());
  for (float l : losses) CHECK(std::isfinite(l));
  CHECK(losses.back() < 0.3f * losses.front());
}

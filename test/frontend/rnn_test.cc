// nn::SimpleRNN (kiln/frontend/rnn.h): its outputs against a plain C++
// recurrence on the same parameters, any sequence length from one program
// (zero steps included), a batch known only at run time, and its errors.
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

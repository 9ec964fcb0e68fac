// Kernel tests of the ops of kiln/dialect/rnn_ops.h: kiln.rnn, kiln.gru and
// kiln.lstm against a reference written from ONNX's equations with plain
// loops in double (one batch entry and one direction at a time, every dot
// product spelled out): each cell, forward / reverse / bidirectional,
// sequence_lens, initial states, bias, clip, peepholes, input_forget,
// linear_before_reset, non-default activations, f32 and f64.
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "kernel/kernel_test_util.h"

using namespace kiln;
using namespace kiln_test;

namespace {

using Fn = std::function<double(double)>;
double sigmoid(double v) { return 1 / (1 + std::exp(-v)); }
const Fn kSigmoid = sigmoid;
const Fn kTanh = [](double v) { return std::tanh(v); };
const Fn kRelu = [](double v) { return std::max(v, 0.0); };

// One recurrent layer call, in double, as ONNX lays it out.
struct Case {
  rnn::Cell cell = rnn::Cell::Lstm;
  std::int64_t seq = 3, batch = 2, input = 3, hidden = 4;
  std::string direction = "forward";
  std::string activations;  // the op's attribute ("" = defaults)
  std::vector<Fn> fns;      // the same, per function and direction, for the reference
  double clip = 0;
  bool input_forget = false, linear_before_reset = false;
  bool bias = false, h0 = false, c0 = false, peep = false;
  std::vector<std::int64_t> lens;  // empty: no sequence_lens operand

  int dirs() const { return direction == "bidirectional" ? 2 : 1; }
  int gates() const { return cell == rnn::Cell::Rnn ? 1 : cell == rnn::Cell::Gru ? 3 : 4; }
  int per_cell() const { return cell == rnn::Cell::Rnn ? 1 : cell == rnn::Cell::Gru ? 2 : 3; }
};

struct Data {
  std::vector<double> x, w, r, b, h0, c0, p;
};

Data make_data(const Case& c) {
  const std::int64_t d = c.dirs(), gh = c.gates() * c.hidden;
  auto v = [](const Dims& dims, std::uint32_t seed, double scale = 1.0) {
    return filled<double>(dims, -scale, scale, seed).to_vector<double>();
  };
  Data data;
  data.x = v(Dims{c.seq, c.batch, c.input}, 1, 1.5);
  data.w = v(Dims{d, gh, c.input}, 2, 0.8);
  data.r = v(Dims{d, gh, c.hidden}, 3, 0.8);
  if (c.bias) data.b = v(Dims{d, 2 * gh}, 4, 0.5);
  if (c.h0) data.h0 = v(Dims{d, c.batch, c.hidden}, 5);
  if (c.c0) data.c0 = v(Dims{d, c.batch, c.hidden}, 6);
  if (c.peep) data.p = v(Dims{d, 3 * c.hidden}, 7);
  return data;
}

struct Result {
  std::vector<double> y, yh, yc;
};

// ONNX's equations, literally.
Result reference(const Case& c, const Data& in) {
  const std::int64_t S = c.seq, N = c.batch, I = c.input, H = c.hidden, D = c.dirs();
  const std::int64_t GH = c.gates() * H;
  Result out;
  out.y.assign(S * D * N * H, 0);
  out.yh.assign(D * N * H, 0);
  out.yc.assign(D * N * H, 0);
  std::vector<Fn> fns = c.fns;
  if (fns.empty()) {
    if (c.cell == rnn::Cell::Rnn) fns = {kTanh};
    if (c.cell == rnn::Cell::Gru) fns = {kSigmoid, kTanh};
    if (c.cell == rnn::Cell::Lstm) fns = {kSigmoid, kTanh, kTanh};
  }
  if (static_cast<int>(fns.size()) == c.per_cell() && D == 2) {
    auto once = fns;
    fns.insert(fns.end(), once.begin(), once.end());
  }
  auto clip = [&](double v) { return c.clip > 0 ? std::clamp(v, -c.clip, c.clip) : v; };
  for (std::int64_t d = 0; d < D; ++d) {
    const bool rev = c.direction == "reverse" || d == 1;
    const Fn& f = fns[d * c.per_cell()];
    const Fn& g = c.per_cell() > 1 ? fns[d * c.per_cell() + 1] : f;
    const Fn& hf = c.per_cell() > 2 ? fns[d * c.per_cell() + 2] : f;
    auto W = [&](std::int64_t row, std::int64_t i) { return in.w[(d * GH + row) * I + i]; };
    auto R = [&](std::int64_t row, std::int64_t m) { return in.r[(d * GH + row) * H + m]; };
    auto Wb = [&](std::int64_t row) { return in.b.empty() ? 0.0 : in.b[d * 2 * GH + row]; };
    auto Rb = [&](std::int64_t row) { return in.b.empty() ? 0.0 : in.b[d * 2 * GH + GH + row]; };
    auto P = [&](std::int64_t k) { return in.p.empty() ? 0.0 : in.p[d * 3 * H + k]; };
    for (std::int64_t b = 0; b < N; ++b) {
      std::vector<double> h(H, 0), cs(H, 0);
      if (!in.h0.empty()) std::copy_n(in.h0.begin() + (d * N + b) * H, H, h.begin());
      if (!in.c0.empty()) std::copy_n(in.c0.begin() + (d * N + b) * H, H, cs.begin());
      const std::int64_t len = c.lens.empty() ? S : c.lens[b];
      for (std::int64_t s = 0; s < len; ++s) {
        const std::int64_t t = rev ? len - 1 - s : s;
        auto xw = [&](std::int64_t row) {
          double a = Wb(row);
          for (std::int64_t i = 0; i < I; ++i) a += in.x[(t * N + b) * I + i] * W(row, i);
          return a;
        };
        auto hr = [&](std::int64_t row, const std::vector<double>& hv) {
          double a = 0;
          for (std::int64_t m = 0; m < H; ++m) a += hv[m] * R(row, m);
          return a;
        };
        std::vector<double> nh(H);
        if (c.cell == rnn::Cell::Rnn) {
          for (std::int64_t j = 0; j < H; ++j) nh[j] = f(clip(xw(j) + hr(j, h) + Rb(j)));
        } else if (c.cell == rnn::Cell::Gru) {
          std::vector<double> z(H), r(H), rh(H);
          for (std::int64_t j = 0; j < H; ++j) {
            z[j] = f(clip(xw(j) + hr(j, h) + Rb(j)));
            r[j] = f(clip(xw(H + j) + hr(H + j, h) + Rb(H + j)));
            rh[j] = r[j] * h[j];
          }
          for (std::int64_t j = 0; j < H; ++j) {
            const double pre = c.linear_before_reset
                                   ? xw(2 * H + j) + r[j] * (hr(2 * H + j, h) + Rb(2 * H + j))
                                   : xw(2 * H + j) + hr(2 * H + j, rh) + Rb(2 * H + j);
            const double hh = g(clip(pre));
            nh[j] = (1 - z[j]) * hh + z[j] * h[j];
          }
        } else {  // gates i, o, f, c; peepholes i, o, f
          std::vector<double> nc(H);
          for (std::int64_t j = 0; j < H; ++j) {
            const double it = f(clip(xw(j) + hr(j, h) + Rb(j) + P(j) * cs[j]));
            const double ft = c.input_forget
                                  ? 1 - it
                                  : f(clip(xw(2 * H + j) + hr(2 * H + j, h) + Rb(2 * H + j) +
                                           P(2 * H + j) * cs[j]));
            const double ct = g(clip(xw(3 * H + j) + hr(3 * H + j, h) + Rb(3 * H + j)));
            nc[j] = ft * cs[j] + it * ct;
            const double ot = f(clip(xw(H + j) + hr(H + j, h) + Rb(H + j) + P(H + j) * nc[j]));
            nh[j] = ot * hf(clip(nc[j]));  // h's input is clipped too; Ct is not
          }
          cs = nc;
        }
        h = nh;
        std::copy(h.begin(), h.end(), out.y.begin() + ((t * D + d) * N + b) * H);
      }
      std::copy(h.begin(), h.end(), out.yh.begin() + (d * N + b) * H);
      std::copy(cs.begin(), cs.end(), out.yc.begin() + (d * N + b) * H);
    }
  }
  return out;
}

template <typename T>
Tensor tensor(const Dims& dims, const std::vector<double>& v) {
  std::vector<T> t(v.begin(), v.end());
  return Tensor::from_vector<T>(dims, t);
}

// Runs the op of `c.cell` on `data` in T.
template <typename T>
KernelRun run_case(const Case& c, const Data& data, DataType lens_dtype = DataType::Int64) {
  const std::int64_t d = c.dirs(), gh = c.gates() * c.hidden;
  std::vector<Tensor> ins{tensor<T>(Dims{c.seq, c.batch, c.input}, data.x),
                          tensor<T>(Dims{d, gh, c.input}, data.w),
                          tensor<T>(Dims{d, gh, c.hidden}, data.r)};
  if (c.bias) ins.push_back(tensor<T>(Dims{d, 2 * gh}, data.b));
  if (!c.lens.empty()) {
    if (lens_dtype == DataType::Int32) {
      std::vector<std::int32_t> l(c.lens.begin(), c.lens.end());
      ins.push_back(Tensor::from_vector<std::int32_t>(Dims{c.batch}, l));
    } else {
      ins.push_back(Tensor::from_vector<std::int64_t>(Dims{c.batch}, c.lens));
    }
  }
  if (c.h0) ins.push_back(tensor<T>(Dims{d, c.batch, c.hidden}, data.h0));
  if (c.c0) ins.push_back(tensor<T>(Dims{d, c.batch, c.hidden}, data.c0));
  if (c.peep) ins.push_back(tensor<T>(Dims{d, 3 * c.hidden}, data.p));
  return run_kernel(ins, [&](Builder& b, const std::vector<Value>& v) -> Operation* {
    RecurrentInputs in{v[0], v[1], v[2], {}, {}, {}, {}, {}};
    std::size_t k = 3;
    if (c.bias) in.b = v[k++];
    if (!c.lens.empty()) in.sequence_lens = v[k++];
    if (c.h0) in.initial_h = v[k++];
    if (c.c0) in.initial_c = v[k++];
    if (c.peep) in.p = v[k++];
    switch (c.cell) {
      case rnn::Cell::Rnn: {
        RnnOp::Attributes a{};
        a.hidden_size = c.hidden, a.direction = c.direction, a.activations = c.activations;
        a.clip = c.clip;
        return b.create<RnnOp>(in, a).operation();
      }
      case rnn::Cell::Gru: {
        GruOp::Attributes a{};
        a.hidden_size = c.hidden, a.direction = c.direction, a.activations = c.activations;
        a.clip = c.clip, a.linear_before_reset = c.linear_before_reset;
        return b.create<GruOp>(in, a).operation();
      }
      case rnn::Cell::Lstm: {
        LstmOp::Attributes a{};
        a.hidden_size = c.hidden, a.direction = c.direction, a.activations = c.activations;
        a.clip = c.clip, a.input_forget = c.input_forget;
        return b.create<LstmOp>(in, a).operation();
      }
    }
    return nullptr;
  });
}

// The op's results against the reference, in f64 and in f32.
void check_case(const Case& c) {
  const Data data = make_data(c);
  const Result want = reference(c, data);
  {
    INFO("f64");
    KernelRun run = run_case<double>(c, data);
    check_close<double>(run.out(0), want.y, 1e-10, 1e-12);
    check_close<double>(run.out(1), want.yh, 1e-10, 1e-12);
    if (c.cell == rnn::Cell::Lstm) check_close<double>(run.out(2), want.yc, 1e-10, 1e-12);
  }
  {
    INFO("f32");
    KernelRun run = run_case<float>(c, data, DataType::Int32);
    auto f = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
    check_close<float>(run.out(0), f(want.y), 1e-4, 1e-5);
    check_close<float>(run.out(1), f(want.yh), 1e-4, 1e-5);
    if (c.cell == rnn::Cell::Lstm) check_close<float>(run.out(2), f(want.yc), 1e-4, 1e-5);
  }
}

Case with(rnn::Cell cell) {
  Case c;
  c.cell = cell;
  return c;
}

}  // namespace

TEST_CASE("kiln.rnn follows the Elman recurrence step by step", "[kernel][rnn]") {
  Case c = with(rnn::Cell::Rnn);
  check_case(c);
  c.bias = c.h0 = true;
  check_case(c);
}

TEST_CASE("kiln.gru follows ONNX's GRU with the reset gate before the recurrent product",
          "[kernel][rnn]") {
  Case c = with(rnn::Cell::Gru);
  check_case(c);
  c.bias = c.h0 = true;
  check_case(c);
}

TEST_CASE("kiln.gru with linear_before_reset applies the reset gate after the product",
          "[kernel][rnn]") {
  Case c = with(rnn::Cell::Gru);
  c.linear_before_reset = c.bias = c.h0 = true;
  check_case(c);
}

TEST_CASE("kiln.lstm follows ONNX's LSTM with bias, initial states and peepholes",
          "[kernel][rnn]") {
  Case c = with(rnn::Cell::Lstm);
  check_case(c);
  c.bias = c.h0 = c.c0 = true;
  check_case(c);
  c.peep = true;
  check_case(c);
}

TEST_CASE("kiln.lstm with input_forget takes its forget gate as one minus the input gate",
          "[kernel][rnn]") {
  Case c = with(rnn::Cell::Lstm);
  c.input_forget = c.bias = c.h0 = c.c0 = c.peep = true;
  check_case(c);
}

TEST_CASE("a reverse layer walks the sequence from its last step", "[kernel][rnn]") {
  for (auto cell : {rnn::Cell::Rnn, rnn::Cell::Gru, rnn::Cell::Lstm}) {
    Case c = with(cell);
    c.direction = "reverse";
    c.bias = c.h0 = true;
    check_case(c);
  }
}

TEST_CASE("a bidirectional layer stacks a forward and a backward pass on the dirs axis",
          "[kernel][rnn]") {
  for (auto cell : {rnn::Cell::Rnn, rnn::Cell::Gru, rnn::Cell::Lstm}) {
    Case c = with(cell);
    c.direction = "bidirectional";
    c.seq = 4, c.batch = 3;
    c.bias = c.h0 = c.c0 = c.peep = cell == rnn::Cell::Lstm;
    c.h0 = true;
    check_case(c);
  }
}

TEST_CASE("sequence_lens freeze each batch entry's state and zero Y past its length",
          "[kernel][rnn]") {
  for (auto cell : {rnn::Cell::Rnn, rnn::Cell::Gru, rnn::Cell::Lstm}) {
    for (const char* dir : {"forward", "reverse", "bidirectional"}) {
      INFO(dir);
      Case c = with(cell);
      c.direction = dir;
      c.seq = 4, c.batch = 4;
      c.lens = {4, 2, 0, 1};  // a length of 0 leaves the initial state as Y_h
      c.bias = c.h0 = true;
      c.c0 = cell == rnn::Cell::Lstm;
      c.linear_before_reset = false;
      check_case(c);
    }
  }
  // Y really is 0 past a sequence's end.
  Case c = with(rnn::Cell::Gru);
  c.seq = 3, c.batch = 2, c.lens = {3, 1};
  KernelRun run = run_case<double>(c, make_data(c));
  auto y = run.out(0).to_vector<double>();  // [3, 1, 2, 4]
  for (std::int64_t t = 1; t < 3; ++t)
    for (std::int64_t j = 0; j < 4; ++j) CHECK(y[(t * 2 + 1) * 4 + j] == 0.0);
}

TEST_CASE("clip bounds the input of every activation", "[kernel][rnn]") {
  for (auto cell : {rnn::Cell::Rnn, rnn::Cell::Gru, rnn::Cell::Lstm}) {
    Case c = with(cell);
    c.clip = 0.3;
    c.bias = c.h0 = true;
    check_case(c);
  }
  // With Relu, the clip is the largest value a step can give.
  Case c = with(rnn::Cell::Rnn);
  c.activations = "Relu";
  c.fns = {kRelu};
  c.clip = 0.25;
  check_case(c);
  KernelRun run = run_case<double>(c, make_data(c));
  for (double v : run.out(0).to_vector<double>()) CHECK(v <= 0.25);
}

TEST_CASE("activations are taken per cell function and per direction", "[kernel][rnn]") {
  Case c = with(rnn::Cell::Lstm);
  c.direction = "bidirectional";
  c.activations = "HardSigmoid(0.3,0.4),Relu,Tanh,Sigmoid,LeakyRelu(0.2),ScaledTanh(1.5,0.5)";
  c.fns = {[](double v) { return std::clamp(0.3 * v + 0.4, 0.0, 1.0); }, kRelu, kTanh, kSigmoid,
           [](double v) { return v >= 0 ? v : 0.2 * v; },
           [](double v) { return 1.5 * std::tanh(0.5 * v); }};
  c.bias = true;
  check_case(c);
  Case g = with(rnn::Cell::Gru);
  g.activations = "Softsign,Elu(0.5)";
  g.fns = {[](double v) { return v / (1 + std::abs(v)); },
           [](double v) { return v >= 0 ? v : 0.5 * (std::exp(v) - 1); }};
  check_case(g);
  Case r = with(rnn::Cell::Rnn);
  r.activations = "Softplus";
  r.fns = {[](double v) { return std::log1p(std::exp(v)); }};
  check_case(r);
}

TEST_CASE("a batch of one and an input of one feature run", "[kernel][rnn]") {
  Case c = with(rnn::Cell::Lstm);
  c.batch = 1, c.input = 1, c.seq = 5, c.hidden = 1;
  check_case(c);
}

TEST_CASE("a sequence length outside [0, seq] is an error naming the op", "[kernel][rnn]") {
  Case c = with(rnn::Cell::Lstm);
  c.lens = {3, 4};
  KILN_CHECK_ERROR(run_case<double>(c, make_data(c)), InvalidArgument,
                   {"'kiln.lstm'", "sequence_lens[1] is 4", "outside [0, 3]"});
  c.lens = {-1, 1};
  KILN_CHECK_ERROR(run_case<double>(c, make_data(c)), InvalidArgument,
                   {"'kiln.lstm'", "sequence_lens[0] is -1"});
}

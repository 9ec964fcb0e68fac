// Recurrent-op benchmarks (`./run bench rnn`): one forward pass of a
// one-layer, forward, f32 recurrent layer with bias, seq 64, at two sizes:
// "large" batch 16, input 128, hidden 256; "small" batch 4, input 32,
// hidden 32. One thread (BLAS too). Process CPU time, which a loaded
// machine disturbs less than wall time (the wall time is printed too):
//   BENCH rnn.<size>.lstm.fused_ms     ms: kiln.lstm
//   BENCH rnn.<size>.lstm.unrolled_ms  ms: the same LSTM as a graph of kiln
//         ops unrolled over the 64 steps (one matmul for every step's input
//         projection, then per step a matmul, slices, adds, sigmoids, tanhs
//         and multiplies): what an importer without the fused op would build
//   BENCH rnn.<size>.gru.fused_ms, rnn.<size>.rnn.fused_ms  ms
//   BENCH rnn.<size>.<cell>.train_ms  ms: the fused op and its grad op
//         (Y_h's gradient given), fetching Y_h and dW: a training step's
//         recurrent layer, whose backward recomputes the forward
// Medians of 15 runs after a warm-up; the fused and unrolled LSTMs run in the
// same process on the same inputs and agree to 1e-4 (checked).
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_util.h"

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/executor.h"
#include "kiln/exec/interpreter_core.h"

namespace bench {
namespace {

using kiln::Builder;
using kiln::DataType;
using kiln::Value;

constexpr std::int64_t S = 64;
std::int64_t N = 16, I = 128, H = 256;

kiln::Tensor filled(std::vector<std::int64_t> dims, float scale, int seed) {
  std::int64_t n = 1;
  for (auto d : dims) n *= d;
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    v[static_cast<std::size_t>(i)] = scale * std::sin(0.37f * float(i) + float(seed));
  return kiln::Tensor::from_vector<float>(kiln::Dims(dims), v);
}

struct Layer {
  kiln::Program p;
  Value out;    // Y_h [1, N, H] (fused) or h [N, H] (unrolled)
  Value extra;  // also fetched when set (a training step's dW)
  kiln::FeedMap feed;
};

Value data(Builder& b, const char* name, std::vector<std::int64_t> dims) {
  return b.create<kiln::DataOp>(name, dims, DataType::Float32).result();
}

void make_feed(Layer& l, std::int64_t gates) {
  l.feed = {{"x", filled({S, N, I}, 1.0f, 1)},
            {"w", filled({1, gates * H, I}, 0.1f, 2)},
            {"r", filled({1, gates * H, H}, 0.1f, 3)},
            {"b", filled({1, 2 * gates * H}, 0.1f, 4)}};
}

Layer fused(const char* cell, bool train = false) {
  Layer l;
  Builder b(l.p);
  const std::int64_t g = cell[0] == 'l' ? 4 : cell[0] == 'g' ? 3 : 1;
  kiln::RecurrentInputs in{data(b, "x", {S, N, I}), data(b, "w", {1, g * H, I}),
                           data(b, "r", {1, g * H, H}), data(b, "b", {1, 2 * g * H}), {}, {}, {}, {}};
  if (g == 4) {
    kiln::LstmOp::Attributes a{};
    a.hidden_size = H, a.direction = "forward";
    l.out = b.create<kiln::LstmOp>(in, a)->result(1);
  } else if (g == 3) {
    kiln::GruOp::Attributes a{};
    a.hidden_size = H, a.direction = "forward";
    l.out = b.create<kiln::GruOp>(in, a)->result(1);
  } else {
    kiln::RnnOp::Attributes a{};
    a.hidden_size = H, a.direction = "forward";
    l.out = b.create<kiln::RnnOp>(in, a)->result(1);
  }
  make_feed(l, g);
  if (train) {
    kiln::Operation* op = l.out.defining_op();
    std::vector<Value> dout(op->num_results());
    dout[1] = data(b, "dyh", {1, N, H});
    l.feed.emplace("dyh", filled({1, N, H}, 1.0f, 5));
    auto grads = op->dyn_cast<kiln::VjpInterface>().vjp(b, dout);
    l.extra = grads[1];  // dW
  }
  return l;
}

// ONNX's LSTM equations as kiln ops, unrolled.
Layer unrolled_lstm() {
  Layer l;
  Builder b(l.p);
  using V = std::vector<std::int64_t>;
  Value x = data(b, "x", {S, N, I}), w = data(b, "w", {1, 4 * H, I}),
        r = data(b, "r", {1, 4 * H, H}), bias = data(b, "b", {1, 8 * H});
  auto reshape = [&](Value v, V dims) { return b.create<kiln::ReshapeOp>(v, dims).result(); };
  auto slice = [&](Value v, std::int64_t axis, std::int64_t from, std::int64_t to) {
    return b.create<kiln::SliceOp>(v, V{axis}, V{from}, V{to}).result();
  };
  auto add = [&](Value a, Value c) { return b.create<kiln::AddOp>(a, c).result(); };
  auto mul = [&](Value a, Value c) { return b.create<kiln::MulOp>(a, c).result(); };
  Value w2 = reshape(w, {4 * H, I}), r2 = reshape(r, {4 * H, H});
  Value bsum = add(slice(reshape(bias, {8 * H}), 0, 0, 4 * H), slice(reshape(bias, {8 * H}), 0, 4 * H, 8 * H));
  // Every step's input projection plus both biases: [S·N, 4H].
  Value xw = add(b.create<kiln::MatmulOp>(reshape(x, {S * N, I}), w2, false, true).result(), bsum);
  Value h = b.create<kiln::FullOp>(V{N, H}, 0.0, DataType::Float32).result();
  Value c = h;
  for (std::int64_t t = 0; t < S; ++t) {
    Value pre = add(slice(xw, 0, t * N, (t + 1) * N), b.create<kiln::MatmulOp>(h, r2, false, true).result());
    Value i = b.create<kiln::SigmoidOp>(slice(pre, 1, 0, H)).result();
    Value o = b.create<kiln::SigmoidOp>(slice(pre, 1, H, 2 * H)).result();
    Value f = b.create<kiln::SigmoidOp>(slice(pre, 1, 2 * H, 3 * H)).result();
    Value g = b.create<kiln::TanhOp>(slice(pre, 1, 3 * H, 4 * H)).result();
    c = add(mul(f, c), mul(i, g));
    h = mul(o, b.create<kiln::TanhOp>(c).result());
  }
  l.out = h;
  make_feed(l, 4);
  return l;
}

void run(kiln::Executor& exe, Layer& l, const std::string& name, kiln::Tensor* last = nullptr) {
  std::vector<kiln::FetchTarget> fetch{l.out};
  if (l.extra) fetch.emplace_back(l.extra);
  auto got = exe.run(l.p, l.feed, fetch);  // warm-up: plan, buffers
  if (last) *last = got[0];
  std::vector<Sample> t;
  for (int k = 0; k < 15; ++k) t.push_back(time_both([&] { exe.run(l.p, l.feed, fetch); }));
  const Sample m = median(t);
  emit(name, m.cpu / 1e6, "ms");
  std::printf("  (wall %.3f ms)\n", m.wall / 1e6);
}

}  // namespace
}  // namespace bench

int main(int argc, char** argv) {
  using namespace bench;
  const std::string filter = argc > 1 ? argv[1] : "";
  if (!filter.empty() && filter != "rnn" && filter.rfind("rnn.", 0) != 0) return 0;
  kiln::ExecutionOptions o;
  o.num_threads = 1;
  kiln::Executor exe(kiln::Place::cpu(), o);
  struct Size {
    const char* name;
    std::int64_t n, i, h;
  };
  for (const Size& z : {Size{"large", 16, 128, 256}, Size{"small", 4, 32, 32}}) {
    N = z.n, I = z.i, H = z.h;
    const std::string pre = std::string("rnn.") + z.name + ".";
    Layer lstm = fused("lstm"), unrolled = unrolled_lstm();
    kiln::Tensor a, u;
    run(exe, lstm, pre + "lstm.fused_ms", &a);
    run(exe, unrolled, pre + "lstm.unrolled_ms", &u);
    const auto av = a.to_vector<float>(), uv = u.to_vector<float>();
    if (av.size() != uv.size()) {
      std::fprintf(stderr, "rnn_bench: the fused and unrolled LSTMs disagree in size\n");
      return 1;
    }
    for (std::size_t k = 0; k < av.size(); ++k)
      if (std::fabs(av[k] - uv[k]) > 1e-4f) {
        std::fprintf(stderr, "rnn_bench: fused %g vs unrolled %g at %zu\n", av[k], uv[k], k);
        return 1;
      }
    Layer gru = fused("gru"), rnn = fused("rnn");
    run(exe, gru, pre + "gru.fused_ms");
    run(exe, rnn, pre + "rnn.fused_ms");
    for (const char* cell : {"lstm", "gru", "rnn"}) {
      Layer step = fused(cell, /*train=*/true);
      run(exe, step, pre + cell + ".train_ms");
    }
  }
  return 0;
}

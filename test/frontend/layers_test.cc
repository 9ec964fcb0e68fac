// The model-building layers of kiln/frontend/layers.h — Conv2D, the pools,
// BatchNorm2D, RMSNorm, MultiHeadAttention, TransformerEncoderLayer,
// Sequential — each run through the Executor against a plain-loop
// computation with the layer's own (fetched) parameters; training and
// inference modes; bad configurations.
#include <cmath>

#include "frontend/frontend_test_util.h"
#include "kiln/frontend/clone_for_test.h"
#include "kiln/kernel/random.h"

using namespace kiln;
using namespace kiln_frontend_test;
namespace F = kiln::nn::functional;

namespace {

std::vector<float> wave(std::size_t n, float phase = 0.f) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::sin(1.3f * float(i) + phase) * 1.5f;
  return v;
}

void check_close(const std::vector<float>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(std::abs(double(got[i]) - want[i]) <= tol * (1 + std::abs(want[i])));
  }
}

// out = x[rows, k] · w[k, n] + b[n]
std::vector<double> affine(const std::vector<double>& x, const std::vector<float>& w,
                           const std::vector<float>& b, std::size_t k, std::size_t n) {
  const std::size_t rows = x.size() / k;
  std::vector<double> out(rows * n);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t j = 0; j < n; ++j) {
      double s = b.empty() ? 0 : b[j];
      for (std::size_t i = 0; i < k; ++i) s += x[r * k + i] * w[i * n + j];
      out[r * n + j] = s;
    }
  return out;
}

}  // namespace

TEST_CASE("Conv2D convolves NCHW input with its weight and adds one bias per output channel",
          "[frontend][layers]") {
  Program main_prog, startup;
  Value y;
  std::unique_ptr<nn::Conv2D> conv;
  {
    ProgramGuard guard(main_prog, startup);
    Value x = data("x", {-1, 2, 4, 5});
    conv = std::make_unique<nn::Conv2D>(2, 3, nn::Size2(3, 2), /*stride=*/1, /*padding=*/1);
    y = (*conv)(x);
  }
  CHECK(shaped_dims(y.type()) == std::vector<std::int64_t>{-1, 3, 4, 6});
  CHECK(conv->parameters().size() == 2);
  CHECK(shaped_dims(conv->weight().type()) == std::vector<std::int64_t>{3, 2, 3, 2});
  Executor exe;
  exe.run(startup);
  auto xv = wave(2 * 2 * 4 * 5);
  auto got = exe.run(main_prog, {{"x", f32({2, 2, 4, 5}, xv)}}, {y, conv->weight(), conv->bias()});
  auto w = got[1].to_vector<float>(), b = got[2].to_vector<float>();
  // The weight is U(±1/√fan_in), fan_in = 2·3·2.
  for (float v : w) CHECK(std::abs(v) <= 1 / std::sqrt(12.f));
  std::vector<double> want;
  for (int n = 0; n < 2; ++n)
    for (int o = 0; o < 3; ++o)
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 6; ++j) {
          double s = b[o];
          for (int c = 0; c < 2; ++c)
            for (int ki = 0; ki < 3; ++ki)
              for (int kj = 0; kj < 2; ++kj) {
                int hi = i - 1 + ki, wj = j - 1 + kj;
                if (hi < 0 || hi >= 4 || wj < 0 || wj >= 5) continue;
                s += double(xv[((n * 2 + c) * 4 + hi) * 5 + wj]) * w[((o * 2 + c) * 3 + ki) * 2 + kj];
              }
          want.push_back(s);
        }
  check_close(got[0].to_vector<float>(), want, 1e-5);
}

TEST_CASE("pooling layers and Flatten: max, average (exclusive of padding), adaptive",
          "[frontend][layers]") {
  Program main_prog, startup;
  Value mx, avg, adaptive, flat;
  {
    ProgramGuard guard(main_prog, startup);
    Value x = data("x", {1, 1, 4, 4});
    mx = nn::MaxPool2D(2)(x);
    avg = nn::AvgPool2D(3, /*stride=*/2, /*padding=*/1)(x);
    adaptive = nn::AdaptiveAvgPool2D(1)(x);
    flat = nn::Flatten()(mx);
  }
  CHECK(shaped_dims(flat.type()) == std::vector<std::int64_t>{1, 4});
  std::vector<float> xv(16);
  for (int i = 0; i < 16; ++i) xv[i] = float(i);
  Executor exe;
  auto got = exe.run(main_prog, {{"x", f32({1, 1, 4, 4}, xv)}}, {mx, avg, adaptive, flat});
  check_close(got[0].to_vector<float>(), {5, 7, 13, 15}, 0);
  // 3×3 windows at stride 2 over the padded 6×6 grid; padding not counted.
  check_close(got[1].to_vector<float>(),
              {(0 + 1 + 4 + 5) / 4.0, (1 + 2 + 3 + 5 + 6 + 7) / 6.0,
               (4 + 5 + 8 + 9 + 12 + 13) / 6.0, (5 + 6 + 7 + 9 + 10 + 11 + 13 + 14 + 15) / 9.0},
              1e-6);
  check_close(got[2].to_vector<float>(), {7.5}, 1e-6);
  check_close(got[3].to_vector<float>(), {5, 7, 13, 15}, 0);
}

TEST_CASE("BatchNorm2D normalizes with batch statistics in training, updates its running "
          "statistics, and uses them after eval() or clone_for_test",
          "[frontend][layers]") {
  Program main_prog, startup;
  Value y, y_eval;
  std::unique_ptr<nn::BatchNorm2D> bn;
  {
    ProgramGuard guard(main_prog, startup);
    Value x = data("x", {2, 2, 1, 3});
    bn = std::make_unique<nn::BatchNorm2D>(2, /*momentum=*/0.75);
    y = (*bn)(x);
  }
  CHECK(bn->parameters().size() == 4);
  CHECK(stop_gradient(bn->running_mean()));
  CHECK_FALSE(stop_gradient(bn->weight()));
  std::vector<float> xv{1, 2, 3, 10, 20, 30, 5, 6, 7, -10, 0, 10};
  Executor exe;
  exe.run(startup);
  auto got = exe.run(main_prog, {{"x", f32({2, 2, 1, 3}, xv)}},
                     {y, bn->running_mean(), bn->running_var()});
  // Channel 0 holds {1,2,3,5,6,7}, channel 1 {10,20,30,-10,0,10}.
  std::vector<double> mean(2), var(2), uvar(2);
  for (int c = 0; c < 2; ++c) {
    double s = 0, ss = 0;
    for (int n = 0; n < 2; ++n)
      for (int i = 0; i < 3; ++i) s += xv[(n * 2 + c) * 3 + i];
    mean[c] = s / 6;
    for (int n = 0; n < 2; ++n)
      for (int i = 0; i < 3; ++i) ss += std::pow(xv[(n * 2 + c) * 3 + i] - mean[c], 2);
    var[c] = ss / 6;
    uvar[c] = ss / 5;
  }
  std::vector<double> want;
  for (int n = 0; n < 2; ++n)
    for (int c = 0; c < 2; ++c)
      for (int i = 0; i < 3; ++i)
        want.push_back((xv[(n * 2 + c) * 3 + i] - mean[c]) / std::sqrt(var[c] + 1e-5));
  check_close(got[0].to_vector<float>(), want, 1e-5);
  std::vector<double> rm{0.25 * mean[0], 0.25 * mean[1]};
  std::vector<double> rv{0.75 + 0.25 * uvar[0], 0.75 + 0.25 * uvar[1]};
  check_close(got[1].to_vector<float>(), rm, 1e-5);
  check_close(got[2].to_vector<float>(), rv, 1e-5);

  // The for-test clone normalizes with the running statistics and leaves them.
  IrMapping map;
  Program test = clone_for_test(main_prog, &map);
  auto inf = exe.run(test, {{"x", f32({2, 2, 1, 3}, xv)}},
                     {map.lookup(y), map.lookup(bn->running_mean())});
  std::vector<double> want_inf;
  for (int n = 0; n < 2; ++n)
    for (int c = 0; c < 2; ++c)
      for (int i = 0; i < 3; ++i)
        want_inf.push_back((xv[(n * 2 + c) * 3 + i] - rm[c]) / std::sqrt(rv[c] + 1e-5));
  check_close(inf[0].to_vector<float>(), want_inf, 1e-5);
  check_close(inf[1].to_vector<float>(), rm, 1e-5);

  // eval() builds the same inference op.
  Program eval_prog;
  {
    ProgramGuard guard(eval_prog, startup);
    bn->eval();
    y_eval = (*bn)(data("x", {2, 2, 1, 3}));
  }
  check_close(exe.run(eval_prog, {{"x", f32({2, 2, 1, 3}, xv)}}, {y_eval})[0].to_vector<float>(),
              want_inf, 1e-5);
}

TEST_CASE("a network with BatchNorm2D trains: minimize differentiates through batch_norm and "
          "leaves its running statistics to the op",
          "[frontend][layers]") {
  Program main_prog, startup;
  Value loss;
  std::unique_ptr<nn::Sequential> net;
  {
    ProgramGuard guard(main_prog, startup);
    Value x = data("x", {4, 1, 3, 3});
    Value label = data("label", {4}, DataType::Int64);
    net = std::make_unique<nn::Sequential>();
    net->emplace<nn::Conv2D>(1, 4, 3, 1, 1);
    net->emplace<nn::BatchNorm2D>(4);
    net->emplace<nn::ReLU>();
    net->emplace<nn::Flatten>();
    net->emplace<nn::Linear>(36, 2);
    loss = F::cross_entropy((*net)(x), label);
    optim::Adam(0.05).minimize(loss);
  }
  CHECK(net->parameters().size() == 8);
  Executor exe;
  exe.run(startup);
  auto xv = wave(36);
  Tensor labels = Tensor::from_vector<std::int64_t>(Dims({4}), {0, 1, 1, 0});
  FeedMap feed{{"x", f32({4, 1, 3, 3}, xv)}, {"label", labels}};
  float first = exe.run(main_prog, feed, {loss})[0].to_vector<float>()[0];
  float last = first;
  for (int s = 0; s < 30; ++s) last = exe.run(main_prog, feed, {loss})[0].to_vector<float>()[0];
  CHECK(last < 0.2f * first);
}

TEST_CASE("RMSNorm divides by the root mean square of the trailing axes and scales",
          "[frontend][layers]") {
  Program main_prog, startup;
  Value y, y_fn;
  {
    ProgramGuard guard(main_prog, startup);
    Value x = data("x", {2, 3});
    y = nn::RMSNorm({3})(x);
    y_fn = F::rms_norm(x, {3}, data("w", {3}), 0.5);
  }
  std::vector<float> xv{1, -2, 4, 0.5f, 0, 3}, wv{2, 1, -1};
  Executor exe;
  exe.run(startup);
  auto got = exe.run(main_prog, {{"x", f32({2, 3}, xv)}, {"w", f32({3}, wv)}}, {y, y_fn});
  std::vector<double> want, want_fn;
  for (int r = 0; r < 2; ++r) {
    double ms = 0;
    for (int i = 0; i < 3; ++i) ms += xv[r * 3 + i] * xv[r * 3 + i] / 3.0;
    for (int i = 0; i < 3; ++i) {
      want.push_back(xv[r * 3 + i] / std::sqrt(ms + 1e-6));
      want_fn.push_back(xv[r * 3 + i] / std::sqrt(ms + 0.5) * wv[i]);
    }
  }
  check_close(got[0].to_vector<float>(), want, 1e-5);
  check_close(got[1].to_vector<float>(), want_fn, 1e-5);
}

TEST_CASE("MultiHeadAttention projects, attends per head (optionally causally) and projects "
          "back, as the textbook formula with its own weights",
          "[frontend][layers]") {
  constexpr int B = 2, L = 3, E = 4, H = 2, D = E / H;
  for (bool causal : {false, true}) {
    DYNAMIC_SECTION("causal " << causal) {
      Program main_prog, startup;
      Value y;
      std::unique_ptr<nn::MultiHeadAttention> mha;
      {
        ProgramGuard guard(main_prog, startup);
        mha = std::make_unique<nn::MultiHeadAttention>(E, H);
        y = (*mha)(data("x", {-1, L, E}), causal);
      }
      auto params = mha->parameters();  // qkv_w, qkv_b, out_proj w, b
      REQUIRE(params.size() == 4);
      Executor exe;
      exe.run(startup);
      auto xv = wave(B * L * E);
      auto got = exe.run(main_prog, {{"x", f32({B, L, E}, xv)}},
                         {y, params[0], params[1], params[2], params[3]});
      auto wqkv = got[1].to_vector<float>(), bqkv = got[2].to_vector<float>();
      std::vector<double> x(xv.begin(), xv.end());
      auto qkv = affine(x, wqkv, bqkv, E, 3 * E);  // [B·L, 3E]
      std::vector<double> o(B * L * E);
      for (int b = 0; b < B; ++b)
        for (int h = 0; h < H; ++h)
          for (int i = 0; i < L; ++i) {
            std::vector<double> s(L, -INFINITY);
            double mx = -INFINITY;
            for (int j = 0; j < L; ++j) {
              if (causal && j > i) continue;
              double dot = 0;
              for (int d = 0; d < D; ++d)
                dot += qkv[(b * L + i) * 3 * E + h * D + d] * qkv[(b * L + j) * 3 * E + E + h * D + d];
              s[j] = dot / std::sqrt(double(D));
              mx = std::max(mx, s[j]);
            }
            double z = 0;
            for (int j = 0; j < L; ++j) z += std::exp(s[j] - mx);
            for (int d = 0; d < D; ++d) {
              double acc = 0;
              for (int j = 0; j < L; ++j)
                acc += std::exp(s[j] - mx) / z * qkv[(b * L + j) * 3 * E + 2 * E + h * D + d];
              o[(b * L + i) * E + h * D + d] = acc;
            }
          }
      auto want = affine(o, got[3].to_vector<float>(), got[4].to_vector<float>(), E, E);
      check_close(got[0].to_vector<float>(), want, 1e-5);
    }
  }
}

TEST_CASE("MultiHeadAttention with a separate key and value matches self-attention when they "
          "are the same tensor",
          "[frontend][layers]") {
  Program main_prog, startup;
  Value self, cross;
  {
    ProgramGuard guard(main_prog, startup);
    nn::MultiHeadAttention mha(6, 3);
    Value x = data("x", {2, 5, 6}), kv = data("kv", {2, 5, 6});
    self = mha(x);
    cross = mha(x, kv, kv);
  }
  Executor exe;
  exe.run(startup);
  auto xv = wave(60);
  auto got = exe.run(main_prog, {{"x", f32({2, 5, 6}, xv)}, {"kv", f32({2, 5, 6}, xv)}},
                     {self, cross});
  auto a = got[0].to_vector<float>();
  check_close(got[1].to_vector<float>(), std::vector<double>(a.begin(), a.end()), 1e-5);
}

TEST_CASE("MultiHeadAttention with key_lengths ignores each batch's padded keys and matches the "
          "unpadded batch",
          "[frontend][layers]") {
  Program main_prog, startup;
  Value padded, first, second;
  {
    ProgramGuard guard(main_prog, startup);
    nn::MultiHeadAttention mha(6, 3);
    Value x = data("x", {2, 4, 6}), kv = data("kv", {2, 5, 6}), lengths = data("n", {2}, DataType::Int64);
    padded = mha(x, kv, kv, false, lengths);
    // Each batch alone, its keys unpadded: batch 0 sees 3 keys, batch 1 all 5.
    Value x0 = data("x0", {1, 4, 6}), kv0 = data("kv0", {1, 3, 6});
    Value x1 = data("x1", {1, 4, 6}), kv1 = data("kv1", {1, 5, 6});
    first = mha(x0, kv0, kv0);
    second = mha(x1, kv1, kv1);
  }
  Executor exe;
  exe.run(startup);
  const auto xv = wave(48), kvv = wave(60);
  auto run = [&](std::vector<float> kv_values) {
    const std::vector<float> kv0(kv_values.begin(), kv_values.begin() + 18), kv1(kv_values.begin() + 30, kv_values.end());
    return exe.run(main_prog,
                   {{"x", f32({2, 4, 6}, xv)}, {"kv", f32({2, 5, 6}, kv_values)},
                    {"n", Tensor::from_vector<std::int64_t>({2}, {3, 5})},
                    {"x0", f32({1, 4, 6}, std::vector<float>(xv.begin(), xv.begin() + 24))}, {"kv0", f32({1, 3, 6}, kv0)},
                    {"x1", f32({1, 4, 6}, std::vector<float>(xv.begin() + 24, xv.end()))}, {"kv1", f32({1, 5, 6}, kv1)}},
                   {padded, first, second});
  };
  auto changed = kvv;
  for (std::size_t i = 18; i < 30; ++i) changed[i] = 100.f + static_cast<float>(i);  // batch 0's padding
  const auto a = run(kvv), b = run(changed);
  const auto pa = a[0].to_vector<float>(), pb = b[0].to_vector<float>();
  CHECK(pa == pb);  // the padding is never read into a result
  std::vector<double> want;
  for (int i : {1, 2})
    for (float v : a[i].to_vector<float>()) want.push_back(v);
  check_close(pa, want, 1e-5);
}

TEST_CASE("MultiHeadAttention with a lower-triangular bool attn_mask gives causal attention's result",
          "[frontend][layers][mask]") {
  Program main_prog, startup;
  Value masked, causal, biased;
  {
    ProgramGuard guard(main_prog, startup);
    nn::MultiHeadAttention mha(6, 3);
    Value x = data("x", {2, 5, 6}), mask = data("mask", {5, 5}, DataType::Bool);
    Value bias = data("bias", {1, 1, 5, 5});
    masked = mha(x, x, x, false, Value(), mask);
    causal = mha(x, true);
    biased = mha(x, x, x, false, Value(), bias);  // 0 / -inf: the same mask, added
  }
  Executor exe;
  exe.run(startup);
  Tensor tri = Tensor::empty(Dims({5, 5}), DataType::Bool);
  std::vector<float> add(25);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 5; ++j) {
      tri.data<bool>()[i * 5 + j] = j <= i;
      add[static_cast<std::size_t>(i * 5 + j)] = j <= i ? 0.f : -INFINITY;
    }
  auto got = exe.run(main_prog, {{"x", f32({2, 5, 6}, wave(60))}, {"mask", tri}, {"bias", f32({1, 1, 5, 5}, add)}},
                     {masked, causal, biased});
  const auto c = got[1].to_vector<float>();
  check_close(got[0].to_vector<float>(), std::vector<double>(c.begin(), c.end()), 1e-6);
  check_close(got[2].to_vector<float>(), std::vector<double>(c.begin(), c.end()), 1e-6);
}

TEST_CASE("a learned attention bias passed as attn_mask gets a gradient and trains",
          "[frontend][layers][mask]") {
  // The bias alone can make row i attend to key (i + 1) % L: training it
  // (the only parameter) toward that target lowers the loss.
  constexpr std::int64_t L = 4;
  Program main_prog, startup;
  Value loss, bias;
  {
    ProgramGuard guard(main_prog, startup);
    Value q = data("q", {1, 1, L, 2}), v = data("v", {1, 1, L, L}), target = data("t", {1, 1, L, L});
    bias = create_parameter("bias", {1, 1, L, L}, DataType::Float32, init::Constant(0.0));
    Value out = F::scaled_dot_product_attention(q, q, v, false, 0.0, Value(), bias);
    loss = F::mse_loss(out, target);
    const auto grads = append_backward(loss);
    REQUIRE(grads.size() == 1);
    CHECK(grads[0].second.defining_op()->isa<AttentionMaskGradOp>());
    optim::SGD(5.0).apply_gradients(grads);
  }
  Executor exe;
  exe.run(startup);
  std::vector<float> eye(L * L, 0.f), shifted(L * L, 0.f);
  for (std::int64_t i = 0; i < L; ++i) {
    eye[static_cast<std::size_t>(i * L + i)] = 1.f;
    shifted[static_cast<std::size_t>(i * L + (i + 1) % L)] = 1.f;
  }
  FeedMap feed{{"q", f32({1, 1, L, 2}, wave(2 * L))}, {"v", f32({1, 1, L, L}, eye)}, {"t", f32({1, 1, L, L}, shifted)}};
  const float first = exe.run(main_prog, feed, {loss})[0].to_vector<float>()[0];
  float last = first;
  for (int s = 0; s < 50; ++s) last = exe.run(main_prog, feed, {loss})[0].to_vector<float>()[0];
  CHECK(last < 0.3f * first);
}

TEST_CASE("grouped-query attention needs enable_gqa, and then its k and v of fewer heads get gradients and train",
          "[frontend][layers][gqa]") {
  constexpr std::int64_t L = 4;
  Program main_prog, startup;
  Value loss, k, v;
  std::vector<std::pair<Value, Value>> grads;
  {
    ProgramGuard guard(main_prog, startup);
    Value q = data("q", {1, 4, L, 2}), target = data("t", {1, 4, L, L});
    k = create_parameter("k", {1, 2, L, 2}, DataType::Float32, init::Uniform(-1.0, 1.0));
    v = create_parameter("v", {1, 2, L, L}, DataType::Float32, init::Constant(0.0));
    KILN_CHECK_ERROR(F::scaled_dot_product_attention(q, k, v), InvalidArgument,
                     {"scaled_dot_product_attention", "q has 4 heads, k has 2", "enable_gqa"});
    Value out = F::scaled_dot_product_attention(q, k, v, false, 0.0, Value(), Value(), /*enable_gqa=*/true);
    CHECK(shaped_dims(out.type()) == std::vector<std::int64_t>{1, 4, L, L});
    loss = F::mse_loss(out, target);
    grads = append_backward(loss);
    REQUIRE(grads.size() == 2);
    optim::SGD(2.0).apply_gradients(grads);
  }
  for (const auto& [param, grad] : grads) CHECK(shaped_dims(grad.type()) == shaped_dims(param.type()));
  Executor exe;
  exe.run(startup);
  // Query heads 0, 1 share k / v head 0, heads 2, 3 head 1: each pair's
  // target row is the same, which the shared v can fit.
  std::vector<float> target(4 * L * L);
  for (std::size_t i = 0; i < target.size(); ++i) target[i] = static_cast<float>((i / (2 * L * L)) + 1) * 0.5f;
  FeedMap feed{{"q", f32({1, 4, L, 2}, wave(8 * L))}, {"t", f32({1, 4, L, L}, target)}};
  const float first = exe.run(main_prog, feed, {loss})[0].to_vector<float>()[0];
  float last = first;
  for (int s = 0; s < 40; ++s) last = exe.run(main_prog, feed, {loss})[0].to_vector<float>()[0];
  CHECK(last < 0.01f * first);
}

TEST_CASE("a post-norm TransformerEncoderLayer (norm_first false) ends in a layer norm and stays causal; "
          "a pre-norm one ends in a residual sum",
          "[frontend][layers]") {
  Program main_prog, startup;
  Value post_y, pre_y, post_causal;
  {
    ProgramGuard guard(main_prog, startup);
    nn::TransformerEncoderLayer post(8, 2, 16, /*dropout=*/0.0, "gelu", 1e-5, DataType::Float32,
                                     /*norm_first=*/false);
    nn::TransformerEncoderLayer pre(8, 2, 16, /*dropout=*/0.0, "gelu");
    CHECK(!post.norm_first());
    CHECK(pre.norm_first());
    CHECK(post.parameters().size() == 12);
    Value x = data("x", {1, 4, 8});
    post_y = post(x), pre_y = pre(x), post_causal = post(x, true);
  }
  Executor exe;
  exe.run(startup);
  auto xv = wave(32), changed = xv;
  for (int d = 0; d < 8; ++d) changed[3 * 8 + d] += 0.5f * float(d);  // the last position only
  auto a = exe.run(main_prog, {{"x", f32({1, 4, 8}, xv)}}, {post_y, pre_y, post_causal});
  auto b = exe.run(main_prog, {{"x", f32({1, 4, 8}, changed)}}, {post_causal});
  // norm2's weight 1 and bias 0 at init: each position of the post-norm
  // output has mean 0 and variance 1; the pre-norm output has not.
  const auto post_v = a[0].to_vector<float>(), pre_v = a[1].to_vector<float>();
  double pre_off = 0;
  for (int i = 0; i < 4; ++i) {
    double mean = 0, var = 0, pre_mean = 0;
    for (int d = 0; d < 8; ++d) mean += post_v[i * 8 + d] / 8.0, pre_mean += pre_v[i * 8 + d] / 8.0;
    for (int d = 0; d < 8; ++d) var += (post_v[i * 8 + d] - mean) * (post_v[i * 8 + d] - mean) / 8.0;
    CHECK(std::abs(mean) < 1e-5);
    CHECK(std::abs(var - 1) < 1e-3);
    pre_off += std::abs(pre_mean);
  }
  CHECK(pre_off > 1e-2);
  const auto ac = a[2].to_vector<float>(), bc = b[0].to_vector<float>();
  for (int i = 0; i < 3 * 8; ++i) CHECK(ac[i] == bc[i]);
}

TEST_CASE("a causal TransformerEncoderLayer's output at a position does not depend on later "
          "positions; a non-causal one's does",
          "[frontend][layers]") {
  Program main_prog, startup;
  Value causal_y, full_y;
  {
    ProgramGuard guard(main_prog, startup);
    nn::TransformerEncoderLayer block(8, 2, 16, /*dropout=*/0.0, "gelu");
    CHECK(block.parameters().size() == 12);
    Value x = data("x", {1, 4, 8});
    causal_y = block(x, true);
    full_y = block(x);
  }
  Executor exe;
  exe.run(startup);
  auto xv = wave(32), changed = xv;
  // The last position only, not by a constant (which norm1 would remove).
  for (int d = 0; d < 8; ++d) changed[3 * 8 + d] += 0.5f * float(d);
  auto a = exe.run(main_prog, {{"x", f32({1, 4, 8}, xv)}}, {causal_y, full_y});
  auto b = exe.run(main_prog, {{"x", f32({1, 4, 8}, changed)}}, {causal_y, full_y});
  auto ac = a[0].to_vector<float>(), bc = b[0].to_vector<float>();
  auto af = a[1].to_vector<float>(), bf = b[1].to_vector<float>();
  for (int i = 0; i < 3 * 8; ++i) CHECK(ac[i] == bc[i]);
  double moved = 0;
  for (int i = 0; i < 3 * 8; ++i) moved += std::abs(af[i] - bf[i]);
  CHECK(moved > 1e-3);
}

TEST_CASE("a TransformerEncoderLayer with key_lengths gives each batch's real positions what its unpadded "
          "batch gives, and with a triangular attn_mask what a causal one gives",
          "[frontend][layers][mask]") {
  Program main_prog, startup;
  Value padded, alone, masked, causal;
  {
    ProgramGuard guard(main_prog, startup);
    nn::TransformerEncoderLayer block(8, 2, 16, /*dropout=*/0.0, "gelu");
    Value x = data("x", {2, 5, 8}), first = data("first", {1, 3, 8});
    Value lengths = data("n", {2}, DataType::Int32), tri = data("tri", {5, 5}, DataType::Bool);
    padded = block(x, false, lengths);
    alone = block(first);  // batch 0's 3 real positions, unpadded
    masked = block(x, false, Value(), tri);
    causal = block(x, true);
  }
  Executor exe;
  exe.run(startup);
  auto xv = wave(80);
  for (std::size_t i = 24; i < 40; ++i) xv[i] = 50.f;  // batch 0's padding (positions 3, 4)
  Tensor tri = Tensor::empty(Dims({5, 5}), DataType::Bool);
  for (int i = 0; i < 25; ++i) tri.data<bool>()[i] = i % 5 <= i / 5;
  auto got = exe.run(main_prog,
                     {{"x", f32({2, 5, 8}, xv)},
                      {"first", f32({1, 3, 8}, std::vector<float>(xv.begin(), xv.begin() + 24))},
                      {"n", Tensor::from_vector<std::int32_t>({2}, {3, 5})},
                      {"tri", tri}},
                     {padded, alone, masked, causal});
  const auto p = got[0].to_vector<float>();
  const auto a = got[1].to_vector<float>();
  check_close(std::vector<float>(p.begin(), p.begin() + 24), std::vector<double>(a.begin(), a.end()), 1e-5);
  const auto c = got[3].to_vector<float>();
  check_close(got[2].to_vector<float>(), std::vector<double>(c.begin(), c.end()), 1e-6);
}

TEST_CASE("Sequential chains its layers, gathers their parameters and passes train()/eval() "
          "down to them",
          "[frontend][layers]") {
  Program main_prog, startup;
  Value train_y, eval_y;
  std::unique_ptr<nn::Sequential> net;
  {
    ProgramGuard guard(main_prog, startup);
    auto inner = std::make_shared<nn::Sequential>(
        std::initializer_list<std::shared_ptr<nn::Layer>>{std::make_shared<nn::Linear>(3, 4),
                                                         std::make_shared<nn::Dropout>(0.5)});
    net = std::make_unique<nn::Sequential>(
        std::initializer_list<std::shared_ptr<nn::Layer>>{inner, std::make_shared<nn::ReLU>()});
    net->emplace<nn::Linear>(4, 2);
    Value x = data("x", {5, 3});
    train_y = (*net)(x);
    net->eval();
    CHECK_FALSE((*net)[0].training());
    eval_y = (*net)(x);
  }
  CHECK(net->size() == 3);
  CHECK(net->parameters().size() == 4);
  CHECK(shaped_dims(eval_y.type()) == std::vector<std::int64_t>{5, 2});
  CHECK(count_top_ops(main_prog, "kiln.dropout") == 1);  // the eval call built none
}

TEST_CASE("model layers reject bad configurations and inputs, naming the layer or op",
          "[frontend][layers]") {
  Program main_prog, startup;
  ProgramGuard guard(main_prog, startup);
  KILN_CHECK_ERROR(nn::Conv2D(3, 4, 3, 1, 0, 1, 2), InvalidArgument, {"Conv2D", "groups (2)"});
  KILN_CHECK_ERROR(nn::Conv2D(0, 4, 3), InvalidArgument, {"Conv2D", "in_channels"});
  KILN_CHECK_ERROR(nn::MultiHeadAttention(10, 3), InvalidArgument,
                   {"MultiHeadAttention", "num_heads (3)", "embed_dim (10)"});
  KILN_CHECK_ERROR(nn::TransformerEncoderLayer(8, 2, 16, 0.1, "swish"), InvalidArgument,
                   {"TransformerEncoderLayer", "swish"});
  KILN_CHECK_ERROR(nn::BatchNorm2D(4, 1.5), InvalidArgument, {"BatchNorm2D", "momentum"});
  nn::Conv2D conv(3, 4, 3);
  KILN_CHECK_ERROR(conv(data("x", {1, 2, 8, 8})), InvalidArgument,
                   {"kiln.conv2d", "channels"});
  KILN_CHECK_ERROR(nn::MaxPool2D(5)(data("small", {1, 1, 3, 3})), InvalidArgument,
                   {"kiln.max_pool2d"});
  KILN_CHECK_ERROR(nn::BatchNorm2D(4)(data("flat", {2, 4})), InvalidArgument,
                   {"BatchNorm2D", "[N, C, H, W]"});
  nn::MultiHeadAttention mha(8, 2);
  KILN_CHECK_ERROR(mha(data("q", {2, 3, 6})), InvalidArgument, {"MultiHeadAttention", "[B, L, 8]"});
  KILN_CHECK_ERROR(F::conv2d(data("x2", {1, 3, 8, 8}), data("w", {4, 3, 3, 3}), data("b", {3})),
                   InvalidArgument, {"conv2d", "bias must be [4]"});
  KILN_CHECK_ERROR(nn::ReLU().forward(Value{}), InvalidArgument, {"relu"});
}

TEST_CASE("a TransformerDecoderLayer's output at a target position ignores later target positions when causal and "
          "memory past its key lengths, and follows the rest of the memory",
          "[frontend][layers][decoder]") {
  Program main_prog, startup;
  Value y;
  {
    ProgramGuard guard(main_prog, startup);
    nn::TransformerDecoderLayer dec(8, 2, 16, /*dropout=*/0.0, "gelu");
    CHECK(dec.parameters().size() == 18);  // two attentions (4 each), three norms, two linears
    KILN_CHECK_ERROR(dec(data("lone", {1, 4, 8})), InvalidArgument, {"transformer_decoder_layer", "no single input"});
    y = dec(data("tgt", {1, 4, 8}), data("mem", {1, 5, 8}), /*tgt_is_causal=*/true, Value(),
            data("mem_len", {1}, DataType::Int64));
  }
  Executor exe;
  exe.run(startup);
  const auto tgt = wave(32), mem = wave(40, 0.7f);
  const Tensor len = Tensor::from_vector<std::int64_t>({1}, {3});
  auto run = [&](const std::vector<float>& t, const std::vector<float>& m) {
    return exe.run(main_prog, {{"tgt", f32({1, 4, 8}, t)}, {"mem", f32({1, 5, 8}, m)}, {"mem_len", len}}, {y})[0]
        .to_vector<float>();
  };
  const auto base = run(tgt, mem);
  auto later = tgt, padded = mem, seen = mem;
  for (int d = 0; d < 8; ++d) later[3 * 8 + d] += 0.5f * float(d);  // the last target position
  for (int d = 0; d < 8; ++d) padded[4 * 8 + d] += 1.0f + float(d);  // memory position 4, past length 3
  for (int d = 0; d < 8; ++d) seen[0 * 8 + d] += 0.5f * float(d);    // memory position 0
  const auto a = run(later, mem), p = run(tgt, padded), s = run(tgt, seen);
  for (int i = 0; i < 3 * 8; ++i) CHECK(a[i] == base[i]);
  CHECK(p == base);
  double moved = 0;
  for (std::size_t i = 0; i < base.size(); ++i) moved += std::abs(s[i] - base[i]);
  CHECK(moved > 1e-3);
}

TEST_CASE("a post-norm TransformerDecoderLayer ends in its third layer norm, and a decoder layer trains",
          "[frontend][layers][decoder]") {
  Program main_prog, startup;
  Value y, loss;
  {
    ProgramGuard guard(main_prog, startup);
    nn::TransformerDecoderLayer dec(8, 2, 16, /*dropout=*/0.0, "relu", 1e-5, DataType::Float32,
                                    /*norm_first=*/false);
    CHECK(!dec.norm_first());
    y = dec(data("tgt", {2, 4, 8}), data("mem", {2, 5, 8}), true);
    loss = F::mse_loss(y, data("label", {2, 4, 8}));
    optim::Adam(0.01).minimize(loss);
  }
  Executor exe;
  exe.run(startup);
  FeedMap feed{{"tgt", f32({2, 4, 8}, wave(64))}, {"mem", f32({2, 5, 8}, wave(80, 0.3f))},
               {"label", f32({2, 4, 8}, wave(64, 1.1f))}};
  auto first = exe.run(main_prog, feed, {y, loss});
  const auto v = first[0].to_vector<float>();
  for (int i = 0; i < 8; ++i) {  // norm3's weight 1 and bias 0 at init
    double mean = 0, var = 0;
    for (int d = 0; d < 8; ++d) mean += v[i * 8 + d] / 8.0;
    for (int d = 0; d < 8; ++d) var += (v[i * 8 + d] - mean) * (v[i * 8 + d] - mean) / 8.0;
    CHECK(std::abs(mean) < 1e-5);
    CHECK(std::abs(var - 1) < 1e-3);
  }
  const float start = first[1].to_vector<float>()[0];
  float last = start;
  for (int step = 0; step < 60; ++step) last = exe.run(main_prog, feed, {loss})[0].to_vector<float>()[0];
  CHECK(last < 0.5f * start);
  KILN_CHECK_ERROR(nn::TransformerDecoderLayer(8, 2, 16, 0.1, "swish"), InvalidArgument,
                   {"TransformerDecoderLayer", "swish"});
}

TEST_CASE("a TransformerDecoderLayer masks the target by its key lengths and the memory by memory_mask",
          "[frontend][layers][decoder]") {
  Program main_prog, startup;
  Value y;
  {
    ProgramGuard guard(main_prog, startup);
    nn::TransformerDecoderLayer dec(8, 2, 16, /*dropout=*/0.0, "gelu");
    y = dec(data("tgt", {1, 4, 8}), data("mem", {1, 5, 8}), /*tgt_is_causal=*/false,
            data("tgt_len", {1}, DataType::Int32), Value(), Value(), data("mem_mask", {4, 5}, DataType::Bool));
  }
  Executor exe;
  exe.run(startup);
  Tensor mask = Tensor::empty(Dims({4, 5}), DataType::Bool);
  for (int i = 0; i < 20; ++i) mask.data<bool>()[i] = i % 5 != 1;  // no target position sees memory position 1
  const Tensor len = Tensor::from_vector<std::int32_t>({1}, {3});
  auto run = [&](const std::vector<float>& t, const std::vector<float>& m) {
    return exe.run(main_prog, {{"tgt", f32({1, 4, 8}, t)}, {"mem", f32({1, 5, 8}, m)}, {"tgt_len", len},
                               {"mem_mask", mask}},
                   {y})[0]
        .to_vector<float>();
  };
  const auto tgt = wave(32), mem = wave(40, 0.7f);
  const auto base = run(tgt, mem);
  auto padded_tgt = tgt, hidden = mem, seen = mem;
  for (int d = 0; d < 8; ++d) padded_tgt[3 * 8 + d] += 0.5f * float(d);  // target position 3, past length 3
  for (int d = 0; d < 8; ++d) hidden[1 * 8 + d] += 1.0f + float(d);      // memory position 1, masked
  for (int d = 0; d < 8; ++d) seen[2 * 8 + d] += 0.5f * float(d);        // memory position 2
  const auto a = run(padded_tgt, mem), h = run(tgt, hidden), s = run(tgt, seen);
  for (int i = 0; i < 3 * 8; ++i) CHECK(a[i] == base[i]);  // only position 3's own output moves
  CHECK(h == base);
  double moved = 0;
  for (std::size_t i = 0; i < base.size(); ++i) moved += std::abs(s[i] - base[i]);
  CHECK(moved > 1e-3);
}

TEST_CASE("MultiHeadAttention with dropout drops attention probabilities while training, a new mask each run; "
          "eval() and the for-test clone attend without dropout",
          "[frontend][layers][dropout]") {
  constexpr int B = 2, L = 6, E = 8, H = 2;
  Program main_prog, startup, eval_prog;
  Value y, y_eval;
  std::unique_ptr<nn::MultiHeadAttention> mha;
  {
    ProgramGuard guard(main_prog, startup);
    mha = std::make_unique<nn::MultiHeadAttention>(E, H, true, DataType::Float32, 0.5);
    y = (*mha)(data("x", {B, L, E}), true);
  }
  CHECK(count_top_ops(main_prog, "kiln.random_key") == 1);
  Operation* att = nullptr;
  for (Operation* op : main_prog.block())
    if (op->isa<ScaledDotProductAttentionOp>()) att = op;
  REQUIRE(att);
  CHECK(ScaledDotProductAttentionOp::dyn_cast(att).attrs().dropout_p == 0.5);
  {
    ProgramGuard guard(eval_prog, startup);
    mha->eval();
    y_eval = (*mha)(data("x", {B, L, E}), true);
  }
  CHECK(count_top_ops(eval_prog, "kiln.random_key") == 0);
  Executor exe;
  exe.run(startup);
  const FeedMap feed{{"x", f32({B, L, E}, wave(B * L * E))}};
  const auto first = exe.run(main_prog, feed, {y})[0].to_vector<float>();
  const auto second = exe.run(main_prog, feed, {y})[0].to_vector<float>();
  CHECK(first != second);
  const auto plain = exe.run(eval_prog, feed, {y_eval})[0].to_vector<float>();
  CHECK(first != plain);
  IrMapping map;
  const Program test = clone_for_test(main_prog, &map);
  CHECK(exe.run(test, feed, {map.lookup(y)})[0].to_vector<float>() == plain);
  // An evaluation run draws no key: the training run after it drops what it
  // would have dropped without it.
  set_random_seed(5);
  exe.run(test, feed, {map.lookup(y)});
  const auto after_eval = exe.run(main_prog, feed, {y})[0].to_vector<float>();
  set_random_seed(5);
  CHECK(exe.run(main_prog, feed, {y})[0].to_vector<float>() == after_eval);
}

TEST_CASE("attention dropout with a fixed seed draws the same mask every run, with seed 0 a new one; "
          "its gradient trains",
          "[frontend][layers][dropout]") {
  constexpr std::int64_t L = 8;
  Program fwd, main_prog, startup;
  Value fixed, fresh, loss;
  const FeedMap feed{{"q", f32({1, 2, L, 4}, wave(2 * L * 4))}, {"t", f32({1, 2, L, 4}, wave(2 * L * 4, 1.f))}};
  {
    ProgramGuard guard(fwd, startup);
    Value q = data("q", {1, 2, L, 4});
    KILN_CHECK_ERROR(F::scaled_dot_product_attention(q, q, q, false, 0.0, Value(), Value(), false, 1.0),
                     InvalidArgument, {"scaled_dot_product_attention", "dropout_p must lie in [0, 1)"});
    fixed = F::scaled_dot_product_attention(q, q, q, false, 0.0, Value(), Value(), false, 0.25, /*seed=*/17);
    fresh = F::scaled_dot_product_attention(q, q, q, false, 0.0, Value(), Value(), false, 0.25);
  }
  {
    ProgramGuard guard(main_prog, startup);
    Value q = data("q", {1, 2, L, 4}), target = data("t", {1, 2, L, 4});
    Value v = create_parameter("v", {1, 2, L, 4}, DataType::Float32, init::Constant(0.0));
    loss = F::mse_loss(F::scaled_dot_product_attention(q, q, v, false, 0.0, Value(), Value(), false, 0.25, 17),
                       target);
    optim::SGD(5.0).minimize(loss);
  }
  Executor exe;
  exe.run(startup);
  const FeedMap q_only{{"q", feed.at("q")}};
  const auto a = exe.run(fwd, q_only, {fixed, fresh});
  const auto b = exe.run(fwd, q_only, {fixed, fresh});
  CHECK(a[0].to_vector<float>() == b[0].to_vector<float>());
  CHECK(a[1].to_vector<float>() != b[1].to_vector<float>());
  const float first = exe.run(main_prog, feed, {loss})[0].to_vector<float>()[0];
  float last = first;
  for (int s = 0; s < 60; ++s) last = exe.run(main_prog, feed, {loss})[0].to_vector<float>()[0];
  CHECK(last < 0.5f * first);
}

TEST_CASE("a TransformerEncoder runs its layers in turn, each with parameters of its own, then its norm",
          "[frontend][layers][encoder]") {
  Program main_prog, startup;
  Value y, by_hand, unnormed;
  {
    ProgramGuard guard(main_prog, startup);
    const auto make = [] { return std::make_shared<nn::TransformerEncoderLayer>(8, 2, 16, 0.0, "gelu"); };
    nn::TransformerEncoder enc(make, 3, std::make_shared<nn::LayerNorm>(std::vector<std::int64_t>{8}));
    nn::TransformerEncoder bare(make, 2);
    CHECK(enc.num_layers() == 3);
    CHECK(enc.parameters().size() == 3 * 12 + 2);  // per layer: attention 4, two norms, two linears; the norm
    CHECK_FALSE(enc.layer(0).parameters()[0] == enc.layer(1).parameters()[0]);
    Value x = data("x", {2, 5, 8}), n = data("n", {2}, DataType::Int32);
    y = enc(x, /*causal=*/true, n);
    Value h = x;
    for (std::size_t i = 0; i < 3; ++i) h = enc.layer(i)(h, true, n);
    by_hand = nn::LayerNorm({8})(h);  // a fresh norm: weight 1, bias 0, as enc's before training
    unnormed = bare(x);
    KILN_CHECK_ERROR(nn::TransformerEncoder(make, 0), InvalidArgument, {"TransformerEncoder", "num_layers"});
    KILN_CHECK_ERROR(nn::TransformerEncoder([] { return std::shared_ptr<nn::TransformerEncoderLayer>(); }, 2),
                     InvalidArgument, {"TransformerEncoder", "make_layer gave no layer for layer 0"});
  }
  Executor exe;
  exe.run(startup);
  const FeedMap feed{{"x", f32({2, 5, 8}, wave(80))}, {"n", Tensor::from_vector<std::int32_t>({2}, {5, 3})}};
  const auto got = exe.run(main_prog, feed, {y, by_hand, unnormed});
  CHECK(got[0].to_vector<float>() == got[1].to_vector<float>());
  CHECK(got[2].to_vector<float>() != got[0].to_vector<float>());
}

TEST_CASE("a TransformerDecoder runs its layers in turn over one memory, then its norm, and needs the memory",
          "[frontend][layers][decoder]") {
  Program main_prog, startup;
  Value y, by_hand;
  {
    ProgramGuard guard(main_prog, startup);
    const auto make = [] { return std::make_shared<nn::TransformerDecoderLayer>(8, 2, 16, 0.0, "relu"); };
    nn::TransformerDecoder dec(make, 2, std::make_shared<nn::LayerNorm>(std::vector<std::int64_t>{8}));
    CHECK(dec.num_layers() == 2);
    CHECK(dec.parameters().size() == 2 * 18 + 2);
    Value tgt = data("tgt", {1, 4, 8}), mem = data("mem", {1, 6, 8}), ml = data("ml", {1}, DataType::Int64);
    KILN_CHECK_ERROR(dec(tgt), InvalidArgument, {"transformer_decoder", "no single input"});
    y = dec(tgt, mem, /*tgt_is_causal=*/true, Value(), ml);
    Value h = tgt;
    for (std::size_t i = 0; i < 2; ++i) h = dec.layer(i)(h, mem, true, Value(), ml);
    by_hand = nn::LayerNorm({8})(h);
    KILN_CHECK_ERROR(nn::TransformerDecoder(make, -1), InvalidArgument, {"TransformerDecoder", "num_layers"});
  }
  Executor exe;
  exe.run(startup);
  const FeedMap feed{{"tgt", f32({1, 4, 8}, wave(32))}, {"mem", f32({1, 6, 8}, wave(48, 0.3f))},
                     {"ml", Tensor::from_vector<std::int64_t>({1}, {4})}};
  const auto got = exe.run(main_prog, feed, {y, by_hand});
  CHECK(got[0].to_vector<float>() == got[1].to_vector<float>());
}

TEST_CASE("MultiHeadAttention with kdim and vdim attends to a memory of other widths with weights of its own",
          "[frontend][layers]") {
  constexpr int B = 2, Lq = 3, Lk = 4, E = 4, H = 2, D = E / H, KD = 6, VD = 3;
  Program main_prog, startup;
  Value y;
  std::unique_ptr<nn::MultiHeadAttention> mha;
  {
    ProgramGuard guard(main_prog, startup);
    mha = std::make_unique<nn::MultiHeadAttention>(E, H, true, DataType::Float32, 0.0, KD, VD);
    Value q = data("q", {B, Lq, E}), k = data("k", {B, Lk, KD}), v = data("v", {B, Lk, VD});
    KILN_CHECK_ERROR((*mha)(q), InvalidArgument, {"multi_head_attention", "key", "must be [B, L, 6]", "kdim"});
    KILN_CHECK_ERROR((*mha)(q, k, k), InvalidArgument, {"multi_head_attention", "value", "must be [B, L, 3]"});
    y = (*mha)(q, k, v);
  }
  KILN_CHECK_ERROR(nn::MultiHeadAttention(E, H, true, DataType::Float32, 0.0, -1), InvalidArgument,
                   {"MultiHeadAttention", "kdim"});
  const auto params = mha->parameters();  // q_w, k_w, v_w, qkv_b, out_proj w, b
  REQUIRE(params.size() == 6);
  CHECK(shaped_dims(params[1].type()) == std::vector<std::int64_t>{KD, E});
  CHECK(shaped_dims(params[2].type()) == std::vector<std::int64_t>{VD, E});
  Executor exe;
  exe.run(startup);
  const auto qv = wave(B * Lq * E), kv = wave(B * Lk * KD, 0.4f), vv = wave(B * Lk * VD, 0.9f);
  auto got = exe.run(main_prog, {{"q", f32({B, Lq, E}, qv)}, {"k", f32({B, Lk, KD}, kv)}, {"v", f32({B, Lk, VD}, vv)}},
                     {y, params[0], params[1], params[2], params[3], params[4], params[5]});
  const auto bias = got[4].to_vector<float>();
  const std::vector<float> bq(bias.begin(), bias.begin() + E), bk(bias.begin() + E, bias.begin() + 2 * E),
      bv(bias.begin() + 2 * E, bias.end());
  const auto qp = affine(std::vector<double>(qv.begin(), qv.end()), got[1].to_vector<float>(), bq, E, E);
  const auto kp = affine(std::vector<double>(kv.begin(), kv.end()), got[2].to_vector<float>(), bk, KD, E);
  const auto vp = affine(std::vector<double>(vv.begin(), vv.end()), got[3].to_vector<float>(), bv, VD, E);
  std::vector<double> o(B * Lq * E);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < Lq; ++i) {
        std::vector<double> s(Lk);
        double mx = -INFINITY, z = 0;
        for (int j = 0; j < Lk; ++j) {
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += qp[(b * Lq + i) * E + h * D + d] * kp[(b * Lk + j) * E + h * D + d];
          mx = std::max(mx, s[j] = dot / std::sqrt(double(D)));
        }
        for (int j = 0; j < Lk; ++j) z += std::exp(s[j] - mx);
        for (int d = 0; d < D; ++d) {
          double acc = 0;
          for (int j = 0; j < Lk; ++j) acc += std::exp(s[j] - mx) / z * vp[(b * Lk + j) * E + h * D + d];
          o[(b * Lq + i) * E + h * D + d] = acc;
        }
      }
  check_close(got[0].to_vector<float>(), affine(o, got[5].to_vector<float>(), got[6].to_vector<float>(), E, E), 1e-5);
}

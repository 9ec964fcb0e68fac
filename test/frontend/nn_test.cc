// kiln::nn layers, losses and functional forms: each output
// against a hand computation (plain loops), run through the Executor; the
// seed's program front half (seed 001 opening example); bad inputs.
#include <algorithm>
#include <cmath>

#include "frontend/frontend_test_util.h"

using namespace kiln;
using namespace kiln_frontend_test;
namespace F = kiln::nn::functional;

namespace {

std::vector<float> ramp(std::size_t n, float start, float step) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = start + step * float(i);
  return v;
}

void check_close(const std::vector<float>& got, const std::vector<double>& want, double tol = 1e-5) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(std::abs(double(got[i]) - want[i]) <= tol * (1 + std::abs(want[i])));
  }
}

}  // namespace

TEST_CASE("the seed's program: x[16,16] → Linear(16,1) → MSELoss against label[16,1]",
          "[frontend]") {
  UniqueNameGuard names;
  Program main_prog, startup;
  Value x, label, out, loss;
  std::unique_ptr<nn::Linear> fc;
  {
    ProgramGuard guard(main_prog, startup);
    x = data("x", {16, 16});
    label = data("label", {16, 1});
    fc = std::make_unique<nn::Linear>(16, 1);
    out = (*fc)(x);
    loss = nn::MSELoss()(out, label);
  }
  CHECK(out.type() == TensorType::get(DataType::Float32, {16, 1}));
  CHECK(shaped_dims(loss.type()).empty());  // a scalar
  CHECK(op_names(main_prog) ==
        std::vector<std::string>{"kiln.data", "kiln.data", "builtin.parameter", "builtin.parameter",
                                 "kiln.matmul", "kiln.add", "kiln.sub", "kiln.square", "kiln.mean"});
  CHECK(op_names(startup) == std::vector<std::string>{"kiln.uniform_random", "builtin.set_parameter",
                                                      "kiln.uniform_random", "builtin.set_parameter"});
  main_prog.verify();
  startup.verify();

  Executor exe;
  exe.run(startup);
  auto xv = ramp(256, -1.f, 0.01f);
  auto yv = ramp(16, 0.5f, -0.1f);
  auto got = exe.run(main_prog, {{"x", f32({16, 16}, xv)}, {"label", f32({16, 1}, yv)}},
                     {loss, fc->weight(), fc->bias()});
  auto w = got[1].to_vector<float>();
  auto b = got[2].to_vector<float>();
  REQUIRE(w.size() == 16);
  // PyTorch's Linear init: U(±1/√16) for both.
  for (float e : w) CHECK(std::abs(e) <= 0.25f);
  CHECK(std::abs(b[0]) <= 0.25f);
  double sum = 0;
  for (int i = 0; i < 16; ++i) {
    double o = b[0];
    for (int k = 0; k < 16; ++k) o += double(xv[i * 16 + k]) * w[k];
    sum += (o - yv[i]) * (o - yv[i]);
  }
  check_close(got[0].to_vector<float>(), {sum / 16});
  // The parameters are the root scope's: a second run reads the same ones.
  auto again = exe.run(main_prog, {{"x", f32({16, 16}, xv)}, {"label", f32({16, 1}, yv)}}, {loss});
  CHECK(again[0].to_vector<float>() == got[0].to_vector<float>());
}

TEST_CASE("Linear computes x·W + b with W [in, out] and a batch of -1", "[frontend]") {
  Program main_prog, startup;
  Value y, y_nobias;
  std::unique_ptr<nn::Linear> fc, fc2;
  {
    ProgramGuard guard(main_prog, startup);
    Value x = data("x", {-1, 3});
    fc = std::make_unique<nn::Linear>(3, 2, true, std::make_shared<init::Normal>(0.0, 1.0),
                                      std::make_shared<init::Normal>(0.0, 1.0));
    fc2 = std::make_unique<nn::Linear>(3, 2, false);
    y = (*fc)(x);
    y_nobias = (*fc2)(x);
  }
  CHECK(y.type() == TensorType::get(DataType::Float32, {-1, 2}));
  Executor exe;
  exe.run(startup);
  auto xv = ramp(12, -2.f, 0.37f);
  auto got = exe.run(main_prog, {{"x", f32({4, 3}, xv)}}, {y, y_nobias, fc->weight(), fc->bias(),
                                                          fc2->weight()});
  auto w = got[2].to_vector<float>(), b = got[3].to_vector<float>(), w2 = got[4].to_vector<float>();
  std::vector<double> want, want2;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 2; ++j) {
      double o = b[j], o2 = 0;
      for (int k = 0; k < 3; ++k) {
        o += double(xv[i * 3 + k]) * w[k * 2 + j];
        o2 += double(xv[i * 3 + k]) * w2[k * 2 + j];
      }
      want.push_back(o);
      want2.push_back(o2);
    }
  check_close(got[0].to_vector<float>(), want);
  check_close(got[1].to_vector<float>(), want2);
}

TEST_CASE("activations: ReLU, GELU, Tanh, Sigmoid, Softmax against their formulas", "[frontend]") {
  Program main_prog, startup;
  Value r, g, ga, t, s, sm;
  {
    ProgramGuard guard(main_prog, startup);
    Value x = data("x", {2, 3});
    r = nn::ReLU()(x);
    g = nn::GELU()(x);
    ga = nn::GELU(true)(x);
    t = nn::Tanh()(x);
    s = nn::Sigmoid()(x);
    sm = nn::Softmax()(x);
  }
  std::vector<float> xv{-2.f, -0.5f, 0.f, 0.25f, 1.f, 3.f};
  Executor exe;
  auto got = exe.run(main_prog, {{"x", f32({2, 3}, xv)}}, {r, g, ga, t, s, sm});
  std::vector<double> wr, wg, wga, wt, ws, wsm;
  for (float f : xv) {
    double v = f;
    wr.push_back(std::max(v, 0.0));
    wg.push_back(0.5 * v * (1 + std::erf(v / std::sqrt(2.0))));
    wga.push_back(0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))));
    wt.push_back(std::tanh(v));
    ws.push_back(1 / (1 + std::exp(-v)));
  }
  for (int i = 0; i < 2; ++i) {
    double z = 0;
    for (int j = 0; j < 3; ++j) z += std::exp(double(xv[i * 3 + j]));
    for (int j = 0; j < 3; ++j) wsm.push_back(std::exp(double(xv[i * 3 + j])) / z);
  }
  check_close(got[0].to_vector<float>(), wr);
  check_close(got[1].to_vector<float>(), wg);
  check_close(got[2].to_vector<float>(), wga);
  check_close(got[3].to_vector<float>(), wt);
  check_close(got[4].to_vector<float>(), ws);
  check_close(got[5].to_vector<float>(), wsm);
}

TEST_CASE("Dropout zeroes or upscales in training and is the identity in eval", "[frontend]") {
  Program main_prog, startup;
  Value train_out, eval_out, x;
  {
    ProgramGuard guard(main_prog, startup);
    x = data("x", {100, 100});
    nn::Dropout drop(0.25);
    CHECK(drop.training());
    train_out = drop(x);
    drop.eval();
    eval_out = drop(x);
  }
  CHECK(eval_out == x);  // no op at all in eval mode
  CHECK(count_top_ops(main_prog, "kiln.dropout") == 1);
  Executor exe;
  auto got = exe.run(main_prog, {{"x", f32({100, 100}, std::vector<float>(10000, 3.f))}},
                     {train_out})[0].to_vector<float>();
  std::size_t kept = 0;
  for (float v : got) {
    CHECK((v == 0.f || std::abs(v - 4.f) < 1e-6f));
    kept += v != 0.f;
  }
  CHECK(std::abs(double(kept) / 10000 - 0.75) < 0.03);
  KILN_CHECK_ERROR(nn::Dropout(1.0), InvalidArgument, {"Dropout", "[0, 1)"});
}

TEST_CASE("Embedding looks up rows of its weight by int64 id", "[frontend]") {
  Program main_prog, startup;
  Value out;
  std::unique_ptr<nn::Embedding> emb;
  {
    ProgramGuard guard(main_prog, startup);
    Value ids = data("ids", {-1, 2}, DataType::Int64);
    emb = std::make_unique<nn::Embedding>(5, 3);
    out = (*emb)(ids);
  }
  CHECK(out.type() == TensorType::get(DataType::Float32, {-1, 2, 3}));
  Executor exe;
  exe.run(startup);
  std::vector<std::int64_t> idv{4, 0, 2, 4};
  auto got = exe.run(main_prog, {{"ids", Tensor::from_vector<std::int64_t>(Dims({2, 2}), idv)}},
                     {out, emb->weight()});
  auto w = got[1].to_vector<float>();
  std::vector<double> want;
  for (auto id : idv)
    for (int d = 0; d < 3; ++d) want.push_back(w[std::size_t(id * 3 + d)]);
  check_close(got[0].to_vector<float>(), want, 0);
  KILN_CHECK_ERROR(nn::Embedding(5, 3, 5), InvalidArgument, {"padding_idx"});
}

TEST_CASE("LayerNorm normalizes the trailing axes, then scales and shifts", "[frontend]") {
  Program main_prog, startup;
  Value y_layer, y_fn;
  {
    ProgramGuard guard(main_prog, startup);
    Value x = data("x", {2, 2, 3});
    Value w = data("w", {2, 3}), b = data("b", {2, 3});
    y_layer = nn::LayerNorm({3}, 1e-5)(x);                  // weight 1, bias 0
    y_fn = F::layer_norm(x, {2, 3}, w, b, 0.1);              // over the last two axes
  }
  auto xv = std::vector<float>{1, 2, 4, -1, 0, 7, 3, 3, 3, 0.5f, -2, 1};
  auto wv = std::vector<float>{1, 2, 3, -1, 0.5f, 2};
  auto bv = std::vector<float>{0, 1, -1, 2, 0, 0.25f};
  Executor exe;
  exe.run(startup);
  auto got = exe.run(main_prog, {{"x", f32({2, 2, 3}, xv)}, {"w", f32({2, 3}, wv)},
                                 {"b", f32({2, 3}, bv)}}, {y_layer, y_fn});
  auto normalize = [&](int start, int n, double eps, std::vector<double>& out, bool affine) {
    double m = 0, var = 0;
    for (int i = 0; i < n; ++i) m += xv[start + i];
    m /= n;
    for (int i = 0; i < n; ++i) var += (xv[start + i] - m) * (xv[start + i] - m);
    var /= n;
    for (int i = 0; i < n; ++i) {
      double v = (xv[start + i] - m) / std::sqrt(var + eps);
      out.push_back(affine ? v * wv[i] + bv[i] : v);
    }
  };
  std::vector<double> want_layer, want_fn;
  for (int r = 0; r < 4; ++r) normalize(r * 3, 3, 1e-5, want_layer, false);
  for (int r = 0; r < 2; ++r) normalize(r * 6, 6, 0.1, want_fn, true);
  check_close(got[0].to_vector<float>(), want_layer, 1e-4);
  check_close(got[1].to_vector<float>(), want_fn, 1e-5);
}

TEST_CASE("MSELoss and L1Loss with mean, sum and none reductions", "[frontend]") {
  Program main_prog, startup;
  std::vector<Value> outs;
  {
    ProgramGuard guard(main_prog, startup);
    Value a = data("a", {2, 3}), l = data("l", {2, 3});
    for (auto r : {nn::Reduction::Mean, nn::Reduction::Sum, nn::Reduction::None}) {
      outs.push_back(nn::MSELoss(r)(a, l));
      outs.push_back(nn::L1Loss(r)(a, l));
    }
  }
  CHECK(shaped_dims(outs[0].type()).empty());
  CHECK(shaped_dims(outs[4].type()) == std::vector<std::int64_t>{2, 3});
  std::vector<float> av{1, -2, 3, 0.5f, 0, 4}, lv{0, 1, 3, -0.5f, 2, 1};
  Executor exe;
  std::vector<FetchTarget> fetch(outs.begin(), outs.end());
  auto got = exe.run(main_prog, {{"a", f32({2, 3}, av)}, {"l", f32({2, 3}, lv)}}, fetch);
  std::vector<double> sq, ab;
  double ssq = 0, sab = 0;
  for (int i = 0; i < 6; ++i) {
    double d = double(av[i]) - lv[i];
    sq.push_back(d * d);
    ab.push_back(std::abs(d));
    ssq += d * d;
    sab += std::abs(d);
  }
  check_close(got[0].to_vector<float>(), {ssq / 6});
  check_close(got[1].to_vector<float>(), {sab / 6});
  check_close(got[2].to_vector<float>(), {ssq});
  check_close(got[3].to_vector<float>(), {sab});
  check_close(got[4].to_vector<float>(), sq);
  check_close(got[5].to_vector<float>(), ab);
}

TEST_CASE("CrossEntropyLoss: softmax cross-entropy with int64 labels, mean/sum/none",
          "[frontend]") {
  Program main_prog, startup;
  Value mean, sum, none;
  {
    ProgramGuard guard(main_prog, startup);
    Value logits = data("logits", {3, 4});
    Value label = data("label", {3, 1}, DataType::Int64);
    mean = nn::CrossEntropyLoss()(logits, label);
    sum = nn::CrossEntropyLoss(nn::Reduction::Sum)(logits, label);
    none = F::cross_entropy(logits, label, nn::Reduction::None);
  }
  CHECK(shaped_dims(none.type()) == std::vector<std::int64_t>{3, 1});
  std::vector<float> lv{0.1f, 2.f, -1.f, 0.f, 1.f, 1.f, 1.f, 1.f, -3.f, 0.5f, 4.f, 2.f};
  std::vector<std::int64_t> yv{1, 3, 0};
  Executor exe;
  auto got = exe.run(main_prog, {{"logits", f32({3, 4}, lv)},
                                 {"label", Tensor::from_vector<std::int64_t>(Dims({3, 1}), yv)}},
                     {mean, sum, none});
  std::vector<double> per;
  double total = 0;
  for (int i = 0; i < 3; ++i) {
    double z = 0;
    for (int j = 0; j < 4; ++j) z += std::exp(double(lv[i * 4 + j]));
    per.push_back(-(double(lv[i * 4 + yv[i]]) - std::log(z)));
    total += per.back();
  }
  check_close(got[0].to_vector<float>(), {total / 3});
  check_close(got[1].to_vector<float>(), {total});
  check_close(got[2].to_vector<float>(), per);
}

TEST_CASE("cross_entropy's mean divides by the rows not labelled ignore_index, as PyTorch",
          "[frontend]") {
  Program main_prog, startup;
  Value mean, sum;
  {
    ProgramGuard guard(main_prog, startup);
    Value logits = data("logits", {4, 3});
    Value label = data("label", {4}, DataType::Int64);
    mean = F::cross_entropy(logits, label, nn::Reduction::Mean, /*ignore_index=*/7);
    sum = F::cross_entropy(logits, label, nn::Reduction::Sum, 7);
  }
  std::vector<float> lv{1, 2, 3, 0, 0, 0, -1, 4, 0.5f, 2, 2, -2};
  auto run = [&](std::vector<std::int64_t> yv) {
    Executor exe;
    return exe.run(main_prog, {{"logits", f32({4, 3}, lv)},
                               {"label", Tensor::from_vector<std::int64_t>(Dims({4}), yv)}},
                   {mean, sum});
  };
  auto got = run({2, 7, 1, 7});
  double total = 0;
  for (int i : {0, 2}) {
    double z = 0;
    for (int j = 0; j < 3; ++j) z += std::exp(double(lv[i * 3 + j]));
    total += std::log(z) - lv[i * 3 + (i == 0 ? 2 : 1)];
  }
  check_close(got[1].to_vector<float>(), {total});
  check_close(got[0].to_vector<float>(), {total / 2});  // two rows count, not four
  // Every row ignored: 0 / 0, NaN as in PyTorch.
  CHECK(std::isnan(run({7, 7, 7, 7})[0].to_vector<float>()[0]));
}

namespace {

// A language model's head (Linear to `vocab` classes) with SGD, its loss by
// cross_entropy (kiln.cross_entropy) or by the mean of
// softmax_with_cross_entropy's loss.
struct Head {
  Program main_prog, startup;
  Value loss;
};
std::unique_ptr<Head> lm_head(bool softmax_form, std::int64_t rows, std::int64_t vocab) {
  UniqueNameGuard names;
  auto m = std::make_unique<Head>();
  ProgramGuard guard(m->main_prog, m->startup);
  Value h = data("h", {rows, 16});
  Value label = data("label", {rows}, DataType::Int64);
  Value logits = nn::Linear(16, vocab)(h);
  Builder b = main_builder();
  m->loss = softmax_form
                ? b.create<MeanOp>(b.create<SoftmaxWithCrossEntropyOp>(logits, label).result(1),
                                   std::vector<std::int64_t>{}, false)
                      .result()
                : F::cross_entropy(logits, label);
  optim::SGD(0.5).minimize(m->loss);
  return m;
}

}  // namespace

TEST_CASE("cross_entropy over a vocabulary keeps no softmax: it trains as softmax_with_cross_entropy "
          "with one class-sized tensor alive, not two",
          "[frontend]") {
  constexpr std::int64_t kRows = 64, kVocab = 5000;
  auto lse = lm_head(false, kRows, kVocab), softmax = lm_head(true, kRows, kVocab);
  const auto ops = op_names(lse->main_prog);
  CHECK(std::count(ops.begin(), ops.end(), "kiln.cross_entropy") == 1);
  CHECK(std::count(ops.begin(), ops.end(), "kiln.softmax_with_cross_entropy") == 0);
  std::vector<std::int64_t> y(static_cast<std::size_t>(kRows));
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = static_cast<std::int64_t>(i * 131 % kVocab);
  const FeedMap feeds{{"h", normal_f32({kRows, 16}, 5)},
                      {"label", Tensor::from_vector<std::int64_t>(Dims({kRows}), y)}};
  Executor a, b;
  a.run(lse->startup);
  b.run(softmax->startup);
  copy_scope(a, b);
  std::vector<float> first;
  for (int s = 0; s < 4; ++s) {
    INFO("step " << s);
    const float la = a.run(lse->main_prog, feeds, {lse->loss})[0].to_vector<float>()[0];
    const float lb = b.run(softmax->main_prog, feeds, {softmax->loss})[0].to_vector<float>()[0];
    CHECK(la == Approx(lb).epsilon(1e-5));
    first.push_back(la);
  }
  CHECK(first.back() < first.front());
  REQUIRE(a.last_core()->memory_plan());
  REQUIRE(b.last_core()->memory_plan());
  const std::size_t with_lse = a.last_core()->memory_plan()->temporaries_live_bytes;
  const std::size_t with_softmax = b.last_core()->memory_plan()->temporaries_live_bytes;
  INFO("live temporaries: " << with_lse << " bytes with lse, " << with_softmax << " with the softmax");
  // The softmax form holds two class-sized tensors at once (logits and
  // softmax, then softmax and dlogits); the lse form one (dlogits written
  // over the logits), beside the head's weight and bias gradients.
  const std::size_t class_sized = kRows * kVocab * sizeof(float);
  const std::size_t head_grads = (16 + 1) * kVocab * sizeof(float);
  CHECK(with_softmax >= 2 * class_sized);
  CHECK(with_lse <= class_sized + head_grads + 64 * 1024);
}

TEST_CASE("functional forms reject values they cannot use, naming the function", "[frontend]") {
  Program other, main_prog, startup;
  Value foreign;
  {
    ProgramGuard g(other, startup);
    foreign = data("x", {2, 3});
  }
  ProgramGuard guard(main_prog, startup);
  Value x = data("x", {2, 3}), l = data("l", {3, 2});
  KILN_CHECK_ERROR(F::relu(foreign), InvalidArgument, {"relu", "current main program"});
  KILN_CHECK_ERROR(F::relu(Value{}), InvalidArgument, {"relu", "null"});
  Value q = data("q", {2, 1, 3, 4});
  KILN_CHECK_ERROR(F::scaled_dot_product_attention(q, q, q, false, 0.0, foreign), InvalidArgument,
                   {"scaled_dot_product_attention", "key_lengths", "current main program"});
  KILN_CHECK_ERROR(F::mse_loss(x, l), InvalidArgument, {"mse_loss", "[2, 3]", "[3, 2]"});
  KILN_CHECK_ERROR(F::l1_loss(x, l), InvalidArgument, {"l1_loss", "same shape"});
  KILN_CHECK_ERROR(F::linear(x, x), InvalidArgument, {"kiln.matmul"});  // [2,3]·[2,3]
  KILN_CHECK_ERROR(F::linear(x, data("w", {3})), InvalidArgument, {"linear", "[in, out]"});
  KILN_CHECK_ERROR(F::linear(x, data("w2", {3, 4}), data("b2", {3})), InvalidArgument,
                       {"linear", "bias must be [4]"});
  KILN_CHECK_ERROR(F::layer_norm(x, {2}), InvalidArgument, {"layer_norm", "normalized_shape"});
  KILN_CHECK_ERROR(F::dropout(x, -0.1), InvalidArgument, {"dropout"});
  KILN_CHECK_ERROR(nn::Linear(0, 2), InvalidArgument, {"Linear", "in_features"});
  KILN_CHECK_ERROR(nn::LayerNorm({}), InvalidArgument, {"LayerNorm"});
}

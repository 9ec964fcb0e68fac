// append_backward on kiln's own ops and their Vjps: the seed's
// model, x → Linear(16, 1) → MSELoss, whose gradients w.r.t. the weight and
// bias are computed here by hand (plain loops), with a fixed and a -1 batch.
#include <cmath>

#include "frontend/frontend_test_util.h"

using namespace kiln;
using namespace kiln_frontend_test;

TEST_CASE("the gradients of Linear + MSELoss w.r.t. weight and bias equal the hand-computed ones",
          "[frontend]") {
  for (std::int64_t batch_dim : {std::int64_t(16), std::int64_t(-1)}) {
    INFO("x's batch dim " << batch_dim);
    UniqueNameGuard names;
    Program main_prog, startup;
    Value loss;
    std::unique_ptr<nn::Linear> fc;
    std::vector<std::pair<Value, Value>> grads;
    {
      ProgramGuard guard(main_prog, startup);
      Value x = data("x", {batch_dim, 16});
      Value label = data("label", {batch_dim, 1});
      fc = std::make_unique<nn::Linear>(16, 1);
      loss = nn::MSELoss()((*fc)(x), label);
      grads = append_backward(loss);
    }
    REQUIRE(grads.size() == 2);
    CHECK(grads[0].first == fc->weight());
    CHECK(grads[1].first == fc->bias());
    CHECK(parameter_name(grads[0].first) == "linear_0.w_0");
    main_prog.verify();

    const int n = 16;
    std::vector<float> xv(n * 16), yv(n);
    for (int i = 0; i < n * 16; ++i) xv[i] = std::sin(0.37f * float(i));
    for (int i = 0; i < n; ++i) yv[i] = std::cos(0.5f * float(i));
    Executor exe;
    exe.run(startup);
    auto got = exe.run(main_prog, {{"x", f32({n, 16}, xv)}, {"label", f32({n, 1}, yv)}},
                       {loss, grads[0].second, grads[1].second, fc->weight(), fc->bias()});
    auto w = got[3].to_vector<float>();
    const double b = got[4].to_vector<float>()[0];
    std::vector<double> dw(16, 0.0);
    double db = 0, l = 0;
    for (int i = 0; i < n; ++i) {
      double o = b;
      for (int k = 0; k < 16; ++k) o += double(xv[i * 16 + k]) * w[k];
      const double r = o - yv[i];
      l += r * r / n;
      const double dout = 2 * r / n;  // d mean(r²) / d o_i
      db += dout;
      for (int k = 0; k < 16; ++k) dw[k] += double(xv[i * 16 + k]) * dout;
    }
    CHECK(std::abs(got[0].to_vector<float>()[0] - l) < 1e-5 * (1 + l));
    auto gw = got[1].to_vector<float>();
    REQUIRE(gw.size() == 16);
    CHECK(got[1].dims().to_vector() == std::vector<std::int64_t>{16, 1});
    for (int k = 0; k < 16; ++k) {
      INFO("dW[" << k << "]");
      CHECK(std::abs(gw[k] - dw[k]) < 1e-5 * (1 + std::abs(dw[k])));
    }
    CHECK(got[2].dims().to_vector() == std::vector<std::int64_t>{1});
    CHECK(std::abs(got[2].to_vector<float>()[0] - db) < 1e-5 * (1 + std::abs(db)));
  }
}

TEST_CASE("append_backward through Linear, LayerNorm, Tanh, Dropout(eval) and CrossEntropy "
          "matches central finite differences in f64", "[frontend]") {
  namespace F = kiln::nn::functional;
  Program main_prog, startup;
  Value loss;
  std::vector<Value> inputs;
  std::vector<std::pair<Value, Value>> grads;
  const std::vector<std::vector<std::int64_t>> shapes{{4, 5}, {5, 3}, {3}, {3}, {3}};
  const std::vector<std::string> names{"x", "w", "b", "g", "beta"};
  {
    ProgramGuard guard(main_prog, startup);
    for (std::size_t i = 0; i < names.size(); ++i) {
      inputs.push_back(data(names[i], shapes[i], DataType::Float64));
      set_stop_gradient(inputs.back(), false);
    }
    Value label = data("label", {4}, DataType::Int64);
    Value h = F::linear(inputs[0], inputs[1], inputs[2]);
    h = F::layer_norm(h, {3}, inputs[3], inputs[4], 1e-3);
    h = F::dropout(F::tanh(h), 0.5, /*training=*/false);
    loss = F::cross_entropy(h, label);
    grads = append_backward(loss, inputs);
  }
  REQUIRE(grads.size() == inputs.size());
  main_prog.verify();

  std::vector<std::vector<double>> vals;
  for (std::size_t i = 0; i < names.size(); ++i) {
    std::int64_t n = 1;
    for (auto d : shapes[i]) n *= d;
    std::vector<double> v(static_cast<std::size_t>(n));
    for (std::size_t k = 0; k < v.size(); ++k) v[k] = std::sin(1.3 * double(k) + double(i)) + (i == 3 ? 1.0 : 0.0);
    vals.push_back(v);
  }
  const Tensor labels = Tensor::from_vector<std::int64_t>(Dims({4}), {0, 2, 1, 2});
  check_grads_by_finite_differences(main_prog, loss, grads, names, vals, shapes,
                                    {{"label", labels}});
}

TEST_CASE("append_backward refuses an in-place op on the gradient path, naming it", "[frontend][backward]") {
  UniqueNameGuard names;
  Program main_prog, startup;
  ProgramGuard guard(main_prog, startup);
  auto x = data("x", {4, 3});
  nn::Linear fc(3, 2);
  Value h = fc(x);
  // tanh's Vjp reads its result h; relu_ would overwrite h before it runs.
  Value t = main_builder().create<TanhOp>(h).result();
  Value r = main_builder().create<Relu_Op>(t).result();
  Value loss = nn::functional::mse_loss(r, data("y", {4, 2}));
  const std::size_t ops_before = main_prog.block().size();
  KILN_CHECK_ERROR(append_backward(loss), Unimplemented, {"kiln.relu_", "out-of-place", "kiln.relu"});
  CHECK(main_prog.block().size() == ops_before);  // nothing appended
  // Off the path (on a value that needs no gradient) it is fine.
  Value y2 = main_builder().create<Relu_Op>(data("z", {4, 2})).result();
  Value loss2 = nn::functional::mse_loss(main_builder().create<TanhOp>(h).result(), y2);
  CHECK(append_backward(loss2).size() == 2);
}

// Reference tests of the optimizer update ops (sgd_, momentum_, adam_,
// adamw_): several steps of each kernel against plain loops, in f32 and f64;
// an f32 parameter's bf16 / f16 gradient read with the bits of its f32
// cast, by the single and the merged ops; their InferMeta and run-time
// errors; and, through the executor, that an
// update's outputs are the parameter's and state's own variables and that the
// update runs after the parameter's readers (WAR).
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernel/kernel_test_util.h"
#include "kiln/dialect/merged_optimizer_ops.h"
#include "kiln/dialect/optimizer_ops.h"
#include "kiln/dialect/unary_ops.h"
#include "kiln/exec/executor.h"
#include "kiln/exec/interpreter_core.h"
#include "kiln/kernel/optimizer_math.h"
#include "kiln/runtime/cpu_allocator.h"
#include "kiln/runtime/scope.h"

using namespace kiln;
using kiln_test::check_close;
using kiln_test::filled;
using kiln_test::run_op;

namespace {

template <typename T>
Tensor scalar(T v) {
  return Tensor::from_vector<T>(Dims{1}, {v});
}

template <typename T>
constexpr double tol() {
  return std::is_same_v<T, float> ? 1e-6 : 1e-14;
}

// The state of one parameter under the reference optimizers (plain loops).
template <typename T>
struct Ref {
  std::vector<T> p, v, m1, m2;
  T b1p = 0, b2p = 0;
};

template <typename T>
void ref_adam(Ref<T>& s, const std::vector<T>& g, T lr, T beta1, T beta2, T eps, T coeff,
              bool decay) {
  const T lr_t = lr * std::sqrt(T(1) - s.b2p) / (T(1) - s.b1p);
  for (std::size_t i = 0; i < s.p.size(); ++i) {
    if (decay) s.p[i] = s.p[i] * (T(1) - lr * coeff);
    s.m1[i] = beta1 * s.m1[i] + (T(1) - beta1) * g[i];
    s.m2[i] = beta2 * s.m2[i] + (T(1) - beta2) * g[i] * g[i];
    s.p[i] -= lr_t * (s.m1[i] / (std::sqrt(s.m2[i]) + eps * std::sqrt(T(1) - s.b2p)));
  }
  s.b1p *= beta1;
  s.b2p *= beta2;
}

template <typename T>
void check_sgd() {
  INFO(to_string(data_type_of<T>));
  const Dims d{3, 5};
  Tensor p = filled<T>(d, -1, 1, 1);
  std::vector<T> ref = p.to_vector<T>();
  const T lr = T(0.1);
  for (int step = 0; step < 3; ++step) {
    Tensor g = filled<T>(d, -2, 2, 10 + step);
    auto gv = g.to_vector<T>();
    for (std::size_t i = 0; i < ref.size(); ++i) ref[i] -= lr * gv[i];
    auto r = run_op<Sgd_Op>({p, g, scalar<T>(lr)});
    CHECK(r.outputs[0] == r.inputs[0]);
    CHECK(r.out(0).shares_buffer_with(p));  // updated in the parameter's own buffer
    check_close<T>(r.out(0), ref, tol<T>(), 0);
  }
}

template <typename T>
void check_momentum(bool nesterov) {
  INFO(to_string(data_type_of<T>) << (nesterov ? " nesterov" : ""));
  const Dims d{4, 3};
  Tensor p = filled<T>(d, -1, 1, 2);
  Tensor v = Tensor::zeros(d, data_type_of<T>);
  Ref<T> s;
  s.p = p.to_vector<T>();
  s.v = v.to_vector<T>();
  const T lr = T(0.05), mu = T(0.9);
  for (int step = 0; step < 4; ++step) {
    Tensor g = filled<T>(d, -1, 1, 20 + step);
    auto gv = g.to_vector<T>();
    for (std::size_t i = 0; i < s.p.size(); ++i) {
      s.v[i] = mu * s.v[i] + gv[i];
      s.p[i] -= nesterov ? lr * (gv[i] + mu * s.v[i]) : lr * s.v[i];
    }
    auto r = run_op<Momentum_Op>({p, g, v, scalar<T>(lr)}, 0.9, nesterov);
    CHECK(r.outputs[0] == r.inputs[0]);
    CHECK(r.outputs[1] == r.inputs[2]);
    check_close<T>(r.out(0), s.p, tol<T>(), 0);
    check_close<T>(r.out(1), s.v, tol<T>(), 0);
  }
}

template <typename T, typename OpT>
void check_adam(double coeff) {
  constexpr bool decay = std::is_same_v<OpT, AdamW_Op>;
  INFO(OpT::name << " " << to_string(data_type_of<T>));
  const Dims d{2, 7};
  const double beta1 = 0.8, beta2 = 0.95, eps = 1e-6;
  Tensor p = filled<T>(d, -1, 1, 3);
  Tensor m1 = Tensor::zeros(d, data_type_of<T>), m2 = Tensor::zeros(d, data_type_of<T>);
  Tensor b1p = scalar<T>(T(beta1)), b2p = scalar<T>(T(beta2));
  Ref<T> s{p.to_vector<T>(), {}, m1.to_vector<T>(), m2.to_vector<T>(), T(beta1), T(beta2)};
  const T lr = T(0.01);
  for (int step = 0; step < 5; ++step) {
    Tensor g = filled<T>(d, -1, 1, 30 + step);
    ref_adam<T>(s, g.to_vector<T>(), lr, T(beta1), T(beta2), T(eps), T(coeff), decay);
    kiln_test::KernelRun r;
    if constexpr (decay)
      r = run_op<OpT>({p, g, scalar<T>(lr), m1, m2, b1p, b2p}, beta1, beta2, eps, coeff);
    else
      r = run_op<OpT>({p, g, scalar<T>(lr), m1, m2, b1p, b2p}, beta1, beta2, eps);
    for (auto [o, i] : OpT::inplace_map) CHECK(r.outputs[o] == r.inputs[i]);
    check_close<T>(r.out(0), s.p, tol<T>(), 0);
    check_close<T>(r.out(1), s.m1, tol<T>(), 0);
    check_close<T>(r.out(2), s.m2, tol<T>(), 0);
    check_close<T>(r.out(3), std::vector<T>{s.b1p}, tol<T>(), 0);
    check_close<T>(r.out(4), std::vector<T>{s.b2p}, tol<T>(), 0);
  }
  // The beta powers are the attributes' powers: beta^(1 + steps).
  CHECK(b1p.to_vector<T>()[0] == Approx(std::pow(beta1, 6)).epsilon(tol<T>() * 10));
  CHECK(b2p.to_vector<T>()[0] == Approx(std::pow(beta2, 6)).epsilon(tol<T>() * 10));
}

// `t` cast to `dtype` by kiln.cast's kernel.
Tensor cast_to(const Tensor& t, DataType dtype) { return run_op<CastOp>({t}, dtype).out(); }

// Runs `update(grad)` on fresh copies of the state twice, once with `low`
// (a bf16 / f16 gradient) and once with its f32 cast: every result has the
// same bits.
template <typename Update>
void check_reads_low_gradient(const Tensor& low, Update&& update) {
  INFO(to_string(low.dtype()) << " gradient");
  const auto want = update(cast_to(low, DataType::Float32));
  const auto got = update(low);
  REQUIRE(got.results.size() == want.results.size());
  for (std::size_t i = 0; i < got.results.size(); ++i) {
    INFO("result #" << i);
    CHECK(kiln_test::same_bits(got.out(i), want.out(i)));
  }
}

// A program: parameters w (f32 [2]) and lr (f32 [1]) held in `scope`.
void set_params(Scope& scope) {
  scope.var("w").set(Tensor::from_vector<float>(Dims{2}, {1.f, 2.f}));
  scope.var("lr").set(scalar<float>(0.5f));
}

}  // namespace

TEST_CASE("sgd_ subtracts lr * grad from the parameter in place (f32, f64)", "[kernel][optim]") {
  check_sgd<float>();
  check_sgd<double>();
}

TEST_CASE("momentum_ matches the plain and Nesterov momentum loops (f32, f64)",
          "[kernel][optim]") {
  for (bool nesterov : {false, true}) {
    check_momentum<float>(nesterov);
    check_momentum<double>(nesterov);
  }
}

TEST_CASE("adam_ matches Paddle's bias-corrected adam over five steps (f32, f64)",
          "[kernel][optim]") {
  check_adam<float, Adam_Op>(0.0);
  check_adam<double, Adam_Op>(0.0);
}

TEST_CASE("adamw_ decays the parameter by lr * coeff before the adam step (f32, f64)",
          "[kernel][optim]") {
  check_adam<float, AdamW_Op>(0.1);
  check_adam<double, AdamW_Op>(0.1);
  // coeff = 0 is exactly adam_.
  const Dims d{5};
  Tensor g = filled<double>(d, -1, 1, 4);
  auto run = [&](bool w) {
    Tensor p = filled<double>(d, -1, 1, 5);
    std::vector<Tensor> in{p, g, scalar(0.1), Tensor::zeros(d, DataType::Float64),
                           Tensor::zeros(d, DataType::Float64), scalar(0.9), scalar(0.999)};
    return w ? run_op<AdamW_Op>(in, 0.9, 0.999, 1e-8, 0.0).out(0).to_vector<double>()
             : run_op<Adam_Op>(in, 0.9, 0.999, 1e-8).out(0).to_vector<double>();
  };
  CHECK(run(true) == run(false));
  // and a positive coeff shrinks the parameter further toward zero.
  Tensor p = Tensor::from_vector<double>(Dims{1}, {2.0});
  auto r = run_op<AdamW_Op>({p, scalar(0.0), scalar(0.1), scalar(0.0), scalar(0.0), scalar(0.9),
                             scalar(0.999)},
                            0.9, 0.999, 1e-8, 0.5);
  CHECK(r.out(0).to_vector<double>()[0] == Approx(2.0 - 0.1 * 0.5 * 2.0).epsilon(1e-12));
}

TEST_CASE("adam_ and adamw_ on f32 give the scalar update's bits in every lane of every vector width",
          "[kernel][optim]") {
  // 45 elements: five rows of 8 lanes (AVX), one of 4 (SSE2), one left alone.
  const Dims d{45};
  const float lr = 0.01f, beta1 = 0.8f, beta2 = 0.95f, eps = 1e-6f;
  for (const double coeff : {0.0, 0.1}) {
    INFO("coeff " << coeff);
    Tensor p = filled<float>(d, -1, 1, 6), m1 = filled<float>(d, -0.1f, 0.1f, 7);
    Tensor m2 = filled<float>(d, 0, 0.01f, 8), g = filled<float>(d, -1, 1, 9);
    std::vector<float> rp = p.to_vector<float>(), rm1 = m1.to_vector<float>(), rm2 = m2.to_vector<float>();
    const std::vector<float> gv = g.to_vector<float>();
    const float b1p = 0.8f * 0.8f, b2p = 0.95f * 0.95f;
    const AdamStep<float> step = adam_step_of(lr, b1p, b2p, beta1, beta2, eps);
    const float keep = coeff > 0 ? 1.0f - lr * static_cast<float>(coeff) : 1.0f;
    for (std::size_t i = 0; i < rp.size(); ++i) {
      if (coeff > 0) rp[i] *= keep;
      adam_element(rp[i], rm1[i], rm2[i], gv[i], step);
    }
    std::vector<Tensor> in{p, g, scalar(lr), m1, m2, scalar(b1p), scalar(b2p)};
    const auto r = coeff > 0 ? run_op<AdamW_Op>(in, beta1, beta2, eps, coeff)
                             : run_op<Adam_Op>(in, beta1, beta2, eps);
    CHECK(r.out(0).to_vector<float>() == rp);
    CHECK(r.out(1).to_vector<float>() == rm1);
    CHECK(r.out(2).to_vector<float>() == rm2);
  }
}

TEST_CASE("every update op reads an f32 parameter's bf16 or f16 gradient with the bits of its f32 cast",
          "[kernel][optim]") {
  // 5003 elements: widened in chunks of 2048 and a last partial one, through
  // the vector lanes and the scalar tail.
  const Dims d{5003};
  const Tensor p0 = filled<float>(d, -1, 1, 1), m0 = filled<float>(d, -0.1f, 0.1f, 2);
  const Tensor v0 = filled<float>(d, 0, 0.01f, 3), lr = scalar(0.01f);
  const Tensor b1p = scalar(0.81f), b2p = scalar(0.9f);
  auto c = [](const Tensor& t) { return t.clone(); };
  for (const DataType low : {DataType::BFloat16, DataType::Float16}) {
    const Tensor g = cast_to(filled<float>(d, -2, 2, 4), low);
    check_reads_low_gradient(g, [&](const Tensor& grad) { return run_op<Sgd_Op>({c(p0), grad, lr}); });
    for (const bool nesterov : {false, true})
      check_reads_low_gradient(g, [&](const Tensor& grad) {
        return run_op<Momentum_Op>({c(p0), grad, c(v0), lr}, 0.9, nesterov);
      });
    check_reads_low_gradient(g, [&](const Tensor& grad) {
      return run_op<Adam_Op>({c(p0), grad, lr, c(m0), c(v0), c(b1p), c(b2p)}, 0.9, 0.999, 1e-8);
    });
    check_reads_low_gradient(g, [&](const Tensor& grad) {
      return run_op<AdamW_Op>({c(p0), grad, lr, c(m0), c(v0), c(b1p), c(b2p)}, 0.9, 0.999, 1e-8, 0.01);
    });
  }
}

TEST_CASE("a merged update reads each parameter's gradient in its own dtype, f32, bf16 or f16",
          "[kernel][optim]") {
  // Three parameters; the second gradient and then the third is low, the
  // results the same bits as with every gradient cast to f32.
  const Tensor lr = scalar(0.01f), b1p = scalar(0.81f), b2p = scalar(0.9f);
  std::vector<Tensor> p, g, m, v;
  for (std::int64_t k = 0; k < 3; ++k) {
    const Dims d{2100 + 7 * k};
    const auto seed = static_cast<std::uint32_t>(10 * k);
    p.push_back(filled<float>(d, -1, 1, seed + 1));
    g.push_back(filled<float>(d, -2, 2, seed + 2));
    m.push_back(filled<float>(d, -0.1f, 0.1f, seed + 3));
    v.push_back(filled<float>(d, 0, 0.01f, seed + 4));
  }
  const std::vector<Tensor> low{g[0], cast_to(g[1], DataType::BFloat16), cast_to(g[2], DataType::Float16)};
  const auto run = [&](bool widened) {
    std::vector<Tensor> in{lr};
    for (std::size_t k = 0; k < 3; ++k)
      for (const Tensor& t : {p[k].clone(), widened ? cast_to(low[k], DataType::Float32) : low[k], m[k].clone(),
                              v[k].clone(), b1p.clone(), b2p.clone()})
        in.push_back(t);
    return kiln_test::run_kernel(in, [](Builder& b, const std::vector<Value>& x) {
      const std::vector<Value> members(x.begin() + 1, x.end());
      return b.create<MergedAdamW_Op>(x[0], members, AdamW_Op::Attributes{0.9, 0.999, 1e-8, 0.01}).operation();
    });
  };
  const auto want = run(true), got = run(false);
  REQUIRE(got.results.size() == 15);
  for (std::size_t i = 0; i < got.results.size(); ++i) {
    INFO("result #" << i);
    CHECK(kiln_test::same_bits(got.out(i), want.out(i)));
  }
}

TEST_CASE("an update op run out of place leaves its input untouched", "[kernel][optim]") {
  // What the kernels do when an output has its own variable: copy, then update.
  Tensor p = Tensor::from_vector<float>(Dims{3}, {1.f, 2.f, 3.f});
  Tensor g = Tensor::from_vector<float>(Dims{3}, {1.f, 1.f, 1.f});
  Tensor lr = scalar(0.5f);
  Program prog;
  Builder b(prog);
  auto dp = b.create<DataOp>("p", std::vector<std::int64_t>{3});
  auto dg = b.create<DataOp>("g", std::vector<std::int64_t>{3});
  auto dl = b.create<DataOp>("lr", std::vector<std::int64_t>{1});
  auto op = b.create<Sgd_Op>(dp.result(), dg.result(), dl.result());
  Variable vp("p"), vg("g"), vl("lr"), out("out");
  vp.set(p);
  vg.set(g);
  vl.set(lr);
  Variable* ins[] = {&vp, &vg, &vl};
  Variable* outs[] = {&out};
  const KernelInfo& k = KernelRegistry::instance().get(*op.operation(), PlaceKind::Cpu,
                                                       DataType::Float32);
  KernelContext ctx(op.operation(), ins, 3, outs, 1, nullptr, Place::cpu(), &cpu_allocator());
  k.fn(ctx);
  CHECK(out.get<Tensor>().to_vector<float>() == std::vector<float>{0.5f, 1.5f, 2.5f});
  CHECK(p.to_vector<float>() == std::vector<float>{1.f, 2.f, 3.f});
}

TEST_CASE("update ops reject operands of the wrong shape, dtype or kind, naming the operand",
          "[kernel][optim]") {
  using kiln_test::build_op;
  using TS = kiln_test::TypeSpec;
  const auto f32 = DataType::Float32, f64 = DataType::Float64;
  Program p;
  KILN_CHECK_ERROR((build_op<Sgd_Op>(p, {TS{f32, {3}}, TS{f32, {4}}, TS{f32, {1}}})),
                     InvalidArgument, {"kiln.sgd_", "'grad'", "[3]", "[4]"});
  KILN_CHECK_ERROR((build_op<Sgd_Op>(p, {TS{f32, {3}}, TS{f64, {3}}, TS{f32, {1}}})),
                     InvalidArgument, {"kiln.sgd_", "'grad'", "f32", "f64"});
  // A 16-bit gradient only for an f32 parameter (mixed precision), and
  // only the gradient.
  const auto bf16 = DataType::BFloat16, f16 = DataType::Float16;
  CHECK_NOTHROW(build_op<Sgd_Op>(p, {TS{f32, {3}}, TS{bf16, {3}}, TS{f32, {1}}}));
  CHECK_NOTHROW(build_op<Momentum_Op>(p, {TS{f32, {3}}, TS{f16, {3}}, TS{f32, {3}}, TS{f32, {1}}}));
  KILN_CHECK_ERROR((build_op<Sgd_Op>(p, {TS{f32, {3}}, TS{DataType::Int32, {3}}, TS{f32, {1}}})),
                   InvalidArgument, {"kiln.sgd_", "'grad'", "f32, bf16 or f16", "i32"});
  KILN_CHECK_ERROR((build_op<Sgd_Op>(p, {TS{f64, {3}}, TS{bf16, {3}}, TS{f64, {1}}})), InvalidArgument,
                   {"kiln.sgd_", "'grad'", "f64", "bf16"});
  KILN_CHECK_ERROR((build_op<Momentum_Op>(p, {TS{f32, {3}}, TS{f32, {3}}, TS{bf16, {3}}, TS{f32, {1}}})),
                   InvalidArgument, {"kiln.momentum_", "'velocity'", "f32", "bf16"});
  KILN_CHECK_ERROR((build_op<Sgd_Op>(p, {TS{f32, {3}}, TS{bf16, {4}}, TS{f32, {1}}})), InvalidArgument,
                   {"kiln.sgd_", "'grad'", "[3]", "[4]"});
  KILN_CHECK_ERROR((build_op<Sgd_Op>(p, {TS{f32, {3}}, TS{f32, {3}}, TS{f32, {2}}})),
                     InvalidArgument, {"kiln.sgd_", "'learning_rate'", "one element"});
  KILN_CHECK_ERROR((build_op<Sgd_Op>(p, {TS{DataType::Int64, {3}}, TS{DataType::Int64, {3}},
                                           TS{DataType::Int64, {1}}})),
                     InvalidArgument, {"kiln.sgd_", "'param'", "i64"});
  KILN_CHECK_ERROR((build_op<Momentum_Op>(p, {TS{f32, {2, 3}}, TS{f32, {2, 3}}, TS{f32, {3, 2}},
                                                TS{f32, {1}}})),
                     InvalidArgument, {"kiln.momentum_", "'velocity'", "[2, 3]", "[3, 2]"});
  KILN_CHECK_ERROR((build_op<Momentum_Op>(p, {TS{f32, {2}}, TS{f32, {2}}, TS{f32, {2}},
                                                TS{f32, {1}}},
                                            -0.5, false)),
                     InvalidArgument, {"kiln.momentum_", "mu"});
  const std::vector<TS> adam_ok{TS{f64, {4}}, TS{f64, {4}}, TS{f64, {1}}, TS{f64, {4}},
                                TS{f64, {4}}, TS{f64, {1}}, TS{f64, {1}}};
  CHECK_NOTHROW(build_op<Adam_Op>(p, adam_ok));
  auto bad = adam_ok;
  bad[4] = TS{f32, {4}};
  KILN_CHECK_ERROR(build_op<Adam_Op>(p, bad), InvalidArgument, {"kiln.adam_", "'moment2'", "f32"});
  bad = adam_ok;
  bad[6] = TS{f64, {1, 2}};
  KILN_CHECK_ERROR(build_op<AdamW_Op>(p, bad), InvalidArgument, {"kiln.adamw_", "'beta2_pow'"});
  bad = adam_ok;
  bad[3] = TS{f64, {5}};
  KILN_CHECK_ERROR(build_op<Adam_Op>(p, bad), InvalidArgument, {"kiln.adam_", "'moment1'"});
  KILN_CHECK_ERROR(build_op<Adam_Op>(p, adam_ok, 1.0, 0.999, 1e-8), InvalidArgument,
                     {"kiln.adam_", "beta1"});
  KILN_CHECK_ERROR(build_op<Adam_Op>(p, adam_ok, 0.9, -0.1, 1e-8), InvalidArgument,
                     {"kiln.adam_", "beta2"});
  KILN_CHECK_ERROR(build_op<AdamW_Op>(p, adam_ok, 0.9, 0.999, 1e-8, -1.0), InvalidArgument,
                     {"kiln.adamw_", "coeff"});
  // A value-semantics parameter cannot be updated in place.
  {
    Builder b(p);
    auto x = b.create<DataOp>("x", std::vector<std::int64_t>{2});
    Value lr = b.create<DataOp>("lr", std::vector<std::int64_t>{1}).result();
    auto w = b.create<ParameterOp>("vw", VTensorType::get(f32, {2}));
    KILN_CHECK_ERROR(b.create<Sgd_Op>(w.result(), x.result(), lr), InvalidArgument,
                       {"kiln.sgd_", "'param'", "vtensor"});
  }
}

TEST_CASE("an update op's learning rate of the wrong size at run time is an error naming it",
          "[kernel][optim]") {
  Program p;
  Builder b(p);
  auto w = b.create<ParameterOp>("w", TensorType::get(DataType::Float32, {2}));
  auto g = b.create<DataOp>("g", std::vector<std::int64_t>{2});
  auto lr = b.create<DataOp>("lr", std::vector<std::int64_t>{-1});
  b.create<Sgd_Op>(w.result(), g.result(), lr.result());
  Executor exe(Place::cpu(), {.num_threads = 1});
  set_params(exe.scope());
  try {
    exe.run(p, {{"g", Tensor::from_vector<float>(Dims{2}, {1.f, 1.f})},
                {"lr", Tensor::from_vector<float>(Dims{2}, {0.1f, 0.2f})}});
    FAIL("no error");
  } catch (const Error& e) {
    CHECK_THAT(e.message(), Catch::Contains("kiln.sgd_") && Catch::Contains("'learning_rate'"));
  }
  // The parameter was not changed by the failed update.
  CHECK(exe.scope().find_var("w")->get<Tensor>().to_vector<float>() == std::vector<float>{1.f, 2.f});
}

TEST_CASE("an update op's outputs are the parameter's and state's own variables", "[exec][optim]") {
  Scope scope;
  scope.var("w").set(Tensor::from_vector<float>(Dims{2}, {1.f, 2.f}));
  scope.var("v").set(Tensor::from_vector<float>(Dims{2}, {0.f, 0.f}));
  scope.var("lr").set(scalar<float>(0.5f));
  Program p;
  Builder b(p);
  auto f32_2 = TensorType::get(DataType::Float32, {2});
  auto w = b.create<ParameterOp>("w", f32_2);
  auto v = b.create<ParameterOp>("v", f32_2);
  auto lr = b.create<ParameterOp>("lr", TensorType::get(DataType::Float32, {1}));
  auto g = b.create<FullOp>(std::vector<std::int64_t>{2}, 1.0);
  auto m = b.create<Momentum_Op>(w.result(), g.result(), v.result(), lr.result(), 0.5, false);
  ExecutionOptions cfg;
  cfg.num_threads = 1;
  InterpreterCore core(p, scope, {}, {m.result(0)}, cfg);
  CHECK(core.slot_of(m.result(0)) == core.slot_of(w.result()));
  CHECK(core.slot_of(m.result(1)) == core.slot_of(v.result()));
  CHECK(core.variable(core.slot_of(m.result(0))) == scope.find_var("w"));
  CHECK(core.variable(core.slot_of(m.result(1))) == scope.find_var("v"));
  core.run();
  // v = 0.5·0 + 1 = 1; w = w − 0.5·1
  CHECK(scope.find_var("w")->get<Tensor>().to_vector<float>() == std::vector<float>{0.5f, 1.5f});
  CHECK(scope.find_var("v")->get<Tensor>().to_vector<float>() == std::vector<float>{1.f, 1.f});
  core.run();  // v = 0.5 + 1 = 1.5; w -= 0.75
  CHECK(scope.find_var("w")->get<Tensor>().to_vector<float>() == std::vector<float>{-0.25f, 0.75f});
  CHECK(scope.find_var("v")->get<Tensor>().to_vector<float>() == std::vector<float>{1.5f, 1.5f});
}

TEST_CASE("readers of a parameter see its old value: the update runs after them (WAR)",
          "[exec][optim]") {
  // y = scale(w) reads w; sgd_(w, y, lr) then writes w; z = scale(w) after
  // the update (it reads the update's result) sees the new value.
  Program p;
  Builder b(p);
  auto w = b.create<ParameterOp>("w", TensorType::get(DataType::Float32, {2}));
  auto lr = b.create<ParameterOp>("lr", TensorType::get(DataType::Float32, {1}));
  auto y = b.create<ScaleOp>(w.result(), 1.0);
  auto y2 = b.create<ScaleOp>(w.result(), 2.0);
  auto s = b.create<Sgd_Op>(w.result(), y.result(), lr.result());
  auto z = b.create<ScaleOp>(s.result(), 1.0);
  for (unsigned threads : {1u, 2u}) {
    INFO("threads " << threads);
    Executor exe(Place::cpu(), {.num_threads = threads});
    set_params(exe.scope());
    for (int run = 0; run < 20; ++run) {
      auto before = exe.scope().find_var("w")->get<Tensor>().to_vector<float>();
      auto out = exe.run(p, {}, {y.result(), y2.result(), z.result()});
      CHECK(out[0].to_vector<float>() == before);
      CHECK(out[1].to_vector<float>() == std::vector<float>{2 * before[0], 2 * before[1]});
      // w ← w − 0.5·w = 0.5·w
      CHECK(out[2].to_vector<float>() == std::vector<float>{0.5f * before[0], 0.5f * before[1]});
    }
  }
}

// custom_op: a user-defined op — its class (traits, InferMeta, Vjp), its
// gradient op, and both CPU kernels — in this one file, then trained through
// like any kiln op. Nothing in kiln is edited.
//
//   y = my.swish(x)            = x · sigmoid(x)
//   dx = my.swish_grad(x, dy)  = dy · (s + x · s · (1 - s)),  s = sigmoid(x)
//
// The model: x[64, 8] → Linear(8, 16) → swish → Linear(16, 1) → MSE against a
// smooth target; exits non-zero unless the loss falls 20× from its start.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/executor.h"
#include "kiln/frontend/frontend.h"
#include "kiln/frontend/optimizer.h"
#include "kiln/kernel/kernel_registry.h"

namespace {

// Both ops keep the operand's type: one InferMeta for the two.
std::vector<kiln::Type> same_as_first(const std::vector<kiln::Type>& in) {
  if (!kiln::is_shaped(in.at(0)))
    kiln::throw_error(kiln::ErrorKind::InvalidArgument, "my.swish: x must be a tensor");
  return {in[0]};
}

// dx = my.swish_grad(x, dy): the gradient op the Vjp below emits.
struct SwishGradOp : kiln::Op<SwishGradOp, kiln::ReadOnly, kiln::ValueSemantics,
                              kiln::InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "my.swish_grad";
  static constexpr int num_operands = 2, num_results = 1;
  static void build(kiln::Builder&, kiln::OperationArgument& arg, kiln::Value x, kiln::Value dy) {
    arg.add_operand(x);
    arg.add_operand(dy);
  }
  static std::vector<kiln::Type> infer_meta(const std::vector<kiln::Type>& in,
                                            kiln::DictionaryAttribute) {
    if (in.at(0) != in.at(1))
      kiln::throw_error(kiln::ErrorKind::InvalidArgument, "my.swish_grad: x and dy differ in type");
    return same_as_first(in);
  }
};
KILN_REGISTER_OP(SwishGradOp);

// y = my.swish(x). VjpInterface makes it differentiable: append_backward
// (and so optimizer.minimize) calls vjp() with dL/dy and gets dL/dx.
struct SwishOp : kiln::Op<SwishOp, kiln::ReadOnly, kiln::ValueSemantics, kiln::InferMetaInterface,
                          kiln::VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "my.swish";
  static constexpr int num_operands = 1, num_results = 1;
  static void build(kiln::Builder&, kiln::OperationArgument& arg, kiln::Value x) {
    arg.add_operand(x);
  }
  static std::vector<kiln::Type> infer_meta(const std::vector<kiln::Type>& in,
                                            kiln::DictionaryAttribute) {
    return same_as_first(in);
  }
  // One gradient per operand; out_grads[0] is null when no gradient reaches y.
  static std::vector<kiln::Value> vjp(kiln::Builder& b, kiln::Operation* op,
                                      const std::vector<kiln::Value>& out_grads) {
    if (!out_grads.at(0)) return {kiln::Value{}};
    return {b.create<SwishGradOp>(op->operand_source(0), out_grads[0]).result()};
  }
};
KILN_REGISTER_OP(SwishOp);

float sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }

void swish_f32(kiln::KernelContext& ctx) {
  const kiln::Tensor& x = ctx.input(0);
  kiln::Tensor& y = ctx.alloc_output(0, x.dims(), x.dtype());
  const float* in = x.data<float>();
  float* out = y.data<float>();
  for (std::int64_t i = 0; i < x.numel(); ++i) out[i] = in[i] * sigmoid(in[i]);
}
KILN_REGISTER_KERNEL(SwishOp, Cpu, Float32, swish_f32);

void swish_grad_f32(kiln::KernelContext& ctx) {
  const kiln::Tensor& x = ctx.input(0);
  const kiln::Tensor& dy = ctx.input(1);
  kiln::Tensor& dx = ctx.alloc_output(0, x.dims(), x.dtype());
  const float* xv = x.data<float>();
  const float* g = dy.data<float>();
  float* out = dx.data<float>();
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    float s = sigmoid(xv[i]);
    out[i] = g[i] * (s + xv[i] * s * (1 - s));
  }
}
KILN_REGISTER_KERNEL(SwishGradOp, Cpu, Float32, swish_grad_f32);

}  // namespace

int main() {
  constexpr std::int64_t kBatch = 64, kIn = 8, kHidden = 16;
  kiln::Program main_prog, startup;
  kiln::Value loss;
  {
    kiln::ProgramGuard guard(main_prog, startup);
    auto x = kiln::data("x", {-1, kIn});
    auto target = kiln::data("target", {-1, 1});
    kiln::nn::Linear fc1(kIn, kHidden), fc2(kHidden, 1);
    auto h = kiln::main_builder().create<SwishOp>(fc1(x)).result();
    loss = kiln::nn::MSELoss()(fc2(h), target);
    kiln::optim::Adam(/*learning_rate=*/0.01).minimize(loss);
  }

  kiln::Executor exe;
  exe.run(startup);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> xs(kBatch * kIn), ts(kBatch);
  double first = 0, last = 0;
  for (int step = 1; step <= 800; ++step) {
    for (auto& v : xs) v = u(rng);
    for (std::int64_t i = 0; i < kBatch; ++i) {  // target = sin(x0 + x1) + x2 · x3
      const float* r = &xs[i * kIn];
      ts[i] = std::sin(r[0] + r[1]) + r[2] * r[3];
    }
    auto out = exe.run(main_prog,
                       {{"x", kiln::Tensor::from_vector<float>({kBatch, kIn}, xs)},
                        {"target", kiln::Tensor::from_vector<float>({kBatch, 1}, ts)}},
                       {loss});
    last = out[0].to_vector<float>().at(0);
    if (step == 1) first = last;
    if (step % 100 == 0 || step == 1) std::printf("step %4d  loss %.5f\n", step, last);
  }
  const bool ok = last * 20 < first;
  std::printf("%s: loss %.5f -> %.5f through my.swish and its Vjp\n",
              ok ? "trained" : "did NOT train", first, last);
  return ok ? 0 : 1;
}

// A user op in one file: my.swish(x) = x·σ(x), its gradient op (GradOf) and
// both CPU kernels, registered here; then trained through like any kiln op.
#include <cmath>
#include "common/fit_target.h"
#include "kiln/extension.h"
using namespace kiln;

struct SwishOp : Op<SwishOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "my.swish";
  static constexpr int num_operands = 1, num_results = 1;
  struct Grad : GradSpec<2, 0> {};  // my.swish_grad(x, dy) -> dx, typed like operand 0
  static void build(Builder&, OperationArgument& arg, Value x) { arg.add_operand(x); }
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
    return {meta::float_operand(name, in, 0)};
  }
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& dy) {
    if (!dy[0]) return {Value{}};
    return {b.create<GradOf<SwishOp>>(op, op->operand_source(0), dy[0]).result()};
  }
};
KILN_REGISTER_OP(SwishOp, GradOf<SwishOp>);

float sig(float v) { return 1 / (1 + std::exp(-v)); }
void swish(KernelContext& c) {  // y = x·σ(x)
  const float* x = c.input(0).data<float>();
  float* y = c.alloc_output(0, c.input(0).dims(), DataType::Float32).data<float>();
  for (std::int64_t i = 0; i < c.input(0).numel(); ++i) y[i] = x[i] * sig(x[i]);
}
void swish_grad(KernelContext& c) {  // dx = dy·σ(x)·(1 + x·(1 - σ(x)))
  const float *x = c.input(0).data<float>(), *dy = c.input(1).data<float>();
  float* dx = c.alloc_output(0, c.input(0).dims(), DataType::Float32).data<float>();
  for (std::int64_t i = 0; i < c.input(0).numel(); ++i)
    dx[i] = dy[i] * sig(x[i]) * (1 + x[i] * (1 - sig(x[i])));
}
KILN_REGISTER_KERNEL(SwishOp, Cpu, Float32, swish);
KILN_REGISTER_KERNEL(GradOf<SwishOp>, Cpu, Float32, swish_grad);

int main() {
  return kiln_examples::fit_target([](Value h) { return main_builder().create<SwishOp>(h).result(); });
}

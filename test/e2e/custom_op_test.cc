// The README's "Defining a custom op" example, compiled and run as written:
// a user op with a trait list, a reflected attribute, InferMeta, a verify
// hook and a CPU kernel, registered from this file alone.
#include "catch.hpp"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/executor.h"
#include "kiln/io/json.h"
#include "kiln/kernel/kernel_registry.h"

namespace {

struct ScaledReluOp : kiln::Op<ScaledReluOp, kiln::ReadOnly, kiln::ValueSemantics,
                               kiln::InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "my.scaled_relu";
  static constexpr int num_operands = 1, num_results = 1;
  KILN_ATTRIBUTES((float, alpha));

  static void build(kiln::Builder&, kiln::OperationArgument& arg, kiln::Value x, float alpha) {
    arg.add_operand(x);
    arg.attributes = kiln::to_named_attributes(Attributes{alpha});
  }
  static std::vector<kiln::Type> infer_meta(const std::vector<kiln::Type>& in,
                                            kiln::DictionaryAttribute) {
    if (!kiln::is_shaped(in[0]))
      kiln::throw_error(kiln::ErrorKind::InvalidArgument, "my.scaled_relu needs a tensor");
    return {in[0]};
  }
  void verify() const {
    if (attrs().alpha < 0)
      kiln::throw_error(kiln::ErrorKind::InvalidArgument, "my.scaled_relu: alpha must be >= 0");
  }
};
KILN_REGISTER_OP(ScaledReluOp);

void scaled_relu_f32(kiln::KernelContext& ctx) {
  const kiln::Tensor& x = ctx.input(0);
  float alpha = ctx.attrs<ScaledReluOp>().alpha;
  kiln::Tensor& y = ctx.alloc_output(0, x.dims(), x.dtype());
  const float* in = x.data<float>();
  float* out = y.data<float>();
  for (std::int64_t i = 0; i < x.numel(); ++i) out[i] = in[i] > 0 ? in[i] : alpha * in[i];
}
KILN_REGISTER_KERNEL(ScaledReluOp, Cpu, Float32, scaled_relu_f32);

}  // namespace

TEST_CASE("the README's custom op builds, verifies, saves, loads and runs", "[e2e][custom_op]") {
  using namespace kiln;
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{-1, 2});
  auto y = b.create<ScaledReluOp>(x.result(), 0.5f);
  p.verify();
  Program loaded = load_program_json(save_program_json(p));
  CHECK(loaded.to_string() == p.to_string());
  CHECK(p.to_string().find("my.scaled_relu(%0) {alpha = 0.5 : f32}") != std::string::npos);

  Executor exe(Place::cpu(), {.num_threads = 1});
  auto out = exe.run(p, {{"x", Tensor::from_vector<float>({2, 2}, {-2, 1, 3, -4})}}, {y.result()});
  CHECK(out[0].to_vector<float>() == std::vector<float>{-1, 1, 3, -2});

  y->set_attribute("alpha", Float32Attribute::get(-1.0f));
  CHECK_THROWS_AS(p.verify(), Error);
}

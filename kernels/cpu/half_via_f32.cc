// bf16 and f16 kernels on the CPU for the ops mixed precision's O2 runs in
// low precision and that have no 16-bit kernel of their own: each 16-bit
// input widened to f32, the op's own f32 kernel run on the widened inputs,
// each output rounded once to the dtype its result type names (XLA's float
// normalization, done per kernel). The arithmetic is the f32 kernel's, with
// f32 accumulation, so these are the reference the CUDA 16-bit kernels are
// held to; on the CPU they cost a widening and a rounding pass per call.
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "cpu_half.h"
#include "cpu_kernel_util.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/ir/builtin_types.h"

namespace kiln::cpu {
namespace {

bool is_half(DataType dt) { return dt == DataType::BFloat16 || dt == DataType::Float16; }

Tensor widened(const Tensor& t) {
  return t.dtype() == DataType::Float16 ? widen_half<DataType::Float16>(t) : widen_half<DataType::BFloat16>(t);
}

// Output o of ctx (dtype `dt`, 16-bit) = f rounded.
void store_rounded(KernelContext& ctx, std::uint32_t o, const Tensor& f, DataType dt) {
  Tensor& out = ctx.alloc_output(o, f.dims(), dt);
  if (dt == DataType::Float16) round_half<DataType::Float16>(f, out);
  else round_half<DataType::BFloat16>(f, out);
}

// The dtype result o of the op should have: its result type's, or f32
// when the type names none.
DataType result_dtype(const KernelContext& ctx, std::uint32_t o) {
  const Type t = ctx.op()->result_type(o);
  return is_shaped(t) ? shaped_data_type(t) : DataType::Float32;
}

void run_via_f32(KernelContext& ctx, KernelFn f32) {
  if (!f32)
    throw_error(ErrorKind::Unimplemented, "op '", ctx.op()->name(),
                "' has no CPU f32 kernel to compute its 16-bit form with");
  const std::uint32_t ni = ctx.num_inputs(), no = ctx.num_outputs();
  std::deque<Variable> vars;
  std::vector<Variable*> ins(ni), outs(no);
  for (std::uint32_t i = 0; i < ni; ++i) {
    const Tensor* t = ctx.input_var(i).held_or_parked();
    vars.emplace_back("in" + std::to_string(i));
    if (t && t->is_initialized()) vars.back().set(is_half(t->dtype()) ? widened(*t) : *t);
    ins[i] = &vars.back();
  }
  for (std::uint32_t o = 0; o < no; ++o) {
    vars.emplace_back("out" + std::to_string(o));
    outs[o] = &vars.back();
  }
  KernelContext inner(ctx.op(), ins.data(), ni, outs.data(), no, ctx.attrs_ptr(), ctx.place(), &ctx.allocator());
  inner.set_step(ctx.step());
  f32(inner);
  for (std::uint32_t o = 0; o < no; ++o) {
    if (!outs[o]->is<Tensor>() || !outs[o]->get<Tensor>().is_initialized()) continue;  // left unused
    const Tensor& f = outs[o]->get<Tensor>();
    const DataType want = result_dtype(ctx, o);
    if (is_half(want) && f.dtype() == DataType::Float32) store_rounded(ctx, o, f, want);
    else ctx.output_var(o).set(f);
  }
}

template <typename OpT>
struct HalfViaF32 {
  static void run(KernelContext& ctx) {
    static const KernelFn f32 = [] {
      const KernelInfo* k = KernelRegistry::instance().find(TypeId::get<OpT>(), PlaceKind::Cpu, DataType::Float32);
      return k ? k->fn : nullptr;
    }();
    run_via_f32(ctx, f32);
  }
};

template <typename OpT>
void register_half(const char* name) {
  KernelRegistrar<OpT>(PlaceKind::Cpu, DataType::BFloat16, &HalfViaF32<OpT>::run, name);
  KernelRegistrar<OpT>(PlaceKind::Cpu, DataType::Float16, &HalfViaF32<OpT>::run, name);
}

template <typename... OpTs>
void register_halves() {
  (register_half<OpTs>(OpTs::name.data()), ...);
}

// The unary family and its gradients.
template <typename... Maths>
void register_unary_halves(MathList<Maths...>) {
  (register_halves<UnaryOp<Maths>, GradOf<UnaryOp<Maths>>>(), ...);
}

// The ops of a transformer's, an MLP's and a CNN head's forward and
// backward that have no 16-bit kernel of their own (the binary family,
// matmul, add_n, cast and the dtype-agnostic data movement have theirs).
[[maybe_unused]] const bool registered = [] {
  register_unary_halves(UnaryFamily{});
  register_halves<GeluOp, GradOf<GeluOp>, ScaleOp, LayerNormOp, GradOf<LayerNormOp>, RmsNormOp,
                  GradOf<RmsNormOp>, ScaledDotProductAttentionOp, GradOf<ScaledDotProductAttentionOp>,
                  SoftmaxOp, GradOf<SoftmaxOp>, LogSoftmaxOp, GradOf<LogSoftmaxOp>, SumOp, GradOf<SumOp>,
                  MeanOp, GradOf<MeanOp>, MaxOp, GradOf<MaxOp>, ReduceAsOp, SplitAsOp, GradOf<SliceOp>,
                  DropoutOp, GradOf<DropoutOp>, GradOf<MaximumOp>, GradOf<MinimumOp>>();
  return true;
}();

}  // namespace
}  // namespace kiln::cpu

// bf16 and f16 kernels on the CPU for the ops mixed precision's O2 runs in
// low precision and that have no 16-bit kernel of their own
// (kiln/kernel/half_via_f32.h's list): each 16-bit input widened to f32,
// the op's own f32 kernel run on the widened inputs, each output rounded
// once to the dtype its result type names. These are the reference the
// CUDA 16-bit kernels are held to; on the CPU they cost a widening and a
// rounding pass per call.
#include <cstdint>
#include <type_traits>

#include "cpu_half.h"
#include "cpu_kernel_util.h"
#include "kiln/kernel/half_via_f32.h"

namespace kiln::cpu {
namespace {

Tensor widened(const KernelContext&, const Tensor& t, Allocator&) {
  return t.dtype() == DataType::Float16 ? widen_half<DataType::Float16>(t) : widen_half<DataType::BFloat16>(t);
}

// Output o of ctx (dtype `dt`, 16-bit) = f rounded.
void store_rounded(KernelContext& ctx, std::uint32_t o, const Tensor& f, DataType dt) {
  Tensor& out = ctx.alloc_output(o, f.dims(), dt);
  if (dt == DataType::Float16) round_half<DataType::Float16>(f, out);
  else round_half<DataType::BFloat16>(f, out);
}

void store(KernelContext& ctx, std::uint32_t o, const Tensor& t) { ctx.output_var(o).set(t); }

constexpr HalfConversions kConversions{&widened, &store_rounded, &store};

KernelFn f32_kernel(TypeId op) {
  const KernelInfo* k = KernelRegistry::instance().find(op, PlaceKind::Cpu, DataType::Float32);
  return k ? k->fn : nullptr;
}

template <typename OpT>
struct HalfViaF32 {
  static void run(KernelContext& ctx) {
    static const KernelFn f32 = f32_kernel(TypeId::get<OpT>());
    run_half_via_f32(ctx, f32, kConversions, ctx.allocator());
  }
};

template <typename OpT, typename... Own>
constexpr bool listed(OpTypeList<Own...>) {
  return (std::is_same_v<OpT, Own> || ...);
}

template <typename OpT>
void register_half(std::string_view name) {
  if constexpr (listed<OpT>(CpuOwnHalfOps{})) return;
  if constexpr (!listed<OpT>(CpuOwnBf16Ops{}))
    KernelRegistrar<OpT>(PlaceKind::Cpu, DataType::BFloat16, &HalfViaF32<OpT>::run, name);
  KernelRegistrar<OpT>(PlaceKind::Cpu, DataType::Float16, &HalfViaF32<OpT>::run, name);
}

template <typename... OpTs>
void register_halves(OpTypeList<OpTs...>) {
  (register_half<OpTs>(OpTs::name), ...);
}

[[maybe_unused]] const bool registered = [] {
  register_halves(HalfViaF32Ops{});
  return true;
}();

}  // namespace

void run_cpu_half_via_f32(KernelContext& ctx, TypeId op) {
  run_half_via_f32(ctx, f32_kernel(op), kConversions, ctx.allocator());
}

}  // namespace kiln::cpu

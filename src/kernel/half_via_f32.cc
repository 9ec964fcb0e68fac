// run_half_via_f32 (kiln/kernel/half_via_f32.h): the f32 kernel on an inner
// context whose variables hold the widened inputs and take its outputs.
#include "kiln/kernel/half_via_f32.h"

#include <deque>
#include <string>
#include <vector>

#include "kiln/ir/builtin_types.h"

namespace kiln {
namespace {

bool is_half(DataType dt) { return dt == DataType::BFloat16 || dt == DataType::Float16; }

// The dtype result o of the op should have: its result type's, or f32
// when the type names none.
DataType result_dtype(const KernelContext& ctx, std::uint32_t o) {
  const Type t = ctx.op()->result_type(o);
  return is_shaped(t) ? shaped_data_type(t) : DataType::Float32;
}

}  // namespace

void run_half_via_f32(KernelContext& ctx, KernelFn f32, const HalfConversions& conversions,
                      Allocator& allocator) {
  if (!f32)
    throw_error(ErrorKind::Unimplemented, "op '", ctx.op()->name(), "' has no f32 kernel on ",
                ctx.place().to_string(), " to compute its 16-bit form with");
  const std::uint32_t ni = ctx.num_inputs(), no = ctx.num_outputs();
  std::deque<Variable> vars;  // the widened inputs and the f32 outputs, gone on return
  std::vector<Variable*> ins(ni), outs(no);
  for (std::uint32_t i = 0; i < ni; ++i) {
    const Tensor* t = ctx.input_var(i).held_or_parked();
    vars.emplace_back("in" + std::to_string(i));
    if (t && t->is_initialized())
      vars.back().set(is_half(t->dtype()) ? conversions.widen(ctx, *t, allocator) : *t);
    ins[i] = &vars.back();
  }
  for (std::uint32_t o = 0; o < no; ++o) {
    vars.emplace_back("out" + std::to_string(o));
    outs[o] = &vars.back();
  }
  KernelContext inner(ctx.op(), ins.data(), ni, outs.data(), no, ctx.attrs_ptr(), ctx.place(), &allocator);
  inner.set_step(ctx.step());
  inner.set_stream(ctx.stream());
  f32(inner);
  for (std::uint32_t o = 0; o < no; ++o) {
    if (!outs[o]->is<Tensor>() || !outs[o]->get<Tensor>().is_initialized()) continue;  // left unused
    const Tensor& f = outs[o]->get<Tensor>();
    const DataType want = result_dtype(ctx, o);
    if (is_half(want) && f.dtype() == DataType::Float32) conversions.round(ctx, o, f, want);
    else conversions.keep(ctx, o, f);
  }
}

}  // namespace kiln

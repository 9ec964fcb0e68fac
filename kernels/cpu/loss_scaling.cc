// CPU kernels of the loss-scaling ops (kiln/dialect/loss_scaling_ops.h):
// check_finite_and_unscale over f32, f64, bf16 and f16 tensors (16-bit
// values widened to f32, multiplied, rounded once), and
// update_loss_scaling_'s state step (kiln/kernel/loss_scaling_math.h).
#include <cmath>
#include <cstdint>

#include "cpu_kernel_util.h"
#include "kiln/dialect/loss_scaling_ops.h"
#include "kiln/kernel/loss_scaling_math.h"
#include "kiln/support/half.h"

namespace kiln::cpu {
namespace {

// The one element of input i, of T; kiln::Error naming the op and operand
// otherwise.
template <typename T>
T one_element(const KernelContext& ctx, std::uint32_t i, std::string_view what) {
  const Tensor& t = typed_input<T>(ctx, i);
  if (t.numel() != 1)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' operand '", what, "' (#", i,
                ") must hold one element, got shape [", t.dims().to_string(), "]");
  return *t.data<T>();
}

// y = x · inv; true when some x is an inf or a nan.
template <typename T, typename C>
bool unscale(const T* x, T* y, std::int64_t n, C inv) {
  bool bad = false;
  for (std::int64_t i = 0; i < n; ++i) {
    bad |= !std::isfinite(x[i]);
    y[i] = x[i] * inv;
  }
  return bad;
}

// The 16-bit form: widened, multiplied in f32, rounded.
template <DataType D>
bool unscale_half(const std::uint16_t* x, std::uint16_t* y, std::int64_t n, float inv) {
  bool bad = false;
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = D == DataType::Float16 ? half_to_float(x[i]) : bfloat16_to_float(x[i]);
    bad |= !std::isfinite(v);
    const float r = v * inv;
    y[i] = D == DataType::Float16 ? float_to_half(r) : float_to_bfloat16(r);
  }
  return bad;
}

// y = x / scale as x · (1 / scale), the inverse in x's compute type.
bool unscale_tensor(const Tensor& x, Tensor& y, float scale) {
  const std::int64_t n = x.numel();
  const float inv = 1.0f / scale;
  switch (x.dtype()) {
    case DataType::Float32: return unscale(x.data<float>(), y.data<float>(), n, inv);
    case DataType::Float64: return unscale(x.data<double>(), y.data<double>(), n, 1.0 / double(scale));
    case DataType::Float16:
      return unscale_half<DataType::Float16>(static_cast<const std::uint16_t*>(x.raw_data()),
                                             static_cast<std::uint16_t*>(y.raw_data()), n, inv);
    case DataType::BFloat16:
      return unscale_half<DataType::BFloat16>(static_cast<const std::uint16_t*>(x.raw_data()),
                                              static_cast<std::uint16_t*>(y.raw_data()), n, inv);
    default: return false;  // InferMeta admits only these
  }
}

void check_finite_and_unscale_kernel(KernelContext& ctx) {
  const float scale = one_element<float>(ctx, 0, "scale");
  const std::uint32_t k = ctx.num_inputs() - 1;
  bool found = false;
  for (std::uint32_t i = 0; i < k; ++i) {
    const Tensor& x = ctx.input(1 + i);
    if (x.dtype() != DataType::Float32 && x.dtype() != DataType::Float64 &&
        x.dtype() != DataType::Float16 && x.dtype() != DataType::BFloat16)
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' operand #", 1 + i,
                  " must be a f32, f64, bf16 or f16 tensor, got ", x.type_string());
    Tensor& y = ctx.alloc_output(i, x.dims(), x.dtype());
    found |= unscale_tensor(x, y, scale);
  }
  *ctx.alloc_output(k, Dims{1}, DataType::Bool).data<bool>() = found;
}

void update_loss_scaling_kernel(KernelContext& ctx) {
  const auto& a = ctx.attrs<UpdateLossScaling_Op>();
  const auto& names = UpdateLossScaling_Op::operand_names;
  const bool found = one_element<bool>(ctx, 0, names[0]);
  LossScaleState s{one_element<float>(ctx, 1, names[1]), one_element<std::int32_t>(ctx, 2, names[2]),
                   one_element<std::int32_t>(ctx, 3, names[3])};
  s = next_loss_scale(s, found, LossScaleRule{a.incr_every_n_steps, a.decr_every_n_nan_or_inf,
                                              a.incr_ratio, a.decr_ratio});
  *updated<float>(ctx, 0, 1, ctx.input(1)) = s.scale;
  *updated<std::int32_t>(ctx, 1, 2, ctx.input(2)) = s.good;
  *updated<std::int32_t>(ctx, 2, 3, ctx.input(3)) = s.bad;
}

}  // namespace

KILN_REGISTER_KERNEL(CheckFiniteAndUnscaleOp, Cpu, Float32, check_finite_and_unscale_kernel);
KILN_REGISTER_KERNEL(UpdateLossScaling_Op, Cpu, Bool, update_loss_scaling_kernel);

}  // namespace kiln::cpu

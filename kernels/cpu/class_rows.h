// Rows of classes for the cross-entropy kernels (private to kernels/cpu):
// a class-last tensor seen as n rows of c classes, its labels checked and
// read as i64 or i32.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "cpu_kernel_util.h"

namespace kiln::cpu {

// A class-last tensor's shape `d` ([..., C]) seen as n rows of c classes,
// with the loss's dims [..., 1]; `label` must fit it ([...] or [..., 1],
// i64 or i32). Errors name the op and the tensor (`what`).
struct ClassRows {
  std::int64_t n = 0, c = 0;
  Dims loss_dims;
};

inline ClassRows class_rows(const KernelContext& ctx, const Dims& d, const Tensor& label,
                            std::string_view what) {
  const std::string_view op = ctx.op()->name();
  if (d.rank() < 2)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' ", what, " must have rank >= 2, got [",
                d.to_string(), "]");
  std::int64_t lead[Dims::kMaxRank];
  for (int i = 0; i + 1 < d.rank(); ++i) lead[i] = d[i];
  lead[d.rank() - 1] = 1;
  ClassRows r{0, d[d.rank() - 1], Dims(std::span<const std::int64_t>(lead, d.rank()))};
  const Dims label_dims(std::span<const std::int64_t>(lead, d.rank() - 1));
  if (label.dims() != r.loss_dims && label.dims() != label_dims)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' label dims [", label.dims().to_string(),
                "] do not fit ", what, " [", d.to_string(), "] (expected [", label_dims.to_string(),
                "] or [", r.loss_dims.to_string(), "])");
  if (label.dtype() != DataType::Int64 && label.dtype() != DataType::Int32)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' label must be i64 or i32, got ",
                to_string(label.dtype()));
  r.n = r.loss_dims.numel();
  return r;
}

// Every label in [0, c) or ignore_index: checked before anything is
// written, so a bad one leaves no half-written output.
template <typename L>
void check_labels(const KernelContext& ctx, const L* label, std::int64_t n, std::int64_t c,
                  std::int64_t ignore) {
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t l = static_cast<std::int64_t>(label[i]);
    if (l != ignore && (l < 0 || l >= c))
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' row ", i,
                  " has label ", l, ", outside [0, ", c, ") (ignore_index = ", ignore, ")");
  }
}

// f(labels) with the label tensor's data as const i64* or const i32*.
template <typename F>
void with_labels(const Tensor& label, F&& f) {
  if (label.dtype() == DataType::Int64) f(label.data<std::int64_t>());
  else f(label.data<std::int32_t>());
}

// The gradients' dloss: the loss's dims. Error names the op.
inline void check_dloss(const KernelContext& ctx, const Tensor& dloss, const ClassRows& r,
                        std::string_view what = "dloss") {
  if (dloss.dims() != r.loss_dims)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' ", what, " dims [",
                dloss.dims().to_string(), "] must be the loss's [", r.loss_dims.to_string(), "]");
}

}  // namespace kiln::cpu

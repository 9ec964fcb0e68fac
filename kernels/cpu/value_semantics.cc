// CPU kernels of kiln.to_vtensor and kiln.to_tensor: a deep copy (the
// result never shares its operand's buffer, so a later in-place write to one
// cannot reach the other).
#include <cstring>

#include "cpu_kernel_util.h"
#include "kiln/dialect/value_semantics_ops.h"

namespace kiln::cpu {
namespace {

void deep_copy_kernel(KernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  Tensor& out = ctx.alloc_output(0, in.dims(), in.dtype());
  if (in.bytes()) std::memcpy(out.raw_data(), in.raw_data(), in.bytes());
}

}  // namespace

KILN_REGISTER_KERNEL(ToVTensorOp, Cpu, Undefined, deep_copy_kernel);
KILN_REGISTER_KERNEL(ToTensorOp, Cpu, Undefined, deep_copy_kernel);

}  // namespace kiln::cpu

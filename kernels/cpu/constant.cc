// CPU kernel of builtin.constant with a tensor value (kiln/ir/
// tensor_attribute.h): the value's bytes copied into the output each run, so
// nothing a later op or a caller does to the output reaches the attribute.
#include <cstring>

#include "cpu_kernel_util.h"
#include "kiln/dialect/builtin.h"
#include "kiln/ir/tensor_attribute.h"

namespace kiln::cpu {
namespace {

void constant_kernel(KernelContext& ctx) {
  const auto value = ctx.op()->attribute("value").dyn_cast<TensorAttribute>();
  if (!value)
    throw_error(ErrorKind::Unimplemented, "op 'builtin.constant' runs only with a tensor value, got ",
                ctx.op()->attribute("value").to_string());
  Tensor& out = ctx.alloc_output(0, Dims(value.dims()), value.dtype());
  if (out.bytes()) std::memcpy(out.raw_data(), value.bytes().data(), out.bytes());
}

}  // namespace

KILN_REGISTER_KERNEL(ConstantOp, Cpu, Undefined, constant_kernel);

}  // namespace kiln::cpu

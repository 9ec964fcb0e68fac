#include "kiln/kernel/full_attributes.h"

#include "kiln/dialect/infer_meta_util.h"

namespace kiln {

const FullOp::Attributes& checked_full_attributes(const KernelContext& ctx, DataType dt) {
  const auto& a = ctx.attrs<FullOp>();
  for (auto d : a.shape)
    if (d < 0)
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                  "' needs a fully known shape at run time, got ", meta::dims_string(a.shape));
  if (a.dtype != dt)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' has dtype ", to_string(a.dtype),
                ", the kernel fills ", to_string(dt));
  return a;
}

}  // namespace kiln

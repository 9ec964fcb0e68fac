// kiln.full's attributes as every backend's kernel checks them at run time.
#pragma once

#include "kiln/dialect/tensor_ops.h"
#include "kiln/kernel/kernel_context.h"

namespace kiln {

// ctx's FullOp attributes, checked against the kernel's dtype `dt`: a
// shape known at run time and the dtype the kernel fills; kiln::Error
// naming the op otherwise.
const FullOp::Attributes& checked_full_attributes(const KernelContext& ctx, DataType dt);

}  // namespace kiln

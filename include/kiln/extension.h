// Everything kiln.h holds, and what extending kiln takes: the op set (every
// op class of the kiln dialect), defining one's own op (Op<>, traits,
// interfaces, GradOf, KILN_REGISTER_OP) and building ops directly
// (Builder::create), kernels (KernelContext, KILN_REGISTER_KERNEL), and the
// passes (PassManager, rewrite patterns, dce / cse / fold / simplify).
// kiln.h leaves these out so that a host file that only builds, trains and
// runs models through the frontend compiles quickly.
#pragma once

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/ir/builder.h"
#include "kiln/kernel/kernel_registry.h"
#include "kiln/kiln.h"
#include "kiln/passes/constant_fold.h"
#include "kiln/passes/cse.h"
#include "kiln/passes/dce.h"
#include "kiln/passes/pass_manager.h"
#include "kiln/passes/pattern.h"
#include "kiln/passes/simplify.h"

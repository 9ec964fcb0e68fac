// Everything a user program needs, in one include: the op set (and what
// defining one's own op takes: Op<>, traits, interfaces, GradOf,
// KILN_REGISTER_OP), the kernel registry, the executor, the frontend
// (ProgramGuard, data, layers, losses, optimizers, schedules, metrics), the
// data loader, the io: JSON programs, weights, inference models, CSV, and
// the passes (PassManager, rewrite patterns, dce / cse / fold / simplify).
#pragma once

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/executor.h"
#include "kiln/exec/step_stats.h"
#include "kiln/frontend/data_loader.h"
#include "kiln/frontend/frontend.h"
#include "kiln/io/csv.h"
#include "kiln/io/inference_model.h"
#include "kiln/io/json.h"
#include "kiln/io/weights.h"
#include "kiln/kernel/kernel_registry.h"
#include "kiln/passes/constant_fold.h"
#include "kiln/passes/cse.h"
#include "kiln/passes/dce.h"
#include "kiln/passes/pass_manager.h"
#include "kiln/passes/pattern.h"
#include "kiln/passes/simplify.h"
#include "kiln/runtime/cpu_allocator.h"
#include "kiln/runtime/scope.h"

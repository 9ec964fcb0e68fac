// What a user program needs, in one include: build a model with the
// frontend (ProgramGuard, data, layers, losses, optimizers, schedules,
// metrics), run and train it with the executor, feed it from the data
// loader, and save and load it (JSON programs, weights, inference models,
// CSV). Extending kiln — its op classes, defining one's own op, kernels,
// passes — is kiln/extension.h, which includes this header too.
#pragma once

#include "kiln/exec/executor.h"
#include "kiln/exec/step_stats.h"
#include "kiln/frontend/data_loader.h"
#include "kiln/frontend/frontend.h"
#include "kiln/io/csv.h"
#include "kiln/io/inference_model.h"
#include "kiln/io/json.h"
#include "kiln/io/weights.h"
#include "kiln/runtime/cpu_allocator.h"
#include "kiln/runtime/scope.h"

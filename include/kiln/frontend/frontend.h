// The program-building frontend (seed 001 §一): ProgramGuard, unique names,
// data, parameters and initializers, stop_gradient, nn layers and losses,
// comparisons and constants, control flow (cond, while_loop, switch_case),
// append_backward, the optimizers and their learning-rate schedules,
// metrics, op roles, and the for-test clone and pruning of a program.
// Including this header gives all of them.
#pragma once

#include "kiln/frontend/backward.h"
#include "kiln/frontend/capture.h"
#include "kiln/frontend/clone_for_test.h"
#include "kiln/frontend/control_flow.h"
#include "kiln/frontend/data.h"
#include "kiln/frontend/initializer.h"
#include "kiln/frontend/lr_scheduler.h"
#include "kiln/frontend/math.h"
#include "kiln/frontend/metrics.h"
#include "kiln/frontend/nn.h"
#include "kiln/frontend/op_role.h"
#include "kiln/frontend/optimizer.h"
#include "kiln/frontend/parameter.h"
#include "kiln/frontend/program_guard.h"
#include "kiln/frontend/prune.h"
#include "kiln/frontend/rnn.h"
#include "kiln/frontend/stop_gradient.h"
#include "kiln/frontend/tensor_array.h"
#include "kiln/frontend/unique_name.h"

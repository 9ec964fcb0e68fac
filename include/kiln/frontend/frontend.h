// The program-building frontend (seed 001 §一): ProgramGuard, unique names,
// data, parameters and initializers, stop_gradient, nn layers and losses,
// append_backward and the optimizers. Including this header gives all of them.
#pragma once

#include "kiln/frontend/backward.h"
#include "kiln/frontend/data.h"
#include "kiln/frontend/initializer.h"
#include "kiln/frontend/nn.h"
#include "kiln/frontend/optimizer.h"
#include "kiln/frontend/parameter.h"
#include "kiln/frontend/program_guard.h"
#include "kiln/frontend/stop_gradient.h"
#include "kiln/frontend/unique_name.h"

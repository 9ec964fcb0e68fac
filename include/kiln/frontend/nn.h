// kiln::nn: layers, losses and their functional forms (seed 001 §1.2).
// Including this header gives all of them.
#pragma once

#include "kiln/frontend/functional.h"
#include "kiln/frontend/layers.h"
#include "kiln/frontend/loss.h"

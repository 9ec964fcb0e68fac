// Parameters (seed 001 §1.1, seed 002 §2.1.4): create_parameter puts the
// initializer op and `builtin.set_parameter` in the current startup program
// and a `builtin.parameter` reading it in the current main program; both
// programs' parameter maps record its name and type. A parameter's
// stop_gradient is !trainable (optimizer state: trainable = false).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/frontend/initializer.h"
#include "kiln/ir/program.h"

namespace kiln {

// The value of `builtin.parameter` in the current main program. kiln::Error:
// an empty name, a dim < 0, a name the main program already has
// (AlreadyExists), no active ProgramGuard / startup program.
Value create_parameter(const std::string& name, const std::vector<std::int64_t>& shape,
                       DataType dtype, const init::Initializer& initializer,
                       bool trainable = true);

// The value of the current main program's `builtin.parameter` op for `name`
// (the first one); if the main program has none yet, one is added with
// `type` (so a layer made under one guard can be used under another).
// kiln::Error(NotFound) when there is none and `type` is null.
Value parameter_value(const std::string& name, Type type = {}, bool trainable = true);

// The program's `builtin.parameter` values in program order (one per name).
std::vector<Value> all_parameters(const Program& program);
// Those whose stop_gradient is false — what an optimizer updates.
std::vector<Value> trainable_parameters(const Program& program);
// The parameter name of a `builtin.parameter` value; empty for other values.
std::string parameter_name(Value v);

}  // namespace kiln

// stop_gradient per value (seed 001 §1.2.2.1): a value marked stop_gradient
// gets no gradient and cuts backward there. As in Paddle's new IR, the flag
// lives on the defining op as the attribute `stop_gradient`: an array of
// bools, one per result (absent = false), so it survives clone and JSON.
// data() values default to true, trainable parameters to false.
#pragma once

#include "kiln/ir/value.h"

namespace kiln {

inline constexpr std::string_view kStopGradientAttr = "stop_gradient";

// A null value or a block argument is a kiln::Error(InvalidArgument).
void set_stop_gradient(Value v, bool stop = true);
// False for a value whose op carries no flag (and for block arguments).
bool stop_gradient(Value v);

}  // namespace kiln

// data(): a named input of the main program, fed by the executor (seed 001
// §1.2, `paddle.static.data(name, shape)`); -1 marks a dimension known only
// when fed (the batch). Builds `kiln.data`; the value is stop_gradient.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/ir/value.h"
#include "kiln/support/data_type.h"
#include "kiln/support/place.h"

namespace kiln {

// `place`: where the fed tensor lives. The host (default) is copied to a
// device program's place every run; a batch kept on the device (fed as a
// tensor on that place, PyTorch's `x = x.to("cuda")` once) is not.
// kiln::Error: an empty name, a dim < -1, or a second data op of that name
// in the current main program (AlreadyExists).
Value data(const std::string& name, const std::vector<std::int64_t>& shape,
           DataType dtype = DataType::Float32, Place place = Place::cpu());

}  // namespace kiln

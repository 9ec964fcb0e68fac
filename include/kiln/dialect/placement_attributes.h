// The op attributes that place an op: the device it runs on and the stream
// its kernel is launched onto. Set by the frontend and the partitioner
// (kiln/exec/partitioner.h's set_op_place), kept by the passes (an op that
// carries one has an effect they must not move or merge away), read by the
// executor.
#pragma once

#include <string_view>

namespace kiln {

// The device an op runs on (a Place attribute; absent: the executor's).
inline constexpr std::string_view kPlaceAttr = "kiln.place";
// The stream an op's kernel is launched onto (a non-empty string; ops
// naming the same string share one in-order stream).
inline constexpr std::string_view kExecutionStreamAttr = "execution_stream";

}  // namespace kiln

// abort_step: a step failed — a kernel or a stream of one of its runs, or a
// run whose feeds or plan were rejected before it started — so its
// rendezvous is aborted (TensorFlow's StartAbort) and the step's receives
// elsewhere fail at once instead of waiting for values that never come.
// Shared by RunState and the run entry points (InterpreterCore, Executor).
#pragma once

#include <cstdint>
#include <exception>
#include <string>

namespace kiln {

class LocalRendezvous;

// Aborts `rendezvous` with ErrorKind::Aborted: "the rendezvous of step N was
// aborted: <where> failed: <cause's message>" (no step when `step_id` is 0).
// An abort that came first stands. Never throws.
void abort_step(LocalRendezvous& rendezvous, std::int64_t step_id, const std::string& where,
                const std::exception_ptr& cause) noexcept;

}  // namespace kiln

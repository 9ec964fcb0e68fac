// ProgramGuard: which Program the frontend builds into (seed 001 §1.1,
// `with program_guard(main_program, startup_program)`). Guards nest (a
// per-thread stack); leaving one restores the programs before it. kiln has
// no default global programs: building with no guard active is a
// kiln::Error(PreconditionNotMet) saying so.
#pragma once

#include "kiln/ir/builder.h"
#include "kiln/ir/program.h"

namespace kiln {

class ProgramGuard {
 public:
  // `main` receives the model's ops, `startup` the parameters' initializers.
  ProgramGuard(Program& main, Program& startup);
  // Only the main program changes; the startup program stays the enclosing
  // guard's (none when there is no enclosing guard).
  explicit ProgramGuard(Program& main);
  ~ProgramGuard();
  ProgramGuard(const ProgramGuard&) = delete;
  ProgramGuard& operator=(const ProgramGuard&) = delete;
};

// True while a ProgramGuard is active on this thread.
bool has_program_guard();
// The innermost guard's programs; kiln::Error(PreconditionNotMet) when no
// guard is active (or, for the startup program, when the guard has none).
Program& current_main_program();
Program& current_startup_program();
// Builders inserting at the end of the current main / startup program.
Builder main_builder();
Builder startup_builder();

}  // namespace kiln

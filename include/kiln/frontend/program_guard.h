// ProgramGuard: which Program the frontend builds into (seed 001 §1.1,
// `with program_guard(main_program, startup_program)`). Guards nest (a
// per-thread stack); leaving one restores the programs before it. kiln has
// no default global programs: building with no guard active is a
// kiln::Error(PreconditionNotMet) saying so.
//
// Within a guard, a BlockGuard makes a detached Block (one in no region yet:
// the body of a control-flow op being built) the block main_builder() fills;
// BlockGuards nest, and leaving one returns to the block before it. data()
// and parameters still go to the main program's top block, which stays
// ahead of the control-flow op, created only after its blocks are built.
#pragma once

#include "kiln/ir/program.h"
#include "kiln/ir/value.h"

namespace kiln {

class Builder;  // kiln/ir/builder.h, for main_builder() / startup_builder()

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

// Builds into `block` (detached: in no region) until destroyed. Needs an
// active ProgramGuard (kiln::Error(PreconditionNotMet) otherwise); the
// block must outlive the guard, and guards leave in reverse order.
class BlockGuard {
 public:
  explicit BlockGuard(Block& block);
  ~BlockGuard();
  BlockGuard(const BlockGuard&) = delete;
  BlockGuard& operator=(const BlockGuard&) = delete;
};

// True while a ProgramGuard is active on this thread.
bool has_program_guard();
// The innermost guard's programs; kiln::Error(PreconditionNotMet) when no
// guard is active (or, for the startup program, when the guard has none).
Program& current_main_program();
Program& current_startup_program();
// The block being filled: the innermost BlockGuard's block, else the
// current main program's top block.
Block& current_block();
// Whether ops of the current block may use `v`: it is defined in the
// current main program's top block or in a block of the active BlockGuards
// (or in a region nested in one of these). False for a null value.
bool in_current_program(Value v);
// Builders inserting at the end of the current block / the startup
// program's top block.
Builder main_builder();
Builder startup_builder();

}  // namespace kiln

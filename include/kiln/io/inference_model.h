// Inference export (Paddle's `paddle.static.save_inference_model` /
// `load_inference_model`): a trained program's for-test, pruned form as a
// JSON program file plus a weights file, with its feed names and fetch
// targets recorded, loadable in a fresh process ready for Executor::run.
#pragma once

#include <string>
#include <vector>

#include "kiln/exec/execution_options.h"
#include "kiln/ir/program.h"
#include "kiln/runtime/scope.h"

namespace kiln {

// The files of a model saved under `path_prefix`: "<prefix>.json" (the
// program, kiln/io/json.h) and "<prefix>.weights" (kiln/io/weights.h).
std::string inference_program_path(const std::string& path_prefix);
std::string inference_weights_path(const std::string& path_prefix);

// What load_inference_model returns: run it with
//   exe.run(model.program, {{model.feed_names[0], x}, …}, model.fetch_targets)
struct InferenceModel {
  Program program;
  // The names of its kiln.data ops, in the order given to the save.
  std::vector<std::string> feed_names;
  // Values of `program`, in the order given to the save.
  std::vector<FetchTarget> fetch_targets;
};

// Saves the inference form of `program`: prune(clone_for_test(program),
// fetch_targets) (kiln/frontend/clone_for_test.h, prune.h), its kiln.data
// ops moved to the front in `feed_names` order, then one kiln.fetch op per
// target (col = its index; named like the original program's kiln.fetch op
// of that value if it has one, else "fetch_<index>"), with each inference
// batch norm folded into the convolution before it where the pattern holds
// (fold_batch_norms, kiln/frontend/fold_batch_norm.h); and the weights of
// the parameters it keeps, taken from `scope` (or its ancestors) as
// save_weights does. Both files are written as one atomic save (write_files_atomic): a
// failed save leaves existing files untouched.
//
// kiln::Error naming what is wrong, before anything is written: no fetch
// targets; a target that is null, not a value of `program`'s top-level
// block, or computed by training-only ops (a gradient); a feed name that is
// empty, repeated, not a kiln.data op of `program` (NotFound), or not needed
// by the targets; a kiln.data op the targets need that `feed_names` lacks; a
// parameter the scope does not hold as saved (see save_weights); and a file
// that cannot be written (Unavailable, naming it).
void save_inference_model(const std::string& path_prefix,
                          const std::vector<std::string>& feed_names,
                          const std::vector<Value>& fetch_targets, const Program& program,
                          const Scope& scope);

// Loads what save_inference_model wrote under `path_prefix`: the program,
// its feed names and fetch targets; its parameters are set in `scope` (as
// load_weights does: tensors of the weights file the program lacks are
// skipped with a warning; a parameter missing from the file is an error).
// kiln::Error naming the file: missing (NotFound), not a program or weights
// file, corrupt or truncated, a program without kiln.fetch ops or whose
// fetch cols are not 0…n-1 (InvalidArgument). On an error `scope` is
// unchanged.
InferenceModel load_inference_model(const std::string& path_prefix, Scope& scope);

}  // namespace kiln

// Data-parallel training (each rank runs the same training program on its
// share of the batch): gradients are averaged over the ranks before the
// optimizer reads them, in buckets of about 25 MB whose allreduce starts as
// soon as the bucket's last gradient is computed and overlaps the rest of
// backward; parameters start equal because startup broadcasts them from
// rank 0. The collectives are ops (kiln/dialect/collective_ops.h) run over
// ExecutionOptions::communicator.
//
//   auto comm = kiln::Communicator::from_environment();
//   kiln::data_parallel(main_prog, startup, *comm);   // after minimize
//   kiln::ExecutionOptions options;
//   options.communicator = comm;
//   kiln::Executor exe(kiln::Place::cpu(), options);
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "kiln/ir/program.h"
#include "kiln/ir/value.h"
#include "kiln/passes/pass.h"
#include "kiln/support/data_type.h"

namespace kiln {

class Communicator;

struct DataParallelOptions {
  // A bucket closes once its gradients hold at least this many bytes (the
  // last one may hold less). 0: one bucket per gradient.
  std::size_t bucket_bytes = std::size_t{25} << 20;
  // The rank whose parameters every rank starts from.
  int root = 0;
};

// A parameter's gradient as backward made it: a value defined by a backward
// op (kiln/frontend/op_role.h) that an optimize op reads. `parameter` is
// empty when the optimizer reaches the gradient only through other ops
// (clipping, regularization) that hide which parameter it is for.
struct ParameterGradient {
  std::string parameter;
  Value gradient;
};

// One allreduce's worth of gradients, of one dtype, in the order they
// become ready (their defining ops' program order).
struct GradientBucket {
  DataType dtype = DataType::Undefined;
  std::size_t bytes = 0;
  std::vector<ParameterGradient> gradients;
  Operation* allreduce = nullptr;  // the kiln.allreduce reducing it
};

// What data_parallel did: the buckets, in the order their allreduces run.
struct DataParallelPlan {
  std::vector<GradientBucket> buckets;
  // "bucket 0 (f32, 1234 bytes): fc2.b_0 fc2.w_0\n…": the same text on every
  // rank that runs the same program.
  std::string describe() const;
};

// The gradients of a training program (after minimize / apply_gradients)
// in the order they become ready.
std::vector<ParameterGradient> parameter_gradients(const Program& main);

// Rewrites `main`: each bucket's gradients go through one kiln.allreduce
// {reduce = "mean"}, placed after the op that defines the bucket's last
// gradient and marked backward; the optimize ops read the averaged
// gradients. A bf16 / f16 gradient an update reads as it is (mixed
// precision) is averaged in f32, through a cast to f32 after it, as an f32
// parameter's gradient always is. kiln::Error (InvalidArgument) when `main` has no gradient an
// optimize op reads (run minimize first).
DataParallelPlan insert_gradient_allreduce(Program& main, const DataParallelOptions& options = {});

// Puts a kiln.broadcast {root} in front of every builtin.set_parameter of
// `startup`: every rank stores the root's initial values.
void broadcast_parameters(Program& startup, int root = 0);

// kiln::Error (InvalidArgument) on every rank unless every rank's `main`
// has the same parameter names, dtypes and shapes; it names the first
// parameter that differs and the ranks. A collective: every rank calls it.
void check_same_parameters(const Program& main, Communicator& comm);

// The whole transform: check_same_parameters, insert_gradient_allreduce,
// broadcast_parameters. A collective: every rank calls it, with the same
// options.
DataParallelPlan data_parallel(Program& main, Program& startup, Communicator& comm,
                               const DataParallelOptions& options = {});

// insert_gradient_allreduce as a pass ("data_parallel"), with `options`.
class DataParallelPass : public Pass {
 public:
  explicit DataParallelPass(DataParallelOptions options = {})
      : Pass("data_parallel"), options_(options) {}
  void run(Program& program, PassContext& ctx) override;
  // The buckets of the last run.
  const DataParallelPlan& plan() const { return plan_; }

 private:
  DataParallelOptions options_;
  DataParallelPlan plan_;
};

}  // namespace kiln

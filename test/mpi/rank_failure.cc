// A data-parallel job in which rank 0 fails in the middle of training (its
// step 5 is fed a batch of the wrong width): the exception escapes main on
// rank 0, and rank 1, waiting in that step's gradient allreduce, must fail
// with rank 0's error and end — no hang. With the argument "catch", rank 0
// catches its error and returns from main instead: rank 1 must then fail
// saying rank 0 left the job. rank_failure_test.py runs both under mpirun
// and checks the output and the time. Rank 0 prints when it fails (steady
// clock, ms) so the script can time the other rank's end.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/executor.h"
#include "kiln/frontend/data_parallel.h"
#include "kiln/frontend/frontend.h"
#include "kiln/frontend/optimizer.h"
#include "kiln/runtime/communicator.h"

namespace {

int train(const std::shared_ptr<kiln::Communicator>& comm);

}  // namespace

int main(int argc, char** argv) {
  const bool catch_on_rank0 = argc > 1 && std::string(argv[1]) == "catch";
  auto comm = kiln::Communicator::from_environment();
  if (!catch_on_rank0) return train(comm);
  try {
    return train(comm);
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "rank %d caught: %s\n", comm->rank(), e.what());
    return 1;
  }
}

namespace {

int train(const std::shared_ptr<kiln::Communicator>& comm) {
  kiln::Program main_prog, startup;
  {
    kiln::ProgramGuard guard(main_prog, startup);
    auto x = kiln::data("x", {-1, 8});
    auto label = kiln::data("label", {-1}, kiln::DataType::Int64);
    kiln::nn::Linear fc1(8, 16), fc2(16, 3);
    kiln::nn::ReLU relu;
    auto loss = kiln::nn::CrossEntropyLoss()(fc2(relu(fc1(x))), label);
    kiln::optim::SGD(0.1).minimize(loss);
  }
  kiln::data_parallel(main_prog, startup, *comm);
  kiln::ExecutionOptions options;
  options.communicator = comm;
  options.num_threads = 1;
  kiln::Executor exe(kiln::Place::cpu(), options);
  exe.run(startup);
  for (int step = 0; step < 10; ++step) {
    const std::int64_t width = comm->rank() == 0 && step == 5 ? 9 : 8;
    if (width != 8) {
      const auto now = std::chrono::steady_clock::now().time_since_epoch();
      std::printf("rank 0 fails at %lld ms\n",
                  static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(now).count()));
      std::fflush(stdout);
    }
    exe.run(main_prog,
            {{"x", kiln::Tensor::zeros({4, width}, kiln::DataType::Float32)},
             {"label", kiln::Tensor::zeros({4}, kiln::DataType::Int64)}},
            {});
  }
  std::printf("rank %d finished every step\n", comm->rank());
  return 0;
}

}  // namespace

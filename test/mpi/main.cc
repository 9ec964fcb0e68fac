// Catch2's main() for the multi-rank tests, run as `mpirun -np 2
// kiln_mpi_tests [-r xml -o FILE]`: every rank runs every test case (the
// cases call collectives, so the ranks must run the same ones in the same
// order); rank 0 writes the report FILE, another rank r writes FILE.rank<r>,
// and the exit status is the worst over the ranks.
#define CATCH_CONFIG_RUNNER
#include <string>
#include <vector>

#include "catch.hpp"
#include "kiln/runtime/communicator.h"

int main(int argc, char** argv) {
  auto comm = kiln::Communicator::from_environment();
  std::vector<std::string> args(argv, argv + argc);
  if (comm->rank() != 0)
    for (std::size_t i = 0; i + 1 < args.size(); ++i)
      if (args[i] == "-o" || args[i] == "--out") args[i + 1] += ".rank" + std::to_string(comm->rank());
  std::vector<char*> ptrs;
  for (std::string& a : args) ptrs.push_back(a.data());
  const int failed = Catch::Session().run(static_cast<int>(ptrs.size()), ptrs.data());
  kiln::Tensor status = kiln::Tensor::from_vector<std::int32_t>({1}, {failed ? 1 : 0});
  comm->allreduce(status, kiln::ReduceKind::Sum);
  return status.to_vector<std::int32_t>()[0] == 0 ? 0 : 1;
}

// The MPI backend of kiln::Communicator (implementation only): built when
// meson finds MPI (mpi_communicator.cc), absent otherwise (mpi_absent.cc);
// and whether the NCCL backend is built.
#pragma once

#include <memory>

#include "kiln/runtime/communicator.h"

namespace kiln::detail {

// Whether this build has the MPI backend.
bool mpi_available() noexcept;
// MPI_COMM_WORLD of the job mpirun started; MPI is initialized on the
// communicator's own thread. kiln::Error (Unavailable) without MPI.
std::shared_ptr<Communicator> make_mpi_communicator();
// Whether this build has the NCCL backend (nccl_communicator.cc or nccl_absent.cc).
bool nccl_available() noexcept;

}  // namespace kiln::detail

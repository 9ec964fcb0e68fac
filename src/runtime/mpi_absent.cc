// kiln built without MPI (meson did not find it): no MPI backend.
#include "mpi_communicator.h"

namespace kiln::detail {

bool mpi_available() noexcept { return false; }

std::shared_ptr<Communicator> make_mpi_communicator() {
  throw_error(ErrorKind::Unavailable, "kiln was built without MPI (install libopenmpi-dev and reconfigure)");
}

}  // namespace kiln::detail

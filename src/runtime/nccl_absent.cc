// kiln built without NCCL (or without CUDA): no NCCL backend.
#include "kiln/runtime/nccl_communicator.h"

#include "mpi_communicator.h"

namespace kiln {

std::shared_ptr<NcclCommunicator> NcclCommunicator::create(Communicator& bootstrap, int device) {
  throw_error(ErrorKind::Unavailable, "NCCL communicator on ", bootstrap.describe(), ", device ", device,
              ": kiln was built without NCCL (needs CUDA and nccl.h / libnccl)");
}

namespace detail {
bool nccl_available() noexcept { return false; }
}  // namespace detail

}  // namespace kiln

// NcclCommunicator: the NCCL backend of kiln::Communicator, for CUDA
// tensors. Its ranks are those of a bootstrap communicator (MPI, or one
// local rank), each on one CUDA device; rank 0's NCCL id travels by the
// bootstrap's broadcast. The collective ops' CUDA kernels enqueue NCCL calls
// on the instruction's stream, in program order (Communication trait), and
// return: the device runs them in order with the kernels around them. The
// blocking calls (allreduce, …) run on the communicator's own stream and
// wait for it. Built when meson finds NCCL (nccl.h, libnccl) with CUDA.
#pragma once

#include <memory>
#include <span>

#include "kiln/runtime/communicator.h"

namespace kiln {

class NcclCommunicator : public Communicator {
 public:
  // Every rank of `bootstrap` calls it (a collective over `bootstrap`).
  // kiln::Error (Unavailable) when kiln was built without NCCL or the
  // device does not exist; (Internal) naming NCCL's message when it fails.
  static std::shared_ptr<NcclCommunicator> create(Communicator& bootstrap, int device);

  int device() const { return device_; }

  // Enqueued on `stream` (a cudaStream_t) and returning at once; tensors on
  // this communicator's device. allreduce's out[i] may be in[i]; several
  // tensors go as one NCCL group.
  virtual void allreduce_on(std::span<const Tensor* const> in, std::span<Tensor* const> out, ReduceKind kind,
                            void* stream) = 0;
  virtual void broadcast_on(const Tensor& in, Tensor& out, int root, void* stream) = 0;
  virtual void allgather_on(const Tensor& in, Tensor& out, void* stream) = 0;
  virtual void reduce_scatter_on(const Tensor& in, Tensor& out, ReduceKind kind, void* stream) = 0;
  // Work enqueued on `stream` after this completes once every rank got here.
  virtual void barrier_on(void* stream) = 0;

 protected:
  NcclCommunicator(int rank, int size, int device)
      : Communicator(rank, size, CommBackend::Nccl, /*own_thread=*/false), device_(device) {}
  bool reaches(Place place) const override {
    return place.kind == PlaceKind::Cuda && place.device == device_;
  }

 private:
  int device_;
};

}  // namespace kiln

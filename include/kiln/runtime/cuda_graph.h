// CudaGraph: the device work of one run captured from its streams once
// (cudaStreamBeginCapture … cudaStreamEndCapture) and replayed as a single
// launch, so a replay pays one launch instead of one per kernel (seed 001
// §4's per-op launch cost, removed the way CUDA Graphs do). Capture starts
// on one stream; another stream joins it by waiting on an event recorded on
// a capturing stream, and is joined back the same way before end_capture().
// Relaxed capture mode: the caching allocator may still call cudaMalloc.
//
// Built with CUDA only; without it every member is a kiln::Error
// (Unimplemented). No CUDA header is needed to include this one.
#pragma once

#include <string>

#include "kiln/runtime/cuda_stream.h"

namespace kiln {

class CudaGraph {
 public:
  CudaGraph() = default;
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Starts capturing the work launched on `stream` (and on the streams that
  // join it) instead of running it. The streams are CudaStreams (taken as
  // Streams so that callers need no CUDA symbol); kiln::Error
  // (InvalidArgument) for another kind.
  void begin_capture(Stream& stream);
  // Ends the capture begun on `stream` and instantiates the graph. Returns
  // "" on success; otherwise why the work could not be captured (the CUDA
  // error of the call that broke the capture, e.g. a host synchronisation),
  // and the graph stays empty.
  std::string end_capture(Stream& stream);
  // An instantiated graph is held.
  bool ready() const noexcept { return exec_ != nullptr; }
  // Launches the captured work on `stream` (asynchronous to the host).
  // kiln::Error (PreconditionNotMet) when no graph is ready.
  void replay(Stream& stream);
  // Drops the graph (a later capture makes a new one).
  void reset() noexcept;

 private:
  void* graph_ = nullptr;  // cudaGraph_t
  void* exec_ = nullptr;   // cudaGraphExec_t
};

}  // namespace kiln

// CudaGraph (kiln/runtime/cuda_graph.h) on the CUDA runtime API.
#include "kiln/runtime/cuda_graph.h"

#include <cuda_runtime_api.h>

namespace kiln {

namespace {
cudaStream_t handle_of(Stream& stream) {
  auto* s = dynamic_cast<CudaStream*>(&stream);
  if (!s) throw_error(ErrorKind::InvalidArgument, "a CUDA graph captures CUDA streams only");
  return s->handle();
}
}  // namespace

CudaGraph::~CudaGraph() { reset(); }

void CudaGraph::begin_capture(Stream& stream) {
  reset();
  check_cuda(cudaStreamBeginCapture(handle_of(stream), cudaStreamCaptureModeRelaxed),
             "beginning a CUDA graph capture");
}

std::string CudaGraph::end_capture(Stream& stream) {
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(handle_of(stream), &graph);
  if (ended != cudaSuccess) {
    cudaGetLastError();  // the capture's failure is reported here, not later
    if (graph) cudaGraphDestroy(graph);
    return std::string("the capture failed: ") + cudaGetErrorName(ended) + " (" +
           cudaGetErrorString(ended) + ")";
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  if (made != cudaSuccess) {
    cudaGetLastError();
    cudaGraphDestroy(graph);
    return std::string("the captured graph could not be instantiated: ") + cudaGetErrorName(made) +
           " (" + cudaGetErrorString(made) + ")";
  }
  graph_ = graph;
  exec_ = exec;
  return {};
}

void CudaGraph::replay(Stream& stream) {
  if (!exec_)
    throw_error(ErrorKind::PreconditionNotMet, "replaying a CUDA graph that was never captured");
  check_cuda(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), handle_of(stream)),
             "launching a CUDA graph");
}

void CudaGraph::reset() noexcept {
  if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  if (graph_) cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
  exec_ = graph_ = nullptr;
}

}  // namespace kiln

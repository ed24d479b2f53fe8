// launch_graph, replay_graph_unless: see graph_launch.hpp.
#include "syncopate/runtime/graph_launch.hpp"

#include "cuda_check.hpp"

namespace syncopate::runtime {

void launch_graph(std::uintptr_t graph_exec, cudaStream_t stream) {
  SY_CUDA_CHECK(cudaGraphLaunch(reinterpret_cast<cudaGraphExec_t>(graph_exec), stream));
}

ReplayOutcome replay_graph_unless(std::uintptr_t graph_exec, cudaStream_t stream, const WaitMonitor* monitor,
                                  const HostFlag* flag) {
  // The query torch.cuda.is_current_stream_capturing() makes (cudaStreamIsCapturing on the
  // current stream); any status but "none" (active, or invalidated) is a capture.
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky; clear it so no later check reports it
    return ReplayOutcome::status_error;
  }
  if (status != cudaStreamCaptureStatusNone) return ReplayOutcome::capturing;
  if ((monitor != nullptr && monitor->timed_out()) || (flag != nullptr && flag->value() != 0))
    return ReplayOutcome::timed_out;
  launch_graph(graph_exec, stream);
  return ReplayOutcome::launched;
}

}  // namespace syncopate::runtime

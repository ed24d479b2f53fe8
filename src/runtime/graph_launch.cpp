// launch_graph, replay_graph_unless, launch_split_graph, replay_split_graph_unless: see graph_launch.hpp.
#include "syncopate/runtime/graph_launch.hpp"

#include "cuda_check.hpp"

namespace syncopate::runtime {

void launch_graph(std::uintptr_t graph_exec, cudaStream_t stream) {
  SY_CUDA_CHECK(cudaGraphLaunch(reinterpret_cast<cudaGraphExec_t>(graph_exec), stream));
}

namespace {

// The checks of a guarded replay (graph_launch.hpp); launched if none holds.
ReplayOutcome replay_outcome(cudaStream_t stream, const WaitMonitor* monitor, const HostFlag* flag) {
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
  return ReplayOutcome::launched;
}

}  // namespace

ReplayOutcome replay_graph_unless(std::uintptr_t graph_exec, cudaStream_t stream, const WaitMonitor* monitor,
                                  const HostFlag* flag) {
  const ReplayOutcome outcome = replay_outcome(stream, monitor, flag);
  if (outcome == ReplayOutcome::launched) launch_graph(graph_exec, stream);
  return outcome;
}

void launch_split_graph(std::uintptr_t head, std::uintptr_t tail, cudaStream_t stream, cudaStream_t side,
                        cudaEvent_t done_event, bool tail_records_done) {
  // The head first: nothing else the host does for this call comes before the kernel's launch.
  SY_CUDA_CHECK(cudaGraphLaunch(reinterpret_cast<cudaGraphExec_t>(head), stream));
  SY_CUDA_CHECK(cudaGraphLaunch(reinterpret_cast<cudaGraphExec_t>(tail), side));
  if (!tail_records_done) SY_CUDA_CHECK(cudaEventRecord(done_event, side));
  SY_CUDA_CHECK(cudaStreamWaitEvent(stream, done_event, 0));
}

ReplayOutcome replay_split_graph_unless(std::uintptr_t head, std::uintptr_t tail, cudaStream_t side,
                                        cudaEvent_t done_event, bool tail_records_done, cudaStream_t stream,
                                        const WaitMonitor* monitor, const HostFlag* flag) {
  const ReplayOutcome outcome = replay_outcome(stream, monitor, flag);
  if (outcome == ReplayOutcome::launched) launch_split_graph(head, tail, stream, side, done_event, tail_records_done);
  return outcome;
}

}  // namespace syncopate::runtime

// launch_graph: see graph_launch.hpp.
#include "syncopate/runtime/graph_launch.hpp"

#include "cuda_check.hpp"

namespace syncopate::runtime {

void launch_graph(std::uintptr_t graph_exec, cudaStream_t stream) {
  SY_CUDA_CHECK(cudaGraphLaunch(reinterpret_cast<cudaGraphExec_t>(graph_exec), stream));
}

}  // namespace syncopate::runtime

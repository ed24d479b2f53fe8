// Launching an instantiated CUDA graph (a call captured by the Python ops, ops/call_graphs.py).
//
// torch.cuda.CUDAGraph.replay() does the same plus per-replay bookkeeping of PyTorch's random
// generators, which a captured Syncopate call never uses; the ops' per-call host time is mostly
// this launch, so they call it directly.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace syncopate::runtime {

// cudaGraphLaunch(exec, stream); throws DeviceError naming the CUDA error.
void launch_graph(std::uintptr_t graph_exec, cudaStream_t stream);

}  // namespace syncopate::runtime

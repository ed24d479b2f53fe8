// Checked CUDA calls: every runtime/driver call goes through one of these, so a failure becomes
// a DeviceError naming the call, the source line and CUDA's own message (as NCCL's checks.h).
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

namespace syncopate::runtime::detail {

// Throw DeviceError naming the call, file:line and CUDA's message. Defined in cuda_check.cpp,
// away from nvcc, which cannot compile fmt's compile-time format checks.
[[noreturn]] void throw_cuda(cudaError_t err, const char* expr, const char* file, int line);

}  // namespace syncopate::runtime::detail

#define SY_CUDA_CHECK(expr)                                                                                   \
  do {                                                                                                        \
    const cudaError_t sy_err_ = (expr);                                                                       \
    if (sy_err_ != cudaSuccess) ::syncopate::runtime::detail::throw_cuda(sy_err_, #expr, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: a bad launch configuration shows up here, not later.
#define SY_CUDA_CHECK_LAUNCH() SY_CUDA_CHECK(cudaGetLastError())

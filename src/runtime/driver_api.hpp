// The few CUDA driver functions the runtime needs, reached through
// cudaGetDriverEntryPointByVersion so that nothing links libcuda: a module built with the
// runtime loads on a machine with no driver (CI) and fails only when it is used.
#pragma once

#include <cuda.h>

namespace syncopate::runtime::detail {

struct DriverApi {
  using StreamWriteValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
  StreamWriteValue32 stream_write_value32 = nullptr;
};

// Throws DeviceError when the driver is missing or too old to provide a function.
DriverApi load_driver_api();

}  // namespace syncopate::runtime::detail

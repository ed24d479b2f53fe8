// load_driver_api(): see driver_api.hpp.
#include "driver_api.hpp"

#include <cuda_runtime_api.h>

#include <fmt/format.h>

#include "cuda_check.hpp"
#include "syncopate/common/error.hpp"

namespace syncopate::runtime::detail {
namespace {

// CUDA 12.0 is the oldest driver ABI the runtime asks for.
constexpr unsigned int kDriverAbi = 12000;

void* entry_point(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status{};
  SY_CUDA_CHECK(cudaGetDriverEntryPointByVersion(name, &fn, kDriverAbi, cudaEnableDefault, &status));
  if (status != cudaDriverEntryPointSuccess || fn == nullptr)
    throw DeviceError(fmt::format("driver entry point {} (ABI {}) is not available: query result {}",
                                  name, kDriverAbi, static_cast<int>(status)));
  return fn;
}

}  // namespace

DriverApi load_driver_api() {
  DriverApi api;
  api.stream_write_value32 =
      reinterpret_cast<DriverApi::StreamWriteValue32>(entry_point("cuStreamWriteValue32"));
  return api;
}

}  // namespace syncopate::runtime::detail

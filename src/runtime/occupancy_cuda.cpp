// The CUDA half of occupancy.hpp: device limits, a loaded function's attributes, the driver's
// occupancy answer, stream priorities. Driver functions come through
// cudaGetDriverEntryPointByVersion (nothing links libcuda).
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <fmt/format.h>

#include "cuda_check.hpp"
#include "syncopate/common/error.hpp"
#include "syncopate/runtime/occupancy.hpp"

namespace syncopate::runtime {
namespace {

constexpr unsigned int kDriverAbi = 12000;

struct OccupancyDriver {
  CUresult (*func_get_attribute)(int*, CUfunction_attribute, CUfunction) = nullptr;
  CUresult (*func_set_attribute)(CUfunction, CUfunction_attribute, int) = nullptr;
  CUresult (*max_active_blocks)(int*, CUfunction, int, size_t) = nullptr;
};

template <typename Fn>
void load(Fn& fn, const char* name) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult status{};
  SY_CUDA_CHECK(cudaGetDriverEntryPointByVersion(name, &p, kDriverAbi, cudaEnableDefault, &status));
  if (status != cudaDriverEntryPointSuccess || p == nullptr)
    throw DeviceError(fmt::format("driver entry point {} (ABI {}) is not available: query result {}", name, kDriverAbi,
                                  static_cast<int>(status)));
  fn = reinterpret_cast<Fn>(p);
}

const OccupancyDriver& driver() {
  static const OccupancyDriver d = [] {
    OccupancyDriver out;
    load(out.func_get_attribute, "cuFuncGetAttribute");
    load(out.func_set_attribute, "cuFuncSetAttribute");
    load(out.max_active_blocks, "cuOccupancyMaxActiveBlocksPerMultiprocessor");
    return out;
  }();
  return d;
}

void check_driver(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) throw DeviceError(fmt::format("{} failed: CUresult {}", what, static_cast<int>(r)));
}

CUfunction as_function(std::uintptr_t f) {
  if (f == 0) throw UserError("occupancy: function handle is 0 (load the kernel before asking)");
  return reinterpret_cast<CUfunction>(f);
}

int attribute(CUfunction f, CUfunction_attribute a, const char* name) {
  int value = 0;
  check_driver(driver().func_get_attribute(&value, a, f), name);
  return value;
}

int device_attribute(cudaDeviceAttr a, int device) {
  int value = 0;
  SY_CUDA_CHECK(cudaDeviceGetAttribute(&value, a, device));
  return value;
}

}  // namespace

SmLimits device_sm_limits(int device) {
  SmLimits l;
  l.smem_per_sm = device_attribute(cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
  l.smem_per_block_optin = device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  l.reserved_smem_per_block = device_attribute(cudaDevAttrReservedSharedMemoryPerBlock, device);
  l.max_blocks_per_sm = device_attribute(cudaDevAttrMaxBlocksPerMultiprocessor, device);
  l.max_threads_per_sm = device_attribute(cudaDevAttrMaxThreadsPerMultiProcessor, device);
  l.registers_per_sm = device_attribute(cudaDevAttrMaxRegistersPerMultiprocessor, device);
  l.registers_per_block = device_attribute(cudaDevAttrMaxRegistersPerBlock, device);
  l.warp_size = device_attribute(cudaDevAttrWarpSize, device);
  return l;
}

KernelResources function_resources(std::uintptr_t function) {
  const CUfunction f = as_function(function);
  KernelResources k;
  k.registers_per_thread = attribute(f, CU_FUNC_ATTRIBUTE_NUM_REGS, "cuFuncGetAttribute(NUM_REGS)");
  k.static_smem_bytes = attribute(f, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, "cuFuncGetAttribute(SHARED_SIZE_BYTES)");
  k.threads_per_block =
      attribute(f, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, "cuFuncGetAttribute(MAX_THREADS_PER_BLOCK)");
  return k;
}

void set_max_dynamic_smem(std::uintptr_t function, std::int64_t bytes) {
  if (bytes < 0) throw UserError(fmt::format("occupancy: dynamic shared memory must be >= 0, got {}", bytes));
  check_driver(driver().func_set_attribute(as_function(function), CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                           static_cast<int>(bytes)),
               "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
}

int occupancy_blocks(std::uintptr_t function, int threads_per_block, std::int64_t dynamic_smem) {
  const CUfunction f = as_function(function);
  if (threads_per_block <= 0)
    throw UserError(fmt::format("occupancy: threads_per_block: expected > 0, got {}", threads_per_block));
  const int allowed = attribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                "cuFuncGetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
  if (dynamic_smem > allowed) set_max_dynamic_smem(function, dynamic_smem);
  int blocks = 0;
  check_driver(driver().max_active_blocks(&blocks, f, threads_per_block, static_cast<size_t>(dynamic_smem)),
               "cuOccupancyMaxActiveBlocksPerMultiprocessor");
  return blocks;
}

std::pair<int, int> stream_priority_range() {
  int least = 0, greatest = 0;
  SY_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  return {least, greatest};
}

int stream_priority(std::uintptr_t stream) {
  int priority = 0;
  SY_CUDA_CHECK(cudaStreamGetPriority(reinterpret_cast<cudaStream_t>(stream), &priority));
  return priority;
}

}  // namespace syncopate::runtime

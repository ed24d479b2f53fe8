// Occupancy shaping: how many blocks of a kernel fit on one SM, and how much extra dynamic
// shared memory caps that number at a target, so that communication kernels (NCCL, SM copies)
// running beside the kernel find room on every SM (kernel-level mode, docs/KERNEL_LEVEL.md).
//
// The pure half (resident_blocks, shape_for_residency) is plain arithmetic over the limits
// the device reports; it follows the rules of NVIDIA's occupancy calculator for compute
// capability 7.0 and later (cuda_occupancy.h: shared memory allocated in granules with a
// per-block reservation, registers allocated per warp in each of 4 sub-partitions), and the
// unit test compares it with that header wherever the header is installed. The CUDA half
// (below the #if) reads a real function's attributes and the device's limits, and checks a
// shaping with cuOccupancyMaxActiveBlocksPerMultiprocessor, the ground truth.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

namespace syncopate::runtime {

// What one block of a kernel uses.
struct KernelResources {
  int threads_per_block = 0;
  int registers_per_thread = 0;
  std::int64_t static_smem_bytes = 0;
  std::int64_t dynamic_smem_bytes = 0;  // what the launch asks for today
};

// One SM's limits, as the device reports them (cudaDevAttr... names in the comments).
struct SmLimits {
  std::int64_t smem_per_sm = 0;              // MaxSharedMemoryPerMultiprocessor
  std::int64_t smem_per_block_optin = 0;     // MaxSharedMemoryPerBlockOptin
  std::int64_t reserved_smem_per_block = 0;  // ReservedSharedMemoryPerBlock (1 KiB from sm_80)
  int max_blocks_per_sm = 0;                 // MaxBlocksPerMultiprocessor
  int max_threads_per_sm = 0;                // MaxThreadsPerMultiprocessor
  int registers_per_sm = 0;                  // MaxRegistersPerMultiprocessor
  int registers_per_block = 0;               // MaxRegistersPerBlock
  int warp_size = 32;
  // Architectural constants of compute capability 8.x-12.x (cuda_occupancy.h).
  int smem_granularity = 128;      // shared memory is allocated per block in these units
  int register_granularity = 256;  // registers are allocated per warp in these units
  int register_partitions = 4;     // an SM's register file is split into these pools
};

enum class ResidencyLimit { blocks, threads, registers, shared_memory };
const char* to_string(ResidencyLimit limit);

struct Residency {
  int blocks = 0;                                 // resident blocks per SM (0: cannot launch)
  ResidencyLimit limit = ResidencyLimit::blocks;  // the tightest limit
  std::int64_t smem_per_block = 0;                // allocated: static + dynamic + reserved, rounded
};

// Blocks of the kernel that fit on one SM at once. Throws UserError on a negative or zero
// count (threads, limits) naming the field.
Residency resident_blocks(const KernelResources& kernel, const SmLimits& limits);

struct Shaping {
  bool ok = false;
  std::int64_t extra_dynamic_smem = 0;  // add this to the launch's dynamic shared memory
  std::int64_t dynamic_smem = 0;        // the launch's dynamic shared memory after shaping
  int natural_blocks = 0;               // residency without the extra memory
  int blocks = 0;                       // residency with it (== target when ok)
  std::string reason;                   // why it cannot be done (when !ok)
};

// The least extra dynamic shared memory that makes at most `target_blocks` blocks of the
// kernel fit on an SM. ok == false, with the reason, when the kernel already fits fewer than
// `target_blocks` (shaping only lowers residency) or the memory needed exceeds the per-block
// opt-in maximum. A target equal to the natural residency needs no extra memory. Throws
// UserError for target_blocks < 1.
Shaping shape_for_residency(const KernelResources& kernel, const SmLimits& limits, int target_blocks);

// ---- CUDA side (defined in occupancy_cuda.cpp, built with the CUDA runtime) -----------------

// The limits of `device`, read with cudaDeviceGetAttribute.
SmLimits device_sm_limits(int device);

// Registers, threads and static shared memory of a loaded function (a CUfunction handle, as
// Triton's CompiledKernel.function), via cuFuncGetAttribute. dynamic_smem_bytes is left 0.
KernelResources function_resources(std::uintptr_t function);

// cuOccupancyMaxActiveBlocksPerMultiprocessor for the function at this block size and
// dynamic shared memory. Raises the function's MAX_DYNAMIC_SHARED_SIZE_BYTES attribute first
// when `dynamic_smem` exceeds it (a launch would need the same).
int occupancy_blocks(std::uintptr_t function, int threads_per_block, std::int64_t dynamic_smem);

// Sets the function's MAX_DYNAMIC_SHARED_SIZE_BYTES attribute (needed before a launch with
// more than 48 KiB of dynamic shared memory).
void set_max_dynamic_smem(std::uintptr_t function, std::int64_t bytes);

// (least, greatest) stream priority of the current device (cudaDeviceGetStreamPriorityRange;
// numerically greatest <= least), and a stream's priority (cudaStreamGetPriority).
std::pair<int, int> stream_priority_range();
int stream_priority(std::uintptr_t stream);

}  // namespace syncopate::runtime

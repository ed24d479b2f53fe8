// Device kernels of the runtime: bounded waits, signal raises, SM copies and atomic adds.
// See device_ops.hpp for what each does and why.
#include "syncopate/runtime/device_ops.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "cuda_check.hpp"
#include "syncopate/common/error.hpp"

namespace syncopate::runtime {
namespace {

constexpr int kThreads = 512;

__device__ __forceinline__ std::int64_t global_timer_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return static_cast<std::int64_t>(t);
}

__device__ __forceinline__ std::int32_t load_acquire_sys(const std::int32_t* p) {
  std::int32_t v;
  asm volatile("ld.acquire.sys.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void store_release_sys(std::int32_t* p, std::int32_t v) {
  asm volatile("st.release.sys.global.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ void add_release_sys(std::int32_t* p, std::int32_t v) {
  asm volatile("red.release.sys.global.add.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// One thread per condition. A waiter that sees another's timeout stops at once.
__global__ void bounded_wait_kernel(WaitBatch batch, WaitRecord* record) {
  if (static_cast<int>(threadIdx.x) >= batch.count) return;
  const WaitCondition c = batch.conditions[threadIdx.x];
  volatile WaitRecord* rec = record;
  const std::int64_t start = global_timer_ns();
  for (std::uint32_t spin = 0;; ++spin) {
    const std::int32_t seen = load_acquire_sys(c.addr);
    if (seen >= c.expected) break;
    // The record is host memory (a PCIe round trip): look at it, and at the clock, only every
    // 16th spin so that a wait that is about to succeed stays fast.
    if ((spin & 15u) != 15u) {
      __nanosleep(128);
      continue;
    }
    if (rec->flag != 0) break;
    if (global_timer_ns() - start > batch.bound_ns) {
      rec->rank = batch.rank;
      rec->owner = c.owner;
      rec->slot = c.slot;
      rec->chunk = c.chunk;
      rec->kind = c.kind;
      rec->expected = c.expected;
      rec->seen = seen;
      rec->bound_ns = batch.bound_ns;
      __threadfence_system();
      rec->flag = 1;
      break;
    }
    __nanosleep(256);
  }
  __threadfence_system();
}

__global__ void signal_store_kernel(std::int32_t* slot, std::int32_t value) {
  __threadfence_system();  // everything this stream wrote before is visible first
  store_release_sys(slot, value);
}

__global__ void signal_add_kernel(std::int32_t* slot, std::int32_t value) {
  __threadfence_system();
  add_release_sys(slot, value);
}

template <class Unit>
__global__ void copy_2d_kernel(const std::byte* src, std::byte* dst, std::int64_t units_per_row,
                               std::int64_t rows, std::int64_t src_pitch, std::int64_t dst_pitch) {
  const std::int64_t total = units_per_row * rows;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += step) {
    const std::int64_t row = i / units_per_row;
    const std::int64_t col = i - row * units_per_row;
    reinterpret_cast<Unit*>(dst + row * dst_pitch)[col] =
        reinterpret_cast<const Unit*>(src + row * src_pitch)[col];
  }
}

template <class T>
__global__ void add_2d_kernel(const std::byte* src, std::byte* dst, std::int64_t elems_per_row,
                              std::int64_t rows, std::int64_t src_pitch, std::int64_t dst_pitch) {
  const std::int64_t total = elems_per_row * rows;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += step) {
    const std::int64_t row = i / elems_per_row;
    const std::int64_t col = i - row * elems_per_row;
    T* d = reinterpret_cast<T*>(dst + row * dst_pitch) + col;
    atomicAdd(d, reinterpret_cast<const T*>(src + row * src_pitch)[col]);
  }
}

int blocks_for(std::int64_t work, int max_blocks) {
  const std::int64_t wanted = (work + kThreads - 1) / kThreads;
  return static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(wanted, max_blocks)));
}

// Widest unit (16, 8, 4, 2 or 1 bytes) that divides every address, width and pitch.
int unit_bytes(const std::byte* src, std::byte* dst, const Copy2D& c) {
  const auto bits = reinterpret_cast<std::uintptr_t>(src + c.src_offset) |
                    reinterpret_cast<std::uintptr_t>(dst + c.dst_offset) |
                    static_cast<std::uintptr_t>(c.width) | static_cast<std::uintptr_t>(c.src_pitch) |
                    static_cast<std::uintptr_t>(c.dst_pitch);
  for (int u : {16, 8, 4, 2})
    if ((bits % u) == 0) return u;
  return 1;
}

template <class Unit>
void launch_copy_units(cudaStream_t stream, const std::byte* src, std::byte* dst, const Copy2D& c,
                       int max_blocks) {
  const std::int64_t units = c.width / static_cast<std::int64_t>(sizeof(Unit));
  copy_2d_kernel<Unit><<<blocks_for(units * c.height, max_blocks), kThreads, 0, stream>>>(
      src + c.src_offset, dst + c.dst_offset, units, c.height, c.src_pitch, c.dst_pitch);
  SY_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_add_typed(cudaStream_t stream, const std::byte* src, std::byte* dst, const Copy2D& c,
                      int max_blocks) {
  const std::int64_t elems = c.width / static_cast<std::int64_t>(sizeof(T));
  add_2d_kernel<T><<<blocks_for(elems * c.height, max_blocks), kThreads, 0, stream>>>(
      src + c.src_offset, dst + c.dst_offset, elems, c.height, c.src_pitch, c.dst_pitch);
  SY_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_bounded_wait(cudaStream_t stream, const WaitBatch& batch, WaitRecord* record) {
  if (batch.count <= 0) return;
  if (batch.count > kMaxWaitConditions)
    throw InternalError("bounded wait with " + std::to_string(batch.count) + " conditions (at most " +
                        std::to_string(kMaxWaitConditions) + ")");
  bounded_wait_kernel<<<1, 32, 0, stream>>>(batch, record);
  SY_CUDA_CHECK_LAUNCH();
}

void launch_signal_store(cudaStream_t stream, std::int32_t* slot, std::int32_t value) {
  signal_store_kernel<<<1, 1, 0, stream>>>(slot, value);
  SY_CUDA_CHECK_LAUNCH();
}

void launch_signal_add(cudaStream_t stream, std::int32_t* slot, std::int32_t value) {
  signal_add_kernel<<<1, 1, 0, stream>>>(slot, value);
  SY_CUDA_CHECK_LAUNCH();
}

void launch_copy_2d(cudaStream_t stream, const std::byte* src, std::byte* dst, const Copy2D& copy,
                    int max_blocks) {
  if (copy.bytes() == 0) return;
  switch (unit_bytes(src, dst, copy)) {
    case 16: return launch_copy_units<uint4>(stream, src, dst, copy, max_blocks);
    case 8: return launch_copy_units<uint2>(stream, src, dst, copy, max_blocks);
    case 4: return launch_copy_units<std::uint32_t>(stream, src, dst, copy, max_blocks);
    case 2: return launch_copy_units<std::uint16_t>(stream, src, dst, copy, max_blocks);
    default: return launch_copy_units<std::uint8_t>(stream, src, dst, copy, max_blocks);
  }
}

void launch_add_2d(cudaStream_t stream, plan::DType dtype, const std::byte* src, std::byte* dst,
                   const Copy2D& copy, int max_blocks) {
  if (copy.bytes() == 0) return;
  switch (dtype) {
    case plan::DType::f32: return launch_add_typed<float>(stream, src, dst, copy, max_blocks);
    case plan::DType::f16: return launch_add_typed<__half>(stream, src, dst, copy, max_blocks);
    case plan::DType::bf16: return launch_add_typed<__nv_bfloat16>(stream, src, dst, copy, max_blocks);
    case plan::DType::i32: return launch_add_typed<int>(stream, src, dst, copy, max_blocks);
    default:
      throw UserError("reduce-add: unsupported-dtype: " + std::string(plan::to_string(dtype)) +
                      " (f32, f16, bf16 and i32 can be added)");
  }
}

void warm_up_kernels() {
  cudaFuncAttributes attr{};
  SY_CUDA_CHECK(cudaFuncGetAttributes(&attr, bounded_wait_kernel));
  SY_CUDA_CHECK(cudaFuncGetAttributes(&attr, signal_store_kernel));
  SY_CUDA_CHECK(cudaFuncGetAttributes(&attr, signal_add_kernel));
  SY_CUDA_CHECK(cudaFuncGetAttributes(&attr, copy_2d_kernel<uint4>));
  SY_CUDA_CHECK(cudaFuncGetAttributes(&attr, copy_2d_kernel<uint2>));
  SY_CUDA_CHECK(cudaFuncGetAttributes(&attr, copy_2d_kernel<std::uint32_t>));
  SY_CUDA_CHECK(cudaFuncGetAttributes(&attr, copy_2d_kernel<std::uint16_t>));
  SY_CUDA_CHECK(cudaFuncGetAttributes(&attr, copy_2d_kernel<std::uint8_t>));
  SY_CUDA_CHECK(cudaFuncGetAttributes(&attr, add_2d_kernel<float>));
  SY_CUDA_CHECK(cudaFuncGetAttributes(&attr, add_2d_kernel<__half>));
  SY_CUDA_CHECK(cudaFuncGetAttributes(&attr, add_2d_kernel<__nv_bfloat16>));
  SY_CUDA_CHECK(cudaFuncGetAttributes(&attr, add_2d_kernel<int>));
}

}  // namespace syncopate::runtime

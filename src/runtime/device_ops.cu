// Device kernels of the runtime: bounded waits, signal raises, SM copies and reduce-adds.
// See device_ops.hpp for what each does and why.
#include "syncopate/runtime/device_ops.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <string>

#include "cuda_check.hpp"
#include "syncopate/common/error.hpp"
#include "syncopate/runtime/add_launch.hpp"
#include "syncopate/runtime/epoch.hpp"

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

// Waits for one condition against the epoch value `epoch_now`, bounded; a waiter that sees
// another's timeout stops at once.
__device__ void bounded_wait_one(const WaitBatch& batch, const WaitCondition& c, std::int32_t epoch_now,
                                 WaitRecord* record) {
  const std::int32_t expected = expected_value(epoch_now, c.epoch_offset, c.writers);
  volatile WaitRecord* rec = record;
  const std::int64_t start = global_timer_ns();
  for (std::uint32_t spin = 0;; ++spin) {
    const std::int32_t seen = load_acquire_sys(c.addr);
    if (signal_reached(seen, expected)) break;
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
      rec->expected = expected;
      rec->seen = seen;
      rec->bound_ns = batch.bound_ns;
      __threadfence_system();
      rec->flag = 1;
      break;
    }
    __nanosleep(256);
  }
}

// One thread per condition.
__global__ void bounded_wait_kernel(WaitBatch batch, WaitRecord* record) {
  if (static_cast<int>(threadIdx.x) >= batch.count) return;
  bounded_wait_one(batch, batch.conditions[threadIdx.x], *batch.epoch, record);
  __threadfence_system();
}

// epoch_advance, bounded_wait, signal_raise in one block: thread 0 advances the epoch and hands
// the new value to the waiters through shared memory; the raise follows every wait.
__global__ void begin_publish_kernel(std::int32_t* epoch, WaitBatch batch, WaitRecord* record,
                                     std::int32_t* entry_slot) {
  __shared__ std::int32_t epoch_now;
  if (threadIdx.x == 0) {
    epoch_now = next_epoch(*epoch);
    *epoch = epoch_now;
  }
  __syncthreads();
  if (static_cast<int>(threadIdx.x) < batch.count)
    bounded_wait_one(batch, batch.conditions[threadIdx.x], epoch_now, record);
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();  // everything this stream wrote before, and the epoch, is visible first
    store_release_sys(entry_slot, epoch_now);
  }
}

__global__ void epoch_advance_kernel(std::int32_t* epoch) { *epoch = next_epoch(*epoch); }

__global__ void signal_raise_many_kernel(RaiseBatch batch, const std::int32_t* epoch) {
  if (static_cast<int>(threadIdx.x) >= batch.count) return;
  __threadfence_system();  // as signal_raise_kernel, for each slot
  store_release_sys(batch.slots[threadIdx.x], *epoch);
}

__global__ void signal_raise_kernel(std::int32_t* slot, const std::int32_t* epoch) {
  __threadfence_system();  // everything this stream wrote before is visible first
  store_release_sys(slot, *epoch);
}

template <class Unit>
__global__ void copy_2d_kernel(const std::byte* src, std::byte* dst, std::int64_t units_per_row, std::int64_t rows,
                               std::int64_t src_pitch, std::int64_t dst_pitch) {
  const std::int64_t total = units_per_row * rows;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total; i += step) {
    const std::int64_t row = i / units_per_row;
    const std::int64_t col = i - row * units_per_row;
    reinterpret_cast<Unit*>(dst + row * dst_pitch)[col] = reinterpret_cast<const Unit*>(src + row * src_pitch)[col];
  }
}

// The same copy cut on the device to the first n of `capacity` counted positions (a chunk with
// run-time rows, box_copy.hpp CountedRows): n is read from `count` when the kernel starts (it was
// written before, in stream order or behind a wait), so the bytes moved follow each call's count.
template <class Unit>
__global__ void copy_counted_kernel(const std::byte* src, std::byte* dst, std::int64_t units_per_row, std::int64_t rows,
                                    std::int64_t src_pitch, std::int64_t dst_pitch, bool along_width, std::int64_t unit,
                                    std::int64_t capacity, const std::int32_t* count) {
  std::int64_t n = *reinterpret_cast<const volatile std::int32_t*>(count);
  n = n < 0 ? 0 : (n > capacity ? capacity : n);
  if (along_width)
    units_per_row = n * unit;
  else
    rows = n * unit;
  const std::int64_t total = units_per_row * rows;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total; i += step) {
    const std::int64_t row = i / units_per_row;
    const std::int64_t col = i - row * units_per_row;
    reinterpret_cast<Unit*>(dst + row * dst_pitch)[col] = reinterpret_cast<const Unit*>(src + row * src_pitch)[col];
  }
}

// ---- reduce-add: dst += src over a pitched 2-D region, fp32 accumulation for f16/bf16.
//
// Threads form a (tx, ty) block: tx threads walk a row's 16-byte vectors, ty rows per block, and
// the grid strides over both (no per-element division). A row whose dst and src start at the
// same offset modulo 16 bytes is split into a scalar head (up to the first 16-byte boundary of
// dst), a vector body and a scalar tail; a box whose src and dst disagree modulo 16 is added
// element by element. Atomic = false: plain load-add-store (the runtime proved this is the only
// adder of the box that can run now: deterministic and full speed); Atomic = true: packed
// atomics, 4-byte pairs for f16/bf16 (native on sm_90), scalar for f32/i32.
struct AddArgs {
  const std::byte* src = nullptr;  // first element of the region
  std::byte* dst = nullptr;
  std::int64_t row_elems = 0;
  std::int64_t rows = 0;
  std::int64_t src_pitch = 0;  // bytes
  std::int64_t dst_pitch = 0;
  bool vector = false;  // src and dst rows agree modulo 16 bytes
};

template <class T>
struct AddMath;  // add two 16-byte vectors / two elements in T's accumulation type

// Types with native + and atomicAdd: four lanes per 16-byte vector.
template <class T>
struct NativeAddMath {
  static_assert(sizeof(T) == 4);
  __device__ static T add(T a, T b) { return a + b; }
  __device__ static void add_vec(uint4& d, const uint4& s) {
    T* dv = reinterpret_cast<T*>(&d);
    const T* sv = reinterpret_cast<const T*>(&s);
#pragma unroll
    for (int i = 0; i < 4; ++i) dv[i] += sv[i];
  }
  __device__ static void atomic_vec(T* d, const uint4& s) {
    const T* sv = reinterpret_cast<const T*>(&s);
#pragma unroll
    for (int i = 0; i < 4; ++i) atomicAdd(d + i, sv[i]);
  }
};

template <>
struct AddMath<float> : NativeAddMath<float> {};

template <>
struct AddMath<int> : NativeAddMath<int> {};

template <>
struct AddMath<__nv_bfloat16> {
  __device__ static __nv_bfloat16 add(__nv_bfloat16 a, __nv_bfloat16 b) {
    return __float2bfloat16_rn(__bfloat162float(a) + __bfloat162float(b));
  }
  __device__ static void add_vec(uint4& d, const uint4& s) {
    auto* dv = reinterpret_cast<__nv_bfloat162*>(&d);
    const auto* sv = reinterpret_cast<const __nv_bfloat162*>(&s);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 a = __bfloat1622float2(dv[i]);
      const float2 b = __bfloat1622float2(sv[i]);
      dv[i] = __floats2bfloat162_rn(a.x + b.x, a.y + b.y);
    }
  }
  __device__ static void atomic_vec(__nv_bfloat16* d, const uint4& s) {
    const auto* sv = reinterpret_cast<const __nv_bfloat162*>(&s);
#pragma unroll
    for (int i = 0; i < 4; ++i) atomicAdd(reinterpret_cast<__nv_bfloat162*>(d) + i, sv[i]);
  }
};

template <>
struct AddMath<__half> {
  __device__ static __half add(__half a, __half b) { return __float2half_rn(__half2float(a) + __half2float(b)); }
  __device__ static void add_vec(uint4& d, const uint4& s) {
    auto* dv = reinterpret_cast<__half2*>(&d);
    const auto* sv = reinterpret_cast<const __half2*>(&s);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 a = __half22float2(dv[i]);
      const float2 b = __half22float2(sv[i]);
      dv[i] = __floats2half2_rn(a.x + b.x, a.y + b.y);
    }
  }
  __device__ static void atomic_vec(__half* d, const uint4& s) {
    const auto* sv = reinterpret_cast<const __half2*>(&s);
#pragma unroll
    for (int i = 0; i < 4; ++i) atomicAdd(reinterpret_cast<__half2*>(d) + i, sv[i]);
  }
};

template <class T, bool Atomic>
__device__ __forceinline__ void add_scalar(T* d, const T* s) {
  if constexpr (Atomic)
    atomicAdd(d, *s);
  else
    *d = AddMath<T>::add(*d, *s);
}

template <class T, bool Atomic>
__global__ void add_2d_kernel(AddArgs a) {
  constexpr std::int64_t kVec = 16 / sizeof(T);
  const std::int64_t col0 = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t col_step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t row_step = static_cast<std::int64_t>(gridDim.y) * blockDim.y;
  for (std::int64_t row = static_cast<std::int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; row < a.rows;
       row += row_step) {
    const T* s = reinterpret_cast<const T*>(a.src + row * a.src_pitch);
    T* d = reinterpret_cast<T*>(a.dst + row * a.dst_pitch);
    std::int64_t head = a.row_elems, body = 0;
    if (a.vector) {
      const std::int64_t to_boundary = ((16 - (reinterpret_cast<std::uintptr_t>(d) & 15)) & 15) / sizeof(T);
      head = to_boundary < a.row_elems ? to_boundary : a.row_elems;
      body = (a.row_elems - head) / kVec;
    }
    const uint4* sv = reinterpret_cast<const uint4*>(s + head);
    uint4* dv = reinterpret_cast<uint4*>(d + head);
    for (std::int64_t j = col0; j < body; j += col_step * kAddUnroll) {
      uint4 sr[kAddUnroll], dr[kAddUnroll];
#pragma unroll
      for (int u = 0; u < kAddUnroll; ++u) {
        const std::int64_t i = j + u * col_step;
        if (i < body) {
          sr[u] = sv[i];
          if constexpr (!Atomic) dr[u] = dv[i];
        }
      }
#pragma unroll
      for (int u = 0; u < kAddUnroll; ++u) {
        const std::int64_t i = j + u * col_step;
        if (i >= body) continue;
        if constexpr (Atomic) {
          AddMath<T>::atomic_vec(reinterpret_cast<T*>(dv + i), sr[u]);
        } else {
          AddMath<T>::add_vec(dr[u], sr[u]);
          dv[i] = dr[u];
        }
      }
    }
    // Scalar head and tail (fewer than kVec elements each; the whole row when not vectorised).
    for (std::int64_t e = col0; e < head; e += col_step) add_scalar<T, Atomic>(d + e, s + e);
    for (std::int64_t e = head + body * kVec + col0; e < a.row_elems; e += col_step)
      add_scalar<T, Atomic>(d + e, s + e);
  }
}

int blocks_for(std::int64_t work, int max_blocks) {
  const std::int64_t wanted = (work + kThreads - 1) / kThreads;
  return static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(wanted, max_blocks)));
}

// Widest unit (16, 8, 4, 2 or 1 bytes) that divides every address, width and pitch.
int unit_bytes(const std::byte* src, std::byte* dst, const Copy2D& c) {
  const auto bits = reinterpret_cast<std::uintptr_t>(src + c.src_offset) |
                    reinterpret_cast<std::uintptr_t>(dst + c.dst_offset) | static_cast<std::uintptr_t>(c.width) |
                    static_cast<std::uintptr_t>(c.src_pitch) | static_cast<std::uintptr_t>(c.dst_pitch);
  for (int u : {16, 8, 4, 2})
    if ((bits % u) == 0) return u;
  return 1;
}

template <class Unit>
void launch_copy_units(cudaStream_t stream, const std::byte* src, std::byte* dst, const Copy2D& c, int max_blocks) {
  const std::int64_t units = c.width / static_cast<std::int64_t>(sizeof(Unit));
  copy_2d_kernel<Unit><<<blocks_for(units * c.height, max_blocks), kThreads, 0, stream>>>(
      src + c.src_offset, dst + c.dst_offset, units, c.height, c.src_pitch, c.dst_pitch);
  SY_CUDA_CHECK_LAUNCH();
}

template <class Unit>
void launch_counted_units(cudaStream_t stream, const std::byte* src, std::byte* dst, const Copy2D& c,
                          const CountedRows& rows, const std::int32_t* count, int max_blocks) {
  const auto size = static_cast<std::int64_t>(sizeof(Unit));
  const bool along_width = rows.along == CountedAlong::width;
  const std::int64_t unit = along_width ? rows.unit / size : rows.unit;
  copy_counted_kernel<Unit><<<blocks_for(c.width / size * c.height, max_blocks), kThreads, 0, stream>>>(
      src + c.src_offset, dst + c.dst_offset, c.width / size, c.height, c.src_pitch, c.dst_pitch, along_width, unit,
      rows.capacity, count);
  SY_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_add_typed(cudaStream_t stream, const std::byte* src, std::byte* dst, const Copy2D& c, int max_blocks,
                      bool atomic) {
  AddArgs a;
  a.src = src + c.src_offset;
  a.dst = dst + c.dst_offset;
  a.row_elems = c.width / static_cast<std::int64_t>(sizeof(T));
  a.rows = c.height;
  a.src_pitch = c.src_pitch;
  a.dst_pitch = c.dst_pitch;
  // Vectorise when every row of src starts at the same offset modulo 16 as its row of dst.
  const auto delta = reinterpret_cast<std::intptr_t>(a.src) - reinterpret_cast<std::intptr_t>(a.dst);
  a.vector = delta % 16 == 0 && (c.height == 1 || (c.src_pitch - c.dst_pitch) % 16 == 0);
  const std::int64_t units = a.vector ? (a.row_elems * static_cast<std::int64_t>(sizeof(T)) + 15) / 16 : a.row_elems;
  const AddLaunch l = add_launch_shape(units, a.rows, max_blocks);
  const dim3 grid(static_cast<unsigned>(l.bx), static_cast<unsigned>(l.by));
  const dim3 block(static_cast<unsigned>(l.tx), static_cast<unsigned>(l.ty));
  if (atomic)
    add_2d_kernel<T, true><<<grid, block, 0, stream>>>(a);
  else
    add_2d_kernel<T, false><<<grid, block, 0, stream>>>(a);
  SY_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_bounded_wait(cudaStream_t stream, const WaitBatch& batch, WaitRecord* record) {
  if (batch.count <= 0) return;
  if (batch.epoch == nullptr) throw InternalError("bounded wait without an epoch word");
  if (batch.count > kMaxWaitConditions)
    throw InternalError("bounded wait with " + std::to_string(batch.count) + " conditions (at most " +
                        std::to_string(kMaxWaitConditions) + ")");
  bounded_wait_kernel<<<1, 32, 0, stream>>>(batch, record);
  SY_CUDA_CHECK_LAUNCH();
}

void launch_begin_publish(cudaStream_t stream, std::int32_t* epoch, const WaitBatch& batch, WaitRecord* record,
                          std::int32_t* entry_slot) {
  if (batch.count < 0 || batch.count > kMaxWaitConditions)
    throw InternalError("begin_publish with " + std::to_string(batch.count) + " conditions (at most " +
                        std::to_string(kMaxWaitConditions) + ")");
  if (batch.count > 0 && batch.epoch != epoch)
    throw InternalError("begin_publish: the batch waits on another epoch word");
  begin_publish_kernel<<<1, 32, 0, stream>>>(epoch, batch, record, entry_slot);
  SY_CUDA_CHECK_LAUNCH();
}

void launch_epoch_advance(cudaStream_t stream, std::int32_t* epoch) {
  epoch_advance_kernel<<<1, 1, 0, stream>>>(epoch);
  SY_CUDA_CHECK_LAUNCH();
}

void launch_signal_raise_many(cudaStream_t stream, const RaiseBatch& batch, const std::int32_t* epoch) {
  if (batch.count <= 0) return;
  if (batch.count > kMaxRaisedSlots)
    throw InternalError("signal raise with " + std::to_string(batch.count) + " slots (at most " +
                        std::to_string(kMaxRaisedSlots) + ")");
  signal_raise_many_kernel<<<1, 32, 0, stream>>>(batch, epoch);
  SY_CUDA_CHECK_LAUNCH();
}

void launch_signal_raise(cudaStream_t stream, std::int32_t* slot, const std::int32_t* epoch) {
  signal_raise_kernel<<<1, 1, 0, stream>>>(slot, epoch);
  SY_CUDA_CHECK_LAUNCH();
}

void launch_copy_2d(cudaStream_t stream, const std::byte* src, std::byte* dst, const Copy2D& copy, int max_blocks) {
  if (copy.bytes() == 0) return;
  switch (unit_bytes(src, dst, copy)) {
    case 16:
      return launch_copy_units<uint4>(stream, src, dst, copy, max_blocks);
    case 8:
      return launch_copy_units<uint2>(stream, src, dst, copy, max_blocks);
    case 4:
      return launch_copy_units<std::uint32_t>(stream, src, dst, copy, max_blocks);
    case 2:
      return launch_copy_units<std::uint16_t>(stream, src, dst, copy, max_blocks);
    default:
      return launch_copy_units<std::uint8_t>(stream, src, dst, copy, max_blocks);
  }
}

void launch_copy_counted(cudaStream_t stream, const std::byte* src, std::byte* dst, const Copy2D& full,
                         const CountedRows& rows, const std::int32_t* count, int max_blocks) {
  if (full.bytes() == 0) return;
  if (count == nullptr) throw InternalError("counted copy without a count");
  // The vector unit must divide every width n rows can give: the bytes per counted position.
  Copy2D aligned = full;
  if (rows.along == CountedAlong::width) aligned.width = rows.unit;
  switch (unit_bytes(src, dst, aligned)) {
    case 16:
      return launch_counted_units<uint4>(stream, src, dst, full, rows, count, max_blocks);
    case 8:
      return launch_counted_units<uint2>(stream, src, dst, full, rows, count, max_blocks);
    case 4:
      return launch_counted_units<std::uint32_t>(stream, src, dst, full, rows, count, max_blocks);
    case 2:
      return launch_counted_units<std::uint16_t>(stream, src, dst, full, rows, count, max_blocks);
    default:
      return launch_counted_units<std::uint8_t>(stream, src, dst, full, rows, count, max_blocks);
  }
}

void launch_add_2d(cudaStream_t stream, plan::DType dtype, const std::byte* src, std::byte* dst, const Copy2D& copy,
                   int max_blocks, bool atomic) {
  if (copy.bytes() == 0) return;
  if (max_blocks < 1)
    throw UserError("reduce-add: bad-block-count: " + std::to_string(max_blocks) + " blocks (at least 1)");
  switch (dtype) {
    case plan::DType::f32:
      return launch_add_typed<float>(stream, src, dst, copy, max_blocks, atomic);
    case plan::DType::f16:
      return launch_add_typed<__half>(stream, src, dst, copy, max_blocks, atomic);
    case plan::DType::bf16:
      return launch_add_typed<__nv_bfloat16>(stream, src, dst, copy, max_blocks, atomic);
    case plan::DType::i32:
      return launch_add_typed<int>(stream, src, dst, copy, max_blocks, atomic);
    default:
      throw UserError("reduce-add: unsupported-dtype: " + std::string(plan::to_string(dtype)) +
                      " (f32, f16, bf16 and i32 can be added)");
  }
}

void warm_up_kernels() {
  cudaFuncAttributes attr{};
  SY_CUDA_CHECK(cudaFuncGetAttributes(&attr, bounded_wait_kernel));
  SY_CUDA_CHECK(cudaFuncGetAttributes(&attr, epoch_advance_kernel));
  SY_CUDA_CHECK(cudaFuncGetAttributes(&attr, signal_raise_kernel));
  SY_CUDA_CHECK(cudaFuncGetAttributes(&attr, begin_publish_kernel));
  SY_CUDA_CHECK(cudaFuncGetAttributes(&attr, signal_raise_many_kernel));
  SY_CUDA_CHECK(cudaFuncGetAttributes(&attr, copy_2d_kernel<uint4>));
  SY_CUDA_CHECK(cudaFuncGetAttributes(&attr, copy_2d_kernel<uint2>));
  SY_CUDA_CHECK(cudaFuncGetAttributes(&attr, copy_2d_kernel<std::uint32_t>));
  SY_CUDA_CHECK(cudaFuncGetAttributes(&attr, copy_2d_kernel<std::uint16_t>));
  SY_CUDA_CHECK(cudaFuncGetAttributes(&attr, copy_2d_kernel<std::uint8_t>));
  SY_CUDA_CHECK(cudaFuncGetAttributes(&attr, copy_counted_kernel<uint4>));
  SY_CUDA_CHECK(cudaFuncGetAttributes(&attr, copy_counted_kernel<uint2>));
  SY_CUDA_CHECK(cudaFuncGetAttributes(&attr, copy_counted_kernel<std::uint32_t>));
  SY_CUDA_CHECK(cudaFuncGetAttributes(&attr, copy_counted_kernel<std::uint16_t>));
  SY_CUDA_CHECK(cudaFuncGetAttributes(&attr, copy_counted_kernel<std::uint8_t>));
  for (const void* kernel : {reinterpret_cast<const void*>(add_2d_kernel<float, false>),
                             reinterpret_cast<const void*>(add_2d_kernel<float, true>),
                             reinterpret_cast<const void*>(add_2d_kernel<__half, false>),
                             reinterpret_cast<const void*>(add_2d_kernel<__half, true>),
                             reinterpret_cast<const void*>(add_2d_kernel<__nv_bfloat16, false>),
                             reinterpret_cast<const void*>(add_2d_kernel<__nv_bfloat16, true>),
                             reinterpret_cast<const void*>(add_2d_kernel<int, false>),
                             reinterpret_cast<const void*>(add_2d_kernel<int, true>)})
    SY_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
}

}  // namespace syncopate::runtime

// The runtime's own small device kernels, as launch functions on a stream:
//  - epoch_advance: this rank's epoch word += 1 (the first thing a call does);
//  - bounded_wait: spin (acquire, system scope) until every condition holds, or the time bound
//    passes; then record the timeout in the WaitRecord and let the stream go on. A condition's
//    expected value is computed on the device from the epoch word, never baked in by the host,
//    so the same enqueued (or graph-captured) work is right for every call;
//  - signal_raise: release-store the epoch word's value into a slot (landing slots and the
//    entry/exit counters have one writer: after call e they hold e);
//  - begin_publish: epoch_advance, bounded_wait and signal_raise of a call's start in one
//    kernel (one graph node instead of three dependent ones before the GEMM can start);
//  - copy_2d: the SM-driven copy backend (a few blocks, vector loads where aligned); copy_counted:
//    the same for a chunk with run-time rows, its size read on the device;
//  - add_2d: dst += src over a pitched region (16-byte vectors, fp32 accumulation for f16/bf16);
//    plain stores when the caller is the box's only adder at the time, packed atomics when not
//    (ChunkStep::atomic_add says which).
// Kernels live in device_ops.cu; warm_up_kernels() loads them all, so no module load happens
// while a waiter spins (docs/RUNTIME.md, "Warm-up").
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "syncopate/plan/enums.hpp"
#include "syncopate/runtime/box_copy.hpp"
#include "syncopate/runtime/wait_record.hpp"

namespace syncopate::runtime {

inline constexpr int kMaxWaitConditions = 8;

// Holds once *addr reaches (epoch + epoch_offset) * writers (epoch.hpp: modulo 2^32).
struct WaitCondition {
  const std::int32_t* addr = nullptr;
  std::int32_t writers = 1;
  std::int32_t epoch_offset = 0;
  std::int32_t owner = 0;
  std::int32_t slot = 0;
  std::int32_t chunk = -1;
  std::int32_t kind = 0;
};

struct WaitBatch {
  WaitCondition conditions[kMaxWaitConditions];
  std::int32_t count = 0;
  std::int32_t rank = 0;
  std::int64_t bound_ns = 0;
  const std::int32_t* epoch = nullptr;  // this rank's epoch word (device memory)
};

void launch_epoch_advance(cudaStream_t stream, std::int32_t* epoch);
void launch_signal_raise(cudaStream_t stream, std::int32_t* slot, const std::int32_t* epoch);
// The same for up to kMaxRaisedSlots slots in one launch (in-place chunks: one launch for a run
// of them instead of one each). The pointers travel by value, so a captured graph replays them.
inline constexpr int kMaxRaisedSlots = 32;
struct RaiseBatch {
  std::int32_t* slots[kMaxRaisedSlots] = {};
  std::int32_t count = 0;
};
void launch_signal_raise_many(cudaStream_t stream, const RaiseBatch& batch, const std::int32_t* epoch);
void launch_bounded_wait(cudaStream_t stream, const WaitBatch& batch, WaitRecord* record);
// Advances *epoch, waits (bounded, as launch_bounded_wait) for batch's conditions (none: no
// wait) against the advanced epoch, then release-stores it into *entry_slot: what
// launch_epoch_advance, launch_bounded_wait and launch_signal_raise do in turn, in one launch.
// batch.epoch must be `epoch`.
void launch_begin_publish(cudaStream_t stream, std::int32_t* epoch, const WaitBatch& batch, WaitRecord* record,
                          std::int32_t* entry_slot);
// `src` and `dst` are the tensor (or staging) bases the copy's offsets are relative to.
void launch_copy_2d(cudaStream_t stream, const std::byte* src, std::byte* dst, const Copy2D& copy, int max_blocks);
// The copy cut to the first n counted positions, n read from `count` on the device (a chunk with
// run-time rows on the SM-copy backend: only the rows that came move).
void launch_copy_counted(cudaStream_t stream, const std::byte* src, std::byte* dst, const Copy2D& full,
                         const CountedRows& rows, const std::int32_t* count, int max_blocks);
void launch_add_2d(cudaStream_t stream, plan::DType dtype, const std::byte* src, std::byte* dst, const Copy2D& copy,
                   int max_blocks, bool atomic);
// Loads every kernel above on the current device. Throws DeviceError.
void warm_up_kernels();

}  // namespace syncopate::runtime

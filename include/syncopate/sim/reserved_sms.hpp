// The SMs a fused op's persistent GEMM leaves free for its chunk backend, and the blocks the
// executor's kernels run there: the one table the op contexts size their grids from
// (python/syncopate/ops read it through syncopate._core.reserved_sms) and the simulator's fused
// mode plans for (sim::fused_workers).
//
// Why SMs are left free at all: a spinning tile must never keep the chunk it waits for from
// moving, so the wait/signal kernels, the SM copies, NCCL's kernels and (GEMM+RS/AR) the
// reduce-add kernels need SMs the persistent GEMM does not occupy (docs/RUNTIME.md).
//
// The calibration's `backends.<b>.sms` (calib/h200.json: 0 / 16 / 16) is another quantity: the
// SMs the backend's own kernels take from a library GEMM beside them, which the simulator
// charges in the kernel-level mode. It must fit inside the reservation (a reservation smaller than what the
// backend takes would leave its kernels waiting for the GEMM); tests/unit/sim/reserved_sms_test.cpp
// checks the shipped calibration against this table.
#pragma once

#include "syncopate/plan/enums.hpp"

namespace syncopate::sim {

// How the fused GEMM uses the plan's tensor. Producers (GEMM+RS, GEMM+AR) add every incoming
// chunk with a kernel at the destination while the GEMM runs, also with the copy engine (which
// only moves the bytes into staging): the add kernel's blocks need SMs too.
enum class GemmRole { consumer, producer };

// SMs left free by the fused GEMM: copy engine 4 (consumer; the wait/signal kernels) or 12
// (producer; plus the add kernel's blocks), SM copy 20, NCCL 24.
constexpr int reserved_sms(plan::Backend backend, GemmRole role) {
  switch (backend) {
    case plan::Backend::copy_engine:
      return role == GemmRole::producer ? 12 : 4;
    case plan::Backend::sm_copy:
      return 20;
    case plan::Backend::nccl:
      return 24;
  }
  return 24;
}

// Blocks of the executor's SM-copy kernels: the SM-copy reservation less 4 SMs for the signal
// kernels.
inline constexpr int kSmCopyBlocks = reserved_sms(plan::Backend::sm_copy, GemmRole::consumer) - 4;
// Blocks of the reduce-add kernel (copy engine, NCCL) of a producer.
inline constexpr int kAddKernelBlocks = 10;

}  // namespace syncopate::sim

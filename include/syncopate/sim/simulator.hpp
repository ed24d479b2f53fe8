// The simulator: predicted timelines of one call on all ranks, in four ways of running it.
//
//  fused         one persistent kernel per rank; each tile waits for its own chunks, each
//                produced chunk leaves when its tiles are written (the Syncopate way);
//  kernel-level  two streams: communication on one, the GEMM cut into one kernel per arrival
//                group on the other, each launched after an event wait on its chunks, every
//                collective call and GEMM launch issued by the host one by one;
//  sequential    the whole collective, then the whole GEMM (or GEMM then collective when the
//                GEMM produces what is sent);
//  alone         the GEMM with every SM and no communication; the communication with no GEMM.
// The model (resources, rules, units) is written up in docs/SIMULATOR.md.
#pragma once

#include "syncopate/sim/calibration.hpp"
#include "syncopate/sim/fused_call.hpp"
#include "syncopate/sim/timeline.hpp"

namespace syncopate::sim {

// Kernel-level mode only: how its compute kernels share SMs with communication kernels (NCCL,
// SM copy), and what occupancy shaping changes (docs/KERNEL_LEVEL.md). The defaults reproduce
// the unshaped model. The model:
//  - comm_sms: SMs' worth of blocks each communication backend runs on (-1: the calibrated
//    `sms`). A backend's bandwidth scales with min(1, comm_sms / calibrated sms) (fewer NCCL
//    channels move fewer bytes); more SMs than calibrated buy nothing.
//  - residency 0 (not shaped), or >= natural_residency (shaping to what the kernel already
//    has changes nothing): compute blocks fill their SMs and communication takes whole SMs
//    from them (compute workers = sms - comm SMs), as the other modes assume.
//  - 1 <= residency < natural_residency: the compute kernel is padded so that communication
//    blocks fit beside `residency` compute blocks on every SM: compute keeps every SM, each
//    at min(1, residency * block_share) of its unshaped throughput.
//  - sm_carveout s > 0 (cuBLAS's SM count target, not with residency): the GEMM kernels run on
//    sms - max(s, comm SMs) workers, each tile `Calibration::kernel_level.carveout_slowdown`
//    times slower (measured: cuBLASLt with a carveout against cuBLAS on every SM).
// Stream priority is not modelled: measured, it changed kernel-level times by about 0
// (docs/SIMULATOR.md).
struct KernelLevelShaping {
  int residency = 0;
  int natural_residency = 1;  // compute blocks per SM without shaping
  double block_share = 0.9;   // share of an SM's GEMM throughput one resident block reaches (assumed)
  int comm_sms = -1;
  int sm_carveout = 0;
};

struct SimOptions {
  // false: a persistent kernel's worker w takes positions w, w+W, ... of the tile order (the
  // Triton persistent loop); true: a free worker takes the next tile (an atomic counter).
  bool dynamic_assignment = false;
  KernelLevelShaping kernel_level;
};

struct Prediction {
  double gemm_alone_us = 0;
  double comm_alone_us = 0;
  double floor_us = 0;  // max(gemm alone, communication alone): perfect overlap
  double sequential_us = 0;
  double kernel_level_us = 0;
  double fused_us = 0;
  Timeline fused;
  Timeline kernel_level;
  Timeline sequential;
};

Timeline simulate_fused(const FusedCall& call, const Calibration& calib, const SimOptions& options = {});
Timeline simulate_kernel_level(const FusedCall& call, const Calibration& calib, const SimOptions& options = {});
Timeline simulate_sequential(const FusedCall& call, const Calibration& calib, const SimOptions& options = {});
// chunk_rows: as GemmShape::chunk_rows (empty: whole boxes).
Timeline simulate_comm_alone(const plan::CommPlan& plan, const Calibration& calib,
                             const std::vector<std::int64_t>& chunk_rows = {});
Timeline simulate_gemm_alone(const GemmShape& gemm, int world_size, const Calibration& calib);

Prediction predict(const FusedCall& call, const Calibration& calib, const SimOptions& options = {});

// SM workers left to a library GEMM (kernel-level mode) on `rank` while the plan's chunks use
// their backends: gpu.sms less the calibrated `backends.<b>.sms` of each backend the rank uses
// (SM-copy and NCCL take SMs; the copy engine takes none). At least 1.
int compute_workers(const plan::CommPlan& plan, int rank, const Calibration& calib);

// The fused mode's persistent grid, on every rank: gpu.sms less the SMs the op leaves free for
// the plan's backend (sim/reserved_sms.hpp, the table the ops size their grid from; a producer's
// reduce-add plan also leaves its add kernel room, a staged plan does not). A plan that mixes
// backends (hierarchical) takes the largest reservation; no op runs one. At least 1.
int fused_workers(const FusedCall& call, const Calibration& calib);

}  // namespace syncopate::sim

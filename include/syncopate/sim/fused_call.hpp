// One fused call as the simulator sees it: a plan, the local GEMM's tiling, and what lowering
// and scheduling made of them (a SignalTable and a TileOrder per rank). Plain data.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "syncopate/lower/signal_table.hpp"
#include "syncopate/lower/tiling.hpp"
#include "syncopate/plan/comm_plan.hpp"
#include "syncopate/schedule/tile_order.hpp"
#include "syncopate/sim/calibration.hpp"

namespace syncopate::sim {

// The per-rank GEMM: C[M x N] = A[M x K] * B[K x N], tiled BLOCK_M x BLOCK_N.
struct GemmShape {
  std::int64_t m = 0, n = 0, k = 0;
  std::int64_t block_m = 128, block_n = 256;
  // The operands' dtype: FP8 (f8e4m3, f8e5m2) runs at the calibration's FP8 rate.
  plan::DType dtype = plan::DType::bf16;
  // Run-time row counts (a grouped GEMM over capacity slots, the MoE dispatch): tile_scale[r][t]
  // is the share of a full tile's work that tile t of rank r does, 0 for a tile whose rows start
  // past its slot's count (it waits, then returns). Empty: every tile is full; else one row per
  // rank with one entry per tile, each >= 0 (check_tile_scale).
  std::vector<std::vector<double>> tile_scale;
  // Run-time rows moved: chunk_rows[c] of the capacity positions of chunk c's box along its
  // runtime_rows dim move this call (the SM-copy backend moves only the counted rows; the copy
  // engine and NCCL move the whole box, so their chunks ignore it, as do chunks without
  // runtime_rows). Empty: every chunk moves its whole box; else one entry >= 0 per chunk
  // (check_chunk_rows).
  std::vector<std::int64_t> chunk_rows;

  lower::TileGrid grid() const { return {m, n, block_m, block_n}; }
  double flops() const { return 2.0 * double(m) * double(n) * double(k); }
};

struct FusedCall {
  plan::CommPlan plan;
  GemmShape gemm;
  std::vector<lower::SignalTable> tables;   // by rank
  std::vector<schedule::TileOrder> orders;  // by rank
};

// How the local GEMM touches the plan's tensor, from the collective:
//   all-gather along dim 0      -> consumes the tensor, tile rows index dim 0   (AG+GEMM)
//   all-gather along dim 1      -> consumes the tensor, tile columns index dim 1
//   reduce-scatter, all-reduce  -> produces the tensor, rows dim 0, columns dim 1 (GEMM+RS/AR)
//   reduce-scatter / all-reduce with an output (staged: the output is the staging tensor [W, M/W, N])
//                               -> produces the tensor, rows collective.dim, columns the next
//                                  dim, and consumes the output, rows dim 1 (m_local_shard),
//                                  columns dim 2
//   all-to-all                  -> consumes the output tensor, rows dim 0 (expert GEMM after it)
// Throws UserError for a custom plan (no collective says how the GEMM uses it) or a gather
// dimension above 1.
std::vector<lower::TileAccess> default_accesses(const plan::CommPlan& plan);

// Throws UserError naming the rank (and tile) when gemm.tile_scale is set but is not one row of
// grid().count() entries >= 0 per rank of world_size.
void check_tile_scale(const GemmShape& gemm, int world_size);
// Throws UserError naming the chunk when gemm.chunk_rows is set but is not one entry >= 0 per
// chunk of the plan.
void check_chunk_rows(const GemmShape& gemm, const plan::CommPlan& plan);

// Lowers the plan for the GEMM's grid and orders each rank's tiles. Arrival order is driven by
// the simulator's own prediction of each chunk's landing (or, for produced chunks, leaving)
// time with communication alone. Throws UserError when the GEMM does not match the plan's tensor
// (lowering names the tensor and dim).
FusedCall make_fused_call(const plan::CommPlan& plan, const GemmShape& gemm, schedule::OrderKind order,
                          const Calibration& calib, int group_m = 8);
// The same with the kernel's accesses spelled out (a custom plan, a tensor other than the
// collective's).
FusedCall make_fused_call(const plan::CommPlan& plan, const GemmShape& gemm,
                          const std::vector<lower::TileAccess>& accesses, schedule::OrderKind order,
                          const Calibration& calib, int group_m = 8);

// Reorders an existing call's tiles (same plan, tables and GEMM) without lowering again.
void reorder(FusedCall& call, schedule::OrderKind order, const Calibration& calib, int group_m = 8);

// Producer tiles (rank, tile) that gate each chunk, by chunk id, as the runtime sees them once
// NCCL groups are taken into account: a rank issues a group only when the waits of all its
// members there hold, so every member of a group on rank r also waits for the gates on rank r
// of the other members. `gates` comes from the signal tables (ready slots on a chunk's src,
// dst-ready slots on its dst); the result adds those group gates, without duplicates, in the
// order first seen. Chunks in no group keep theirs unchanged.
std::vector<std::vector<std::pair<int, int>>> merge_group_gates(const plan::CommPlan& plan,
                                                                std::vector<std::vector<std::pair<int, int>>> gates);

}  // namespace syncopate::sim

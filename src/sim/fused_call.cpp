// Building a fused call from a plan: lowering, then tile orders driven by predicted arrival.
#include "syncopate/sim/fused_call.hpp"

#include <algorithm>

#include <fmt/core.h>

#include "syncopate/common/error.hpp"
#include "syncopate/plan/dependency_graph.hpp"

#include "syncopate/sim/simulator.hpp"

namespace syncopate::sim {

std::vector<lower::TileAccess> default_accesses(const plan::CommPlan& plan) {
  const auto& spec = plan.collective;
  switch (spec.kind) {
    case plan::Collective::all_gather:
      if (spec.dim == 0) return {{spec.tensor, lower::AccessRole::consume, 0, -1}};
      if (spec.dim == 1) return {{spec.tensor, lower::AccessRole::consume, -1, 1}};
      break;
    case plan::Collective::reduce_scatter:
    case plan::Collective::all_reduce:
      // Staged (an output names the staging tensor [W, M/W, N]): the GEMM stores C (rows on
      // collective.dim) and its own box's tiles read the staged partials of their rows. (A staged
      // all-reduce's gather chunks land on C: lowering gates them with dst-ready slots.)
      if (spec.staged())
        return {{spec.tensor, lower::AccessRole::produce, spec.dim, spec.dim + 1},
                {spec.output, lower::AccessRole::consume, 1, 2, /*m_local_shard=*/true}};
      return {{spec.tensor, lower::AccessRole::produce, 0, 1}};
    case plan::Collective::all_to_all:
      return {{spec.output, lower::AccessRole::consume, 0, -1}};
    case plan::Collective::custom:
      throw UserError(
          "simulate: collective: custom-plan: a custom plan does not say how the GEMM reads or "
          "writes its tensors; use a plan whose collective is all-gather, reduce-scatter, "
          "all-reduce or all-to-all");
  }
  throw UserError(
      fmt::format("simulate: collective.dim: unsupported-dim: an all-gather along dim {} "
                  "does not map onto GEMM tile rows (0) or columns (1)",
                  spec.dim));
}

void check_chunk_rows(const GemmShape& gemm, const plan::CommPlan& plan) {
  if (gemm.chunk_rows.empty()) return;
  if (gemm.chunk_rows.size() != plan.chunks.size())
    throw UserError(fmt::format("simulate: gemm.chunk_rows has {} entries for a plan of {} chunks (one per chunk)",
                                gemm.chunk_rows.size(), plan.chunks.size()));
  for (std::size_t c = 0; c < gemm.chunk_rows.size(); ++c)
    if (gemm.chunk_rows[c] < 0)
      throw UserError(
          fmt::format("simulate: gemm.chunk_rows chunk {}: {} rows, a count must be >= 0", c, gemm.chunk_rows[c]));
}

void check_tile_scale(const GemmShape& gemm, int world_size) {
  if (gemm.tile_scale.empty()) return;
  if (static_cast<int>(gemm.tile_scale.size()) != world_size)
    throw UserError(fmt::format("simulate: gemm.tile_scale has {} rows for a world of {} (one row per rank)",
                                gemm.tile_scale.size(), world_size));
  const auto tiles = gemm.grid().count();
  for (int r = 0; r < world_size; ++r) {
    const auto& row = gemm.tile_scale[static_cast<std::size_t>(r)];
    if (static_cast<std::int64_t>(row.size()) != tiles)
      throw UserError(
          fmt::format("simulate: gemm.tile_scale rank {}: {} entries for a grid of {} tiles", r, row.size(), tiles));
    for (std::size_t t = 0; t < row.size(); ++t)
      if (!(row[t] >= 0.0))
        throw UserError(
            fmt::format("simulate: gemm.tile_scale rank {} tile {}: {} is not a share >= 0 of a tile", r, t, row[t]));
  }
}

void reorder(FusedCall& call, schedule::OrderKind order, const Calibration& calib, int group_m) {
  // Consumed chunks are ranked by when they land, produced chunks by when they would leave,
  // both with communication alone (the schedule cannot know more before it exists).
  const Timeline comm = simulate_comm_alone(call.plan, calib, call.gemm.chunk_rows);
  std::vector<double> when(call.plan.chunks.size());
  std::vector<bool> produced(call.plan.chunks.size(), false);
  for (const auto& table : call.tables)
    for (std::size_t c = 0; c < table.ready_slot_of_chunk.size() && c < produced.size(); ++c)
      if (table.ready_slot_of_chunk[c] >= 0) produced[c] = true;
  for (std::size_t c = 0; c < when.size(); ++c) when[c] = produced[c] ? comm.chunks[c].start : comm.chunks[c].arrival;
  call.orders.clear();
  const auto grid = call.gemm.grid();
  for (const auto& table : call.tables)
    call.orders.push_back(schedule::make_tile_order(call.plan, table, grid, order, when, group_m));
}

FusedCall make_fused_call(const plan::CommPlan& plan, const GemmShape& gemm,
                          const std::vector<lower::TileAccess>& accesses, schedule::OrderKind order,
                          const Calibration& calib, int group_m) {
  if (gemm.m < 1 || gemm.n < 1 || gemm.k < 1 || gemm.block_m < 1 || gemm.block_n < 1)
    throw UserError(fmt::format("simulate: gemm: bad-shape: {}x{}x{} with tile {}x{} (every size must be >= 1)", gemm.m,
                                gemm.n, gemm.k, gemm.block_m, gemm.block_n));
  FusedCall call;
  call.plan = plan;
  call.gemm = gemm;
  call.tables = lower::lower(plan, gemm.grid(), accesses);
  reorder(call, order, calib, group_m);
  return call;
}

FusedCall make_fused_call(const plan::CommPlan& plan, const GemmShape& gemm, schedule::OrderKind order,
                          const Calibration& calib, int group_m) {
  return make_fused_call(plan, gemm, default_accesses(plan), order, calib, group_m);
}

std::vector<std::vector<std::pair<int, int>>> merge_group_gates(const plan::CommPlan& plan,
                                                                std::vector<std::vector<std::pair<int, int>>> gates) {
  const auto original = gates;  // unions are built from each member's own gates
  const int n = static_cast<int>(plan.chunks.size());
  for (const auto& program : plan.ranks)
    for (const auto& list : program.streams)
      for (const auto& step : plan::issue_steps(plan, list)) {
        if (step.end - step.begin < 2) continue;
        std::vector<std::pair<int, int>> on_rank;  // the group's gates on this rank
        for (auto i = step.begin; i < step.end; ++i)
          if (list[i] >= 0 && list[i] < n && static_cast<std::size_t>(list[i]) < original.size())
            for (const auto& gate : original[list[i]])
              if (gate.first == program.rank && std::find(on_rank.begin(), on_rank.end(), gate) == on_rank.end())
                on_rank.push_back(gate);
        for (auto i = step.begin; i < step.end; ++i) {
          if (list[i] < 0 || list[i] >= n || static_cast<std::size_t>(list[i]) >= gates.size()) continue;
          auto& mine = gates[list[i]];
          for (const auto& gate : on_rank)
            if (std::find(mine.begin(), mine.end(), gate) == mine.end()) mine.push_back(gate);
        }
      }
  return gates;
}

}  // namespace syncopate::sim

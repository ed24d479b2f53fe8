// Tile schedules: the order in which a rank's kernel visits its tiles.
//
// Arrival order, consumer side (some tile of the table waits): tiles that wait on no chunk
// from another rank (src == this rank, e.g. an all-to-all's own block, or none at all) first,
// then one group per distinct predicted arrival of the last chunk a tile waits on, earliest
// first (tiles whose last chunks arrive at the same predicted time share a group); inside each
// group the tiles keep group-M swizzling for L2 reuse. On AG+GEMM the local shard differs per
// rank, so the order is rank-rotated.
// Arrival order, producer side (no tile waits, some notify; GEMM+RS): the table's ready and
// dst-ready slots are taken by predicted arrival of their chunk (ties: chunk id, then slot), and
// each slot's tiles not yet placed are appended in group-M order, so the chunk that leaves (or
// lands on this rank's partial) first has all its tiles written first; tiles gating no chunk
// come last. A table with neither waits nor notifies gets the grouped order.
// Arrival order, staged side (some tiles wait on remote chunks and some tiles that wait on none
// gate a chunk: staged GEMM+RS, where rank r's own row box waits on the other ranks' partials and
// its other boxes ship them): the shipping tiles first, box by box staggered by rank (chunks to
// peer rank+1 first, then rank+2, ... mod W, so that the ranks feed different receivers at any
// moment), each box's chunks by predicted leaving time, tiles per chunk in group-M order; then
// tiles that neither wait nor ship; then the waiting tiles in the consumer side's arrival groups
// (the own box last, in sub-chunk order).
// Row-major and grouped (group-M over the whole grid, no arrival awareness) orders exist for
// comparison.
//
// Group-M swizzling visits group_m rows of tiles at a time, column-major inside the group
// (Triton's matmul tutorial order); inside an arrival group the group's own rows are blocked,
// so a group whose rows start mid-block still gets full blocks of group_m rows.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "syncopate/lower/signal_table.hpp"
#include "syncopate/lower/tiling.hpp"
#include "syncopate/plan/comm_plan.hpp"
#include "syncopate/plan/enums.hpp"

namespace syncopate::schedule {

enum class OrderKind { arrival, row_major, grouped };
std::string_view to_string(OrderKind kind);  // "arrival", "row-major", "grouped"

struct TileOrder {
  int rank = 0;
  OrderKind kind = OrderKind::arrival;
  std::vector<int> tiles;  // a permutation of 0 .. grid.count()-1, in execution order
};

// Predicted landing (or leaving) time of each chunk, indexed by chunk id, any unit. When the
// caller has no simulator, estimate_arrival() ranks chunks by their dependency depth and their
// position in their stream.
//
// The estimate is a list schedule in units of bytes: each stream of each rank moves one chunk at
// a time at one byte per unit, and a chunk starts once its predecessors in every stream that
// issues it (both ranks' streams for NCCL) and all its deps have landed; its landing time is
// that start plus its size in bytes. Throws UserError naming a chunk when the stream order and
// deps form a cycle or a chunk names an unknown tensor (the verifier rejects both).
std::vector<double> estimate_arrival(const plan::CommPlan& plan);

// Throws UserError when the table does not fit the grid or the plan, chunk_arrival does not
// have one finite value per chunk, or group_m < 1.
TileOrder make_tile_order(const plan::CommPlan& plan, const lower::SignalTable& table, const lower::TileGrid& grid,
                          OrderKind kind, const std::vector<double>& chunk_arrival, int group_m = 8);

// `tiles` (linear ids of `grid`) in group-M order: blocks of group_m of the distinct tile rows
// present, column-major inside a block. With every tile of the grid this is Triton's
// grouped-matmul order.
std::vector<int> group_m_order(const lower::TileGrid& grid, std::vector<int> tiles, int group_m);

}  // namespace syncopate::schedule

namespace syncopate::plan {
template <>
struct EnumTable<schedule::OrderKind> {
  static constexpr std::string_view kind = "order";
  static constexpr std::array<std::pair<schedule::OrderKind, std::string_view>, 3> entries{
      {{schedule::OrderKind::arrival, "arrival"},
       {schedule::OrderKind::row_major, "row-major"},
       {schedule::OrderKind::grouped, "grouped"}}};
};
}  // namespace syncopate::plan

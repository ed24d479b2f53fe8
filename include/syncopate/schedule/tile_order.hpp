// Tile schedules: the order in which a rank's kernel visits its tiles.
//
// Arrival order: tiles whose chunks are local (or need no chunk) first, then tiles grouped by
// the predicted arrival time of the last chunk they wait on, earliest first; inside each
// arrival group the tiles keep group-M swizzling for L2 reuse. Row-major and grouped (group-M,
// no arrival awareness) orders exist for comparison. On the producer side (GEMM+RS) tiles are
// ordered so that the chunks leaving first are completed first.
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
TileOrder make_tile_order(const plan::CommPlan& plan, const lower::SignalTable& table,
                          const lower::TileGrid& grid, OrderKind kind,
                          const std::vector<double>& chunk_arrival, int group_m = 8);

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

// Tile schedules: the order in which a rank's kernel visits its tiles.
//
// Arrival order: tiles whose chunks are local (or need no chunk) first, then tiles grouped by
// the predicted arrival time of the last chunk they wait on, earliest first; inside each
// arrival group the tiles keep group-M swizzling for L2 reuse. Row-major and grouped (group-M,
// no arrival awareness) orders exist for comparison. On the producer side (GEMM+RS) tiles are
// ordered so that the chunks leaving first are completed first.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "syncopate/lower/signal_table.hpp"
#include "syncopate/lower/tiling.hpp"
#include "syncopate/plan/comm_plan.hpp"

namespace syncopate::schedule {

enum class OrderKind { arrival, row_major, grouped };
std::string_view to_string(OrderKind kind);

struct TileOrder {
  int rank = 0;
  OrderKind kind = OrderKind::arrival;
  std::vector<int> tiles;  // a permutation of 0 .. grid.count()-1, in execution order
};

// Predicted landing (or leaving) time of each chunk, indexed by chunk id, any unit. When the
// caller has no simulator, estimate_arrival() ranks chunks by their dependency depth and their
// position in their stream.
std::vector<double> estimate_arrival(const plan::CommPlan& plan);

TileOrder make_tile_order(const plan::CommPlan& plan, const lower::SignalTable& table,
                          const lower::TileGrid& grid, OrderKind kind,
                          const std::vector<double>& chunk_arrival, int group_m = 8);

}  // namespace syncopate::schedule

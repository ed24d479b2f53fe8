// Which part of a tensor each tile of a grid reads or writes, and the checks that a TileAccess
// fits the plan and the grid. Shared by lowering, the scheduler and the simulator.
#pragma once

#include <cstdint>

#include "syncopate/lower/tiling.hpp"
#include "syncopate/plan/chunk.hpp"
#include "syncopate/plan/comm_plan.hpp"

namespace syncopate::lower {

// Throws UserError when the grid is empty or has non-positive blocks.
void validate_grid(const TileGrid& grid);

// Throws UserError, naming the access and the rule, when the tensor is not in the plan, a dim
// is out of range or both dims name the same tensor dim, or the tensor's extent on m_dim
// (n_dim) differs from grid.m (grid.n): `grid-mismatch`. For an m_local_shard access the m_dim
// extent E must satisfy grid.m == world_size * E (`shard-mismatch`) and m_dim must be a dim
// (`shard-without-m-dim`).
void validate_access(const plan::CommPlan& plan, const TileGrid& grid, const TileAccess& access);

// Half-open range of tile indices [begin, end) along one grid axis.
struct TileSpan {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  bool empty() const { return begin >= end; }
};

// The region of `tensor_shape` that tile `tile` (row-major linear id) of rank `rank` touches
// under `access`: the tile's rows on m_dim, its columns on n_dim, every other dim whole. For an
// m_local_shard access the rows are the tile's rows inside rank's shard, shifted by
// -rank * E; a tile wholly outside the shard gets an empty box (extent 0 on m_dim). `rank` is
// used only by m_local_shard accesses.
plan::Box tile_region(const TileGrid& grid, const TileAccess& access, const std::vector<std::int64_t>& tensor_shape,
                      std::int64_t tile, int rank);

// The tile rows and tile columns of rank `rank` whose region under `access` intersects `box` (a
// box of the accessed tensor, whose shape is `tensor_shape`). An axis whose dim is -1 spans
// every tile; an empty box gives empty spans.
struct TileRect {
  TileSpan rows;
  TileSpan cols;
  bool empty() const { return rows.empty() || cols.empty(); }
  std::int64_t count() const { return empty() ? 0 : (rows.end - rows.begin) * (cols.end - cols.begin); }
};
TileRect tiles_touching(const TileGrid& grid, const TileAccess& access, const std::vector<std::int64_t>& tensor_shape,
                        const plan::Box& box, int rank);

}  // namespace syncopate::lower

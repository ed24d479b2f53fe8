// Tile regions and TileAccess validation (see tile_region.hpp).
#include "syncopate/lower/tile_region.hpp"

#include <algorithm>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "syncopate/common/error.hpp"
#include "syncopate/lower/spelling.hpp"

namespace syncopate::lower {
namespace {

std::string describe(const TileAccess& a) {
  return fmt::format("access {{tensor \"{}\", {}, m_dim {}, n_dim {}{}}}", a.tensor, plan::to_string(a.role), a.m_dim,
                     a.n_dim, a.m_local_shard ? ", m_local_shard" : "");
}

// Grid rows [begin, end) that index an m_local_shard tensor on `rank` (shard extent `extent`).
struct ShardRows {
  std::int64_t begin = 0, end = 0;
};
ShardRows shard_rows(std::int64_t extent, int rank) {
  return {static_cast<std::int64_t>(rank) * extent, static_cast<std::int64_t>(rank + 1) * extent};
}

// Tile indices along one axis (block size `block`, `tiles` tiles) touching [lo, lo + len).
TileSpan span_touching(std::int64_t lo, std::int64_t len, std::int64_t block, std::int64_t tiles) {
  if (len <= 0) return {0, 0};
  const std::int64_t first = std::max<std::int64_t>(lo, 0) / block;
  const std::int64_t last = (lo + len - 1) / block;  // inclusive
  return {std::min(first, tiles), std::min(last + 1, tiles)};
}

}  // namespace

void validate_grid(const TileGrid& grid) {
  if (grid.m <= 0 || grid.n <= 0)
    throw UserError(fmt::format("tile grid: empty-gemm: M x N must be positive, got {} x {}", grid.m, grid.n));
  if (grid.block_m <= 0 || grid.block_n <= 0)
    throw UserError(fmt::format("tile grid: bad-tile: BLOCK_M x BLOCK_N must be positive, got {} x {}", grid.block_m,
                                grid.block_n));
  // Tile ids are int32 in signal tables and tile orders (a kernel indexes them).
  if (grid.count() > std::numeric_limits<std::int32_t>::max())
    throw UserError(
        fmt::format("tile grid: too-many-tiles: {} x {} tiles do not fit in int32", grid.tiles_m(), grid.tiles_n()));
}

void validate_access(const plan::CommPlan& plan, const TileGrid& grid, const TileAccess& access) {
  const auto it = plan.tensors.find(access.tensor);
  if (it == plan.tensors.end()) {
    std::string known;
    for (const auto& [name, spec] : plan.tensors) known += (known.empty() ? "\"" : ", \"") + name + "\"";
    throw UserError(fmt::format("{}: unknown-tensor: the plan has no tensor \"{}\" (it has {})", describe(access),
                                access.tensor, known.empty() ? "none" : known));
  }
  const auto rank = static_cast<int>(it->second.shape.size());
  for (const auto& [name, dim] : {std::pair{"m_dim", access.m_dim}, std::pair{"n_dim", access.n_dim}}) {
    if (dim < -1 || dim >= rank)
      throw UserError(
          fmt::format("{}: dim-out-of-range: {} is {} but tensor \"{}\" has {} dims "
                      "(use -1 for none)",
                      describe(access), name, dim, access.tensor, rank));
  }
  if (access.m_dim >= 0 && access.m_dim == access.n_dim)
    throw UserError(fmt::format("{}: same-dim: m_dim and n_dim both index dim {}", describe(access), access.m_dim));
  const auto& shape = it->second.shape;
  if (access.m_local_shard) {
    if (access.m_dim < 0)
      throw UserError(
          fmt::format("{}: shard-without-m-dim: m_local_shard needs the tensor dim that "
                      "holds this rank's rows (m_dim is -1)",
                      describe(access)));
    const std::int64_t extent = shape[access.m_dim];
    if (extent * plan.world_size != grid.m)
      throw UserError(fmt::format(
          "{}: shard-mismatch: tensor \"{}\" has extent {} on m_dim {}, so "
          "{} ranks' shards cover {} rows, but the GEMM has M = {} (M must be "
          "world_size x the shard extent)",
          describe(access), access.tensor, extent, access.m_dim, plan.world_size, extent * plan.world_size, grid.m));
  } else if (access.m_dim >= 0 && shape[access.m_dim] != grid.m)
    throw UserError(
        fmt::format("{}: grid-mismatch: tensor \"{}\" has extent {} on m_dim {} but "
                    "the GEMM has M = {}",
                    describe(access), access.tensor, shape[access.m_dim], access.m_dim, grid.m));
  if (access.n_dim >= 0 && shape[access.n_dim] != grid.n)
    throw UserError(
        fmt::format("{}: grid-mismatch: tensor \"{}\" has extent {} on n_dim {} but "
                    "the GEMM has N = {}",
                    describe(access), access.tensor, shape[access.n_dim], access.n_dim, grid.n));
}

plan::Box tile_region(const TileGrid& grid, const TileAccess& access, const std::vector<std::int64_t>& tensor_shape,
                      std::int64_t tile, int rank) {
  plan::Box box;
  box.offset.assign(tensor_shape.size(), 0);
  box.extent = tensor_shape;
  const std::int64_t tm = tile / grid.tiles_n();
  const std::int64_t tn = tile % grid.tiles_n();
  if (access.m_dim >= 0) {
    std::int64_t lo = tm * grid.block_m;
    std::int64_t hi = std::min(lo + grid.block_m, grid.m);
    if (access.m_local_shard) {  // clip to the shard, then shift into the tensor's rows
      const ShardRows shard = shard_rows(tensor_shape.at(access.m_dim), rank);
      lo = std::clamp(lo, shard.begin, shard.end) - shard.begin;
      hi = std::clamp(hi, shard.begin, shard.end) - shard.begin;
    }
    box.offset[access.m_dim] = lo;
    box.extent[access.m_dim] = hi - lo;
  }
  if (access.n_dim >= 0) {
    box.offset[access.n_dim] = tn * grid.block_n;
    box.extent[access.n_dim] = std::min(grid.block_n, grid.n - tn * grid.block_n);
  }
  return box;
}

TileRect tiles_touching(const TileGrid& grid, const TileAccess& access, const std::vector<std::int64_t>& tensor_shape,
                        const plan::Box& box, int rank) {
  for (auto e : box.extent)
    if (e <= 0) return {};
  TileRect rect{{0, grid.tiles_m()}, {0, grid.tiles_n()}};
  if (access.m_dim >= 0) {
    std::int64_t lo = box.offset.at(access.m_dim);
    std::int64_t len = box.extent.at(access.m_dim);
    if (access.m_local_shard) {  // tensor rows [0, E) are grid rows of rank's shard
      const std::int64_t extent = tensor_shape.at(access.m_dim);
      const std::int64_t end = std::min(lo + len, extent);
      lo = std::max<std::int64_t>(lo, 0);
      len = end - lo;
      lo += shard_rows(extent, rank).begin;
    }
    rect.rows = span_touching(lo, len, grid.block_m, grid.tiles_m());
  }
  if (access.n_dim >= 0)
    rect.cols = span_touching(box.offset.at(access.n_dim), box.extent.at(access.n_dim), grid.block_n, grid.tiles_n());
  return rect;
}

}  // namespace syncopate::lower

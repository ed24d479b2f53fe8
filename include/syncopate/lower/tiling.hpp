// How a local kernel's tile grid touches the communicated tensors.
//
// A GEMM-like kernel tiles an M x N output with BLOCK_M x BLOCK_N tiles; tile t covers rows
// [tm*BLOCK_M, ..) and columns [tn*BLOCK_N, ..) where t = tm * tiles_n + tn (row-major linear id;
// the last row/column of tiles may be partial). A TileAccess says which dimension of a tensor
// the tile's row range and column range index; the rest of the tensor's dims are read whole.
//   AG+GEMM (A gathered along M):  {tensor "a", consume, m_dim 0, n_dim -1}
//   AG along N (B gathered):       {tensor "b", consume, m_dim -1, n_dim 1}
//   GEMM+RS (C partials):          {tensor "c", produce, m_dim 0, n_dim 1}
//   staged GEMM+RS (partials of this rank's box, received into staging "p" of shape
//   [W, M/W, N]):                  {tensor "p", consume, m_dim 1, n_dim 2, m_local_shard true}
//
// m_local_shard: the tensor's m_dim holds only THIS rank's shard of the grid rows. With E the
// tensor's extent on m_dim and W the world size (grid.m must be W * E), grid rows
// [rank * E, (rank + 1) * E) index tensor rows [0, E); a tile's rows outside that range touch
// nothing of the tensor. So the same access means different tiles on different ranks, and every
// function that maps tiles to regions takes the rank.
#pragma once

#include <cstdint>
#include <string>

namespace syncopate::lower {

struct TileGrid {
  std::int64_t m = 0, n = 0;
  std::int64_t block_m = 128, block_n = 256;

  std::int64_t tiles_m() const { return (m + block_m - 1) / block_m; }
  std::int64_t tiles_n() const { return (n + block_n - 1) / block_n; }
  std::int64_t count() const { return tiles_m() * tiles_n(); }
};

enum class AccessRole { consume, produce };

struct TileAccess {
  std::string tensor;
  AccessRole role = AccessRole::consume;
  int m_dim = 0;               // tensor dim indexed by the tile's row range, -1 if none
  int n_dim = -1;              // tensor dim indexed by the tile's column range, -1 if none
  bool m_local_shard = false;  // m_dim holds this rank's shard of the grid rows (see above)
};

}  // namespace syncopate::lower

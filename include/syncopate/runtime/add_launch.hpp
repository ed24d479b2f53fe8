// The launch shape of the reduce-add kernel (device_ops.cu), as plain C++ so the CPU tests can
// check it: blocks of kAddThreads threads, tx of them along a row (a power of two, enough for
// the row's 16-byte units, so narrow boxes do not leave most of a block idle), ty = the rest on
// rows; bx x by blocks, never more than max_blocks (the SMs left to communication: a block that
// finds no free SM would wait for the GEMM to finish). Each thread keeps kAddUnroll 16-byte
// loads in flight, which is what a remote (pulled) read over NVLink needs for bandwidth.
#pragma once

#include <algorithm>
#include <cstdint>

namespace syncopate::runtime {

inline constexpr int kAddThreads = 512;
inline constexpr int kAddUnroll = 4;

struct AddLaunch {
  int tx = 1;  // threads per block along a row
  int ty = 1;  // ... along rows (tx * ty == kAddThreads)
  int bx = 1;  // blocks along a row
  int by = 1;  // ... along rows (bx * by <= max_blocks)
};

// row_units: 16-byte units per row (elements when the add is not vectorised); max_blocks >= 1.
inline AddLaunch add_launch_shape(std::int64_t row_units, std::int64_t rows, int max_blocks) {
  AddLaunch l;
  while (l.tx < kAddThreads && l.tx < row_units) l.tx *= 2;
  l.ty = kAddThreads / l.tx;
  max_blocks = std::max(1, max_blocks);
  const std::int64_t per_block_x = static_cast<std::int64_t>(l.tx) * kAddUnroll;
  const std::int64_t want_x = (row_units + per_block_x - 1) / per_block_x;
  l.bx = static_cast<int>(std::clamp<std::int64_t>(want_x, 1, max_blocks));
  const std::int64_t want_y = (rows + l.ty - 1) / l.ty;
  l.by = static_cast<int>(std::clamp<std::int64_t>(want_y, 1, std::max(1, max_blocks / l.bx)));
  return l;
}

}  // namespace syncopate::runtime

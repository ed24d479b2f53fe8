// How a box of one row-major tensor maps onto a box of another: a list of strided 2-D copies.
//
// Every backend moves a chunk as one or more "pitched" copies (cudaMemcpy2DAsync, an SM-copy
// kernel, an NCCL pack/unpack). Trailing dims that both boxes cover whole merge into one
// contiguous run; the next dim becomes the rows of a 2-D copy; any dims further out enumerate
// separate 2-D copies. Plain C++: unit-tested on the CPU.
#pragma once

#include <cstdint>
#include <vector>

#include "syncopate/plan/chunk.hpp"

namespace syncopate::runtime {

// `height` rows of `width` bytes; row i starts at src_offset + i * src_pitch in the source
// tensor and at dst_offset + i * dst_pitch in the destination tensor (offsets in bytes).
struct Copy2D {
  std::int64_t src_offset = 0;
  std::int64_t dst_offset = 0;
  std::int64_t width = 0;
  std::int64_t height = 0;
  std::int64_t src_pitch = 0;
  std::int64_t dst_pitch = 0;

  std::int64_t bytes() const { return width * height; }
  friend bool operator==(const Copy2D&, const Copy2D&) = default;
};

// Copies that move `src_box` of a tensor of shape `src_shape` into `dst_box` of a tensor of
// shape `dst_shape`, both row-major and contiguous, elements of `elem_size` bytes. Throws
// UserError when the boxes differ in rank or extent, or leave their tensors. An empty box
// gives no copies.
std::vector<Copy2D> box_copies(const plan::Box& src_box, const std::vector<std::int64_t>& src_shape,
                               const plan::Box& dst_box, const std::vector<std::int64_t>& dst_shape, int elem_size);

// Whole bytes the copies move.
std::int64_t total_bytes(const std::vector<Copy2D>& copies);

// True when the copies read (write) one contiguous run of the source (destination) tensor:
// what NCCL needs to send (receive) without packing through a staging buffer.
bool src_contiguous(const std::vector<Copy2D>& copies);
bool dst_contiguous(const std::vector<Copy2D>& copies);

// The same copies with the destination (source) side replaced by a packed buffer: row after
// row, copy after copy, no gaps. For staging areas (NCCL pack/unpack, copy-engine reduce-add).
std::vector<Copy2D> to_packed_dst(const std::vector<Copy2D>& copies);
std::vector<Copy2D> from_packed_src(const std::vector<Copy2D>& copies);

}  // namespace syncopate::runtime

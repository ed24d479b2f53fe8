// How a box of one row-major tensor maps onto a box of another: a list of strided 2-D copies.
//
// Every backend moves a chunk as one or more "pitched" copies (cudaMemcpy2DAsync, an SM-copy
// kernel, an NCCL pack/unpack). Trailing dims that both boxes cover whole merge into one
// contiguous run; the next dim becomes the rows of a 2-D copy; any dims further out enumerate
// separate 2-D copies. Plain C++: unit-tested on the CPU.
#pragma once

#include <cstdint>
#include <optional>
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

// A chunk with run-time rows (plan::RuntimeRows) need move only the first n of the `capacity`
// positions of its box along `dim`, n read on the device. How each of the box's copies shrinks
// with n: along the run (dim is the run's leading dim: width = n * unit bytes) or along the rows
// (dim is the row dim: height = n * unit, unit 1). Absent where dim is further out (it enumerates
// separate copies) or inside the run behind a partial dim: those move the whole box.
enum class CountedAlong { width, height };
struct CountedRows {
  CountedAlong along = CountedAlong::width;
  std::int64_t unit = 0;      // bytes (width) or rows (height) per counted position
  std::int64_t capacity = 0;  // the box's extent along dim: n is clamped to 0..capacity
  friend bool operator==(const CountedRows&, const CountedRows&) = default;
};
std::optional<CountedRows> counted_rows(const plan::Box& src_box, const std::vector<std::int64_t>& src_shape,
                                        const plan::Box& dst_box, const std::vector<std::int64_t>& dst_shape, int dim,
                                        int elem_size);

// One copy of the box cut to its first n positions along dim (n clamped to 0..capacity): the
// host's statement of what the counted SM copy computes on the device.
Copy2D counted_copy(const Copy2D& full, const CountedRows& rows, std::int64_t n);

}  // namespace syncopate::runtime

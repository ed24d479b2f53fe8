// box_copies(): see box_copy.hpp.
#include "syncopate/runtime/box_copy.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "syncopate/common/error.hpp"

namespace syncopate::runtime {
namespace {

std::vector<std::int64_t> row_major_strides(const std::vector<std::int64_t>& shape) {
  std::vector<std::int64_t> strides(shape.size(), 1);
  for (std::size_t d = shape.size(); d-- > 1;) strides[d - 1] = strides[d] * shape[d];
  return strides;
}

void check_box(const plan::Box& box, const std::vector<std::int64_t>& shape, const char* side) {
  if (box.offset.size() != shape.size() || box.extent.size() != shape.size())
    throw UserError(fmt::format("{} box: box-rank-mismatch: box has {} dims, tensor has {}", side, box.offset.size(),
                                shape.size()));
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (box.offset[d] < 0 || box.extent[d] < 0 || box.offset[d] + box.extent[d] > shape[d])
      throw UserError(fmt::format("{} box: box-out-of-bounds: dim {} covers [{}, {}) of {}", side, d, box.offset[d],
                                  box.offset[d] + box.extent[d], shape[d]));
  }
}

}  // namespace

std::vector<Copy2D> box_copies(const plan::Box& src_box, const std::vector<std::int64_t>& src_shape,
                               const plan::Box& dst_box, const std::vector<std::int64_t>& dst_shape, int elem_size) {
  check_box(src_box, src_shape, "source");
  check_box(dst_box, dst_shape, "destination");
  if (src_box.extent != dst_box.extent)
    throw UserError(fmt::format("box-extent-mismatch: source extent [{}] vs destination [{}]",
                                fmt::join(src_box.extent, ", "), fmt::join(dst_box.extent, ", ")));
  const std::size_t rank = src_shape.size();
  if (src_box.elements() == 0) return {};
  if (rank == 0) return {Copy2D{0, 0, elem_size, 1, elem_size, elem_size}};

  // Innermost dim `k` such that every dim after it is covered whole on both sides: dims k..end
  // then form one contiguous run of extent[k] * stride[k] elements on each side.
  std::size_t k = rank - 1;
  while (k > 0 && src_box.extent[k] == src_shape[k] && dst_box.extent[k] == dst_shape[k]) --k;
  const auto src_strides = row_major_strides(src_shape);
  const auto dst_strides = row_major_strides(dst_shape);
  // dims after k are whole, so both sides share the same inner stride at k
  const std::int64_t run = src_box.extent[k] * src_strides[k] * elem_size;

  // Dim k-1 (if any) gives the rows; dims before it are enumerated.
  const bool has_rows = k > 0;
  const std::size_t row_dim = has_rows ? k - 1 : 0;
  const std::int64_t height = has_rows ? src_box.extent[row_dim] : 1;
  const std::int64_t src_pitch = has_rows ? src_strides[row_dim] * elem_size : run;
  const std::int64_t dst_pitch = has_rows ? dst_strides[row_dim] * elem_size : run;
  const std::size_t outer_dims = has_rows ? row_dim : 0;

  std::vector<std::int64_t> index(outer_dims, 0);
  std::vector<Copy2D> copies;
  while (true) {
    std::int64_t src_off = 0, dst_off = 0;
    for (std::size_t d = 0; d < rank; ++d) {
      const std::int64_t i = d < outer_dims ? index[d] : 0;
      src_off += (src_box.offset[d] + i) * src_strides[d];
      dst_off += (dst_box.offset[d] + i) * dst_strides[d];
    }
    copies.push_back({src_off * elem_size, dst_off * elem_size, run, height, src_pitch, dst_pitch});
    // odometer over the outer dims
    std::size_t d = outer_dims;
    while (d > 0) {
      --d;
      if (++index[d] < src_box.extent[d]) break;
      index[d] = 0;
      if (d == 0) return copies;
    }
    if (outer_dims == 0) return copies;
  }
}

std::optional<CountedRows> counted_rows(const plan::Box& src_box, const std::vector<std::int64_t>& src_shape,
                                        const plan::Box& dst_box, const std::vector<std::int64_t>& dst_shape, int dim,
                                        int elem_size) {
  check_box(src_box, src_shape, "source");
  check_box(dst_box, dst_shape, "destination");
  const std::size_t rank = src_shape.size();
  if (dim < 0 || static_cast<std::size_t>(dim) >= rank || src_box.extent != dst_box.extent) return std::nullopt;
  // The same run dim `k` as box_copies.
  std::size_t k = rank - 1;
  while (k > 0 && src_box.extent[k] == src_shape[k] && dst_box.extent[k] == dst_shape[k]) --k;
  const auto d = static_cast<std::size_t>(dim);
  const std::int64_t capacity = src_box.extent[d];
  if (d == k) return CountedRows{CountedAlong::width, row_major_strides(src_shape)[k] * elem_size, capacity};
  if (d + 1 == k) return CountedRows{CountedAlong::height, 1, capacity};
  return std::nullopt;
}

Copy2D counted_copy(const Copy2D& full, const CountedRows& rows, std::int64_t n) {
  const std::int64_t live = n < 0 ? 0 : (n > rows.capacity ? rows.capacity : n);
  Copy2D c = full;
  if (rows.along == CountedAlong::width)
    c.width = live * rows.unit;
  else
    c.height = live * rows.unit;
  return c;
}

std::int64_t total_bytes(const std::vector<Copy2D>& copies) {
  std::int64_t n = 0;
  for (const auto& c : copies) n += c.bytes();
  return n;
}

bool src_contiguous(const std::vector<Copy2D>& copies) {
  if (copies.size() != 1) return copies.empty();
  return copies.front().height == 1 || copies.front().src_pitch == copies.front().width;
}

bool dst_contiguous(const std::vector<Copy2D>& copies) {
  if (copies.size() != 1) return copies.empty();
  return copies.front().height == 1 || copies.front().dst_pitch == copies.front().width;
}

std::vector<Copy2D> to_packed_dst(const std::vector<Copy2D>& copies) {
  std::vector<Copy2D> out;
  std::int64_t at = 0;
  for (auto c : copies) {
    c.dst_offset = at;
    c.dst_pitch = c.width;
    at += c.bytes();
    out.push_back(c);
  }
  return out;
}

std::vector<Copy2D> from_packed_src(const std::vector<Copy2D>& copies) {
  std::vector<Copy2D> out;
  std::int64_t at = 0;
  for (auto c : copies) {
    c.src_offset = at;
    c.src_pitch = c.width;
    at += c.bytes();
    out.push_back(c);
  }
  return out;
}

}  // namespace syncopate::runtime

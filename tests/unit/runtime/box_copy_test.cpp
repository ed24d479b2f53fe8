#include <gtest/gtest.h>

#include <algorithm>

#include "syncopate/common/error.hpp"
#include "syncopate/runtime/add_launch.hpp"
#include "syncopate/runtime/box_copy.hpp"

namespace syncopate::runtime {
namespace {

using Shape = std::vector<std::int64_t>;

// Every byte a list of copies moves, as (src byte, dst byte) pairs, in a brute-force reference.
std::vector<std::pair<std::int64_t, std::int64_t>> bytes_moved(const std::vector<Copy2D>& copies) {
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  for (const auto& c : copies)
    for (std::int64_t r = 0; r < c.height; ++r)
      for (std::int64_t b = 0; b < c.width; ++b)
        out.emplace_back(c.src_offset + r * c.src_pitch + b, c.dst_offset + r * c.dst_pitch + b);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::pair<std::int64_t, std::int64_t>> reference(const plan::Box& sb, const Shape& ss, const plan::Box& db,
                                                             const Shape& ds, int es) {
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  const std::size_t rank = ss.size();
  std::vector<std::int64_t> idx(rank, 0);
  const auto n = sb.elements();
  for (std::int64_t e = 0; e < n; ++e) {
    std::int64_t rem = e, so = 0, dof = 0, sstride = 1, dstride = 1;
    for (std::size_t d = rank; d-- > 0;) {
      idx[d] = rem % sb.extent[d];
      rem /= sb.extent[d];
    }
    for (std::size_t d = rank; d-- > 0;) {
      so += (sb.offset[d] + idx[d]) * sstride;
      dof += (db.offset[d] + idx[d]) * dstride;
      sstride *= ss[d];
      dstride *= ds[d];
    }
    for (int b = 0; b < es; ++b) out.emplace_back(so * es + b, dof * es + b);
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(BoxCopy, RowsOfAMatrixAreOneContiguousRun) {
  const auto copies = box_copies({{2, 0}, {3, 8}}, {10, 8}, {{5, 0}, {3, 8}}, {9, 8}, 2);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src_offset, 2 * 8 * 2);
  EXPECT_EQ(copies[0].dst_offset, 5 * 8 * 2);
  EXPECT_EQ(copies[0].bytes(), 3 * 8 * 2);
  EXPECT_TRUE(src_contiguous(copies));
  EXPECT_TRUE(dst_contiguous(copies));
}

TEST(BoxCopy, ColumnsOfAMatrixArePitchedRows) {
  const auto copies = box_copies({{0, 3}, {4, 5}}, {4, 16}, {{0, 0}, {4, 5}}, {4, 5}, 4);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].height, 4);
  EXPECT_EQ(copies[0].width, 20);
  EXPECT_EQ(copies[0].src_pitch, 64);
  EXPECT_EQ(copies[0].dst_pitch, 20);
  EXPECT_FALSE(src_contiguous(copies));
  EXPECT_TRUE(dst_contiguous(copies));
}

TEST(BoxCopy, MatchesBruteForceOnThreeDimensionalBoxes) {
  const Shape ss{3, 5, 7}, ds{4, 6, 7};
  for (std::int64_t o0 = 0; o0 < 2; ++o0)
    for (std::int64_t e1 = 1; e1 <= 5; e1 += 2)
      for (std::int64_t e2 : {3, 7}) {
        const plan::Box sb{{o0, 5 - e1, 7 - e2}, {2, e1, e2}};
        const plan::Box db{{1, 0, 0}, {2, e1, e2}};
        const auto copies = box_copies(sb, ss, db, ds, 2);
        EXPECT_EQ(bytes_moved(copies), reference(sb, ss, db, ds, 2));
        EXPECT_EQ(total_bytes(copies), sb.elements() * 2);
      }
}

TEST(BoxCopy, PackedStagingKeepsTheBytesInOrder) {
  const auto copies = box_copies({{0, 1, 0}, {2, 2, 3}}, {2, 4, 3}, {{0, 0, 0}, {2, 2, 3}}, {2, 2, 3}, 4);
  const auto packed = to_packed_dst(copies);
  std::int64_t at = 0;
  for (const auto& c : packed) {
    EXPECT_EQ(c.dst_offset, at);
    EXPECT_EQ(c.dst_pitch, c.width);
    at += c.bytes();
  }
  EXPECT_EQ(at, total_bytes(copies));
  const auto unpacked = from_packed_src(copies);
  for (std::size_t i = 0; i < copies.size(); ++i) {
    EXPECT_EQ(unpacked[i].src_offset, packed[i].dst_offset);
    EXPECT_EQ(unpacked[i].dst_offset, copies[i].dst_offset);
  }
}

TEST(BoxCopy, EmptyBoxMovesNothing) {
  EXPECT_TRUE(box_copies({{0, 0}, {0, 4}}, {3, 4}, {{0, 0}, {0, 4}}, {3, 4}, 2).empty());
}

TEST(BoxCopy, RejectsBoxesOutsideTheirTensorNamingTheSide) {
  try {
    box_copies({{2, 0}, {3, 8}}, {4, 8}, {{0, 0}, {3, 8}}, {4, 8}, 2);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("source box: box-out-of-bounds: dim 0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(box_copies({{0, 0}, {2, 8}}, {4, 8}, {{0, 0}, {3, 8}}, {4, 8}, 2), UserError);
  EXPECT_THROW(box_copies({{0}, {2}}, {4, 8}, {{0, 0}, {2, 8}}, {4, 8}, 2), UserError);
}

// The reduce-add kernel's launch shape: full blocks, never more blocks than allowed, threads
// along a row only as many as the row has units (narrow boxes put the block on rows instead),
// and wide rows spread over the allowed blocks.
// A chunk with run-time rows moves the first n positions of its box along `dim`: for every n
// from 0 to the capacity (and past it: clamped), the counted copies move exactly the bytes of the
// box cut to n along dim (the brute-force reference), on every shape where counting applies.
TEST(CountedRows, CutCopiesMoveExactlyTheFirstNRowsOfTheBox) {
  struct Case {
    Shape ss, ds;
    plan::Box sb, db;
    int dim;
    CountedAlong along;
  };
  const std::vector<Case> cases = {
      // the MoE dispatch: slot (j, e) of x_send [W * E * C, H] into slot (s, e) of x_recv
      {{24, 8}, {24, 8}, {{8, 0}, {4, 8}}, {{16, 0}, {4, 8}}, 0, CountedAlong::width},
      // one slot that is the whole tensor (world 1, one expert)
      {{4, 8}, {4, 8}, {{0, 0}, {4, 8}}, {{0, 0}, {4, 8}}, 0, CountedAlong::width},
      // rows of a column block: dim 0 is the row dim of pitched copies
      {{6, 16}, {6, 5}, {{1, 3}, {4, 5}}, {{2, 0}, {4, 5}}, 0, CountedAlong::height},
      // 3-d, counted along the middle dim, the last whole: the run's leading dim
      {{2, 6, 7}, {3, 6, 7}, {{1, 2, 0}, {1, 3, 7}}, {{0, 1, 0}, {1, 3, 7}}, 1, CountedAlong::width},
      // 3-d, counted along the middle dim, the last partial: the rows of one copy per outer index
      {{2, 6, 7}, {3, 6, 7}, {{0, 2, 1}, {2, 3, 5}}, {{1, 1, 2}, {2, 3, 5}}, 1, CountedAlong::height},
  };
  for (const auto& k : cases) {
    const auto rows = counted_rows(k.sb, k.ss, k.db, k.ds, k.dim, 2);
    ASSERT_TRUE(rows.has_value());
    EXPECT_EQ(rows->along, k.along);
    const std::int64_t capacity = k.sb.extent[static_cast<std::size_t>(k.dim)];
    EXPECT_EQ(rows->capacity, capacity);
    const auto full = box_copies(k.sb, k.ss, k.db, k.ds, 2);
    for (std::int64_t n = -1; n <= capacity + 2; ++n) {
      const std::int64_t live = std::clamp<std::int64_t>(n, 0, capacity);
      plan::Box sb = k.sb, db = k.db;
      sb.extent[static_cast<std::size_t>(k.dim)] = live;
      db.extent[static_cast<std::size_t>(k.dim)] = live;
      std::vector<Copy2D> cut;
      for (const auto& c : full) cut.push_back(counted_copy(c, *rows, n));
      EXPECT_EQ(bytes_moved(cut), reference(sb, k.ss, db, k.ds, 2)) << "n = " << n << ", dim " << k.dim;
    }
  }
}

TEST(CountedRows, AbsentWhereTheDimEnumeratesSeparateCopiesOrIsOutsideTheBox) {
  // dim 0 of a 3-d box whose last dim is partial: each index of dim 0 is its own copy
  EXPECT_FALSE(counted_rows({{0, 0, 1}, {2, 3, 5}}, {2, 6, 7}, {{0, 0, 0}, {2, 3, 5}}, {2, 3, 5}, 0, 2));
  // dim inside the run behind a partial dim: rows 0..n of dim 2 are not contiguous
  EXPECT_FALSE(counted_rows({{0, 1, 0}, {2, 3, 7}}, {2, 6, 7}, {{0, 0, 0}, {2, 3, 7}}, {2, 3, 7}, 2, 2));
  EXPECT_FALSE(counted_rows({{0, 0}, {4, 8}}, {4, 8}, {{0, 0}, {4, 8}}, {4, 8}, 2, 2));
}

TEST(AddLaunchShape, FullBlocksWithinTheBlockCap) {
  for (std::int64_t units : {1, 2, 3, 7, 8, 100, 511, 512, 513, 4096, 1 << 20})
    for (std::int64_t rows : {1, 2, 5, 64, 1000, 1 << 16})
      for (int cap : {1, 4, 16, 132}) {
        const AddLaunch l = add_launch_shape(units, rows, cap);
        const auto where = ::testing::Message() << units << " units x " << rows << " rows, cap " << cap;
        EXPECT_EQ(l.tx * l.ty, kAddThreads) << where;
        EXPECT_EQ(l.tx & (l.tx - 1), 0) << where;  // a power of two
        EXPECT_GE(l.tx, std::min<std::int64_t>(units, kAddThreads)) << where;
        EXPECT_LT(l.tx, 2 * std::max<std::int64_t>(units, 1)) << where;
        EXPECT_GE(l.bx, 1) << where;
        EXPECT_GE(l.by, 1) << where;
        EXPECT_LE(l.bx * l.by, cap) << where;
        // No block is launched without work: bx blocks along a row each get some units, by
        // along rows each get some rows.
        EXPECT_LE((l.bx - 1) * std::int64_t{l.tx} * kAddUnroll, units) << where;
        EXPECT_LE((l.by - 1) * std::int64_t{l.ty}, rows) << where;
      }
  // A 32 MiB bf16 row block (4096 x 4096) with 16 blocks: all 16 used, along the rows' units.
  const AddLaunch wide = add_launch_shape(4096 * 2 / 16, 4096, 16);
  EXPECT_EQ(wide.tx, 512);
  EXPECT_EQ(wide.bx * wide.by, 16);
  // One 16-byte unit per row (8 bf16 columns): one thread per row, 512 rows per block.
  const AddLaunch narrow = add_launch_shape(1, 1 << 16, 16);
  EXPECT_EQ(narrow.tx, 1);
  EXPECT_EQ(narrow.ty, 512);
  EXPECT_EQ(narrow.by, 16);
}

}  // namespace
}  // namespace syncopate::runtime

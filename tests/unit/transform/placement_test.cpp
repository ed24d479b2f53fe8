// Where the tile's wait goes (placement.cpp): at the tile lookup, returning the tile, when a
// `@sy.consume` follows the tile block with plain statements between and names m= or n=; else
// at the consume (`syl.wait_tile`). Kernels written for these tests.
#include <gtest/gtest.h>

#include <string>

#include "syncopate/transform/tokenizer.hpp"
#include "syncopate/transform/transform.hpp"

namespace syncopate::transform {
namespace {

constexpr const char* kHeader =
    "import triton\n"
    "import triton.language as tl\n"
    "\n"
    "\n"
    "@triton.jit\n"
    "def _k_loop(x_ptr, row, K):\n"
    "    acc = 0.0\n"
    "    for k in range(K):\n"
    "        acc += tl.load(x_ptr + row * K + k)\n"
    "    return acc\n"
    "\n"
    "\n"
    "@triton.jit\n";

std::string output_of(const std::string& kernel_source) {
  const auto out = transform_kernel(std::string(kHeader) + kernel_source, "k.py", "k").source;
  tokenize(out, "out.py");  // still Python the tokenizer follows
  return out;
}

std::size_t count(const std::string& hay, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) ++n;
  return n;
}

constexpr const char* kWaitForTile =
    "sy_tile, sy_seen = syl.wait_for_tile(sy_signals, sy_wait_offsets, sy_wait_slots, sy_slot_writers, sy_tile, "
    "sy_epoch, sy_wait_bound_ns, sy_rank, sy_error, sy_seen)  # [syncopate]\n";

constexpr const char* kWaitForTileRow =
    "sy_tile, sy_seen = syl.wait_for_tile_row(sy_signals, sy_wait_slots, sy_slot_writers, sy_tile, sy_wait_begin, "
    "sy_wait_end, sy_epoch_now, sy_wait_bound_ns, sy_rank, sy_error, sy_seen)  # [syncopate]\n";

constexpr const char* kRowsNext =
    "sy_wait_begin_next, sy_wait_end_next = syl.wait_row(sy_wait_offsets, sy_tile_next)  # [syncopate]\n";

constexpr const char* kNotifyRow =
    "sy_notify_begin, sy_notify_end = syl.notify_row(sy_notify_offsets, sy_tile)  # [syncopate]\n";

std::string one_tile_kernel(const std::string& after_tile_block) {
  return "def k(x_ptr, y_ptr, K, BM: tl.constexpr):\n"
         "    # @sy.tile(index=tl.program_id(0), m=pid_m)\n"
         "    pid_m = tl.program_id(0)\n"
         "    # @sy.end\n" +
         after_tile_block + "    tl.store(y_ptr + pid_m, acc)\n";
}

TEST(WaitPlacement, AConsumeAfterPlainStatementsWaitsAtTheTileLookup) {
  const auto out = one_tile_kernel(
      "    rows = pid_m * BM + tl.arange(0, BM)\n"
      "    limit = min(K, BM)\n"
      "    # @sy.consume(x_ptr, m=pid_m)\n"
      "    acc = tl.sum(tl.load(x_ptr + rows * K), axis=0) + limit\n");
  const auto text = output_of(out);
  // Between the order lookup and the coordinates: everything computed from the tile follows it.
  const std::string lookup = "    sy_tile = syl.tile_at(sy_tile_order, tl.program_id(0))  # [syncopate]\n";
  EXPECT_NE(text.find(lookup + "    sy_seen = syl.no_slot_seen()  # [syncopate]\n    " + kWaitForTile +
                      "    pid_m = syl.tile_row(sy_tile, sy_tiles_n)"),
            std::string::npos)
      << text;
  EXPECT_EQ(count(text, "syl.wait_tile("), 0u) << text;
}

TEST(WaitPlacement, AConsumeAfterALoopWaitsWhereItIs) {
  const auto text =
      output_of(one_tile_kernel("    acc = 0.0\n"
                                "    for k in range(K):\n"
                                "        acc += k\n"
                                "    # @sy.consume(x_ptr, m=pid_m)\n"
                                "    acc += tl.load(x_ptr + pid_m)\n"));
  EXPECT_EQ(count(text, "syl.wait_for_tile"), 0u) << text;
  EXPECT_NE(text.find("        acc += k\n    # @sy.consume(x_ptr, m=pid_m)\n    syl.wait_tile("), std::string::npos)
      << text;
}

TEST(WaitPlacement, AConsumeAfterAHelperCallWaitsWhereItIs) {
  // The helper runs a loop the transformer would move the wait above: its overlap is kept.
  const auto text =
      output_of(one_tile_kernel("    acc = _k_loop(y_ptr, pid_m, K)\n"
                                "    # @sy.consume(x_ptr, m=pid_m)\n"
                                "    acc += tl.load(x_ptr + pid_m)\n"));
  EXPECT_EQ(count(text, "syl.wait_for_tile"), 0u) << text;
  EXPECT_EQ(count(text, "    syl.wait_tile("), 1u) << text;
}

TEST(WaitPlacement, AConsumeWithoutCoordinatesWaitsWhereItIs) {
  // Without m= or n= nothing says the tile's reads are addressed from its coordinates.
  const auto text =
      output_of(one_tile_kernel("    # @sy.consume(x_ptr)\n"
                                "    acc = tl.load(x_ptr + pid_m)\n"));
  EXPECT_EQ(count(text, "syl.wait_for_tile"), 0u) << text;
  EXPECT_EQ(count(text, "    syl.wait_tile("), 1u) << text;
}

TEST(WaitPlacement, AConsumeInsideABranchWaitsWhereItIs) {
  const auto text =
      output_of(one_tile_kernel("    acc = 0.0\n"
                                "    if K > 0:\n"
                                "        # @sy.consume(x_ptr, m=pid_m)\n"
                                "        acc = tl.load(x_ptr + pid_m)\n"));
  EXPECT_EQ(count(text, "syl.wait_for_tile"), 0u) << text;
  EXPECT_EQ(count(text, "        syl.wait_tile("), 1u) << text;
}

TEST(WaitPlacement, OneEarlyConsumeCoversTheTilesLaterOnes) {
  // One wait covers every chunk of the tile (all consumed tensors): the later consume gets none.
  const auto text = output_of(
      "def k(x_ptr, z_ptr, y_ptr, K):\n"
      "    # @sy.tile(index=tl.program_id(0), m=pid_m)\n"
      "    pid_m = tl.program_id(0)\n"
      "    # @sy.end\n"
      "    # @sy.consume(x_ptr, m=pid_m)\n"
      "    acc = _k_loop(x_ptr, pid_m, K)\n"
      "    # @sy.consume(z_ptr, m=pid_m)\n"
      "    acc += tl.load(z_ptr + pid_m)\n"
      "    tl.store(y_ptr + pid_m, acc)\n");
  EXPECT_EQ(count(text, "syl.wait_for_tile"), 1u) << text;
  EXPECT_EQ(count(text, "syl.wait_tile("), 0u) << text;
}

TEST(WaitPlacement, APersistentLoopWaitsAtTheLookupInsideTheLoop) {
  const auto text = output_of(
      "def k(x_ptr, y_ptr, K, n_tiles, n_progs):\n"
      "    for t in tl.range(tl.program_id(0), n_tiles, n_progs, flatten=True):\n"
      "        # @sy.tile(index=t, m=pid_m)\n"
      "        pid_m = t\n"
      "        # @sy.end\n"
      "        # @sy.consume(x_ptr, m=pid_m)\n"
      "        acc = _k_loop(x_ptr, pid_m, K)\n"
      "        # @sy.produce(y_ptr, m=pid_m)\n"
      "        tl.store(y_ptr + pid_m, acc)\n");
  // Before the loop: the first iteration's order entry, the empty slot cache, the call's epoch and
  // the first tile's wait row; in it, this tile's wait row (loaded one iteration ahead), its notify
  // row (loaded from the tile itself), the next iteration's entry, the wait on the row, the next
  // tile's wait row, then the coordinates.
  EXPECT_NE(text.find("    sy_tile_next = syl.tile_at_or(sy_tile_order, tl.program_id(0), n_tiles, n_progs)  # "
                      "[syncopate]\n    sy_seen = syl.no_slot_seen()  # [syncopate]\n"
                      "    sy_epoch_now = syl.epoch_of(sy_epoch)  # [syncopate]\n    " +
                      std::string(kRowsNext) + "    for t in tl.range("),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("        sy_tile = sy_tile_next  # [syncopate]\n"
                      "        sy_wait_begin, sy_wait_end = sy_wait_begin_next, sy_wait_end_next  # [syncopate]\n"
                      "        " +
                      std::string(kNotifyRow) +
                      "        sy_tile_next = syl.tile_at_or(sy_tile_order, t + (n_progs), n_tiles, n_progs)  # "
                      "[syncopate]\n        " +
                      kWaitForTileRow + "        " + kRowsNext + "        pid_m = syl.tile_row(sy_tile, sy_tiles_n)"),
            std::string::npos)
      << text;
  EXPECT_EQ(count(text, "syl.wait_for_tile("), 0u) << text;
  EXPECT_EQ(count(text, "syl.wait_tile("), 0u) << text;
  // No notify row is carried from the previous iteration (placement.cpp: Triton's loop fusion
  // gives the epilogue the next tile's): the notify reads the row loaded from its own tile.
  EXPECT_EQ(count(text, "_next"),
            count(text, "sy_tile_next") + count(text, "sy_wait_begin_next") + count(text, "sy_wait_end_next"))
      << text;
  EXPECT_EQ(count(text, "syl.notify_row("), 1u) << text;
  EXPECT_EQ(count(text, "syl.notify_tile("), 0u) << text;
  EXPECT_EQ(
      count(text, "        syl.notify_tile_row(sy_signals, sy_notify_slots, sy_tile, sy_notify_begin, sy_notify_end)"),
      1u)
      << text;
}

TEST(WaitPlacement, AWhileLoopGetsTheSlotCacheButNoPrefetch) {
  // The next iteration's index is not known from a while loop's header.
  const auto text = output_of(
      "def k(x_ptr, y_ptr, K, n_tiles, n_progs):\n"
      "    t = tl.program_id(0)\n"
      "    while t < n_tiles:\n"
      "        # @sy.tile(index=t, m=pid_m)\n"
      "        pid_m = t\n"
      "        # @sy.end\n"
      "        # @sy.consume(x_ptr, m=pid_m)\n"
      "        acc = _k_loop(x_ptr, pid_m, K)\n"
      "        tl.store(y_ptr + pid_m, acc)\n"
      "        t += n_progs\n");
  EXPECT_NE(text.find("    sy_seen = syl.no_slot_seen()  # [syncopate]\n    while t < n_tiles:"), std::string::npos)
      << text;
  EXPECT_NE(
      text.find("        sy_tile = syl.tile_at(sy_tile_order, t)  # [syncopate]\n        " + std::string(kWaitForTile)),
      std::string::npos)
      << text;
  EXPECT_EQ(count(text, "sy_tile_next"), 0u) << text;
}

// --- the notify row (place_notify_rows): loaded at the lookup when the tile block dominates ----

TEST(NotifyRowPlacement, APersistentLoopLoadsTheRowAtTheLookupAndNotifiesFromIt) {
  const auto text = output_of(
      "def k(c_ptr, M, N, n_tiles, n_progs, BM: tl.constexpr, BN: tl.constexpr):\n"
      "    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])\n"
      "    for t in tl.range(tl.program_id(0), n_tiles, n_progs, flatten=True):\n"
      "        # @sy.tile(index=t, m=pm, n=pn)\n"
      "        pm = t // tl.cdiv(N, BN)\n"
      "        pn = t % tl.cdiv(N, BN)\n"
      "        # @sy.end\n"
      "        if pm >= 0:\n"
      "            # @sy.produce(c_ptr, m=pm, n=pn)\n"
      "            c_desc.store([pm * BM, pn * BN], tl.zeros((BM, BN), dtype=tl.float16))\n");
  // No consume: no wait (and no prefetch), the row right after the lookup, then the coordinates;
  // the store wait and the notify (nested in an `if` the tile block runs before) read the row.
  EXPECT_NE(text.find("        sy_tile = syl.tile_at(sy_tile_order, t)  # [syncopate]\n        " +
                      std::string(kNotifyRow) + "        pm, pn = syl.tile_coords(sy_tile, sy_tiles_n)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("            syl.tma_store_wait_row(sy_notify_begin, sy_notify_end)  # [syncopate]\n"
                      "            syl.notify_tile_row(sy_signals, sy_notify_slots, sy_tile, sy_notify_begin, "
                      "sy_notify_end)  # [syncopate]\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(count(text, "syl.notify_tile("), 0u) << text;
  EXPECT_EQ(count(text, "sy_notify_offsets, sy_tile)"), 1u) << text;  // one row load per tile
}

TEST(NotifyRowPlacement, OneRowServesEveryNotifyOfTheTile) {
  const auto text = output_of(
      "def k(y_ptr, z_ptr):\n"
      "    # @sy.tile(index=tl.program_id(0), m=pid_m)\n"
      "    pid_m = tl.program_id(0)\n"
      "    # @sy.end\n"
      "    # @sy.produce(y_ptr, m=pid_m)\n"
      "    tl.store(y_ptr + pid_m, 1.0)\n"
      "    # @sy.produce(z_ptr, m=pid_m)\n"
      "    tl.store(z_ptr + pid_m, 1.0)\n");
  EXPECT_EQ(count(text, kNotifyRow), 1u) << text;
  EXPECT_EQ(count(text, "syl.notify_tile_row("), 2u) << text;
  EXPECT_LT(text.find(kNotifyRow), text.find("pid_m = syl.tile_row(")) << text;
}

}  // namespace
}  // namespace syncopate::transform

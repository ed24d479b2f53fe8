// `@sy.consume_block`, the wait inside a loop over blocks (docs/ANNOTATIONS.md, "Waiting per
// block"): what the rewrite inserts (the wait before the marked statement, the arrival-order
// renumbering at the top of the loop, the block parameters), and every wrong placement refused
// with file:line:col, the rule and the fix. Kernels written for these tests, in the shape of an
// attention kernel's K/V loop.
#include <gtest/gtest.h>

#include <string>

#include "syncopate/common/error.hpp"
#include "syncopate/transform/transform.hpp"

namespace syncopate::transform {
namespace {

// Lines 1-5; a test's kernel starts with its `def` on line 6.
constexpr const char* kHeader =
    "import triton\n"
    "import triton.language as tl\n"
    "\n"
    "\n"
    "@triton.jit\n";

std::string error_of(const std::string& kernel_source) {
  try {
    transform_kernel(std::string(kHeader) + kernel_source, "k.py", "k");
  } catch (const TransformError& e) {
    return e.what();
  }
  return "no error";
}

TransformResult result_of(const std::string& kernel_source) {
  return transform_kernel(std::string(kHeader) + kernel_source, "k.py", "k");
}

bool has(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

std::size_t count_of(const std::string& hay, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) ++n;
  return n;
}

// The loop body of a one-head attention-like kernel; `annotation` goes above the load of K.
std::string kv_kernel(const std::string& annotation, const std::string& loop = "for start_n in range(0, N, BN):") {
  return "def k(q_ptr, k_ptr, o_ptr, N, BM: tl.constexpr, BN: tl.constexpr):\n"  // 6
         "    # @sy.tile(index=tl.program_id(0), m=pid_m, n=pid_h)\n"            // 7
         "    pid_m = tl.program_id(0) // 4\n"                                   // 8
         "    pid_h = tl.program_id(0) % 4\n"                                    // 9
         "    # @sy.end\n"                                                       // 10
         "    rows = pid_m * BM + tl.arange(0, BM)\n"                            // 11
         "    acc = tl.zeros((BM, BN), dtype=tl.float32)\n"                      // 12
         "    " +
         loop +
         "\n"                                           // 13
         "        cols = start_n + tl.arange(0, BN)\n"  // 14
         "        " +
         annotation +
         "\n"                                                // 15
         "        kb = tl.load(k_ptr + pid_h * N + cols)\n"  // 16
         "        acc += kb[None, :]\n"                      // 17
         "    tl.store(o_ptr + rows[:, None] * BN + tl.arange(0, BN)[None, :], acc)\n";
}

// --- what the rewrite inserts -----------------------------------------------------------------

TEST(BlockWait, WaitGoesBeforeTheMarkedStatementInsideTheLoop) {
  const auto r = result_of(kv_kernel("# @sy.consume_block(k_ptr, block=start_n // BN, n=pid_h)"));
  EXPECT_TRUE(has(r.source,
                  "        cols = start_n + tl.arange(0, BN)\n"
                  "        # @sy.consume_block(k_ptr, block=start_n // BN, n=pid_h)\n"
                  "        syl.wait_block(sy_signals, sy_block_wait_offsets, sy_block_wait_slots, sy_slot_writers, "
                  "pid_h, start_n // BN, sy_blocks, sy_tile, sy_epoch, sy_wait_bound_ns, sy_rank, sy_error)  "
                  "# [syncopate]\n"
                  "        kb = tl.load(k_ptr + pid_h * N + cols)\n"))
      << r.source;
  EXPECT_FALSE(has(r.source, "block_at")) << "source order: the loop is not renumbered";
  EXPECT_FALSE(has(r.source, "block_row")) << r.source;
  EXPECT_FALSE(has(r.source, "syl.wait_tile")) << "no whole-tile wait was asked for";
  ASSERT_EQ(r.accesses.size(), 1u);
  EXPECT_TRUE(r.accesses[0].per_block);
  EXPECT_FALSE(r.accesses[0].arrival_order);
  EXPECT_EQ(r.accesses[0].access.tensor, "k");
  EXPECT_EQ(r.accesses[0].access.role, lower::AccessRole::consume);
}

TEST(BlockWait, KernelsThatWaitPerBlockGetTheBlockParameters) {
  const auto r = result_of(kv_kernel("# @sy.consume_block(k_ptr, block=start_n // BN, n=pid_h, dim=1)"));
  ASSERT_EQ(r.added_params.size(), added_params().size() + block_params().size());
  EXPECT_EQ(r.added_params.back().name, "sy_block_waits");
  EXPECT_EQ(r.added_params.back().type, "constexpr");
  // The constexpr carries its annotation in the signature (Triton compiles one variant per value).
  EXPECT_TRUE(has(r.source,
                  "sy_error, sy_blocks, sy_block_wait_offsets, sy_block_wait_slots, sy_block_first, "
                  "sy_block_waits: syl.constexpr,"))
      << r.source;
  EXPECT_TRUE(has(r.source, "\"per_block\": True")) << r.source;
  EXPECT_EQ(r.accesses[0].access.m_dim, 1);
  EXPECT_TRUE(has(describe_json(r), "\"per_block\": true"));
}

TEST(BlockWait, KernelsWithoutOneKeepTheirParameters) {
  const auto r = transform_kernel(std::string(kHeader) +
                                      "def k(x_ptr, N):\n"
                                      "    # @sy.tile(index=tl.program_id(0), m=pid_m)\n"
                                      "    pid_m = tl.program_id(0)\n"
                                      "    # @sy.end\n"
                                      "    # @sy.consume(x_ptr, m=pid_m)\n"
                                      "    x = tl.load(x_ptr + pid_m)\n",
                                  "k.py", "k");
  EXPECT_EQ(r.added_params.size(), added_params().size());
  EXPECT_FALSE(has(r.source, "sy_blocks"));
  EXPECT_FALSE(has(r.source, "per_block"));
}

TEST(BlockWait, ArrivalOrderRenumbersTheLoopVariableThenWaitsFirstInTheBody) {
  // The wait returns the loop variable, so every address of the iteration depends on it (a
  // pipelined prefetch of the block cannot go before its wait); nothing is inserted at the site.
  // Both under the constexpr sy_block_waits, so tables without a slot compile the loop as written.
  const auto r = result_of(kv_kernel("# @sy.consume_block(k_ptr, block=start_n // BN, n=pid_h, order=arrival)"));
  EXPECT_TRUE(has(r.source,
                  "    if sy_block_waits:  # [syncopate]\n"
                  "        sy_block_top, sy_block_row_waits, sy_block_seen = syl.block_row(sy_block_first, "
                  "sy_block_wait_offsets, pid_h, sy_blocks, 0, N, BN)  # [syncopate]\n"
                  "    for start_n in range(0, N, BN):\n"
                  "        if sy_block_waits:  # [syncopate]\n"
                  "            start_n = syl.block_at(start_n, 0, N, BN, sy_block_top)  # [syncopate]\n"
                  "            start_n, sy_block_seen = syl.wait_for_block(sy_signals, sy_block_wait_offsets, "
                  "sy_block_wait_slots, sy_slot_writers, pid_h, start_n // BN, sy_blocks, sy_tile, sy_epoch, "
                  "sy_wait_bound_ns, sy_rank, sy_error, start_n, sy_block_row_waits, sy_block_seen)  # [syncopate]\n"
                  "        cols = start_n + tl.arange(0, BN)\n"
                  "        # @sy.consume_block(k_ptr, block=start_n // BN, n=pid_h, order=arrival)\n"
                  "        kb = tl.load(k_ptr + pid_h * N + cols)\n"))
      << r.source;
  EXPECT_FALSE(has(r.source, "syl.wait_block(")) << r.source;
  EXPECT_TRUE(r.accesses[0].arrival_order);
  EXPECT_TRUE(has(r.source, "\"order\": \"arrival\"")) << r.source;
}

TEST(BlockWait, WithoutNTheTableHasOneRow) {
  const auto r = result_of(kv_kernel("# @sy.consume_block(k_ptr, block=start_n // BN, order=\"arrival\")",
                                     "for start_n in tl.range(0, N, BN):"));
  EXPECT_TRUE(has(r.source, "syl.block_row(sy_block_first, sy_block_wait_offsets, 0, sy_blocks, 0, N, BN)"))
      << r.source;
  EXPECT_TRUE(has(r.source, "sy_slot_writers, 0, start_n // BN, sy_blocks,")) << r.source;
}

TEST(BlockWait, TwoTensorsOfOneLoopRenumberItOnce) {
  const std::string src =
      "def k(k_ptr, v_ptr, o_ptr, N, BN: tl.constexpr):\n"
      "    # @sy.tile(index=tl.program_id(0), m=pid_m)\n"
      "    pid_m = tl.program_id(0)\n"
      "    # @sy.end\n"
      "    acc = tl.zeros((BN,), dtype=tl.float32)\n"
      "    for j in range(0, N, BN):\n"
      "        # @sy.consume_block(k_ptr, block=j // BN, order=arrival)\n"
      "        kb = tl.load(k_ptr + j + tl.arange(0, BN))\n"
      "        # @sy.consume_block(v_ptr, block=j // BN, order=arrival)\n"
      "        vb = tl.load(v_ptr + j + tl.arange(0, BN))\n"
      "        acc += kb * vb\n"
      "    tl.store(o_ptr + pid_m * BN + tl.arange(0, BN), acc)\n";
  const auto r = result_of(src);
  EXPECT_EQ(count_of(r.source, "syl.block_row("), 1u) << r.source;
  EXPECT_EQ(count_of(r.source, "syl.block_at("), 1u) << r.source;
  EXPECT_EQ(r.accesses.size(), 2u);
  // One wait per iteration too: both consume_blocks name block j // BN of the one table row.
  const auto wait = r.source.find("j, sy_block_seen = syl.wait_for_block(");
  ASSERT_NE(wait, std::string::npos) << r.source;
  EXPECT_EQ(count_of(r.source, "syl.wait_for_block("), 1u) << r.source;
  EXPECT_FALSE(has(r.source, "syl.wait_block(")) << r.source;
  EXPECT_LT(r.source.find("j = syl.block_at"), wait) << r.source;
  EXPECT_LT(r.source.find("syl.block_row("), r.source.find("for j in range")) << "loaded before the loop";
}

// Source order: K and V of one block, waited for before each read.
std::string two_tensor_kernel(const std::string& between, const std::string& v_annotation = "block=j // BN") {
  return "def k(k_ptr, v_ptr, o_ptr, N, BN: tl.constexpr):\n"
         "    # @sy.tile(index=tl.program_id(0), m=pid_m)\n"
         "    pid_m = tl.program_id(0)\n"
         "    # @sy.end\n"
         "    acc = tl.zeros((BN,), dtype=tl.float32)\n"
         "    for j in range(0, N, BN):\n"
         "        # @sy.consume_block(k_ptr, block=j // BN)\n"
         "        kb = tl.load(k_ptr + j + tl.arange(0, BN))\n" +
         between + "        # @sy.consume_block(v_ptr, " + v_annotation +
         ")\n"
         "        vb = tl.load(v_ptr + j + tl.arange(0, BN))\n"
         "        acc += kb * vb\n"
         "    tl.store(o_ptr + pid_m * BN + tl.arange(0, BN), acc)\n";
}

TEST(BlockWait, SourceOrderDropsASecondIdenticalWaitOfTheIteration) {
  const auto r = result_of(two_tensor_kernel(""));
  EXPECT_EQ(count_of(r.source, "syl.wait_block("), 1u) << r.source;
  EXPECT_LT(r.source.find("syl.wait_block("), r.source.find("kb = tl.load")) << r.source;
  EXPECT_EQ(r.accesses.size(), 2u) << "both tensors are still described as consumed per block";
}

TEST(BlockWait, SourceOrderKeepsASecondWaitOnAnotherBlock) {
  const auto r = result_of(two_tensor_kernel("", "block=j // BN + 1"));
  EXPECT_EQ(count_of(r.source, "syl.wait_block("), 2u) << r.source;
}

TEST(BlockWait, SourceOrderKeepsASecondWaitWhenItsBlockChangesBetween) {
  // `j` reassigned between the two: the second names another block despite the same text.
  const auto r = result_of(two_tensor_kernel("        j = j + BN\n"));
  EXPECT_EQ(count_of(r.source, "syl.wait_block("), 2u) << r.source;
}

TEST(BlockWait, SourceOrderKeepsASecondWaitWhenTheFirstMayNotHaveRun) {
  // The first wait under an `if`: the second is the only one on the other path.
  std::string src = two_tensor_kernel("");
  src.replace(src.find("        # @sy.consume_block(k_ptr"), 0, "        if N > BN:\n    ");
  src.replace(src.find("        kb = tl.load"), 0, "    ");
  src.replace(src.find("        # @sy.consume_block(v_ptr"), 0,
              "        else:\n            kb = tl.zeros((BN,), dtype=tl.float32)\n");
  const auto r = result_of(src);
  EXPECT_EQ(count_of(r.source, "syl.wait_block("), 2u) << r.source;
}

// --- refused placements -----------------------------------------------------------------------

TEST(BlockWait, OutsideAnyLoopIsRefused) {
  const auto msg = error_of(
      "def k(k_ptr, o_ptr, N, BN: tl.constexpr):\n"        // 6
      "    # @sy.tile(index=tl.program_id(0), m=pid_m)\n"  // 7
      "    pid_m = tl.program_id(0)\n"                     // 8
      "    # @sy.end\n"                                    // 9
      "    # @sy.consume_block(k_ptr, block=pid_m)\n"      // 10
      "    kb = tl.load(k_ptr + tl.arange(0, BN))\n"
      "    tl.store(o_ptr + tl.arange(0, BN), kb)\n");
  EXPECT_EQ(msg,
            "k.py:10:5: @sy.consume_block(k_ptr, block=pid_m): it marks a statement outside any loop: a "
            "per-block wait belongs inside the `for` loop over the tensor's blocks (after the tile block), "
            "right above the first read of the block; a wait for the whole tile before the loop is "
            "'@sy.consume'");
}

TEST(BlockWait, InTheTileLoopIsRefused) {
  const auto msg = error_of(
      "def k(k_ptr, o_ptr, T, BN: tl.constexpr):\n"    // 6
      "    for t in range(tl.program_id(0), T, 8):\n"  // 7
      "        # @sy.tile(index=t, m=pid_m)\n"         // 8
      "        pid_m = t\n"                            // 9
      "        # @sy.end\n"                            // 10
      "        # @sy.consume_block(k_ptr, block=t)\n"  // 11
      "        kb = tl.load(k_ptr + t * BN + tl.arange(0, BN))\n"
      "        tl.store(o_ptr + pid_m * BN + tl.arange(0, BN), kb)\n");
  EXPECT_TRUE(has(msg,
                  "k.py:11:9: @sy.consume_block(k_ptr, block=t): it marks a statement in the tile loop at "
                  "line 7 ('for t in range(tl.program_id(0), T, 8)'), not in a loop over blocks"))
      << msg;
}

TEST(BlockWait, BlockThatDoesNotFollowTheLoopIsRefused) {
  const auto msg = error_of(kv_kernel("# @sy.consume_block(k_ptr, block=pid_m, n=pid_h)"));
  EXPECT_EQ(msg,
            "k.py:15:42: @sy.consume_block(k_ptr, block=pid_m, n=pid_h): block=pid_m does not read the "
            "variable of the loop at line 13 ('for start_n in range(0, N, BN)'): every iteration would wait "
            "on the same block while reading another; number the block from the loop variable (e.g. "
            "block=start_n // BLOCK_N)");
}

TEST(BlockWait, ReadOfTheBlockBeforeTheWaitIsRefused) {
  const std::string src =
      "def k(k_ptr, o_ptr, N, BN: tl.constexpr):\n"           // 6
      "    # @sy.tile(index=tl.program_id(0), m=pid_m)\n"     // 7
      "    pid_m = tl.program_id(0)\n"                        // 8
      "    # @sy.end\n"                                       // 9
      "    acc = tl.zeros((BN,), dtype=tl.float32)\n"         // 10
      "    for j in range(0, N, BN):\n"                       // 11
      "        kb = tl.load(k_ptr + j + tl.arange(0, BN))\n"  // 12
      "        # @sy.consume_block(k_ptr, block=j // BN)\n"   // 13
      "        acc += kb\n"                                   // 14
      "    tl.store(o_ptr + pid_m * BN + tl.arange(0, BN), acc)\n";
  const auto msg = error_of(src);
  EXPECT_TRUE(has(msg,
                  "k.py:12:17: @sy.consume_block(k_ptr, block=j // BN): 'k_ptr' is read here (load) before "
                  "the wait that this annotation inserts at line 14"))
      << msg;
  EXPECT_TRUE(has(msg, "move the annotation up to line 12, the first read of the block in the loop")) << msg;
}

TEST(BlockWait, ReadAfterTheLoopIsRefused) {
  const std::string src =
      "def k(k_ptr, o_ptr, N, BN: tl.constexpr):\n"             // 6
      "    # @sy.tile(index=tl.program_id(0), m=pid_m)\n"       // 7
      "    pid_m = tl.program_id(0)\n"                          // 8
      "    # @sy.end\n"                                         // 9
      "    acc = tl.zeros((BN,), dtype=tl.float32)\n"           // 10
      "    for j in range(0, N, BN):\n"                         // 11
      "        # @sy.consume_block(k_ptr, block=j // BN)\n"     // 12
      "        acc += tl.load(k_ptr + j + tl.arange(0, BN))\n"  // 13
      "    last = tl.load(k_ptr + N - 1)\n"                     // 14
      "    tl.store(o_ptr + pid_m * BN + tl.arange(0, BN), acc + last)\n";
  const auto msg = error_of(src);
  EXPECT_TRUE(has(msg,
                  "k.py:14:15: @sy.consume_block(k_ptr, block=j // BN): 'k_ptr' is read here (load) before "
                  "the wait"))
      << msg;
}

TEST(BlockWait, ArrivalOrderNeedsARangeLoop) {
  const auto msg = error_of(kv_kernel("# @sy.consume_block(k_ptr, block=start_n // BN, n=pid_h, order=arrival)",
                                      "for start_n in tl.static_range(0, 64, BN):"));
  EXPECT_TRUE(has(msg,
                  "k.py:15:9: @sy.consume_block(k_ptr, block=start_n // BN, n=pid_h, order=arrival): "
                  "order=arrival needs the loop at line 13 ('for start_n in tl.static_range(0, 64, BN)') to "
                  "be 'for <v> in range(<start>, <stop>[, <step>])' or tl.range(...)"))
      << msg;
  EXPECT_TRUE(has(msg, "a static_range is unrolled at compile time")) << msg;
}

TEST(BlockWait, ArrivalOrderNeedsTheBlockToBeTheLoopVariableOverTheStep) {
  const auto msg = error_of(kv_kernel("# @sy.consume_block(k_ptr, block=start_n // 32, n=pid_h, order=arrival)"));
  EXPECT_EQ(msg,
            "k.py:15:42: @sy.consume_block(k_ptr, block=start_n // 32, n=pid_h, order=arrival): with "
            "order=arrival, block= must be 'start_n // BN' (the loop variable over the loop's step), got "
            "'start_n // 32': blocks are then numbered as the table of where each row's arrival starts numbers "
            "them");
}

TEST(BlockWait, ArrivalOrderRefusesAnAdvancedPointer) {
  // Triton's tutorial advances block pointers; visited out of order they would point at the
  // iteration's place, not at the block.
  const std::string src =
      "def k(k_ptr, o_ptr, N, BN: tl.constexpr):\n"                         // 6
      "    # @sy.tile(index=tl.program_id(0), m=pid_m)\n"                   // 7
      "    pid_m = tl.program_id(0)\n"                                      // 8
      "    # @sy.end\n"                                                     // 9
      "    acc = tl.zeros((BN,), dtype=tl.float32)\n"                       // 10
      "    ks = k_ptr + tl.arange(0, BN)\n"                                 // 11
      "    for j in range(0, N, BN):\n"                                     // 12
      "        # @sy.consume_block(k_ptr, block=j // BN, order=arrival)\n"  // 13
      "        acc += tl.load(ks)\n"                                        // 14
      "        ks += BN\n"                                                  // 15
      "    tl.store(o_ptr + pid_m * BN + tl.arange(0, BN), acc)\n";
  EXPECT_EQ(error_of(src),
            "k.py:15:9: @sy.consume_block(k_ptr, block=j // BN, order=arrival): 'ks' (made from 'k_ptr') is "
            "advanced here each iteration, so with order=arrival it would point at the block of the "
            "iteration's place in the loop, not at the block visited; compute the block's address from the "
            "loop variable instead (e.g. k_ptr + j * <stride>)");
  // Source order keeps the loop as written, so the advanced pointer is right there.
  std::string source_order = src;
  source_order.replace(source_order.find(", order=arrival"), 15, "");
  EXPECT_EQ(error_of(source_order), "no error");
}

TEST(BlockWait, ArrivalOrderRefusesBoundsAssignedInTheLoop) {
  const auto msg =
      error_of(kv_kernel("# @sy.consume_block(k_ptr, block=start_n // BN, n=pid_h, order=arrival)\n"
                         "        N = N - 1"));
  EXPECT_TRUE(has(msg,
                  "k.py:16:9: @sy.consume_block(k_ptr, block=start_n // BN, n=pid_h, order=arrival): 'N' is "
                  "assigned inside the loop at line 13"))
      << msg;
}

TEST(BlockWait, ArrivalOrderRefusesTheRowAssignedInTheLoop) {
  // n= is read at the top of the body, where the iteration's wait goes.
  const auto msg = error_of(kv_kernel("# @sy.consume_block(k_ptr, block=start_n // BN, n=pid_h, order=arrival)",
                                      "for start_n in range(0, N, BN):"));
  EXPECT_EQ(msg, "no error");
  std::string src = kv_kernel("# @sy.consume_block(k_ptr, block=start_n // BN, n=pid_h, order=arrival)");
  src.replace(src.find("        acc += kb[None, :]\n"), 0, "        pid_h = pid_h + 0\n");
  const auto refused = error_of(src);
  EXPECT_TRUE(has(refused, "k.py:17:9: ")) << refused;
  EXPECT_TRUE(has(refused, "'pid_h' is")) << refused;
}

TEST(BlockWait, ConsumeBlocksOfOneLoopMustAgree) {
  const std::string src =
      "def k(k_ptr, v_ptr, o_ptr, N, BN: tl.constexpr):\n"                  // 6
      "    # @sy.tile(index=tl.program_id(0), m=pid_m)\n"                   // 7
      "    pid_m = tl.program_id(0)\n"                                      // 8
      "    # @sy.end\n"                                                     // 9
      "    acc = tl.zeros((BN,), dtype=tl.float32)\n"                       // 10
      "    for j in range(0, N, BN):\n"                                     // 11
      "        # @sy.consume_block(k_ptr, block=j // BN, order=arrival)\n"  // 12
      "        kb = tl.load(k_ptr + j + tl.arange(0, BN))\n"                // 13
      "        # @sy.consume_block(v_ptr, block=j // BN)\n"                 // 14
      "        acc += kb * tl.load(v_ptr + j + tl.arange(0, BN))\n"
      "    tl.store(o_ptr + pid_m * BN + tl.arange(0, BN), acc)\n";
  EXPECT_TRUE(has(error_of(src),
                  "k.py:14:9: @sy.consume_block(v_ptr, block=j // BN): the '@sy.consume_block' at "
                  "line 12 in the same loop asks for order=arrival;"))
      << error_of(src);
}

TEST(BlockWait, ArgumentShapesAreChecked) {
  EXPECT_TRUE(has(error_of(kv_kernel("# @sy.consume_block(k_ptr, n=pid_h)")),
                  "k.py:15:9: @sy.consume_block(k_ptr, n=pid_h): '@sy.consume_block' needs 'block='"));
  EXPECT_TRUE(has(error_of(kv_kernel("# @sy.consume_block(k_ptr, block=start_n // BN, order=sorted)")),
                  "'order=' must be arrival or source, got 'sorted'"));
  EXPECT_TRUE(has(error_of(kv_kernel("# @sy.consume_block(k_ptr, block=start_n // BN, m=pid_m)")),
                  "'@sy.consume_block' has no argument 'm'"));
  EXPECT_TRUE(has(error_of(kv_kernel("# @sy.consume_block(k_ptr, block=start_n // BN, n=pid_m)")),
                  "n=pid_m is not the tile's column coordinate n=pid_h (line 7)"));
  EXPECT_TRUE(has(error_of(kv_kernel("# @sy.consume_block(k_ptr, block=start_n // BLK, n=pid_h)")),
                  "k.py:15:42: @sy.consume_block(k_ptr, block=start_n // BLK, n=pid_h): block= uses 'BLK', which "
                  "is neither a parameter of kernel 'k'"));
  EXPECT_TRUE(has(error_of(kv_kernel("# @sy.consume_block(kk_ptr, block=start_n // BN)")),
                  "'kk_ptr' is not a parameter of kernel 'k'"));
}

}  // namespace
}  // namespace syncopate::transform

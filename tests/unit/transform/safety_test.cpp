// The annotations that would make a transformed kernel compute wrong results are refused, each
// with file:line:col, the rule and the fix (docs/ANNOTATIONS.md, "Mistakes the transformer
// refuses"); the correct forms of the same kernels are accepted. Kernels written for these tests,
// one per mistake class: (a) reads before the wait, (b) coordinates or positions recomputed after
// the tile block, (c) an index that does not follow the tile loop, (d) a tile block that advances
// a loop-carried counter, (e) a grouped GEMM, (f) stores and notifies in the wrong order.
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

std::string output_of(const std::string& kernel_source) {
  return transform_kernel(std::string(kHeader) + kernel_source, "k.py", "k").source;
}

bool has(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

// --- (a) a read of the consumed tensor before its wait --------------------------------------------

TEST(Safety, ConsumeBelowTheLoopThatReadsTheTensor) {
  const auto msg = error_of(
      "def k(x_ptr, y_ptr, N, BM: tl.constexpr, BN: tl.constexpr):\n"  // 6
      "    # @sy.tile(index=tl.program_id(0), m=pid_m)\n"              // 7
      "    pid_m = tl.program_id(0)\n"                                 // 8
      "    # @sy.end\n"                                                // 9
      "    rows = pid_m * BM + tl.arange(0, BM)\n"                     // 10
      "    xs = x_ptr + rows[:, None] * N\n"                           // 11
      "    acc = tl.zeros((BM, BN), dtype=tl.float32)\n"               // 12
      "    for j in range(0, N, BN):\n"                                // 13
      "        acc += tl.load(xs + j + tl.arange(0, BN)[None, :])\n"   // 14
      "    # @sy.consume(x_ptr, m=pid_m)\n"                            // 15
      "    tl.store(y_ptr + rows[:, None] * N + tl.arange(0, BN)[None, :], acc * 2)\n");
  EXPECT_EQ(msg,
            "k.py:14:19: @sy.consume(x_ptr, m=pid_m): 'x_ptr' is read here (load through 'xs') before the "
            "wait that this annotation inserts at line 16: the tile could read a chunk that has not landed "
            "yet (right only when every chunk is in place before the kernel starts); move the annotation up "
            "to line 13, the first statement of the tile that reads 'x_ptr' (e.g. above the K loop, not "
            "below it)");
}

TEST(Safety, ConsumedDescriptorLoadedBeforeTheWait) {
  const auto msg = error_of(
      "def k(x_ptr, y_ptr, M, K, BM: tl.constexpr, BK: tl.constexpr):\n"
      "    x_desc = tl.make_tensor_descriptor(x_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])\n"
      "    # @sy.tile(index=tl.program_id(0), m=pid_m)\n"  // 8
      "    pid_m = tl.program_id(0)\n"
      "    # @sy.end\n"
      "    first = x_desc.load([pid_m * BM, 0])\n"  // 11
      "    # @sy.consume(x_ptr, m=pid_m)\n"
      "    rest = x_desc.load([pid_m * BM, BK])\n"
      "    tl.store(y_ptr + pid_m, tl.sum(first + rest))\n");
  EXPECT_TRUE(has(msg,
                  "k.py:11:20: @sy.consume(x_ptr, m=pid_m): 'x_ptr' is read here (load through "
                  "'x_desc') before the wait that this annotation inserts at line 13"))
      << msg;
  EXPECT_TRUE(has(msg, "move the annotation up to line 11")) << msg;
}

TEST(Safety, PersistentLoopReadsTheTensorBeforeItsTileBlock) {
  // A prefetch at the top of the loop body runs before this iteration's wait.
  const auto msg = error_of(
      "def k(x_ptr, y_ptr, T, P: tl.constexpr, BM: tl.constexpr):\n"
      "    for t in tl.range(tl.program_id(0), T, P):\n"
      "        head = tl.load(x_ptr + t * BM)\n"  // 8
      "        # @sy.tile(index=t, m=pid_m)\n"
      "        pid_m = t\n"
      "        # @sy.end\n"
      "        # @sy.consume(x_ptr, m=pid_m)\n"
      "        x = tl.load(x_ptr + pid_m * BM + tl.arange(0, BM))\n"
      "        tl.store(y_ptr + pid_m * BM + tl.arange(0, BM), x + head)\n");
  EXPECT_TRUE(has(msg,
                  "k.py:8:19: @sy.consume(x_ptr, m=pid_m): 'x_ptr' is read here (load) before the "
                  "wait that this annotation inserts at line 13"))
      << msg;
  EXPECT_TRUE(has(msg, "read 'x_ptr' only after the annotation")) << msg;
}

TEST(Safety, ReadAfterTheBranchThatHoldsTheWait) {
  const auto msg = error_of(
      "def k(x_ptr, y_ptr, N, BM: tl.constexpr):\n"
      "    # @sy.tile(index=tl.program_id(0), m=pid_m)\n"
      "    pid_m = tl.program_id(0)\n"
      "    # @sy.end\n"
      "    rows = pid_m * BM + tl.arange(0, BM)\n"
      "    if N > 0:\n"
      "        # @sy.consume(x_ptr, m=pid_m)\n"  // 12
      "        a = tl.load(x_ptr + rows)\n"
      "    b = tl.load(x_ptr + rows + N)\n"  // 14
      "    tl.store(y_ptr + rows, b)\n");
  EXPECT_TRUE(has(msg,
                  "k.py:14:12: @sy.consume(x_ptr, m=pid_m): 'x_ptr' is read here (load) before the "
                  "wait that this annotation inserts at line 13"))
      << msg;
}

TEST(Safety, HelperReadsTheTensorBeforeTheWait) {
  const auto msg = error_of(
      "def k(x_ptr, y_ptr, BM: tl.constexpr):\n"
      "    # @sy.tile(index=tl.program_id(0), m=pid_m)\n"
      "    pid_m = tl.program_id(0)\n"
      "    # @sy.end\n"
      "    s = _row_sum(x_ptr, pid_m, BM)\n"  // 10
      "    # @sy.consume(x_ptr, m=pid_m)\n"
      "    tl.store(y_ptr + pid_m, s)\n"
      "\n"
      "\n"
      "@triton.jit\n"
      "def _row_sum(p, row, BM: tl.constexpr):\n"
      "    return tl.sum(tl.load(p + row * BM + tl.arange(0, BM)))\n");
  EXPECT_TRUE(has(msg,
                  "k.py:10:9: @sy.consume(x_ptr, m=pid_m): 'x_ptr' is read here (_row_sum, which reads "
                  "it in '_row_sum' at k.py:17:22) before the wait"))
      << msg;
}

// --- (b) the tile's coordinates or position used after the tile block -----------------------------

constexpr const char* kGroupedPid =
    "\n\n@triton.jit\n"
    "def _pid(t, tiles_n):\n"
    "    return t // tiles_n, t % tiles_n\n";

TEST(Safety, EpilogueRecomputesTheCoordinatesOutsideTheTileBlock) {
  const auto msg =
      error_of(std::string("def k(a_ptr, c_ptr, M, N, NUM_SMS: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):\n"
                           "    start = tl.program_id(0)\n"
                           "    tiles_n = tl.cdiv(N, BN)\n"
                           "    tc = start - NUM_SMS\n"
                           "    for t in tl.range(start, tl.cdiv(M, BM) * tiles_n, NUM_SMS, flatten=True):\n"
                           "        # @sy.tile(index=t, m=pm, n=pn)\n"  // 11
                           "        pm, pn = _pid(t, tiles_n)\n"
                           "        # @sy.end\n"
                           "        # @sy.consume(a_ptr, m=pm)\n"
                           "        x = tl.load(a_ptr + pm * BM + tl.arange(0, BM))\n"
                           "        tc += NUM_SMS\n"
                           "        pm, pn = _pid(tc, tiles_n)\n"  // 17
                           "        tl.store(c_ptr + pm * BM + tl.arange(0, BM), x)\n") +
               kGroupedPid);
  EXPECT_EQ(msg,
            "k.py:17:9: @sy.tile(index=t, m=pm, n=pn): 'pm' is computed again here, outside the tile block "
            "(lines 12-12): the rewrite takes the block's 'pm' from the tile order, but this line still "
            "derives it from the tile's place in the original order, so what follows would work on another "
            "tile (an epilogue would store the result in the wrong place); make this recompute a tile block "
            "of its own ('# @sy.tile(index=<its counter>, m=pm, n=pn)' above it, '# @sy.end' below it), or "
            "use the block's 'pm'");
}

TEST(Safety, EpilogueOffsetsFromTheLoopCounter) {
  const auto msg = error_of(
      "def k(a_ptr, c_ptr, T, P: tl.constexpr, BM: tl.constexpr):\n"
      "    for t in tl.range(tl.program_id(0), T, P):\n"
      "        # @sy.tile(index=t, m=pm)\n"
      "        pm = (t * 7) % T\n"
      "        # @sy.end\n"
      "        # @sy.consume(a_ptr, m=pm)\n"
      "        x = tl.load(a_ptr + pm * BM + tl.arange(0, BM))\n"
      "        rows = t * BM + tl.arange(0, BM)\n"  // 13
      "        tl.store(c_ptr + rows, x)\n");
  EXPECT_TRUE(has(msg,
                  "k.py:13:16: @sy.tile(index=t, m=pm): 't' holds the tile's place in the original "
                  "order (the program id or the loop counter that index=t reads), not the tile the "
                  "order assigns"))
      << msg;
}

TEST(Safety, OneTileKernelReadsTheProgramIdAfterTheBlock) {
  const auto msg = error_of(
      "def k(x_ptr, y_ptr, BM: tl.constexpr):\n"
      "    # @sy.tile(index=tl.program_id(0), m=pid_m)\n"
      "    pid_m = tl.program_id(0)\n"
      "    # @sy.end\n"
      "    # @sy.consume(x_ptr, m=pid_m)\n"
      "    x = tl.load(x_ptr + pid_m * BM + tl.arange(0, BM))\n"
      "    out = y_ptr + tl.program_id(0) * BM\n"  // 12
      "    tl.store(out + tl.arange(0, BM), x)\n");
  EXPECT_TRUE(has(msg,
                  "k.py:12:19: @sy.tile(index=tl.program_id(0), m=pid_m): 'tl.program_id(0)' holds "
                  "the tile's place in the original order"))
      << msg;
}

// --- (c) an index that does not follow the tile loop ----------------------------------------------

TEST(Safety, ProgramIdIndexInsideThePersistentLoop) {
  const auto msg = error_of(
      "def k(a_ptr, c_ptr, M, NUM_PROGS: tl.constexpr, BM: tl.constexpr):\n"
      "    for t in range(tl.program_id(0), tl.cdiv(M, BM), NUM_PROGS):\n"  // 7
      "        # @sy.tile(index=tl.program_id(0), m=pm)\n"                  // 8
      "        pm = t\n"
      "        # @sy.end\n"
      "        # @sy.consume(a_ptr, m=pm)\n"
      "        x = tl.load(a_ptr + pm * BM + tl.arange(0, BM))\n"
      "        tl.store(c_ptr + pm * BM + tl.arange(0, BM), x)\n");
  EXPECT_EQ(msg,
            "k.py:8:26: @sy.tile(index=tl.program_id(0), m=pm): index=tl.program_id(0) inside the loop at "
            "line 7 ('for t in range(tl.program_id(0), tl.cdiv(M, BM), NUM_PROGS)') does not change from one "
            "iteration to the next (tl.program_id is the same for the whole loop): every iteration would "
            "take the same tile of the order and the other tiles would never be computed; the index must be "
            "the loop's tile counter: index=t (if this loop walks the problems of a grouped GEMM, Syncopate "
            "cannot transform the kernel: a tile order covers the one grid of one GEMM)");
}

TEST(Safety, WhileLoopIndexThatIsNotItsCounter) {
  const auto msg = error_of(
      "def k(a_ptr, T, P: tl.constexpr, BM: tl.constexpr):\n"
      "    pid = tl.program_id(0)\n"
      "    t = pid\n"
      "    while t < T:\n"                     // 9
      "        # @sy.tile(index=pid, m=pm)\n"  // 10
      "        pm = t\n"
      "        # @sy.end\n"
      "        # @sy.consume(a_ptr, m=pm)\n"
      "        x = tl.load(a_ptr + pm * BM + tl.arange(0, BM))\n"
      "        t += P\n");
  EXPECT_TRUE(has(msg,
                  "k.py:10:26: @sy.tile(index=pid, m=pm): index=pid inside the loop at line 9 ('while "
                  "t < T') does not change from one iteration to the next: every iteration would take "
                  "the same tile of the order"))
      << msg;
  EXPECT_TRUE(has(msg, "index=t ")) << msg;
}

TEST(Safety, SecondCounterThatDoesNotProvablyMatchTheLoop) {
  // The epilogue's counter starts one step late: it would name the next tile, not this one.
  const auto msg =
      error_of(std::string("def k(a_ptr, c_ptr, M, N, NUM_SMS: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):\n"
                           "    start = tl.program_id(0)\n"
                           "    tiles_n = tl.cdiv(N, BN)\n"
                           "    tc = start\n"
                           "    for t in tl.range(start, tl.cdiv(M, BM) * tiles_n, NUM_SMS, flatten=True):\n"  // 10
                           "        # @sy.tile(index=t, m=pm, n=pn)\n"
                           "        pm, pn = _pid(t, tiles_n)\n"
                           "        # @sy.end\n"
                           "        # @sy.consume(a_ptr, m=pm)\n"
                           "        x = tl.load(a_ptr + pm * BM + tl.arange(0, BM))\n"
                           "        tc += NUM_SMS\n"
                           "        # @sy.tile(index=tc, m=pm, n=pn)\n"  // 17
                           "        pm, pn = _pid(tc, tiles_n)\n"
                           "        # @sy.end\n"
                           "        tl.store(c_ptr + pm * BM + tl.arange(0, BM), x)\n") +
               kGroupedPid);
  EXPECT_EQ(msg,
            "k.py:17:26: @sy.tile(index=tc, m=pm, n=pn): index=tc is advanced by the loop at line 10 ('for "
            "t in tl.range(start, tl.cdiv(M, BM) * tiles_n, NUM_SMS, flatten=True)'), but it cannot be shown "
            "to equal the loop's tile counter 't' (that needs 'tc = start - NUM_SMS' before the loop and "
            "'tc += NUM_SMS' before the block); a counter that drifts from the loop's takes tiles twice or "
            "never: use index=t");
}

// --- (d) a tile block that advances a loop-carried value -------------------------------------------

constexpr const char* kNextHelper =
    "\n\n@triton.jit\n"
    "def _take(t, step):\n"
    "    return t, t + step\n";

TEST(Safety, TileBlockAdvancesTheIndexThroughAHelper) {
  const auto msg = error_of(std::string("def k(a_ptr, T, P: tl.constexpr, BM: tl.constexpr):\n"
                                        "    t = tl.program_id(0)\n"
                                        "    for _ in range(tl.cdiv(T, P)):\n"
                                        "        # @sy.tile(index=t, m=pm)\n"  // 9
                                        "        pm, t = _take(t, P)\n"
                                        "        # @sy.end\n"
                                        "        # @sy.consume(a_ptr, m=pm)\n"
                                        "        x = tl.load(a_ptr + pm * BM + tl.arange(0, BM))\n") +
                            kNextHelper);
  EXPECT_TRUE(has(msg,
                  "k.py:9:26: @sy.tile(index=t, m=pm): index= uses 't', which the tile block assigns "
                  "and the rewrite removes;"))
      << msg;
  EXPECT_TRUE(has(msg,
                  "advance the counter outside the block (e.g. 't += <step>' after '# @sy.end'), or it "
                  "stops advancing"))
      << msg;
}

TEST(Safety, TileBlockAdvancesTheWhileCounterThroughAHelper) {
  const auto msg = error_of(std::string("def k(a_ptr, T, P: tl.constexpr, BM: tl.constexpr):\n"
                                        "    t = tl.program_id(0)\n"
                                        "    while t < T:\n"  // 8
                                        "        cur = t\n"
                                        "        # @sy.tile(index=cur, m=pm)\n"
                                        "        pm, t = _take(cur, P)\n"  // 11
                                        "        # @sy.end\n"
                                        "        # @sy.consume(a_ptr, m=pm)\n"
                                        "        x = tl.load(a_ptr + pm * BM + tl.arange(0, BM))\n") +
                            kNextHelper);
  EXPECT_EQ(msg,
            "k.py:8:11: @sy.tile(index=cur, m=pm): 't' is assigned in the tile block (line 11) and read "
            "again by the next iteration of the loop at line 8 (here): the rewrite replaces the block by the "
            "tile-order lookup, so 't' would stop changing between iterations (the loop would repeat one "
            "tile, read the order out of bounds or never end); advance it outside the block (e.g. 't += "
            "<step>' after '# @sy.end') and keep only the computation of the tile's coordinates inside");
}

// --- (e) a grouped GEMM over several problems --------------------------------------------------------

TEST(Safety, GroupedGemmOverSeveralProblems) {
  const auto msg = error_of(
      "def k(sizes_ptr, a_ptr, G, NUM_SM: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):\n"
      "    tile_idx = tl.program_id(0)\n"
      "    last_end = 0\n"
      "    for g in range(G):\n"  // 9
      "        gn = tl.load(sizes_ptr + g)\n"
      "        num_tiles = tl.cdiv(gn, BN) * 4\n"
      "        while tile_idx >= last_end and tile_idx < last_end + num_tiles:\n"  // 12
      "            # @sy.tile(index=tile_idx, m=tm)\n"                             // 13
      "            tm = (tile_idx - last_end) // tl.cdiv(gn, BN)\n"
      "            # @sy.end\n"
      "            # @sy.consume(a_ptr, m=tm)\n"
      "            x = tl.load(a_ptr + tm * BM + tl.arange(0, BM))\n"
      "            tile_idx += NUM_SM\n"
      "        last_end = last_end + num_tiles\n");
  EXPECT_EQ(msg,
            "k.py:13:13: @sy.tile(index=tile_idx, m=tm): the tile block is inside 2 loops (line 9 'for g in "
            "range(G)', line 12 'while tile_idx >= last_end and tile_idx < last_end + num_tiles'): its index "
            "then numbers tiles across the iterations of more than one loop, as a grouped GEMM over several "
            "problems does, but a tile order covers the one grid of one GEMM; Syncopate transforms a kernel "
            "with one tile loop (a persistent kernel) or none: launch each problem on its own, or move the "
            "tile block out of the outer loop");
}

TEST(Safety, TileBlockReadsItsCoordinatesFromAProblemTable) {
  const auto msg = error_of(
      "def k(offsets_ptr, a_ptr, T, P: tl.constexpr, BM: tl.constexpr):\n"
      "    for t in tl.range(tl.program_id(0), T, P):\n"
      "        # @sy.tile(index=t, m=pm)\n"
      "        first = tl.load(offsets_ptr + t)\n"  // 9
      "        pm = first + t\n"
      "        # @sy.end\n"
      "        # @sy.consume(a_ptr, m=pm)\n"
      "        x = tl.load(a_ptr + pm * BM + tl.arange(0, BM))\n");
  EXPECT_TRUE(has(msg,
                  "k.py:9:20: @sy.tile(index=t, m=pm): the tile block reads memory here (load(...)): "
                  "tile coordinates that come from data (a grouped GEMM's problem table, a tile map)"))
      << msg;
}

// --- (f) the notify and the tile's stores -------------------------------------------------------------

TEST(Safety, ProduceAnnotationBelowTheStore) {
  const auto msg = error_of(
      "def k(a_ptr, c_ptr, BM: tl.constexpr):\n"
      "    # @sy.tile(index=tl.program_id(0), m=pm)\n"
      "    pm = tl.program_id(0)\n"
      "    # @sy.end\n"
      "    rows = pm * BM + tl.arange(0, BM)\n"
      "    tl.store(c_ptr + rows, tl.load(a_ptr + rows))\n"  // 11
      "    # @sy.produce(c_ptr, m=pm)\n"                     // 12
      "    done = 1\n");
  EXPECT_EQ(msg,
            "k.py:12:5: @sy.produce(c_ptr, m=pm): the annotation sits below the store it announces (line 11): "
            "the notify is inserted after the statement the annotation marks (line 13), which does not store "
            "'c_ptr'; put '# @sy.produce(c_ptr, m=pm)' on the line above the store (line 11)");
}

TEST(Safety, ProduceMarksAStatementThatStoresNothing) {
  const auto msg = error_of(
      "def k(a_ptr, c_ptr, BM: tl.constexpr):\n"
      "    # @sy.tile(index=tl.program_id(0), m=pm)\n"
      "    pm = tl.program_id(0)\n"
      "    # @sy.end\n"
      "    # @sy.produce(c_ptr, m=pm)\n"  // 10
      "    rows = pm * BM + tl.arange(0, BM)\n"
      "    x = tl.load(a_ptr + rows)\n"
      "    tl.store(c_ptr + rows, x)\n");
  EXPECT_EQ(msg,
            "k.py:10:5: @sy.produce(c_ptr, m=pm): the statement it marks (line 11) does not store 'c_ptr' "
            "(nor pass it to a helper that stores): the notify would announce a tile that is not written; "
            "put the annotation right above the tile's store of 'c_ptr'");
}

TEST(Safety, StoreOfTheTileAfterItsNotify) {
  const auto msg = error_of(
      "def k(c_ptr, M, BM: tl.constexpr):\n"
      "    # @sy.tile(index=tl.program_id(0), m=pm)\n"
      "    pm = tl.program_id(0)\n"
      "    # @sy.end\n"
      "    c_rows = c_ptr + pm * BM + tl.arange(0, BM)\n"
      "    # @sy.produce(c_ptr, m=pm)\n"
      "    tl.store(c_rows, 1.0)\n"        // 12
      "    tl.store(c_rows + M, 2.0)\n");  // 13
  EXPECT_EQ(msg,
            "k.py:13:8: @sy.produce(c_ptr, m=pm): 'c_ptr' is stored again here, after the notify that this "
            "annotation inserts after line 12: the chunk would be announced before this store; put the "
            "annotation above the tile's last store of 'c_ptr' (here), or store the tile in one statement");
}

TEST(Safety, MisalignedEndSaysHowToFixIt) {
  const auto msg = error_of(
      "def k(a_ptr, BM: tl.constexpr):\n"
      "    # @sy.tile(index=tl.program_id(0), m=pm)\n"
      "    pm = tl.program_id(0)\n"
      "        # @sy.end\n"  // 9
      "    x = pm\n");
  EXPECT_EQ(msg,
            "k.py:9:9: @sy.end: '@sy.end' at column 9 does not line up with the '@sy.tile' at line 7, column "
            "5: indent it to column 5, on the line after the block's last statement (a tile block is "
            "statements of one indentation level)");
}

// --- the correct forms are accepted -------------------------------------------------------------------

TEST(SafetyAccepts, EpilogueRecomputeWrappedInItsOwnTileBlock) {
  const auto out =
      output_of(std::string("def k(a_ptr, c_ptr, M, N, NUM_SMS: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):\n"
                            "    start = tl.program_id(0)\n"
                            "    tiles_n = tl.cdiv(N, BN)\n"
                            "    tc = start - NUM_SMS\n"
                            "    for t in tl.range(start, tl.cdiv(M, BM) * tiles_n, NUM_SMS, flatten=True):\n"
                            "        # @sy.tile(index=t, m=pm, n=pn)\n"
                            "        pm, pn = _pid(t, tiles_n)\n"
                            "        # @sy.end\n"
                            "        # @sy.consume(a_ptr, m=pm)\n"
                            "        x = tl.load(a_ptr + pm * BM + tl.arange(0, BM))\n"
                            "        tc += NUM_SMS\n"
                            "        # @sy.tile(index=tc, m=pm, n=pn)\n"
                            "        pm, pn = _pid(tc, tiles_n)\n"
                            "        # @sy.end\n"
                            "        tl.store(c_ptr + pm * BM + tl.arange(0, BM), x)\n") +
                kGroupedPid);
  // The waiting block's entry is loaded one iteration ahead (placement.cpp); the recompute's is not.
  EXPECT_TRUE(
      has(out,
          "        sy_tile = sy_tile_next  # [syncopate]\n"
          "        sy_wait_begin, sy_wait_end = sy_wait_begin_next, sy_wait_end_next  # [syncopate]\n"
          "        sy_tile_next = syl.tile_at_or(sy_tile_order, t + (NUM_SMS), tl.cdiv(M,BM)*tiles_n, NUM_SMS)"))
      << out;
  EXPECT_TRUE(has(out, "        sy_tile = syl.tile_at(sy_tile_order, tc)  # [syncopate]\n")) << out;
}

TEST(SafetyAccepts, WhileLoopCounterAndAnIndexDerivedFromAForCounter) {
  output_of(
      "def k(a_ptr, T, P: tl.constexpr, BM: tl.constexpr):\n"
      "    t = tl.program_id(0)\n"
      "    while t < T:\n"
      "        # @sy.tile(index=t, m=pm)\n"
      "        pm = t\n"
      "        # @sy.end\n"
      "        # @sy.consume(a_ptr, m=pm)\n"
      "        x = tl.load(a_ptr + pm * BM + tl.arange(0, BM))\n"
      "        t += P\n");
  output_of(
      "def k(a_ptr, T, P: tl.constexpr, BM: tl.constexpr):\n"
      "    for i in range(tl.cdiv(T, P)):\n"
      "        tile = tl.program_id(0) + i * P\n"
      "        # @sy.tile(index=tile, m=pm)\n"
      "        pm = tile\n"
      "        # @sy.end\n"
      "        # @sy.consume(a_ptr, m=pm)\n"
      "        x = tl.load(a_ptr + pm * BM + tl.arange(0, BM))\n");
}

TEST(SafetyAccepts, TmaStoreGetsAStoreWaitBeforeItsNotify) {
  const auto out = output_of(
      "def k(c_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):\n"
      "    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])\n"
      "    # @sy.tile(index=tl.program_id(0), m=pm, n=pn)\n"
      "    pm = tl.program_id(0) // tl.cdiv(N, BN)\n"
      "    pn = tl.program_id(0) % tl.cdiv(N, BN)\n"
      "    # @sy.end\n"
      "    # @sy.produce(c_ptr, m=pm, n=pn)\n"
      "    c_desc.store([pm * BM, pn * BN], tl.zeros((BM, BN), dtype=tl.float16))\n"
      "    x = 1\n");
  EXPECT_TRUE(has(out,
                  "    c_desc.store([pm * BM, pn * BN], tl.zeros((BM, BN), dtype=tl.float16))\n"
                  "    syl.tma_store_wait_row(sy_notify_begin, sy_notify_end)  # [syncopate]\n"
                  "    syl.notify_tile_row(sy_signals, sy_notify_slots, sy_tile, sy_notify_begin, sy_notify_end)  # "
                  "[syncopate]\n"
                  "    x = 1\n"))
      << out;
}

TEST(SafetyAccepts, HelperThatMayStoreThroughTmaGetsAStoreWaitAndPlainStoresDoNot) {
  const std::string helper =
      "\n\n@triton.jit\n"
      "def _store(c_desc, c_ptr, v, pm, BM: tl.constexpr, POINTERS: tl.constexpr):\n"
      "    if POINTERS:\n"
      "        tl.store(c_ptr + pm * BM + tl.arange(0, BM), v)\n"
      "    else:\n"
      "        c_desc.store([pm * BM], v)\n";
  const auto out = output_of(
      "def k(c_ptr, M, BM: tl.constexpr, POINTERS: tl.constexpr):\n"
      "    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M], strides=[1], block_shape=[BM])\n"
      "    # @sy.tile(index=tl.program_id(0), m=pm)\n"
      "    pm = tl.program_id(0)\n"
      "    # @sy.end\n"
      "    # @sy.produce(c_ptr, m=pm)\n"
      "    _store(c_desc, c_ptr, tl.zeros((BM,), dtype=tl.float16), pm, BM, POINTERS)\n" +
      helper);
  EXPECT_TRUE(has(out, "    syl.tma_store_wait_row(sy_notify_begin, sy_notify_end)  # [syncopate]\n")) << out;
  const auto plain = output_of(
      "def k(c_ptr, BM: tl.constexpr):\n"
      "    # @sy.tile(index=tl.program_id(0), m=pm)\n"
      "    pm = tl.program_id(0)\n"
      "    # @sy.end\n"
      "    # @sy.produce(c_ptr, m=pm)\n"
      "    tl.store(c_ptr + pm * BM + tl.arange(0, BM), 1.0)\n");
  EXPECT_FALSE(has(plain, "tma_store_wait")) << plain;
}

// --- helpers the user writes: reads inside @triton.jit helpers of the file are followed --------

// A K loop written as a helper (the shape the shipped GEMMs use): the kernel's lines 6-18, the
// helpers from line 21 on.
const char* kLoopHelpers =
    "\n\n@triton.jit\n"                                                      // 19-20, 21
    "def _k_loop(x_desc, w_desc, off_m, k_tiles, acc, BK: tl.constexpr):\n"  // 22
    "    for ki in range(k_tiles):\n"                                        // 23
    "        acc += tl.sum(_tile(x_desc, off_m, ki * BK), axis=1)\n"         // 24
    "        acc += tl.sum(w_desc.load([0, ki * BK]), axis=1)\n"             // 25
    "    return acc\n"                                                       // 26
    "\n\n@triton.jit\n"                                                      // 27-28, 29
    "def _tile(desc, row, col):\n"                                           // 30
    "    return desc.load([row, col])\n";                                    // 31

std::string k_loop_kernel(const std::string& first_tile_statement) {
  return "def k(x_ptr, w_ptr, y_ptr, M, K, BM: tl.constexpr, BK: tl.constexpr):\n"                              // 6
         "    x_desc = tl.make_tensor_descriptor(x_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])\n"  // 7
         "    w_desc = tl.make_tensor_descriptor(w_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])\n"  // 8
         "    k_tiles = tl.cdiv(K, BK)\n"                                                                       // 9
         "    # @sy.tile(index=tl.program_id(0), m=pid_m)\n"                                                    // 10
         "    pid_m = tl.program_id(0)\n"                                                                       // 11
         "    # @sy.end\n"                                                                                      // 12
         "    acc = tl.zeros((BM,), dtype=tl.float32)\n"                                                        // 13
         + first_tile_statement +                                                                               // 14-15
         "    tl.store(y_ptr + pid_m * BM + tl.arange(0, BM), acc)\n"                                           // 16
         "    x = 0\n"                                                                                          // 17
         "    x = 1\n";                                                                                         // 18
}

TEST(SafetyHelpers, AHelperCalledUnderTheConsumeIsCoveredByItsWait) {
  const auto out = output_of(k_loop_kernel("    # @sy.consume(x_ptr, m=pid_m)\n"
                                           "    acc = _k_loop(x_desc, w_desc, pid_m * BM, k_tiles, acc, BK)\n") +
                             kLoopHelpers);
  // Only `acc = tl.zeros(...)` between the tile block and the consume: waited for at the lookup.
  EXPECT_TRUE(has(out, "    sy_tile, sy_seen = syl.wait_for_tile(")) << out;
  EXPECT_LT(out.find("syl.wait_for_tile("), out.find("    acc = _k_loop(")) << out;
}

TEST(SafetyHelpers, AHelperThatReadsTheTensorBeforeTheWaitIsRefusedNamingTheReadInside) {
  // _k_loop passes x_desc on to _tile, which loads it (line 31): followed through both helpers.
  const auto msg = error_of(k_loop_kernel("    acc = _k_loop(x_desc, w_desc, pid_m * BM, k_tiles, acc, BK)\n"
                                          "    # @sy.consume(x_ptr, m=pid_m)\n") +
                            kLoopHelpers);
  EXPECT_TRUE(has(msg,
                  "k.py:14:11: @sy.consume(x_ptr, m=pid_m): 'x_ptr' is read here (_k_loop through "
                  "'x_desc', which reads it in '_tile' at k.py:31:17) before the wait that this "
                  "annotation inserts at line 16"))
      << msg;
  EXPECT_TRUE(has(msg, "move the annotation up to line 14")) << msg;
}

TEST(SafetyHelpers, AHelperGivenTheTensorThatReadsOnlyAnotherParameterIsNoRead) {
  // Before the consume, _k_loop is given w_desc (read) but not x_desc: _row_sum is given x_desc
  // and reads only its other parameter.
  const std::string helpers = std::string(kLoopHelpers) +
                              "\n\n@triton.jit\n"
                              "def _row_sum(desc, w_desc, row):\n"
                              "    return tl.sum(w_desc.load([row, 0]), axis=1)\n";
  const auto out = output_of(k_loop_kernel("    acc += _row_sum(x_desc, w_desc, pid_m * BM)\n"
                                           "    # @sy.consume(x_ptr, m=pid_m)\n"
                                           "    acc = _k_loop(x_desc, w_desc, pid_m * BM, k_tiles, acc, BK)\n") +
                             helpers);
  EXPECT_TRUE(has(out, "syl.wait_tile(")) << out;
  // Given as the read parameter (by keyword), the same helper is a read.
  const auto msg = error_of(k_loop_kernel("    acc += _row_sum(w_ptr, w_desc=x_desc, row=pid_m * BM)\n"
                                          "    # @sy.consume(x_ptr, m=pid_m)\n") +
                            helpers);
  EXPECT_TRUE(has(msg,
                  "k.py:14:12: @sy.consume(x_ptr, m=pid_m): 'x_ptr' is read here (_row_sum through "
                  "'x_desc', which reads it in '_row_sum' at k.py:36:26)"))
      << msg;
}

TEST(SafetyHelpers, AFunctionOfAModuleImportedWholeGivenTheTensorBeforeTheWaitCountsAsARead) {
  // `import mylib` ... `mylib.k_loop(...)`: not followed (a helper imported by name is:
  // imported_helpers_test.cpp), so given the tensor it counts as a read.
  const std::string imported = "\n\nimport mylib\n";
  const auto msg = error_of(k_loop_kernel("    acc = mylib.k_loop(x_desc, w_desc, pid_m * BM, k_tiles, acc, BK)\n"
                                          "    # @sy.consume(x_ptr, m=pid_m)\n") +
                            imported);
  EXPECT_TRUE(has(msg,
                  "k.py:14:17: @sy.consume(x_ptr, m=pid_m): 'x_ptr' is read here (k_loop through "
                  "'x_desc'; 'k_loop' is called through a module imported whole, whose functions the transformer "
                  "does not follow, so it counts as a read; import the function by name ('from <module> import "
                  "k_loop') to have its reads followed)"))
      << msg;
  // Not given the consumed tensor, or called under the wait, it is no concern.
  EXPECT_EQ(error_of(k_loop_kernel("    acc += mylib.row_offsets(pid_m, BM)\n"
                                   "    # @sy.consume(x_ptr, m=pid_m)\n"
                                   "    acc = mylib.k_loop(x_desc, w_desc, pid_m * BM, k_tiles, acc, BK)\n") +
                     imported),
            "no error");
}

}  // namespace
}  // namespace syncopate::transform

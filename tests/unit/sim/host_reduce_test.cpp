// The mechanisms of calib/h200.json's sources: the call path of a fused call (measured on
// nvidia-h100-x1), copy-engine bandwidth while a GEMM runs, the reduce-add's add step on its
// destination, and the copy-out of a GEMM+RS/AR result. Hand-computed on the round calibration
// of sim_fixtures.hpp (tile 5 us, 128 x 1000 bf16 chunk = 256000 bytes, 10 us at 25.6 GB/s,
// latency 1 us, launch 2 us, sync 3 us, local copies at 1000 GB/s), plus behaviour checks on real template plans.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "sim_fixtures.hpp"
#include "syncopate/plan/templates.hpp"
#include "syncopate/sim/simulator.hpp"

namespace syncopate::sim {
namespace {

using testing::round_calibration_json;
using testing::two_rank_all_gather;
using testing::two_rank_producer;

constexpr double kTol = 1e-6;

// The round calibration with some fields set (JSON pointer -> value).
Calibration with(std::initializer_list<std::pair<const char*, nlohmann::json>> edits, double bandwidth_gbps = 25.6) {
  auto doc = nlohmann::json::parse(round_calibration_json(1.0, 4, bandwidth_gbps));
  for (const auto& [pointer, value] : edits) doc[nlohmann::json::json_pointer(pointer)] = value;
  return parse_calibration(doc.dump(), "edited-round.json");
}

double first_tile_start(const Timeline& tl, int rank) {
  double t = 1e300;
  for (const auto& tile : tl.tiles)
    if (tile.rank == rank) t = std::min(t, tile.start);
  return t;
}

// --- the call path ------------------------------------------------------------------------------

// The call path of a fused call (docs/RUNTIME.md): the kernel is launched fused_call_us after the
// call (plus, for AG+GEMM, the copy of the rank's own shard into the heap: 128 x 1000 bf16 =
// 256000 bytes at 1000 GB/s = 0.256 us) and its first tile starts one launch (2 us) later; the
// side streams fork at the launch and each chunk enters its stream after its step's dispatch
// (issue_us 4): it starts at 10.256 + 4 + 2 (launch) = 16.256, before the first tile. The call
// ends no earlier than the host returns, fused_call_us + after_launch_us (not after the launch).
TEST(HostPath, KernelStartsAtOnceAndChunksAfterTheirDispatch) {
  const auto calib =
      with({{"/host", {{"fused_call_us", 10}, {"after_launch_us", 100}, {"producer_after_launch_us", 0}}},
            {"/backends/copy-engine/issue_us", 4}});
  const auto tl = simulate_fused(two_rank_all_gather({0, 1, 2, 3}, {2, 3, 0, 1}), calib);
  for (int r = 0; r < 2; ++r) {
    EXPECT_NEAR(tl.rank_ends[r].kernel_launch, 10.256, kTol);
    EXPECT_NEAR(first_tile_start(tl, r), 12.256, kTol);
    EXPECT_NEAR(tl.chunks[r].start, 16.256, kTol);
    EXPECT_NEAR(tl.rank_ends[r].host_return, 110, kTol);
  }
  EXPECT_NEAR(tl.total_us, 110, kTol);  // the GPU is done at 16.256 + 10 + 1 + 5 = 32.256
}

// Charged once per call: a GEMM with 2x the tile time launches at the same time, and the
// predicted time grows by the extra compute only.
TEST(HostPath, ChargedOncePerCallNotPerTile) {
  const auto calib =
      with({{"/host", {{"fused_call_us", 50}, {"after_launch_us", 0}, {"producer_after_launch_us", 0}}}});
  auto small = two_rank_all_gather({0, 1, 2, 3}, {2, 3, 0, 1});
  const auto base = simulate_fused(small, calib);
  EXPECT_NEAR(first_tile_start(base, 0), 52.256, kTol);
  // Same chunks, 2x deeper K: twice the tile time, same launch.
  auto deep = small;
  deep.gemm.k = 2000;
  const auto slower = simulate_fused(deep, calib);
  EXPECT_NEAR(first_tile_start(slower, 0), 52.256, kTol);
  EXPECT_NEAR(slower.rank_ends[0].kernel_launch, base.rank_ends[0].kernel_launch, kTol);
}

plan::CommPlan direct_all_gather(int split, std::int64_t rows = 1024) {
  plan::TemplateOptions o;
  o.collective = plan::Collective::all_gather;
  o.algorithm = plan::Algorithm::direct;
  o.world_size = 2;
  o.split = split;
  o.shape = {rows, 1000};
  return plan::make_plan(o);
}

// The host issues nothing per chunk: a split-4 plan (4 chunks per rank) launches its kernel as
// early as split 1 (under the old call path each chunk's host issue came first: 20 + 4 x 7).
// The launch is fused_call_us + the local shard copy (512 x 1000 bf16 = 1.024 MB at 1000 GB/s).
TEST(HostPath, MoreChunksDoNotDelayTheLaunch) {
  auto calib = with({{"/host", {{"fused_call_us", 20}, {"after_launch_us", 0}, {"producer_after_launch_us", 0}}},
                     {"/backends/copy-engine/issue_us", 7}});
  auto launch = [&](int split) {
    const auto call =
        make_fused_call(direct_all_gather(split), {1024, 256, 1000, 128, 128}, schedule::OrderKind::arrival, calib);
    return simulate_fused(call, calib).rank_ends.at(0).kernel_launch;
  };
  EXPECT_NEAR(launch(1), 20 + 1.024, kTol);
  EXPECT_NEAR(launch(4), 20 + 1.024, kTol);
}

// Along its stream, the k-th chunk enters no earlier than the launch + k x issue_us. With a
// fast link (1e6 GB/s: the transfers take no time) the stagger is what orders the starts:
// the split-4 plan's four chunks on rank 0's one stream start at launch + 2 (a chunk's
// launch overhead) + k x 50. Streams are parallel: rank 1's chunks are staggered the same way.
TEST(HostPath, ChunksAreStaggeredAlongTheirStreamByIssueUs) {
  auto calib = with({{"/host", {{"fused_call_us", 20}, {"after_launch_us", 0}, {"producer_after_launch_us", 0}}},
                     {"/backends/copy-engine/issue_us", 50}},
                    1e6);
  const auto plan = direct_all_gather(4);
  const auto call = make_fused_call(plan, {1024, 256, 1000, 128, 128}, schedule::OrderKind::arrival, calib);
  const auto tl = simulate_fused(call, calib);
  int checked = 0;
  for (const auto& program : plan.ranks)
    for (const auto& stream : program.streams) {
      const double launch = tl.rank_ends.at(program.rank).kernel_launch;
      for (std::size_t k = 0; k < stream.size(); ++k, ++checked)
        EXPECT_NEAR(tl.chunks.at(stream[k]).start, launch + 2 + 50.0 * double(k + 1), 1e-3)
            << "rank " << program.rank << " chunk " << stream[k];
    }
  EXPECT_EQ(checked, 8);
  // No chunk delays the kernel: its first tile starts one launch after the kernel's launch.
  EXPECT_NEAR(first_tile_start(tl, 0), tl.rank_ends[0].kernel_launch + 2, kTol);
}

// Two streams on one rank are dispatched in parallel: a chunk's stagger counts only the chunks
// before it on its own stream.
TEST(HostPath, StreamsAreDispatchedInParallel) {
  auto call = two_rank_all_gather({0, 1, 2, 3}, {2, 3, 0, 1});
  // Rank 0 sends two half-shards on two streams of its own (chunk 2: rows 64..127).
  call.plan.chunks[0].box.extent[0] = call.plan.chunks[0].dst_box.extent[0] = 64;
  auto extra = testing::rows_chunk(2, "x", 64, 0, 1, 1);
  extra.box.extent[0] = extra.dst_box.extent[0] = 64;
  call.plan.chunks.push_back(extra);
  call.plan.ranks[0].streams = {{0}, {2}};
  for (auto& t : call.tables) {
    t.landing_slot_of_chunk.push_back(-1);
    t.ready_slot_of_chunk.push_back(-1);
    t.dst_ready_slot_of_chunk.push_back(-1);
  }
  const auto calib = with({{"/host", {{"fused_call_us", 10}, {"after_launch_us", 0}, {"producer_after_launch_us", 0}}},
                           {"/backends/copy-engine/issue_us", 30}});
  const auto tl = simulate_fused(call, calib);
  const double launch = tl.rank_ends[0].kernel_launch;
  EXPECT_NEAR(tl.chunks[0].start, launch + 30 + 2, kTol);
  EXPECT_NEAR(tl.chunks[2].start, launch + 30 + 2, kTol);  // one step on its stream, not two
}

// The split graphs (ops/call_graphs.py): the tail that forks the side streams is launched after
// the head that holds the kernel, so the chunks enter chunks_after_launch_us after the kernel's
// launch (16.256 + 3 = 19.256 against the test above); the kernel's launch does not move, and a
// calibration without the field forks with the kernel (the test above). It is written back.
TEST(HostPath, TheSplitGraphsTailForksTheChunksAfterTheKernelsLaunch) {
  const auto calib = with({{"/host",
                            {{"fused_call_us", 10},
                             {"after_launch_us", 100},
                             {"producer_after_launch_us", 0},
                             {"chunks_after_launch_us", 3}}},
                           {"/backends/copy-engine/issue_us", 4}});
  EXPECT_DOUBLE_EQ(calib.host.chunks_after_launch_us, 3);
  const auto tl = simulate_fused(two_rank_all_gather({0, 1, 2, 3}, {2, 3, 0, 1}), calib);
  for (int r = 0; r < 2; ++r) {
    EXPECT_NEAR(tl.rank_ends[r].kernel_launch, 10.256, kTol);
    EXPECT_NEAR(tl.chunks[r].start, 19.256, kTol);
  }
  const auto again = parse_calibration(calibration_to_json(calib), "written.json");
  EXPECT_DOUBLE_EQ(again.host.chunks_after_launch_us, 3);
  EXPECT_THROW(with({{"/host",
                      {{"fused_call_us", 10},
                       {"after_launch_us", 0},
                       {"producer_after_launch_us", 0},
                       {"chunks_after_launch_us", -1}}}}),
               CalibrationError);
}

// AG+GEMM copies its own shard into the heap before the kernel: bytes / local_copy_gbps, which
// grows with M / world; a GEMM+RS uses its operands in place (its copy-out comes at the end).
TEST(HostPath, TheLocalShardCopyComesBeforeTheKernel) {
  const auto calib =
      with({{"/host", {{"fused_call_us", 20}, {"after_launch_us", 0}, {"producer_after_launch_us", 0}}}});
  auto launch = [&](std::int64_t rows) {
    const auto call =
        make_fused_call(direct_all_gather(1, rows), {rows, 256, 1000, 128, 128}, schedule::OrderKind::arrival, calib);
    return simulate_fused(call, calib).rank_ends.at(0).kernel_launch;
  };
  EXPECT_NEAR(launch(1024), 20 + 512 * 1000 * 2 / 1e6, kTol);
  EXPECT_NEAR(launch(8192), 20 + 4096 * 1000 * 2 / 1e6, kTol);
  plan::TemplateOptions o;
  o.collective = plan::Collective::reduce_scatter;
  o.algorithm = plan::Algorithm::direct;
  o.world_size = 2;
  o.shape = {1024, 1000};
  const auto rs = make_fused_call(plan::make_plan(o), {1024, 1000, 256, 128, 128}, schedule::OrderKind::arrival, calib);
  EXPECT_NEAR(simulate_fused(rs, calib).rank_ends.at(0).kernel_launch, 20, kTol);
}

// --- copy-engine bandwidth under compute ------------------------------------------------------

// The kernels start at 2 with the chunks and run (local tiles, then spinning) until the chunks
// land: at 12.8 GB/s the 256000 bytes take 20 us, landing at 2 + 20 + 1 = 23 instead of 13. The
// fused GEMM has one worker on the 2-SM device: the remote tiles run [23,28], [28,33].
TEST(UnderCompute, ALinkIsSlowerWhileAGemmRuns) {
  const auto call = two_rank_all_gather({0, 1, 2, 3}, {2, 3, 0, 1});
  const auto slow = simulate_fused(call, with({{"/backends/copy-engine/bandwidth_under_compute_gbps", 12.8}}));
  EXPECT_NEAR(slow.chunks[0].transfer_end, 22, kTol);
  EXPECT_NEAR(slow.chunks[0].arrival, 23, kTol);
  EXPECT_NEAR(slow.total_us, 33, kTol);
  // Communication alone has no GEMM: the full bandwidth.
  EXPECT_NEAR(simulate_comm_alone(call.plan, with({{"/backends/copy-engine/bandwidth_under_compute_gbps", 12.8}}))
                  .chunks[0]
                  .arrival,
              13, kTol);
}

TEST(UnderCompute, AFasterCopyUnderComputeShortensTheCall) {
  const auto call = two_rank_all_gather({0, 1, 2, 3}, {2, 3, 0, 1});
  const double slow =
      simulate_fused(call, with({{"/backends/copy-engine/bandwidth_under_compute_gbps", 6.4}})).total_us;
  const double fast = simulate_fused(call, with({{"/backends/copy-engine/bandwidth_under_compute_gbps", 20}})).total_us;
  EXPECT_LT(fast, slow);
}

// --- the add step of reduce-adds --------------------------------------------------------------

FusedCall reduce_add_producer() {
  auto call = two_rank_producer();
  call.plan.chunks[0].op = plan::ChunkOp::reduce_add;
  return call;
}

// On a 14-SM device the producer's fused GEMM keeps 2 workers (14 less the 12 it leaves the add
// kernel and the copy engine, sim/reserved_sms.hpp): rank 0's tiles 0 and 1 end at 7; the chunk
// moves 7 -> 17, latency to 18; rank 1's kernel has ended (at 12), so the add runs at add_gbps:
// 256000 B / 25.6 GB/s = 10 us, landing at 28.
TEST(ReduceAdd, AddedInPlaceAfterTheTransfer) {
  const auto calib = with({{"/reduce_add", {{"add_gbps", 25.6}, {"add_under_compute_gbps", 12.8}}},
                           {"/gpu/sms", 14},
                           {"/gemm/peak_tflops", 8.192 * 14}});
  ASSERT_EQ(fused_workers(reduce_add_producer(), calib), 2);
  const auto tl = simulate_fused(reduce_add_producer(), calib);
  EXPECT_NEAR(tl.chunks[0].transfer_end, 17, kTol);
  EXPECT_NEAR(tl.chunks[0].add_us, 10, kTol);
  EXPECT_NEAR(tl.chunks[0].arrival, 28, kTol);
  // A plain copy of the same box has no add step.
  const auto copy = simulate_fused(two_rank_producer(), calib);
  EXPECT_NEAR(copy.chunks[0].add_us, 0, kTol);
  EXPECT_NEAR(copy.chunks[0].arrival, 18, kTol);
}

// At 1000 GB/s the transfer ends at 7.256, while rank 1 still computes (until 12): the add runs
// at add_under_compute_gbps, 20 us.
TEST(ReduceAdd, SlowerWhileTheDestinationComputes) {
  const auto calib = with({{"/reduce_add", {{"add_gbps", 25.6}, {"add_under_compute_gbps", 12.8}}}}, 1000);
  const auto tl = simulate_fused(reduce_add_producer(), calib);
  EXPECT_NEAR(tl.chunks[0].add_us, 20, kTol);
}

// The reduction tail (last landing on a rank after its last tile) grows with the size of the last
// sub-chunk: split 1 leaves one big add after the GEMM, split 4 a quarter of it.
TEST(ReduceAdd, TheTailGrowsWithTheLastSubChunk) {
  const auto calib = load_calibration(std::filesystem::path(SYNCOPATE_SOURCE_DIR) / "calib" / "h200.json");
  auto tail = [&](int split) {
    plan::TemplateOptions o;
    o.collective = plan::Collective::reduce_scatter;
    o.algorithm = plan::Algorithm::direct;
    o.world_size = 2;
    o.split = split;
    o.shape = {8192, 8192};
    const auto call =
        make_fused_call(plan::make_plan(o), {8192, 8192, 4096, 128, 256}, schedule::OrderKind::arrival, calib);
    const auto tl = simulate_fused(call, calib);
    double last_tile = 0;
    for (const auto& t : tl.tiles)
      if (t.rank == 0) last_tile = std::max(last_tile, t.end);
    return tl.rank_ends[0].gpu_end - last_tile;
  };
  const double one = tail(1), four = tail(4);
  EXPECT_GT(one, 1.5 * four) << "split 1 tail " << one << " us, split 4 " << four << " us";
  EXPECT_GT(four, 0);
}

// --- copy-out of the result -------------------------------------------------------------------

// GEMM+RS on 2 ranks, 256 x 1000 bf16: each rank copies its 128 x 1000 shard (256000 bytes) out
// of the heap at local_copy_gbps (1000 GB/s: 0.256 us) after the exit wait (sync 3 us); an
// all-reduce copies the whole tensor (twice the bytes).
TEST(CopyOut, AfterEveryLandingAndTheExitWait) {
  const auto calib = with({});
  for (auto kind : {plan::Collective::reduce_scatter, plan::Collective::all_reduce}) {
    plan::TemplateOptions o;
    o.collective = kind;
    o.algorithm = plan::Algorithm::direct;
    o.world_size = 2;
    o.shape = {256, 1000};
    const auto call =
        make_fused_call(plan::make_plan(o), {256, 1000, 500, 128, 128}, schedule::OrderKind::arrival, calib);
    const auto tl = simulate_fused(call, calib);
    const double bytes = kind == plan::Collective::reduce_scatter ? 256000 : 512000;
    for (const auto& e : tl.rank_ends) {
      EXPECT_NEAR(e.copy_out_start, e.gpu_end + 3, kTol);
      EXPECT_NEAR(e.copy_out_end - e.copy_out_start, bytes / 1e6, kTol);
      EXPECT_NEAR(e.end, e.copy_out_end, kTol);
    }
    double last = 0;
    for (const auto& c : tl.chunks) last = std::max(last, c.arrival);
    EXPECT_GE(tl.rank_ends[0].gpu_end + kTol, tl.chunks[0].arrival);
    EXPECT_GT(tl.total_us, last);
  }
}

// A consumer (AG+GEMM) has nothing to copy out.
TEST(CopyOut, NoneForAConsumer) {
  const auto tl = simulate_fused(two_rank_all_gather({0, 1, 2, 3}, {2, 3, 0, 1}), with({}));
  for (const auto& e : tl.rank_ends) EXPECT_NEAR(e.copy_out_end, e.gpu_end, kTol);
  EXPECT_NEAR(tl.total_us, 23, kTol);  // one worker, as HandTimeline.SmCopyTakesAnSmFromCompute
}

// --- calibration fields -----------------------------------------------------------------------

TEST(CalibrationHost, NewFieldsReadAndWrittenBack) {
  const auto c = with({{"/host", {{"fused_call_us", 90}, {"after_launch_us", 8}, {"producer_after_launch_us", 70}}},
                       {"/reduce_add", {{"add_gbps", 320}, {"add_under_compute_gbps", 270}}},
                       {"/backends/copy-engine/bandwidth_under_compute_gbps", 20},
                       {"/backends/copy-engine/issue_us", 31}});
  const auto again = parse_calibration(calibration_to_json(c), "again");
  EXPECT_DOUBLE_EQ(again.host.fused_call_us, 90);
  EXPECT_DOUBLE_EQ(again.host.producer_after_launch_us, 70);
  EXPECT_DOUBLE_EQ(again.reduce_add.add_under_compute_gbps, 270);
  EXPECT_DOUBLE_EQ(again.backend(plan::Backend::copy_engine).bandwidth_under_compute(), 20);
  EXPECT_DOUBLE_EQ(again.backend(plan::Backend::copy_engine).issue_us, 31);
  EXPECT_DOUBLE_EQ(again.backend(plan::Backend::nccl).bandwidth_under_compute(), 25.6);  // absent: as alone
  EXPECT_DOUBLE_EQ(again.link_bandwidth_under_compute_gbps(0, 1, plan::Backend::copy_engine), 20);
}

// `host` present, even all zeros, models the call path (the AG+GEMM shard copy before the
// kernel: 0.256 us here); absent, none (the schedule alone). Written back as read.
TEST(CalibrationHost, AHostOfZerosIsStillACallPath) {
  const auto zeros = with({{"/host", {{"fused_call_us", 0}, {"after_launch_us", 0}, {"producer_after_launch_us", 0}}}});
  const auto none = with({});
  EXPECT_TRUE(zeros.host.modelled);
  EXPECT_FALSE(none.host.modelled);
  EXPECT_TRUE(parse_calibration(calibration_to_json(zeros), "again").host.modelled);
  EXPECT_FALSE(parse_calibration(calibration_to_json(none), "again").host.modelled);
  const auto call = two_rank_all_gather({0, 1, 2, 3}, {2, 3, 0, 1});
  EXPECT_NEAR(simulate_fused(call, zeros).rank_ends[0].kernel_launch, 0.256, kTol);
  EXPECT_NEAR(simulate_fused(call, none).rank_ends[0].kernel_launch, 0, kTol);
}

TEST(CalibrationHost, TheRemovedLumpIsAnErrorWithOrWithoutHost) {
  auto expect_removed = [](auto&& read) {
    try {
      read();
      FAIL() << "expected a CalibrationError";
    } catch (const CalibrationError& e) {
      EXPECT_NE(std::string(e.what()).find("edited-round.json: overheads.fused_call_us: removed"), std::string::npos)
          << e.what();
    }
  };
  expect_removed([] { with({{"/overheads/fused_call_us", {{"all-gather", 100}}}}); });
  expect_removed([] {
    with({{"/host", {{"fused_call_us", 90}, {"after_launch_us", 8}, {"producer_after_launch_us", 70}}},
          {"/overheads/fused_call_us", {{"all-gather", 100}}}});
  });
}

TEST(CalibrationHost, BadValuesNameTheirPath) {
  EXPECT_THROW(with({{"/host", {{"fused_call_us", -1}, {"after_launch_us", 0}, {"producer_after_launch_us", 0}}}}),
               CalibrationError);
  EXPECT_THROW(with({{"/reduce_add", {{"add_gbps", 0}, {"add_under_compute_gbps", 1}}}}), CalibrationError);
  try {
    with({{"/backends/copy-engine/bandwidth_under_compute_gbps", -3}});
    FAIL();
  } catch (const CalibrationError& e) {
    EXPECT_NE(std::string(e.what()).find("backends.copy-engine.bandwidth_under_compute_gbps: expected a number > 0"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace syncopate::sim

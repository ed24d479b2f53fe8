// Hand-computed timelines for tiny calls (sim_fixtures.hpp explains the round numbers): the
// simulator must match every start, arrival and tile to the microsecond.
#include <gtest/gtest.h>

#include "../../../src/sim/fair_share.hpp"
#include "sim_fixtures.hpp"
#include "syncopate/sim/simulator.hpp"

namespace syncopate::sim {
namespace {

using testing::fused_round_calibration;
using testing::round_calibration;
using testing::two_rank_all_gather;
using testing::two_rank_producer;

constexpr double kTol = 1e-6;  // microseconds

const TileTiming& tile_of(const Timeline& tl, int rank, int tile) {
  for (const auto& t : tl.tiles)
    if (t.rank == rank && t.tile == tile) return t;
  throw std::runtime_error("no such tile in the timeline");
}

void expect_tile(const Timeline& tl, int rank, int tile, double start, double end, int worker) {
  const auto& t = tile_of(tl, rank, tile);
  EXPECT_NEAR(t.start, start, kTol) << "rank " << rank << " tile " << tile;
  EXPECT_NEAR(t.end, end, kTol) << "rank " << rank << " tile " << tile;
  EXPECT_EQ(t.worker, worker) << "rank " << rank << " tile " << tile;
}

TEST(HandTimeline, TileTimeFromTheCalibration) {
  EXPECT_NEAR(round_calibration().tile_time_us(128, 128, 1000), 5.0, kTol);
}

// Chunks start after the 2 us launch, move 256000 bytes at 25.6 GB/s (10 us), land 1 us later.
// Arrival order: local tiles run first, [2,7] on both workers (the 6-SM device: the fused GEMM
// leaves 4 to the copy engine); remote tiles at the arrival 13.
TEST(HandTimeline, FusedArrivalOrder) {
  EXPECT_EQ(fused_workers(two_rank_all_gather({0, 1, 2, 3}, {2, 3, 0, 1}), fused_round_calibration()), 2);
  const auto tl = simulate_fused(two_rank_all_gather({0, 1, 2, 3}, {2, 3, 0, 1}), fused_round_calibration());
  for (int c = 0; c < 2; ++c) {
    EXPECT_NEAR(tl.chunks[c].ready, 2, kTol);
    EXPECT_NEAR(tl.chunks[c].start, 2, kTol);
    EXPECT_NEAR(tl.chunks[c].transfer_end, 12, kTol);
    EXPECT_NEAR(tl.chunks[c].arrival, 13, kTol);
    EXPECT_NEAR(tl.chunks[c].bytes, 256000, kTol);
  }
  expect_tile(tl, 0, 0, 2, 7, 0);
  expect_tile(tl, 0, 1, 2, 7, 1);
  expect_tile(tl, 0, 2, 13, 18, 0);
  expect_tile(tl, 0, 3, 13, 18, 1);
  expect_tile(tl, 1, 2, 2, 7, 0);
  expect_tile(tl, 1, 0, 13, 18, 0);
  EXPECT_NEAR(tl.total_us, 18, kTol);
}

// Row-major on rank 1: both workers claim the remote tiles first and spin until 13; the local
// tiles follow at [18,23]. The claimed time records the spin.
TEST(HandTimeline, FusedRowMajorWaitsInOrder) {
  const auto tl = simulate_fused(two_rank_all_gather({0, 1, 2, 3}, {0, 1, 2, 3}), fused_round_calibration());
  expect_tile(tl, 1, 0, 13, 18, 0);
  expect_tile(tl, 1, 1, 13, 18, 1);
  expect_tile(tl, 1, 2, 18, 23, 0);
  expect_tile(tl, 1, 3, 18, 23, 1);
  EXPECT_NEAR(tile_of(tl, 1, 0).claimed, 2, kTol);
  EXPECT_NEAR(tl.total_us, 23, kTol);
}

// Dynamic assignment with one worker stalled: on rank 1 in row-major, worker 0 claims tile 0
// and worker 1 tile 1; both spin, so nothing changes: 23 again. But with order {0,2,1,3} the
// dynamic queue lets worker 1 run tile 2 while worker 0 spins on tile 0.
TEST(HandTimeline, DynamicAssignmentTakesTheNextTile) {
  SimOptions dynamic;
  dynamic.dynamic_assignment = true;
  const auto tl = simulate_fused(two_rank_all_gather({0, 1, 2, 3}, {0, 2, 1, 3}), fused_round_calibration(), dynamic);
  expect_tile(tl, 1, 0, 13, 18, 0);
  expect_tile(tl, 1, 2, 2, 7, 1);
  expect_tile(tl, 1, 1, 13, 18, 1);  // worker 1 claimed it at 7 and spun until 13
  expect_tile(tl, 1, 3, 18, 23, 0);
  EXPECT_NEAR(tl.total_us, 23, kTol);
}

// Compute runs at half speed while chunks move (slowdown 2). With 64 GB/s the transfers take
// [2,6]: the local tiles do 2 us of work by 6 and the other 3 us at full speed, ending at 9;
// the chunks landed at 7, so the remote tiles run [9,14].
TEST(HandTimeline, ComputeSlowsWhileCommunicationMoves) {
  const auto tl = simulate_fused(two_rank_all_gather({0, 1, 2, 3}, {2, 3, 0, 1}),
                                 fused_round_calibration(/*slowdown=*/2.0, 4, /*bandwidth=*/64.0));
  EXPECT_NEAR(tl.chunks[0].transfer_end, 6, kTol);
  EXPECT_NEAR(tl.chunks[0].arrival, 7, kTol);
  expect_tile(tl, 0, 0, 2, 9, 0);
  expect_tile(tl, 0, 2, 9, 14, 0);
  EXPECT_NEAR(tl.total_us, 14, kTol);
}

// Two chunks on the same link at once share its bandwidth: 20 us each. With one lane (one copy
// engine) they go one after the other: [2,12] then [12,22].
TEST(HandTimeline, LinkSharingAndLanes) {
  auto call = two_rank_all_gather({0, 1, 2, 3}, {2, 3, 0, 1});
  // Both chunks now go 0 -> 1 on two streams of rank 0 (a plan made for this test only).
  call.plan.chunks[1] = testing::rows_chunk(1, "x", 128, 0, 1, /*stream=*/1);
  call.plan.ranks = {{0, {{0}, {1}}}, {1, {}}};
  for (auto& t : call.tables) {
    t.tile_waits.assign(4, {});
  }
  call.tables[1].slots = {{0, lower::SlotKind::landing, 0, 1}, {1, lower::SlotKind::landing, 1, 1}};
  call.tables[1].tile_waits = {{0}, {0}, {1}, {1}};
  const auto shared = simulate_fused(call, round_calibration());
  EXPECT_NEAR(shared.chunks[0].transfer_end, 22, kTol);
  EXPECT_NEAR(shared.chunks[1].transfer_end, 22, kTol);
  const auto one_lane = simulate_fused(call, round_calibration(1.0, /*concurrency=*/1));
  EXPECT_NEAR(one_lane.chunks[0].start, 2, kTol);
  EXPECT_NEAR(one_lane.chunks[0].arrival, 13, kTol);
  EXPECT_NEAR(one_lane.chunks[1].start, 12, kTol);
  EXPECT_NEAR(one_lane.chunks[1].arrival, 23, kTol);
  // Rank 1's tiles 2 and 3 wait for chunk 1: [23,28].
  expect_tile(one_lane, 1, 2, 23, 28, 0);
}

// Sequential: the GEMM waits for the collective (13) + sync 3 + launch 2, then two waves:
// [18,23], [23,28]. Kernel-level: the local tiles' kernel runs [2,7]; the remote one launches
// at max(7, 13 + 3) + 2 = 18 and runs [18,23]. Alone: GEMM 2 + 10 = 12, communication 13.
// Fused on the 2-SM device has one worker (2 less the copy engine's 4 reserved SMs, at least
// 1): [2,7], [7,12], then the remote tiles [13,18], [18,23].
TEST(HandTimeline, SequentialKernelLevelAndAlone) {
  const auto call = two_rank_all_gather({0, 1, 2, 3}, {2, 3, 0, 1});
  const auto p = predict(call, round_calibration());
  EXPECT_NEAR(p.sequential_us, 28, kTol);
  expect_tile(p.sequential, 0, 0, 18, 23, 0);
  expect_tile(p.sequential, 0, 2, 23, 28, 0);
  EXPECT_NEAR(p.kernel_level_us, 23, kTol);
  expect_tile(p.kernel_level, 0, 0, 2, 7, 0);
  expect_tile(p.kernel_level, 0, 2, 18, 23, 0);
  EXPECT_EQ(tile_of(p.kernel_level, 0, 2).kernel, 1);
  EXPECT_NEAR(p.gemm_alone_us, 12, kTol);
  EXPECT_NEAR(p.comm_alone_us, 13, kTol);
  EXPECT_NEAR(p.floor_us, 13, kTol);
  EXPECT_NEAR(p.fused_us, 23, kTol);
}

// Producer side: the fused GEMM has one worker (2 SMs less the producer's 12 reserved, at least
// 1); chunk 0 leaves when rank 0's tiles 0 and 1 are written ([2,7], [7,12]), moves [12,22] and
// lands at 23. Sequential: both GEMMs end at 12, + sync 3 + launch 2 -> [17,27], lands 28.
// Kernel-level: tiles 0,1 form the first kernel [2,7]; the event wait adds 3 -> [10,20], 21.
TEST(HandTimeline, ProducerChunkLeavesAfterItsTiles) {
  const auto p = predict(two_rank_producer(), round_calibration());
  EXPECT_NEAR(p.fused.chunks[0].ready, 12, kTol);
  EXPECT_NEAR(p.fused.chunks[0].arrival, 23, kTol);
  expect_tile(p.fused, 0, 2, 12, 17, 0);
  EXPECT_NEAR(p.fused_us, 23, kTol);
  EXPECT_NEAR(p.sequential.chunks[0].start, 17, kTol);
  EXPECT_NEAR(p.sequential_us, 28, kTol);
  EXPECT_NEAR(p.kernel_level.chunks[0].start, 10, kTol);
  EXPECT_NEAR(p.kernel_level_us, 21, kTol);
}

TEST(HandTimeline, SmCopyTakesAnSmFromCompute) {
  auto call = two_rank_all_gather({0, 1, 2, 3}, {2, 3, 0, 1});
  for (auto& c : call.plan.chunks) c.backend = plan::Backend::sm_copy;
  // Kernel-level: the calibrated 1 SM of the SM-copy kernels; fused: the reserved 20, even on the
  // 6-SM device where the copy engine leaves the fused GEMM 2 workers.
  EXPECT_EQ(compute_workers(call.plan, 0, round_calibration()), 1);
  EXPECT_EQ(fused_workers(call, fused_round_calibration()), 1);
  // One worker: rank 0 runs 0,1 at [2,7],[7,12], then 2,3 (landed at 13): [13,18],[18,23].
  const auto tl = simulate_fused(call, fused_round_calibration());
  expect_tile(tl, 0, 1, 7, 12, 0);
  expect_tile(tl, 0, 3, 18, 23, 0);
}

// The fused grid is the ops' (sim/reserved_sms.hpp) on every rank, whatever the rank issues: on
// a 40-SM device a copy-engine consumer keeps 36, its producer 28 (a reduce-add plan; a staged
// plan leaves the consumer's 4), SM copy 20, NCCL 16; a plan that mixes backends the smallest.
TEST(HandTimeline, FusedWorkersReadTheReservedTable) {
  const auto calib = round_calibration(1.0, 4, 25.6, 40);
  auto consumer = two_rank_all_gather({0, 1, 2, 3}, {2, 3, 0, 1});
  EXPECT_EQ(fused_workers(consumer, calib), 36);
  EXPECT_EQ(fused_workers(two_rank_producer(), calib), 28);
  auto staged = two_rank_producer();
  staged.plan.collective.kind = plan::Collective::reduce_scatter;
  staged.plan.collective.output = "p";  // staged: the epilogue sums, no add kernel beside it
  ASSERT_TRUE(staged.plan.collective.staged());
  EXPECT_EQ(fused_workers(staged, calib), 36);
  for (auto [backend, workers] : {std::pair{plan::Backend::sm_copy, 20}, std::pair{plan::Backend::nccl, 16}}) {
    auto call = consumer;
    for (auto& c : call.plan.chunks) c.backend = backend;
    EXPECT_EQ(fused_workers(call, calib), workers) << plan::to_string(backend);
  }
  consumer.plan.chunks[1].backend = plan::Backend::nccl;
  EXPECT_EQ(fused_workers(consumer, calib), 16);
  EXPECT_EQ(fused_workers(consumer, round_calibration()), 1);  // never none
}

TEST(FairShare, MaxMinWithASharedEgress) {
  // Flows A and B share egress (15); C is alone on its link (10). A = B = 7.5, C = 10.
  const auto rates = detail::max_min_rates({{0, 3}, {1, 3}, {2}}, {10, 10, 10, 15});
  EXPECT_NEAR(rates[0], 7.5, 1e-12);
  EXPECT_NEAR(rates[1], 7.5, 1e-12);
  EXPECT_NEAR(rates[2], 10, 1e-12);
}

TEST(FairShare, BottleneckedFlowLeavesRoomForOthers) {
  // A is held to 2 by its own link; B gets the rest of the shared resource (10 - 2 = 8).
  const auto rates = detail::max_min_rates({{0, 2}, {1, 2}}, {2, 100, 10});
  EXPECT_NEAR(rates[0], 2, 1e-12);
  EXPECT_NEAR(rates[1], 8, 1e-12);
}

TEST(HandTimeline, DeadlockIsReportedNotHung) {
  auto call = two_rank_all_gather({0, 1, 2, 3}, {2, 3, 0, 1});
  call.plan.chunks[0].deps = {1};
  call.plan.chunks[1].deps = {0};
  try {
    simulate_fused(call, round_calibration());
    FAIL() << "a dependency cycle must be refused";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("deadlock"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("chunk 0"), std::string::npos) << e.what();
  }
}

// Run-time row counts (GemmShape::tile_scale): rank 1's tiles 0 and 1 start past their slot's
// count, so they wait for their chunk (lands at 13) and take no time; tiles 2 and 3 then run
// [13,18] instead of [18,23] (FusedRowMajorWaitsInOrder has every tile full).
TEST(HandTimeline, TileScaleSkipsTilesPastTheirCounts) {
  auto call = two_rank_all_gather({0, 1, 2, 3}, {0, 1, 2, 3});
  call.gemm.tile_scale = {{1, 1, 1, 1}, {0, 0, 1, 1}};
  const auto tl = simulate_fused(call, fused_round_calibration());
  expect_tile(tl, 1, 0, 13, 13, 0);
  expect_tile(tl, 1, 1, 13, 13, 1);
  expect_tile(tl, 1, 2, 13, 18, 0);
  expect_tile(tl, 1, 3, 13, 18, 1);
  EXPECT_NEAR(tl.total_us, 18, kTol);
  // Half a tile's work takes half its time.
  call.gemm.tile_scale = {{1, 1, 1, 1}, {1, 1, 0.5, 0.5}};
  const auto half = simulate_fused(call, fused_round_calibration());
  expect_tile(half, 1, 2, 18, 20.5, 0);
}

TEST(HandTimeline, TileScaleOfTheWrongShapeIsRefusedByName) {
  auto call = two_rank_all_gather({0, 1, 2, 3}, {0, 1, 2, 3});
  call.gemm.tile_scale = {{1, 1, 1, 1}};
  EXPECT_THROW(
      {
        try {
          simulate_fused(call, fused_round_calibration());
        } catch (const UserError& e) {
          EXPECT_NE(std::string(e.what()).find("1 rows for a world of 2"), std::string::npos) << e.what();
          throw;
        }
      },
      UserError);
  call.gemm.tile_scale = {{1, 1, 1, 1}, {1, -1, 1, 1}};
  try {
    simulate_sequential(call, fused_round_calibration());
    ADD_FAILURE() << "a negative share was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 tile 1"), std::string::npos) << e.what();
  }
  call.gemm.tile_scale = {{1, 1, 1}, {1, 1, 1, 1}};
  EXPECT_THROW(simulate_gemm_alone(call.gemm, 2, fused_round_calibration()), UserError);
}

}  // namespace
}  // namespace syncopate::sim

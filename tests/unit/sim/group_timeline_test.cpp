// NCCL groups in the simulator, timed by hand with the round calibration (sim_fixtures.hpp: a
// 128 x 1000 bf16 chunk is 256000 bytes, 10 us at 25.6 GB/s, + 1 us latency, after the 2 us
// launch). A group's members start together and share their links; the same chunks ungrouped
// rendezvous one at a time. Also: the H200 prediction of the world-4 NCCL ring all-gather
// against the time NCCL measured for it.
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "sim_fixtures.hpp"
#include "syncopate/plan/templates.hpp"
#include "syncopate/sim/fused_call.hpp"
#include "syncopate/sim/simulator.hpp"

namespace syncopate::sim {
namespace {

using testing::round_calibration;
using testing::rows_chunk;

constexpr double kTol = 1e-6;  // microseconds

plan::Chunk nccl_chunk(int id, std::int64_t row, int src, int dst, int group, std::vector<int> deps = {}) {
  plan::Chunk c = rows_chunk(id, "x", row, src, dst);
  c.backend = plan::Backend::nccl;
  c.group = group;
  c.deps = std::move(deps);
  return c;
}

// Two steps of a 3-rank ring all-gather (rows 128r.. of x belong to rank r), listed as the
// templates list them: per step, rank 0 sends first and ranks 1 and 2 receive first.
plan::CommPlan ring3(bool grouped) {
  plan::CommPlan p;
  p.collective.kind = plan::Collective::all_gather;
  p.collective.tensor = "x";
  p.world_size = 3;
  p.tensors["x"] = {{384, 1000}, plan::DType::bf16, "row-major"};
  const int g0 = grouped ? 0 : plan::kNoGroup, g1 = grouped ? 1 : plan::kNoGroup;
  for (int r = 0; r < 3; ++r) p.chunks.push_back(nccl_chunk(r, 128 * r, r, (r + 1) % 3, g0));
  for (int r = 0; r < 3; ++r)  // step 1: rank r forwards shard r-1, brought by chunk r-1
    p.chunks.push_back(nccl_chunk(3 + r, 128 * ((r + 2) % 3), r, (r + 1) % 3, g1, {(r + 2) % 3}));
  p.ranks = {{0, {{0, 2, 3, 5}}}, {1, {{0, 1, 3, 4}}}, {2, {{1, 2, 4, 5}}}};
  return p;
}

void expect_chunk(const Timeline& tl, int c, double start, double transfer_end, double arrival) {
  EXPECT_NEAR(tl.chunks[c].start, start, kTol) << "chunk " << c;
  EXPECT_NEAR(tl.chunks[c].transfer_end, transfer_end, kTol) << "chunk " << c;
  EXPECT_NEAR(tl.chunks[c].arrival, arrival, kTol) << "chunk " << c;
}

// Grouped: each step's three chunks move together on three different links: [2,12] land 13,
// then step 1 [13,23] land 24.
TEST(GroupTimeline, RingStepsMoveTogether) {
  const auto tl = simulate_comm_alone(ring3(true), round_calibration());
  for (int c = 0; c < 3; ++c) expect_chunk(tl, c, 2, 12, 13);
  for (int c = 3; c < 6; ++c) expect_chunk(tl, c, 13, 23, 24);
  EXPECT_NEAR(tl.total_us, 24, kTol);
}

// Ungrouped: chunk 0 lands at 13; rank 1 receives it before sending chunk 1 (lands 24); rank 2
// receives chunk 1 before sending chunk 2 (35). Step 1 repeats the chain: 46, 57, 68.
TEST(GroupTimeline, UngroupedRingIsAChainOfRendezvous) {
  const auto tl = simulate_comm_alone(ring3(false), round_calibration());
  expect_chunk(tl, 0, 2, 12, 13);
  expect_chunk(tl, 1, 13, 23, 24);
  expect_chunk(tl, 2, 24, 34, 35);
  expect_chunk(tl, 3, 35, 45, 46);
  expect_chunk(tl, 4, 46, 56, 57);
  expect_chunk(tl, 5, 57, 67, 68);
  EXPECT_NEAR(tl.total_us, 68, kTol);
}

// Two chunks 0 -> 1 in one group share the 25.6 GB/s link: 12.8 GB/s each, [2,22], land 23.
// Ungrouped they follow each other: 13, then [13,23] land 24. A third chunk after the group
// starts once both members landed.
TEST(GroupTimeline, MembersOnOneLinkShareItsBandwidth) {
  plan::CommPlan p;
  p.collective.kind = plan::Collective::custom;
  p.world_size = 2;
  p.tensors["x"] = {{384, 1000}, plan::DType::bf16, "row-major"};
  p.chunks = {nccl_chunk(0, 0, 0, 1, 4), nccl_chunk(1, 128, 0, 1, 4), nccl_chunk(2, 256, 0, 1, plan::kNoGroup)};
  p.ranks = {{0, {{0, 1, 2}}}, {1, {{0, 1, 2}}}};
  const auto grouped = simulate_comm_alone(p, round_calibration());
  expect_chunk(grouped, 0, 2, 22, 23);
  expect_chunk(grouped, 1, 2, 22, 23);
  expect_chunk(grouped, 2, 23, 33, 34);
  p.chunks[0].group = p.chunks[1].group = plan::kNoGroup;
  const auto serial = simulate_comm_alone(p, round_calibration());
  expect_chunk(serial, 0, 2, 12, 13);
  expect_chunk(serial, 1, 13, 23, 24);
  expect_chunk(serial, 2, 24, 34, 35);
}

// NCCL's own ring all-gather of A (8192 x 8192 bf16, 4 x H200) takes 0.389 ms
// (measured on nvidia-h200 at world 4; calib/h200.json's sources note it). The plan's grouped ring (3 steps of one 32
// MiB shard, as NCCL's) with calib/h200.json must predict it within 15% (issue #7); ungrouped it was 1.70 ms. Split
// plans are printed, not checked: each sub-chunk is a group of its own on the stream, so they pay the per-call latency
// more often than NCCL's pipelined kernel, and no GPU has timed them yet (the benchmark will).
TEST(GroupTimeline, H200NcclRingAllGatherIsNearTheMeasuredTime) {
  plan::TemplateOptions o;
  o.collective = plan::Collective::all_gather;
  o.world_size = 4;
  o.shape = {8192, 8192};
  o.backend = plan::Backend::nccl;
  const Calibration calib = load_calibration(std::string(SYNCOPATE_SOURCE_DIR) + "/calib/h200.json");
  constexpr double kMeasuredUs = 389.0;
  for (int split : {1, 2, 4}) {
    o.split = split;
    const double predicted = simulate_comm_alone(plan::make_plan(o), calib).total_us;
    std::printf(
        "world 4 NCCL ring all-gather, split %d: predicted %.1f us, NCCL's all-gather measured %.1f us "
        "(%+.1f%%)\n",
        split, predicted, kMeasuredUs, 100.0 * (predicted / kMeasuredUs - 1.0));
    if (split == 1) {
      EXPECT_NEAR(predicted / kMeasuredUs, 1.0, 0.15);
    }
  }
  o.split = 1;
  auto ungrouped = plan::make_plan(o);
  for (auto& c : ungrouped.chunks) c.group = plan::kNoGroup;
  const double serial = simulate_comm_alone(ungrouped, calib).total_us;
  std::printf("the same ring ungrouped (one rendezvous at a time): %.1f us\n", serial);
  EXPECT_GT(serial, 3.5 * kMeasuredUs);
}

// A group's members wait for each other's producer tiles on the rank that issues them: rank 0
// groups {send a, recv b}, rank 1 {recv a, send b}; c (copy engine) is in no group.
TEST(GroupGates, EveryMemberGetsItsGroupsGatesOnEachRank) {
  plan::CommPlan p;
  p.collective.kind = plan::Collective::custom;
  p.world_size = 2;
  p.tensors["x"] = {{384, 1000}, plan::DType::bf16, "row-major"};
  p.chunks = {nccl_chunk(0, 0, 0, 1, 0), nccl_chunk(1, 128, 1, 0, 0), rows_chunk(2, "x", 256, 0, 1)};
  p.ranks = {{0, {{0, 1, 2}}}, {1, {{0, 1}}}};
  using Gates = std::vector<std::pair<int, int>>;
  const std::vector<Gates> gates = {{{0, 3}}, {{0, 5}, {1, 7}}, {{0, 9}}};
  const auto merged = merge_group_gates(p, gates);
  EXPECT_EQ(merged[0], (Gates{{0, 3}, {0, 5}, {1, 7}}));  // + b's gates on rank 0 and on rank 1
  EXPECT_EQ(merged[1], (Gates{{0, 5}, {1, 7}, {0, 3}}));  // + a's gate on rank 0
  EXPECT_EQ(merged[2], gates[2]);
  p.chunks[0].group = p.chunks[1].group = plan::kNoGroup;
  EXPECT_EQ(merge_group_gates(p, gates), gates);
}

}  // namespace
}  // namespace syncopate::sim

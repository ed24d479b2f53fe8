// Plans of sequence-parallel attention (plan/sequence_parallel.hpp) at worlds 1-8: Ulysses'
// all-to-all over heads verified and replayed element by element against the all-to-all promise;
// the ring pass of K/V through a double buffer verified, replayed for races, and followed piece
// by piece in random topological orders (each slot holds the piece of its step when it lands and
// when it is forwarded); the race the double buffer must avoid, planted, is caught; the zig-zag
// gather (the load-balanced causal layout) verified, followed half by half, and its balance.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/core.h>

#include "element_replay.hpp"
#include "syncopate/common/error.hpp"
#include "syncopate/plan/dependency_graph.hpp"
#include "syncopate/plan/sequence_parallel.hpp"
#include "syncopate/plan/verify.hpp"

namespace syncopate::plan {
namespace {

std::string report_text(const VerifyReport& report) {
  std::string out;
  for (const auto& v : report.violations) out += v.format("plan") + "\n";
  return out;
}

bool has_rule(const VerifyReport& report, const std::string& rule) {
  return std::any_of(report.violations.begin(), report.violations.end(),
                     [&](const Violation& v) { return v.rule == rule; });
}

// --- Ulysses ------------------------------------------------------------------------------------

TEST(Ulysses, AllToAllOverHeadsAtWorldsOneToEight) {
  for (int world = 1; world <= 8; ++world)
    for (Algorithm algorithm : {Algorithm::direct, Algorithm::ring, Algorithm::bidir})
      for (Backend backend : {Backend::copy_engine, Backend::nccl}) {
        UlyssesOptions o;
        o.world_size = world;
        o.shape = {2, 2 * world, 3, 4};  // two heads per rank, three positions per rank
        o.algorithm = algorithm;
        o.backend = backend;
        const CommPlan plan = make_ulysses_plan(o);
        const auto where = fmt::format("world {} {} {}", world, to_string(algorithm), to_string(backend));
        EXPECT_EQ(plan.collective.kind, Collective::all_to_all) << where;
        EXPECT_EQ(plan.collective.dim, 1) << where << ": the head dim";
        const VerifyReport report = verify(plan);
        EXPECT_TRUE(report.violations.empty()) << where << "\n" << report_text(report);
        for (unsigned seed = 0; seed < 3; ++seed)
          EXPECT_EQ(element_replay::replay_and_check(plan, seed), std::vector<std::string>{}) << where;
      }
}

TEST(Ulysses, HeadGroupJOfRankRLandsInSlotROfRankJ) {
  UlyssesOptions o;
  o.world_size = 4;
  o.shape = {1, 8, 5, 2};
  const CommPlan plan = make_ulysses_plan(o);
  int found = 0;
  for (const Chunk& c : plan.chunks) {
    EXPECT_EQ(c.box.offset[1], 2 * c.dst) << "the source box is the destination's head group";
    EXPECT_EQ(c.dst_box.offset[1], 2 * c.src) << "it lands in the source rank's slot";
    EXPECT_EQ(c.box.extent[2], 5) << "every position of the piece";
    ++found;
  }
  EXPECT_EQ(found, 16);
}

TEST(Ulysses, RefusesHeadsTheWorldDoesNotDivide) {
  UlyssesOptions o;
  o.world_size = 4;
  o.shape = {1, 6, 8, 64};
  try {
    make_ulysses_plan(o);
    FAIL() << "6 heads on 4 ranks was accepted";
  } catch (const ShapeError& e) {
    EXPECT_EQ(std::string(e.what()),
              "Ulysses: 6 heads (dim 1 of shape 1x6x8x64) cannot be shared by 4 ranks: the world size must "
              "divide the head count (for GQA, the K/V head count too)");
  }
  o.shape = {6, 8, 64};
  EXPECT_THROW(make_ulysses_plan(o), ShapeError);
}

// --- ring pass ----------------------------------------------------------------------------------

// Replays the plan in a random topological order, tracking which piece each slot holds: a slot
// holds -1 until a chunk lands there; a rank's own tensor holds its own piece. Returns problems.
std::vector<std::string> follow_pieces(const CommPlan& plan, unsigned seed) {
  const DependencyGraph graph(plan);
  std::mt19937 rng(seed);
  std::vector<int> indegree(plan.chunks.size());
  std::vector<int> ready;
  for (const Chunk& c : plan.chunks) {
    indegree[c.id] = static_cast<int>(graph.predecessors(c.id).size());
    if (indegree[c.id] == 0) ready.push_back(c.id);
  }
  const std::string piece = plan.collective.tensor, buffer = plan.collective.output;
  std::map<std::pair<int, std::int64_t>, int> slot;  // (rank, slot) -> piece held
  std::vector<std::string> problems;
  int done = 0;
  while (!ready.empty()) {
    const std::size_t pick = std::uniform_int_distribution<std::size_t>(0, ready.size() - 1)(rng);
    const int id = ready[pick];
    ready.erase(ready.begin() + static_cast<std::ptrdiff_t>(pick));
    const Chunk& c = plan.chunks[id];
    const int carried = c.tensor == piece ? c.src : [&] {
      const auto it = slot.find({c.src, c.box.offset[0]});
      return it == slot.end() ? -1 : it->second;
    }();
    // The step of this chunk: its landing slot alternates, and the piece it must carry is fixed.
    const int step = id / plan.world_size + 1;
    const int want = ring_pass_piece(c.dst, step, plan.world_size);
    if (carried != want)
      problems.push_back(fmt::format("chunk {} (step {}, rank {} -> {}) carried piece {}, expected {}", id, step, c.src,
                                     c.dst, carried, want));
    if (c.dst_box.offset[0] != ring_pass_slot(step))
      problems.push_back(
          fmt::format("chunk {} lands in slot {}, expected {}", id, c.dst_box.offset[0], ring_pass_slot(step)));
    slot[{c.dst, c.dst_box.offset[0]}] = carried;
    ++done;
    for (int next : graph.successors(id))
      if (--indegree[next] == 0) ready.push_back(next);
  }
  if (done != static_cast<int>(plan.chunks.size())) problems.push_back("the dependency graph has a cycle");
  return problems;
}

TEST(RingPass, VerifiedAndReplayedAtWorldsOneToEight) {
  for (int world = 1; world <= 8; ++world)
    for (Backend backend : {Backend::copy_engine, Backend::sm_copy, Backend::nccl}) {
      RingPassOptions o;
      o.world_size = world;
      o.shape = {1, 2, 3, 4};
      o.backend = backend;
      const CommPlan plan = make_ring_pass_plan(o);
      const auto where = fmt::format("world {} {}", world, to_string(backend));
      EXPECT_EQ(plan.chunks.size(), static_cast<std::size_t>(world * (world - 1))) << where;
      EXPECT_EQ(plan.tensors.at("kv").shape, (std::vector<std::int64_t>{1, 1, 2, 3, 4})) << where;
      EXPECT_EQ(plan.tensors.at("kv_ring").shape, (std::vector<std::int64_t>{2, 1, 2, 3, 4})) << where;
      const VerifyReport report = verify(plan);
      EXPECT_TRUE(report.violations.empty()) << where << "\n" << report_text(report);
      for (unsigned seed = 0; seed < 5; ++seed) {
        EXPECT_EQ(element_replay::replay(plan, seed).problems, std::vector<std::string>{}) << where;
        EXPECT_EQ(follow_pieces(plan, seed), std::vector<std::string>{}) << where << " seed " << seed;
      }
    }
}

TEST(RingPass, EachStepLandsPieceRankMinusStepInSlotStepModTwo) {
  RingPassOptions o;
  o.world_size = 4;
  o.shape = {8};
  const CommPlan plan = make_ring_pass_plan(o);
  for (const Chunk& c : plan.chunks) {
    const int step = c.id / 4 + 1;
    EXPECT_EQ(c.src, (c.dst + 3) % 4);
    EXPECT_EQ(c.dst_box.offset, (std::vector<std::int64_t>{step % 2, 0}));
    EXPECT_EQ(c.tensor, step == 1 ? "kv" : "kv_ring");
    EXPECT_EQ(c.box.offset[0], step == 1 ? 0 : (step - 1) % 2);
  }
}

// The race the double buffer must avoid: without the dependency of step s on the chunk that
// forwarded the slot's previous piece (step s-1 of the next rank), the write of step s races
// with that read. Copy engine pushes: the two chunks are issued by different ranks, so nothing
// else orders them.
TEST(RingPass, PlantedWriteAfterReadRaceIsCaught) {
  RingPassOptions o;
  o.world_size = 4;
  o.shape = {2, 8};
  CommPlan plan = make_ring_pass_plan(o);
  Chunk& c = plan.chunks[2 * 4 + 1];  // step 3, rank 0 -> rank 1: overwrites slot 1 of rank 1
  ASSERT_EQ(c.deps.size(), 2u);
  const int forward = c.deps[1];  // step 2, rank 1 -> rank 2: forwards slot 1 of rank 1
  ASSERT_EQ(plan.chunks[forward].src, 1);
  c.deps.pop_back();
  const VerifyReport report = verify(plan);
  ASSERT_FALSE(report.violations.empty()) << "the planted race went unnoticed";
  EXPECT_TRUE(has_rule(report, "forward-race")) << report_text(report);
  const auto text = report_text(report);
  EXPECT_NE(text.find(fmt::format("{}", c.id)), std::string::npos) << text;
  EXPECT_NE(text.find("kv_ring"), std::string::npos) << text;
  // The element replay sees the race too, and some order forwards a piece already overwritten.
  bool raced = false, wrong_piece = false;
  for (unsigned seed = 0; seed < 50; ++seed) {
    raced = raced || !element_replay::replay(plan, seed).problems.empty();
    wrong_piece = wrong_piece || !follow_pieces(plan, seed).empty();
  }
  EXPECT_TRUE(raced);
  EXPECT_TRUE(wrong_piece);
}

// A single buffer: step s overwrites the slot the same step forwards from.
TEST(RingPass, PlantedSingleBufferIsCaught) {
  RingPassOptions o;
  o.world_size = 3;
  o.shape = {4};
  CommPlan plan = make_ring_pass_plan(o);
  for (Chunk& c : plan.chunks) {
    c.dst_box.offset[0] = 0;
    if (c.tensor == "kv_ring") c.box.offset[0] = 0;
  }
  const VerifyReport report = verify(plan);
  EXPECT_FALSE(report.violations.empty());
  EXPECT_TRUE(has_rule(report, "forward-race") || has_rule(report, "write-race")) << report_text(report);
}

TEST(RingPass, RefusesBadOptionsByName) {
  RingPassOptions o;
  o.world_size = 0;
  o.shape = {4};
  EXPECT_THROW(make_ring_pass_plan(o), ShapeError);
  o.world_size = 2;
  o.buffer = "kv";
  try {
    make_ring_pass_plan(o);
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_EQ(std::string(e.what()),
              "ring pass: the piece \"kv\" and the double buffer \"kv\" need two distinct names");
  }
  o.buffer = "ring";
  o.shape = {4, 0};
  EXPECT_THROW(make_ring_pass_plan(o), ShapeError);
}

// --- zig-zag gather -----------------------------------------------------------------------------

// Replays the zig-zag gather in a random topological order, tracking which global half-piece
// each half-piece range of each rank's output holds (-1 until a chunk lands there; a rank's own
// tensor holds its two halves). Returns problems: a chunk carrying another half than the one
// its destination range is for, or an output range left empty at the end.
std::vector<std::string> follow_halves(const CommPlan& plan, std::int64_t half, unsigned seed) {
  const DependencyGraph graph(plan);
  std::mt19937 rng(seed);
  std::vector<int> indegree(plan.chunks.size());
  std::vector<int> ready;
  for (const Chunk& c : plan.chunks) {
    indegree[c.id] = static_cast<int>(graph.predecessors(c.id).size());
    if (indegree[c.id] == 0) ready.push_back(c.id);
  }
  const int w = plan.world_size;
  std::map<std::pair<int, std::int64_t>, int> held;  // (rank, half-piece range) -> half held
  std::vector<std::string> problems;
  while (!ready.empty()) {
    const std::size_t pick = std::uniform_int_distribution<std::size_t>(0, ready.size() - 1)(rng);
    const int id = ready[pick];
    ready.erase(ready.begin() + static_cast<std::ptrdiff_t>(pick));
    const Chunk& c = plan.chunks[id];
    const std::int64_t from = c.box.offset[2] / half;
    int carried = -1;
    if (c.tensor == plan.collective.tensor) {
      carried = zigzag_half_piece(c.src, static_cast<int>(from), w);
    } else {
      const auto it = held.find({c.src, from});
      carried = it == held.end() ? -1 : it->second;
    }
    const std::int64_t to = c.dst_box.offset[2] / half;
    if (carried != to)
      problems.push_back(fmt::format("chunk {} (rank {} -> {}) carried half-piece {} into the range of {}", id, c.src,
                                     c.dst, carried, to));
    held[{c.dst, to}] = carried;
    for (int next : graph.successors(id))
      if (--indegree[next] == 0) ready.push_back(next);
  }
  for (int r = 0; r < w; ++r)
    for (int p = 0; p < 2 * w; ++p)
      if (held.find({r, p}) == held.end()) problems.push_back(fmt::format("rank {}: half-piece {} never landed", r, p));
  return problems;
}

TEST(ZigzagGather, VerifiedAndEveryHalfFollowedAtWorldsOneToEight) {
  for (int world = 1; world <= 8; ++world)
    for (Backend backend : {Backend::copy_engine, Backend::sm_copy, Backend::nccl}) {
      ZigzagGatherOptions o;
      o.world_size = world;
      o.shape = {1, 2, 6, 4};  // halves of 3 positions
      o.backend = backend;
      const CommPlan plan = make_zigzag_gather_plan(o);
      const auto where = fmt::format("world {} {}", world, to_string(backend));
      EXPECT_EQ(plan.chunks.size(), static_cast<std::size_t>(2 * world * world)) << where;
      EXPECT_EQ(plan.tensors.at("kv_all").shape, (std::vector<std::int64_t>{1, 2, 6 * world, 4})) << where;
      const VerifyReport report = verify(plan);
      EXPECT_TRUE(report.violations.empty()) << where << "\n" << report_text(report);
      for (unsigned seed = 0; seed < 5; ++seed) {
        EXPECT_EQ(element_replay::replay(plan, seed).problems, std::vector<std::string>{}) << where;
        EXPECT_EQ(follow_halves(plan, 3, seed), std::vector<std::string>{}) << where << " seed " << seed;
      }
    }
}

TEST(ZigzagGather, RankRHoldsHalfPiecesRAndTwoWMinusOneMinusR) {
  ZigzagGatherOptions o;
  o.world_size = 4;
  o.shape = {1, 1, 8, 2};
  const CommPlan plan = make_zigzag_gather_plan(o);
  for (const Chunk& c : plan.chunks) {
    if (c.tensor != "kv") continue;  // the own halves' local copies
    EXPECT_EQ(c.src, c.dst);
    const std::int64_t h = c.box.offset[2] / 4;
    EXPECT_EQ(c.dst_box.offset[2], (h == 0 ? c.src : 7 - c.src) * 4) << "chunk " << c.id;
  }
}

// The point of the layout: with a causal mask every rank's queries see the same number of keys,
// where the contiguous layout gives rank W - 1 about 2W - 1 times rank 0's work.
TEST(ZigzagGather, CausalWorkIsTheSameOnEveryRank) {
  for (int world : {2, 3, 4, 8}) {
    const std::int64_t half = 16, s_loc = 2 * half;
    std::vector<std::int64_t> zigzag, contiguous;
    for (int r = 0; r < world; ++r) {
      std::int64_t pairs = 0, plain = 0;
      for (int h = 0; h < 2; ++h)
        for (std::int64_t i = 0; i < half; ++i) pairs += zigzag_half_piece(r, h, world) * half + i + 1;
      for (std::int64_t i = 0; i < s_loc; ++i) plain += r * s_loc + i + 1;
      zigzag.push_back(pairs);
      contiguous.push_back(plain);
    }
    EXPECT_EQ(std::count(zigzag.begin(), zigzag.end(), zigzag.front()), world) << "world " << world;
    EXPECT_GT(contiguous.back(), contiguous.front()) << "world " << world;
  }
}

// A forward that does not wait for its half to land on its source: the verifier's ordering group
// or the replay sees it, and some order forwards a range that holds nothing yet.
TEST(ZigzagGather, PlantedForwardBeforeLandingIsCaught) {
  ZigzagGatherOptions o;
  o.world_size = 3;
  o.shape = {1, 1, 4, 2};
  CommPlan plan = make_zigzag_gather_plan(o);
  Chunk& c = plan.chunks[2 * 2 * 3 + 1];  // step 2, rank 0, second half: forwarded from rank 2
  ASSERT_EQ(c.deps.size(), 1u);
  c.deps.clear();
  const VerifyReport report = verify(plan);
  bool wrong = false, raced = false;
  for (unsigned seed = 0; seed < 50; ++seed) {
    wrong = wrong || !follow_halves(plan, 2, seed).empty();
    raced = raced || !element_replay::replay(plan, seed).problems.empty();
  }
  EXPECT_TRUE(wrong) << "no order forwarded the half before it landed";
  EXPECT_TRUE(!report.violations.empty() || raced) << "neither the verifier nor the replay noticed";
}

TEST(ZigzagGather, RefusesBadOptionsByName) {
  ZigzagGatherOptions o;
  o.world_size = 2;
  o.shape = {1, 2, 5, 4};
  try {
    make_zigzag_gather_plan(o);
    FAIL() << "an odd S_loc was accepted";
  } catch (const ShapeError& e) {
    EXPECT_EQ(std::string(e.what()),
              "zig-zag gather: shape 1x2x5x4 is not [Z, H, S_loc, D] with S_loc even (each rank holds two "
              "half-pieces of S_loc / 2 positions)");
  }
  o.shape = {2, 4};
  EXPECT_THROW(make_zigzag_gather_plan(o), ShapeError);
  o.shape = {1, 2, 4, 4};
  o.output = "kv";
  EXPECT_THROW(make_zigzag_gather_plan(o), ShapeError);
  o.output = "all";
  o.world_size = 0;
  EXPECT_THROW(make_zigzag_gather_plan(o), ShapeError);
}

}  // namespace
}  // namespace syncopate::plan

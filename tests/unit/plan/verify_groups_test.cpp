// NCCL groups (Chunk::group): the dependency graph treats a group as one simultaneous step, the
// verifier accepts a grouped ring and still reports the ungrouped send-first ring as a deadlock,
// and every group rule names its rank and chunk. Templates emit groups for NCCL only.
#include <algorithm>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "syncopate/plan/dependency_graph.hpp"
#include "syncopate/plan/templates.hpp"
#include "syncopate/plan/verify.hpp"

#include "tiny_plan.hpp"

namespace syncopate::plan {
namespace {

using testing_plans::find_rule;
using testing_plans::TinyPlan;

constexpr auto kNccl = Backend::nccl;

// Ring all-gather of 3 ranks over NCCL, one shard of 2 rows each, step 0 only: chunk r goes
// r -> r+1. Every rank lists its own send first, then the recv from r-1.
TinyPlan send_first_ring(bool grouped) {
  TinyPlan t(Collective::custom, 3, 6);
  for (int r = 0; r < 3; ++r) t.add(r, (r + 1) % 3, 2 * r, 2, ChunkOp::copy, {}, 0, -1, kNccl);
  for (int r = 0; r < 3; ++r) {
    t.plan.ranks[r].streams[0] = {r, (r + 2) % 3};
    if (grouped) t.plan.chunks[r].group = 7;
  }
  return t;
}

std::vector<int> ids(std::span<const int> s) { return {s.begin(), s.end()}; }

// ---------------------------------------------------------------- graph

TEST(GroupGraph, MembersOfAGroupHaveNoEdgeBetweenThem) {
  const TinyPlan t = send_first_ring(true);
  const DependencyGraph g(t.plan);
  for (int a = 0; a < 3; ++a) EXPECT_TRUE(g.successors(a).empty()) << "chunk " << a;
  EXPECT_TRUE(g.topological_order().has_value());
}

TEST(GroupGraph, EveryMemberPrecedesEveryMemberOfTheNextStep) {
  // Rank 0: group {0 send, 1 recv}, then group {2 send, 3 recv}, then a lone local copy 4.
  TinyPlan t(Collective::custom, 2, 8);
  const int s0 = t.add(0, 1, 0, 1, ChunkOp::copy, {}, 0, -1, kNccl);
  const int r0 = t.add(1, 0, 1, 1, ChunkOp::copy, {}, 0, -1, kNccl);
  const int s1 = t.add(0, 1, 2, 1, ChunkOp::copy, {}, 0, -1, kNccl);
  const int r1 = t.add(1, 0, 3, 1, ChunkOp::copy, {}, 0, -1, kNccl);
  const int local = t.add(0, 0, 4, 1);
  for (int c : {s0, r0}) t.plan.chunks[c].group = 0;
  for (int c : {s1, r1}) t.plan.chunks[c].group = 1;
  const DependencyGraph g(t.plan);
  EXPECT_EQ(ids(g.successors(s0)), (std::vector{s1, r1}));
  EXPECT_EQ(ids(g.successors(r0)), (std::vector{s1, r1}));
  EXPECT_EQ(ids(g.predecessors(local)), (std::vector{s1, r1}));
  ASSERT_NE(g.find_edge(r0, s1), nullptr);
  EXPECT_EQ(g.find_edge(r0, s1)->kind, EdgeKind::stream_order);
  const auto steps = issue_steps(t.plan, t.plan.ranks[0].streams[0]);
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps[0].end - steps[0].begin, 2u);
  EXPECT_EQ(steps[2].end - steps[2].begin, 1u);
}

TEST(GroupGraph, ADepOfASentMemberHoldsTheWholeGroupOnTheSendingRank) {
  // Rank 1 groups {recv 1 (from 0), send 2 (to 0)}; chunk 2 forwards chunk 0. Rank 1 issues the
  // group once chunk 0 has landed, so 0 -> 1 is an edge too (group dep); on rank 0, which only
  // receives chunk 2, nothing waits for chunk 0.
  TinyPlan t(Collective::custom, 2, 4);
  const int first = t.add(0, 1, 0, 1, ChunkOp::copy, {}, 0, -1, kNccl);
  const int recv = t.add(0, 1, 1, 1, ChunkOp::copy, {}, 0, -1, kNccl);
  const int fwd = t.add(1, 0, 0, 1, ChunkOp::copy, {first}, 0, -1, kNccl);
  for (int c : {recv, fwd}) t.plan.chunks[c].group = 3;
  const DependencyGraph g(t.plan);
  const DependencyEdge* e = g.find_edge(first, recv);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->kind, EdgeKind::stream_order);  // also listed before the group on both ranks
  // Move chunk 0 to its own stream so that only the group dep orders it before chunk 1.
  t.plan.ranks[0].streams = {{recv, fwd}, {first}};
  t.plan.ranks[1].streams = {{recv, fwd}, {first}};
  t.plan.chunks[first].stream = 1;
  const DependencyGraph g2(t.plan);
  e = g2.find_edge(first, recv);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->kind, EdgeKind::group_dep);
  EXPECT_EQ(e->rank, 1);
  EXPECT_EQ(e->via, fwd);
  EXPECT_EQ(g2.find_edge(first, fwd)->kind, EdgeKind::dep);
}

// ---------------------------------------------------------------- deadlock

TEST(GroupDeadlock, GroupedSendFirstRingIsSafe) {
  const VerifyReport report = verify(send_first_ring(true).plan);
  EXPECT_TRUE(report.ok()) << report.format("ring");
}

TEST(GroupDeadlock, UngroupedSendFirstRingIsStillADeadlock) {
  const VerifyReport report = verify(send_first_ring(false).plan);
  const Violation* v = find_rule(report, "dependency-cycle");
  ASSERT_NE(v, nullptr) << report.format("ring");
  EXPECT_EQ(v->group, RuleGroup::deadlock);
  EXPECT_EQ(v->chunk, 0);
  EXPECT_EQ(v->rank, 0);
  EXPECT_NE(v->detail.find("chunk 0 (rank 0, 0 -> 1) -> (issued after it on rank 0 stream 0) -> chunk 2"),
            std::string::npos)
      << v->detail;
  EXPECT_NE(v->detail.find("give each step's send and recv one group number"), std::string::npos) << v->detail;
}

TEST(GroupDeadlock, GroupsAcrossTwoStepsInOppositeOrderAreACycle) {
  // Rank 0 issues group {a, b} then c; rank 1 issues c first, then a and b (ungrouped): c must
  // land before a on rank 1 and after a on rank 0.
  TinyPlan t(Collective::custom, 2, 4);
  const int a = t.add(0, 1, 0, 1, ChunkOp::copy, {}, 0, -1, kNccl);
  const int b = t.add(1, 0, 1, 1, ChunkOp::copy, {}, 0, -1, kNccl);
  const int c = t.add(0, 1, 2, 1, ChunkOp::copy, {}, 0, -1, kNccl);
  t.plan.chunks[a].group = t.plan.chunks[b].group = 0;
  t.plan.ranks[0].streams[0] = {a, b, c};
  t.plan.ranks[1].streams[0] = {c, a, b};  // on rank 1 the group label still binds a and b
  const VerifyReport report = verify(t.plan);
  const Violation* v = find_rule(report, "dependency-cycle");
  ASSERT_NE(v, nullptr) << report.format("p");
  EXPECT_NE(v->detail.find("issued after its NCCL group"), std::string::npos) << v->detail;
}

TEST(GroupOrdering, ASendAndARecvOfOneGroupTouchingOneBoxRace) {
  // Rank 1 forwards rows 0..1 to rank 0 while, in the same group, rows 0..1 land on rank 1:
  // nothing orders the read before the write.
  TinyPlan t(Collective::custom, 2, 4);
  const int land = t.add(0, 1, 0, 2, ChunkOp::copy, {}, 0, -1, kNccl);
  const int fwd = t.add(1, 0, 0, 2, ChunkOp::copy, {}, 0, -1, kNccl);
  t.plan.chunks[land].group = t.plan.chunks[fwd].group = 0;
  const VerifyReport report = verify(t.plan);
  EXPECT_NE(find_rule(report, "forward-race"), nullptr) << report.format("p");
  // Ungrouped, rank 0 sends first and rank 1 receives first: ordered, no race.
  t.plan.chunks[land].group = t.plan.chunks[fwd].group = kNoGroup;
  EXPECT_EQ(find_rule(verify(t.plan), "forward-race"), nullptr);
}

// ---------------------------------------------------------------- rules

struct RuleCase {
  const char* rule;
  int rank;
  int chunk;
  const char* detail;
};

void expect_rule(const CommPlan& plan, const RuleCase& c) {
  const VerifyReport report = verify(plan);
  bool found = false;
  for (const auto& v : report.violations)
    if (v.rule == c.rule && v.rank == c.rank && v.chunk == c.chunk) {
      found = true;
      EXPECT_EQ(v.group, RuleGroup::well_formed);
      EXPECT_NE(v.detail.find(c.detail), std::string::npos) << v.format("p");
    }
  EXPECT_TRUE(found) << "no " << c.rule << " at rank " << c.rank << ", chunk " << c.chunk << " in:\n"
                     << report.format("p");
}

TEST(GroupRules, OnlyNcclChunksBetweenTwoRanksJoinGroups) {
  TinyPlan t(Collective::custom, 2, 4);
  t.add(0, 1, 0, 1);                                   // copy engine
  t.add(1, 1, 1, 1, ChunkOp::copy, {}, 0, -1, kNccl);  // local NCCL copy
  t.add(0, 1, 2, 1, ChunkOp::copy, {}, 0, -1, kNccl);
  for (auto& c : t.plan.chunks) c.group = 4;
  expect_rule(t.plan, {"group-not-nccl", 0, 0, "uses the copy-engine backend"});
  expect_rule(t.plan, {"group-local-chunk", 1, 1, "is a local copy on rank 1"});
  t.plan.chunks[2].group = -3;
  expect_rule(t.plan, {"group-out-of-range", 0, 2, "group -3 is negative"});
}

TEST(GroupRules, MembersMustBeConsecutive) {
  TinyPlan t(Collective::custom, 2, 4);
  const int a = t.add(0, 1, 0, 1, ChunkOp::copy, {}, 0, -1, kNccl);
  const int b = t.add(0, 1, 1, 1, ChunkOp::copy, {}, 0, -1, kNccl);
  const int c = t.add(1, 0, 2, 1, ChunkOp::copy, {}, 0, -1, kNccl);
  t.plan.chunks[a].group = t.plan.chunks[c].group = 2;
  (void)b;
  // Rank 0 lists a, b, c: group 2 is broken by b. Rank 1 lists the same.
  expect_rule(t.plan, {"group-not-consecutive", 0, c, "after chunk 1 (position 1) broke the group off"});
  expect_rule(t.plan, {"group-not-consecutive", 1, c, "lists chunk 2 of NCCL group 2 at position 2"});
}

TEST(GroupRules, AGroupLivesInOneStream) {
  TinyPlan t(Collective::custom, 2, 4, 2);
  const int a = t.add(0, 1, 0, 1, ChunkOp::copy, {}, 0, -1, kNccl);
  const int b = t.add(1, 0, 1, 1, ChunkOp::copy, {}, 1, -1, kNccl);
  t.plan.chunks[a].group = t.plan.chunks[b].group = 5;
  expect_rule(t.plan, {"group-split-across-streams", 0, b, "in stream 0 and in stream 1"});
}

TEST(GroupRules, AMemberCannotWaitForAnotherMember) {
  TinyPlan t(Collective::custom, 2, 4);
  const int a = t.add(0, 1, 0, 1, ChunkOp::copy, {}, 0, -1, kNccl);
  const int b = t.add(1, 0, 0, 1, ChunkOp::copy, {a}, 0, -1, kNccl);
  t.plan.chunks[a].group = t.plan.chunks[b].group = 0;
  // Rank 1 sends b, which forwards a, in the group that receives a.
  expect_rule(t.plan, {"group-dep-inside-group", 1, b, "chunk 1 depends on chunk 0, but rank 1 issues both"});
}

TEST(GroupRules, HugeChainedGroupsAreRefusedAsTooComplex) {
  // Two ranks exchanging 2 x 1200 chunks in two groups of 1200 each way: 2400 x 2400 edges
  // between the steps on each rank, far over the budget for 9600 listings.
  TinyPlan t(Collective::custom, 2, 4800);
  for (int step = 0; step < 2; ++step)
    for (int i = 0; i < 1200; ++i) {
      const int row = step * 2400 + 2 * i;
      const int s = t.add(0, 1, row, 1, ChunkOp::copy, {}, 0, -1, kNccl);
      const int r = t.add(1, 0, row + 1, 1, ChunkOp::copy, {}, 0, -1, kNccl);
      t.plan.chunks[s].group = t.plan.chunks[r].group = step;
    }
  const VerifyReport report = verify(t.plan);
  const Violation* v = find_rule(report, "groups-too-complex");
  ASSERT_NE(v, nullptr) << report.violations.size();
  EXPECT_NE(v->detail.find("use smaller groups"), std::string::npos);
}

// ---------------------------------------------------------------- templates

TEST(GroupTemplates, NcclStepsAreGroupsOfOneSendAndOneRecvPerRank) {
  for (auto coll : {Collective::all_gather, Collective::reduce_scatter, Collective::all_reduce, Collective::all_to_all})
    for (auto algo : {Algorithm::ring, Algorithm::direct, Algorithm::bidir})
      for (int world : {2, 3, 4, 5})
        for (int split : {1, 2}) {
          TemplateOptions o;
          o.collective = coll;
          o.algorithm = algo;
          o.world_size = world;
          o.split = split;
          o.backend = kNccl;
          o.shape = {std::int64_t{world} * split * 2, 3};
          const CommPlan plan = make_plan(o);
          const std::string name = std::string(to_string(coll)) + "/" + std::string(to_string(algo)) + " w" +
                                   std::to_string(world) + " s" + std::to_string(split);
          const VerifyReport report = verify(plan);
          ASSERT_TRUE(report.ok()) << name << "\n" << report.format(name);
          for (const auto& program : plan.ranks)
            for (const auto& list : program.streams)
              for (const auto& step : issue_steps(plan, list)) {
                const auto& first = plan.chunks[list[step.begin]];
                if (first.src == first.dst) {
                  EXPECT_EQ(first.group, kNoGroup) << name;
                  continue;
                }
                // One send and one recv of this rank (or, at world 2, the pair with the one peer).
                ASSERT_EQ(step.end - step.begin, 2u) << name << " rank " << program.rank;
                const auto& second = plan.chunks[list[step.begin + 1]];
                EXPECT_NE(first.group, kNoGroup) << name;
                EXPECT_EQ((first.src == program.rank) + (second.src == program.rank), 1) << name;
              }
        }
}

TEST(GroupTemplates, OtherBackendsHaveNoGroups) {
  TemplateOptions o;
  o.world_size = 4;
  o.shape = {8, 2};
  for (auto backend : {Backend::copy_engine, Backend::sm_copy}) {
    o.backend = backend;
    for (const auto& c : make_plan(o).chunks) EXPECT_EQ(c.group, kNoGroup);
  }
}

TEST(GroupTemplates, NcclRingIsNoLongerAChainAroundTheRing) {
  // Ungrouped, the world-4 ring made every step a chain of 4 rendezvous; grouped, the longest
  // happens-before path has one chunk per step.
  TemplateOptions o;
  o.world_size = 4;
  o.shape = {8, 2};
  o.backend = kNccl;
  const CommPlan plan = make_plan(o);
  const DependencyGraph g(plan);
  const auto order = g.topological_order();
  ASSERT_TRUE(order.has_value());
  std::vector<int> depth(plan.chunks.size(), 1);
  int longest = 0;
  for (int v : *order) {
    for (int w : g.successors(v)) depth[w] = std::max(depth[w], depth[v] + 1);
    longest = std::max(longest, depth[v]);
  }
  EXPECT_EQ(longest, 3);  // world - 1 steps
}

}  // namespace
}  // namespace syncopate::plan

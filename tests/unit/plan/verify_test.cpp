// The verifier and the dependency graph: template plans verify, valid corner cases (staging,
// unordered reduce-adds, reads ordered before an overwrite) pass, every dropped forwarding dep
// is caught, and the verifier stays fast on real-sized plans.
// (Unsafe and malformed plans with exact expected messages: verify_errors_test.cpp.)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "syncopate/common/error.hpp"
#include "syncopate/plan/dependency_graph.hpp"
#include "syncopate/plan/json.hpp"
#include "syncopate/plan/templates.hpp"
#include "syncopate/plan/verify.hpp"

#include "brute_force_oracles.hpp"
#include "tiny_plan.hpp"

namespace syncopate::plan {
namespace {

using testing_plans::brute_force_coverage;
using testing_plans::brute_force_races;
using testing_plans::find_rule;
using testing_plans::ring_all_gather_3;
using testing_plans::TinyPlan;

// ---------------------------------------------------------------- dependency graph

TEST(DependencyGraph, StreamOrderAndDepsGiveEdges) {
  TinyPlan t(Collective::custom, 2, 4);
  const int a = t.add(0, 1, 0, 1);
  const int b = t.add(0, 1, 1, 1);  // after a on rank 0 stream 0
  const int c = t.add(1, 0, 2, 1, ChunkOp::copy, {a});
  const DependencyGraph g(t.plan);
  ASSERT_EQ(g.size(), 3);
  EXPECT_EQ(std::vector<int>(g.successors(a).begin(), g.successors(a).end()), (std::vector{b, c}));
  EXPECT_EQ(std::vector<int>(g.predecessors(c).begin(), g.predecessors(c).end()), std::vector{a});
  ASSERT_NE(g.find_edge(a, b), nullptr);
  EXPECT_EQ(g.find_edge(a, b)->kind, EdgeKind::stream_order);
  EXPECT_EQ(g.find_edge(a, b)->rank, 0);
  EXPECT_EQ(g.find_edge(a, c)->kind, EdgeKind::dep);
  EXPECT_EQ(g.find_edge(b, c), nullptr);
  EXPECT_EQ(g.find_edge(c, a), nullptr);
}

TEST(DependencyGraph, NcclChunkIsOrderedInBothStreams) {
  TinyPlan t(Collective::custom, 2, 4);
  const int local0 = t.add(0, 0, 0, 1);  // rank 0 stream 0
  const int local1 = t.add(1, 1, 1, 1);  // rank 1 stream 0
  const int send = t.add(0, 1, 2, 1, ChunkOp::copy, {}, 0, -1, Backend::nccl);
  const int after1 = t.add(1, 1, 3, 1);
  const DependencyGraph g(t.plan);
  EXPECT_NE(g.find_edge(local0, send), nullptr);  // the send waits for rank 0's stream
  EXPECT_NE(g.find_edge(local1, send), nullptr);  // and for rank 1's (rendezvous)
  EXPECT_NE(g.find_edge(send, after1), nullptr);
  EXPECT_EQ(g.find_edge(local0, after1), nullptr);
}

TEST(DependencyGraph, TopologicalOrderRespectsEveryEdge) {
  TemplateOptions o;
  o.collective = Collective::all_reduce;
  o.algorithm = Algorithm::bidir;
  o.world_size = 5;
  o.split = 2;
  o.shape = {40, 8};
  const CommPlan plan = make_plan(o);
  const DependencyGraph g(plan);
  const auto order = g.topological_order();
  ASSERT_TRUE(order.has_value());
  ASSERT_EQ(order->size(), plan.chunks.size());
  std::vector<int> position(plan.chunks.size());
  for (std::size_t i = 0; i < order->size(); ++i) position[(*order)[i]] = static_cast<int>(i);
  EXPECT_FALSE(g.edges().empty());
  for (const auto& e : g.edges()) EXPECT_LT(position[e.from], position[e.to]);
  EXPECT_TRUE(g.find_cycle().empty());
  EXPECT_EQ(g.strongly_connected_components().size(), plan.chunks.size());
}

TEST(DependencyGraph, FindCycleListsChunksInEdgeOrder) {
  TinyPlan t(Collective::custom, 3, 8);
  t.add(0, 1, 0, 1);                      // 0: no part of the cycle
  t.add(0, 1, 1, 1, ChunkOp::copy, {3});  // 1 waits for 3
  t.add(1, 2, 2, 1, ChunkOp::copy, {1});  // 2 waits for 1
  t.add(2, 0, 3, 1, ChunkOp::copy, {2});  // 3 waits for 2
  const DependencyGraph g(t.plan);
  EXPECT_FALSE(g.topological_order().has_value());
  EXPECT_EQ(g.find_cycle(), (std::vector{1, 2, 3}));
  EXPECT_EQ(g.shortest_cycle_through(2), (std::vector{2, 3, 1}));
  EXPECT_TRUE(g.shortest_cycle_through(0).empty());
  const auto components = g.strongly_connected_components();
  ASSERT_EQ(components.size(), 2u);
  EXPECT_EQ(components[0], std::vector{0});  // 0 -> 1 by stream order: 0 comes first
  EXPECT_EQ(components[1], (std::vector{1, 2, 3}));
}

TEST(DependencyGraph, SelfDepIsACycleOfOne) {
  TinyPlan t(Collective::custom, 1, 2);
  t.add(0, 0, 0, 1, ChunkOp::copy, {0});
  const DependencyGraph g(t.plan);
  EXPECT_EQ(g.find_cycle(), std::vector{0});
}

TEST(DependencyGraph, SkipsIdsOutOfRange) {
  TinyPlan t(Collective::custom, 1, 2);
  t.add(0, 0, 0, 1, ChunkOp::copy, {7, -1});
  t.plan.ranks[0].streams[0].push_back(42);
  const DependencyGraph g(t.plan);
  EXPECT_EQ(g.size(), 1);
  EXPECT_TRUE(g.edges().empty());
}

// ---------------------------------------------------------------- templates verify

TEST(Verify, EveryTemplateVerifies) {
  int checked = 0;
  for (auto kind : {Collective::all_gather, Collective::reduce_scatter, Collective::all_reduce, Collective::all_to_all})
    for (auto algo : {Algorithm::ring, Algorithm::direct, Algorithm::bidir})
      for (int world : {1, 2, 3, 4, 5, 7, 8})
        for (int split : {1, 2, 4})
          for (auto backend : {Backend::copy_engine, Backend::nccl})
            for (int dim : {0, 1}) {
              TemplateOptions o;
              o.collective = kind;
              o.algorithm = algo;
              o.world_size = world;
              o.split = split;
              o.backend = backend;
              o.dim = dim;
              // 3 elements per piece plus one extra for uneven shards (not for all-to-all).
              const std::int64_t split_size = world * split * 3 + (kind == Collective::all_to_all ? 0 : 1);
              o.shape = dim == 0 ? std::vector<std::int64_t>{split_size, 5} : std::vector<std::int64_t>{5, split_size};
              const CommPlan plan = make_plan(o);
              const auto report = verify(plan);
              EXPECT_TRUE(report.ok()) << to_string(kind) << " " << to_string(algo) << " world " << world << " split "
                                       << split << " " << to_string(backend) << " dim " << dim << ":\n"
                                       << report.format("template");
              ++checked;
            }
  EXPECT_EQ(checked, 4 * 3 * 7 * 3 * 2 * 2);
}

TEST(Verify, RealSizedPlanIsFast) {
  TemplateOptions o;
  o.collective = Collective::all_gather;
  o.algorithm = Algorithm::ring;
  o.world_size = 64;
  o.split = 4;
  o.shape = {8192, 4096};
  const CommPlan plan = make_plan(o);
  ASSERT_GT(plan.chunks.size(), 16000u);
  const auto start = std::chrono::steady_clock::now();
  const auto report = verify(plan);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(report.ok()) << report.format("ag64");
  // A few seconds in a Debug build; the bound leaves room for sanitizers and a busy machine.
  EXPECT_LT(seconds, 30.0) << "verify took " << seconds << " s for " << plan.chunks.size() << " chunks";
  RecordProperty("verify_seconds", fmt::format("{:.2f}", seconds));
}

// ---------------------------------------------------------------- coverage, differentially

// Random small template plans, mutated in ways that keep them well-formed (moved boxes, another
// destination, a flipped op, a repeated chunk, dropped deps); the verifier's coverage verdict
// per rank and its races must equal the brute force's, on the intact and the broken ones.
TEST(Verify, CoverageAndRacesAgreeWithBruteForce) {
  std::mt19937 rng(20261122);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int compared = 0, intact = 0, broken = 0, racy = 0;
  for (int sample = 0; sample < 1500; ++sample) {
    TemplateOptions o;
    o.collective = static_cast<Collective>(pick(0, 3));
    o.algorithm = static_cast<Algorithm>(pick(0, 2));
    o.world_size = pick(1, 4);
    o.split = pick(1, 2);
    const int extra = o.collective == Collective::all_to_all ? 0 : pick(0, 1);
    o.shape = {o.world_size * o.split + extra, 2};
    CommPlan plan = make_plan(o);
    const int mutations = pick(0, 2);
    for (int m = 0; m < mutations && !plan.chunks.empty(); ++m) {
      Chunk& c = plan.chunks[pick(0, static_cast<int>(plan.chunks.size()) - 1)];
      switch (pick(0, 5)) {
        case 0:
          c.dst_box.offset[0] += pick(0, 1) ? 1 : -1;
          break;
        case 5:
          c.deps.clear();
          break;
        case 1:
          c.box.offset[0] += pick(0, 1) ? 1 : -1;
          break;
        case 2:
          c.dst = pick(0, o.world_size - 1);
          break;
        case 3:
          c.op = c.op == ChunkOp::copy ? ChunkOp::reduce_add : ChunkOp::copy;
          break;
        default: {
          Chunk again = c;
          again.id = static_cast<int>(plan.chunks.size());
          again.deps = {c.id};
          plan.ranks[again.src].streams[again.stream].push_back(again.id);
          if (again.backend == Backend::nccl && again.src != again.dst)
            plan.ranks[again.dst].streams[again.stream].push_back(again.id);
          plan.chunks.push_back(again);
        }
      }
    }
    const auto report = verify(plan);
    const bool malformed = std::any_of(report.violations.begin(), report.violations.end(),
                                       [](const Violation& v) { return v.group == RuleGroup::well_formed; });
    const auto order = DependencyGraph(plan).topological_order();
    if (malformed || !order) continue;  // the brute force needs a well-formed, acyclic plan
    std::set<int> flagged;
    for (const auto& v : report.violations)
      if (v.group == RuleGroup::coverage) flagged.insert(v.rank);
    const auto expected = brute_force_coverage(plan, *order);
    ASSERT_EQ(flagged, expected) << "sample " << sample << "\n" << report.format("sample") << plan_to_json(plan);
    std::set<std::tuple<std::string, int, int>> races;
    for (const auto& v : report.violations)
      if (v.group == RuleGroup::ordering) races.insert({v.rule, v.rank, v.chunk});
    ASSERT_EQ(races, brute_force_races(plan)) << "sample " << sample << "\n"
                                              << report.format("sample") << plan_to_json(plan);
    racy += races.empty() ? 0 : 1;
    ++compared;
    ++(expected.empty() ? intact : broken);
  }
  std::printf("compared %d plans: %d intact, %d broken, %d with races\n", compared, intact, broken, racy);
  EXPECT_GT(compared, 1000);
  EXPECT_GT(intact, 200);
  EXPECT_GT(broken, 200);
  EXPECT_GT(racy, 100);
}

// ---------------------------------------------------------------- coverage

TEST(Verify, HandWrittenRingAllGatherVerifies) {
  const auto report = verify(ring_all_gather_3().plan);
  EXPECT_TRUE(report.ok()) << report.format("ring");
}

// All-gather through a staging buffer: rank 0's shard lands in "stage" on rank 1, and rank 1
// copies it into place locally. A 1-d scratch tensor with its own traffic sits beside it.
TEST(Verify, StagingThroughAnotherTensor) {
  TinyPlan t(Collective::all_gather, 2, 4);
  t.plan.collective.dim = 1;  // shards are columns 0..2 and 2..4
  t.plan.tensors["stage"] = t.plan.tensors["x"];
  t.plan.tensors["scratch"] = TensorSpec{{8}, DType::bf16, "row-major"};
  auto move = [&](int src, int dst, const char* from, const char* to, Box box, std::vector<int> deps) {
    Chunk c;
    c.id = static_cast<int>(t.plan.chunks.size());
    c.tensor = from;
    c.dst_tensor = to;
    c.box = c.dst_box = box;
    c.src = src;
    c.dst = dst;
    c.deps = std::move(deps);
    t.plan.chunks.push_back(c);
    t.plan.ranks[src].streams[0].push_back(c.id);
    return c.id;
  };
  const Box shard0{{0, 0}, {4, 2}}, shard1{{0, 2}, {4, 2}};
  const int staged = move(0, 1, "x", "stage", shard0, {});
  move(1, 1, "stage", "x", shard0, {staged});
  move(1, 0, "x", "x", shard1, {});
  move(0, 1, "scratch", "scratch", Box{{0}, {8}}, {});
  auto report = verify(t.plan);
  EXPECT_TRUE(report.ok()) << report.format("staged");

  // Without the dep, the local copy races with the chunk filling the stage.
  t.plan.chunks[1].deps.clear();
  report = verify(t.plan);
  const Violation* v = find_rule(report, "forward-race");
  ASSERT_NE(v, nullptr) << report.format("staged");
  EXPECT_EQ(v->rank, 1);
  EXPECT_NE(v->detail.find("sends stage[0:4, 0:2] from rank 1"), std::string::npos) << v->detail;
}

TEST(Verify, CustomPlansHaveNoCoveragePromise) {
  TinyPlan t(Collective::custom, 2, 4);
  t.add(0, 1, 0, 1);
  EXPECT_TRUE(verify(t.plan).ok());
}

// ---------------------------------------------------------------- ordering

TEST(Verify, UnorderedReduceAddsMayOverlapButCopiesMayNot) {
  TinyPlan adds(Collective::reduce_scatter, 3, 3);
  adds.add(1, 0, 0, 1, ChunkOp::reduce_add);  // both add into rank 0's shard, unordered
  adds.add(2, 0, 0, 1, ChunkOp::reduce_add);
  adds.add(0, 1, 1, 1, ChunkOp::reduce_add);
  adds.add(2, 1, 1, 1, ChunkOp::reduce_add);
  adds.add(0, 2, 2, 1, ChunkOp::reduce_add);
  adds.add(1, 2, 2, 1, ChunkOp::reduce_add);
  EXPECT_TRUE(verify(adds.plan).ok()) << verify(adds.plan).format("rs");

  TinyPlan mixed(Collective::custom, 3, 3);
  mixed.add(1, 0, 0, 1, ChunkOp::reduce_add);
  mixed.add(2, 0, 0, 1, ChunkOp::copy);
  const auto report = verify(mixed.plan);
  const Violation* v = find_rule(report, "write-race");
  ASSERT_NE(v, nullptr) << report.format("t");
  EXPECT_EQ(v->rank, 0);
  EXPECT_EQ(v->chunk, 1);
  EXPECT_NE(v->detail.find("chunks 0 (reduce-add, 1 -> 0) and 1 (copy, 2 -> 0)"), std::string::npos) << v->detail;
}

TEST(Verify, ReadingBeforeAnOrderedOverwriteIsFine) {
  TinyPlan t(Collective::custom, 2, 4, 2);
  const int read = t.add(0, 1, 0, 2);           // rank 0 sends rows 0..2 away
  t.add(1, 0, 0, 2, ChunkOp::copy, {read}, 1);  // then rank 1 overwrites them on rank 0
  EXPECT_TRUE(verify(t.plan).ok()) << verify(t.plan).format("t");

  TinyPlan racy(Collective::custom, 2, 4, 2);
  racy.add(0, 1, 0, 2);
  racy.add(1, 0, 1, 2, ChunkOp::copy, {}, 1);
  const auto report = verify(racy.plan);
  const Violation* v = find_rule(report, "forward-race");
  ASSERT_NE(v, nullptr) << report.format("t");
  EXPECT_EQ(v->rank, 0);
  EXPECT_EQ(v->chunk, 0);
  EXPECT_NE(v->detail.find("sends x[1:2, 0:4] from rank 0"), std::string::npos) << v->detail;
  EXPECT_NE(v->detail.find("add 1 to chunk 0's deps"), std::string::npos) << v->detail;
}

// ---------------------------------------------------------------- report

TEST(Verify, FormatNamesPlanRankChunkGroupAndRule) {
  const Violation v{RuleGroup::coverage, "missing-shard", 2, 17, "details"};
  EXPECT_EQ(v.format("plan.json"), "plan.json: rank 2, chunk 17: coverage/missing-shard: details");
  const Violation global{RuleGroup::well_formed, "world-size", -1, -1, "d"};
  EXPECT_EQ(global.format("p"), "p: well-formed/world-size: d");
  const Violation chunk_only{RuleGroup::well_formed, "chunk-id", -1, 3, "d"};
  EXPECT_EQ(chunk_only.format("p"), "p: chunk 3: well-formed/chunk-id: d");
}

TEST(Verify, VerifyOrThrowRaisesPlanVerifyError) {
  EXPECT_NO_THROW(verify_or_throw(ring_all_gather_3().plan, "ring.json"));
  TinyPlan t = ring_all_gather_3();
  t.plan.chunks[5].dst = 1;
  try {
    verify_or_throw(t.plan, "ring.json");
    FAIL() << "expected PlanVerifyError";
  } catch (const PlanVerifyError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("ring.json: rank 0: coverage/missing-shard"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace syncopate::plan

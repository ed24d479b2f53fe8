// The verifier and the dependency graph: template plans verify, each rule fires on a targeted
// in-memory plan, and the verifier stays fast on real-sized plans.
// (Malformed and unsafe plan files with exact expected messages: verify_errors_test.cpp.)
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "syncopate/common/error.hpp"
#include "syncopate/plan/dependency_graph.hpp"
#include "syncopate/plan/templates.hpp"
#include "syncopate/plan/verify.hpp"

namespace syncopate::plan {
namespace {

// A plan over one tensor "x" of shape rows x 4, every rank with `streams` streams; chunks move
// whole rows. Each chunk is issued by `issuer` (its src unless told otherwise).
struct TinyPlan {
  CommPlan plan;

  TinyPlan(Collective kind, int world, std::int64_t rows, int streams = 1) {
    plan.collective.kind = kind;
    plan.collective.tensor = "x";
    plan.world_size = world;
    plan.tensors["x"] = TensorSpec{{rows, 4}, DType::bf16, "row-major"};
    for (int r = 0; r < world; ++r)
      plan.ranks.push_back({r, std::vector<std::vector<int>>(static_cast<std::size_t>(streams))});
  }
  int add(int src, int dst, std::int64_t row, std::int64_t rows, ChunkOp op = ChunkOp::copy,
          std::vector<int> deps = {}, int stream = 0, int issuer = -1,
          Backend backend = Backend::copy_engine) {
    Chunk c;
    c.id = static_cast<int>(plan.chunks.size());
    c.tensor = c.dst_tensor = "x";
    c.box = c.dst_box = Box{{row, 0}, {rows, 4}};
    c.src = src;
    c.dst = dst;
    c.op = op;
    c.stream = stream;
    c.deps = std::move(deps);
    c.backend = backend;
    plan.chunks.push_back(c);
    if (backend == Backend::nccl && src != dst) {
      plan.ranks[src].streams[stream].push_back(c.id);
      plan.ranks[dst].streams[stream].push_back(c.id);
    } else {
      plan.ranks[issuer < 0 ? src : issuer].streams[stream].push_back(c.id);
    }
    return c.id;
  }
};

// Ring all-gather on 3 ranks, 2 rows per shard: step 0 sends own shards, step 1 forwards.
TinyPlan ring_all_gather_3() {
  TinyPlan t(Collective::all_gather, 3, 6);
  for (int r = 0; r < 3; ++r) t.add(r, (r + 1) % 3, 2 * r, 2);  // chunks 0, 1, 2
  // Rank r forwards shard r-1, brought by chunk (r+2)%3.
  for (int r = 0; r < 3; ++r) t.add(r, (r + 1) % 3, 2 * ((r + 2) % 3), 2, ChunkOp::copy, {(r + 2) % 3});
  return t;
}

const Violation* find_rule(const VerifyReport& report, std::string_view rule) {
  for (const auto& v : report.violations)
    if (v.rule == rule) return &v;
  return nullptr;
}

// ---------------------------------------------------------------- dependency graph

TEST(DependencyGraph, StreamOrderAndDepsGiveEdges) {
  TinyPlan t(Collective::custom, 2, 4);
  const int a = t.add(0, 1, 0, 1);
  const int b = t.add(0, 1, 1, 1);             // after a on rank 0 stream 0
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
  t.add(0, 1, 0, 1);                         // 0: no part of the cycle
  t.add(0, 1, 1, 1, ChunkOp::copy, {3});     // 1 waits for 3
  t.add(1, 2, 2, 1, ChunkOp::copy, {1});     // 2 waits for 1
  t.add(2, 0, 3, 1, ChunkOp::copy, {2});     // 3 waits for 2
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
  for (auto kind : {Collective::all_gather, Collective::reduce_scatter, Collective::all_reduce,
                    Collective::all_to_all})
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
              const std::int64_t split_size =
                  world * split * 3 + (kind == Collective::all_to_all ? 0 : 1);
              o.shape = dim == 0 ? std::vector<std::int64_t>{split_size, 5}
                                 : std::vector<std::int64_t>{5, split_size};
              const CommPlan plan = make_plan(o);
              const auto report = verify(plan);
              EXPECT_TRUE(report.ok())
                  << to_string(kind) << " " << to_string(algo) << " world " << world << " split "
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
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(report.ok()) << report.format("ag64");
  // A few seconds in a Debug build; the bound leaves room for sanitizers and a busy machine.
  EXPECT_LT(seconds, 30.0) << "verify took " << seconds << " s for " << plan.chunks.size()
                           << " chunks";
  RecordProperty("verify_seconds", fmt::format("{:.2f}", seconds));
}

// Removing the dep of any forwarding chunk from a ring or bidir plan must be caught: the
// forward then races with the chunk that brings its data.
TEST(Verify, EveryDroppedForwardingDepIsCaught) {
  for (auto kind : {Collective::all_gather, Collective::reduce_scatter, Collective::all_reduce})
    for (auto algo : {Algorithm::ring, Algorithm::bidir}) {
      TemplateOptions o;
      o.collective = kind;
      o.algorithm = algo;
      o.world_size = 4;
      o.split = 2;
      o.shape = {16, 3};
      const CommPlan plan = make_plan(o);
      int mutated = 0;
      for (std::size_t i = 0; i < plan.chunks.size(); ++i) {
        if (plan.chunks[i].deps.empty()) continue;
        CommPlan broken = plan;
        broken.chunks[i].deps.clear();
        const auto report = verify(broken);
        EXPECT_FALSE(report.ok()) << to_string(kind) << " " << to_string(algo) << " chunk " << i;
        EXPECT_NE(find_rule(report, "forward-race"), nullptr)
            << to_string(kind) << " " << to_string(algo) << " chunk " << i << "\n"
            << report.format("mutant");
        ++mutated;
      }
      EXPECT_GT(mutated, 0);
    }
}

// ---------------------------------------------------------------- coverage

TEST(Verify, HandWrittenRingAllGatherVerifies) {
  const auto report = verify(ring_all_gather_3().plan);
  EXPECT_TRUE(report.ok()) << report.format("ring");
}

TEST(Verify, MissingShardNamesRankRegionAndOwner) {
  TinyPlan t = ring_all_gather_3();
  // Send chunk 5 (rank 2 forwards shard 1 to rank 0) to rank 1 instead: rank 0 lacks shard 1.
  t.plan.chunks[5].dst = 1;
  const auto report = verify(t.plan);
  const Violation* v = find_rule(report, "missing-shard");
  ASSERT_NE(v, nullptr) << report.format("t");
  EXPECT_EQ(v->group, RuleGroup::coverage);
  EXPECT_EQ(v->rank, 0);
  EXPECT_NE(v->detail.find("x[2:4, 0:4]"), std::string::npos) << v->detail;
  EXPECT_NE(v->detail.find("shard 1, owned by rank 1"), std::string::npos) << v->detail;
  // and rank 1 now gets shard 1 written over its own input
  const Violation* own = find_rule(report, "own-shard-overwritten");
  ASSERT_NE(own, nullptr);
  EXPECT_EQ(own->rank, 1);
  EXPECT_EQ(own->chunk, 5);
}

TEST(Verify, ShardDeliveredTwiceNamesBothChunks) {
  TinyPlan t = ring_all_gather_3();
  t.add(1, 2, 2, 2, ChunkOp::copy, {}, 0);  // chunk 6: shard 1 to rank 2 again
  const auto report = verify(t.plan);
  const Violation* v = find_rule(report, "shard-delivered-twice");
  ASSERT_NE(v, nullptr) << report.format("t");
  EXPECT_EQ(v->rank, 2);
  EXPECT_EQ(v->chunk, 6);
  EXPECT_NE(v->detail.find("first by chunk 1, last by chunk 6"), std::string::npos) << v->detail;
}

// Direct reduce-scatter on 2 ranks: each rank adds its partial of the other's shard there.
TEST(Verify, ReduceScatterContributions) {
  TinyPlan ok(Collective::reduce_scatter, 2, 4);
  ok.add(0, 1, 2, 2, ChunkOp::reduce_add);
  ok.add(1, 0, 0, 2, ChunkOp::reduce_add);
  EXPECT_TRUE(verify(ok.plan).ok()) << verify(ok.plan).format("rs");

  TinyPlan twice = ok;
  twice.add(0, 1, 2, 2, ChunkOp::reduce_add, {0});  // rank 0's partial added again
  auto report = verify(twice.plan);
  const Violation* v = find_rule(report, "contribution-counted-twice");
  ASSERT_NE(v, nullptr) << report.format("rs");
  EXPECT_EQ(v->rank, 1);
  EXPECT_EQ(v->chunk, 2);
  EXPECT_NE(v->detail.find("rank 0 2 times"), std::string::npos) << v->detail;

  TinyPlan missing(Collective::reduce_scatter, 2, 4);
  missing.add(1, 0, 0, 2, ChunkOp::reduce_add);
  report = verify(missing.plan);
  v = find_rule(report, "contribution-missing");
  ASSERT_NE(v, nullptr) << report.format("rs");
  EXPECT_EQ(v->rank, 1);
  EXPECT_NE(v->detail.find("lacks the contribution of rank 0"), std::string::npos) << v->detail;
}

TEST(Verify, CopyInsteadOfReduceLosesAContribution) {
  TinyPlan t(Collective::all_reduce, 2, 4);
  // Reduce-scatter by copy: rank 1's shard 1 is overwritten by rank 0's partial.
  const int a = t.add(0, 1, 2, 2, ChunkOp::copy);
  const int b = t.add(1, 0, 0, 2, ChunkOp::reduce_add);
  t.add(0, 1, 0, 2, ChunkOp::copy, {b});  // all-gather: shard 0 from rank 0
  t.add(1, 0, 2, 2, ChunkOp::copy, {a});  // shard 1 from rank 1
  const auto report = verify(t.plan);
  const Violation* v = find_rule(report, "contribution-missing");
  ASSERT_NE(v, nullptr) << report.format("ar");
  EXPECT_NE(v->detail.find("x[2:4, 0:4]"), std::string::npos) << v->detail;
  EXPECT_NE(v->detail.find("rank 1"), std::string::npos) << v->detail;
}

TEST(Verify, AllToAllBlockInTheWrongPlace) {
  TemplateOptions o;
  o.collective = Collective::all_to_all;
  o.algorithm = Algorithm::direct;
  o.world_size = 3;
  o.shape = {6, 2};
  CommPlan plan = make_plan(o);
  ASSERT_TRUE(verify(plan).ok());
  // Find the chunk 0 -> 1 and make it send block 2 of rank 0's input instead of block 1.
  auto it = std::find_if(plan.chunks.begin(), plan.chunks.end(),
                         [](const Chunk& c) { return c.src == 0 && c.dst == 1; });
  ASSERT_NE(it, plan.chunks.end());
  it->box.offset[0] = 4;
  auto report = verify(plan);
  const Violation* v = find_rule(report, "wrong-data");
  ASSERT_NE(v, nullptr) << report.format("a2a");
  EXPECT_EQ(v->rank, 1);
  EXPECT_EQ(v->chunk, it->id);
  EXPECT_NE(v->detail.find("y[0:2, 0:2] on rank 1 should hold block 0, sent by rank 0 from its "
                           "block 1 but holds 'x' of rank 0 moved by (-4, 0)"),
            std::string::npos)
      << v->detail;

  // Landing it in block 2 instead leaves block 0 empty and writes block 2 twice.
  it->box.offset[0] = 2;
  it->dst_box.offset[0] = 4;
  report = verify(plan);
  const Violation* missing = find_rule(report, "missing-shard");
  ASSERT_NE(missing, nullptr) << report.format("a2a");
  EXPECT_NE(missing->detail.find("rank 1 never receives y[0:2, 0:2]"), std::string::npos)
      << missing->detail;
  const Violation* twice = find_rule(report, "shard-delivered-twice");
  ASSERT_NE(twice, nullptr) << report.format("a2a");
  EXPECT_NE(twice->detail.find("y[4:6, 0:2] (block 2, sent by rank 2 from its block 1) 2 times"),
            std::string::npos)
      << twice->detail;
  EXPECT_NE(find_rule(report, "write-race"), nullptr);
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

// A chunk moving a tensor onto itself shifted by one row would cut every row into its own
// cell; past the limit the verifier says it cannot prove coverage instead of running for ages.
TEST(Verify, CellExplosionIsRefusedNotSlow) {
  TinyPlan t(Collective::all_gather, 1, std::int64_t{1} << 20);
  t.add(0, 0, 0, (std::int64_t{1} << 20) - 1);
  t.plan.chunks[0].dst_box.offset[0] = 1;
  const auto start = std::chrono::steady_clock::now();
  const auto report = verify(t.plan);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 20.0);
  const Violation* v = find_rule(report, "coverage-too-complex");
  ASSERT_NE(v, nullptr) << report.format("shift");
  EXPECT_NE(v->detail.find("cannot prove coverage"), std::string::npos) << v->detail;
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
  EXPECT_NE(v->detail.find("chunks 0 (reduce-add, 1 -> 0) and 1 (copy, 2 -> 0)"),
            std::string::npos)
      << v->detail;
}

TEST(Verify, ReadingBeforeAnOrderedOverwriteIsFine) {
  TinyPlan t(Collective::custom, 2, 4, 2);
  const int read = t.add(0, 1, 0, 2);  // rank 0 sends rows 0..2 away
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

TEST(Verify, ManyRacesAreCappedWithASummary) {
  // 40 copies into the same row of rank 1, each on its own stream of rank 0: every pair races.
  TinyPlan wide(Collective::custom, 2, 1, 40);
  for (int i = 0; i < 40; ++i) wide.add(0, 1, 0, 1, ChunkOp::copy, {}, i);
  const auto report = verify(wide.plan);
  // 40 * 39 / 2 = 780 racing pairs: 500 listed, then one summary line.
  long races = std::count_if(report.violations.begin(), report.violations.end(),
                             [](const Violation& v) { return v.rule == "write-race"; });
  EXPECT_EQ(races, 501);
  EXPECT_NE(report.violations.back().detail.find("280 more violations of this rule not listed"),
            std::string::npos)
      << report.violations.back().detail;
}

// 1400 unordered copies, each over half of the tensor: almost a million racing pairs. The report keeps
// 500 per rule and a count, and the run stays short.
TEST(Verify, HostileOverlapStaysBounded) {
  constexpr int n = 1400;
  TinyPlan t(Collective::all_gather, 2, 2 * n, n);
  for (int i = 0; i < n; ++i) t.add(0, 1, i, n, ChunkOp::copy, {}, i, 1);
  const auto start = std::chrono::steady_clock::now();
  const auto report = verify(t.plan);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 30.0);
  EXPECT_LT(report.violations.size(), 2000u);
  const auto summary = std::find_if(report.violations.begin(), report.violations.end(),
                                    [](const Violation& v) {
                                      return v.rule == "write-race" && v.chunk < 0;
                                    });
  ASSERT_NE(summary, report.violations.end()) << report.format("hostile").substr(0, 2000);
  EXPECT_NE(summary->detail.find("more violations of this rule not listed (979300 in all)"),
            std::string::npos)
      << summary->detail;
}

// ---------------------------------------------------------------- deadlock

TEST(Verify, TwoRanksWaitingOnEachOtherIsACycle) {
  TinyPlan t(Collective::custom, 2, 4);
  t.add(0, 1, 0, 1, ChunkOp::copy, {1});
  t.add(1, 0, 1, 1, ChunkOp::copy, {0});
  const auto report = verify(t.plan);
  const Violation* v = find_rule(report, "dependency-cycle");
  ASSERT_NE(v, nullptr) << report.format("t");
  EXPECT_EQ(v->group, RuleGroup::deadlock);
  EXPECT_EQ(v->rank, 0);
  EXPECT_EQ(v->chunk, 0);
  EXPECT_NE(v->detail.find("chunk 0 (rank 0, 0 -> 1)"), std::string::npos) << v->detail;
  EXPECT_NE(v->detail.find("chunk 1 (rank 1, 1 -> 0)"), std::string::npos) << v->detail;
}

TEST(Verify, NcclOrderMismatchNamesBothOrders) {
  TinyPlan t(Collective::custom, 2, 4);
  t.add(0, 1, 0, 1, ChunkOp::copy, {}, 0, -1, Backend::nccl);
  t.add(0, 1, 1, 1, ChunkOp::copy, {}, 0, -1, Backend::nccl);
  std::swap(t.plan.ranks[1].streams[0][0], t.plan.ranks[1].streams[0][1]);
  const auto report = verify(t.plan);
  const Violation* v = find_rule(report, "nccl-order-mismatch");
  ASSERT_NE(v, nullptr) << report.format("t");
  EXPECT_EQ(v->rank, 0);
  EXPECT_EQ(v->chunk, 0);
  EXPECT_NE(v->detail.find("rank 0 stream 0 sends chunks 0, 1 to rank 1 but rank 1 receives 1, 0"),
            std::string::npos)
      << v->detail;
  EXPECT_NE(find_rule(report, "dependency-cycle"), nullptr);  // the rendezvous also deadlocks
}

// ---------------------------------------------------------------- report

TEST(Verify, WellFormedErrorsAreAllReportedAndStopLaterGroups) {
  TinyPlan t = ring_all_gather_3();
  t.plan.chunks[1].src = 9;
  t.plan.chunks[4].deps = {99};
  t.plan.chunks[5].dst = 1;  // a coverage problem, not reported while the plan is malformed
  const auto report = verify(t.plan);
  ASSERT_EQ(report.violations.size(), 2u) << report.format("t");
  EXPECT_EQ(report.violations[0].rule, "rank-out-of-range");
  EXPECT_EQ(report.violations[0].chunk, 1);
  EXPECT_EQ(report.violations[1].rule, "unknown-dep");
  EXPECT_EQ(report.violations[1].chunk, 4);
  for (const auto& v : report.violations) EXPECT_EQ(v.group, RuleGroup::well_formed);
}

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
    EXPECT_NE(what.find("ring.json: rank 0: coverage/missing-shard"), std::string::npos)
        << what;
  }
}

}  // namespace
}  // namespace syncopate::plan

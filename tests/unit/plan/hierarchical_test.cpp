// Multi-node plans: hierarchical templates (every collective x intra-node algorithm x nodes x
// GPUs per node x split x backend) verify and replay element by element; every chunk between
// nodes is NCCL and rail-aligned; intra-node forwards wait on exactly the NCCL sub-chunk they
// forward; uneven nodes are refused for hierarchical plans and handled by flat NCCL plans; the
// verifier refuses copy-engine and SM-copy chunks between nodes.
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "element_replay.hpp"
#include "syncopate/common/error.hpp"
#include "syncopate/plan/json.hpp"
#include "syncopate/plan/templates.hpp"
#include "syncopate/plan/verify.hpp"

namespace syncopate::plan {
namespace {

struct Case {
  Collective collective;
  Algorithm algorithm;
  int nodes;
  int per_node;
  int split;
  Backend backend;
};

TemplateOptions options_for(const Case& c) {
  TemplateOptions o;
  o.collective = c.collective;
  o.algorithm = c.algorithm;
  o.world_size = c.nodes * c.per_node;
  o.nodes = consecutive_nodes(o.world_size, c.nodes);
  o.split = c.split;
  o.backend = c.backend;
  const std::int64_t w = o.world_size;
  // Uneven shards where allowed (the first shards get one more element).
  const std::int64_t n = c.collective == Collective::all_to_all ? w * (c.split + 1) : w * c.split + w - 1;
  o.shape = {n, 2};
  return o;
}

int local_rank(const CommPlan& plan, int rank) {
  int l = 0;
  for (int r = 0; r < rank; ++r)
    l += plan.nodes[static_cast<std::size_t>(r)] == plan.nodes[static_cast<std::size_t>(rank)];
  return l;
}

class Hierarchical : public ::testing::TestWithParam<Case> {};

TEST_P(Hierarchical, VerifiesAndReplaysElementByElement) {
  const CommPlan plan = make_plan(options_for(GetParam()));
  const VerifyReport report = verify(plan);
  ASSERT_TRUE(report.ok()) << report.format("hierarchical");
  for (unsigned seed = 1; seed <= 2; ++seed) {
    const auto wrong = element_replay::replay_and_check(plan, seed);
    ASSERT_TRUE(wrong.empty()) << "seed " << seed << ": " << fmt::format("{}", fmt::join(wrong, "\n"));
  }
}

TEST_P(Hierarchical, CrossesNodesOnlyOverNcclAlongRails) {
  const Case c = GetParam();
  const CommPlan plan = make_plan(options_for(c));
  ASSERT_EQ(plan.nodes, consecutive_nodes(c.nodes * c.per_node, c.nodes));
  const int inter_stream = c.algorithm == Algorithm::bidir ? 2 : 1;
  int crossing = 0;
  for (const Chunk& chunk : plan.chunks) {
    const bool between_nodes = node_of(plan, chunk.src) != node_of(plan, chunk.dst);
    if (!between_nodes) {
      EXPECT_EQ(chunk.backend, c.backend) << "chunk " << chunk.id;
      EXPECT_NE(chunk.stream, inter_stream) << "chunk " << chunk.id << " inside a node on the inter-node stream";
      continue;
    }
    ++crossing;
    EXPECT_EQ(chunk.backend, Backend::nccl) << "chunk " << chunk.id;
    EXPECT_EQ(chunk.stream, inter_stream) << "chunk " << chunk.id;
    EXPECT_EQ(local_rank(plan, chunk.src), local_rank(plan, chunk.dst)) << "chunk " << chunk.id << " leaves its rail";
    EXPECT_NE(chunk.group, kNoGroup) << "chunk " << chunk.id;
  }
  // Each rank exchanges every sub-chunk with each of its N-1 rail peers (all-to-all: G blocks
  // each way; all-reduce: both halves).
  const std::int64_t per_rank = std::int64_t{c.nodes - 1} * c.split;
  std::int64_t want = per_rank * c.nodes * c.per_node;
  if (c.collective == Collective::all_to_all) want *= c.per_node;
  if (c.collective == Collective::all_reduce) want *= 2;
  EXPECT_EQ(crossing, want);
}

// Sub-chunks pipeline: an intra-node chunk that forwards data from another node waits on the
// one NCCL chunk that brought that very sub-chunk, never on a whole shard.
TEST_P(Hierarchical, ForwardsWaitOnTheirOwnNcclSubChunk) {
  const Case c = GetParam();
  if (c.collective == Collective::reduce_scatter || c.per_node == 1) return;  // no forwarding of arrivals
  const CommPlan plan = make_plan(options_for(c));
  int forwards = 0;
  for (const Chunk& chunk : plan.chunks) {
    if (node_of(plan, chunk.src) != node_of(plan, chunk.dst)) continue;
    for (int d : chunk.deps) {
      const Chunk& dep = plan.chunks[static_cast<std::size_t>(d)];
      if (node_of(plan, dep.src) == node_of(plan, dep.dst) || dep.op != ChunkOp::copy) continue;
      ++forwards;
      EXPECT_EQ(dep.dst, chunk.src) << "chunk " << chunk.id << " waits on NCCL chunk " << d << " landing elsewhere";
      EXPECT_EQ(dep.dst_box, chunk.box) << "chunk " << chunk.id << " waits on NCCL chunk " << d << " of another piece";
      EXPECT_EQ(dep.dst_tensor, chunk.tensor) << "chunk " << chunk.id;
    }
  }
  EXPECT_GT(forwards, 0);
}

TEST_P(Hierarchical, RoundTripsThroughJson) {
  const CommPlan plan = make_plan(options_for(GetParam()));
  EXPECT_EQ(parse_plan(plan_to_json(plan), "plan.json"), plan);
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (auto coll : {Collective::all_gather, Collective::reduce_scatter, Collective::all_reduce, Collective::all_to_all})
    for (auto algo : {Algorithm::ring, Algorithm::direct, Algorithm::bidir})
      for (auto [nodes, per_node] : {std::pair{2, 2}, {2, 4}, {4, 2}, {2, 8}, {3, 1}})
        for (int split : {1, 2})
          for (auto backend : {Backend::copy_engine, Backend::nccl})
            cases.push_back({coll, algo, nodes, per_node, split, backend});
  return cases;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::string name = fmt::format("{}_{}_{}x{}_s{}_{}", to_string(c.collective), to_string(c.algorithm), c.nodes,
                                 c.per_node, c.split, to_string(c.backend));
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

INSTANTIATE_TEST_SUITE_P(Templates, Hierarchical, ::testing::ValuesIn(all_cases()), case_name);

// ---------------------------------------------------------------- uneven nodes, flat plans

const std::vector<int> kUnevenNodes{0, 0, 0, 1, 1, 2};  // 3 nodes of 3, 2 and 1 GPUs

TEST(HierarchicalTopology, UnevenNodesAreRefusedNamingThem) {
  TemplateOptions o;
  o.collective = Collective::all_gather;
  o.world_size = 6;
  o.nodes = kUnevenNodes;
  o.shape = {12, 2};
  try {
    make_plan(o);
    FAIL() << "uneven nodes accepted";
  } catch (const ShapeError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("nodes of uneven size: node 0 has 3 ranks but node 1 has 2"), std::string::npos) << what;
    EXPECT_NE(what.find("make a flat NCCL plan instead"), std::string::npos) << what;
  }
}

TEST(HierarchicalTopology, FlatNcclPlansHandleUnevenNodes) {
  for (auto coll : {Collective::all_gather, Collective::reduce_scatter, Collective::all_reduce, Collective::all_to_all})
    for (auto algo : {Algorithm::ring, Algorithm::direct, Algorithm::bidir}) {
      TemplateOptions o;
      o.collective = coll;
      o.algorithm = algo;
      o.world_size = 6;
      o.nodes = kUnevenNodes;
      o.flat = true;
      o.backend = Backend::nccl;
      o.split = 2;
      o.shape = {24, 2};
      const CommPlan plan = make_plan(o);
      EXPECT_EQ(plan.nodes, kUnevenNodes);
      const VerifyReport report = verify(plan);
      EXPECT_TRUE(report.ok()) << report.format("flat");
      const auto wrong = element_replay::replay_and_check(plan, 1);
      EXPECT_TRUE(wrong.empty()) << fmt::format("{}", fmt::join(wrong, "\n"));
    }
}

TEST(HierarchicalTopology, FlatCopyEngineAcrossNodesIsRefused) {
  TemplateOptions o;
  o.world_size = 4;
  o.nodes = consecutive_nodes(4, 2);
  o.flat = true;
  o.shape = {8, 2};
  try {
    make_plan(o);
    FAIL() << "flat copy-engine plan across nodes accepted";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("a flat plan across 2 nodes needs backend nccl"), std::string::npos)
        << e.what();
  }
}

// The verifier's rule, on a flat copy-engine plan given a two-node topology afterwards: every
// chunk between the nodes is named with its ranks and their nodes, the others pass.
TEST(HierarchicalTopology, VerifierRefusesEveryCrossNodeCopyChunk) {
  TemplateOptions o;
  o.collective = Collective::all_gather;
  o.algorithm = Algorithm::direct;
  o.world_size = 4;
  o.shape = {8, 2};
  o.backend = Backend::sm_copy;
  CommPlan plan = make_plan(o);
  plan.nodes = {0, 0, 1, 1};
  const VerifyReport report = verify(plan);
  int crossing = 0;
  for (const Chunk& c : plan.chunks) crossing += (c.src < 2) != (c.dst < 2);
  ASSERT_EQ(static_cast<int>(report.violations.size()), crossing) << report.format("plan");
  for (const Violation& v : report.violations) {
    EXPECT_EQ(v.rule, "cross-node-chunk");
    EXPECT_EQ(v.group, RuleGroup::well_formed);
    const Chunk& c = plan.chunks[static_cast<std::size_t>(v.chunk)];
    EXPECT_EQ(v.rank, c.src);
    EXPECT_NE(
        v.detail.find(fmt::format("from rank {} on node {} to rank {} on node {}", c.src, c.src / 2, c.dst, c.dst / 2)),
        std::string::npos)
        << v.detail;
  }
  plan.nodes = {0, 0, 0, 0};  // one node named explicitly: fine
  EXPECT_TRUE(verify(plan).ok());
}

TEST(HierarchicalTopology, ConsecutiveNodesFollowTorchrunNumbering) {
  EXPECT_EQ(consecutive_nodes(8, 2), (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(consecutive_nodes(4, 4), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_THROW(consecutive_nodes(6, 4), ShapeError);
  EXPECT_EQ(node_count({}), 1);
  EXPECT_EQ(node_count({3, 3, 7}), 2);
}

// Node ids need not be consecutive ranks: rail = position within the node, whatever the ids.
TEST(HierarchicalTopology, InterleavedNodesStayRailAligned) {
  TemplateOptions o;
  o.collective = Collective::all_reduce;
  o.algorithm = Algorithm::ring;
  o.world_size = 4;
  o.nodes = {5, 2, 5, 2};  // node 2: ranks 1, 3; node 5: ranks 0, 2
  o.split = 2;
  o.shape = {11, 3};
  const CommPlan plan = make_plan(o);
  ASSERT_TRUE(verify(plan).ok()) << verify(plan).format("plan");
  EXPECT_TRUE(element_replay::replay_and_check(plan, 7).empty());
  for (const Chunk& c : plan.chunks) {
    if (o.nodes[static_cast<std::size_t>(c.src)] == o.nodes[static_cast<std::size_t>(c.dst)]) continue;
    EXPECT_EQ(c.src / 2, c.dst / 2) << "chunk " << c.id << " leaves its rail";  // rails {0,1}, {2,3}
  }
}

TEST(HierarchicalTopology, StagingAcrossNodesMustBeFlat) {
  TemplateOptions o;
  o.collective = Collective::reduce_scatter;
  o.algorithm = Algorithm::direct;
  o.world_size = 4;
  o.nodes = consecutive_nodes(4, 2);
  o.shape = {1, 8, 2};
  o.dim = 1;
  o.staging = "p";
  EXPECT_THROW(make_plan(o), ShapeError);
  o.flat = true;
  o.backend = Backend::nccl;
  EXPECT_TRUE(verify(make_plan(o)).ok());
}

}  // namespace
}  // namespace syncopate::plan

namespace syncopate::plan {
namespace {

// A chunk inside node 0 that waits for a chunk landing on node 1: nobody on node 0 can read
// that landing signal.
TEST(HierarchicalTopology, VerifierRefusesADepOnlyAnotherNodeCanSee) {
  TemplateOptions o;
  o.collective = Collective::all_gather;
  o.world_size = 4;
  o.nodes = consecutive_nodes(4, 2);
  o.shape = {8, 2};
  CommPlan plan = make_plan(o);
  ASSERT_TRUE(verify(plan).ok());
  auto first = [&](int from_id, bool on_node_one) {  // first intra-node chunk of that node from an id on
    for (const Chunk& c : plan.chunks)
      if (c.id >= from_id && (c.src >= 2) == on_node_one && (c.dst >= 2) == on_node_one) return c.id;
    return -1;
  };
  const int elsewhere = first(0, true);
  ASSERT_GE(elsewhere, 0);
  const int inside = first(elsewhere + 1, false);
  ASSERT_GE(inside, 0);
  Chunk& later = plan.chunks[static_cast<std::size_t>(inside)];
  const Chunk& earlier = plan.chunks[static_cast<std::size_t>(elsewhere)];
  later.deps.push_back(earlier.id);
  const VerifyReport report = verify(plan);
  const auto it = std::find_if(report.violations.begin(), report.violations.end(),
                               [](const Violation& v) { return v.rule == "dep-off-node"; });
  ASSERT_NE(it, report.violations.end()) << report.format("plan");
  EXPECT_EQ(it->chunk, later.id);
  EXPECT_NE(it->detail.find(fmt::format("depends on chunk {}, which lands on rank {} on node {}", earlier.id,
                                        earlier.dst, node_of(plan, earlier.dst))),
            std::string::npos)
      << it->detail;
}

}  // namespace
}  // namespace syncopate::plan

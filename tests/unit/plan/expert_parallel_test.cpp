// The MoE dispatch plan (plan/expert_parallel.hpp) and run-time row counts (Chunk::runtime_rows):
// verified at worlds 1-8 with 1-3 local experts and capacities 1 and 3; replayed in random
// execution orders with random counts (empty experts and full capacity included), each rows
// chunk finding on its destination the count its sender meant; JSON round trip; every
// run-time-rows rule of the verifier triggered by a planted fault and named in the report.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "syncopate/common/error.hpp"
#include "syncopate/plan/dependency_graph.hpp"
#include "syncopate/plan/expert_parallel.hpp"
#include "syncopate/plan/import.hpp"
#include "syncopate/plan/json.hpp"
#include "syncopate/plan/verify.hpp"

namespace syncopate::plan {
namespace {

std::string report_text(const VerifyReport& report) { return report.format("plan"); }

const Violation* find_rule(const VerifyReport& report, const std::string& rule) {
  for (const auto& v : report.violations)
    if (v.rule == rule) return &v;
  return nullptr;
}

MoeDispatchOptions options(int world, int experts, std::int64_t capacity, Backend backend = Backend::copy_engine) {
  MoeDispatchOptions o;
  o.world_size = world;
  o.local_experts = experts;
  o.capacity = capacity;
  o.hidden = 4;
  o.backend = backend;
  return o;
}

// A random execution order of the dependency graph (Kahn's algorithm, random ready chunk).
std::vector<int> random_order(const CommPlan& plan, std::mt19937& rng) {
  const DependencyGraph graph(plan);
  std::vector<int> missing(static_cast<std::size_t>(graph.size()));
  for (int c = 0; c < graph.size(); ++c) missing[c] = static_cast<int>(graph.predecessors(c).size());
  std::vector<int> ready, order;
  for (int c = 0; c < graph.size(); ++c)
    if (missing[c] == 0) ready.push_back(c);
  while (!ready.empty()) {
    std::uniform_int_distribution<std::size_t> pick(0, ready.size() - 1);
    const std::size_t at = pick(rng);
    const int c = ready[at];
    ready.erase(ready.begin() + static_cast<std::ptrdiff_t>(at));
    order.push_back(c);
    for (int next : graph.successors(c))
      if (--missing[next] == 0) ready.push_back(next);
  }
  return order;
}

TEST(MoeDispatchPlan, VerifiedAtWorldsOneToEight) {
  for (int world = 1; world <= 8; ++world)
    for (int experts : {1, 2, 3})
      for (std::int64_t capacity : {1, 3})
        for (Backend backend : {Backend::copy_engine, Backend::sm_copy, Backend::nccl}) {
          const CommPlan plan = make_moe_dispatch_plan(options(world, experts, capacity, backend));
          const auto where =
              fmt::format("world {} experts {} capacity {} {}", world, experts, capacity, to_string(backend));
          const VerifyReport report = verify(plan);
          EXPECT_TRUE(report.ok()) << where << "\n" << report_text(report);
          ASSERT_EQ(plan.chunks.size(), static_cast<std::size_t>(world * world * (1 + experts))) << where;
          for (int s = 0; s < world; ++s)
            for (int r = 0; r < world; ++r) {
              const Chunk& counts = plan.chunks[moe_counts_chunk(world, experts, s, r)];
              EXPECT_EQ(counts.src, s) << where;
              EXPECT_EQ(counts.dst, r) << where;
              EXPECT_EQ(counts.dst_tensor, kMoeRecvCounts) << where;
              for (int e = 0; e < experts; ++e) {
                const Chunk& rows = plan.chunks[moe_rows_chunk(world, experts, s, r, e)];
                EXPECT_EQ(rows.src, s) << where;
                EXPECT_EQ(rows.dst, r) << where;
                EXPECT_EQ(rows.dst_box.offset, (std::vector<std::int64_t>{(s * experts + e) * capacity, 0})) << where;
                EXPECT_EQ(rows.dst_box.extent[0], capacity) << where;
                EXPECT_EQ(rows.box.offset[0], (r * experts + e) * capacity) << where;
                ASSERT_TRUE(rows.runtime_rows.has_value()) << where;
                EXPECT_EQ(rows.runtime_rows->index, s * experts + e) << where;
                // NCCL between two ranks: ordered by the receiver's stream (counts group first).
                if (backend == Backend::nccl && s != r)
                  EXPECT_TRUE(rows.deps.empty()) << where;
                else
                  EXPECT_EQ(rows.deps, std::vector<int>{counts.id}) << where;
              }
            }
          // Local rows first: each rank's stream opens with its own counts, then its own rows.
          for (int r = 0; r < world; ++r)
            EXPECT_EQ(plan.ranks[r].streams[0].front(), moe_counts_chunk(world, experts, r, r)) << where;
        }
}

// Any counts up to capacity: in random execution orders, when a rows chunk lands, the count it
// reads on its destination is the one its sender wrote for that expert, this call's.
TEST(MoeDispatchPlan, EveryRowsChunkReadsItsSendersCountInAnyOrder) {
  std::mt19937 rng(19);
  for (Backend backend : {Backend::copy_engine, Backend::nccl})
    for (int world : {1, 2, 3, 5, 8})
      for (int experts : {1, 3}) {
        const std::int64_t capacity = 3;
        const CommPlan plan = make_moe_dispatch_plan(options(world, experts, capacity, backend));
        for (int call = 0; call < 4; ++call) {
          // send[r][j][e]: rows rank r routes to expert e of rank j (0 = an empty expert).
          std::uniform_int_distribution<int> count(0, static_cast<int>(capacity));
          std::vector<std::vector<std::vector<int>>> send(
              world, std::vector<std::vector<int>>(world, std::vector<int>(experts)));
          for (auto& a : send)
            for (auto& b : a)
              for (int& n : b) n = count(rng);
          // recv[j][s][e] as each rank holds it: last call's values (-1) until the counts chunk lands.
          std::vector<std::vector<std::vector<int>>> recv(
              world, std::vector<std::vector<int>>(world, std::vector<int>(experts, -1)));
          for (int c : random_order(plan, rng)) {
            const Chunk& chunk = plan.chunks[c];
            if (chunk.tensor == kMoeSendCounts) {
              for (int e = 0; e < experts; ++e) recv[chunk.dst][chunk.src][e] = send[chunk.src][chunk.dst][e];
              continue;
            }
            const auto index = chunk.runtime_rows->index;
            const int seen = recv[chunk.dst][index / experts][index % experts];
            const int e = static_cast<int>(chunk.box.offset[0] / capacity) % experts;
            EXPECT_EQ(seen, send[chunk.src][chunk.dst][e])
                << fmt::format("world {} chunk {} ({} -> {}, expert {})", world, c, chunk.src, chunk.dst, e);
          }
        }
      }
}

TEST(MoeDispatchPlan, JsonRoundTripKeepsRuntimeRows) {
  const CommPlan plan = make_moe_dispatch_plan(options(3, 2, 5));
  const std::string text = plan_to_json(plan);
  EXPECT_NE(text.find(R"("runtime_rows":{"dim":0,"counts":"recv_counts","index":)"), std::string::npos);
  EXPECT_EQ(parse_plan(text, "moe.json"), plan);
}

TEST(MoeDispatchPlan, JsonRefusesUnknownRuntimeRowsKeyByPath) {
  std::string text = plan_to_json(make_moe_dispatch_plan(options(2, 1, 2)));
  const std::string key = R"("counts":"recv_counts")";
  text.replace(text.find(key), key.size(), key + R"(,"stride":4)");
  try {
    parse_plan(text, "moe.json");
    FAIL() << "an unknown key was accepted";
  } catch (const PlanParseError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("runtime_rows"), std::string::npos) << what;
    EXPECT_NE(what.find("stride"), std::string::npos) << what;
  }
}

TEST(MoeDispatchPlan, OptionsRefusedByName) {
  EXPECT_THROW(make_moe_dispatch_plan(options(2, 1, 0)), ShapeError);
  EXPECT_THROW(make_moe_dispatch_plan(options(2, 0, 4)), ShapeError);
  try {
    make_moe_dispatch_plan(options(2, 1, 0, Backend::nccl));
    FAIL() << "capacity 0 accepted";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("capacity"), std::string::npos) << e.what();
  }
}

// NCCL: every chunk between two ranks is listed by both ends; group 0 holds every counts chunk
// between two ranks, group i (i >= 1) the rows chunks of round i; on each rank the local chunks
// come first, then group 0, then groups 1 .. W-1 in order, each group's members consecutive; the
// rows chunks move whole capacity slots (the runtime's NCCL sizes are the boxes').
TEST(MoeDispatchPlan, NcclListsCountsGroupThenOneRowsGroupPerRound) {
  for (int world : {1, 2, 3, 4, 8})
    for (int experts : {1, 3}) {
      const CommPlan plan = make_moe_dispatch_plan(options(world, experts, 5, Backend::nccl));
      const auto where = fmt::format("world {} experts {}", world, experts);
      ASSERT_TRUE(verify(plan).ok()) << where << "\n" << report_text(verify(plan));
      for (int r = 0; r < world; ++r) {
        const auto& list = plan.ranks[r].streams.at(0);
        std::vector<int> groups;  // group of each listed chunk, in order
        for (int id : list) {
          const Chunk& c = plan.chunks[id];
          ASSERT_TRUE(c.src == r || c.dst == r) << where;
          EXPECT_EQ(c.backend, Backend::nccl) << where;
          if (c.src == c.dst) {
            EXPECT_EQ(c.group, kNoGroup) << where;
          } else if (c.tensor == kMoeSendCounts) {
            EXPECT_EQ(c.group, 0) << where << " counts chunk " << id;
          } else {
            EXPECT_EQ(c.group, ((c.dst - c.src) % world + world) % world) << where << " rows chunk " << id;
            EXPECT_EQ(c.box.extent, (std::vector<std::int64_t>{5, 4})) << where;
          }
          groups.push_back(c.group);
        }
        // 1 + E local chunks, then per peer offset i: 2 counts chunks (to r+i, from r-i), then
        // 2E rows chunks (world 2: r+1 == r-1, still one send and one recv each).
        ASSERT_EQ(list.size(), static_cast<std::size_t>(1 + experts + (world - 1) * 2 * (1 + experts))) << where;
        EXPECT_TRUE(std::is_sorted(groups.begin(), groups.end())) << where;  // kNoGroup is -1
        EXPECT_EQ(list.front(), moe_counts_chunk(world, experts, r, r)) << where;
      }
    }
}

TEST(MoeDispatchPlan, ExportToMscclRefusesRuntimeRowsByChunk) {
  try {
    export_msccl_xml(make_moe_dispatch_plan(options(2, 1, 4)));
    FAIL() << "exported a plan with run-time rows";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("runtime_rows"), std::string::npos) << e.what();
  }
}

// --- planted faults ------------------------------------------------------------------------------

struct Fault {
  const char* rule;
  int chunk;  // the chunk the violation must name
};

void expect_rule(const CommPlan& plan, const Fault& fault) {
  const VerifyReport report = verify(plan);
  const Violation* v = find_rule(report, fault.rule);
  ASSERT_NE(v, nullptr) << "expected " << fault.rule << ", got:\n" << report_text(report);
  EXPECT_EQ(v->chunk, fault.chunk) << report_text(report);
  EXPECT_FALSE(v->detail.empty());
}

TEST(MoeDispatchPlan, MissingCountDependencyIsUnordered) {
  CommPlan plan = make_moe_dispatch_plan(options(3, 2, 4));
  const int rows = moe_rows_chunk(3, 2, 1, 2, 1);
  plan.chunks[rows].deps.clear();
  // Same stream, later round: stream order alone orders it after its counts chunk, so the plan
  // stays safe; move the rows chunk to the front of its stream to break that.
  auto& stream = plan.ranks[1].streams[0];
  stream.erase(std::find(stream.begin(), stream.end(), rows));
  stream.insert(stream.begin(), rows);
  expect_rule(plan, {"count-unordered", rows});
  EXPECT_NE(report_text(verify(plan)).find(fmt::format("add chunk {}", moe_counts_chunk(3, 2, 1, 2))),
            std::string::npos);
}

// NCCL rows chunks carry no deps: only the receiver's stream order puts their counts first.
// Listing the counts group after the rows groups (on both ends, so the sends and recvs still
// match) leaves every rows chunk between two ranks unordered after its count.
TEST(MoeDispatchPlan, NcclCountsGroupAfterTheRowsIsUnordered) {
  CommPlan plan = make_moe_dispatch_plan(options(3, 2, 4, Backend::nccl));
  ASSERT_TRUE(verify(plan).ok());
  for (auto& program : plan.ranks) {
    auto& list = program.streams[0];
    std::stable_partition(list.begin(), list.end(), [&](int id) { return plan.chunks[id].group != 0; });
  }
  const VerifyReport report = verify(plan);
  const int rows = moe_rows_chunk(3, 2, 1, 2, 1);
  bool named = false;
  for (const auto& v : report.violations) named = named || (v.rule == "count-unordered" && v.chunk == rows);
  EXPECT_TRUE(named) << report_text(report);
}

TEST(MoeDispatchPlan, CountFromAnotherRankIsWrongSource) {
  CommPlan plan = make_moe_dispatch_plan(options(3, 2, 4));
  const int rows = moe_rows_chunk(3, 2, 0, 1, 0);
  plan.chunks[rows].runtime_rows->index = 2 * 2 + 0;  // rank 2's count on rank 1
  expect_rule(plan, {"count-wrong-source", rows});
}

TEST(MoeDispatchPlan, CountDeliveredTwiceAndNotAtAll) {
  CommPlan plan = make_moe_dispatch_plan(options(3, 1, 4));
  // Rank 0's counts for rank 1 land in rank 2's row of recv_counts: row 2 twice, row 0 never.
  plan.chunks[moe_counts_chunk(3, 1, 0, 1)].dst_box.offset[0] = 2;
  const VerifyReport report = verify(plan);
  const Violation* twice = find_rule(report, "count-delivered-twice");
  const Violation* never = find_rule(report, "count-not-delivered");
  ASSERT_NE(twice, nullptr) << report_text(report);
  ASSERT_NE(never, nullptr) << report_text(report);
  EXPECT_EQ(twice->chunk, moe_rows_chunk(3, 1, 2, 1, 0));
  EXPECT_EQ(never->chunk, moe_rows_chunk(3, 1, 0, 1, 0));
  EXPECT_EQ(never->rank, 1);
}

TEST(MoeDispatchPlan, MalformedRuntimeRowsRefusedByRule) {
  const CommPlan good = make_moe_dispatch_plan(options(2, 2, 4));
  const int rows = moe_rows_chunk(2, 2, 1, 0, 1);
  {
    CommPlan plan = good;
    plan.chunks[rows].runtime_rows->dim = 2;
    expect_rule(plan, {"runtime-rows-dim", rows});
  }
  {
    CommPlan plan = good;
    plan.chunks[rows].runtime_rows->counts = "nope";
    expect_rule(plan, {"runtime-rows-counts", rows});
  }
  {
    CommPlan plan = good;
    plan.chunks[rows].runtime_rows->index = 4;  // recv_counts has 2 x 2 elements
    expect_rule(plan, {"runtime-rows-counts", rows});
  }
  {
    CommPlan plan = good;
    plan.tensors[kMoeRecvCounts].dtype = DType::f32;
    plan.tensors[kMoeSendCounts].dtype = DType::f32;
    expect_rule(plan, {"runtime-rows-counts", moe_rows_chunk(2, 2, 0, 0, 0)});
  }
  {
    CommPlan plan = good;
    plan.chunks[rows].op = ChunkOp::reduce_add;
    expect_rule(plan, {"runtime-rows-op", rows});
  }
}

}  // namespace
}  // namespace syncopate::plan

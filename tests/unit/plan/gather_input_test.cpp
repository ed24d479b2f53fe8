// All-gather from an input tensor (TemplateOptions::input, comm_plan.hpp "all-gather with
// input"): each rank's shard starts in a one-shard input and a local chunk per piece puts it in
// place, so a consumer waits for its own rows like for any other. Every algorithm, world size,
// split and backend verifies; the local chunks come first on stream 0 and every chunk that
// reads a rank's own rows depends on the local chunk that put them there; dropping such a dep
// across streams is a race, a chunk writing the input is refused, bad options and bad plans are named; JSON
// round trips.
#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "syncopate/common/error.hpp"
#include "syncopate/plan/json.hpp"
#include "syncopate/plan/templates.hpp"
#include "syncopate/plan/verify.hpp"

namespace syncopate::plan {
namespace {

TemplateOptions gather_options(int world, int split, Algorithm algorithm, Backend backend) {
  TemplateOptions o;
  o.collective = Collective::all_gather;
  o.algorithm = algorithm;
  o.world_size = world;
  o.split = split;
  o.backend = backend;
  o.shape = {static_cast<std::int64_t>(world) * (2 * split + 1), 6};  // odd shards: unequal sub-chunks
  o.tensor = "a";
  o.input = "a_in";
  return o;
}

bool has_rule(const VerifyReport& report, const std::string& rule) {
  return std::any_of(report.violations.begin(), report.violations.end(),
                     [&](const Violation& v) { return v.rule == rule; });
}

std::string rules(const VerifyReport& report) {
  std::string out;
  for (const auto& v : report.violations) out += v.format("plan") + "\n";
  return out;
}

// The local chunks of rank r: src == dst == r, reading the input.
std::vector<int> local_chunks(const CommPlan& plan, int r) {
  std::vector<int> ids;
  for (const auto& c : plan.chunks)
    if (c.src == r && c.dst == r && c.tensor == plan.collective.input) ids.push_back(c.id);
  return ids;
}

TEST(GatherInput, EveryAlgorithmWorldSplitAndBackendVerifies) {
  for (auto algorithm : {Algorithm::ring, Algorithm::direct, Algorithm::bidir})
    for (auto backend : {Backend::copy_engine, Backend::sm_copy, Backend::nccl})
      for (int world : {1, 2, 3, 4, 8})
        for (int split : {1, 2, 3}) {
          SCOPED_TRACE(testing::Message() << to_string(algorithm) << " " << to_string(backend) << " world " << world
                                          << " split " << split);
          const CommPlan plan = make_plan(gather_options(world, split, algorithm, backend));
          const VerifyReport report = verify(plan);
          EXPECT_TRUE(report.ok()) << rules(report);
          EXPECT_EQ(plan.collective.input, "a_in");
          ASSERT_EQ(plan.tensors.at("a_in").shape, (std::vector<std::int64_t>{2 * split + 1, 6}));
          for (int r = 0; r < world; ++r) {
            const auto locals = local_chunks(plan, r);
            ASSERT_EQ(static_cast<int>(locals.size()), split);
            // First on stream 0, in piece order, on the copy engine whatever the plan's backend.
            const auto& stream0 = plan.ranks[r].streams[0];
            ASSERT_GE(stream0.size(), locals.size());
            EXPECT_TRUE(std::equal(locals.begin(), locals.end(), stream0.begin()));
            for (int id : locals) EXPECT_EQ(plan.chunks[id].backend, Backend::copy_engine);
          }
        }
}

TEST(GatherInput, ReadersOfTheOwnRowsDependOnTheirLocalChunk) {
  const CommPlan plan = make_plan(gather_options(4, 2, Algorithm::direct, Backend::copy_engine));
  for (const auto& c : plan.chunks) {
    if (c.src == c.dst) continue;
    // Direct: every remote chunk carries a piece of its source's own shard.
    ASSERT_EQ(c.deps.size(), 1u) << "chunk " << c.id;
    const Chunk& local = plan.chunks[c.deps[0]];
    EXPECT_EQ(local.src, c.src);
    EXPECT_EQ(local.dst, c.src);
    EXPECT_EQ(local.dst_box, c.box) << "chunk " << c.id << " waits for the piece it reads";
  }
}

TEST(GatherInput, DroppingTheDepOnTheLocalChunkIsARace) {
  // Bidir's second stream is ordered after the local chunk (stream 0) only by the dep; on
  // stream 0 itself the stream order already is (the dep is then redundant but kept).
  for (int world : {3, 4, 5}) {  // (world 2 has one direction)
    SCOPED_TRACE(world);
    CommPlan plan = make_plan(gather_options(world, 1, Algorithm::bidir, Backend::copy_engine));
    auto reader = std::find_if(plan.chunks.begin(), plan.chunks.end(), [&](const Chunk& c) {
      return c.src != c.dst && c.stream == 1 && !c.deps.empty() && plan.chunks[c.deps[0]].tensor == "a_in";
    });
    ASSERT_NE(reader, plan.chunks.end());
    reader->deps.clear();
    const VerifyReport report = verify(plan);
    EXPECT_TRUE(has_rule(report, "forward-race")) << rules(report);
  }
}

TEST(GatherInput, WithoutTheLocalChunkTheOwnShardIsMissing) {
  CommPlan plan = make_plan(gather_options(2, 1, Algorithm::ring, Backend::copy_engine));
  // Take rank 1's local chunk off its stream and out of every dep: shard 1 never lands on rank 1.
  const int local = local_chunks(plan, 1).at(0);
  auto& stream = plan.ranks[1].streams[0];
  stream.erase(std::remove(stream.begin(), stream.end(), local), stream.end());
  for (auto& c : plan.chunks) c.deps.erase(std::remove(c.deps.begin(), c.deps.end(), local), c.deps.end());
  const VerifyReport report = verify(plan);
  EXPECT_FALSE(report.ok());
  EXPECT_TRUE(has_rule(report, "chunk-not-issued")) << rules(report);
}

TEST(GatherInput, AChunkWritingTheInputIsRefused) {
  CommPlan plan = make_plan(gather_options(2, 1, Algorithm::ring, Backend::copy_engine));
  Chunk& remote = *std::find_if(plan.chunks.begin(), plan.chunks.end(), [](const Chunk& c) { return c.src != c.dst; });
  remote.dst_tensor = "a_in";
  remote.dst_box = Box{{0, 0}, remote.box.extent};
  const VerifyReport report = verify(plan);
  EXPECT_TRUE(has_rule(report, "own-shard-overwritten")) << rules(report);
}

TEST(GatherInput, BadInputTensorsAreNamed) {
  CommPlan plan = make_plan(gather_options(2, 1, Algorithm::ring, Backend::copy_engine));
  CommPlan wrong_shape = plan;
  wrong_shape.tensors.at("a_in").shape = {6, 6};
  EXPECT_TRUE(has_rule(verify(wrong_shape), "collective-input"));
  CommPlan missing = plan;
  missing.collective.input = "nope";
  EXPECT_TRUE(has_rule(verify(missing), "collective-input"));
  CommPlan not_gather = make_plan([] {
    TemplateOptions o;
    o.collective = Collective::reduce_scatter;
    o.world_size = 2;
    o.shape = {4, 4};
    return o;
  }());
  not_gather.collective.input = "x";
  EXPECT_TRUE(has_rule(verify(not_gather), "collective-input"));
}

TEST(GatherInput, TemplateOptionsAreChecked) {
  auto expect_refused = [](TemplateOptions o, const std::string& words) {
    try {
      make_plan(o);
      ADD_FAILURE() << "accepted";
    } catch (const ShapeError& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  TemplateOptions rs = gather_options(2, 1, Algorithm::ring, Backend::copy_engine);
  rs.collective = Collective::reduce_scatter;
  expect_refused(rs, "only an all-gather");
  TemplateOptions same = gather_options(2, 1, Algorithm::ring, Backend::copy_engine);
  same.input = same.tensor;
  expect_refused(same, "name it differently");
  TemplateOptions uneven = gather_options(2, 1, Algorithm::ring, Backend::copy_engine);
  uneven.shape = {7, 6};
  expect_refused(uneven, "not divisible by world size 2");
  TemplateOptions hier = gather_options(4, 1, Algorithm::ring, Backend::copy_engine);
  hier.nodes = {0, 0, 1, 1};
  expect_refused(hier, "hierarchical");
}

TEST(GatherInput, JsonRoundTrip) {
  const CommPlan plan = make_plan(gather_options(3, 2, Algorithm::bidir, Backend::sm_copy));
  const CommPlan back = parse_plan(plan_to_json(plan, -1), "<test>");
  EXPECT_EQ(back, plan);
  EXPECT_NE(plan_to_json(plan, -1).find("\"input\":\"a_in\""), std::string::npos);
}

}  // namespace
}  // namespace syncopate::plan

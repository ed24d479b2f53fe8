// Brute-force coverage check of the templates, independent of the verifier: every template's
// plan replayed element by element (element_replay.hpp) in random topological orders, and the
// replay shown to catch broken plans.
#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "element_replay.hpp"
#include "syncopate/plan/templates.hpp"

namespace syncopate::plan {
namespace {

using element_replay::check_promise;
using element_replay::replay;
using element_replay::replay_and_check;
using element_replay::ReplayResult;

// ---------------------------------------------------------------- every template

struct Case {
  Collective collective;
  Algorithm algorithm;
  int world;
  int split;
  Backend backend;
  bool three_d;  // 3-d tensor cut along its last dim instead of 2-d along dim 0
};

TemplateOptions options_for(const Case& c) {
  TemplateOptions o;
  o.collective = c.collective;
  o.algorithm = c.algorithm;
  o.world_size = c.world;
  o.split = c.split;
  o.backend = c.backend;
  // Uneven where allowed: the first shards get one more element than the last ones.
  const std::int64_t n = c.collective == Collective::all_to_all ? std::int64_t{c.world} * (c.split + 1)
                                                                : std::int64_t{c.world} * c.split + c.world - 1;
  o.shape = c.three_d ? std::vector<std::int64_t>{2, 3, n} : std::vector<std::int64_t>{n, 2};
  o.dim = c.three_d ? 2 : 0;
  return o;
}

class TemplateCoverage : public ::testing::TestWithParam<Case> {};

TEST_P(TemplateCoverage, EveryPromiseHoldsInRandomTopologicalOrders) {
  const CommPlan plan = make_plan(options_for(GetParam()));
  for (unsigned seed = 1; seed <= 3; ++seed) {
    const auto wrong = replay_and_check(plan, seed);
    ASSERT_TRUE(wrong.empty()) << "seed " << seed << ": " << fmt::format("{}", fmt::join(wrong, "\n"));
  }
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (auto coll : {Collective::all_gather, Collective::reduce_scatter, Collective::all_reduce, Collective::all_to_all})
    for (auto algo : {Algorithm::ring, Algorithm::direct, Algorithm::bidir})
      for (int world : {1, 2, 3, 4, 7, 8})
        for (int split : {1, 2, 4})
          for (auto backend : {Backend::copy_engine, Backend::nccl})
            for (bool three_d : {false, true}) cases.push_back({coll, algo, world, split, backend, three_d});
  return cases;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::string name = fmt::format("{}_{}_w{}_s{}_{}_{}", to_string(c.collective), to_string(c.algorithm), c.world,
                                 c.split, to_string(c.backend), c.three_d ? "3d" : "2d");
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

INSTANTIATE_TEST_SUITE_P(AllTemplates, TemplateCoverage, ::testing::ValuesIn(all_cases()), case_name);

// ---------------------------------------------------------------- the replay catches broken plans

CommPlan small_plan(Collective coll, Algorithm algo, Backend backend = Backend::copy_engine) {
  return make_plan(options_for({coll, algo, 4, 2, backend, false}));
}

// Removes chunk `id` from every stream and from every dep list, as if it had never existed.
void drop_chunk(CommPlan& plan, int id) {
  for (auto& program : plan.ranks)
    for (auto& stream : program.streams) std::erase(stream, id);
  for (auto& c : plan.chunks) std::erase(c.deps, id);
}

// Issues a copy of chunk `id` right after the original, on the same stream of every rank that
// lists it (the src for a pushed copy, the dst for a pulled reduce-add).
void duplicate_chunk(CommPlan& plan, int id) {
  Chunk copy = plan.chunks[id];
  copy.id = static_cast<int>(plan.chunks.size());
  plan.chunks.push_back(copy);
  for (auto& program : plan.ranks) {
    auto& stream = program.streams[copy.stream];
    const auto at = std::find(stream.begin(), stream.end(), id);
    if (at != stream.end()) stream.insert(at + 1, copy.id);
  }
}

TEST(CoverageReplayNegative, EveryDroppedChunkIsMissedSomewhere) {
  for (auto coll :
       {Collective::all_gather, Collective::reduce_scatter, Collective::all_reduce, Collective::all_to_all}) {
    const CommPlan valid = small_plan(coll, Algorithm::ring);
    ASSERT_TRUE(replay_and_check(valid, 1).empty());
    for (int id = 0; id < static_cast<int>(valid.chunks.size()); ++id) {
      CommPlan broken = valid;
      drop_chunk(broken, id);
      EXPECT_FALSE(replay_and_check(broken, 1).empty()) << to_string(coll) << ": dropping chunk " << id;
    }
  }
}

TEST(CoverageReplayNegative, EveryDuplicatedChunkIsCaught) {
  for (auto coll : {Collective::all_gather, Collective::reduce_scatter, Collective::all_reduce, Collective::all_to_all})
    for (auto algo : {Algorithm::ring, Algorithm::direct, Algorithm::bidir}) {
      const CommPlan valid = small_plan(coll, algo);
      for (int id = 0; id < static_cast<int>(valid.chunks.size()); ++id) {
        CommPlan broken = valid;
        duplicate_chunk(broken, id);
        EXPECT_FALSE(replay_and_check(broken, 1).empty())
            << to_string(coll) << " " << to_string(algo) << ": duplicating chunk " << id;
      }
    }
}

TEST(CoverageReplayNegative, DuplicateReportsTheDoubleWrite) {
  CommPlan plan = small_plan(Collective::all_gather, Algorithm::direct);
  duplicate_chunk(plan, 0);
  const auto wrong = replay_and_check(plan, 1);
  ASSERT_FALSE(wrong.empty());
  EXPECT_NE(wrong[0].find("writes 2"), std::string::npos) << wrong[0];
}

TEST(CoverageReplayNegative, AllReduceWithoutTheLandingDepRacesInSomeOrder) {
  // Without its dep, an all-gather chunk may overwrite a partial before the reduce chain
  // read it; some random order must then double-count or lose a contribution.
  CommPlan plan = small_plan(Collective::all_reduce, Algorithm::direct);
  const std::size_t reduce_chunks = plan.chunks.size() / 2;
  for (std::size_t i = reduce_chunks; i < plan.chunks.size(); ++i) plan.chunks[i].deps.clear();
  for (auto& program : plan.ranks) {  // and let the all-gather half run on a stream of its own
    std::vector<int>& reduce = program.streams[0];
    std::vector<int> gather;
    for (int id : reduce)
      if (static_cast<std::size_t>(id) >= reduce_chunks) gather.push_back(id);
    std::erase_if(reduce, [&](int id) { return static_cast<std::size_t>(id) >= reduce_chunks; });
    program.streams.push_back(std::move(gather));
  }
  const auto wrong = replay_and_check(plan, 1);
  ASSERT_FALSE(wrong.empty());
  EXPECT_NE(wrong[0].find("race on rank"), std::string::npos) << wrong[0];
  // And the data itself goes wrong in some order, not only the race report.
  bool corrupted = false;
  for (unsigned seed = 1; seed <= 50 && !corrupted; ++seed) {
    ReplayResult replayed = replay(plan, seed);
    replayed.problems.clear();
    corrupted = !check_promise(plan, replayed).empty();
  }
  EXPECT_TRUE(corrupted);
}

TEST(CoverageReplayNegative, MismatchedNcclOrderDeadlocks) {
  CommPlan plan = small_plan(Collective::all_gather, Algorithm::ring, Backend::nccl);
  // Rank 1 receives chunk 0 (from rank 0) before sending its own; issue its send first on
  // every rank and the ring waits on itself.
  for (auto& program : plan.ranks) {
    auto& stream = program.streams[0];
    std::stable_partition(stream.begin(), stream.end(), [&](int id) { return plan.chunks[id].src == program.rank; });
  }
  const auto wrong = replay_and_check(plan, 1);
  ASSERT_FALSE(wrong.empty());
  EXPECT_NE(wrong.back().find("deadlock"), std::string::npos) << wrong.back();
}

TEST(CoverageReplayNegative, DepOnUnissuedChunkIsReported) {
  CommPlan plan = small_plan(Collective::all_gather, Algorithm::ring);
  plan.chunks.back().deps.push_back(static_cast<int>(plan.chunks.size()) + 5);
  const auto wrong = replay_and_check(plan, 1);
  ASSERT_FALSE(wrong.empty());
  EXPECT_NE(wrong[0].find("never issued"), std::string::npos) << wrong[0];
}

}  // namespace
}  // namespace syncopate::plan

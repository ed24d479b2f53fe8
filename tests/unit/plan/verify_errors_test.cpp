// The error suite: malformed and unsafe plans, each with the exact rule, rank, chunk and a piece
// of the message it must get. Plan files live in tests/unit/plan/bad/ (one problem each, made
// from the small plans in good/); more cases are built in C++ below: those the JSON loader
// already refuses, mutations of template plans, and hostile plans that must stay cheap.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "syncopate/common/error.hpp"
#include "syncopate/plan/json.hpp"
#include "syncopate/plan/templates.hpp"
#include "syncopate/plan/verify.hpp"
#include "tiny_plan.hpp"

namespace syncopate::plan {
namespace {

namespace fs = std::filesystem;
using testing_plans::find_rule;
using testing_plans::ring_all_gather_3;
using testing_plans::TinyPlan;

fs::path plan_dir(const char* kind) { return fs::path(SYNCOPATE_SOURCE_DIR) / "tests/unit/plan" / kind; }

// rule "parse" means the loader must refuse the file with PlanParseError; `detail` is then a
// piece of its message (the JSON path). Otherwise the report must hold a violation with exactly
// this group, rule, rank and chunk whose detail contains `detail`.
struct BadPlan {
  const char* file;
  const char* rule;
  RuleGroup group;
  int rank;
  int chunk;
  const char* detail;
};

// ctest lists parameters by this; the default would print the struct's bytes.
void PrintTo(const BadPlan& plan, std::ostream* out) { *out << plan.file; }

constexpr RuleGroup kWF = RuleGroup::well_formed;
constexpr RuleGroup kCov = RuleGroup::coverage;
constexpr RuleGroup kOrd = RuleGroup::ordering;
constexpr RuleGroup kDead = RuleGroup::deadlock;

const BadPlan kBadPlans[] = {
    // ---- well-formed
    {"world-size-zero", "world-size", kWF, -1, -1, "world_size is 0, it must be at least 1"},
    {"rank-count", "rank-count", kWF, -1, -1, "world_size is 4 but ranks lists 3 programs"},
    {"rank-index", "rank-index", kWF, 1, -1, "ranks[1].rank is 2"},
    {"chunk-id", "chunk-id", kWF, -1, 2, "chunks[2] has id 7"},
    {"rank-out-of-range", "rank-out-of-range", kWF, -1, 3, "dst rank 3 is outside 0..2"},
    {"unknown-tensor", "unknown-tensor", kWF, 1, 1, "source tensor 'z' is not in tensors"},
    {"box-rank", "box-rank", kWF, 0, 0, "source box has 1 offsets and 1 extents but tensor 'x' has 2 dims"},
    {"negative-offset", "negative-offset", kWF, 2, 2, "source box x[-2:0, 0:4] has offset -2 in dim 0"},
    {"non-positive-extent", "non-positive-extent", kWF, 2, 4, "destination box x[0:2, 0:0] has extent 0 in dim 1"},
    {"box-out-of-bounds", "box-out-of-bounds", kWF, 1, 4,
     "source box x[5:7, 0:4] ends at 7 in dim 0 but tensor 'x' has size 6"},
    {"box-out-of-bounds-overflow", "box-out-of-bounds", kWF, 2, 1, "ends at more than 2^63 in dim 0"},
    {"extent-mismatch", "extent-mismatch", kWF, 0, 2,
     "source x[2:4, 0:2] and destination y[0:1, 0:2] have different extents"},
    {"dtype-mismatch", "dtype-mismatch", kWF, 1, 3, "moves bf16 tensor 'x' into f32 tensor 'y'"},
    {"bad-tensor-shape", "bad-tensor-shape", kWF, -1, -1, "tensor 'x' dim 1 has size 0"},
    {"stream-mismatch", "stream-mismatch", kWF, 1, 4, "listed in stream 0 of rank 1 but its stream field is 1"},
    {"stream-out-of-range", "stream-out-of-range", kWF, 2, 5, "stream 3 does not exist on rank 2 (1 streams)"},
    {"chunk-not-issued", "chunk-not-issued", kWF, 0, 3, "chunk 3 (0 -> 1) is in no issue list"},
    {"chunk-issued-twice", "chunk-issued-twice", kWF, 2, 5, "is listed 2 times (first by rank 2)"},
    {"issuer-not-endpoint", "issuer-not-endpoint", kWF, 2, 3,
     "rank 2 issues chunk 3 (0 -> 1), but only its src or dst may"},
    {"nccl-unpaired", "nccl-unpaired", kWF, 1, 0, "NCCL chunk 0 (0 -> 1) has no recv in rank 1's streams"},
    {"unknown-dep", "unknown-dep", kWF, 1, 4, "depends on chunk 12, which does not exist (the plan has 6 chunks)"},
    {"self-dep", "self-dep", kWF, 0, 3, "depends on itself"},
    {"unknown-chunk-in-stream", "unknown-chunk-in-stream", kWF, 1, 42, "stream 0 of rank 1 lists chunk 42"},
    {"collective-tensor", "collective-tensor", kWF, -1, -1, "all-gather names tensor 'q', which is not in tensors"},
    {"collective-dim", "collective-dim", kWF, -1, -1, "all-gather dim is 2 but tensor 'x' has 2 dims"},
    {"collective-indivisible", "collective-indivisible", kWF, -1, -1, "5 is not a multiple of 2"},
    {"collective-output", "collective-output", kWF, -1, -1, "all-to-all output 'w' must be a tensor of the plan"},
    {"op-not-allowed", "op-not-allowed", kWF, 1, 3,
     "reduce-add into x[4:6, 0:4] on rank 1: all-gather only moves data"},
    // ---- topology (good/ag_ring3.json with nodes: copy-engine and SM-copy chunks between nodes)
    {"cross-node-chunk", "cross-node-chunk", kWF, 1, 1,
     "chunk 1 (1 -> 2) is a copy-engine chunk from rank 1 on node 0 to rank 2 on node 1: copy-engine reaches only GPUs "
     "of its own node; a chunk between nodes must use backend nccl"},
    {"cross-node-sm-copy", "cross-node-chunk", kWF, 2, 2,
     "chunk 2 (2 -> 0) is a sm-copy chunk from rank 2 on node 1 to rank 0 on node 0"},
    {"nodes-count", "nodes-count", kWF, -1, -1, "nodes lists 2 node ids but world_size is 3"},
    // ---- coverage
    {"missing-shard", "missing-shard", kCov, 0, -1, "rank 0 never receives x[2:4, 0:4] (shard 1, owned by rank 1)"},
    {"shard-delivered-twice", "shard-delivered-twice", kCov, 2, 6,
     "receives x[2:4, 0:4] (shard 1, owned by rank 1) 2 times: first by chunk 1, last by chunk 6"},
    {"own-shard-overwritten", "own-shard-overwritten", kCov, 0, 6, "writes x[0:2, 0:4] on rank 0, inside shard 0"},
    {"wrong-data", "wrong-data", kCov, 1, 2,
     "y[0:2, 0:2] on rank 1 should hold block 0, sent by rank 0 from its block 1 but holds 'x' of rank 0"},
    {"contribution-missing", "contribution-missing", kCov, 2, 4,
     "x[4:6, 0:4] on rank 2 lacks the contribution of rank 1"},
    {"contribution-counted-twice", "contribution-counted-twice", kCov, 1, 4,
     "x[2:4, 0:2] on rank 1 counts the contribution of rank 0 2 times"},
    // ---- ordering
    {"forward-race", "forward-race", kOrd, 1, 4,
     "chunk 4 (1 -> 2) sends x[0:2, 0:4] from rank 1, but chunk 0 (0 -> 1), which writes that region there, is not "
     "ordered with it (add 0 to chunk 4's deps to send what chunk 0 writes, or 4 to chunk 0's deps to send what was "
     "there before it)"},
    {"write-race", "write-race", kOrd, 0, 4,
     "chunks 1 (reduce-add, 1 -> 0) and 4 (copy, 1 -> 0) both write x[0:1, 0:2] on rank 0"},
    // ---- deadlock
    {"dependency-cycle", "dependency-cycle", kDead, 0, 0,
     "chunk 0 (rank 0, 0 -> 1) -> (chunk 1 depends on 0) -> chunk 1 (rank 1, 1 -> 0) -> (chunk 0 depends on 1) -> "
     "chunk 0"},
    {"nccl-cross-pair-cycle", "dependency-cycle", kDead, 0, 0,
     "chunk 1 (rank 1, 1 -> 0) -> (issued after it on rank 1 stream 0) -> chunk 0"},
    {"group-not-consecutive", "group-not-consecutive", kWF, 0, 1,
     "rank 0 stream 0 lists chunk 1 of NCCL group 0 at position 2, after chunk 2 (position 1) broke the group off"},
    {"group-not-nccl", "group-not-nccl", kWF, 1, 1, "chunk 1 (1 -> 0) is in group 3 but uses the copy-engine backend"},
    {"nccl-order-mismatch", "nccl-order-mismatch", kDead, 0, 0,
     "rank 0 stream 0 sends chunks 0, 2 to rank 1 but rank 1 receives 2, 0"},
    {"output-not-taken", "collective-output", kWF, -1, -1,
     "all-gather names output 'x', but only all-to-all (its output), reduce-scatter and all-reduce (their staging "
     "tensor) take one"},
    // ---- staged reduce-scatter (good/rs_staged3.json, one problem each) and all-reduce
    // (good/ar_staged3.json: a result copied over a partial before it was staged)
    {"staged-missing-slot", "missing-shard", kCov, 2, -1,
     "rank 2 never receives p[0:1, 0:2, 0:2] (staging slot 0: rank 0's partial of shard 2 of 'c')"},
    {"staged-slot-delivered-twice", "shard-delivered-twice", kCov, 2, 6,
     "rank 2 receives p[0:1, 0:2, 0:2] (staging slot 0: rank 0's partial of shard 2 of 'c') 2 times: first by chunk 5, "
     "last by chunk 6"},
    {"staged-wrong-rank", "wrong-data", kCov, 2, 5,
     "p[0:1, 0:2, 0:2] on rank 2 should hold staging slot 0: rank 0's partial of shard 2 of 'c' but holds 'c' of rank "
     "1 moved by (0, -4, 0)"},
    {"staged-wrong-box", "wrong-data", kCov, 2, 5,
     "should hold staging slot 0: rank 0's partial of shard 2 of 'c' but holds 'c' of rank 0 moved by (0, -2, 0)"},
    {"staged-own-slot-written", "own-shard-overwritten", kCov, 2, 6,
     "writes p[2:3, 0:2, 0:2] on rank 2, inside slot 2"},
    {"staged-input-written", "own-shard-overwritten", kCov, 0, 6,
     "writes c[0:1, 0:2, 0:2] on rank 0: in a staged reduce-scatter 'c' holds the partials"},
    {"staged-reduce-add", "op-not-allowed", kWF, 2, 5,
     "a staged reduce-scatter only copies partials into staging slots"},
    {"staged-bad-staging-shape", "collective-output", kWF, -1, -1,
     "reduce-scatter staging 'p' is [3, 3, 2] but must be [3, 2, 2]"},
    {"staged-no-unit-dim", "collective-output", kWF, -1, -1,
     "the input needs a unit dim 0 (the staging tensor's slot index)"},
    {"staged-result-before-staging", "forward-race", kOrd, 1, 3,
     "chunk 3 (1 -> 0) sends c[0:1, 0:2, 0:2] from rank 1, but chunk 6 (0 -> 1), which writes that region there, is "
     "not ordered with it (add 6 to chunk 3's deps to send what chunk 6 writes, or 3 to chunk 6's deps to send what "
     "was there before it)"},
    {"staged-indivisible", "collective-indivisible", kWF, -1, -1, "into 3 equal slots, but 7 is not a multiple of 3"},
    // ---- refused by the loader, with the JSON path
    {"parse-truncated", "parse", kWF, -1, -1, "parse-truncated.json:9:22: invalid JSON"},
    {"parse-wrong-type", "parse", kWF, -1, -1, "chunks[1].box.offset[1]: expected an integer, got \"x\""},
    {"parse-missing-key", "parse", kWF, -1, -1, "chunks[0].src: expected the required key"},
    {"parse-unknown-backend", "parse", kWF, -1, -1, "chunks[2].backend: expected one of copy-engine, sm-copy, nccl"},
    {"parse-unknown-key", "parse", kWF, -1, -1, "ranks[1].stream: expected one of the rank keys"},
    {"parse-negative-node", "parse", kWF, -1, -1, "nodes: expected a list of node ids >= 0, one per rank"},
    {"parse-unsupported-version", "parse", kWF, -1, -1, "version: expected a supported plan format version"},
};

std::string describe(const VerifyReport& report, const std::string& name) {
  return report.ok() ? name + ": no violations\n" : report.format(name);
}

class BadPlanFile : public testing::TestWithParam<BadPlan> {};

TEST_P(BadPlanFile, GetsTheExpectedMessage) {
  const BadPlan& expect = GetParam();
  const fs::path path = plan_dir("bad") / (std::string(expect.file) + ".json");
  ASSERT_TRUE(fs::exists(path)) << path;
  if (std::string_view(expect.rule) == "parse") {
    try {
      load_plan(path);
      FAIL() << path << " loaded, but the loader should refuse it";
    } catch (const PlanParseError& e) {
      EXPECT_NE(std::string(e.what()).find(expect.detail), std::string::npos) << e.what();
    }
    return;
  }
  const CommPlan plan = load_plan(path);
  const VerifyReport report = verify(plan);
  const std::string name = path.filename().string();
  const auto match = std::find_if(report.violations.begin(), report.violations.end(), [&](const Violation& v) {
    return v.rule == expect.rule && v.rank == expect.rank && v.chunk == expect.chunk;
  });
  ASSERT_NE(match, report.violations.end())
      << "no " << expect.rule << " violation at rank " << expect.rank << ", chunk " << expect.chunk << " in:\n"
      << describe(report, name);
  EXPECT_EQ(match->group, expect.group);
  EXPECT_NE(match->detail.find(expect.detail), std::string::npos) << match->format(name);
  // The formatted line names the file, the place and the rule, and verify_or_throw says the same.
  const std::string line = match->format(name);
  EXPECT_EQ(line.rfind(name + ": ", 0), 0u) << line;
  EXPECT_NE(line.find(std::string(to_string(expect.group)) + "/" + expect.rule), std::string::npos);
  try {
    verify_or_throw(plan, name);
    FAIL() << "verify_or_throw accepted " << name;
  } catch (const PlanVerifyError& e) {
    EXPECT_NE(std::string(e.what()).find(line), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Files, BadPlanFile, testing::ValuesIn(kBadPlans),
                         [](const testing::TestParamInfo<BadPlan>& info) {
                           std::string name = info.param.file;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST(BadPlans, EveryFileIsInTheTableAndTheSuiteIsBroad) {
  std::set<std::string> listed;
  std::set<std::string> rules;
  for (const auto& b : kBadPlans) {
    EXPECT_TRUE(listed.insert(b.file).second) << "listed twice: " << b.file;
    rules.insert(b.rule);
  }
  for (const auto& entry : fs::directory_iterator(plan_dir("bad"))) {
    const std::string stem = entry.path().stem().string();
    EXPECT_TRUE(listed.contains(stem)) << entry.path() << " has no expectation in kBadPlans";
  }
  EXPECT_GE(rules.size(), 25u);
}

TEST(GoodPlans, VerifyCleanly) {
  int count = 0;
  for (const auto& entry : fs::directory_iterator(plan_dir("good"))) {
    const CommPlan plan = load_plan(entry.path());
    const auto report = verify(plan);
    EXPECT_TRUE(report.ok()) << report.format(entry.path().filename().string());
    ++count;
  }
  EXPECT_GE(count, 5);
}

// ---- cases the loader refuses before the verifier could see them, built in memory

CommPlan good_plan() { return load_plan(plan_dir("good") / "ag_ring3.json"); }

TEST(BadPlansInMemory, UnsupportedVersion) {
  CommPlan plan = good_plan();
  plan.version = 7;
  const auto report = verify(plan);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.violations[0].rule, "unsupported-version");
  EXPECT_NE(report.violations[0].detail.find("plan version is 7, this verifier reads version 1"), std::string::npos);
}

TEST(BadPlansInMemory, HugeWorldSizeDoesNotAllocatePerRank) {
  CommPlan plan = good_plan();
  plan.world_size = 2'000'000'000;
  const auto report = verify(plan);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.violations[0].rule, "rank-count");
}

TEST(BadPlansInMemory, NegativeDimAndHugeShape) {
  CommPlan plan = good_plan();
  plan.collective.dim = -1;
  plan.tensors["big"] = TensorSpec{{1LL << 40, 1LL << 40}, DType::f32, "row-major"};
  const auto report = verify(plan);
  std::set<std::string> rules;
  for (const auto& v : report.violations) rules.insert(v.rule);
  EXPECT_TRUE(rules.contains("collective-dim")) << report.format("p");
  EXPECT_TRUE(rules.contains("bad-tensor-shape")) << report.format("p");
}

// ---- unsafe plans built in memory

TEST(UnsafePlansInMemory, MissingShardNamesRankRegionAndOwner) {
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

TEST(UnsafePlansInMemory, ShardDeliveredTwiceNamesBothChunks) {
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
TEST(UnsafePlansInMemory, ReduceScatterContributions) {
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

TEST(UnsafePlansInMemory, CopyInsteadOfReduceLosesAContribution) {
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

TEST(UnsafePlansInMemory, AllToAllBlockInTheWrongPlace) {
  TemplateOptions o;
  o.collective = Collective::all_to_all;
  o.algorithm = Algorithm::direct;
  o.world_size = 3;
  o.shape = {6, 2};
  CommPlan plan = make_plan(o);
  ASSERT_TRUE(verify(plan).ok());
  // Find the chunk 0 -> 1 and make it send block 2 of rank 0's input instead of block 1.
  auto it =
      std::find_if(plan.chunks.begin(), plan.chunks.end(), [](const Chunk& c) { return c.src == 0 && c.dst == 1; });
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
  EXPECT_NE(missing->detail.find("rank 1 never receives y[0:2, 0:2]"), std::string::npos) << missing->detail;
  const Violation* twice = find_rule(report, "shard-delivered-twice");
  ASSERT_NE(twice, nullptr) << report.format("a2a");
  EXPECT_NE(twice->detail.find("y[4:6, 0:2] (block 2, sent by rank 2 from its block 1) 2 times"), std::string::npos)
      << twice->detail;
  EXPECT_NE(find_rule(report, "write-race"), nullptr);
}

// A chunk moving a tensor onto itself shifted by one row would cut every row into its own
// cell; past the limit the verifier says it cannot prove coverage instead of running for ages.
TEST(UnsafePlansInMemory, CellExplosionIsRefusedNotSlow) {
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

TEST(UnsafePlansInMemory, ManyRacesAreCappedWithASummary) {
  // 40 copies into the same row of rank 1, each on its own stream of rank 0: every pair races.
  TinyPlan wide(Collective::custom, 2, 1, 40);
  for (int i = 0; i < 40; ++i) wide.add(0, 1, 0, 1, ChunkOp::copy, {}, i);
  const auto report = verify(wide.plan);
  // 40 * 39 / 2 = 780 racing pairs: 500 listed, then one summary line.
  long races = std::count_if(report.violations.begin(), report.violations.end(),
                             [](const Violation& v) { return v.rule == "write-race"; });
  EXPECT_EQ(races, 501);
  EXPECT_NE(report.violations.back().detail.find("280 more violations of this rule not listed"), std::string::npos)
      << report.violations.back().detail;
}

// 1400 unordered copies, each over half of the tensor: almost a million racing pairs. The report keeps
// 500 per rule and a count, and the run stays short.
TEST(UnsafePlansInMemory, HostileOverlapStaysBounded) {
  constexpr int n = 1400;
  TinyPlan t(Collective::all_gather, 2, 2 * n, n);
  for (int i = 0; i < n; ++i) t.add(0, 1, i, n, ChunkOp::copy, {}, i, 1);
  const auto start = std::chrono::steady_clock::now();
  const auto report = verify(t.plan);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 30.0);
  EXPECT_LT(report.violations.size(), 2000u);
  const auto summary = std::find_if(report.violations.begin(), report.violations.end(),
                                    [](const Violation& v) { return v.rule == "write-race" && v.chunk < 0; });
  ASSERT_NE(summary, report.violations.end()) << report.format("hostile").substr(0, 2000);
  EXPECT_NE(summary->detail.find("more violations of this rule not listed (979300 in all)"), std::string::npos)
      << summary->detail;
}

// A ring in which every rank waits for the next one: one long cycle, printed with its start
// and its closing hop only.
TEST(UnsafePlansInMemory, LongCycleIsElided) {
  TinyPlan t(Collective::custom, 40, 40);
  for (int r = 0; r < 40; ++r) t.add(r, (r + 1) % 40, r, 1, ChunkOp::copy, {(r + 1) % 40});
  const auto report = verify(t.plan);
  const Violation* v = find_rule(report, "dependency-cycle");
  ASSERT_NE(v, nullptr) << report.format("t");
  EXPECT_EQ(v->chunk, 0);
  EXPECT_NE(v->detail.find("cycle: chunk 0 (rank 0, 0 -> 1) -> (chunk 39 depends on 0) -> "
                           "chunk 39 (rank 39, 39 -> 0)"),
            std::string::npos)
      << v->detail;
  EXPECT_NE(v->detail.find("... (23 more chunks) -> chunk 1 (rank 1, 1 -> 2) -> (chunk 0 "
                           "depends on 1) -> chunk 0"),
            std::string::npos)
      << v->detail;
  EXPECT_LT(v->detail.size(), 1500u);
}

TEST(UnsafePlansInMemory, TwoRanksWaitingOnEachOtherIsACycle) {
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

TEST(UnsafePlansInMemory, NcclOrderMismatchNamesBothOrders) {
  TinyPlan t(Collective::custom, 2, 4);
  t.add(0, 1, 0, 1, ChunkOp::copy, {}, 0, -1, Backend::nccl);
  t.add(0, 1, 1, 1, ChunkOp::copy, {}, 0, -1, Backend::nccl);
  std::swap(t.plan.ranks[1].streams[0][0], t.plan.ranks[1].streams[0][1]);
  const auto report = verify(t.plan);
  const Violation* v = find_rule(report, "nccl-order-mismatch");
  ASSERT_NE(v, nullptr) << report.format("t");
  EXPECT_EQ(v->rank, 0);
  EXPECT_EQ(v->chunk, 0);
  EXPECT_NE(v->detail.find("rank 0 stream 0 sends chunks 0, 1 to rank 1 but rank 1 receives 1, 0"), std::string::npos)
      << v->detail;
  EXPECT_NE(find_rule(report, "dependency-cycle"), nullptr);  // the rendezvous also deadlocks
}

TEST(UnsafePlansInMemory, WellFormedErrorsAreAllReportedAndStopLaterGroups) {
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

// True when every dep of chunk `id` is issued before it on a stream that also issues `id`
// (the same rank, the same stream): stream order alone then orders them, and the dep only
// restates it. An all-reduce's first gather hop waits on the reduction that completed its
// piece, which the owner itself pulled earlier on that stream.
bool deps_implied_by_stream_order(const CommPlan& plan, int id) {
  for (int d : plan.chunks[id].deps) {
    bool before = false;
    for (const auto& program : plan.ranks)
      for (const auto& stream : program.streams) {
        const auto at_id = std::find(stream.begin(), stream.end(), id);
        const auto at_dep = std::find(stream.begin(), at_id, d);
        before = before || (at_id != stream.end() && at_dep != at_id);
      }
    if (!before) return false;
  }
  return true;
}

// Removing the dep of any forwarding chunk from a ring or bidir plan must be caught: the
// forward then races with the chunk that brings its data (unless stream order alone orders
// them, see deps_implied_by_stream_order).
TEST(UnsafePlansInMemory, EveryDroppedForwardingDepIsCaught) {
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
        if (deps_implied_by_stream_order(plan, static_cast<int>(i))) {
          EXPECT_EQ(kind, Collective::all_reduce) << to_string(algo) << " chunk " << i;
          continue;
        }
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

}  // namespace
}  // namespace syncopate::plan

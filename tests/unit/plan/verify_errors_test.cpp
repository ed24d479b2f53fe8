// The error suite: malformed and unsafe plans, each with the exact rule, rank, chunk and a piece
// of the message it must get. Plan files live in tests/unit/plan/bad/ (one problem each, made
// from the small plans in good/); a few cases the JSON loader already refuses are built in C++.
#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "syncopate/common/error.hpp"
#include "syncopate/plan/json.hpp"
#include "syncopate/plan/verify.hpp"

namespace syncopate::plan {
namespace {

namespace fs = std::filesystem;

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
    {"box-out-of-bounds", "box-out-of-bounds", kWF, 1, 4, "source box x[5:7, 0:4] ends at 7 in dim 0 but tensor 'x' has size 6"},
    {"box-out-of-bounds-overflow", "box-out-of-bounds", kWF, 2, 1, "ends at more than 2^63 in dim 0"},
    {"extent-mismatch", "extent-mismatch", kWF, 0, 2, "source x[2:4, 0:2] and destination y[0:1, 0:2] have different extents"},
    {"dtype-mismatch", "dtype-mismatch", kWF, 1, 3, "moves bf16 tensor 'x' into f32 tensor 'y'"},
    {"bad-tensor-shape", "bad-tensor-shape", kWF, -1, -1, "tensor 'x' dim 1 has size 0"},
    {"stream-mismatch", "stream-mismatch", kWF, 1, 4, "listed in stream 0 of rank 1 but its stream field is 1"},
    {"stream-out-of-range", "stream-out-of-range", kWF, 2, 5, "stream 3 does not exist on rank 2 (1 streams)"},
    {"chunk-not-issued", "chunk-not-issued", kWF, 0, 3, "chunk 3 (0 -> 1) is in no issue list"},
    {"chunk-issued-twice", "chunk-issued-twice", kWF, 2, 5, "is listed 2 times (first by rank 2)"},
    {"issuer-not-endpoint", "issuer-not-endpoint", kWF, 2, 3, "rank 2 issues chunk 3 (0 -> 1), but only its src or dst may"},
    {"nccl-unpaired", "nccl-unpaired", kWF, 1, 0, "NCCL chunk 0 (0 -> 1) has no recv in rank 1's streams"},
    {"unknown-dep", "unknown-dep", kWF, 1, 4, "depends on chunk 12, which does not exist (the plan has 6 chunks)"},
    {"self-dep", "self-dep", kWF, 0, 3, "depends on itself"},
    {"unknown-chunk-in-stream", "unknown-chunk-in-stream", kWF, 1, 42, "stream 0 of rank 1 lists chunk 42"},
    {"collective-tensor", "collective-tensor", kWF, -1, -1, "all-gather names tensor 'q', which is not in tensors"},
    {"collective-dim", "collective-dim", kWF, -1, -1, "all-gather dim is 2 but tensor 'x' has 2 dims"},
    {"collective-indivisible", "collective-indivisible", kWF, -1, -1, "5 is not a multiple of 2"},
    {"collective-output", "collective-output", kWF, -1, -1, "all-to-all output 'w' must be a tensor of the plan"},
    {"op-not-allowed", "op-not-allowed", kWF, 1, 3, "reduce-add into x[4:6, 0:4] on rank 1: all-gather only moves data"},
    // ---- coverage
    {"missing-shard", "missing-shard", kCov, 0, -1, "rank 0 never receives x[2:4, 0:4] (shard 1, owned by rank 1)"},
    {"shard-delivered-twice", "shard-delivered-twice", kCov, 2, 6, "receives x[2:4, 0:4] (shard 1, owned by rank 1) 2 times: first by chunk 1, last by chunk 6"},
    {"own-shard-overwritten", "own-shard-overwritten", kCov, 0, 6, "writes x[0:2, 0:4] on rank 0, inside shard 0"},
    {"wrong-data", "wrong-data", kCov, 1, 2, "y[0:2, 0:2] on rank 1 should hold block 0, sent by rank 0 from its block 1 but holds 'x' of rank 0"},
    {"contribution-missing", "contribution-missing", kCov, 2, 4, "x[4:6, 0:4] on rank 2 lacks the contribution of rank 1"},
    {"contribution-counted-twice", "contribution-counted-twice", kCov, 1, 4, "x[2:4, 0:2] on rank 1 counts the contribution of rank 0 2 times"},
    // ---- ordering
    {"forward-race", "forward-race", kOrd, 1, 4, "chunk 4 (1 -> 2) sends x[0:2, 0:4] from rank 1, but chunk 0 (0 -> 1), which writes that region there, is not ordered before it (add 0 to chunk 4's deps)"},
    {"write-race", "write-race", kOrd, 0, 4, "chunks 1 (reduce-add, 1 -> 0) and 4 (copy, 1 -> 0) both write x[0:1, 0:2] on rank 0"},
    // ---- deadlock
    {"dependency-cycle", "dependency-cycle", kDead, 0, 0, "chunk 0 (rank 0, 0 -> 1) -> (chunk 1 depends on 0) -> chunk 1 (rank 1, 1 -> 0) -> (chunk 0 depends on 1) -> chunk 0"},
    {"nccl-cross-pair-cycle", "dependency-cycle", kDead, 0, 0, "chunk 1 (rank 1, 1 -> 0) -> (issued after it on rank 1 stream 0) -> chunk 0"},
    {"nccl-order-mismatch", "nccl-order-mismatch", kDead, 0, 0, "rank 0 stream 0 sends chunks 0, 2 to rank 1 but rank 1 receives 2, 0"},
    // ---- refused by the loader, with the JSON path
    {"parse-truncated", "parse", kWF, -1, -1, "parse-truncated.json:9:22: invalid JSON"},
    {"parse-wrong-type", "parse", kWF, -1, -1, "chunks[1].box.offset[1]: expected an integer, got \"x\""},
    {"parse-missing-key", "parse", kWF, -1, -1, "chunks[0].src: expected the required key"},
    {"parse-unknown-backend", "parse", kWF, -1, -1, "chunks[2].backend: expected one of copy-engine, sm-copy, nccl"},
    {"parse-unknown-key", "parse", kWF, -1, -1, "ranks[1].stream: expected one of the rank keys"},
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
  const auto match = std::find_if(report.violations.begin(), report.violations.end(),
                                  [&](const Violation& v) {
                                    return v.rule == expect.rule && v.rank == expect.rank &&
                                           v.chunk == expect.chunk;
                                  });
  ASSERT_NE(match, report.violations.end())
      << "no " << expect.rule << " violation at rank " << expect.rank << ", chunk "
      << expect.chunk << " in:\n"
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
  EXPECT_NE(report.violations[0].detail.find("plan version is 7, this verifier reads version 1"),
            std::string::npos);
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

}  // namespace
}  // namespace syncopate::plan

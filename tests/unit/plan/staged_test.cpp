// The staged reduce-scatter and all-reduce templates (templates.hpp: each partial copied into a
// staging slot on its owner, the consumer adds the slots; all-reduce then copies each reduced
// shard from its owner to the others): every world size, split and backend verifies and matches
// a brute-force oracle of the chunk list; an element-by-element replay that shares no code with
// the verifier shows every slot (and shard) filled once with the right data; bad options are
// refused naming the option; JSON round trips; dropping the all-reduce's deps is a race.
#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/core.h>
#include <gtest/gtest.h>

#include "syncopate/common/error.hpp"
#include "syncopate/plan/json.hpp"
#include "syncopate/plan/templates.hpp"
#include "syncopate/plan/verify.hpp"

namespace syncopate::plan {
namespace {

struct StagedCase {
  Collective collective;
  int world;
  int split;
  Backend backend;
};

constexpr std::int64_t kCols = 5;

// Rows per shard 2 * split + 1: odd, so split 2, 3, 4 cut it into sub-chunks of unequal size.
std::int64_t shard_rows(const StagedCase& c) { return 2 * c.split + 1; }

TemplateOptions staged_options(const StagedCase& c) {
  TemplateOptions o;
  o.collective = c.collective;
  o.algorithm = Algorithm::direct;
  o.world_size = c.world;
  o.split = c.split;
  o.backend = c.backend;
  o.shape = {1, c.world * shard_rows(c), kCols};
  o.dim = 1;
  o.tensor = "c";
  o.staging = "p";
  o.dtype = DType::f16;
  return o;
}

// Parameterised over collective, world and split; each test loops over the backends itself, so
// the ASan run (one process per ctest case) stays short.
class StagedTemplate : public ::testing::TestWithParam<StagedCase> {
 protected:
  template <class Check>
  void for_each_backend(Check check) {
    for (auto backend : {Backend::copy_engine, Backend::sm_copy, Backend::nccl}) {
      SCOPED_TRACE(to_string(backend));
      StagedCase c = GetParam();
      c.backend = backend;
      check(c);
    }
  }
};

void check_verifies(const StagedCase& c) {
  const CommPlan plan = make_plan(staged_options(c));
  const VerifyReport report = verify(plan);
  EXPECT_TRUE(report.ok()) << report.format("staged");
}

void check_declares_the_input_and_the_staging_tensor(const StagedCase& c) {
  const CommPlan plan = make_plan(staged_options(c));
  EXPECT_EQ(plan.collective.kind, c.collective);
  EXPECT_EQ(plan.collective.tensor, "c");
  EXPECT_EQ(plan.collective.output, "p");
  EXPECT_EQ(plan.collective.dim, 1);
  EXPECT_EQ(plan.collective.algorithm, Algorithm::direct);
  EXPECT_EQ(plan.collective.split, c.split);
  ASSERT_EQ(plan.tensors.size(), 2u);
  EXPECT_EQ(plan.tensors.at("c").shape, (std::vector<std::int64_t>{1, c.world * shard_rows(c), kCols}));
  EXPECT_EQ(plan.tensors.at("p").shape, (std::vector<std::int64_t>{c.world, shard_rows(c), kCols}));
  EXPECT_EQ(plan.tensors.at("p").dtype, DType::f16);
}

// The oracle: for every ordered pair s != r and sub-chunk k, exactly one chunk copies rows
// [r*Ms + k0, +rows_k) of rank s's c into rows [k0, +rows_k) of slot s of rank r's p, pulled by
// r; all-reduce: and exactly one copies the same rows of rank r's c into rank s's c, pushed by
// r, after the first one. Chunk x -> y is on stream (y - x - 1) mod W; NCCL is issued by both.
void check_matches_the_oracle_chunk_list(const StagedCase& c) {
  const CommPlan plan = make_plan(staged_options(c));
  const std::int64_t ms = shard_rows(c);
  const bool all_reduce = c.collective == Collective::all_reduce;
  std::map<std::tuple<int, int, int>, int> seen;     // staging (s, r, k) -> chunk id
  std::map<std::tuple<int, int, int>, int> results;  // all-reduce (r, s, k) -> chunk id
  std::vector<std::vector<int>> issuers(plan.chunks.size());
  for (const auto& program : plan.ranks) {
    ASSERT_EQ(static_cast<int>(program.streams.size()), std::max(1, c.world - 1)) << "rank " << program.rank;
    for (std::size_t st = 0; st < program.streams.size(); ++st) {
      EXPECT_TRUE(std::is_sorted(program.streams[st].begin(), program.streams[st].end()));
      for (int id : program.streams[st]) issuers[static_cast<std::size_t>(id)].push_back(program.rank);
    }
  }
  for (const Chunk& chunk : plan.chunks) {
    ASSERT_NE(chunk.src, chunk.dst) << "chunk " << chunk.id << " is local";
    EXPECT_EQ(chunk.stream, ((chunk.dst - chunk.src - 1) % c.world + c.world) % c.world) << "chunk " << chunk.id;
    EXPECT_EQ(chunk.op, ChunkOp::copy);
    EXPECT_EQ(chunk.backend, c.backend);
    EXPECT_EQ(chunk.group != kNoGroup, c.backend == Backend::nccl) << "chunk " << chunk.id;
    EXPECT_EQ(chunk.tensor, "c");
    auto issued_by = issuers[static_cast<std::size_t>(chunk.id)];
    std::sort(issued_by.begin(), issued_by.end());
    if (chunk.dst_tensor == "c") {
      ASSERT_TRUE(all_reduce) << "chunk " << chunk.id << " writes c in a reduce-scatter";
      const int r = chunk.src, s = chunk.dst;
      const std::int64_t row = chunk.box.offset[1] - r * ms;  // inside shard r
      int k = -1;
      for (int i = 0; i < c.split; ++i)
        if (even_split(ms, c.split, i).begin == row) k = i;
      ASSERT_GE(k, 0) << "chunk " << chunk.id << " starts at row " << chunk.box.offset[1];
      EXPECT_TRUE(results.emplace(std::tuple{r, s, k}, chunk.id).second) << "chunk " << chunk.id << " repeats";
      const Span rows = even_split(ms, c.split, k);
      EXPECT_EQ(chunk.box, (Box{{0, r * ms + rows.begin, 0}, {1, rows.size, kCols}})) << "chunk " << chunk.id;
      EXPECT_EQ(chunk.dst_box, chunk.box) << "chunk " << chunk.id;
      // After the staging chunk s -> r of the same rows, which reads what this one overwrites.
      ASSERT_TRUE(seen.contains({s, r, k})) << "chunk " << chunk.id << " comes before its staging chunk";
      EXPECT_EQ(chunk.deps, std::vector<int>{seen.at({s, r, k})}) << "chunk " << chunk.id;
      std::vector<int> want{r};  // pushed by the owner of the result
      if (c.backend == Backend::nccl) want = {std::min(s, r), std::max(s, r)};
      EXPECT_EQ(issued_by, want) << "chunk " << chunk.id;
      continue;
    }
    const int s = chunk.src, r = chunk.dst;
    // Which sub-chunk: the one whose rows the chunk's slot box starts at.
    int k = -1;
    for (int i = 0; i < c.split; ++i)
      if (even_split(ms, c.split, i).begin == chunk.dst_box.offset[1]) k = i;
    ASSERT_GE(k, 0) << "chunk " << chunk.id << " starts at row " << chunk.dst_box.offset[1] << " of a slot";
    EXPECT_TRUE(seen.emplace(std::tuple{s, r, k}, chunk.id).second)
        << "chunk " << chunk.id << " repeats (s " << s << ", r " << r << ", k " << k << ")";
    const Span rows = even_split(ms, c.split, k);
    EXPECT_EQ(chunk.dst_tensor, "p");
    EXPECT_EQ(chunk.box, (Box{{0, r * ms + rows.begin, 0}, {1, rows.size, kCols}})) << "chunk " << chunk.id;
    EXPECT_EQ(chunk.dst_box, (Box{{s, rows.begin, 0}, {1, rows.size, kCols}})) << "chunk " << chunk.id;
    EXPECT_TRUE(chunk.deps.empty()) << "chunk " << chunk.id;
    std::vector<int> want{r};  // pulled by the owner of the slot
    if (c.backend == Backend::nccl) want = {std::min(s, r), std::max(s, r)};
    EXPECT_EQ(issued_by, want) << "chunk " << chunk.id;
  }
  const std::int64_t pairs = std::int64_t{c.world} * (c.world - 1) * c.split;
  EXPECT_EQ(static_cast<std::int64_t>(seen.size()), pairs);
  EXPECT_EQ(static_cast<std::int64_t>(results.size()), all_reduce ? pairs : 0);
  EXPECT_EQ(seen.size() + results.size(), plan.chunks.size());
}

// With NCCL, rank x's send to x+p and its recv from x-p of one sub-chunk form one group, and
// each stream of a rank lists nothing else between them.
void check_nccl_groups_pair_each_send_with_its_recv(const StagedCase& c) {
  if (c.backend != Backend::nccl || c.world < 2) return;
  const CommPlan plan = make_plan(staged_options(c));
  for (const auto& program : plan.ranks)
    for (const auto& stream : program.streams) {
      ASSERT_EQ(stream.size() % 2, 0u);
      for (std::size_t i = 0; i < stream.size(); i += 2) {
        const Chunk& a = plan.chunks[static_cast<std::size_t>(stream[i])];
        const Chunk& b = plan.chunks[static_cast<std::size_t>(stream[i + 1])];
        EXPECT_EQ(a.group, b.group) << "rank " << program.rank;
        const std::int64_t ms = shard_rows(c);
        EXPECT_EQ(a.dst_box.offset[1] % ms, b.dst_box.offset[1] % ms) << "one group, one sub-chunk";
        EXPECT_EQ(a.dst_tensor, b.dst_tensor) << "one group, one phase";
        const int sends = (a.src == program.rank) + (b.src == program.rank);
        EXPECT_EQ(sends, 1) << "rank " << program.rank << " group " << a.group;
      }
    }
}

// An element-by-element replay sharing nothing with the verifier: every element of p remembers
// which rank's c element it came from and how often it was written.
struct Origin {
  int rank = -1;
  std::int64_t row = -1, col = -1;
  int writes = 0;
};

// Chunks run in id order (every dep points to a lower id; the verifier proves the plan's
// ordering); a chunk sends what its source element holds at that moment. c starts as each
// rank's partial; on the all-reduce's owner it stands for the consumer's reduced result.
void check_element_replay_fills_every_slot_once_with_the_right_partial(const StagedCase& c) {
  const CommPlan plan = make_plan(staged_options(c));
  const std::int64_t ms = shard_rows(c);
  const int w = c.world;
  const std::int64_t m = w * ms;
  // p[rank][(slot * ms + row) * cols + col], c[rank][row * cols + col]
  std::vector<std::vector<Origin>> p(static_cast<std::size_t>(w),
                                     std::vector<Origin>(static_cast<std::size_t>(w * ms * kCols)));
  std::vector<std::vector<Origin>> cs(static_cast<std::size_t>(w));
  for (int r = 0; r < w; ++r)
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < kCols; ++j) cs[static_cast<std::size_t>(r)].push_back({r, i, j, 0});
  for (const Chunk& chunk : plan.chunks) {
    const bool to_c = chunk.dst_tensor == "c";
    for (std::int64_t i = 0; i < chunk.box.extent[1]; ++i)
      for (std::int64_t j = 0; j < chunk.box.extent[2]; ++j) {
        const Origin& from = cs[static_cast<std::size_t>(chunk.src)]
                               [static_cast<std::size_t>((chunk.box.offset[1] + i) * kCols + chunk.box.offset[2] + j)];
        const std::int64_t slot = to_c ? 0 : chunk.dst_box.offset[0] * ms;
        const std::int64_t at = (slot + chunk.dst_box.offset[1] + i) * kCols + chunk.dst_box.offset[2] + j;
        Origin& e = (to_c ? cs : p)[static_cast<std::size_t>(chunk.dst)][static_cast<std::size_t>(at)];
        e = {from.rank, from.row, from.col, e.writes + 1};
      }
  }
  for (int r = 0; r < w; ++r)
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < kCols; ++j) {
        const Origin& e = cs[static_cast<std::size_t>(r)][static_cast<std::size_t>(i * kCols + j)];
        const int owner = static_cast<int>(i / ms);
        const std::string where = fmt::format("rank {} c[0, {}, {}]", r, i, j);
        const bool arrives = c.collective == Collective::all_reduce && owner != r;
        EXPECT_EQ(e.writes, arrives ? 1 : 0) << where;
        EXPECT_EQ(e.rank, arrives ? owner : r) << where;
        EXPECT_EQ(e.row, i) << where;
      }
  for (int r = 0; r < w; ++r)
    for (int s = 0; s < w; ++s)
      for (std::int64_t i = 0; i < ms; ++i)
        for (std::int64_t j = 0; j < kCols; ++j) {
          const Origin& e = p[static_cast<std::size_t>(r)][static_cast<std::size_t>((s * ms + i) * kCols + j)];
          const std::string where = fmt::format("rank {} p[{}, {}, {}]", r, s, i, j);
          if (s == r) {
            EXPECT_EQ(e.writes, 0) << where << ": the own slot is written";
            continue;
          }
          EXPECT_EQ(e.writes, 1) << where;
          EXPECT_EQ(e.rank, s) << where;
          EXPECT_EQ(e.row, r * ms + i) << where;
          EXPECT_EQ(e.col, j) << where;
        }
}

void check_json_round_trips(const StagedCase& c) {
  const CommPlan plan = make_plan(staged_options(c));
  EXPECT_EQ(parse_plan(plan_to_json(plan)), plan);
  EXPECT_EQ(parse_plan(plan_to_json(plan, -1)), plan);
}

TEST_P(StagedTemplate, Verifies) { for_each_backend(check_verifies); }
TEST_P(StagedTemplate, DeclaresTheInputAndTheStagingTensor) {
  for_each_backend(check_declares_the_input_and_the_staging_tensor);
}
TEST_P(StagedTemplate, MatchesTheOracleChunkList) { for_each_backend(check_matches_the_oracle_chunk_list); }
TEST_P(StagedTemplate, NcclGroupsPairEachSendWithItsRecv) {
  for_each_backend(check_nccl_groups_pair_each_send_with_its_recv);
}
TEST_P(StagedTemplate, ElementReplayFillsEverySlotOnceWithTheRightPartial) {
  for_each_backend(check_element_replay_fills_every_slot_once_with_the_right_partial);
}
TEST_P(StagedTemplate, JsonRoundTrips) { for_each_backend(check_json_round_trips); }

std::vector<StagedCase> staged_cases() {
  std::vector<StagedCase> cases;
  for (auto coll : {Collective::reduce_scatter, Collective::all_reduce})
    for (int world : {1, 2, 3, 4, 8})
      for (int split : {1, 2, 3, 4}) cases.push_back({coll, world, split, Backend::copy_engine});
  return cases;
}

std::string staged_name(const ::testing::TestParamInfo<StagedCase>& info) {
  std::string name = fmt::format("{}_w{}_s{}", to_string(info.param.collective), info.param.world, info.param.split);
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

INSTANTIATE_TEST_SUITE_P(Staged, StagedTemplate, ::testing::ValuesIn(staged_cases()), staged_name);

// ---------------------------------------------------------------- shapes

TEST(StagedTemplateShapes, AnyRankAndScatterDimAfterTheUnitDim) {
  TemplateOptions o = staged_options({Collective::reduce_scatter, 3, 2, Backend::copy_engine});
  o.shape = {1, 4, 6, 5};
  o.dim = 2;  // shards of 2 along dim 2, the other dims whole
  const CommPlan plan = make_plan(o);
  EXPECT_EQ(plan.tensors.at("p").shape, (std::vector<std::int64_t>{3, 4, 2, 5}));
  for (const Chunk& c : plan.chunks) {
    EXPECT_EQ(c.box.extent, (std::vector<std::int64_t>{1, 4, 1, 5}));
    EXPECT_EQ(c.dst_box.offset[0], c.src);
    EXPECT_EQ(c.box.offset[2], c.dst * 2 + c.dst_box.offset[2]);
  }
  EXPECT_TRUE(verify(plan).ok()) << verify(plan).format("staged");
}

// Each refusal names the option and the value that cannot work.
void expect_refused(const TemplateOptions& o, const std::string& fragment) {
  try {
    make_plan(o);
    FAIL() << "accepted; expected a ShapeError containing: " << fragment;
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(StagedTemplateShapes, RefusesWhatCannotBeStaged) {
  const TemplateOptions good = staged_options({Collective::reduce_scatter, 2, 1, Backend::copy_engine});
  for (auto algorithm : {Algorithm::ring, Algorithm::bidir}) {
    TemplateOptions o = good;
    o.algorithm = algorithm;
    expect_refused(o, fmt::format("staging \"p\": algorithm {} is not supported", to_string(algorithm)));
  }
  for (auto coll : {Collective::all_gather, Collective::all_to_all}) {
    TemplateOptions o = good;
    o.collective = coll;
    expect_refused(
        o, fmt::format("only a reduce-scatter or an all-reduce can stage its partials, not {}", to_string(coll)));
  }
  TemplateOptions same = good;
  same.staging = "c";
  expect_refused(same, "staging \"c\" must be named apart from the input tensor \"c\"");
  TemplateOptions no_unit = good;
  no_unit.shape = {2, 6, 5};
  expect_refused(no_unit, "shape 2x6x5 with dim 1: the input needs a unit dim 0");
  TemplateOptions dim0 = good;
  dim0.dim = 0;
  expect_refused(dim0, "with dim 0: the input needs a unit dim 0");
  TemplateOptions odd = good;
  odd.shape = {1, 7, 5};
  expect_refused(odd, "dim 1 of size 7 is not divisible by world size 2");
  TemplateOptions fine = good;
  fine.split = 4;  // shards of 3 rows cannot make 4 sub-chunks
  expect_refused(fine, "dim 1 of size 6 cannot be cut into 2 ranks x 4 sub-chunks");
}

// ---------------------------------------------------------------- all-reduce hazards

TEST(StagedAllReduce, AResultCopiedOverAPartialBeforeItWasStagedIsARace) {
  TemplateOptions o = staged_options({Collective::all_reduce, 3, 2, Backend::copy_engine});
  CommPlan plan = make_plan(o);
  // The first result copy: rank 0's shard 0 (sub-chunk 0) into rank 1, over the partial that
  // staging chunk dep (1 -> 0) reads on rank 1.
  Chunk* result = nullptr;
  for (Chunk& chunk : plan.chunks)
    if (chunk.dst_tensor == "c" && !result) result = &chunk;
  ASSERT_NE(result, nullptr);
  ASSERT_EQ(result->deps.size(), 1u);
  const int staging = result->deps[0];
  result->deps.clear();
  const VerifyReport report = verify(plan);
  const auto race = std::find_if(report.violations.begin(), report.violations.end(), [&](const Violation& v) {
    return v.group == RuleGroup::ordering && v.rank == result->dst &&
           v.detail.find(fmt::format("chunk {}", staging)) != std::string::npos;
  });
  EXPECT_NE(race, report.violations.end()) << report.format("staged all-reduce without its dep");
}

TEST(StagedAllReduce, AMissingResultAndAnOwnShardWrittenAreNamed) {
  const TemplateOptions o = staged_options({Collective::all_reduce, 3, 1, Backend::copy_engine});
  CommPlan missing = make_plan(o);
  // Drop the last chunk (a result copy; nothing depends on it) and its listing.
  const Chunk last = missing.chunks.back();
  ASSERT_EQ(last.dst_tensor, "c");
  missing.chunks.pop_back();
  for (auto& program : missing.ranks)
    for (auto& stream : program.streams) std::erase(stream, last.id);
  VerifyReport report = verify(missing);
  ASSERT_EQ(report.violations.size(), 1u) << report.format("missing");
  EXPECT_EQ(report.violations[0].rule, "missing-shard");
  EXPECT_EQ(report.violations[0].rank, last.dst);
  EXPECT_NE(report.violations[0].detail.find(fmt::format("(shard {}: rank {}'s reduced result)", last.src, last.src)),
            std::string::npos)
      << report.format("missing");

  CommPlan own = make_plan(o);
  Chunk& first = own.chunks.back();  // src -> dst: land it in dst's own shard instead
  first.box.offset[1] = first.dst * 2;
  first.dst_box = first.box;
  report = verify(own);
  const auto hit = std::find_if(report.violations.begin(), report.violations.end(), [&](const Violation& v) {
    return v.rule == "own-shard-overwritten" && v.rank == first.dst && v.chunk == first.id;
  });
  EXPECT_NE(hit, report.violations.end()) << report.format("own shard");
}

}  // namespace
}  // namespace syncopate::plan

// Plan templates: every collective x algorithm x world size x split verifies, the structure
// the brief promises holds (counts, issuing streams, per-sub-chunk deps), and impossible
// shapes are refused with a message naming the numbers.
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <gtest/gtest.h>

#include "syncopate/common/error.hpp"
#include "syncopate/plan/templates.hpp"
#include "syncopate/plan/verify.hpp"

namespace syncopate::plan {
namespace {

struct Case {
  Collective collective;
  Algorithm algorithm;
  int world;
  int split;
};

TemplateOptions options_for(const Case& c, Backend backend = Backend::copy_engine) {
  TemplateOptions o;
  o.collective = c.collective;
  o.algorithm = c.algorithm;
  o.world_size = c.world;
  o.split = c.split;
  o.backend = backend;
  const std::int64_t n = c.collective == Collective::all_to_all ? std::int64_t{c.world} * c.split * 2
                                                                : std::int64_t{c.world} * c.split + 1;
  o.shape = {n, 16};
  return o;
}

std::int64_t expected_chunks(const Case& c) {
  const std::int64_t w = c.world, s = c.split;
  switch (c.collective) {
    case Collective::all_gather:
    case Collective::reduce_scatter:
      return w * (w - 1) * s;
    case Collective::all_reduce:
      return 2 * w * (w - 1) * s;
    case Collective::all_to_all:
      return w * w * s;
    case Collective::custom:
      break;
  }
  return -1;
}

class EveryTemplate : public ::testing::TestWithParam<Case> {};

TEST_P(EveryTemplate, Verifies) {
  for (auto backend : {Backend::copy_engine, Backend::nccl}) {
    const CommPlan plan = make_plan(options_for(GetParam(), backend));
    const VerifyReport report = verify(plan);
    EXPECT_TRUE(report.ok()) << to_string(backend) << ":\n" << report.format("template");
  }
}

TEST_P(EveryTemplate, HasDenseIdsAndTheExpectedChunkCount) {
  const CommPlan plan = make_plan(options_for(GetParam()));
  ASSERT_EQ(static_cast<std::int64_t>(plan.chunks.size()), expected_chunks(GetParam()));
  for (std::size_t i = 0; i < plan.chunks.size(); ++i) EXPECT_EQ(plan.chunks[i].id, static_cast<int>(i));
  ASSERT_EQ(static_cast<int>(plan.ranks.size()), GetParam().world);
  for (int r = 0; r < GetParam().world; ++r) EXPECT_EQ(plan.ranks[r].rank, r);
}

TEST_P(EveryTemplate, ListsEachChunkOnItsIssuersInIdOrder) {
  for (auto backend : {Backend::copy_engine, Backend::sm_copy, Backend::nccl}) {
    const CommPlan plan = make_plan(options_for(GetParam(), backend));
    std::vector<std::vector<int>> listed_by(plan.chunks.size());  // ranks listing each chunk
    for (const auto& program : plan.ranks)
      for (std::size_t s = 0; s < program.streams.size(); ++s) {
        const auto& stream = program.streams[s];
        EXPECT_TRUE(std::is_sorted(stream.begin(), stream.end())) << "rank " << program.rank << " stream " << s;
        for (int id : stream) {
          EXPECT_EQ(plan.chunks[id].stream, static_cast<int>(s)) << "chunk " << id;
          listed_by[id].push_back(program.rank);
        }
      }
    for (const Chunk& c : plan.chunks) {
      // A copy is pushed by its source, a reduce-add pulled by its destination; NCCL: both.
      std::vector<int> want{c.op == ChunkOp::reduce_add ? c.dst : c.src};
      if (backend == Backend::nccl && c.dst != c.src) want = {c.src, c.dst};
      std::sort(want.begin(), want.end());
      std::sort(listed_by[c.id].begin(), listed_by[c.id].end());
      EXPECT_EQ(listed_by[c.id], want) << "chunk " << c.id;
      for (int d : c.deps) EXPECT_LT(d, c.id) << "chunk " << c.id << " depends on a later chunk";
      EXPECT_EQ(c.backend, backend);
    }
  }
}

// A chunk that forwards data depends on exactly the chunk that brought that same box to its
// source (so each sub-chunk pipelines on its own), and a first hop depends on nothing but the
// reductions that completed the piece (all-reduce).
TEST_P(EveryTemplate, ForwardsDependOnlyOnTheirOwnSubChunk) {
  const Case c = GetParam();
  if (c.collective == Collective::all_to_all) return;  // no forwarding; ring pacing is tested below
  const CommPlan plan = make_plan(options_for(c));
  for (const Chunk& chunk : plan.chunks)
    for (int d : chunk.deps) {
      const Chunk& dep = plan.chunks[d];
      EXPECT_EQ(dep.dst, chunk.src) << "chunk " << chunk.id << " waits on chunk " << d << " landing elsewhere";
      EXPECT_EQ(dep.box, chunk.box) << "chunk " << chunk.id << " waits on chunk " << d << " of another piece";
    }
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (auto coll : {Collective::all_gather, Collective::reduce_scatter, Collective::all_reduce, Collective::all_to_all})
    for (auto algo : {Algorithm::ring, Algorithm::direct, Algorithm::bidir})
      for (int world : {1, 2, 3, 4, 7, 8})
        for (int split : {1, 2, 4}) cases.push_back({coll, algo, world, split});
  return cases;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string name = fmt::format("{}_{}_w{}_s{}", to_string(info.param.collective), to_string(info.param.algorithm),
                                 info.param.world, info.param.split);
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

INSTANTIATE_TEST_SUITE_P(Templates, EveryTemplate, ::testing::ValuesIn(all_cases()), case_name);

// ---------------------------------------------------------------- shapes and dims

TEST(TemplateShapes, NdTensorsAlongAnyDimVerify) {
  for (auto coll : {Collective::all_gather, Collective::reduce_scatter, Collective::all_reduce, Collective::all_to_all})
    for (int dim = 0; dim < 3; ++dim) {
      TemplateOptions o;
      o.collective = coll;
      o.algorithm = Algorithm::bidir;
      o.world_size = 3;
      o.split = 2;
      o.shape = {6, 12, 18};
      o.dim = dim;
      const CommPlan plan = make_plan(o);
      for (const Chunk& c : plan.chunks)
        for (int d = 0; d < 3; ++d) {
          if (d != dim) {
            EXPECT_EQ(c.box.extent[d], o.shape[d]) << "chunk " << c.id << " cuts dim " << d;
          }
        }
      const auto report = verify(plan);
      EXPECT_TRUE(report.ok()) << to_string(coll) << " dim " << dim << "\n" << report.format("template");
    }
}

TEST(TemplateShapes, UnevenShardsFollowEvenSplit) {
  TemplateOptions o;
  o.collective = Collective::all_gather;
  o.algorithm = Algorithm::direct;
  o.world_size = 4;
  o.shape = {10, 3};  // shards of 3, 3, 2, 2 rows
  const CommPlan plan = make_plan(o);
  for (const Chunk& c : plan.chunks) {
    const Span shard = even_split(10, 4, c.src);
    EXPECT_EQ(c.box.offset, (std::vector<std::int64_t>{shard.begin, 0}));
    EXPECT_EQ(c.box.extent, (std::vector<std::int64_t>{shard.size, 3}));
  }
  EXPECT_TRUE(verify(plan).ok()) << verify(plan).format("template");
}

TEST(TemplateShapes, SplitCutsEachShardIntoSubChunks) {
  TemplateOptions o;
  o.collective = Collective::all_gather;
  o.algorithm = Algorithm::ring;
  o.world_size = 2;
  o.split = 3;
  o.shape = {7};  // shards 4 and 3; sub-chunks 2,1,1 and 1,1,1
  const CommPlan plan = make_plan(o);
  std::vector<std::vector<std::int64_t>> offsets, extents;
  for (const Chunk& c : plan.chunks) offsets.push_back(c.box.offset), extents.push_back(c.box.extent);
  EXPECT_EQ(offsets, (std::vector<std::vector<std::int64_t>>{{0}, {4}, {2}, {5}, {3}, {6}}));
  EXPECT_EQ(extents, (std::vector<std::vector<std::int64_t>>{{2}, {1}, {1}, {1}, {1}, {1}}));
}

// ---------------------------------------------------------------- algorithm shapes

TEST(TemplateAlgorithms, WorldOfOneMovesNothingExceptTheOwnAllToAllBlock) {
  for (auto coll : {Collective::all_gather, Collective::reduce_scatter, Collective::all_reduce}) {
    const CommPlan plan = make_plan(options_for({coll, Algorithm::ring, 1, 1}));
    EXPECT_TRUE(plan.chunks.empty()) << to_string(coll);
  }
  const CommPlan a2a = make_plan(options_for({Collective::all_to_all, Algorithm::direct, 1, 1}));
  ASSERT_EQ(a2a.chunks.size(), 1u);
  EXPECT_EQ(a2a.chunks[0].src, 0);
  EXPECT_EQ(a2a.chunks[0].dst, 0);
  EXPECT_EQ(a2a.chunks[0].dst_tensor, "y");
}

TEST(TemplateAlgorithms, BidirSendsTheLargerHalfClockwise) {
  const CommPlan plan = make_plan(options_for({Collective::all_gather, Algorithm::bidir, 8, 1}));
  int clockwise = 0, counter = 0;
  for (const Chunk& c : plan.chunks) {
    if (c.stream == 0) {
      EXPECT_EQ(c.dst, (c.src + 1) % 8);
      ++clockwise;
    } else {
      EXPECT_EQ(c.dst, (c.src + 7) % 8);
      ++counter;
    }
  }
  EXPECT_EQ(clockwise, 8 * 4);  // each shard reaches ceil(7/2) = 4 ranks clockwise
  EXPECT_EQ(counter, 8 * 3);
}

TEST(TemplateAlgorithms, DirectIsRotatedSoNoRankIsEveryonesFirstPeer) {
  // All-gather copies are pushed: rank r serves r+1 first. Reduce-scatter adds are pulled by
  // their destination: rank r takes r-1's partial first.
  const CommPlan ag = make_plan(options_for({Collective::all_gather, Algorithm::direct, 5, 1}));
  const CommPlan rs = make_plan(options_for({Collective::reduce_scatter, Algorithm::direct, 5, 1}));
  for (int r = 0; r < 5; ++r) {
    std::vector<int> targets, sources;
    for (int id : ag.ranks[r].streams[0]) targets.push_back(ag.chunks[id].dst);
    for (int id : rs.ranks[r].streams[0]) {
      EXPECT_EQ(rs.chunks[id].dst, r);
      sources.push_back(rs.chunks[id].src);
    }
    EXPECT_EQ(targets, (std::vector<int>{(r + 1) % 5, (r + 2) % 5, (r + 3) % 5, (r + 4) % 5}));
    EXPECT_EQ(sources, (std::vector<int>{(r + 4) % 5, (r + 3) % 5, (r + 2) % 5, (r + 1) % 5}));
  }
}

TEST(TemplateAlgorithms, RingAllToAllPacesEachStepOnThePreviousArrival) {
  const CommPlan plan = make_plan(options_for({Collective::all_to_all, Algorithm::ring, 4, 1}));
  for (const Chunk& c : plan.chunks) {
    const int step = ((c.dst - c.src) % 4 + 4) % 4;
    if (step == 0) {
      EXPECT_TRUE(c.deps.empty());
      continue;
    }
    ASSERT_EQ(c.deps.size(), 1u);
    const Chunk& prev = plan.chunks[c.deps[0]];
    EXPECT_EQ(prev.dst, c.src);                                // it arrived at the sender
    EXPECT_EQ(((prev.dst - prev.src) % 4 + 4) % 4, step - 1);  // in the previous step
  }
}

TEST(TemplateAlgorithms, AllReduceGatherWaitsForEveryReductionOfItsPiece) {
  const CommPlan plan = make_plan(options_for({Collective::all_reduce, Algorithm::direct, 4, 2}));
  const std::size_t half = plan.chunks.size() / 2;
  for (std::size_t i = half; i < plan.chunks.size(); ++i) {
    const Chunk& c = plan.chunks[i];
    ASSERT_EQ(c.op, ChunkOp::copy);
    ASSERT_EQ(c.deps.size(), 3u) << "chunk " << c.id;  // one reduce-add from each other rank
    for (int d : c.deps) {
      EXPECT_EQ(plan.chunks[d].op, ChunkOp::reduce_add);
      EXPECT_EQ(plan.chunks[d].dst, c.src);
      EXPECT_EQ(plan.chunks[d].box, c.box);
    }
  }
}

TEST(TemplateAlgorithms, LargeWorldSizes) {
  TemplateOptions o;
  o.collective = Collective::all_gather;
  o.algorithm = Algorithm::direct;
  o.world_size = 64;
  o.shape = {64 * 5, 8};
  EXPECT_EQ(make_plan(o).chunks.size(), 64u * 63u);
  o.collective = Collective::reduce_scatter;
  o.algorithm = Algorithm::bidir;
  o.world_size = 256;
  o.shape = {256};
  EXPECT_EQ(make_plan(o).chunks.size(), 256u * 255u);
}

// ---------------------------------------------------------------- refusals

std::string shape_error(const TemplateOptions& o) {
  try {
    make_plan(o);
  } catch (const ShapeError& e) {
    return e.what();
  }
  return "(no ShapeError)";
}

TEST(TemplateRefusals, NameTheOptionAndTheNumbers) {
  TemplateOptions o;
  o.collective = Collective::all_gather;
  o.world_size = 4;
  o.split = 2;
  o.shape = {6, 8};
  EXPECT_EQ(shape_error(o), "dim 0 of size 6 cannot be cut into 4 ranks x 2 sub-chunks = 8 non-empty pieces");
  o.shape = {8, 8};
  o.dim = 2;
  EXPECT_EQ(shape_error(o), "dim 2 is out of range for shape 8x8 (a tensor of rank 2)");
  o.dim = 0;
  o.world_size = 0;
  EXPECT_EQ(shape_error(o), "world_size 0 is out of range: templates make plans for 1 to 1024 ranks");
  o.world_size = 1025;
  EXPECT_EQ(shape_error(o), "world_size 1025 is out of range: templates make plans for 1 to 1024 ranks");
  o.world_size = 4;
  o.split = 0;
  EXPECT_EQ(shape_error(o), "split 0 is out of range: it must be at least 1");
  o.split = 1;
  o.shape = {8, 0};
  EXPECT_EQ(shape_error(o), "shape 8x0: dimension 1 has size 0, every size must be at least 1");
  o.shape = {};
  EXPECT_EQ(shape_error(o), "shape is empty: a tensor needs at least one dimension");
  o.shape = {8, 8};
  o.collective = Collective::custom;
  EXPECT_NE(shape_error(o).find("no template makes custom plans"), std::string::npos);
}

TEST(TemplateRefusals, AllToAllNeedsEqualBlocks) {
  TemplateOptions o;
  o.collective = Collective::all_to_all;
  o.world_size = 4;
  o.shape = {10, 8};
  EXPECT_EQ(shape_error(o), "all-to-all: dim 0 of size 10 is not divisible by world size 4 (blocks must be equal)");
  o.shape = {8, 8};
  o.split = 3;
  EXPECT_EQ(shape_error(o), "dim 0 of size 8 cannot be cut into 4 blocks x 3 sub-chunks = 12 non-empty pieces");
  o.split = 1;
  o.output = "x";
  EXPECT_NE(shape_error(o).find("needs an output tensor named apart from the input"), std::string::npos);
}

TEST(TemplateRefusals, HugePlansAreRefusedNotAllocated) {
  TemplateOptions o;
  o.collective = Collective::all_reduce;
  o.world_size = 1024;
  o.split = 64;
  o.shape = {std::int64_t{1} << 40};
  EXPECT_NE(shape_error(o).find("more than the limit of"), std::string::npos);
}

}  // namespace
}  // namespace syncopate::plan

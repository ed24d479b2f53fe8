// Hand-written plans in each format (tests/unit/plan/import_good/, written from the formats'
// documentation and executors): ring and hierarchical all-gather, a two-step all-reduce and an
// all-to-all import, verify, and pass the element-level replay; what each maps to is checked
// chunk by chunk where it is short enough to state.
#include <algorithm>
#include <filesystem>
#include <set>
#include <string>

#include <fmt/core.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "element_replay.hpp"
#include "syncopate/common/error.hpp"
#include "syncopate/plan/import.hpp"

namespace syncopate::plan {
namespace {

std::filesystem::path good(const std::string& format, const std::string& file) {
  return std::filesystem::path(SYNCOPATE_SOURCE_DIR) / "tests/unit/plan/import_good" / format / file;
}

ImportedPlan load(ImportFormat format, const std::string& file, std::vector<std::int64_t> shape = {}) {
  ImportOptions o;
  if (format != ImportFormat::sendrecv) o.shape = std::move(shape);
  const auto path = good(std::string(to_string(format)), file);
  try {
    return import_plan_file(path, format, o);
  } catch (const UserError& e) {
    ADD_FAILURE() << e.what();
    throw;
  }
}

void expect_replays(const CommPlan& plan) {
  for (unsigned seed = 1; seed <= 4; ++seed) {
    const auto wrong = element_replay::replay_and_check(plan, seed);
    EXPECT_TRUE(wrong.empty()) << "seed " << seed << ": " << fmt::format("{}", fmt::join(wrong, "\n"));
  }
}

int count_op(const CommPlan& plan, ChunkOp op) {
  return static_cast<int>(
      std::count_if(plan.chunks.begin(), plan.chunks.end(), [&](const Chunk& c) { return c.op == op; }));
}

TEST(ImportMscclXml, RingAllGather) {
  const ImportedPlan p = load(ImportFormat::msccl_xml, "ring_allgather.xml", {8, 3});
  EXPECT_EQ(p.plan.collective.kind, Collective::all_gather);
  ASSERT_EQ(p.plan.chunks.size(), 12u);  // 4 GPUs forward 3 chunks each
  for (const auto& program : p.plan.ranks) {
    ASSERT_EQ(program.streams.size(), 1u) << "one thread block, one stream";
    for (int id : program.streams[0]) EXPECT_EQ(p.plan.chunks[id].dst, (program.rank + 1) % 4);
  }
  // GPU 0 first sends its own input chunk: rows 0..2 of x.
  const Chunk& first = p.plan.chunks[p.plan.ranks[0].streams[0][0]];
  EXPECT_EQ(first.box, (Box{{0, 0}, {2, 3}}));
  EXPECT_TRUE(first.deps.empty());
  // It then forwards what GPU 3 sent it (rcs): a dep on that landing.
  const Chunk& second = p.plan.chunks[p.plan.ranks[0].streams[0][1]];
  EXPECT_EQ(second.box, (Box{{6, 0}, {2, 3}}));
  ASSERT_EQ(second.deps.size(), 1u);
  EXPECT_EQ(p.plan.chunks[second.deps[0]].src, 3);
  EXPECT_EQ(p.origins[first.id], "algo/gpu[0]/tb[0]/step[0] (line 6) -> algo/gpu[1]/tb[0]/step[1] (line 15)");
  expect_replays(p.plan);
}

TEST(ImportMscclXml, HierarchicalAllGatherKeepsItsCopiesAsOrderingPoints) {
  const ImportedPlan p = load(ImportFormat::msccl_xml, "hierarchical_allgather.xml", {4, 5});
  ASSERT_EQ(p.plan.chunks.size(), 8u);  // a swap in each node, then one 2-chunk swap across
  ASSERT_EQ(p.notes.size(), 4u);        // each GPU's input -> output copy is the tensor onto itself
  EXPECT_NE(p.notes[0].find("algo/gpu[0]/tb[0]/step[0]"), std::string::npos) << p.notes[0];
  int two_chunk = 0;
  for (const auto& c : p.plan.chunks) two_chunk += c.box.extent[0] == 2 ? 1 : 0;
  EXPECT_EQ(two_chunk, 4);
  expect_replays(p.plan);
}

TEST(ImportMscclXml, TwoStepAllReduce) {
  const ImportedPlan p = load(ImportFormat::msccl_xml, "two_step_allreduce.xml", {4, 2});
  EXPECT_EQ(count_op(p.plan, ChunkOp::reduce_add), 12);
  EXPECT_EQ(count_op(p.plan, ChunkOp::copy), 12);
  // The adds into a GPU's own chunk are pulled by that GPU (its thread blocks) and ordered.
  for (const auto& c : p.plan.chunks) {
    if (c.op == ChunkOp::reduce_add) {
      EXPECT_EQ(c.box.offset[0], c.dst);
    }
  }
  expect_replays(p.plan);
}

TEST(ImportMscclXml, OneStepAllReduceOrdersOverwritesAfterTheSendThatReadsThem) {
  const ImportedPlan p = load(ImportFormat::msccl_xml, "one_step_allreduce.xml", {4, 2});
  ASSERT_TRUE(p.plan.tensors.count("scratch"));
  EXPECT_EQ(p.plan.tensors.at("scratch").shape, (std::vector<std::int64_t>{4, 2}));
  // GPU 0's add into x[0:2] comes after its send of x[0:4] only through the thread blocks'
  // order (the add waits for tb 0's receive, which follows its send): the import orders the
  // add after the send's chunk, in the stream or by a dep.
  const auto& stream = p.plan.ranks[0].streams;
  const Chunk* send = nullptr;
  const Chunk* add = nullptr;
  for (const auto& c : p.plan.chunks) {
    if (c.src == 0 && c.dst == 1 && c.dst_tensor == "scratch") send = &c;
    if (c.src == 0 && c.dst == 0) add = &c;
  }
  ASSERT_TRUE(send && add);
  bool ordered = std::find(add->deps.begin(), add->deps.end(), send->id) != add->deps.end();
  for (const auto& s : stream) {
    const auto a = std::find(s.begin(), s.end(), send->id), b = std::find(s.begin(), s.end(), add->id);
    ordered = ordered || (a != s.end() && b != s.end() && a < b);
  }
  EXPECT_TRUE(ordered);
  expect_replays(p.plan);
}

TEST(ImportMscclXml, AllToAll) {
  const ImportedPlan p = load(ImportFormat::msccl_xml, "alltoall.xml", {3, 4});
  EXPECT_EQ(p.plan.collective.output, "y");
  EXPECT_EQ(p.plan.chunks.size(), 9u);  // 3 local copies, 6 transfers
  expect_replays(p.plan);
}

TEST(ImportMscclppJson, RingAllGatherThroughPutsAndSignals) {
  const ImportedPlan p = load(ImportFormat::mscclpp_json, "ring_allgather.json", {8, 2});
  ASSERT_EQ(p.plan.chunks.size(), 12u);
  // The k-th put of GPU r waits (through r-1's signal and r's wait) for the chunk it forwards.
  for (const auto& program : p.plan.ranks) {
    const auto& s = program.streams.at(0);
    ASSERT_EQ(s.size(), 3u);
    EXPECT_TRUE(p.plan.chunks[s[0]].deps.empty());
    for (std::size_t k = 1; k < s.size(); ++k) {
      const Chunk& c = p.plan.chunks[s[k]];
      ASSERT_EQ(c.deps.size(), 1u) << c.id;
      const Chunk& d = p.plan.chunks[c.deps[0]];
      EXPECT_EQ(d.dst, program.rank);
      EXPECT_EQ(d.box, c.box);
    }
  }
  EXPECT_EQ(p.origins[0], "gpus[0].threadblocks[0].ops[0]");
  expect_replays(p.plan);
}

TEST(ImportMscclppJson, TwoStepAllReduceReadsThenPuts) {
  const ImportedPlan p = load(ImportFormat::mscclpp_json, "two_step_allreduce.json", {2, 8});
  ASSERT_EQ(p.plan.chunks.size(), 4u);
  EXPECT_EQ(count_op(p.plan, ChunkOp::reduce_add), 2);  // rre: pulled adds
  for (const auto& c : p.plan.chunks) {
    if (c.op == ChunkOp::reduce_add) {
      EXPECT_EQ(c.box.offset[0], c.dst);
    }
  }
  expect_replays(p.plan);
}

TEST(ImportMscclppJson, AllToAll) {
  const ImportedPlan p = load(ImportFormat::mscclpp_json, "alltoall.json", {6, 2});
  EXPECT_EQ(p.plan.chunks.size(), 9u);
  expect_replays(p.plan);
}

TEST(ImportSendRecv, RingAllGather) {
  const ImportedPlan p = load(ImportFormat::sendrecv, "ring_allgather.json");
  EXPECT_EQ(p.plan.chunks.size(), 12u);
  EXPECT_EQ(p.origins[0], "ranks[0].streams[0][0] -> ranks[1].streams[0][1]");
  expect_replays(p.plan);
}

TEST(ImportSendRecv, HierarchicalAllGather) {
  const ImportedPlan p = load(ImportFormat::sendrecv, "hierarchical_allgather.json");
  EXPECT_EQ(p.plan.chunks.size(), 8u);
  expect_replays(p.plan);
}

TEST(ImportSendRecv, TwoStepAllReduce) {
  const ImportedPlan p = load(ImportFormat::sendrecv, "two_step_allreduce.json");
  EXPECT_EQ(count_op(p.plan, ChunkOp::reduce_add), 12);
  EXPECT_EQ(count_op(p.plan, ChunkOp::copy), 12);
  expect_replays(p.plan);
}

TEST(ImportSendRecv, AllToAll) {
  const ImportedPlan p = load(ImportFormat::sendrecv, "alltoall.json");
  EXPECT_EQ(p.plan.chunks.size(), 9u);
  expect_replays(p.plan);
}

}  // namespace
}  // namespace syncopate::plan

// Every template -> MSCCL XML (export_msccl_xml) -> import_plan gives back the same chunks, in
// the same order on every rank's streams, ordered by the same happens-before relation; and the
// imported plan passes the element-level replay.
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "element_replay.hpp"
#include "syncopate/common/error.hpp"
#include "syncopate/plan/import.hpp"
#include "syncopate/plan/templates.hpp"

namespace syncopate::plan {
namespace {

struct Case {
  Collective collective;
  Algorithm algorithm;
  int world;
  int split;
};

TemplateOptions options_for(const Case& c) {
  TemplateOptions o;
  o.collective = c.collective;
  o.algorithm = c.algorithm;
  o.world_size = c.world;
  o.split = c.split;
  o.shape = {std::int64_t{c.world} * c.split * 2, 3};
  return o;
}

// What a chunk moves, without its id, stream or deps.
std::string key(const Chunk& c) {
  return fmt::format("{}->{} {}[{}+{}] -> {}[{}+{}] {}", c.src, c.dst, c.tensor, fmt::join(c.box.offset, ","),
                     fmt::join(c.box.extent, ","), c.dst_tensor, fmt::join(c.dst_box.offset, ","),
                     fmt::join(c.dst_box.extent, ","), to_string(c.op));
}

// Per rank, its non-empty streams as lists of keys.
std::vector<std::vector<std::vector<std::string>>> streams_of(const CommPlan& plan) {
  std::vector<std::vector<std::vector<std::string>>> out;
  for (const auto& program : plan.ranks) {
    auto& rank = out.emplace_back();
    for (const auto& stream : program.streams) {
      if (stream.empty()) continue;
      auto& keys = rank.emplace_back();
      for (int id : stream) keys.push_back(key(plan.chunks[id]));
    }
  }
  return out;
}

// before[b][a]: chunk a lands before chunk b starts (stream order and deps, transitively).
std::vector<std::vector<bool>> happens_before(const CommPlan& plan) {
  const std::size_t n = plan.chunks.size();
  std::vector<std::vector<int>> preds(n);
  for (const auto& program : plan.ranks)
    for (const auto& stream : program.streams)
      for (std::size_t i = 1; i < stream.size(); ++i) preds[stream[i]].push_back(stream[i - 1]);
  for (const auto& c : plan.chunks)
    for (int d : c.deps) preds[c.id].push_back(d);
  std::vector<std::vector<bool>> before(n, std::vector<bool>(n, false));
  std::vector<int> state(n, 0);  // 0 new, 1 visiting, 2 done
  auto visit = [&](auto&& self, int c) -> void {
    if (state[c] == 2) return;
    EXPECT_NE(state[c], 1) << "a cycle through chunk " << c;
    if (state[c] == 1) return;
    state[c] = 1;
    for (int p : preds[c]) {
      self(self, p);
      before[c][p] = true;
      for (std::size_t a = 0; a < n; ++a)
        if (before[p][a]) before[c][a] = true;
    }
    state[c] = 2;
  };
  for (std::size_t c = 0; c < n; ++c) visit(visit, static_cast<int>(c));
  return before;
}

class TemplateRoundTrip : public ::testing::TestWithParam<Case> {};

TEST_P(TemplateRoundTrip, ExportThenImportGivesTheSamePlan) {
  const TemplateOptions options = options_for(GetParam());
  const CommPlan original = make_plan(options);
  const std::string xml = export_msccl_xml(original, "round-trip");
  ImportOptions import_options;
  import_options.source = "round-trip.xml";
  import_options.shape = options.shape;
  ImportedPlan imported;
  try {
    imported = import_plan(xml, ImportFormat::msccl_xml, import_options);
  } catch (const UserError& e) {
    FAIL() << e.what() << "\n" << xml;
  }
  const CommPlan& back = imported.plan;
  ASSERT_EQ(back.chunks.size(), original.chunks.size()) << xml;
  EXPECT_EQ(back.collective.kind, original.collective.kind);
  EXPECT_EQ(back.tensors, original.tensors);

  // The same chunks (each once: keys name chunks uniquely in the templates).
  std::map<std::string, int> original_id, back_id;
  for (const auto& c : original.chunks) ASSERT_TRUE(original_id.emplace(key(c), c.id).second) << key(c);
  for (const auto& c : back.chunks) ASSERT_TRUE(back_id.emplace(key(c), c.id).second) << key(c);
  for (const auto& [k, id] : original_id) ASSERT_TRUE(back_id.count(k)) << "missing after the round trip: " << k;

  // The same issue order on every rank.
  EXPECT_EQ(streams_of(back), streams_of(original)) << xml;

  // The same happens-before relation.
  const auto before_original = happens_before(original);
  const auto before_back = happens_before(back);
  for (const auto& [ka, a] : original_id)
    for (const auto& [kb, b] : original_id)
      ASSERT_EQ(before_original[b][a], before_back[back_id[kb]][back_id[ka]])
          << ka << " before " << kb << ": " << before_original[b][a] << " in the template";

  // Every chunk names the steps it came from.
  ASSERT_EQ(imported.origins.size(), back.chunks.size());
  for (const auto& origin : imported.origins) EXPECT_NE(origin.find("algo/gpu["), std::string::npos) << origin;

  const auto wrong = element_replay::replay_and_check(back, 1);
  EXPECT_TRUE(wrong.empty()) << fmt::format("{}", fmt::join(wrong, "\n"));
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (auto coll : {Collective::all_gather, Collective::reduce_scatter, Collective::all_reduce, Collective::all_to_all})
    for (auto algo : {Algorithm::ring, Algorithm::direct, Algorithm::bidir})
      for (int world = 1; world <= 8; ++world)
        for (int split : {1, 2}) cases.push_back({coll, algo, world, split});
  return cases;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::string name = fmt::format("{}_{}_w{}_s{}", to_string(c.collective), to_string(c.algorithm), c.world, c.split);
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

INSTANTIATE_TEST_SUITE_P(AllTemplates, TemplateRoundTrip, ::testing::ValuesIn(all_cases()), case_name);

TEST(ExportMscclXml, RefusesWhatMscclCannotExpress) {
  TemplateOptions o;
  o.collective = Collective::all_gather;
  o.world_size = 2;
  o.shape = {4, 2};
  o.backend = Backend::nccl;
  try {
    export_msccl_xml(make_plan(o));
    FAIL() << "an NCCL plan was exported";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("chunk 0 is an NCCL chunk"), std::string::npos) << e.what();
  }
  o.backend = Backend::copy_engine;
  o.collective = Collective::reduce_scatter;
  o.algorithm = Algorithm::direct;
  o.shape = {1, 4, 2};
  o.dim = 1;
  o.staging = "p";
  EXPECT_THROW(export_msccl_xml(make_plan(o)), UserError);
  // A direct all-gather of 3 ranks, written by hand: each shard moves in two halves along dim 1
  // (which MSCCL's chunks cannot cut), or whole with a dep on a chunk that lands on a third rank.
  auto direct = [](bool halves, bool third_rank_dep) {
    CommPlan p;
    p.collective.kind = Collective::all_gather;
    p.collective.tensor = "x";
    p.world_size = 3;
    p.tensors["x"] = TensorSpec{{3, 4}, DType::bf16, "row-major"};
    for (int r = 0; r < 3; ++r) p.ranks.push_back({r, {{}}});
    for (int src = 0; src < 3; ++src)
      for (int step = 1; step < 3; ++step)
        for (int half = 0; half < (halves ? 2 : 1); ++half) {
          Chunk c;
          c.id = static_cast<int>(p.chunks.size());
          c.tensor = c.dst_tensor = "x";
          c.box = c.dst_box = halves ? Box{{src, 2 * half}, {1, 2}} : Box{{src, 0}, {1, 4}};
          c.src = src;
          c.dst = (src + step) % 3;
          if (third_rank_dep && c.src == 2 && c.dst == 1) c.deps = {3};  // chunk 3: 1 -> 0
          p.ranks[src].streams[0].push_back(c.id);
          p.chunks.push_back(c);
        }
    EXPECT_TRUE(verify(p).ok()) << verify(p).format("hand-made");
    return p;
  };
  EXPECT_NO_THROW(export_msccl_xml(direct(false, false)));
  try {
    export_msccl_xml(direct(true, false));
    FAIL() << "a box cutting dim 1 was exported";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("chunk 0 cuts dim 1"), std::string::npos) << e.what();
  }
  try {
    export_msccl_xml(direct(false, true));
    FAIL() << "a dep landing on a third rank was exported";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("depends on chunk 3, which lands on rank 0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace syncopate::plan

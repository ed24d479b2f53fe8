#include <gtest/gtest.h>

#include "syncopate/common/error.hpp"
#include "syncopate/lower/signal_table.hpp"
#include "syncopate/plan/templates.hpp"
#include "syncopate/runtime/heap_layout.hpp"

namespace syncopate::runtime {
namespace {

plan::CommPlan make(plan::Collective c, plan::Backend b, int world, int dim = 0) {
  plan::TemplateOptions o;
  o.collective = c;
  o.algorithm = plan::Algorithm::ring;
  o.world_size = world;
  o.shape = {world * 4 + 1, 12};
  o.dim = dim;
  o.dtype = plan::DType::bf16;
  o.backend = b;
  return plan::make_plan(o);
}

std::vector<lower::SignalTable> tables_of(const plan::CommPlan& p) {
  return lower::lower(p, lower::TileGrid{1, 1, 1, 1}, {});
}

TEST(HeapLayout, RegionsAreAlignedDisjointAndInsideTheHeap) {
  const auto p = make(plan::Collective::all_reduce, plan::Backend::copy_engine, 4);
  const auto t = tables_of(p);
  const auto layout = make_heap_layout(p, t);
  std::vector<std::pair<std::int64_t, std::int64_t>> regions;
  regions.emplace_back(layout.control_offset, kControlSlots * 4);
  regions.emplace_back(layout.signals_offset, layout.num_signal_slots * 4);
  for (const auto& [name, off] : layout.tensor_offsets) regions.emplace_back(off, p.tensors.at(name).elements() * 2);
  for (const auto& c : p.chunks)
    if (layout.staging_offset_of_chunk[c.id] >= 0)
      regions.emplace_back(layout.staging_offset_of_chunk[c.id], c.box.elements() * 2);
  std::sort(regions.begin(), regions.end());
  for (std::size_t i = 0; i < regions.size(); ++i) {
    EXPECT_EQ(regions[i].first % kHeapAlign, 0);
    EXPECT_LE(regions[i].first + regions[i].second, layout.total_bytes);
    if (i > 0) {
      EXPECT_LE(regions[i - 1].first + regions[i - 1].second, regions[i].first);
    }
  }
}

TEST(HeapLayout, SignalRegionFitsTheLargestTable) {
  const auto p = make(plan::Collective::all_gather, plan::Backend::sm_copy, 3);
  const auto t = tables_of(p);
  std::size_t most = 0;
  for (const auto& table : t) most = std::max(most, table.slots.size());
  EXPECT_EQ(make_heap_layout(p, t).num_signal_slots, static_cast<int>(most));
}

TEST(HeapLayout, StagingOnlyWhereABackendBouncesThroughIt) {
  // copy-engine reduce-add bounces; sm-copy adds in place; nccl copies of whole rows do not.
  const auto ce = make(plan::Collective::reduce_scatter, plan::Backend::copy_engine, 2);
  const auto ce_layout = make_heap_layout(ce, tables_of(ce));
  for (const auto& c : ce.chunks) EXPECT_GE(ce_layout.staging_offset_of_chunk[c.id], 0) << c.id;
  const auto sm = make(plan::Collective::reduce_scatter, plan::Backend::sm_copy, 2);
  const auto sm_layout = make_heap_layout(sm, tables_of(sm));
  for (const auto& c : sm.chunks) EXPECT_EQ(sm_layout.staging_offset_of_chunk[c.id], -1) << c.id;
  const auto rows = make(plan::Collective::all_gather, plan::Backend::nccl, 2, 0);
  const auto rows_layout = make_heap_layout(rows, tables_of(rows));
  for (const auto& c : rows.chunks) EXPECT_EQ(rows_layout.staging_offset_of_chunk[c.id], -1) << c.id;
  const auto cols = make(plan::Collective::all_gather, plan::Backend::nccl, 2, 1);
  const auto cols_layout = make_heap_layout(cols, tables_of(cols));
  for (const auto& c : cols.chunks) EXPECT_GE(cols_layout.staging_offset_of_chunk[c.id], 0) << c.id;
}

TEST(HeapLayout, UnknownTensorNamesTheTensorsThereAre) {
  const auto p = make(plan::Collective::all_gather, plan::Backend::copy_engine, 2);
  const auto layout = make_heap_layout(p, tables_of(p));
  try {
    layout.tensor_offset("a");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown-tensor: \"a\" (the plan has: x)"), std::string::npos) << e.what();
  }
}

TEST(HeapLayout, TableCountMustMatchWorld) {
  const auto p = make(plan::Collective::all_gather, plan::Backend::copy_engine, 2);
  auto t = tables_of(p);
  t.pop_back();
  EXPECT_THROW(make_heap_layout(p, t), UserError);
}

}  // namespace
}  // namespace syncopate::runtime

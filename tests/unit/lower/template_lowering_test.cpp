// Every chunk of every template lowers to exactly one landing slot, on its destination only,
// every tile's wait list is exactly the set of chunks landing where it reads (brute force),
// and producer notifies of every reduction template match brute force too.
#include <gtest/gtest.h>

#include "brute_force.hpp"
#include "syncopate/lower/signal_table.hpp"
#include "syncopate/plan/templates.hpp"
#include "test_plans.hpp"

namespace syncopate::lower {
namespace {

using testing::all_template_cases;

TEST(TemplateLowering, EveryChunkHasExactlyOneLandingSlotOnItsDestination) {
  for (const auto& tc : all_template_cases()) {
    SCOPED_TRACE(tc.name);
    const plan::CommPlan plan = plan::make_plan(tc.options);
    const TileGrid grid{tc.options.shape[0], 6, 3, 4};
    const auto tables = lower(plan, grid, {{testing::consumed_tensor(tc.options), AccessRole::consume, 0, -1}});
    ASSERT_EQ(tables.size(), static_cast<std::size_t>(plan.world_size));
    std::vector<int> landings(plan.chunks.size(), 0);
    for (const auto& table : tables) {
      ASSERT_EQ(table.landing_slot_of_chunk.size(), plan.chunks.size());
      for (const auto& slot : table.slots) {
        EXPECT_EQ(table.slots.at(slot.slot).slot, slot.slot);
        if (slot.kind != SlotKind::landing) continue;
        ++landings.at(slot.chunk);
        EXPECT_EQ(plan.chunks[slot.chunk].dst, table.rank) << "chunk " << slot.chunk;
        EXPECT_EQ(slot.writers, 1);
        EXPECT_EQ(table.landing_slot_of_chunk[slot.chunk], slot.slot);
      }
      for (std::size_t c = 0; c < plan.chunks.size(); ++c)
        if (plan.chunks[c].dst != table.rank) {
          EXPECT_EQ(table.landing_slot_of_chunk[c], -1);
        }
    }
    for (std::size_t c = 0; c < plan.chunks.size(); ++c) EXPECT_EQ(landings[c], 1) << "chunk " << c;
  }
}

TEST(TemplateLowering, WaitListsMatchBruteForceForEveryTemplate) {
  for (const auto& tc : all_template_cases()) {
    if (tc.options.world_size > 4 && tc.options.split > 2) continue;  // keep the run short
    SCOPED_TRACE(tc.name);
    const plan::CommPlan plan = plan::make_plan(tc.options);
    const TileGrid grid{tc.options.shape[0], 6, 3, 4};
    const TileAccess access{testing::consumed_tensor(tc.options), AccessRole::consume, 0, 1};
    const auto tables = lower(plan, grid, {access});
    for (const auto& table : tables) {
      const auto expected = testing::brute_waits(plan, grid, access, table.rank);
      const auto actual = testing::chunks_of(table, table.tile_waits);
      for (std::size_t t = 0; t < expected.size(); ++t)
        EXPECT_EQ(actual[t], expected[t]) << "rank " << table.rank << " tile " << t;
      for (const auto& waits : table.tile_waits)
        for (int s : waits) EXPECT_EQ(table.slots[s].kind, SlotKind::landing);
    }
  }
}

TEST(ProducerNotifies, ReductionTemplatesMatchBruteForce) {
  for (const auto& tc : testing::all_template_cases()) {
    const auto kind = tc.options.collective;
    if (kind != plan::Collective::reduce_scatter && kind != plan::Collective::all_reduce) continue;
    if (tc.options.world_size > 4) continue;  // keep the run short
    SCOPED_TRACE(tc.name);
    const auto plan = plan::make_plan(tc.options);
    testing::expect_notifies_match_brute_force(plan, {tc.options.shape[0], 6, 3, 4},
                                               {tc.options.tensor, AccessRole::produce, 0, 1});
  }
}

}  // namespace
}  // namespace syncopate::lower

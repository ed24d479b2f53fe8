// The JSON dump of signal tables reads back to the same tables, and stays readable: arrays of
// numbers on one line.
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "syncopate/common/json_text.hpp"
#include "syncopate/lower/signal_table_csr.hpp"
#include "syncopate/lower/signal_table_json.hpp"
#include "syncopate/lower/spelling.hpp"
#include "test_plans.hpp"

namespace syncopate::lower {
namespace {

TEST(SignalTableJson, ReadsBackToTheTables) {
  const auto plan = testing::hand_direct_reduce_scatter(3, 7, 5);
  const TileGrid grid{7, 5, 2, 3};
  const std::vector<TileAccess> accesses{{"x", AccessRole::produce, 0, 1}, {"x", AccessRole::consume, 0, -1}};
  const auto tables = lower(plan, grid, accesses);
  const auto doc = nlohmann::json::parse(signal_tables_to_json(tables, grid, accesses));
  EXPECT_EQ(doc.at("version"), kSignalTableJsonVersion);
  EXPECT_EQ(doc.at("kind"), "signal-tables");
  EXPECT_EQ(doc.at("grid").at("tiles_m"), 4);
  EXPECT_EQ(doc.at("grid").at("tiles_n"), 2);
  ASSERT_EQ(doc.at("accesses").size(), 2u);
  EXPECT_EQ(doc.at("accesses")[0].at("role"), "produce");
  EXPECT_EQ(doc.at("accesses")[1].at("n_dim"), -1);
  ASSERT_EQ(doc.at("ranks").size(), tables.size());
  for (const auto& table : tables) {
    const auto& r = doc.at("ranks")[table.rank];
    EXPECT_EQ(r.at("rank"), table.rank);
    ASSERT_EQ(r.at("slots").size(), table.slots.size());
    for (const auto& s : table.slots) {
      const auto& js = r.at("slots")[s.slot];
      EXPECT_EQ(js.at("slot"), s.slot);
      EXPECT_EQ(js.at("chunk"), s.chunk);
      EXPECT_EQ(js.at("writers"), s.writers);
      EXPECT_EQ(plan::parse_enum<SlotKind>(js.at("kind").get<std::string>()), s.kind);
    }
    EXPECT_EQ(r.at("tile_waits").get<std::vector<std::vector<int>>>(), table.tile_waits);
    EXPECT_EQ(r.at("tile_notifies").get<std::vector<std::vector<int>>>(), table.tile_notifies);
    const auto arrays = to_arrays(table);
    EXPECT_EQ(r.at("csr").at("wait_offsets").get<std::vector<std::int32_t>>(), arrays.waits.offsets);
    EXPECT_EQ(r.at("csr").at("notify_slots").get<std::vector<std::int32_t>>(), arrays.notifies.items);
    EXPECT_EQ(r.at("csr").at("num_landing"), arrays.num_landing);
  }
}

TEST(PrettyJson, SameValueScalarArraysOnOneLine) {
  const std::string text =
      R"({"b": [1, 2, 3], "a": {"deep": [[1, 2], [], [3]], "s": "x\"y"}, "e": [], "o": {},)"
      R"( "big": {"k1": 1, "k2": 2, "k3": 3, "k4": 4, "k5": 5, "k6": 6, "k7": 7, "k8": 8, "k9": 9}})";
  const std::string pretty = pretty_json(text, 2);
  EXPECT_EQ(nlohmann::json::parse(pretty), nlohmann::json::parse(text));
  EXPECT_NE(pretty.find("\"b\": [1, 2, 3]"), std::string::npos) << pretty;
  EXPECT_NE(pretty.find("      [1, 2],\n"), std::string::npos) << pretty;
  EXPECT_NE(pretty.find("\"e\": []"), std::string::npos) << pretty;
  EXPECT_NE(pretty.find("\"o\": {}"), std::string::npos) << pretty;
  EXPECT_NE(pretty.find("\"big\": {\n"), std::string::npos) << pretty;  // more than 8 keys
  EXPECT_EQ(pretty.back(), '\n');
}

}  // namespace
}  // namespace syncopate::lower

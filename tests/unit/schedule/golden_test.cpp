// Golden signal tables and tile orders for two small cases, diffed line by line.
// Regenerate with scripts/regen_golden_lower.sh (sets SYNCOPATE_REGEN_GOLDEN=1) after a change
// that is meant to alter them, and review the diff.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "syncopate/lower/signal_table.hpp"
#include "syncopate/lower/signal_table_json.hpp"
#include "syncopate/plan/templates.hpp"
#include "syncopate/plan/verify.hpp"
#include "syncopate/schedule/tile_order.hpp"
#include "syncopate/schedule/tile_order_json.hpp"

namespace syncopate::schedule {
namespace {

namespace fs = std::filesystem;

fs::path golden_dir() { return fs::path(SYNCOPATE_SOURCE_DIR) / "tests" / "golden" / "lower"; }

bool regenerating() {
  const char* flag = std::getenv("SYNCOPATE_REGEN_GOLDEN");
  return flag != nullptr && std::string(flag) == "1";
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Compares `actual` with the golden file, reporting the first differing line.
void expect_golden(const std::string& name, const std::string& actual) {
  const fs::path path = golden_dir() / name;
  if (regenerating()) {
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << actual;
    return;
  }
  ASSERT_TRUE(fs::exists(path)) << path << " is missing; run scripts/regen_golden_lower.sh";
  const std::string expected = read_file(path);
  if (expected == actual) return;
  std::istringstream e(expected), a(actual);
  std::string el, al;
  for (int line = 1;; ++line) {
    const bool more_e = static_cast<bool>(std::getline(e, el));
    const bool more_a = static_cast<bool>(std::getline(a, al));
    if (!more_e && !more_a) break;
    if (el != al || more_e != more_a) {
      ADD_FAILURE() << path << ":" << line << " differs\n  golden: " << (more_e ? el : "<end>")
                    << "\n  actual: " << (more_a ? al : "<end>")
                    << "\n(if the change is intended, run scripts/regen_golden_lower.sh)";
      return;
    }
  }
}

struct GoldenCase {
  std::string name;
  plan::TemplateOptions options;
  lower::TileGrid grid;
  lower::TileAccess access;
  int group_m;
};

void check_case(const GoldenCase& gc) {
  const auto plan = plan::make_plan(gc.options);
  plan::verify_or_throw(plan, gc.name);
  const auto tables = lower::lower(plan, gc.grid, {gc.access});
  expect_golden(gc.name + ".signals.json", lower::signal_tables_to_json(tables, gc.grid, {gc.access}));
  const auto arrival = estimate_arrival(plan);
  std::vector<TileOrder> orders;
  for (const auto& table : tables)
    orders.push_back(make_tile_order(plan, table, gc.grid, OrderKind::arrival, arrival, gc.group_m));
  expect_golden(gc.name + ".arrival.json", tile_orders_to_json(orders, gc.grid, gc.group_m, arrival));
}

TEST(Golden, RingAllGatherThreeRanksSplitTwo) {
  // x [12, 8] gathered along rows; 5-row tiles straddle the 2-row sub-chunks.
  plan::TemplateOptions o;
  o.collective = plan::Collective::all_gather;
  o.algorithm = plan::Algorithm::ring;
  o.world_size = 3;
  o.split = 2;
  o.shape = {12, 8};
  check_case({"ag_ring_w3_s2", o, {12, 10, 5, 4}, {"x", lower::AccessRole::consume, 0, -1}, 2});
}

TEST(Golden, DirectReduceScatterTwoRanks) {
  // GEMM+RS: C partials [6, 6], 4x4 tiles; the shard boundary at row 3 cuts tile row 0.
  plan::TemplateOptions o;
  o.collective = plan::Collective::reduce_scatter;
  o.algorithm = plan::Algorithm::direct;
  o.world_size = 2;
  o.shape = {6, 6};
  check_case({"rs_direct_w2", o, {6, 6, 4, 4}, {"x", lower::AccessRole::produce, 0, 1}, 2});
}

}  // namespace
}  // namespace syncopate::schedule

// `syncopate lower` (per-rank signal tables for a GEMM tiling) and `syncopate schedule` (per-rank
// tile orders). Both verify the plan first and write JSON to -o (stdout when absent or "-").
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/core.h>
#include <fmt/format.h>

#include "cli_args.hpp"
#include "commands.hpp"
#include "text_files.hpp"
#include "syncopate/common/error.hpp"
#include "syncopate/lower/signal_table.hpp"
#include "syncopate/lower/signal_table_json.hpp"
#include "syncopate/lower/spelling.hpp"
#include "syncopate/plan/json.hpp"
#include "syncopate/plan/verify.hpp"
#include "syncopate/schedule/tile_order.hpp"
#include "syncopate/schedule/tile_order_json.hpp"

namespace syncopate::cli {
namespace {

// Options shared by `lower` and `schedule`.
struct GemmArgs {
  std::string plan_file;
  std::string gemm;
  std::string tile = "128x256";
  std::string tensor;
  std::string role;
  std::optional<int> m_dim;
  std::optional<int> n_dim;
  std::string output;
};

void add_gemm_options(CLI::App& cmd, GemmArgs& a) {
  cmd.add_option("plan", a.plan_file, "Plan JSON file")->required();
  cmd.add_option("--gemm", a.gemm, "Local GEMM shape MxNxK")->required()->check(sizes_validator(3, "MxNxK"));
  cmd.add_option("--tile", a.tile, "Tile BLOCK_MxBLOCK_N")
      ->capture_default_str()
      ->check(sizes_validator(2, "BLOCK_MxBLOCK_N"));
  cmd.add_option("--tensor", a.tensor,
                 "Communicated tensor the kernel accesses (default: the plan's collective tensor; "
                 "the output for all-to-all)");
  cmd.add_option("--role", a.role,
                 "consume or produce (default: consume for all-gather/all-to-all/custom, produce "
                 "for reduce-scatter/all-reduce)")
      ->check(CLI::IsMember({"consume", "produce"}));
  cmd.add_option("--m-dim", a.m_dim, "Tensor dim indexed by the tile's rows, -1 for none (default 0)");
  cmd.add_option("--n-dim", a.n_dim,
                 "Tensor dim indexed by the tile's columns, -1 for none (default: -1 to consume, 1 "
                 "to produce a tensor of 2 or more dims)");
  cmd.add_option("-o,--output", a.output, "Output JSON file (default: stdout)");
}

struct Lowered {
  plan::CommPlan plan;
  lower::TileGrid grid;
  std::vector<lower::TileAccess> accesses;
  std::vector<lower::SignalTable> tables;
};

// Loads and verifies the plan, fills in the defaults, and lowers it.
Lowered load_and_lower(const GemmArgs& a) {
  Lowered out;
  out.plan = plan::load_plan(a.plan_file);
  plan::verify_or_throw(out.plan, a.plan_file);
  const auto gemm = *parse_sizes(a.gemm, 3);  // CLI11 validated both
  const auto tile = *parse_sizes(a.tile, 2);
  out.grid = {gemm[0], gemm[1], tile[0], tile[1]};

  const auto& coll = out.plan.collective;
  lower::TileAccess access;
  access.tensor = a.tensor;
  if (access.tensor.empty()) access.tensor = coll.kind == plan::Collective::all_to_all ? coll.output : coll.tensor;
  if (access.tensor.empty())
    throw UserError(
        fmt::format("{}: collective.tensor: the plan names no collective tensor; "
                    "pass --tensor",
                    a.plan_file));
  const bool reduction = coll.kind == plan::Collective::reduce_scatter || coll.kind == plan::Collective::all_reduce;
  access.role = a.role.empty() ? (reduction ? lower::AccessRole::produce : lower::AccessRole::consume)
                               : *plan::parse_enum<lower::AccessRole>(a.role);
  access.m_dim = a.m_dim.value_or(0);
  if (a.n_dim) {
    access.n_dim = *a.n_dim;
  } else {
    const auto it = out.plan.tensors.find(access.tensor);
    const bool two_d = it != out.plan.tensors.end() && it->second.shape.size() >= 2;
    access.n_dim = access.role == lower::AccessRole::produce && two_d && access.m_dim != 1 ? 1 : -1;
  }
  out.accesses = {access};
  out.tables = lower::lower(out.plan, out.grid, out.accesses);
  return out;
}

void run_lower(const GemmArgs& a) {
  const Lowered l = load_and_lower(a);
  write_text_file(a.output, lower::signal_tables_to_json(l.tables, l.grid, l.accesses), "output");
  if (!a.output.empty() && a.output != "-") {
    std::size_t slots = 0;
    for (const auto& t : l.tables) slots += t.slots.size();
    fmt::print("{}: {} ranks, {} slots, {} tiles of {}x{} ({} {} m_dim {} n_dim {})\n", a.output, l.tables.size(),
               slots, l.grid.count(), l.grid.block_m, l.grid.block_n, plan::to_string(l.accesses[0].role),
               l.accesses[0].tensor, l.accesses[0].m_dim, l.accesses[0].n_dim);
  }
}

void run_schedule(const GemmArgs& a, const std::string& order_name, int group_m) {
  const Lowered l = load_and_lower(a);
  const auto kind = *plan::parse_enum<schedule::OrderKind>(order_name);
  const auto arrival = schedule::estimate_arrival(l.plan);
  std::vector<schedule::TileOrder> orders;
  for (const auto& table : l.tables)
    orders.push_back(schedule::make_tile_order(l.plan, table, l.grid, kind, arrival, group_m));
  write_text_file(a.output, schedule::tile_orders_to_json(orders, l.grid, group_m, arrival), "output");
  if (!a.output.empty() && a.output != "-")
    fmt::print("{}: {} order of {} tiles on {} ranks (group_m {})\n", a.output, order_name, l.grid.count(),
               orders.size(), group_m);
}

std::vector<std::string> order_spellings() {
  std::vector<std::string> out;
  for (const auto& [value, name] : plan::EnumTable<schedule::OrderKind>::entries) out.emplace_back(name);
  return out;
}

}  // namespace

void register_lower_commands(CLI::App& app) {
  auto lower_args = std::make_shared<GemmArgs>();
  auto* lower_cmd = app.add_subcommand("lower", "Lower a plan to per-rank signal tables for a GEMM tiling (JSON)");
  add_gemm_options(*lower_cmd, *lower_args);
  lower_cmd->callback([lower_args] { run_lower(*lower_args); });

  auto schedule_args = std::make_shared<GemmArgs>();
  auto order = std::make_shared<std::string>("arrival");
  auto group_m = std::make_shared<int>(8);
  auto* schedule_cmd = app.add_subcommand("schedule", "Per-rank tile orders for a GEMM tiling of a plan (JSON)");
  add_gemm_options(*schedule_cmd, *schedule_args);
  schedule_cmd->add_option("--order", *order, "Tile order")
      ->capture_default_str()
      ->check(CLI::IsMember(order_spellings()));
  schedule_cmd->add_option("--group-m", *group_m, "Rows of tiles per group-M swizzle group")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  schedule_cmd->callback([schedule_args, order, group_m] { run_schedule(*schedule_args, *order, *group_m); });
}

}  // namespace syncopate::cli

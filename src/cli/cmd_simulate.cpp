// `syncopate simulate` (predicted sequential, kernel-level and fused times of one plan + GEMM,
// with optional trace and SVG) and `syncopate tune` (the simulator's choice for a shape).
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/core.h>

#include "cli_args.hpp"
#include "commands.hpp"
#include "repo_files.hpp"
#include "text_files.hpp"
#include "syncopate/common/error.hpp"
#include "syncopate/plan/json.hpp"
#include "syncopate/plan/templates.hpp"
#include "syncopate/plan/verify.hpp"
#include "syncopate/sim/autotune.hpp"
#include "syncopate/sim/simulator.hpp"
#include "syncopate/sim/trace.hpp"

namespace syncopate::cli {
namespace {

namespace fs = std::filesystem;

// --calib, else the calib/h200.json shipped in the source tree (found as the demo finds it).
sim::Calibration find_calibration(const std::string& given) {
  return sim::load_calibration(given.empty() ? find_repo_file("calib/h200.json", "--calib") : fs::path(given));
}

struct SimulateArgs {
  std::string plan_file, gemm, tile = "128x256", calib, order = "arrival", trace, svg;
  std::string timeline = "fused";
  bool dynamic = false;
};

// A mode the simulator cannot run a plan in has an infinite time (kernel-level mode for a staged
// plan, or a backend syncopate.kernel_level does not run): show it as "-".
std::string us_or_dash(double us, int width) {
  return std::isfinite(us) ? fmt::format("{:>{}.1f}", us, width) : fmt::format("{:>{}}", "-", width);
}

void print_row(std::string_view name, double us, double floor) {
  if (!std::isfinite(us)) {
    fmt::print("  {:<26} {:>11}      (does not apply to this plan)\n", name, "-");
    return;
  }
  fmt::print("  {:<26} {:>11.1f} us   {:>6.2f}x floor\n", name, us, us / floor);
}

void run_simulate(const SimulateArgs& a) {
  const auto plan = plan::load_plan(a.plan_file);
  plan::verify_or_throw(plan, a.plan_file);
  const auto calib = find_calibration(a.calib);
  const auto g = *parse_sizes(a.gemm, 3);
  const auto t = *parse_sizes(a.tile, 2);
  const sim::GemmShape gemm{g[0], g[1], g[2], t[0], t[1]};
  const auto order = *plan::parse_enum<schedule::OrderKind>(a.order);
  sim::SimOptions options;
  options.dynamic_assignment = a.dynamic;
  sim::FusedCall call;
  try {
    call = sim::make_fused_call(plan, gemm, order, calib);
  } catch (const UserError& e) {
    throw UserError(fmt::format("{}: {}", a.plan_file, e.what()));  // say which plan did not fit
  }
  const auto p = sim::predict(call, calib, options);

  const auto grid = gemm.grid();
  fmt::print("plan         {}: {} {}, world {}, split {}, {} chunks\n", a.plan_file,
             plan::to_string(plan.collective.kind), plan::to_string(plan.collective.algorithm), plan.world_size,
             plan.collective.split, plan.chunks.size());
  fmt::print("gemm         {}x{}x{} per rank, tile {}x{}: {} tiles ({:.2f} waves on {} SMs), {} order, {} workers\n",
             gemm.m, gemm.n, gemm.k, gemm.block_m, gemm.block_n, grid.count(), double(grid.count()) / calib.sms,
             calib.sms, a.order, a.dynamic ? "dynamic" : "static");
  fmt::print("calibration  {}\n\n", calib.device);
  print_row("GEMM alone", p.gemm_alone_us, p.floor_us);
  print_row("communication alone", p.comm_alone_us, p.floor_us);
  print_row("floor max(GEMM, comm)", p.floor_us, p.floor_us);
  print_row("sequential", p.sequential_us, p.floor_us);
  print_row("kernel-level overlap", p.kernel_level_us, p.floor_us);
  print_row("fused", p.fused_us, p.floor_us);
  fmt::print("\n  fused vs sequential: {:.2f}x faster", p.sequential_us / p.fused_us);
  if (std::isfinite(p.kernel_level_us)) fmt::print("; vs kernel-level: {:.2f}x faster", p.kernel_level_us / p.fused_us);
  fmt::print("\n");
  fmt::print("  fused by tile order:");
  for (const auto& [kind, name] : plan::EnumTable<schedule::OrderKind>::entries) {
    double us = p.fused_us;
    if (kind != order) {
      auto other = call;
      sim::reorder(other, kind, calib);
      us = sim::simulate_fused(other, calib, options).total_us;
    }
    fmt::print(" {} {:.1f} us ({:.2f}x);", name, us, us / p.fused_us);
  }
  fmt::print("\n");

  const sim::Timeline& shown = a.timeline == "kernel-level" ? p.kernel_level
                               : a.timeline == "sequential" ? p.sequential
                                                            : p.fused;
  if (!a.trace.empty()) write_text_file(a.trace, sim::chrome_trace_json(shown), "trace");
  if (!a.svg.empty()) {
    sim::SvgOptions svg;
    svg.title = fmt::format("{} {} world {}, GEMM {}x{}x{}, tile {}x{}, {} order: {}",
                            plan::to_string(plan.collective.kind), plan::to_string(plan.collective.algorithm),
                            plan.world_size, gemm.m, gemm.n, gemm.k, gemm.block_m, gemm.block_n, a.order, shown.label);
    write_text_file(a.svg, sim::svg_timeline(shown, svg), "SVG");
  }
}

struct TuneArgs {
  std::string collective = "all-gather", gemm, tile = "128x256", calib;
  int world = 2;
  double min_gain = sim::kDefaultMinGain;
  double min_saving_us = sim::kDefaultMinSavingUs;
  std::string reduce = "chunks", mode = "auto";
  bool no_kernel_level = false;
  int top = 10;
  TopologyArgs topology;
};

std::string_view reduction(const sim::Candidate& c) { return c.staged ? "epilogue" : "chunks"; }

void run_tune(const TuneArgs& a) {
  const auto calib = find_calibration(a.calib);
  sim::TuneRequest req;
  req.collective = *plan::parse_enum<plan::Collective>(a.collective);
  const auto g = *parse_sizes(a.gemm, 3);
  const auto t = *parse_sizes(a.tile, 2);
  req.gemm = {g[0], g[1], g[2], t[0], t[1]};
  req.world_size = a.world;
  req.min_gain = a.min_gain;
  req.min_saving_us = a.min_saving_us;
  req.reduce = *sim::parse_reduce_mode(a.reduce);
  req.kernel_level = !a.no_kernel_level;
  if (a.mode != "auto") req.mode = sim::parse_decision(a.mode);
  req.nodes = topology_nodes(a.topology, a.world);
  const int nodes = plan::node_count(req.nodes);
  const auto r = sim::tune(req, calib);
  fmt::print("{} + GEMM {}x{}x{} per rank, tile {}x{}, world {}{}, calibration: {}\n", a.collective, req.gemm.m,
             req.gemm.n, req.gemm.k, req.gemm.block_m, req.gemm.block_n, a.world,
             nodes > 1 ? fmt::format(" on {} nodes of {}", nodes, a.world / nodes) : std::string(), calib.device);
  if (nodes > 1)
    fmt::print("network: {:.0f} GB/s and {:.0f} us per GPU NIC{}\n", calib.network.bandwidth_gbps,
               calib.network.latency_us, calib.network.estimated ? " (estimated, not measured)" : "");
  fmt::print("\n");
  // Several nodes: which kind of plan (hierarchical: NCCL between nodes, the backend inside).
  auto kind = [&](const sim::Candidate& c) {
    return nodes > 1 ? std::string(c.hierarchical ? "hier " : "flat ") : std::string();
  };
  const auto& b = r.best_fused;
  fmt::print("choice: {}: {}\n", sim::to_string(r.decision), r.reason);
  // One line a script can read: what runs (the op contexts' choice with --no-kernel-level).
  const auto& c = r.chosen;
  fmt::print("runs: {} {}{} split {} {} {} reduce {}\n", sim::to_string(r.decision), kind(c),
             plan::to_string(c.algorithm), c.split, plan::to_string(c.backend), schedule::to_string(c.order),
             reduction(c));
  fmt::print("best fused:      {}{} split {} {} {} order, reduce {}: {:.1f} us\n", kind(b),
             plan::to_string(b.algorithm), b.split, plan::to_string(b.backend), schedule::to_string(b.order),
             reduction(b), b.fused_us);
  const auto& s = r.best_sequential;
  fmt::print("best sequential: {}{} split {} {}: {:.1f} us (GEMM {:.1f} + communication {:.1f})\n", kind(s),
             plan::to_string(s.algorithm), s.split, plan::to_string(s.backend), s.sequential_us, s.gemm_alone_us,
             s.comm_alone_us);
  const auto& k = r.best_kernel_level;
  if (std::isfinite(k.kernel_level_us))
    fmt::print("best kernel-level: {}{} split {} {}: {:.1f} us\n\n", kind(k), plan::to_string(k.algorithm), k.split,
               plan::to_string(k.backend), k.kernel_level_us);
  else
    fmt::print("best kernel-level: none (kernel-level mode runs on the NCCL backend only)\n\n");
  const int algo_width = nodes > 1 ? 13 : 8;  // "hier bidir"
  fmt::print("  {:<{}} {:>5} {:<12} {:<10} {:<8} {:>11} {:>13} {:>11} {:>11}\n", "algo", algo_width, "split", "backend",
             "order", "reduce", "fused us", "kernel-lvl us", "seq us", "comm us");
  for (int i = 0; i < std::min<int>(a.top, static_cast<int>(r.candidates.size())); ++i) {
    const auto& e = r.candidates[i];
    fmt::print("  {:<{}} {:>5} {:<12} {:<10} {:<8} {:>11.1f} {} {:>11.1f} {:>11.1f}\n",
               kind(e) + std::string(plan::to_string(e.algorithm)), algo_width, e.split, plan::to_string(e.backend),
               schedule::to_string(e.order), reduction(e), e.fused_us, us_or_dash(e.kernel_level_us, 13),
               e.sequential_us, e.comm_alone_us);
  }
  fmt::print("  ({} candidates simulated, {} refused by the templates)\n", r.candidates.size(), r.skipped.size());
}

}  // namespace

void register_simulate_commands(CLI::App& app) {
  auto* sim_cmd = app.add_subcommand("simulate", "Predict sequential, kernel-level and fused times of a plan + GEMM");
  auto sa = std::make_shared<SimulateArgs>();
  sim_cmd->add_option("plan", sa->plan_file, "Plan JSON file")->required();
  sim_cmd->add_option("--gemm", sa->gemm, "Per-rank GEMM MxNxK")->required()->check(sizes_validator(3, "MxNxK"));
  sim_cmd->add_option("--tile", sa->tile, "Tile BLOCK_MxBLOCK_N")
      ->capture_default_str()
      ->check(sizes_validator(2, "BLOCK_MxBLOCK_N"));
  sim_cmd->add_option("--calib", sa->calib, "Calibration JSON (default: calib/h200.json)");
  sim_cmd->add_option("--order", sa->order, "Tile order")
      ->capture_default_str()
      ->check(enum_validator<schedule::OrderKind>());
  sim_cmd->add_option("--trace", sa->trace, "Write a Chrome/Perfetto trace JSON of the timeline");
  sim_cmd->add_option("--svg", sa->svg, "Write an SVG picture of the timeline");
  sim_cmd->add_option("--timeline", sa->timeline, "Which timeline --trace/--svg show")
      ->capture_default_str()
      ->check(CLI::IsMember({"fused", "kernel-level", "sequential"}));
  sim_cmd->add_flag("--dynamic", sa->dynamic, "Workers take the next tile (atomic counter) instead of a static stride");
  sim_cmd->callback([sa] { run_simulate(*sa); });

  auto* tune_cmd = app.add_subcommand("tune", "Choose algorithm, split, backend and tile order by simulation");
  auto ta = std::make_shared<TuneArgs>();
  tune_cmd->add_option("--collective", ta->collective, "Collective")
      ->capture_default_str()
      ->check(enum_validator<plan::Collective>());
  tune_cmd->add_option("--gemm", ta->gemm, "Per-rank GEMM MxNxK (M gathered / reduced along)")
      ->required()
      ->check(sizes_validator(3, "MxNxK"));
  tune_cmd->add_option("--tile", ta->tile, "Tile BLOCK_MxBLOCK_N")
      ->capture_default_str()
      ->check(sizes_validator(2, "BLOCK_MxBLOCK_N"));
  tune_cmd->add_option("--world", ta->world, "World size")->required()->check(CLI::Range(1, 1024));
  tune_cmd->add_option("--calib", ta->calib, "Calibration JSON (default: calib/h200.json)");
  tune_cmd->add_option("--min-gain", ta->min_gain, "Fraction overlap must gain over sequential")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  tune_cmd->add_option("--min-saving-us", ta->min_saving_us, "Microseconds overlap must save over sequential")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e9));
  tune_cmd->add_option("--reduce", ta->reduce, "GEMM+RS/AR: reduce-add chunks, the staged epilogue plans, or both")
      ->capture_default_str()
      ->check(CLI::IsMember({"chunks", "epilogue", "auto"}));
  tune_cmd->add_flag(
      "--no-kernel-level", ta->no_kernel_level,
      "Leave kernel-level overlap out, as the op contexts (AgGemm, GemmRs, GemmAr) do: they run fused or sequential");
  tune_cmd
      ->add_option("--mode", ta->mode,
                   "auto decides; fused / sequential / kernel-level: the best candidate of that mode")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "fused", "sequential", "kernel-level"}));
  add_topology_options(*tune_cmd, ta->topology);
  tune_cmd->add_option("--top", ta->top, "Candidates to list")->capture_default_str()->check(CLI::Range(0, 1000));
  tune_cmd->callback([ta] { run_tune(*ta); });
}

}  // namespace syncopate::cli

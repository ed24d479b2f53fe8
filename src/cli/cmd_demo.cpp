// `syncopate demo`: the whole CPU pipeline on a real-sized example, printing what each step
// found. AG+GEMM as in a column-parallel LLaMA layer: A (M x K) sharded along M over the ranks,
// gathered chunk by chunk while each rank's GEMM tiles wait only for the rows they read.
//   plan -> verify (and a broken copy rejected) -> lower -> schedule -> simulate -> tune ->
//   transform the shipped local GEMM kernel.
// Then, unless --no-gpu, the GPU half (gpu_demo.hpp): where CUDA GPUs are present it runs
// `python -m syncopate.demo` (the fused AG+GEMM against sequential NCCL + torch.mm, checked and
// timed) and passes its exit status on; with no GPU it says so in one line and exits 0.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "commands.hpp"
#include "gpu_demo.hpp"
#include "repo_files.hpp"
#include "text_files.hpp"
#include "syncopate/common/error.hpp"
#include "syncopate/lower/signal_table.hpp"
#include "syncopate/plan/json.hpp"
#include "syncopate/plan/templates.hpp"
#include "syncopate/plan/verify.hpp"
#include "syncopate/schedule/tile_order.hpp"
#include "syncopate/sim/autotune.hpp"
#include "syncopate/sim/calibration.hpp"
#include "syncopate/sim/simulator.hpp"
#include "syncopate/sim/trace.hpp"
#include "syncopate/transform/transform.hpp"

namespace syncopate::cli {
namespace {

namespace fs = std::filesystem;

struct DemoArgs {
  std::string out = "demo-out";
  std::string calib;
  int world = 4;
  std::int64_t m = 8192, n = 8192, k = 8192;
  bool no_gpu = false;
};

void heading(int step, std::string_view what) { fmt::print("\n[{}] {}\n", step, what); }

// The CPU pipeline; returns the calibration file it used.
fs::path run_cpu_demo(const DemoArgs& a) {
  const fs::path out(a.out);
  fs::create_directories(out);
  const fs::path calib_path = a.calib.empty() ? find_repo_file("calib/h200.json", "--calib") : fs::path(a.calib);
  const auto calib = sim::load_calibration(calib_path);
  fmt::print("Syncopate demo: AG+GEMM, A {}x{} sharded along M over {} ranks, B {}x{}, bf16\n", a.m, a.k, a.world, a.k,
             a.n);
  fmt::print("calibration: {}\n", calib.device);

  heading(1, "plan: ring all-gather of A, each shard cut into 2 sub-chunks, copy engine");
  plan::TemplateOptions t;
  t.collective = plan::Collective::all_gather;
  t.algorithm = plan::Algorithm::ring;
  t.world_size = a.world;
  t.split = 2;
  t.shape = {a.m, a.k};
  t.tensor = "a";
  t.input = "a_in";  // each rank's shard is read where the caller has it (the op's plan, ops/ag_gemm.py)
  const auto p = plan::make_plan(t);
  plan::save_plan(p, out / "plan.json");
  fmt::print("    {} chunks on {} ranks -> {}\n", p.chunks.size(), p.world_size, (out / "plan.json").string());

  heading(2, "verify: coverage, ordering, deadlock freedom");
  const auto report = plan::verify(p);
  fmt::print("    {}\n", report.ok() ? "plan is safe: every shard reaches every rank exactly once, no races, no cycles"
                                     : report.format("plan.json"));
  auto broken = p;
  const int dropped = broken.chunks.back().id;
  for (auto& r : broken.ranks)
    for (auto& s : r.streams) std::erase(s, dropped);
  for (auto& c : broken.chunks) std::erase(c.deps, dropped);
  broken.chunks.pop_back();
  const auto bad = plan::verify(broken);
  fmt::print("    the same plan with chunk {} removed is rejected ({} violation{}), e.g.:\n      {}\n", dropped,
             bad.violations.size(), bad.violations.size() == 1 ? "" : "s",
             bad.ok() ? std::string("(none: BUG)") : bad.violations.front().format("plan.json"));

  heading(3, "lower: signal slots with epochs, per-tile wait lists (tile 128x256)");
  const sim::GemmShape gemm{a.m, a.n, a.k, 128, 256};
  auto call = sim::make_fused_call(p, gemm, schedule::OrderKind::arrival, calib);
  const auto& table = call.tables.at(1);
  std::size_t max_waits = 0, no_wait = 0;
  for (const auto& w : table.tile_waits) {
    max_waits = std::max(max_waits, w.size());
    no_wait += w.empty();
  }
  fmt::print(
      "    rank 1: {} slots, {} tiles; {} tiles need no chunk, the others wait on at most {} "
      "slot(s); call e waits for slot >= e * writers (no reset between calls)\n",
      table.slots.size(), table.tile_waits.size(), no_wait, max_waits);

  heading(4, "schedule + simulate: the same fused kernel with three tile orders");
  const auto pred = sim::predict(call, calib);
  double row_major = 0, grouped = 0;
  for (auto kind : {schedule::OrderKind::row_major, schedule::OrderKind::grouped}) {
    auto other = call;
    sim::reorder(other, kind, calib);
    (kind == schedule::OrderKind::row_major ? row_major : grouped) = sim::simulate_fused(other, calib).total_us;
  }
  fmt::print("    rank 1 starts with tiles {}.. (its own shard first)\n", call.orders.at(1).tiles.front());
  fmt::print("    {:<34}{:>10.1f} us\n", "GEMM alone", pred.gemm_alone_us);
  fmt::print("    {:<34}{:>10.1f} us\n", "all-gather alone", pred.comm_alone_us);
  fmt::print("    {:<34}{:>10.1f} us\n", "sequential (AG then GEMM)", pred.sequential_us);
  fmt::print("    {:<34}{:>10.1f} us\n", "kernel-level (two streams)", pred.kernel_level_us);
  fmt::print("    {:<34}{:>10.1f} us   ({:.2f}x over sequential, {:.3f}x the floor)\n", "fused, arrival order",
             pred.fused_us, pred.sequential_us / pred.fused_us, pred.fused_us / pred.floor_us);
  fmt::print("    {:<34}{:>10.1f} us   ({:.2f}x slower than arrival order)\n", "fused, grouped order", grouped,
             grouped / pred.fused_us);
  fmt::print("    {:<34}{:>10.1f} us   ({:.2f}x slower than arrival order)\n", "fused, row-major order", row_major,
             row_major / pred.fused_us);
  sim::SvgOptions svg;
  svg.title = fmt::format("fused AG+GEMM {}x{}x{}, world {}, arrival order", a.m, a.n, a.k, a.world);
  write_text_file((out / "fused.svg").string(), sim::svg_timeline(pred.fused, svg), "timeline");
  write_text_file((out / "fused.trace.json").string(), sim::chrome_trace_json(pred.fused), "trace");
  fmt::print("    timeline: {} (open in a browser), trace: {} (ui.perfetto.dev)\n", (out / "fused.svg").string(),
             (out / "fused.trace.json").string());

  heading(5, "tune: the simulator's choice per shape (falls back to sequential where overlap does not pay)");
  for (std::int64_t m : {std::int64_t{256}, std::int64_t{1024}, a.m}) {
    sim::TuneRequest req;
    req.collective = plan::Collective::all_gather;
    req.gemm = {m, a.n, a.k, 128, 256};
    req.world_size = a.world;
    const auto r = sim::tune(req, calib);
    const auto& b = r.best_fused;
    fmt::print("    M={:<6} -> {:<12} ({} {} split {} {}, fused {:.1f} us vs sequential {:.1f} us): {}\n", m,
               sim::to_string(r.decision), plan::to_string(b.algorithm), plan::to_string(b.backend), b.split,
               schedule::to_string(b.order), b.fused_us, r.best_sequential.sequential_us, r.reason);
  }

  heading(6, "transform: the shipped local GEMM kernel becomes the overlapped kernel");
  const auto kernel_path = find_repo_file("python/syncopate/kernels/gemm.py", "--kernel-file");
  const auto result = transform::transform_kernel(read_text_file(kernel_path.string(), "kernel"), kernel_path.string(),
                                                  "gemm_tma_kernel");
  write_text_file((out / "gemm_overlapped.py").string(), result.source, "kernel");
  std::string added;
  for (const auto& param : result.added_params) added += (added.empty() ? "" : ", ") + param.name;
  fmt::print("    {} -> {}: {} tile block(s) rewritten, {} consume/produce annotation(s), parameters added: {}\n",
             kernel_path.string(), (out / "gemm_overlapped.py").string(), result.tile_blocks, result.accesses.size(),
             added);
  fmt::print("\nDone. Outputs are in {}/\n", out.string());
  return calib_path;
}

void run_demo(const DemoArgs& a) {
  const fs::path calib = run_cpu_demo(a);
  if (a.no_gpu) return;
  const int status = run_gpu_demo({a.m, a.n, a.k, fs::absolute(calib)});
  // The Python demo's verdict is the command's: CLI11 callbacks cannot return a status.
  if (status != 0) {
    std::fflush(stdout);
    std::exit(status);
  }
}

}  // namespace

void register_demo_commands(CLI::App& app) {
  auto args = std::make_shared<DemoArgs>();
  auto* cmd = app.add_subcommand("demo",
                                 "Run the pipeline (plan, verify, lower, schedule, simulate, tune, "
                                 "transform) on a real-sized AG+GEMM and print what it found; then, "
                                 "where GPUs are, the fused AG+GEMM against sequential, measured");
  cmd->add_option("--out", args->out, "Directory for the plan, timeline SVG, trace and transformed kernel")
      ->capture_default_str();
  cmd->add_option("--calib", args->calib, "Calibration JSON (default: calib/h200.json)");
  cmd->add_option("--world", args->world, "Number of ranks")->check(CLI::Range(1, 64))->capture_default_str();
  cmd->add_option("--m", args->m, "Rows of the gathered A")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--n", args->n, "Columns of B")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--k", args->k, "Inner dimension")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_flag("--no-gpu", args->no_gpu,
                "Skip the GPU half (run where GPUs are: python -m syncopate.demo, fused AG+GEMM vs sequential)");
  cmd->callback([args] { run_demo(*args); });
}

}  // namespace syncopate::cli

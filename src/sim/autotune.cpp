// Auto-choice by exhaustive simulation of a small space (at most 3 x 4 x 3 x 3 reduce-add
// candidates, and for GEMM+RS/AR at most 4 x 3 x 3 staged ones), then the one decision rule.
#include "syncopate/sim/autotune.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/core.h>
#include <fmt/format.h>

#include "syncopate/plan/templates.hpp"
#include "syncopate/sim/simulator.hpp"

namespace syncopate::sim {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();
// The all-gather input's name in the plans tune simulates (only a label: the op names its own).
constexpr const char* kAgGemmInput = "input";

plan::TemplateOptions template_for(const TuneRequest& req, plan::Algorithm algorithm, int split, plan::Backend backend,
                                   bool flat) {
  plan::TemplateOptions o;
  o.nodes = req.nodes;
  o.flat = flat;
  o.collective = req.collective;
  o.algorithm = algorithm;
  o.world_size = req.world_size;
  o.split = split;
  o.dtype = req.dtype;
  o.dim = 0;
  o.backend = backend;
  switch (req.collective) {
    case plan::Collective::reduce_scatter:
    case plan::Collective::all_reduce:
      o.shape = {req.gemm.m, req.gemm.n};
      break;
    default:
      o.shape = {req.gemm.m, req.gemm.k};
      break;
  }
  // AG+GEMM runs the plan that gathers from the caller's shard (python/syncopate/ops/ag_gemm.py):
  // its own rows arrive by a local chunk beside the kernel, not by a copy before it. FP8 rows
  // carry their scales and are assembled in the heap first, as the op does.
  const bool fp8 = req.dtype == plan::DType::f8e4m3 || req.dtype == plan::DType::f8e5m2;
  if (req.collective == plan::Collective::all_gather && plan::node_count(req.nodes) == 1 && !flat && !fp8 &&
      req.gemm.m % req.world_size == 0)
    o.input = kAgGemmInput;
  return o;
}

// The staged plan the op runs (python/syncopate/ops/staged_gemm.py, staged_plan): C [1, M, N]
// as tensor "c" along dim 1, partials staged in "p"; direct only.
plan::TemplateOptions staged_template_for(const TuneRequest& req, int split, plan::Backend backend) {
  plan::TemplateOptions o = template_for(req, plan::Algorithm::direct, split, backend, /*flat=*/false);
  o.nodes.clear();  // searched on one node only (tune)
  o.shape = {1, req.gemm.m, req.gemm.n};
  o.dim = 1;
  o.tensor = "c";
  o.staging = "p";
  return o;
}

bool has_staged_plan(plan::Collective c) {
  return c == plan::Collective::reduce_scatter || c == plan::Collective::all_reduce;
}

// The candidate with the smallest `field`; the first of equals (request order).
const Candidate* fastest(const std::vector<Candidate>& candidates, double Candidate::*field, bool staged) {
  const Candidate* best = nullptr;
  for (const auto& c : candidates)
    if (c.staged == staged && (best == nullptr || c.*field < best->*field)) best = &c;
  return best;
}

struct StagedSearch {
  std::vector<Candidate> candidates;
  std::vector<std::string> refusals;  // configurations the simulator refused (e.g. deadlocked)
};

// Python's former loop order (backend, split, order) is kept so that ties resolve as before.
StagedSearch search_staged(const TuneRequest& req, const Calibration& calib, double gemm_alone,
                           std::vector<std::string>& skipped) {
  StagedSearch out;
  for (auto backend : req.backends)
    for (int split : req.splits) {
      plan::CommPlan plan;
      try {
        plan = plan::make_plan(staged_template_for(req, split, backend));
      } catch (const UserError& e) {  // a split that would make an empty sub-chunk
        skipped.push_back(fmt::format("staged split {} {}: {}", split, plan::to_string(backend), e.what()));
        continue;
      }
      const double comm_alone = simulate_comm_alone(plan, calib).total_us;
      for (auto order : req.orders) {
        Candidate c;
        c.algorithm = plan::Algorithm::direct;
        c.split = split;
        c.backend = backend;
        c.order = order;
        c.staged = true;
        c.gemm_alone_us = gemm_alone;
        c.comm_alone_us = comm_alone;
        c.floor_us = std::max(gemm_alone, comm_alone);
        c.kernel_level_us = kInfinity;  // a library GEMM cannot add the staged partials
        try {
          const FusedCall call = make_fused_call(plan, req.gemm, order, calib);
          c.fused_us = simulate_fused(call, calib).total_us;
          c.sequential_us = simulate_sequential(call, calib).total_us;
        } catch (const UserError& e) {
          const auto refusal =
              fmt::format("{} split {} {}: {}", plan::to_string(backend), split, schedule::to_string(order), e.what());
          skipped.push_back("staged " + refusal);
          out.refusals.push_back(refusal);
          continue;
        }
        out.candidates.push_back(c);
      }
    }
  return out;
}

double percent(double saving, double of) { return of > 0 ? 100.0 * saving / of : 0.0; }

// One node: the flat plans only. Several: hierarchical first (ties go to it), then flat.
std::vector<bool> flat_choices(const TuneRequest& req) {
  if (plan::node_count(req.nodes) > 1) return {false, true};
  return {false};
}

}  // namespace

std::string_view to_string(Decision decision) {
  switch (decision) {
    case Decision::fused:
      return "fused";
    case Decision::kernel_level:
      return "kernel-level";
    case Decision::sequential:
      return "sequential";
  }
  return "?";
}

std::optional<Decision> parse_decision(std::string_view text) {
  for (auto d : {Decision::fused, Decision::kernel_level, Decision::sequential})
    if (text == to_string(d)) return d;
  return std::nullopt;
}

std::string_view to_string(ReduceMode mode) {
  switch (mode) {
    case ReduceMode::chunks:
      return "chunks";
    case ReduceMode::epilogue:
      return "epilogue";
    case ReduceMode::automatic:
      return "auto";
  }
  return "?";
}

std::optional<ReduceMode> parse_reduce_mode(std::string_view text) {
  for (auto m : {ReduceMode::chunks, ReduceMode::epilogue, ReduceMode::automatic})
    if (text == to_string(m)) return m;
  return std::nullopt;
}

TuneResult tune(const TuneRequest& req, const Calibration& calib) {
  if (req.collective == plan::Collective::custom)
    throw UserError("tune: collective: custom-plan: choose all-gather, reduce-scatter, all-reduce or all-to-all");
  if (req.orders.empty() || req.algorithms.empty() || req.splits.empty() || req.backends.empty())
    throw UserError("tune: empty-search-space: every list of choices needs at least one entry");
  if (!(req.min_saving_us >= 0))
    throw UserError(fmt::format("tune: min_saving_us: expected a number >= 0, got {}", req.min_saving_us));
  TuneResult result;
  const double gemm_alone = simulate_gemm_alone(req.gemm, req.world_size, calib).total_us;
  const bool several_nodes = plan::node_count(req.nodes) > 1;
  for (bool flat : flat_choices(req))
    for (auto algorithm : req.algorithms)
      for (int split : req.splits)
        for (auto backend : req.backends) {
          plan::CommPlan plan;
          try {
            plan = plan::make_plan(template_for(req, algorithm, split, backend, flat));
          } catch (const UserError& e) {
            result.skipped.push_back(
                fmt::format("{}{} split {} {}: {}", several_nodes ? (flat ? "flat " : "hierarchical ") : "",
                            plan::to_string(algorithm), split, plan::to_string(backend), e.what()));
            continue;
          }
          FusedCall call = make_fused_call(plan, req.gemm, req.orders.front(), calib);
          Candidate base;
          base.algorithm = algorithm;
          base.split = split;
          base.backend = backend;
          base.hierarchical = several_nodes && !flat;
          base.gemm_alone_us = gemm_alone;
          base.comm_alone_us = simulate_comm_alone(plan, calib).total_us;
          base.floor_us = std::max(base.gemm_alone_us, base.comm_alone_us);
          base.sequential_us = simulate_sequential(call, calib).total_us;
          // syncopate.kernel_level runs its collective through NCCL only: other backends have no
          // kernel-level implementation to choose.
          base.kernel_level_us =
              backend == plan::Backend::nccl ? simulate_kernel_level(call, calib).total_us : kInfinity;
          for (std::size_t i = 0; i < req.orders.size(); ++i) {
            if (i > 0) reorder(call, req.orders[i], calib);
            Candidate c = base;
            c.order = req.orders[i];
            c.fused_us = simulate_fused(call, calib).total_us;
            result.candidates.push_back(c);
          }
        }
  if (result.candidates.empty()) {
    // The first few refusals say why; the rest are usually the same rule at larger splits.
    const std::size_t shown = std::min<std::size_t>(result.skipped.size(), 3);
    throw UserError(
        fmt::format("tune: no-candidate: no template could make a plan for this shape "
                    "({} refused), e.g.:\n  {}",
                    result.skipped.size(), fmt::join(result.skipped.begin(), result.skipped.begin() + shown, "\n  ")));
  }

  // Sequential and kernel-level run the reduce-add plans (the staged partials need the fused
  // kernel's epilogue), so only those compete there.
  result.best_sequential = *fastest(result.candidates, &Candidate::sequential_us, false);
  result.best_kernel_level = *fastest(result.candidates, &Candidate::kernel_level_us, false);
  result.best_fused = *fastest(result.candidates, &Candidate::fused_us, false);

  // GEMM+RS/AR: the staged plans join the fused candidates as asked.
  std::string staged_note;
  if (has_staged_plan(req.collective) && req.reduce != ReduceMode::chunks) {
    // The staged templates are single-node, as are the ops that run them.
    if (several_nodes && req.reduce == ReduceMode::epilogue)
      throw UserError(
          "tune: reduce='epilogue': several-nodes: the staged plans run on one node; use "
          "reduce='chunks' or 'auto'");
  }
  if (has_staged_plan(req.collective) && req.reduce != ReduceMode::chunks && !several_nodes) {
    auto staged = search_staged(req, calib, gemm_alone, result.skipped);
    const Candidate* best_staged = fastest(staged.candidates, &Candidate::fused_us, true);
    if (best_staged == nullptr && req.reduce == ReduceMode::epilogue) {
      const std::size_t shown = std::min<std::size_t>(staged.refusals.size(), 3);
      const std::string why =
          shown == 0 ? std::string()
                     : fmt::format("; the simulator refused {}",
                                   fmt::join(staged.refusals.begin(), staged.refusals.begin() + shown, "; "));
      throw UserError(
          fmt::format("tune: reduce='epilogue': no-candidate: no staged plan of {} rows over {} ranks "
                      "with split in [{}] runs{}",
                      req.gemm.m, req.world_size, fmt::join(req.splits, ", "), why));
    }
    if (best_staged != nullptr) {
      staged_note = req.reduce == ReduceMode::automatic
                        ? fmt::format("; reduction in the epilogue {:.1f} us vs reduce-add chunks {:.1f} us",
                                      best_staged->fused_us, result.best_fused.fused_us)
                        : std::string("; reduce='epilogue' given");
      if (req.reduce == ReduceMode::epilogue || best_staged->fused_us < result.best_fused.fused_us)
        result.best_fused = *best_staged;
    }
    result.candidates.insert(result.candidates.end(), staged.candidates.begin(), staged.candidates.end());
  }
  std::stable_sort(result.candidates.begin(), result.candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.fused_us < b.fused_us; });

  const double seq = result.best_sequential.sequential_us;
  const double fused_saving = seq - result.best_fused.fused_us;
  const bool kl_runs = req.kernel_level && std::isfinite(result.best_kernel_level.kernel_level_us);
  const double kl_saving = kl_runs ? seq - result.best_kernel_level.kernel_level_us : -kInfinity;
  // Overlap pays where it saves both the fraction and the absolute floor.
  const double required = std::max(req.min_gain * seq, req.min_saving_us);
  const std::string fused_cost =
      fmt::format("{:.1f} us{}", result.best_fused.fused_us, calib.host.modelled ? " (host path included)" : "");
  auto needs = [&](std::string_view what) {
    return fmt::format("{} needs >= {:g}% and >= {:g} us", what, 100 * req.min_gain, req.min_saving_us);
  };

  if (req.mode) {
    result.decision = *req.mode;
    result.reason = fmt::format("mode='{}' given", to_string(*req.mode));
    if (*req.mode == Decision::fused) result.reason += staged_note;
  } else if (fused_saving >= required && fused_saving >= kl_saving) {
    result.decision = Decision::fused;
    result.reason = fmt::format("fused {} beats the best sequential ({:.1f} us) by {:.1f}% ({:.1f} us); {}{}",
                                fused_cost, seq, percent(fused_saving, seq), fused_saving, needs("fused"), staged_note);
  } else if (kl_saving >= required) {
    result.decision = Decision::kernel_level;
    result.reason = fmt::format(
        "kernel-level overlap ({:.1f} us) beats the best sequential ({:.1f} us) by "
        "{:.1f}% ({:.1f} us), and fused {} gains {:.1f}% ({:+.1f} us); {}{}",
        result.best_kernel_level.kernel_level_us, seq, percent(kl_saving, seq), kl_saving, fused_cost,
        percent(fused_saving, seq), fused_saving, needs("overlap"), staged_note);
  } else {
    result.decision = Decision::sequential;
    const std::string kl =
        kl_runs ? fmt::format(" and kernel-level overlap {:.1f}% ({:+.1f} us)", percent(kl_saving, seq), kl_saving)
                : std::string();
    result.reason = fmt::format(
        "overlap does not pay: the best fused {} gains {:.1f}% ({:+.1f} us){} over the "
        "best sequential ({:.1f} us); {}; fall back to sequential{}",
        fused_cost, percent(fused_saving, seq), fused_saving, kl, seq, needs(kl_runs ? "overlap" : "fused"),
        staged_note);
  }
  switch (result.decision) {
    case Decision::fused:
      result.chosen = result.best_fused;
      break;
    case Decision::kernel_level:
      if (!std::isfinite(result.best_kernel_level.kernel_level_us))
        throw UserError(
            "tune: mode='kernel-level': no candidate runs kernel-level (syncopate.kernel_level "
            "moves chunks with NCCL only; add backend nccl)");
      result.chosen = result.best_kernel_level;
      break;
    case Decision::sequential:
      result.chosen = result.best_sequential;
      break;
  }
  return result;
}

}  // namespace syncopate::sim

// Auto-choice: which algorithm, split factor, backend and tile order make a GEMM + collective
// fastest, and whether overlapping pays at all (small M: it often does not).
#pragma once

#include <string>
#include <vector>

#include "syncopate/plan/enums.hpp"
#include "syncopate/schedule/tile_order.hpp"
#include "syncopate/sim/calibration.hpp"
#include "syncopate/sim/fused_call.hpp"

namespace syncopate::sim {

// The gain over sequential below which fused is not worth its complexity. 2% since the
// simulator models the host path, copy under compute, the add step and the copy-out (its median
// error on the recorded nvidia-h200-x2 rows with M >= 4096 is 3-8%, bench/sim_accuracy.py).
// Replaying those 90 rows (2026-11-22): at 5% the choice ran sequential on 4 rows where fused
// measured 6-11% faster; at 2% it picks fused on 7 rows, each a measured win, and on no row
// where fused measured slower. The CLI (`tune --min-gain`), the bindings and ops/choice.py use it.
inline constexpr double kDefaultMinGain = 0.02;

struct TuneRequest {
  // all-gather: A (M x K) gathered along M, then the GEMM (AG+GEMM);
  // reduce-scatter / all-reduce: the GEMM's C (M x N) reduced along M (GEMM+RS, GEMM+AR);
  // all-to-all: A (M x K) exchanged along M, then the GEMM.
  plan::Collective collective = plan::Collective::all_gather;
  GemmShape gemm;  // per rank
  int world_size = 2;
  plan::DType dtype = plan::DType::bf16;
  std::vector<plan::Algorithm> algorithms{plan::Algorithm::ring, plan::Algorithm::direct, plan::Algorithm::bidir};
  std::vector<int> splits{1, 2, 4, 8};
  std::vector<plan::Backend> backends{plan::Backend::copy_engine, plan::Backend::sm_copy, plan::Backend::nccl};
  std::vector<schedule::OrderKind> orders{schedule::OrderKind::arrival, schedule::OrderKind::row_major,
                                          schedule::OrderKind::grouped};
  // Fused must beat the best sequential time by this fraction to be worth its complexity.
  double min_gain = kDefaultMinGain;  // Topology: the node of each rank (plan::CommPlan::nodes); empty = one node. With several
  // nodes every (algorithm, split, backend) is tried as a hierarchical plan (inter-node NCCL,
  // the backend inside each node), and as a flat plan where the template allows it (NCCL).
  std::vector<int> nodes;
};

struct Candidate {
  plan::Algorithm algorithm = plan::Algorithm::ring;
  int split = 1;
  plan::Backend backend = plan::Backend::copy_engine;
  schedule::OrderKind order = schedule::OrderKind::arrival;
  bool hierarchical = false;  // several nodes: the hierarchical plan (false: flat)
  double fused_us = 0;
  double kernel_level_us = 0;
  double sequential_us = 0;
  double comm_alone_us = 0;
  double gemm_alone_us = 0;
};

enum class Decision { fused, kernel_level, sequential };
std::string_view to_string(Decision decision);  // "fused", "kernel-level", "sequential"

struct TuneResult {
  Candidate best_fused;          // the fastest fused candidate
  Candidate best_sequential;     // the candidate whose collective-then-GEMM is fastest
  Candidate best_kernel_level;
  Decision decision = Decision::sequential;
  std::string reason;            // one sentence: why this decision
  std::vector<Candidate> candidates;  // every one simulated, fastest fused first
  std::vector<std::string> skipped;   // candidates a template refused, with its message
};

// Throws UserError when no candidate can be built (e.g. M too small to split across ranks).
// Deterministic: ties go to the earlier candidate in the request's lists.
TuneResult tune(const TuneRequest& request, const Calibration& calib);

}  // namespace syncopate::sim

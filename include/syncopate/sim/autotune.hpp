// Auto-choice: which algorithm, split factor, backend, tile order and (GEMM+RS/AR) reduction make
// a GEMM + collective fastest, and whether overlapping pays at all (small M: it often does not).
// The one place this is decided: `syncopate tune`, sy.tune and the op contexts' mode="auto"
// (python/syncopate/ops/choice.py, which only builds the request and reads the result) all call
// tune().
#pragma once

#include <optional>
#include <string>
#include <string_view>
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
// ... and by this many microseconds. Where the predicted saving is only the launch and the
// cross-stream sync that fusion removes (4 + 4 us in calib/h200.json, both assumed rather than
// measured), it is within the model's error. Applies to kernel-level overlap too.
inline constexpr double kDefaultMinSavingUs = 16.0;

enum class Decision { fused, kernel_level, sequential };
std::string_view to_string(Decision decision);  // "fused", "kernel-level", "sequential"
std::optional<Decision> parse_decision(std::string_view text);

// GEMM+RS / GEMM+AR: where the partial sums are added.
//   chunks:   reduce-add chunks (the templates' plans);
//   epilogue: the staged plan (direct only): partials copied into a staging tensor and added in
//             the fused GEMM's epilogue (python/syncopate/ops/staged_gemm.py);
//   automatic ("auto"): both, the faster predicted fused wins (ties: chunks).
// Other collectives have no staged plan and ignore it.
enum class ReduceMode { chunks, epilogue, automatic };
std::string_view to_string(ReduceMode mode);  // "chunks", "epilogue", "auto"
std::optional<ReduceMode> parse_reduce_mode(std::string_view text);

struct TuneRequest {
  // all-gather: A (M x K) gathered along M, then the GEMM (AG+GEMM);
  // reduce-scatter / all-reduce: the GEMM's C (M x N) reduced along M (GEMM+RS, GEMM+AR);
  // all-to-all: A (M x K) exchanged along M, then the GEMM.
  plan::Collective collective = plan::Collective::all_gather;
  GemmShape gemm;  // per rank
  int world_size = 2;
  plan::DType dtype = plan::DType::bf16;
  // Ties go to the earlier entry: at world 2 ring and direct make the same chunks, and the op
  // contexts have always listed direct first.
  std::vector<plan::Algorithm> algorithms{plan::Algorithm::direct, plan::Algorithm::ring, plan::Algorithm::bidir};
  std::vector<int> splits{1, 2, 4, 8};
  std::vector<plan::Backend> backends{plan::Backend::copy_engine, plan::Backend::sm_copy, plan::Backend::nccl};
  std::vector<schedule::OrderKind> orders{schedule::OrderKind::arrival, schedule::OrderKind::row_major,
                                          schedule::OrderKind::grouped};
  // Overlap (fused or kernel-level) must beat the best sequential time by this fraction and by
  // min_saving_us to be worth its complexity.
  double min_gain = kDefaultMinGain;
  double min_saving_us = kDefaultMinSavingUs;
  ReduceMode reduce = ReduceMode::chunks;
  // Whether the caller can run kernel-level overlap (syncopate.kernel_level). The op contexts
  // (AgGemm, GemmRs, GemmAr) run fused or sequential only and pass false.
  bool kernel_level = true;
  // Given: no decision, the best candidate of that mode runs (the ops' mode="fused" /
  // "sequential"). Empty: decide.
  std::optional<Decision> mode;
  // Topology: the node of each rank (plan::CommPlan::nodes); empty = one node. With several
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
  double floor_us = 0;  // max(GEMM alone, communication alone): perfect overlap
  bool staged = false;  // the staged plan (reduction in the epilogue); kernel_level_us is inf
};

struct TuneResult {
  Candidate best_fused;       // the fastest fused candidate of the reductions asked for
  Candidate best_sequential;  // the reduce-add candidate whose collective-then-GEMM is fastest
  Candidate best_kernel_level;
  Decision decision = Decision::sequential;
  Candidate chosen;                   // what runs: best_fused, best_sequential or best_kernel_level
  std::string reason;                 // one sentence: why this decision
  std::vector<Candidate> candidates;  // every one simulated, fastest fused first
  std::vector<std::string> skipped;   // candidates a template or the simulator refused, with why
};

// Throws UserError when no candidate can be built (e.g. M too small to split across ranks), or
// reduce is epilogue and no staged plan runs. Deterministic: ties go to the earlier candidate in
// the request's lists (reduce-add chunks before the staged plan).
TuneResult tune(const TuneRequest& request, const Calibration& calib);

}  // namespace syncopate::sim

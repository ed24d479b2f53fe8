#pragma once

// Sequence-parallel attention (python/syncopate/ops/seq_attention.py and fused_attention.py):
// what the sequential and the fused forms of Ulysses and of ring attention cost on one rank,
// and which one the ops' mode="auto" runs. The attention's own time comes from measured rates
// (calibration `attention`), the communication from the backends' link model. One call, the
// slowest rank (causal: the last rank, which attends to every piece).

#include <cstdint>
#include <string>

#include "syncopate/plan/enums.hpp"
#include "syncopate/sim/calibration.hpp"

namespace syncopate::sim {

enum class SeqParallel { ulysses, ring };

struct AttentionShape {
  int world = 1;
  std::int64_t batch = 1;
  std::int64_t heads = 1;      // query heads of the whole model
  std::int64_t kv_heads = 1;   // K/V heads (GQA: a divisor of heads)
  std::int64_t seq_local = 0;  // positions per rank
  std::int64_t head_dim = 0;
  bool causal = false;
  int elem_bytes = 2;  // fp16 / bf16
};

struct AttentionPrediction {
  double sequential_us = 0;
  double fused_us = 0;
  double compute_us = 0;  // the rank's attention alone at the library's rate (no communication)
  double comm_us = 0;     // the sequential form's communication, not overlapped
  std::string decision;   // "fused" | "sequential"
  std::string reason;
};

// Throws UserError for a shape the op refuses (Ulysses: the world must divide both head counts)
// and CalibrationError when the calibration has no `attention` section.
AttentionPrediction predict_attention(SeqParallel kind, const AttentionShape& shape, const Calibration& calib,
                                      plan::Backend backend = plan::Backend::copy_engine);

}  // namespace syncopate::sim

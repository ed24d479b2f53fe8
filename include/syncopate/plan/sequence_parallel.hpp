// Plans of sequence-parallel attention (issue 20), from the templates:
//
// Ulysses: q, k, v are [Z, H, S_loc, D] on every rank (rank r holds positions r*S_loc ..
// (r+1)*S_loc - 1 of every head). An all-to-all along the head dim (dim 1) sends head group j
// (H / W heads) of rank r's piece to rank j, landing in head slot r of its output: there output
// [z, r*(H/W) + h, s, :] is local head h at position r*S_loc + s, so each rank holds the whole
// sequence of its H / W heads as W pieces (the attention kernel reads K/V piece by piece). The
// same all-to-all turns the output back. make_ulysses_plan is the all-to-all template with that
// geometry, checked for a head count the world divides.
//
// Ring: each rank keeps its own K/V piece `tensor` [1, ..] and receives the others around the ring
// (rank r from rank r-1) into a double buffer `buffer` [2, ..] in the heap: step s = 1 .. W-1
// lands piece (r - s) mod W in slot s % 2, copied from rank r-1's own piece (s == 1) or its slot
// (s-1) % 2. The chunk of step s depends on the one that brought the piece to r-1 (step s-1),
// and, from step 3 on, on the chunk that forwarded slot s % 2's previous piece out of rank r
// (step s-1 of rank r+1): the write after that read would otherwise race with it. The plan's
// collective is `custom` (the pieces pass through; no final state to promise): well-formedness,
// ordering (those write-after-read pairs) and deadlock freedom are verified. The readers of a
// slot inside the fused kernel are not chunks, so the plan does not order them: the attention
// kernel must finish with slot s % 2 before step s+2 lands there (not yet expressed; see
// docs/SEQUENCE_PARALLEL.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "syncopate/plan/comm_plan.hpp"

namespace syncopate::plan {

struct UlyssesOptions {
  int world_size = 1;
  std::vector<std::int64_t> shape;  // [Z, H, S_loc, D] of one rank's q, k or v
  DType dtype = DType::bf16;
  Backend backend = Backend::copy_engine;
  Algorithm algorithm = Algorithm::direct;  // of the all-to-all: direct, ring or bidir
  int split = 1;
  std::string tensor = "x";  // the sequence-sharded input
  std::string output = "y";  // the head-sharded pieces
};

// Throws ShapeError naming the option when the shape is not [Z, H, S_loc, D] or H is not a
// multiple of the world size.
CommPlan make_ulysses_plan(const UlyssesOptions& options);

struct RingPassOptions {
  int world_size = 1;
  std::vector<std::int64_t> shape;  // one rank's piece, e.g. [Z, H_kv, S_loc, D]
  DType dtype = DType::bf16;
  Backend backend = Backend::copy_engine;
  std::string tensor = "kv";       // [1, shape...]: each rank's own piece (never written)
  std::string buffer = "kv_ring";  // [2, shape...]: the double buffer in the heap
};

// The slot of the double buffer that step s lands in, and the piece it carries on rank r.
inline int ring_pass_slot(int step) { return step % 2; }
inline int ring_pass_piece(int rank, int step, int world) { return ((rank - step) % world + world) % world; }

// Throws ShapeError naming the option for an empty or non-positive shape, a world size out of
// range, or equal tensor and buffer names.
CommPlan make_ring_pass_plan(const RingPassOptions& options);

}  // namespace syncopate::plan

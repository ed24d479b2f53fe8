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

// Zig-zag (load-balanced causal) layout: the global sequence of W * S_loc positions is cut into
// 2W half-pieces of S_loc / 2, and rank r holds half-pieces r and 2W - 1 - r (an early and a late
// one), so that under a causal mask every rank has the same number of (query, key) pairs. Its
// own `tensor` [Z, H, S_loc, D] is those two halves in that order. The plan gathers every rank's
// halves into `output` [Z, H, W * S_loc, D] at their global positions (the attention kernel then
// reads K/V in global order): first a local copy of the own halves, then W - 1 ring steps, step s
// bringing rank r the halves of rank (r - s) mod W from rank r - 1, each chunk depending on the
// one that landed the same half on rank r - 1 the step before. The collective is `custom` (the
// gathered layout is not the all-gather's); tests follow every half to its positions.
struct ZigzagGatherOptions {
  int world_size = 1;
  std::vector<std::int64_t> shape;  // [Z, H, S_loc, D] of one rank's zig-zag piece, S_loc even
  DType dtype = DType::bf16;
  Backend backend = Backend::copy_engine;
  std::string tensor = "kv";      // this rank's two halves
  std::string output = "kv_all";  // the gathered sequence in global order
};
// The global half-piece (of 2W) that half `half` (0 or 1) of rank `rank`'s piece holds.
inline int zigzag_half_piece(int rank, int half, int world) { return half == 0 ? rank : 2 * world - 1 - rank; }
// Throws ShapeError naming the option for a shape other than [Z, H, S_loc, D] with S_loc even, a
// world size out of range, or equal tensor and output names.
CommPlan make_zigzag_gather_plan(const ZigzagGatherOptions& options);

}  // namespace syncopate::plan

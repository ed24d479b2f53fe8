// Plan templates: all-gather, reduce-scatter, all-reduce (RS then AG) and all-to-all, with
// ring, direct (one-shot to every peer) and bidirectional-ring algorithms, for any world size
// >= 1, any tensor rank and dimension, and a split factor cutting each shard into sub-chunks.
//
// Staged reduce-scatter (options.staging set): the chunks never add. Rank s copies its partial
// of shard r into slot s of rank r's staging tensor, and the consumer (a GEMM's epilogue) adds
// the slots itself. The input is [1, ..., S, ...] (a unit dim 0 gives the slot index), the
// staging tensor [W, ..., S / W, ...]; chunk s -> r sub-chunk k copies input box (0, r*S/W + k0)
// into staging box (s, k0), pulled by r (copy engine, SM copy) or sent by s and received by r
// (NCCL, grouped per peer offset and sub-chunk), on stream p - 1 of both for peer offset
// p = r - s mod W. Slot r of rank r is never written. Only the direct algorithm.
// Staged all-reduce: the same, then rank r copies its reduced shard r of the input (written by
// the consumer) to every other rank s, pushed by r (NCCL: send and recv) on stream
// (s - r - 1) mod W, sub-chunk k depending on the staging chunk s -> r of sub-chunk k (which
// reads rank s's partial there, that the copy overwrites).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "syncopate/plan/comm_plan.hpp"

namespace syncopate::plan {

struct TemplateOptions {
  Collective collective = Collective::all_gather;
  Algorithm algorithm = Algorithm::ring;
  int world_size = 1;
  int split = 1;                      // sub-chunks per shard along `dim`
  std::vector<std::int64_t> shape;    // of the full (gathered / reduced) tensor
  DType dtype = DType::bf16;
  int dim = 0;                        // gather/scatter dimension
  Backend backend = Backend::copy_engine;
  std::string tensor = "x";           // tensor name ("x" in, "y" out for all-to-all)
  std::string output = "y";
  // Non-empty: a staged reduce-scatter or all-reduce (see above) into a staging tensor of
  // this name.
  std::string staging;
};

// Throws ShapeError (naming the option and value) when the shape cannot be split as asked,
// e.g. a dimension of 3 into 4 ranks x 2 sub-chunks, or staging is asked of something else
// than a direct reduce-scatter or all-reduce of a [1, ...] tensor whose dim divides by the
// world size.
CommPlan make_plan(const TemplateOptions& options);

}  // namespace syncopate::plan

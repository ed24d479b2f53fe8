// Plan templates: all-gather, reduce-scatter, all-reduce (RS then AG) and all-to-all, with
// ring, direct (one-shot to every peer) and bidirectional-ring algorithms, for any world size
// >= 1, any tensor rank and dimension, and a split factor cutting each shard into sub-chunks.
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
};

// Throws ShapeError (naming the option and value) when the shape cannot be split as asked,
// e.g. a dimension of 3 into 4 ranks x 2 sub-chunks.
CommPlan make_plan(const TemplateOptions& options);

}  // namespace syncopate::plan

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
  int split = 1;                    // sub-chunks per shard along `dim`
  std::vector<std::int64_t> shape;  // of the full (gathered / reduced) tensor
  DType dtype = DType::bf16;
  int dim = 0;  // gather/scatter dimension
  Backend backend = Backend::copy_engine;
  std::string tensor = "x";  // tensor name ("x" in, "y" out for all-to-all)
  std::string output = "y";
  // Non-empty: a staged reduce-scatter or all-reduce (see above) into a staging tensor of
  // this name.
  std::string staging;
  // Topology: the node of each rank (CommPlan::nodes); empty = one node. With several nodes
  // the plan is hierarchical (below) unless `flat` is set; a flat plan across nodes needs
  // backend nccl (copy engine and SM copy reach only their own node).
  std::vector<int> nodes;
  bool flat = false;
  // Non-empty (all-gather only, one node, shape[dim] % world == 0): each rank's shard starts in
  // an input tensor of this name (`shape` with dim shape[dim] / world) and a local copy-engine
  // chunk per sub-chunk, first on stream 0, moves it into its place; every first hop of a piece
  // depends on that local chunk. A consumer can then start before its own rows are in place and
  // wait for them like for any other chunk (comm_plan.hpp, "all-gather with input").
  std::string input;
};

// Hierarchical plans (several nodes, not flat). Every node must hold the same number G of
// ranks (uneven nodes are refused with a ShapeError naming them: make a flat NCCL plan for
// those). The local rank of a rank is its position among its node's ranks in rank order, and
// its rail that local rank: between nodes only ranks of one rail talk (rail-aligned), always
// over NCCL, on a stream of their own (the last: 1 for ring / direct, 2 for bidir), one-shot
// (round p = 1 .. N-1: node n sends to node n+p and receives from node n-p), one NCCL group
// per (round, sub-chunk). Inside a node, the options' algorithm and backend.
//  all-gather      each rank first sends its shard to its rail peers over NCCL; then inside
//                  every node each rank forwards the N shards of its rail (its own first, then
//                  the one from node n-1, n-2, ...) to the other local ranks. Each sub-chunk
//                  forwarded depends on exactly the NCCL chunk that landed it, so sub-chunk k
//                  moves on inside the node while sub-chunk k+1 is still on the network.
//  reduce-scatter  first inside each node: local rank l gathers the node's sum of every shard
//                  of rail l (its own shard first); then over NCCL each rank adds the node sum
//                  of shard j into j's owner on its rail, after the node sum of that sub-chunk
//                  is complete on both sides.
//  all-reduce      the reduce-scatter, then the all-gather, each piece leaving its owner once
//                  every contribution has landed there.
//  all-to-all      inside a node blocks go straight to their local peers; to another node a
//                  block goes over NCCL to the destination's rail peer on the sender's rail,
//                  into a relay tensor ("<tensor>_relay", the input's shape: on rank (m, l),
//                  block b's place holds what rank b sends to local rank l' of node m, where b
//                  is the rank of node n and local rank l'), then inside node m to local rank
//                  l' (straight into the output when l' == l).
// Returns the node count of `nodes` (1 when empty); the hierarchical layout rules of
// make_plan apply when it is above 1 and `flat` is not set.
int node_count(const std::vector<int>& nodes);

// Ranks 0 .. world-1 on `node_count` nodes of world / node_count consecutive ranks each
// (torchrun's numbering). Throws ShapeError when world is not a multiple of node_count.
std::vector<int> consecutive_nodes(int world_size, int node_count);

// Throws ShapeError (naming the option and value) when the shape cannot be split as asked,
// e.g. a dimension of 3 into 4 ranks x 2 sub-chunks, or staging is asked of something else
// than a direct reduce-scatter or all-reduce of a [1, ...] tensor whose dim divides by the
// world size.
CommPlan make_plan(const TemplateOptions& options);

}  // namespace syncopate::plan

// Shared pieces of the plan templates (internal to the plan layer).
//
// Every template appends chunks in one global order in which a chunk's deps always come
// first, and every stream lists its chunks in that same order. Both sides of an NCCL chunk
// therefore see their sends and receives in one consistent order, so the happens-before
// graph (stream order + deps + send/recv matching) only ever points forward: no deadlock.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "syncopate/plan/comm_plan.hpp"
#include "syncopate/plan/templates.hpp"

namespace syncopate::plan::detail {

// (a + b) mod n, for ring arithmetic with negative offsets.
inline int ring_rank(int a, int b, int n) { return ((a + b) % n + n) % n; }

// Where the pieces of the tensor lie: shard (or all-to-all block) `part` of `parts` along
// `dim`, cut again into `split` sub-chunks; every other dimension is taken whole.
struct PieceGeometry {
  std::vector<std::int64_t> shape;
  int dim = 0;
  int parts = 1;
  int split = 1;

  Box box(int part, int sub) const {
    const Span shard = even_split(shape[dim], parts, part);
    const Span piece = even_split(shard.size, split, sub);
    Box b{std::vector<std::int64_t>(shape.size(), 0), shape};
    b.offset[dim] = shard.begin + piece.begin;
    b.extent[dim] = piece.size;
    return b;
  }
};

// Appends chunks with dense ids and lists each one in the stream of the rank(s) that issue it.
class PlanBuilder {
 public:
  PlanBuilder(const TemplateOptions& options, int streams_per_rank);

  struct Move {
    Box box;
    Box dst_box;  // the box on dst (all-to-all lands a block elsewhere); same as box otherwise
    int src = 0;
    int dst = 0;
    ChunkOp op = ChunkOp::copy;
    int stream = 0;
    std::vector<int> deps;
    bool pull = false;  // a copy issued by dst (a reduce-add always is, except over NCCL)
    // Set: this backend instead of the options' (hierarchical plans: NCCL between nodes).
    std::optional<Backend> backend;
    // Non-empty: the tensors read and written instead of the defaults (hierarchical
    // all-to-all: the relay tensor).
    std::string from;
    std::string to;
  };
  // Adds one chunk of the collective's tensor (to the all-to-all output or the staging tensor
  // when `to_output`); returns its id.
  // An NCCL chunk between two ranks joins the current NCCL group (see next_group).
  int add(Move move, bool to_output = false);
  // Starts a new NCCL group: the templates call it once per ring step (and sub-chunk and
  // direction) or per direct round, so each rank's send and recv of that step are issued
  // together. Chunks of one step on one rank are consecutive in its stream by construction.
  // Numbers stay dense: a block that made no NCCL chunk (a local copy) uses up no number.
  void next_group() {
    if (group_used_) ++group_;
    group_used_ = false;
  }

  // Adds a scratch tensor to the plan (hierarchical all-to-all's relay).
  void add_tensor(const std::string& name, const TensorSpec& spec);

  const TemplateOptions& options() const { return options_; }
  CommPlan take() { return std::move(plan_); }

 private:
  TemplateOptions options_;
  std::string output_;  // what `to_output` lands in: the all-to-all output or the staging tensor
  CommPlan plan_;
  int group_ = 0;
  bool group_used_ = false;
};

// Ids of the reduce chunks that land each piece on its owner, indexed by shard * split + sub:
// an all-gather that follows waits for all of them before sending the piece on.
using LandingChunks = std::vector<std::vector<int>>;

// All-gather of `geometry` (parts == world): every rank ends with every shard. When `ready`
// is given, the first hop of each piece also depends on ready[shard * split + sub].
void add_all_gather(PlanBuilder& builder, const PieceGeometry& geometry, const LandingChunks* ready);

// The local chunks of an all-gather from an input tensor (options.input): piece (r, sub) of
// rank r's input into its place in the gathered tensor, on stream 0 of rank r. Returns their
// ids by shard * split + sub, the `ready` of add_all_gather.
LandingChunks add_input_placement(PlanBuilder& builder, const PieceGeometry& geometry);

// Reduce-scatter of `geometry`: rank j ends with shard j summed over all ranks.
LandingChunks add_reduce_scatter(PlanBuilder& builder, const PieceGeometry& geometry);

// All-to-all: block j of rank r's `tensor` lands in block r of rank j's `output`.
void add_all_to_all(PlanBuilder& builder, const PieceGeometry& geometry);

// Staged reduce-scatter (templates.hpp): rank s's shard r lands in slot s of rank r's staging
// tensor. Returns the chunk ids by (src * world + dst) * split + sub (-1 where src == dst).
std::vector<int> add_staged_reduce_scatter(PlanBuilder& builder, const PieceGeometry& geometry);

// Staged all-reduce's second half: rank r copies its reduced shard r (which the consumer wrote
// into `tensor`) to every other rank, each sub-chunk after the staging chunk that read the
// partial it overwrites (`staged`, as returned above).
void add_staged_all_gather(PlanBuilder& builder, const PieceGeometry& geometry, const std::vector<int>& staged);

// Hierarchical plans (template_hier.cpp), for options whose topology has several nodes of
// equal size: rail-aligned NCCL chunks between nodes, the options' algorithm and backend
// inside each node. Every collective; staging is refused before.
void add_hierarchical(PlanBuilder& builder, const PieceGeometry& geometry);

// The staging tensor's shape: `shape` with dim 0 = world and `dim` = shape[dim] / world.
std::vector<std::int64_t> staging_shape(const std::vector<std::int64_t>& shape, int dim, int world);

}  // namespace syncopate::plan::detail

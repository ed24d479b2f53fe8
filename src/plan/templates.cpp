// make_plan: checks the template options, then hands over to the collective's generator.
#include "syncopate/plan/templates.hpp"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/core.h>
#include <fmt/format.h>

#include "syncopate/common/error.hpp"
#include "template_builder.hpp"

namespace syncopate::plan {
namespace {

constexpr int kMaxWorldSize = 1024;
// A plan larger than this would take gigabytes; refuse it instead of exhausting memory.
constexpr std::int64_t kMaxChunks = std::int64_t{1} << 24;

bool hierarchical(const TemplateOptions& o) { return !o.flat && node_count(o.nodes) > 1; }

int streams_for(const TemplateOptions& o) {
  if (!o.staging.empty()) return std::max(1, o.world_size - 1);  // one per peer offset
  const int intra = o.algorithm == Algorithm::bidir ? 2 : 1;
  return hierarchical(o) ? intra + 1 : intra;  // + the inter-node NCCL stream
}

std::string shape_text(const std::vector<std::int64_t>& shape) { return fmt::format("{}", fmt::join(shape, "x")); }

// A staged reduction: the layout of the staging tensor needs a unit dim 0 (the slot index)
// and equal shards (slots of one shape); the chunks are one-shot copies, so only direct.
void check_staging(const TemplateOptions& o) {
  const auto coll = to_string(o.collective);
  if (o.collective != Collective::reduce_scatter && o.collective != Collective::all_reduce)
    throw ShapeError(
        fmt::format("staging \"{}\": only a reduce-scatter or an all-reduce can stage its partials, "
                    "not {}",
                    o.staging, coll));
  if (o.algorithm != Algorithm::direct)
    throw ShapeError(
        fmt::format("staging \"{}\": algorithm {} is not supported; a staged reduction is direct "
                    "(each partial copied once, straight to its owner)",
                    o.staging, to_string(o.algorithm)));
  if (o.staging == o.tensor)
    throw ShapeError(
        fmt::format("staging \"{}\" must be named apart from the input tensor \"{}\"", o.staging, o.tensor));
  if (o.dim == 0 || o.shape[0] != 1)
    throw ShapeError(
        fmt::format("staging \"{}\": shape {} with dim {}: the input needs a unit dim 0 (the staging "
                    "tensor's slot index) and a scatter dim after it, e.g. [1, M, N] with dim 1",
                    o.staging, shape_text(o.shape), o.dim));
  const std::int64_t size = o.shape[o.dim];
  if (size % o.world_size != 0)
    throw ShapeError(
        fmt::format("staging \"{}\": dim {} of size {} is not divisible by world size {} (the staging "
                    "slots must be equal)",
                    o.staging, o.dim, size, o.world_size));
}

// The topology: one node id per rank; a flat plan across nodes only over NCCL; a hierarchical
// one needs nodes of equal size (rail-aligned) and no staging.
void check_topology(const TemplateOptions& o) {
  if (o.nodes.empty()) return;
  if (static_cast<int>(o.nodes.size()) != o.world_size)
    throw ShapeError(
        fmt::format("nodes gives {} node ids for world size {}: give one per rank", o.nodes.size(), o.world_size));
  for (std::size_t r = 0; r < o.nodes.size(); ++r)
    if (o.nodes[r] < 0) throw ShapeError(fmt::format("nodes: rank {} is on node {}, node ids are >= 0", r, o.nodes[r]));
  if (node_count(o.nodes) == 1) return;
  if (o.flat) {
    if (o.backend != Backend::nccl)
      throw ShapeError(
          fmt::format("a flat plan across {} nodes needs backend nccl: {} reaches only the GPUs of its "
                      "own node (or make the hierarchical plan)",
                      node_count(o.nodes), to_string(o.backend)));
    return;
  }
  if (!o.staging.empty())
    throw ShapeError(
        fmt::format("staging \"{}\": a staged plan across {} nodes is not hierarchical; make it flat "
                    "with backend nccl",
                    o.staging, node_count(o.nodes)));
  std::map<int, int> size_of;
  for (int node : o.nodes) ++size_of[node];
  const auto [first_node, first_size] = *size_of.begin();
  for (const auto& [node, size] : size_of)
    if (size != first_size)
      throw ShapeError(
          fmt::format("nodes of uneven size: node {} has {} ranks but node {} has {}; hierarchical plans "
                      "are rail-aligned (local rank i of each node talks to local rank i of the others), "
                      "so every node needs the same number of ranks: make a flat NCCL plan instead",
                      first_node, first_size, node, size));
  if (o.collective == Collective::all_to_all && (o.output == o.tensor + "_relay"))
    throw ShapeError(
        fmt::format("all-to-all output \"{}\" is the name of the hierarchical plan's relay tensor; "
                    "name it differently",
                    o.output));
}

// An all-gather from an input tensor: its shard shape must be one for every rank.
void check_input(const TemplateOptions& o) {
  if (o.collective != Collective::all_gather)
    throw ShapeError(fmt::format("input \"{}\": only an all-gather starts from an input tensor, not {}", o.input,
                                 to_string(o.collective)));
  if (o.input == o.tensor)
    throw ShapeError(fmt::format("input \"{}\" is the gathered tensor's name; name it differently", o.input));
  if (hierarchical(o))
    throw ShapeError(
        fmt::format("input \"{}\": a hierarchical all-gather does not take an input tensor yet; "
                    "put the shard in place before the plan runs",
                    o.input));
  if (o.shape[o.dim] % o.world_size != 0)
    throw ShapeError(
        fmt::format("input \"{}\": dim {} of size {} is not divisible by world size {} (the input "
                    "holds one shard, the same shape on every rank)",
                    o.input, o.dim, o.shape[o.dim], o.world_size));
}

void check_options(const TemplateOptions& o) {
  if (o.collective == Collective::custom)
    throw ShapeError("collective custom: no template makes custom plans; write the plan JSON by hand");
  if (o.world_size < 1 || o.world_size > kMaxWorldSize)
    throw ShapeError(fmt::format("world_size {} is out of range: templates make plans for 1 to {} ranks", o.world_size,
                                 kMaxWorldSize));
  if (o.split < 1) throw ShapeError(fmt::format("split {} is out of range: it must be at least 1", o.split));
  if (o.shape.empty()) throw ShapeError("shape is empty: a tensor needs at least one dimension");
  for (std::size_t d = 0; d < o.shape.size(); ++d)
    if (o.shape[d] < 1)
      throw ShapeError(fmt::format("shape {}: dimension {} has size {}, every size must be at least 1",
                                   shape_text(o.shape), d, o.shape[d]));
  if (o.dim < 0 || o.dim >= static_cast<int>(o.shape.size()))
    throw ShapeError(fmt::format("dim {} is out of range for shape {} (a tensor of rank {})", o.dim,
                                 shape_text(o.shape), o.shape.size()));
  if (o.tensor.empty()) throw ShapeError("tensor name is empty");
  check_topology(o);
  if (!o.staging.empty()) check_staging(o);  // before the generic size checks: its messages say more
  if (!o.input.empty()) check_input(o);

  const std::int64_t size = o.shape[o.dim];
  const std::int64_t w = o.world_size;
  if (o.collective == Collective::all_to_all) {
    if (o.output.empty() || o.output == o.tensor)
      throw ShapeError(fmt::format("all-to-all needs an output tensor named apart from the input \"{}\", got \"{}\"",
                                   o.tensor, o.output));
    if (size % w != 0)
      throw ShapeError(fmt::format(
          "all-to-all: dim {} of size {} is not divisible by world size {} (blocks must be equal)", o.dim, size, w));
    if (size / w < o.split)
      throw ShapeError(
          fmt::format("dim {} of size {} cannot be cut into {} blocks x {} sub-chunks = {} non-empty pieces", o.dim,
                      size, w, o.split, w * o.split));
  } else if (size < w * o.split) {  // the smallest shard has size / w elements along dim
    throw ShapeError(fmt::format("dim {} of size {} cannot be cut into {} ranks x {} sub-chunks = {} non-empty pieces",
                                 o.dim, size, w, o.split, w * o.split));
  }

  const std::int64_t per_phase = o.collective == Collective::all_to_all ? w * w * o.split : w * (w - 1) * o.split;
  std::int64_t chunks = o.collective == Collective::all_reduce ? 2 * per_phase : per_phase;
  if (!o.input.empty()) chunks += w * o.split;  // the local placements
  if (hierarchical(o)) chunks *= 2;             // a bound: all-to-all relays blocks once more
  if (chunks > kMaxChunks)
    throw ShapeError(fmt::format("world size {} x split {} would make {} chunks, more than the limit of {}", w, o.split,
                                 chunks, kMaxChunks));
}

}  // namespace

namespace detail {

PlanBuilder::PlanBuilder(const TemplateOptions& options, int streams_per_rank) : options_(options) {
  plan_.collective.kind = options.collective;
  plan_.collective.tensor = options.tensor;
  plan_.collective.dim = options.dim;
  plan_.collective.algorithm = options.algorithm;
  plan_.collective.split = options.split;
  plan_.world_size = options.world_size;
  const TensorSpec spec{options.shape, options.dtype, "row-major"};
  plan_.tensors[options.tensor] = spec;
  if (options.collective == Collective::all_to_all) {
    output_ = options.output;
    plan_.tensors[output_] = spec;
  } else if (!options.staging.empty()) {
    output_ = options.staging;
    plan_.tensors[output_] =
        TensorSpec{staging_shape(options.shape, options.dim, options.world_size), options.dtype, "row-major"};
  }
  plan_.collective.output = output_;
  if (!options.input.empty()) {
    auto shard = options.shape;
    shard[static_cast<std::size_t>(options.dim)] /= options.world_size;  // check_input: divisible
    plan_.tensors[options.input] = TensorSpec{shard, options.dtype, "row-major"};
    plan_.collective.input = options.input;
  }
  plan_.nodes = options.nodes;
  for (int r = 0; r < options.world_size; ++r)
    plan_.ranks.push_back(RankProgram{r, std::vector<std::vector<int>>(static_cast<std::size_t>(streams_per_rank))});
}

int PlanBuilder::add(Move move, bool to_output) {
  Chunk c;
  c.id = static_cast<int>(plan_.chunks.size());
  c.tensor = move.from.empty() ? options_.tensor : std::move(move.from);
  c.box = std::move(move.box);
  c.dst_tensor = !move.to.empty() ? std::move(move.to) : to_output ? output_ : options_.tensor;
  c.dst_box = std::move(move.dst_box);
  c.src = move.src;
  c.dst = move.dst;
  c.backend = move.backend.value_or(options_.backend);
  c.op = move.op;
  c.stream = move.stream;
  c.deps = std::move(move.deps);
  if (c.backend == Backend::nccl && c.src != c.dst) {
    c.group = group_;
    group_used_ = true;
  }
  // Who issues: a copy is pushed by its source; a reduce-add is pulled by its destination, so
  // the add runs on the GPU that owns the box (local loads and stores, no remote atomics) and a
  // rank's adds into one box are ordered on its own stream. A staged copy is pulled too
  // (move.pull: the receiver knows when its slot may be filled). NCCL needs the send on the
  // source and the matching receive on the destination, in the same stream; a local chunk
  // (src == dst) is listed once.
  const bool remote = c.dst != c.src;
  const bool nccl = c.backend == Backend::nccl;
  const bool pulled = remote && !nccl && (c.op == ChunkOp::reduce_add || move.pull);
  plan_.ranks[pulled ? c.dst : c.src].streams[c.stream].push_back(c.id);
  if (nccl && remote) plan_.ranks[c.dst].streams[c.stream].push_back(c.id);
  plan_.chunks.push_back(std::move(c));
  return plan_.chunks.back().id;
}

LandingChunks add_input_placement(PlanBuilder& builder, const PieceGeometry& geometry) {
  const auto& o = builder.options();
  LandingChunks placed(static_cast<std::size_t>(o.world_size * o.split));
  for (int r = 0; r < o.world_size; ++r) {
    for (int sub = 0; sub < o.split; ++sub) {
      PlanBuilder::Move move;
      move.dst_box = geometry.box(r, sub);
      move.box = move.dst_box;  // the same piece, at its offset inside the one-shard input
      move.box.offset[static_cast<std::size_t>(o.dim)] -= even_split(o.shape[o.dim], o.world_size, r).begin;
      move.src = move.dst = r;
      move.stream = 0;
      move.backend = Backend::copy_engine;  // a device-to-device copy: no SMs taken from the consumer
      move.from = o.input;
      placed[static_cast<std::size_t>(r * o.split + sub)].push_back(builder.add(std::move(move)));
    }
  }
  return placed;
}

void PlanBuilder::add_tensor(const std::string& name, const TensorSpec& spec) { plan_.tensors[name] = spec; }

}  // namespace detail

int node_count(const std::vector<int>& nodes) {
  if (nodes.empty()) return 1;
  return static_cast<int>(std::set<int>(nodes.begin(), nodes.end()).size());
}

std::vector<int> consecutive_nodes(int world_size, int node_count) {
  if (node_count < 1 || world_size < 1 || world_size % node_count != 0)
    throw ShapeError(
        fmt::format("{} nodes cannot hold world size {} in equal parts (the world size must be a "
                    "multiple of the node count)",
                    node_count, world_size));
  std::vector<int> nodes(static_cast<std::size_t>(world_size));
  for (int r = 0; r < world_size; ++r) nodes[static_cast<std::size_t>(r)] = r / (world_size / node_count);
  return nodes;
}

CommPlan make_plan(const TemplateOptions& options) {
  check_options(options);
  detail::PlanBuilder builder(options, streams_for(options));
  const detail::PieceGeometry geometry{options.shape, options.dim, options.world_size, options.split};
  if (hierarchical(options)) {
    detail::add_hierarchical(builder, geometry);
    return builder.take();
  }
  switch (options.collective) {
    case Collective::all_gather:
      if (options.input.empty()) {
        detail::add_all_gather(builder, geometry, nullptr);
      } else {
        const detail::LandingChunks placed = detail::add_input_placement(builder, geometry);
        detail::add_all_gather(builder, geometry, &placed);
      }
      break;
    case Collective::reduce_scatter:
      if (options.staging.empty()) {
        detail::add_reduce_scatter(builder, geometry);
      } else {
        detail::add_staged_reduce_scatter(builder, geometry);
      }
      break;
    case Collective::all_reduce: {
      if (!options.staging.empty()) {
        const std::vector<int> staged = detail::add_staged_reduce_scatter(builder, geometry);
        detail::add_staged_all_gather(builder, geometry, staged);
        break;
      }
      // The all-gather half sends a piece on only once every contribution has landed on its
      // owner; that also orders each rank's overwrite after its own partial was read.
      const detail::LandingChunks landed = detail::add_reduce_scatter(builder, geometry);
      detail::add_all_gather(builder, geometry, &landed);
      break;
    }
    case Collective::all_to_all:
      detail::add_all_to_all(builder, geometry);
      break;
    case Collective::custom:
      break;  // refused by check_options
  }
  return builder.take();
}

}  // namespace syncopate::plan

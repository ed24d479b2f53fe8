// The plans of sequence-parallel attention (plan/sequence_parallel.hpp): Ulysses' all-to-all
// over heads, and the ring pass of K/V pieces through a double buffer.
#include "syncopate/plan/sequence_parallel.hpp"

#include <array>

#include <fmt/core.h>
#include <fmt/format.h>

#include "syncopate/common/error.hpp"
#include "syncopate/plan/templates.hpp"

namespace syncopate::plan {
namespace {

constexpr int kMaxWorldSize = 1024;

std::string shape_text(const std::vector<std::int64_t>& shape) { return fmt::format("{}", fmt::join(shape, "x")); }

void check_world(int world) {
  if (world < 1 || world > kMaxWorldSize)
    throw ShapeError(
        fmt::format("world_size {} is out of range: templates make plans for 1 to {} ranks", world, kMaxWorldSize));
}

void check_shape(const std::vector<std::int64_t>& shape) {
  if (shape.empty()) throw ShapeError("shape is empty: a tensor needs at least one dimension");
  for (std::size_t d = 0; d < shape.size(); ++d)
    if (shape[d] < 1)
      throw ShapeError(fmt::format("shape {}: dimension {} has size {}, every size must be at least 1",
                                   shape_text(shape), d, shape[d]));
}

// Slot `slot` of a [n, shape...] tensor (the piece is [1, shape...], the double buffer [2, shape...]).
Box slot_box(const std::vector<std::int64_t>& shape, int slot) {
  Box b{std::vector<std::int64_t>(shape.size() + 1, 0), std::vector<std::int64_t>{1}};
  b.offset[0] = slot;
  b.extent.insert(b.extent.end(), shape.begin(), shape.end());
  return b;
}

}  // namespace

CommPlan make_ulysses_plan(const UlyssesOptions& o) {
  check_world(o.world_size);
  check_shape(o.shape);
  if (o.shape.size() != 4)
    throw ShapeError(
        fmt::format("Ulysses: shape {} has {} dimensions; q, k and v are [Z, H, S_loc, D] (batch, heads, "
                    "this rank's positions, head dim)",
                    shape_text(o.shape), o.shape.size()));
  if (o.shape[1] % o.world_size != 0)
    throw ShapeError(
        fmt::format("Ulysses: {} heads (dim 1 of shape {}) cannot be shared by {} ranks: the world "
                    "size must divide the head count (for GQA, the K/V head count too)",
                    o.shape[1], shape_text(o.shape), o.world_size));
  TemplateOptions t;
  t.collective = Collective::all_to_all;
  t.algorithm = o.algorithm;
  t.world_size = o.world_size;
  t.split = o.split;
  t.shape = o.shape;
  t.dtype = o.dtype;
  t.dim = 1;
  t.backend = o.backend;
  t.tensor = o.tensor;
  t.output = o.output;
  return make_plan(t);
}

CommPlan make_ring_pass_plan(const RingPassOptions& o) {
  check_world(o.world_size);
  check_shape(o.shape);
  if (o.tensor.empty() || o.buffer.empty() || o.tensor == o.buffer)
    throw ShapeError(fmt::format("ring pass: the piece \"{}\" and the double buffer \"{}\" need two distinct names",
                                 o.tensor, o.buffer));
  const int w = o.world_size;
  CommPlan plan;
  plan.collective.kind = Collective::custom;
  plan.collective.tensor = o.tensor;
  plan.collective.output = o.buffer;
  plan.collective.algorithm = Algorithm::ring;
  plan.world_size = w;
  // The piece gets a unit leading dim so that a chunk's source and destination boxes have one
  // rank (the verifier compares extents dimension by dimension).
  std::vector<std::int64_t> piece_shape{1};
  piece_shape.insert(piece_shape.end(), o.shape.begin(), o.shape.end());
  plan.tensors[o.tensor] = TensorSpec{piece_shape, o.dtype, "row-major"};
  std::vector<std::int64_t> buffer_shape{2};
  buffer_shape.insert(buffer_shape.end(), o.shape.begin(), o.shape.end());
  plan.tensors[o.buffer] = TensorSpec{buffer_shape, o.dtype, "row-major"};
  for (int r = 0; r < w; ++r) plan.ranks.push_back(RankProgram{r, {std::vector<int>{}}});

  // landed[r]: the chunk of the previous step that landed on rank r (-1 before step 1).
  std::vector<int> landed(static_cast<std::size_t>(w), -1);
  for (int s = 1; s < w; ++s) {
    std::vector<int> now(static_cast<std::size_t>(w), -1);
    for (int r = 0; r < w; ++r) {
      const int src = (r - 1 + w) % w;
      Chunk c;
      c.id = static_cast<int>(plan.chunks.size());
      c.tensor = s == 1 ? o.tensor : o.buffer;
      c.box = slot_box(o.shape, s == 1 ? 0 : ring_pass_slot(s - 1));
      c.dst_tensor = o.buffer;
      c.dst_box = slot_box(o.shape, ring_pass_slot(s));
      c.src = src;
      c.dst = r;
      c.backend = o.backend;
      c.op = ChunkOp::copy;
      c.stream = 0;
      if (s >= 2) c.deps.push_back(landed[static_cast<std::size_t>(src)]);  // the piece src forwards
      // Write after read: slot s % 2 of rank r last held the piece of step s-2, which rank r
      // forwarded to r+1 at step s-1.
      if (s >= 3) c.deps.push_back(landed[static_cast<std::size_t>((r + 1) % w)]);
      if (o.backend == Backend::nccl) c.group = s - 1;  // one group per step: r's send and recv
      // Pushed by its source (a copy, as the templates do); NCCL: send and recv.
      plan.ranks[static_cast<std::size_t>(src)].streams[0].push_back(c.id);
      if (o.backend == Backend::nccl && src != r) plan.ranks[static_cast<std::size_t>(r)].streams[0].push_back(c.id);
      now[static_cast<std::size_t>(r)] = c.id;
      plan.chunks.push_back(std::move(c));
    }
    landed = now;
  }
  return plan;
}

CommPlan make_zigzag_gather_plan(const ZigzagGatherOptions& o) {
  check_world(o.world_size);
  check_shape(o.shape);
  if (o.shape.size() != 4 || o.shape[2] % 2 != 0)
    throw ShapeError(
        fmt::format("zig-zag gather: shape {} is not [Z, H, S_loc, D] with S_loc even (each rank "
                    "holds two half-pieces of S_loc / 2 positions)",
                    shape_text(o.shape)));
  if (o.tensor.empty() || o.output.empty() || o.tensor == o.output)
    throw ShapeError(fmt::format("zig-zag gather: the piece \"{}\" and the gathered \"{}\" need two distinct names",
                                 o.tensor, o.output));
  const int w = o.world_size;
  const std::int64_t half = o.shape[2] / 2;
  CommPlan plan;
  plan.collective.kind = Collective::custom;
  plan.collective.tensor = o.tensor;
  plan.collective.output = o.output;
  plan.collective.algorithm = Algorithm::ring;
  plan.world_size = w;
  plan.tensors[o.tensor] = TensorSpec{o.shape, o.dtype, "row-major"};
  std::vector<std::int64_t> gathered = o.shape;
  gathered[2] = o.shape[2] * w;
  plan.tensors[o.output] = TensorSpec{gathered, o.dtype, "row-major"};
  for (int r = 0; r < w; ++r) plan.ranks.push_back(RankProgram{r, {std::vector<int>{}}});
  // Positions [start, start + half) along the sequence dim, the rest whole.
  const auto seq_box = [&](std::int64_t start) {
    Box b{std::vector<std::int64_t>{0, 0, start, 0}, o.shape};
    b.extent[2] = half;
    return b;
  };
  // landed[r][h]: the chunk that last landed half h of the piece rank r forwards next.
  std::vector<std::array<int, 2>> landed(static_cast<std::size_t>(w), {-1, -1});
  for (int s = 0; s < w; ++s) {
    std::vector<std::array<int, 2>> now(static_cast<std::size_t>(w), {-1, -1});
    for (int r = 0; r < w; ++r) {
      const int src = s == 0 ? r : (r - 1 + w) % w;
      const int owner = ((r - s) % w + w) % w;  // whose halves this step brings to r
      for (int h = 0; h < 2; ++h) {
        const std::int64_t at = zigzag_half_piece(owner, h, w) * half;
        Chunk c;
        c.id = static_cast<int>(plan.chunks.size());
        c.tensor = s == 0 ? o.tensor : o.output;
        c.box = s == 0 ? seq_box(h * half) : seq_box(at);
        c.dst_tensor = o.output;
        c.dst_box = seq_box(at);
        c.src = src;
        c.dst = r;
        c.backend = s == 0 ? Backend::copy_engine : o.backend;
        c.op = ChunkOp::copy;
        c.stream = 0;
        if (s >= 1) c.deps.push_back(landed[static_cast<std::size_t>(src)][static_cast<std::size_t>(h)]);
        if (o.backend == Backend::nccl && s >= 1) c.group = s - 1;  // one group per step
        plan.ranks[static_cast<std::size_t>(src)].streams[0].push_back(c.id);
        if (o.backend == Backend::nccl && s >= 1 && src != r)
          plan.ranks[static_cast<std::size_t>(r)].streams[0].push_back(c.id);
        now[static_cast<std::size_t>(r)][static_cast<std::size_t>(h)] = c.id;
        plan.chunks.push_back(std::move(c));
      }
    }
    landed = now;
  }
  return plan;
}

}  // namespace syncopate::plan

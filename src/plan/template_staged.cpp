// Staged reduce-scatter: every partial is copied once into a staging slot on its owner; the
// consumer (a GEMM epilogue) adds the slots. See templates.hpp for the layout. A staged
// all-reduce then pushes each reduced shard from its owner to every other rank.
//
// Rounds go by peer offset p = 1 .. W-1 (rank s first feeds s+1, the box a staggered tile
// order computes first), then sub-chunk, then destination rank. Each offset has its own
// stream, so a late partial from one peer never holds up the copies from the others; with
// NCCL each (offset, sub-chunk) is one group: rank x's send to x+p and its recv from x-p.
// Chunk x -> y always uses stream (y - x - 1) mod W, on both ranks.
#include "template_builder.hpp"

namespace syncopate::plan::detail {

std::vector<std::int64_t> staging_shape(const std::vector<std::int64_t>& shape, int dim, int world) {
  std::vector<std::int64_t> staged = shape;
  staged[0] = world;
  staged[static_cast<std::size_t>(dim)] = shape[static_cast<std::size_t>(dim)] / world;
  return staged;
}

std::vector<int> add_staged_reduce_scatter(PlanBuilder& b, const PieceGeometry& g) {
  const int w = g.parts;
  const auto d = static_cast<std::size_t>(g.dim);
  const std::int64_t shard = g.shape[d] / w;  // check_options made it exact
  std::vector<int> ids(static_cast<std::size_t>(w) * w * g.split, -1);
  for (int p = 1; p < w; ++p)
    for (int k = 0; k < g.split; ++k, b.next_group())
      for (int r = 0; r < w; ++r) {
        const int s = ring_rank(r, -p, w);
        Box box = g.box(r, k);  // rank s's partial of shard r, sub-chunk k
        Box slot = box;         // -> slot s of rank r's staging tensor, same rows of the slot
        slot.offset[0] = s;
        slot.offset[d] -= std::int64_t{r} * shard;
        PlanBuilder::Move move{std::move(box), std::move(slot), s, r, ChunkOp::copy, p - 1, {}};
        move.pull = true;
        ids[(static_cast<std::size_t>(s) * w + r) * g.split + k] = b.add(std::move(move), true);
      }
  return ids;
}

void add_staged_all_gather(PlanBuilder& b, const PieceGeometry& g, const std::vector<int>& staged) {
  const int w = g.parts;
  for (int p = 1; p < w; ++p)
    for (int k = 0; k < g.split; ++k, b.next_group())
      for (int r = 0; r < w; ++r) {
        // Rank r pushes its reduced shard r to s = r + p, over rank s's own partial of it:
        // only once the staging chunk s -> r, which reads that partial, has landed.
        const int s = ring_rank(r, p, w);
        const int reads = staged[(static_cast<std::size_t>(s) * w + r) * g.split + k];
        b.add({g.box(r, k), g.box(r, k), r, s, ChunkOp::copy, p - 1, {reads}});
      }
}

}  // namespace syncopate::plan::detail

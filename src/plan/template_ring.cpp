// All-gather and reduce-scatter chunk generators: ring, direct and bidirectional ring.
//
// Loops run step-major, then sub-chunk, then rank: that is the issue order on every stream,
// so sub-chunk k of a step can leave as soon as sub-chunk k of the previous step has arrived
// (each sub-chunk pipelines on its own), and every dep points to an earlier chunk. With NCCL,
// each (step, sub-chunk[, direction]) is one group: on every rank its send and its recv are the
// two consecutive chunks of that block in the stream, issued together.
#include <algorithm>

#include "template_builder.hpp"

namespace syncopate::plan::detail {
namespace {

// Per (sub-chunk, rank): the chunk that last brought that sub-chunk's data to the rank.
class Arrivals {
 public:
  Arrivals(int split, int world) : world_(world), ids_(static_cast<std::size_t>(split) * world, -1) {}
  int& at(int sub, int rank) { return ids_[static_cast<std::size_t>(sub) * world_ + rank]; }

 private:
  int world_;
  std::vector<int> ids_;
};

// Directions of the bidirectional ring: clockwise (r -> r+1) on stream 0, counter-clockwise
// (r -> r-1) on stream 1; the clockwise half takes the larger share when w-1 is odd.
struct Direction {
  int step = +1;
  int stream = 0;
  int hops = 0;
};
std::vector<Direction> bidir_directions(int world) { return {{+1, 0, world / 2}, {-1, 1, (world - 1) / 2}}; }

std::vector<int> ready_deps(const LandingChunks* ready, const PieceGeometry& g, int shard, int sub) {
  if (ready == nullptr) return {};
  return (*ready)[static_cast<std::size_t>(shard) * g.split + sub];
}

void gather_ring(PlanBuilder& b, const PieceGeometry& g, const LandingChunks* ready) {
  const int w = g.parts;
  Arrivals last(g.split, w);
  for (int s = 0; s + 1 < w; ++s) {
    Arrivals now(g.split, w);
    for (int k = 0; k < g.split; ++k, b.next_group())
      for (int r = 0; r < w; ++r) {
        // Step s: rank r forwards shard r-s, which it received at step s-1 (or owns at s == 0).
        const int shard = ring_rank(r, -s, w);
        const int dst = ring_rank(r, 1, w);
        auto deps = s == 0 ? ready_deps(ready, g, shard, k) : std::vector<int>{last.at(k, r)};
        now.at(k, dst) = b.add({g.box(shard, k), g.box(shard, k), r, dst, ChunkOp::copy, 0, std::move(deps)});
      }
    last = now;
  }
}

void gather_direct(PlanBuilder& b, const PieceGeometry& g, const LandingChunks* ready) {
  const int w = g.parts;
  for (int p = 1; p < w; ++p)  // rotated: rank r serves r+1 first, so no rank is everyone's first target
    for (int k = 0; k < g.split; ++k, b.next_group())
      for (int r = 0; r < w; ++r)
        b.add({g.box(r, k), g.box(r, k), r, ring_rank(r, p, w), ChunkOp::copy, 0, ready_deps(ready, g, r, k)});
}

void gather_bidir(PlanBuilder& b, const PieceGeometry& g, const LandingChunks* ready) {
  const int w = g.parts;
  const auto dirs = bidir_directions(w);
  std::vector<Arrivals> last(dirs.size(), Arrivals(g.split, w));
  for (int s = 0; s < dirs[0].hops; ++s) {
    std::vector<Arrivals> now(dirs.size(), Arrivals(g.split, w));
    for (int k = 0; k < g.split; ++k)
      for (std::size_t d = 0; d < dirs.size(); ++d, b.next_group()) {
        if (s >= dirs[d].hops) continue;
        for (int r = 0; r < w; ++r) {
          // Shard j travels j -> j+step -> ...; at step s rank r holds shard r - s*step.
          const int shard = ring_rank(r, -s * dirs[d].step, w);
          const int dst = ring_rank(r, dirs[d].step, w);
          auto deps = s == 0 ? ready_deps(ready, g, shard, k) : std::vector<int>{last[d].at(k, r)};
          now[d].at(k, dst) =
              b.add({g.box(shard, k), g.box(shard, k), r, dst, ChunkOp::copy, dirs[d].stream, std::move(deps)});
        }
      }
    last = now;
  }
}

LandingChunks scatter_ring(PlanBuilder& b, const PieceGeometry& g) {
  const int w = g.parts;
  LandingChunks landed(static_cast<std::size_t>(w) * g.split);
  Arrivals last(g.split, w);
  for (int s = 0; s + 1 < w; ++s) {
    Arrivals now(g.split, w);
    for (int k = 0; k < g.split; ++k, b.next_group())
      for (int r = 0; r < w; ++r) {
        // Step s: rank r adds its running partial of shard r-s-1 into rank r+1; at the last
        // step that is shard r+1 itself, landing complete on its owner.
        const int shard = ring_rank(r, -s - 1, w);
        const int dst = ring_rank(r, 1, w);
        auto deps = s == 0 ? std::vector<int>{} : std::vector<int>{last.at(k, r)};
        const int id = b.add({g.box(shard, k), g.box(shard, k), r, dst, ChunkOp::reduce_add, 0, std::move(deps)});
        now.at(k, dst) = id;
        if (dst == shard) landed[static_cast<std::size_t>(shard) * g.split + k].push_back(id);
      }
    last = now;
  }
  return landed;
}

LandingChunks scatter_direct(PlanBuilder& b, const PieceGeometry& g) {
  const int w = g.parts;
  LandingChunks landed(static_cast<std::size_t>(w) * g.split);
  for (int p = 1; p < w; ++p)
    for (int k = 0; k < g.split; ++k, b.next_group())
      for (int r = 0; r < w; ++r) {
        // Every rank's partial of shard j is added straight into rank j. Rank j pulls them
        // all on its one stream, so the adds into one shard run one after the other (no
        // atomics; the runtime's exclusivity analysis sees that).
        const int owner = ring_rank(r, p, w);
        const int id = b.add({g.box(owner, k), g.box(owner, k), r, owner, ChunkOp::reduce_add, 0, {}});
        landed[static_cast<std::size_t>(owner) * g.split + k].push_back(id);
      }
  return landed;
}

LandingChunks scatter_bidir(PlanBuilder& b, const PieceGeometry& g) {
  const int w = g.parts;
  const auto dirs = bidir_directions(w);
  LandingChunks landed(static_cast<std::size_t>(w) * g.split);
  std::vector<Arrivals> last(dirs.size(), Arrivals(g.split, w));
  for (int s = 0; s < dirs[0].hops; ++s) {
    std::vector<Arrivals> now(dirs.size(), Arrivals(g.split, w));
    for (int k = 0; k < g.split; ++k)
      for (std::size_t d = 0; d < dirs.size(); ++d, b.next_group()) {
        const int hops = dirs[d].hops;
        if (s >= hops) continue;
        for (int r = 0; r < w; ++r) {
          // The chain toward owner j starts `hops` ranks upstream: j - hops*step sends at
          // step 0, so at step s rank r carries the partial of shard r + (hops - s)*step.
          const int shard = ring_rank(r, (hops - s) * dirs[d].step, w);
          const int dst = ring_rank(r, dirs[d].step, w);
          auto deps = s == 0 ? std::vector<int>{} : std::vector<int>{last[d].at(k, r)};
          const int id =
              b.add({g.box(shard, k), g.box(shard, k), r, dst, ChunkOp::reduce_add, dirs[d].stream, std::move(deps)});
          now[d].at(k, dst) = id;
          if (dst == shard) landed[static_cast<std::size_t>(shard) * g.split + k].push_back(id);
        }
      }
    last = now;
  }
  return landed;
}

}  // namespace

void add_all_gather(PlanBuilder& builder, const PieceGeometry& geometry, const LandingChunks* ready) {
  switch (builder.options().algorithm) {
    case Algorithm::ring:
      gather_ring(builder, geometry, ready);
      break;
    case Algorithm::direct:
      gather_direct(builder, geometry, ready);
      break;
    case Algorithm::bidir:
      gather_bidir(builder, geometry, ready);
      break;
  }
}

LandingChunks add_reduce_scatter(PlanBuilder& builder, const PieceGeometry& geometry) {
  switch (builder.options().algorithm) {
    case Algorithm::ring:
      return scatter_ring(builder, geometry);
    case Algorithm::direct:
      return scatter_direct(builder, geometry);
    case Algorithm::bidir:
      return scatter_bidir(builder, geometry);
  }
  return {};
}

}  // namespace syncopate::plan::detail

// All-to-all chunk generators: block j of rank r's input lands in block r of rank j's output.
//
// Round i pairs rank r with peer r+i (and r-i for the second bidir direction); round 0 is
// the own block, copied locally (src == dst).
#include "template_builder.hpp"

namespace syncopate::plan::detail {
namespace {

struct Peer {
  int offset = 0;  // peer = r + offset
  int stream = 0;
};

// The peers each algorithm visits in round i, in issue order.
std::vector<Peer> round_peers(Algorithm algorithm, int world, int round) {
  if (round == 0) return {{0, 0}};
  if (algorithm != Algorithm::bidir) return {{round, 0}};
  std::vector<Peer> peers;
  if (round <= world / 2) peers.push_back({round, 0});
  if (round <= (world - 1) / 2) peers.push_back({-round, 1});
  return peers;
}

int round_count(Algorithm algorithm, int world) { return algorithm == Algorithm::bidir ? world / 2 + 1 : world; }

}  // namespace

void add_all_to_all(PlanBuilder& builder, const PieceGeometry& g) {
  const int w = g.parts;
  const Algorithm algorithm = builder.options().algorithm;
  // Ring paces like a pairwise exchange: sub-chunk k of round i leaves rank r only once
  // sub-chunk k of round i-1 has arrived at r, so no rank floods one peer ahead of the others.
  std::vector<int> received(static_cast<std::size_t>(g.split) * w, -1);  // by sub * w + dst
  for (int i = 0; i < round_count(algorithm, w); ++i) {
    std::vector<int> now(received.size(), -1);
    for (int k = 0; k < g.split; ++k)
      for (const Peer& peer : round_peers(algorithm, w, i)) {
        builder.next_group();  // NCCL: rank r's send to r+offset and recv from r-offset
        for (int r = 0; r < w; ++r) {
          const int dst = ring_rank(r, peer.offset, w);
          std::vector<int> deps;
          if (algorithm == Algorithm::ring && i > 0) deps.push_back(received[static_cast<std::size_t>(k) * w + r]);
          now[static_cast<std::size_t>(k) * w + dst] =
              builder.add({g.box(dst, k), g.box(r, k), r, dst, ChunkOp::copy, peer.stream, std::move(deps)}, true);
        }
      }
    received = now;
  }
}

}  // namespace syncopate::plan::detail

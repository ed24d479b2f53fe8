// Hierarchical (multi-node) plans: rail-aligned NCCL chunks between nodes, the options'
// algorithm and backend inside each node (templates.hpp says what each collective does).
//
// Chunks are appended phase by phase (all inter-node chunks of a phase, then the intra-node
// chunks that forward them, or the other way round for a reduction), so every dep points to
// an earlier chunk and each stream lists its chunks in id order, as in the flat templates.
// Inter-node chunks use their own stream (the last one), so an intra-node forward waits only
// for the one NCCL chunk that brought its sub-chunk, never for the NCCL stream's later work.
#include <map>
#include <set>

#include "template_builder.hpp"

namespace syncopate::plan::detail {
namespace {

// Where each rank sits: node index n (nodes in order of their ids) and local rank l (its
// position among its node's ranks in rank order); rank_at[n][l] gives the rank back.
struct Layout {
  int nodes = 1;
  int per_node = 1;
  std::vector<std::vector<int>> rank_at;
  std::vector<int> node_index;
  std::vector<int> local_index;

  explicit Layout(const std::vector<int>& node_of_rank) {
    std::map<int, std::vector<int>> by_node;
    for (std::size_t r = 0; r < node_of_rank.size(); ++r) by_node[node_of_rank[r]].push_back(static_cast<int>(r));
    node_index.resize(node_of_rank.size());
    local_index.resize(node_of_rank.size());
    for (auto& [id, ranks] : by_node) {
      for (std::size_t l = 0; l < ranks.size(); ++l) {
        node_index[static_cast<std::size_t>(ranks[l])] = static_cast<int>(rank_at.size());
        local_index[static_cast<std::size_t>(ranks[l])] = static_cast<int>(l);
      }
      rank_at.push_back(ranks);
    }
    nodes = static_cast<int>(rank_at.size());
    per_node = static_cast<int>(rank_at.front().size());  // equal sizes: checked by make_plan
  }
  int at(int node, int local) const {
    return rank_at[static_cast<std::size_t>(ring_rank(node, 0, nodes))]
                  [static_cast<std::size_t>(ring_rank(local, 0, per_node))];
  }
};

// Directions inside a node, as the flat ring and bidir use them (ring: one direction, G-1
// hops; bidir: clockwise takes the larger half).
struct Direction {
  int step = +1;
  int stream = 0;
  int hops = 0;
};
std::vector<Direction> node_directions(Algorithm algorithm, int per_node) {
  if (algorithm == Algorithm::bidir) return {{+1, 0, per_node / 2}, {-1, 1, (per_node - 1) / 2}};
  return {{+1, 0, per_node - 1}};
}

// Chunk ids by (rank, shard * split + sub): what landed a piece on a rank.
using PieceIds = std::vector<std::map<int, std::vector<int>>>;

class Hierarchy {
 public:
  Hierarchy(PlanBuilder& b, const PieceGeometry& g)
      : b_(b),
        g_(g),
        lay_(b.options().nodes),
        algorithm_(b.options().algorithm),
        inter_stream_(algorithm_ == Algorithm::bidir ? 2 : 1) {}

  void run() {
    switch (b_.options().collective) {
      case Collective::all_gather:
        all_gather(nullptr);
        break;
      case Collective::reduce_scatter:
        reduce_scatter();
        break;
      case Collective::all_reduce: {
        const LandingChunks landed = reduce_scatter();
        all_gather(&landed);
        break;
      }
      case Collective::all_to_all:
        all_to_all();
        break;
      case Collective::custom:
        break;  // refused by make_plan
    }
  }

 private:
  int key(int shard, int sub) const { return shard * g_.split + sub; }
  std::vector<int> ready(const LandingChunks* landed, int shard, int sub) const {
    if (landed == nullptr) return {};
    return (*landed)[static_cast<std::size_t>(key(shard, sub))];
  }
  int inter(PlanBuilder::Move move, bool to_output = false) {
    move.backend = Backend::nccl;
    move.stream = inter_stream_;
    return b_.add(std::move(move), to_output);
  }

  // ---- all-gather: over the rails first, then inside each node.
  void all_gather(const LandingChunks* landed) {
    const int nn = lay_.nodes, gg = lay_.per_node, w = nn * gg;
    PieceIds arrived(static_cast<std::size_t>(w));
    for (int p = 1; p < nn; ++p)
      for (int k = 0; k < g_.split; ++k, b_.next_group())
        for (int r = 0; r < w; ++r) {
          const int dst = lay_.at(lay_.node_index[r] + p, lay_.local_index[r]);
          const int id = inter({g_.box(r, k), g_.box(r, k), r, dst, ChunkOp::copy, 0, ready(landed, r, k)});
          arrived[static_cast<std::size_t>(dst)][key(r, k)] = {id};
        }
    // Piece p of local rank o on node n: the shard of rank (n - p, o), which reached (n, o)
    // by round p (p = 0: its own). Its first intra-node hop waits for exactly that.
    auto shard_of = [&](int n, int p, int owner) { return lay_.at(n - p, owner); };
    auto first_deps = [&](int holder, int shard, int k) {
      return shard == holder ? ready(landed, shard, k) : arrived[static_cast<std::size_t>(holder)].at(key(shard, k));
    };
    for (int p = 0; p < nn; ++p) {
      if (algorithm_ == Algorithm::direct) {
        for (int k = 0; k < g_.split; ++k)
          for (int d = 1; d < gg; ++d, b_.next_group())
            for (int r = 0; r < w; ++r) {
              const int n = lay_.node_index[r], l = lay_.local_index[r];
              const int shard = shard_of(n, p, l);
              b_.add({g_.box(shard, k), g_.box(shard, k), r, lay_.at(n, l + d), ChunkOp::copy, 0,
                      first_deps(r, shard, k)});
            }
        continue;
      }
      const auto dirs = node_directions(algorithm_, gg);
      std::vector<std::vector<int>> last(dirs.size(), std::vector<int>(static_cast<std::size_t>(g_.split) * w, -1));
      for (int s = 0; s < dirs[0].hops; ++s) {
        auto now = last;
        for (int k = 0; k < g_.split; ++k)
          for (std::size_t di = 0; di < dirs.size(); ++di, b_.next_group()) {
            if (s >= dirs[di].hops) continue;
            for (int r = 0; r < w; ++r) {
              const int n = lay_.node_index[r], l = lay_.local_index[r];
              // Rank l forwards at step s the piece of local rank l - s*step.
              const int shard = shard_of(n, p, l - s * dirs[di].step);
              const int dst = lay_.at(n, l + dirs[di].step);
              auto deps =
                  s == 0 ? first_deps(r, shard, k) : std::vector<int>{last[di][static_cast<std::size_t>(k) * w + r]};
              now[di][static_cast<std::size_t>(k) * w + dst] =
                  b_.add({g_.box(shard, k), g_.box(shard, k), r, dst, ChunkOp::copy, dirs[di].stream, std::move(deps)});
            }
          }
        last = std::move(now);
      }
    }
  }

  // ---- reduce-scatter: inside each node first (local rank l collects the node's sum of
  // every shard of rail l), then over the rails into each shard's owner.
  LandingChunks reduce_scatter() {
    const int nn = lay_.nodes, gg = lay_.per_node, w = nn * gg;
    PieceIds node_sum(static_cast<std::size_t>(w));  // by holder: the adds that complete it
    // Piece p of local rank o on node n: the shard of rank (n + p, o); p = 0 (its own) first,
    // since the NCCL adds into o wait for it.
    auto shard_of = [&](int n, int p, int owner) { return lay_.at(n + p, owner); };
    for (int p = 0; p < nn; ++p) {
      if (algorithm_ == Algorithm::direct) {
        for (int k = 0; k < g_.split; ++k)
          for (int d = 1; d < gg; ++d, b_.next_group())
            for (int r = 0; r < w; ++r) {
              const int n = lay_.node_index[r], l = lay_.local_index[r];
              const int holder = lay_.at(n, l + d);
              const int shard = shard_of(n, p, l + d);
              const int id = b_.add({g_.box(shard, k), g_.box(shard, k), r, holder, ChunkOp::reduce_add, 0, {}});
              node_sum[static_cast<std::size_t>(holder)][key(shard, k)].push_back(id);
            }
        continue;
      }
      const auto dirs = node_directions(algorithm_, gg);
      std::vector<std::vector<int>> last(dirs.size(), std::vector<int>(static_cast<std::size_t>(g_.split) * w, -1));
      for (int s = 0; s < dirs[0].hops; ++s) {
        auto now = last;
        for (int k = 0; k < g_.split; ++k)
          for (std::size_t di = 0; di < dirs.size(); ++di, b_.next_group()) {
            const int hops = dirs[di].hops;
            if (s >= hops) continue;
            for (int r = 0; r < w; ++r) {
              const int n = lay_.node_index[r], l = lay_.local_index[r];
              // As the flat bidir: the chain toward holder o starts `hops` ranks upstream.
              const int owner_local = ring_rank(l, (hops - s) * dirs[di].step, gg);
              const int shard = shard_of(n, p, owner_local);
              const int dst_local = ring_rank(l, dirs[di].step, gg);
              const int dst = lay_.at(n, dst_local);
              auto deps = s == 0 ? std::vector<int>{} : std::vector<int>{last[di][static_cast<std::size_t>(k) * w + r]};
              const int id = b_.add(
                  {g_.box(shard, k), g_.box(shard, k), r, dst, ChunkOp::reduce_add, dirs[di].stream, std::move(deps)});
              now[di][static_cast<std::size_t>(k) * w + dst] = id;
              if (dst_local == owner_local) node_sum[static_cast<std::size_t>(dst)][key(shard, k)].push_back(id);
            }
          }
        last = std::move(now);
      }
    }
    LandingChunks landed(static_cast<std::size_t>(w) * g_.split);
    auto sums = [&](int rank, int shard, int k) {
      const auto& m = node_sum[static_cast<std::size_t>(rank)];
      const auto it = m.find(key(shard, k));
      return it == m.end() ? std::vector<int>{} : it->second;  // one GPU per node: nothing to sum
    };
    for (int owner = 0; owner < w; ++owner)
      for (int k = 0; k < g_.split; ++k) landed[static_cast<std::size_t>(key(owner, k))] = sums(owner, owner, k);
    for (int p = 1; p < nn; ++p)
      for (int k = 0; k < g_.split; ++k, b_.next_group())
        for (int r = 0; r < w; ++r) {
          // The node sum of shard j leaves r once complete there, and lands once j's owner
          // holds its own node's sum (the NCCL add must not race the intra-node adds).
          const int owner = lay_.at(lay_.node_index[r] + p, lay_.local_index[r]);
          std::vector<int> deps = sums(r, owner, k);
          const auto at_owner = sums(owner, owner, k);
          deps.insert(deps.end(), at_owner.begin(), at_owner.end());
          const int id = inter({g_.box(owner, k), g_.box(owner, k), r, owner, ChunkOp::reduce_add, 0, std::move(deps)});
          landed[static_cast<std::size_t>(key(owner, k))].push_back(id);
        }
    return landed;
  }

  // ---- all-to-all: local blocks straight, remote ones over the rail into the relay tensor
  // of the destination node's rank on the sender's rail, then inside that node.
  void all_to_all() {
    const int nn = lay_.nodes, gg = lay_.per_node, w = nn * gg;
    const std::string relay = b_.options().tensor + "_relay";
    b_.add_tensor(relay, TensorSpec{b_.options().shape, b_.options().dtype, "row-major"});
    // Inside each node: rounds over local offsets as the flat all-to-all (round 0: own block).
    const int rounds = algorithm_ == Algorithm::bidir ? gg / 2 + 1 : gg;
    std::vector<int> received(static_cast<std::size_t>(g_.split) * w, -1);  // ring pacing, by sub * w + dst
    for (int i = 0; i < rounds; ++i) {
      std::vector<int> now(received.size(), -1);
      std::vector<std::pair<int, int>> peers;  // (offset, stream)
      if (i == 0)
        peers = {{0, 0}};
      else if (algorithm_ != Algorithm::bidir)
        peers = {{i, 0}};
      else {
        if (i <= gg / 2) peers.push_back({i, 0});
        if (i <= (gg - 1) / 2) peers.push_back({-i, 1});
      }
      for (int k = 0; k < g_.split; ++k)
        for (const auto& [offset, stream] : peers) {
          b_.next_group();
          for (int r = 0; r < w; ++r) {
            const int n = lay_.node_index[r], l = lay_.local_index[r];
            const int dst = lay_.at(n, l + offset);
            std::vector<int> deps;
            if (algorithm_ == Algorithm::ring && i > 0) deps.push_back(received[static_cast<std::size_t>(k) * w + r]);
            now[static_cast<std::size_t>(k) * w + dst] =
                b_.add({g_.box(dst, k), g_.box(r, k), r, dst, ChunkOp::copy, stream, std::move(deps)}, true);
          }
        }
      received = std::move(now);
    }
    b_.next_group();  // the last local round's group ends here (groups start before each round)
    // Over the rails: round p sends rank (n, l)'s blocks for node n + p to (n + p, l); the one
    // for (n + p, l) itself lands in its output, the others in its relay at the sender-node's
    // place of their final destination.
    std::vector<std::map<int, int>> relayed(static_cast<std::size_t>(w));  // by relay: relay block * split + k -> chunk
    for (int p = 1; p < nn; ++p)
      for (int k = 0; k < g_.split; ++k, b_.next_group())
        for (int r = 0; r < w; ++r) {
          const int n = lay_.node_index[r], l = lay_.local_index[r];
          const int m = ring_rank(n, p, nn);
          const int via = lay_.at(m, l);
          for (int d = 0; d < gg; ++d) {
            const int final_local = ring_rank(l, d, gg);
            const int target = lay_.at(m, final_local);
            if (target == via) {
              inter({g_.box(target, k), g_.box(r, k), r, via, ChunkOp::copy, 0, {}}, true);
            } else {
              const int place = lay_.at(n, final_local);
              PlanBuilder::Move move{g_.box(target, k), g_.box(place, k), r, via, ChunkOp::copy, 0, {}};
              move.to = relay;
              relayed[static_cast<std::size_t>(via)][key(place, k)] = inter(std::move(move));
            }
          }
        }
    // Inside each node: each relayed block to its destination, after the NCCL chunk that
    // brought it (sub-chunk by sub-chunk).
    for (int p = 1; p < nn; ++p)
      for (int k = 0; k < g_.split; ++k)
        for (int d = 1; d < gg; ++d, b_.next_group())
          for (int r = 0; r < w; ++r) {
            const int m = lay_.node_index[r], l = lay_.local_index[r];
            const int n = ring_rank(m, -p, nn);  // the node the blocks came from
            const int target_local = ring_rank(l, d, gg);
            const int place = lay_.at(n, target_local);
            const int sender = lay_.at(n, l);
            PlanBuilder::Move move{g_.box(place, k),
                                   g_.box(sender, k),
                                   r,
                                   lay_.at(m, target_local),
                                   ChunkOp::copy,
                                   0,
                                   {relayed[static_cast<std::size_t>(r)].at(key(place, k))}};
            move.from = relay;
            b_.add(std::move(move), true);
          }
  }

  PlanBuilder& b_;
  const PieceGeometry& g_;
  Layout lay_;
  Algorithm algorithm_;
  int inter_stream_;
};

}  // namespace

void add_hierarchical(PlanBuilder& builder, const PieceGeometry& geometry) { Hierarchy(builder, geometry).run(); }

}  // namespace syncopate::plan::detail

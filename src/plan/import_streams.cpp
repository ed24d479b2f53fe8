// assign_streams (import_model.hpp): issuing lanes -> the plan's streams, then dep pruning.
#include <algorithm>
#include <cstdint>
#include <map>
#include <queue>

#include "import_model.hpp"

namespace syncopate::plan::import_detail {
namespace {

// Above this many chunks the implied deps are left in (correct, only longer lists): the
// reduction keeps one bit per pair of chunks.
constexpr std::size_t kMaxReducedChunks = 8192;

class StreamAssigner {
 public:
  StreamAssigner(CommPlan& plan, const std::vector<Issuer>& issuer)
      : plan_(plan), issuer_(issuer), n_(static_cast<int>(plan.chunks.size())) {
    lane_prev_.assign(n_, -1);
    std::map<std::pair<int, int>, int> last;
    for (int c = 0; c < n_; ++c) {
      auto [it, fresh] = last.try_emplace({issuer[c].rank, issuer[c].lane}, c);
      if (!fresh) {
        lane_prev_[c] = it->second;
        it->second = c;
      }
    }
    stream_of_.assign(n_, -1);
    position_.assign(n_, -1);
  }

  void run() {
    plan_.ranks.clear();
    for (int r = 0; r < plan_.world_size; ++r) {
      plan_.ranks.push_back({r, {}});
      place_rank(r);
    }
    for (auto& c : plan_.chunks) c.stream = stream_of_[c.id];
    drop_stream_implied();
    if (static_cast<std::size_t>(n_) <= kMaxReducedChunks) drop_transitively_implied();
  }

 private:
  bool same_rank(int a, int b) const { return issuer_[a].rank == issuer_[b].rank; }

  // Chunks of rank r in an order that puts a chunk after its lane predecessor and after the
  // deps it has on this rank (smallest id first among the ready ones); a cycle among them
  // (which the verifier reports) leaves the rest in id order.
  void place_rank(int r) {
    std::vector<int> mine;
    for (int c = 0; c < n_; ++c)
      if (issuer_[c].rank == r) mine.push_back(c);
    std::map<int, std::vector<int>> users;
    std::map<int, int> waiting;
    for (int c : mine) {
      std::vector<int> preds = plan_.chunks[c].deps;
      if (lane_prev_[c] >= 0) preds.push_back(lane_prev_[c]);
      std::sort(preds.begin(), preds.end());
      preds.erase(std::unique(preds.begin(), preds.end()), preds.end());
      for (int p : preds)
        if (p != c && p >= 0 && p < n_ && same_rank(p, c)) {
          users[p].push_back(c);
          ++waiting[c];
        }
    }
    std::priority_queue<int, std::vector<int>, std::greater<>> ready;
    for (int c : mine)
      if (waiting[c] == 0) ready.push(c);
    while (!ready.empty()) {
      const int c = ready.top();
      ready.pop();
      place(c);
      for (int u : users[c])
        if (--waiting[u] == 0) ready.push(u);
    }
    for (int c : mine)
      if (stream_of_[c] < 0) place(c);
  }

  bool ends_stream(int c) const {
    if (c < 0 || stream_of_[c] < 0) return false;
    const auto& s = plan_.ranks[issuer_[c].rank].streams[stream_of_[c]];
    return s.back() == c;
  }

  void place(int c) {
    auto& streams = plan_.ranks[issuer_[c].rank].streams;
    const int prev = lane_prev_[c];
    int target = -1;
    if (ends_stream(prev)) {
      target = stream_of_[prev];
    } else {
      for (int d : plan_.chunks[c].deps)
        if (d >= 0 && d < n_ && d != c && same_rank(d, c) && ends_stream(d) && issuer_[c].group >= 0 &&
            issuer_[d].group == issuer_[c].group) {
          target = stream_of_[d];
          break;
        }
    }
    if (target < 0) {
      target = static_cast<int>(streams.size());
      streams.emplace_back();
    }
    // The lane's order holds across streams too: a chunk that could not follow its lane
    // predecessor in one stream waits for it explicitly.
    auto& deps = plan_.chunks[c].deps;
    if (prev >= 0 && stream_of_[prev] != target && std::find(deps.begin(), deps.end(), prev) == deps.end())
      deps.push_back(prev);
    stream_of_[c] = target;
    position_[c] = static_cast<int>(streams[target].size());
    streams[target].push_back(c);
  }

  void drop_stream_implied() {
    for (auto& c : plan_.chunks) {
      std::erase_if(c.deps, [&](int d) {
        return d >= 0 && d < n_ && d != c.id && same_rank(d, c.id) && stream_of_[d] == stream_of_[c.id] &&
               position_[d] < position_[c.id];
      });
      std::sort(c.deps.begin(), c.deps.end());
      c.deps.erase(std::unique(c.deps.begin(), c.deps.end()), c.deps.end());
    }
  }

  int stream_pred(int c) const {
    return position_[c] > 0 ? plan_.ranks[issuer_[c].rank].streams[stream_of_[c]][position_[c] - 1] : -1;
  }

  // Drops a dep that another dep (or the stream predecessor) already waits for, so that a
  // chain of sends does not leave every chunk with every earlier landing as a dep.
  void drop_transitively_implied() {
    std::vector<std::vector<int>> preds(n_);
    for (const auto& c : plan_.chunks) {
      for (int d : c.deps)
        if (d < 0 || d >= n_ || d == c.id) return;  // the verifier reports these as they are
      preds[c.id] = c.deps;
      if (stream_pred(c.id) >= 0) preds[c.id].push_back(stream_pred(c.id));
    }
    std::vector<int> waiting(n_, 0), order;
    std::vector<std::vector<int>> users(n_);
    for (int c = 0; c < n_; ++c)
      for (int p : preds[c]) {
        users[p].push_back(c);
        ++waiting[c];
      }
    for (int c = 0; c < n_; ++c)
      if (waiting[c] == 0) order.push_back(c);
    for (std::size_t i = 0; i < order.size(); ++i)
      for (int u : users[order[i]])
        if (--waiting[u] == 0) order.push_back(u);
    if (static_cast<int>(order.size()) != n_) return;  // a cycle: the verifier names it
    const std::size_t words = (static_cast<std::size_t>(n_) + 63) / 64;
    std::vector<std::uint64_t> ancestors(static_cast<std::size_t>(n_) * words, 0);
    auto row = [&](int c) { return ancestors.data() + static_cast<std::size_t>(c) * words; };
    auto has = [&](int c, int a) { return (row(c)[a / 64] >> (a % 64)) & 1; };
    for (int c : order)
      for (int p : preds[c]) {
        for (std::size_t w = 0; w < words; ++w) row(c)[w] |= row(p)[w];
        row(c)[p / 64] |= std::uint64_t{1} << (p % 64);
      }
    for (auto& c : plan_.chunks) {
      const std::vector<int> all = preds[c.id];
      std::erase_if(c.deps, [&](int d) {
        return std::any_of(all.begin(), all.end(), [&](int q) { return q != d && has(q, d); });
      });
    }
  }

  CommPlan& plan_;
  const std::vector<Issuer>& issuer_;
  int n_;
  std::vector<int> lane_prev_;
  std::vector<int> stream_of_;
  std::vector<int> position_;
};

}  // namespace

void assign_streams(CommPlan& plan, const std::vector<Issuer>& issuer_of_chunk) {
  StreamAssigner(plan, issuer_of_chunk).run();
}

}  // namespace syncopate::plan::import_detail

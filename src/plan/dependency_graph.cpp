// Building the happens-before graph and the graph algorithms the verifier and simulator need.
// Everything is iterative (no recursion), so a 100k-chunk chain cannot overflow the stack.
#include "syncopate/plan/dependency_graph.hpp"

#include <algorithm>
#include <functional>
#include <queue>

namespace syncopate::plan {
namespace {

// Compressed adjacency: for each node, the neighbours in [offsets[v], offsets[v+1]).
void build_csr(int n, const std::vector<DependencyEdge>& edges, bool forward, std::vector<int>& offsets,
               std::vector<int>& targets) {
  offsets.assign(static_cast<std::size_t>(n) + 1, 0);
  for (const auto& e : edges) ++offsets[static_cast<std::size_t>(forward ? e.from : e.to) + 1];
  for (int v = 0; v < n; ++v) offsets[v + 1] += offsets[v];
  targets.assign(edges.size(), 0);
  std::vector<int> fill(offsets.begin(), offsets.end() - 1);
  // edges are sorted by (from, to), so successor lists come out ascending; predecessor lists
  // are filled in `from` order, which is ascending too.
  for (const auto& e : edges) targets[fill[forward ? e.from : e.to]++] = forward ? e.to : e.from;
}

}  // namespace

std::vector<IssueStep> issue_steps(const CommPlan& plan, const std::vector<int>& stream) {
  const int n = static_cast<int>(plan.chunks.size());
  auto group_of = [&](int id) { return id >= 0 && id < n ? plan.chunks[id].group : kNoGroup; };
  std::vector<IssueStep> steps;
  for (std::size_t i = 0; i < stream.size(); ++i) {
    const int group = group_of(stream[i]);
    if (!steps.empty() && group != kNoGroup && group_of(stream[steps.back().begin]) == group) {
      steps.back().end = i + 1;
    } else {
      steps.push_back({i, i + 1});
    }
  }
  return steps;
}

DependencyGraph::DependencyGraph(const CommPlan& plan) {
  const int n = static_cast<int>(plan.chunks.size());
  auto valid = [n](int id) { return id >= 0 && id < n; };
  std::vector<DependencyEdge> raw;
  std::vector<DependencyEdge> group_deps;  // pushed after deps: the last reason to be kept
  for (std::size_t r = 0; r < plan.ranks.size(); ++r) {
    const auto& streams = plan.ranks[r].streams;
    for (std::size_t s = 0; s < streams.size(); ++s) {
      const auto& list = streams[s];
      const int rank = static_cast<int>(r), stream = static_cast<int>(s);
      const IssueStep* prev = nullptr;
      const auto steps = issue_steps(plan, list);
      for (const auto& step : steps) {
        bool any = false;
        for (std::size_t i = step.begin; i < step.end; ++i) any = any || valid(list[i]);
        if (!any) continue;
        if (prev != nullptr)
          for (std::size_t a = prev->begin; a < prev->end; ++a)
            for (std::size_t b = step.begin; b < step.end; ++b)
              if (valid(list[a]) && valid(list[b]))
                raw.push_back({list[a], list[b], EdgeKind::stream_order, rank, stream, -1});
        prev = &step;
        if (step.end - step.begin < 2) continue;
        for (std::size_t m = step.begin; m < step.end; ++m) {
          const int member = list[m];
          if (!valid(member) || plan.chunks[member].src != rank) continue;
          for (int dep : plan.chunks[member].deps) {
            if (!valid(dep)) continue;
            for (std::size_t o = step.begin; o < step.end; ++o)
              if (valid(list[o]) && list[o] != member)
                group_deps.push_back({dep, list[o], EdgeKind::group_dep, rank, stream, member});
          }
        }
      }
    }
  }
  for (const auto& chunk : plan.chunks) {
    if (!valid(chunk.id)) continue;
    for (int dep : chunk.deps)
      if (valid(dep)) raw.push_back({dep, chunk.id, EdgeKind::dep, -1, -1, -1});
  }
  raw.insert(raw.end(), group_deps.begin(), group_deps.end());
  // Stable sort keeps the first reason (stream order, then deps, then group deps) for duplicates.
  std::stable_sort(raw.begin(), raw.end(), [](const DependencyEdge& a, const DependencyEdge& b) {
    return a.from != b.from ? a.from < b.from : a.to < b.to;
  });
  for (const auto& e : raw)
    if (edges_.empty() || edges_.back().from != e.from || edges_.back().to != e.to) edges_.push_back(e);
  build_csr(n, edges_, true, succ_offsets_, succ_);
  build_csr(n, edges_, false, pred_offsets_, pred_);
}

std::span<const int> DependencyGraph::successors(int chunk) const {
  if (chunk < 0 || chunk >= size()) return {};
  return {succ_.data() + succ_offsets_[chunk],
          static_cast<std::size_t>(succ_offsets_[chunk + 1] - succ_offsets_[chunk])};
}

std::span<const int> DependencyGraph::predecessors(int chunk) const {
  if (chunk < 0 || chunk >= size()) return {};
  return {pred_.data() + pred_offsets_[chunk],
          static_cast<std::size_t>(pred_offsets_[chunk + 1] - pred_offsets_[chunk])};
}

const DependencyEdge* DependencyGraph::find_edge(int from, int to) const {
  auto it = std::lower_bound(edges_.begin(), edges_.end(), std::pair{from, to},
                             [](const DependencyEdge& e, const std::pair<int, int>& key) {
                               return e.from != key.first ? e.from < key.first : e.to < key.second;
                             });
  if (it == edges_.end() || it->from != from || it->to != to) return nullptr;
  return &*it;
}

std::optional<std::vector<int>> DependencyGraph::topological_order() const {
  const int n = size();
  std::vector<int> indegree(static_cast<std::size_t>(n), 0);
  for (const auto& e : edges_) ++indegree[e.to];
  std::priority_queue<int, std::vector<int>, std::greater<>> ready;
  for (int v = 0; v < n; ++v)
    if (indegree[v] == 0) ready.push(v);
  std::vector<int> order;
  order.reserve(static_cast<std::size_t>(n));
  while (!ready.empty()) {
    const int v = ready.top();
    ready.pop();
    order.push_back(v);
    for (int w : successors(v))
      if (--indegree[w] == 0) ready.push(w);
  }
  if (static_cast<int>(order.size()) != n) return std::nullopt;
  return order;
}

std::vector<std::vector<int>> DependencyGraph::strongly_connected_components() const {
  // Tarjan's algorithm with an explicit stack. Components are emitted sinks first, so the list
  // is reversed at the end to get topological order.
  const int n = size();
  std::vector<int> index(static_cast<std::size_t>(n), -1), low(static_cast<std::size_t>(n), 0);
  std::vector<char> on_stack(static_cast<std::size_t>(n), 0);
  std::vector<int> tarjan_stack;
  std::vector<std::pair<int, int>> call_stack;  // (node, next successor position)
  std::vector<std::vector<int>> components;
  int next_index = 0;
  for (int root = 0; root < n; ++root) {
    if (index[root] >= 0) continue;
    call_stack.push_back({root, succ_offsets_[root]});
    index[root] = low[root] = next_index++;
    tarjan_stack.push_back(root);
    on_stack[root] = 1;
    while (!call_stack.empty()) {
      auto& [v, pos] = call_stack.back();
      if (pos < succ_offsets_[v + 1]) {
        const int w = succ_[pos++];
        if (index[w] < 0) {
          index[w] = low[w] = next_index++;
          tarjan_stack.push_back(w);
          on_stack[w] = 1;
          call_stack.push_back({w, succ_offsets_[w]});
        } else if (on_stack[w]) {
          low[v] = std::min(low[v], index[w]);
        }
        continue;
      }
      const int done = v;
      call_stack.pop_back();
      if (!call_stack.empty()) {
        const int parent = call_stack.back().first;
        low[parent] = std::min(low[parent], low[done]);
      }
      if (low[done] == index[done]) {
        std::vector<int> component;
        int w = -1;
        do {
          w = tarjan_stack.back();
          tarjan_stack.pop_back();
          on_stack[w] = 0;
          component.push_back(w);
        } while (w != done);
        std::sort(component.begin(), component.end());
        components.push_back(std::move(component));
      }
    }
  }
  std::reverse(components.begin(), components.end());
  return components;
}

std::vector<int> DependencyGraph::shortest_cycle_through(int chunk) const {
  if (chunk < 0 || chunk >= size()) return {};
  // Breadth-first search from `chunk` until an edge leads back to it.
  std::vector<int> parent(static_cast<std::size_t>(size()), -2);
  std::queue<int> frontier;
  frontier.push(chunk);
  parent[chunk] = -1;
  while (!frontier.empty()) {
    const int v = frontier.front();
    frontier.pop();
    for (int w : successors(v)) {
      if (w == chunk) {
        std::vector<int> cycle;
        for (int x = v; x != -1; x = parent[x]) cycle.push_back(x);
        std::reverse(cycle.begin(), cycle.end());
        return cycle;
      }
      if (parent[w] == -2) {
        parent[w] = v;
        frontier.push(w);
      }
    }
  }
  return {};
}

std::vector<int> DependencyGraph::find_cycle() const {
  int best = -1;
  for (const auto& component : strongly_connected_components()) {
    const int first = component.front();
    const bool cyclic = component.size() > 1 || find_edge(first, first) != nullptr;
    if (cyclic && (best < 0 || first < best)) best = first;
  }
  if (best < 0) return {};
  // `best` is the smallest id of its component, hence the smallest on any cycle through it.
  return shortest_cycle_through(best);
}

}  // namespace syncopate::plan

// "Is chunk a ordered with chunk b?" for many pairs at once, without an n x n matrix.
//
// Components are in topological order, so a path can only go from a lower component index to a
// higher one. Queries are grouped by their lower component; 64 of those at a time get one bit
// each, and the bits are pushed forward along the edges in topological order. Cost:
// (distinct sources / 64) x (nodes + edges) word operations, memory: one word per component.
#include <algorithm>
#include <cstdint>

#include "verify_internal.hpp"

namespace syncopate::plan::verify_detail {

std::vector<char> ordered_pairs(const GraphFacts& facts, const std::vector<std::pair<int, int>>& pairs) {
  std::vector<char> answer(pairs.size(), 0);
  struct Query {
    int from;  // component
    int to;    // component, > from
    std::size_t index;
  };
  std::vector<Query> queries;
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const int a = facts.component_of[static_cast<std::size_t>(pairs[i].first)];
    const int b = facts.component_of[static_cast<std::size_t>(pairs[i].second)];
    if (a == b) {
      answer[i] = 1;  // same component: mutually reachable (a cycle, or the same chunk)
    } else if (facts.graph.find_edge(pairs[i].first, pairs[i].second) != nullptr ||
               facts.graph.find_edge(pairs[i].second, pairs[i].first) != nullptr) {
      answer[i] = 1;  // a direct edge (most forwards name their source in deps): no search
    } else {
      queries.push_back({std::min(a, b), std::max(a, b), i});
    }
  }
  std::sort(queries.begin(), queries.end(), [](const Query& x, const Query& y) { return x.from < y.from; });

  std::vector<std::uint64_t> mask(facts.components.size(), 0);
  std::size_t q = 0;
  while (q < queries.size()) {
    // Take up to 64 distinct source components and every query that starts at one of them.
    std::vector<int> sources;
    std::size_t end = q;
    int last = 0;
    while (end < queries.size()) {
      if (sources.empty() || queries[end].from != sources.back()) {
        if (sources.size() == 64) break;
        sources.push_back(queries[end].from);
      }
      last = std::max(last, queries[end].to);
      ++end;
    }
    const int first = sources.front();
    std::fill(mask.begin() + first, mask.begin() + last + 1, 0);
    for (std::size_t bit = 0; bit < sources.size(); ++bit)
      mask[static_cast<std::size_t>(sources[bit])] |= std::uint64_t{1} << bit;
    for (int c = first + 1; c <= last; ++c) {
      std::uint64_t m = mask[static_cast<std::size_t>(c)];
      for (int v : facts.components[static_cast<std::size_t>(c)]) {
        for (int u : facts.graph.predecessors(v)) {
          const int cu = facts.component_of[static_cast<std::size_t>(u)];
          if (cu >= first && cu != c) m |= mask[static_cast<std::size_t>(cu)];
        }
      }
      mask[static_cast<std::size_t>(c)] = m;
    }
    for (std::size_t i = q; i < end; ++i) {
      const auto bit =
          static_cast<std::size_t>(std::lower_bound(sources.begin(), sources.end(), queries[i].from) - sources.begin());
      answer[queries[i].index] = (mask[static_cast<std::size_t>(queries[i].to)] >> bit) & 1 ? 1 : 0;
    }
    q = end;
  }
  return answer;
}

}  // namespace syncopate::plan::verify_detail

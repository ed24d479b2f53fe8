// Independent oracles for the verifier tests: element-by-element replays and all-pairs race
// checks that share no code with src/plan/verify_*.cpp. Only for small plans of one 2-d tensor
// "x" (and "y" for all-to-all), gathered along dim 0.
#pragma once

#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "syncopate/plan/comm_plan.hpp"
#include "syncopate/plan/dependency_graph.hpp"

namespace syncopate::plan::testing_plans {

// An element-by-element replay that shares nothing with the verifier's cell grid and interned
// values: each element records where its data started and which ranks were added into it.
// Returns the ranks where the collective's promise is broken (as the coverage group would say).
struct Element {
  int tensor = -1;  // -1: undefined, -2: a sum of data from different places
  std::int64_t origin_row = 0, origin_col = 0;
  std::map<int, int> contributions;
  bool operator==(const Element&) const = default;
};

inline std::set<int> brute_force_coverage(const CommPlan& plan, const std::vector<int>& order) {
  const auto& coll = plan.collective;
  const int w = plan.world_size;
  const auto& shape = plan.tensors.at(coll.tensor).shape;
  const std::int64_t rows = shape[0], cols = shape[1];
  auto tensor_id = [&](const std::string& name) { return name == coll.tensor ? 0 : 1; };
  // memory[rank][tensor][row * cols + col], deliveries alike
  std::vector<std::vector<std::vector<Element>>> memory(
      w, std::vector<std::vector<Element>>(2, std::vector<Element>(rows * cols)));
  std::vector<std::vector<std::vector<int>>> copies(w,
                                                    std::vector<std::vector<int>>(2, std::vector<int>(rows * cols, 0)));
  auto shard = [&](std::int64_t row) {
    for (int k = w - 1; k >= 0; --k)
      if (even_split(rows, w, k).begin <= row) return k;
    return 0;
  };
  for (int r = 0; r < w; ++r)
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < cols; ++j)
        if (coll.kind != Collective::all_gather || shard(i) == r)
          memory[r][0][i * cols + j] = Element{0, i, j, {{r, 1}}};
  std::set<int> broken;
  for (int id : order) {
    const Chunk& c = plan.chunks[id];
    const int from = tensor_id(c.tensor), to = tensor_id(c.dst_tensor);
    std::vector<Element> sent;
    for (std::int64_t i = 0; i < c.box.extent[0]; ++i)
      for (std::int64_t j = 0; j < c.box.extent[1]; ++j)
        sent.push_back(memory[c.src][from][(c.box.offset[0] + i) * cols + c.box.offset[1] + j]);
    std::size_t n = 0;
    for (std::int64_t i = 0; i < c.box.extent[0]; ++i)
      for (std::int64_t j = 0; j < c.box.extent[1]; ++j) {
        const std::int64_t row = c.dst_box.offset[0] + i, col = c.dst_box.offset[1] + j;
        Element& e = memory[c.dst][to][row * cols + col];
        const Element& in = sent[n++];
        if (c.op == ChunkOp::copy) {
          e = in;
          ++copies[c.dst][to][row * cols + col];
        } else if (e.tensor == -1 || in.tensor == -1) {
          e = Element{};
        } else if (e.tensor != in.tensor || e.origin_row != in.origin_row || e.origin_col != in.origin_col) {
          e = Element{-2, 0, 0, {}};
        } else {
          for (const auto& [rank, count] : in.contributions) e.contributions[rank] += count;
        }
        if (to == 0 && coll.kind == Collective::all_gather && shard(row) == c.dst) broken.insert(c.dst);
        if (to == 0 && coll.kind == Collective::all_to_all) broken.insert(c.dst);
      }
  }
  std::map<int, int> everyone;
  for (int r = 0; r < w; ++r) everyone[r] = 1;
  for (int r = 0; r < w; ++r)
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < cols; ++j) {
        const int k = shard(i);
        int t = 0;
        Element want;
        switch (coll.kind) {
          case Collective::all_gather:
            if (k == r) continue;
            want = Element{0, i, j, {{k, 1}}};
            break;
          case Collective::reduce_scatter:
            if (k != r) continue;
            want = Element{0, i, j, everyone};
            break;
          case Collective::all_reduce:
            want = Element{0, i, j, everyone};
            break;
          default:  // all-to-all: block k of y on r came from block r of x on k
            t = 1;
            want = Element{0, i - even_split(rows, w, k).begin + even_split(rows, w, r).begin, j, {{k, 1}}};
        }
        if (!(memory[r][t][i * cols + j] == want) || copies[r][t][i * cols + j] > 1) broken.insert(r);
      }
  return broken;
}

// Every pair of chunks, element boxes compared directly, order by depth-first search: the
// (rule, rank, chunk) triples the ordering group must report.
inline std::set<std::tuple<std::string, int, int>> brute_force_races(const CommPlan& plan) {
  const DependencyGraph g(plan);
  const int n = g.size();
  std::vector<std::vector<char>> reach(n, std::vector<char>(n, 0));
  for (int a = 0; a < n; ++a) {
    std::vector<int> stack{a};
    while (!stack.empty()) {
      const int v = stack.back();
      stack.pop_back();
      for (int next : g.successors(v))
        if (!reach[a][next]) reach[a][next] = 1, stack.push_back(next);
    }
  }
  std::set<std::tuple<std::string, int, int>> races;
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) {
      const Chunk &x = plan.chunks[a], &y = plan.chunks[b];
      if (a == b || reach[a][b] || reach[b][a]) continue;
      if (x.src == y.dst && x.tensor == y.dst_tensor && x.box.overlaps(y.dst_box))
        races.insert({"forward-race", x.src, a});
      const bool both_add = x.op == ChunkOp::reduce_add && y.op == ChunkOp::reduce_add;
      if (a < b && !both_add && x.dst == y.dst && x.dst_tensor == y.dst_tensor && x.dst_box.overlaps(y.dst_box))
        races.insert({"write-race", x.dst, b});
    }
  return races;
}

}  // namespace syncopate::plan::testing_plans

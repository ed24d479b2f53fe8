// The element-level replay (element_replay.hpp).
#include "element_replay.hpp"

#include <algorithm>
#include <random>
#include <string_view>

#include <fmt/core.h>
#include <fmt/format.h>

namespace syncopate::plan::element_replay {
namespace {

std::int64_t stride_of(const std::vector<std::int64_t>& shape, int dim) {
  std::int64_t stride = 1;
  for (std::size_t d = static_cast<std::size_t>(dim) + 1; d < shape.size(); ++d) stride *= shape[d];
  return stride;
}

std::int64_t coord_of(const std::vector<std::int64_t>& shape, int dim, std::int64_t flat) {
  return (flat / stride_of(shape, dim)) % shape[dim];
}

// Flat row-major indices of `box` in a tensor of `shape`; false if the box does not fit.
bool box_indices(const std::vector<std::int64_t>& shape, const Box& box, std::vector<std::int64_t>& out) {
  out.clear();
  if (box.offset.size() != shape.size() || box.extent.size() != shape.size()) return false;
  for (std::size_t d = 0; d < shape.size(); ++d)
    if (box.offset[d] < 0 || box.extent[d] < 1 || box.offset[d] + box.extent[d] > shape[d]) return false;
  std::vector<std::int64_t> at(box.offset);
  while (true) {
    std::int64_t flat = 0;
    for (std::size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + at[d];
    out.push_back(flat);
    std::size_t d = shape.size();
    while (d > 0) {
      --d;
      if (++at[d] < box.offset[d] + box.extent[d]) break;
      at[d] = box.offset[d];
      if (d == 0) return true;
    }
    if (shape.empty()) return true;
  }
}

// Index of the even_split part of `size` into `parts` that holds coordinate `c`.
int part_of(std::int64_t size, int parts, std::int64_t c) {
  for (int p = 0; p < parts; ++p) {
    const Span s = even_split(size, parts, p);
    if (c >= s.begin && c < s.begin + s.size) return p;
  }
  return -1;
}

RankState initial_state(const CommPlan& plan, int rank) {
  const int w = plan.world_size;
  const auto& spec = plan.collective;
  RankState state;
  for (const auto& [name, tensor] : plan.tensors)
    state[name] = TensorState(static_cast<std::size_t>(tensor.elements()), Element{std::vector<int>(w, 0)});
  auto& input = state[spec.tensor];
  const auto& shape = plan.tensors.at(spec.tensor).shape;
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(input.size()); ++i) {
    Element& e = input[i];
    switch (spec.kind) {
      case Collective::all_gather:  // rank r starts with shard r only
        if (part_of(shape[spec.dim], w, coord_of(shape, spec.dim, i)) == rank) e.contributions[rank] = 1;
        break;
      case Collective::reduce_scatter:
      case Collective::all_reduce:
        e.contributions[rank] = 1;
        break;
      case Collective::all_to_all:
        e.origin_rank = rank;
        e.origin_index = i;
        break;
      case Collective::custom:
        break;
    }
  }
  return state;
}

// Reports pairs of conflicting accesses to one element that no happens-before path orders.
void find_races(const CommPlan& plan, const std::vector<std::vector<int>>& successors, const std::vector<int>& order,
                ReplayResult& result) {
  const std::size_t n = plan.chunks.size(), words = (n + 63) / 64;
  std::vector<std::vector<std::uint64_t>> before(n, std::vector<std::uint64_t>(words, 0));  // transitive
  for (int c : order)
    for (int s : successors[c]) {
      for (std::size_t w = 0; w < words; ++w) before[s][w] |= before[c][w];
      before[s][c / 64] |= std::uint64_t{1} << (c % 64);
    }
  auto ordered = [&](int a, int b) {
    return (before[b][a / 64] >> (a % 64) & 1) || (before[a][b / 64] >> (b % 64) & 1);
  };
  for (int r = 0; r < plan.world_size; ++r)
    for (const auto& [name, elements] : result.ranks[r])
      for (std::size_t i = 0; i < elements.size(); ++i) {
        const auto& acc = elements[i].accesses;
        for (std::size_t a = 0; a < acc.size(); ++a)
          for (std::size_t b = a + 1; b < acc.size(); ++b) {
            const bool conflict = acc[a].second == 'c' || acc[b].second == 'c' || acc[a].second != acc[b].second;
            if (!conflict || acc[a].first == acc[b].first || ordered(acc[a].first, acc[b].first)) continue;
            if (result.problems.size() < 5)
              result.problems.push_back(fmt::format("race on rank {} {}[{}]: chunks {} ({}) and {} ({}) are unordered",
                                                    r, name, i, acc[a].first, acc[a].second, acc[b].first,
                                                    acc[b].second));
          }
      }
}

std::string counts(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += std::to_string(x);
  return s;
}

}  // namespace

// Happens-before successors: the next chunk in each stream, and every chunk that depends on it.
ReplayResult replay(const CommPlan& plan, unsigned seed) {
  ReplayResult result;
  const int n = static_cast<int>(plan.chunks.size());
  std::vector<std::vector<int>> successors(n);
  std::vector<int> waiting(n, 0);
  std::vector<bool> issued(n, false);
  for (const auto& program : plan.ranks)
    for (const auto& stream : program.streams)
      for (std::size_t i = 0; i < stream.size(); ++i) {
        if (stream[i] < 0 || stream[i] >= n) {
          result.problems.push_back(fmt::format("rank {} lists unknown chunk {}", program.rank, stream[i]));
          return result;
        }
        issued[stream[i]] = true;
        if (i > 0) {
          successors[stream[i - 1]].push_back(stream[i]);
          ++waiting[stream[i]];
        }
      }
  for (const auto& c : plan.chunks)
    for (int d : c.deps) {
      if (d < 0 || d >= n || !issued[d]) {
        result.problems.push_back(fmt::format("chunk {} depends on chunk {}, which is never issued", c.id, d));
        continue;  // the chunk keeps a wait that is never met: it will show as never run
      }
      successors[d].push_back(c.id);
      ++waiting[c.id];
    }
  for (int r = 0; r < plan.world_size; ++r) result.ranks.push_back(initial_state(plan, r));

  std::mt19937 rng(seed);
  std::vector<int> ready;
  for (int c = 0; c < n; ++c)
    if (issued[c] && waiting[c] == 0) ready.push_back(c);
  std::vector<int> order;  // the topological order actually replayed
  std::vector<std::int64_t> src_idx, dst_idx;
  while (!ready.empty()) {
    const std::size_t pick = std::uniform_int_distribution<std::size_t>(0, ready.size() - 1)(rng);
    const int id = ready[pick];
    ready.erase(ready.begin() + static_cast<std::ptrdiff_t>(pick));
    order.push_back(id);
    for (int s : successors[id])
      if (--waiting[s] == 0) ready.push_back(s);
    const Chunk& c = plan.chunks[id];
    if (c.src < 0 || c.src >= plan.world_size || c.dst < 0 || c.dst >= plan.world_size ||
        !plan.tensors.count(c.tensor) || !plan.tensors.count(c.dst_tensor) ||
        !box_indices(plan.tensors.at(c.tensor).shape, c.box, src_idx) ||
        !box_indices(plan.tensors.at(c.dst_tensor).shape, c.dst_box, dst_idx) || src_idx.size() != dst_idx.size()) {
      result.problems.push_back(fmt::format("chunk {} does not fit its ranks or tensors", id));
      continue;
    }
    auto& src = result.ranks[c.src][c.tensor];
    auto& dst = result.ranks[c.dst][c.dst_tensor];
    std::vector<Element> moving;  // read everything first: src and dst may be the same memory
    for (auto i : src_idx) {
      moving.push_back(src[i]);
      src[i].accesses.emplace_back(id, 'r');
    }
    for (std::size_t i = 0; i < dst_idx.size(); ++i) {
      Element& e = dst[dst_idx[i]];
      if (c.op == ChunkOp::copy) {
        e.contributions = moving[i].contributions;
        e.origin_rank = moving[i].origin_rank;
        e.origin_index = moving[i].origin_index;
        ++e.copies;
      } else {
        for (std::size_t r = 0; r < e.contributions.size(); ++r) e.contributions[r] += moving[i].contributions[r];
      }
      ++e.writes;
      e.accesses.emplace_back(id, c.op == ChunkOp::copy ? 'c' : 'a');
    }
  }
  const int ran = static_cast<int>(order.size());
  int listed = 0;
  for (int c = 0; c < n; ++c) listed += issued[c] ? 1 : 0;
  if (ran != listed)
    result.problems.push_back(fmt::format("{} of {} issued chunks never run (deadlock)", listed - ran, listed));
  else
    find_races(plan, successors, order, result);
  return result;
}

// Checks the collective's promise on the replayed state; returns what is wrong (first few).
std::vector<std::string> check_promise(const CommPlan& plan, const ReplayResult& replayed) {
  std::vector<std::string> wrong = replayed.problems;
  if (!wrong.empty()) return wrong;
  const auto& spec = plan.collective;
  const int w = plan.world_size;
  const auto& shape = plan.tensors.at(spec.tensor).shape;
  const std::int64_t size = shape[spec.dim];
  const std::vector<int> everyone(w, 1);
  auto report = [&](int rank, std::int64_t i, const Element& e, std::string_view want) {
    if (wrong.size() < 5)
      wrong.push_back(fmt::format("rank {} element {}: want {}, got contributions {} origin {}:{} writes {}", rank, i,
                                  want, counts(e.contributions), e.origin_rank, e.origin_index, e.writes));
  };
  for (int r = 0; r < w; ++r) {
    const RankState& state = replayed.ranks[r];
    const TensorState& x = state.at(spec.tensor);
    for (std::int64_t i = 0; i < static_cast<std::int64_t>(x.size()); ++i) {
      const int part = part_of(size, w, coord_of(shape, spec.dim, i));
      const Element& e = x[i];
      if (spec.kind == Collective::all_gather) {
        std::vector<int> want(w, 0);
        want[part] = 1;
        if (e.contributions != want || e.writes != (part == r ? 0 : 1))
          report(r, i, e, fmt::format("shard {} exactly once ({} writes)", part, part == r ? 0 : 1));
      } else if (spec.kind == Collective::all_reduce || (spec.kind == Collective::reduce_scatter && part == r)) {
        if (e.contributions != everyone) report(r, i, e, "every rank's contribution exactly once");
        // All-reduce: the gathered result reaches each non-owner exactly once.
        if (spec.kind == Collective::all_reduce && e.copies != (part == r ? 0 : 1))
          report(r, i, e, fmt::format("the reduced shard {} copied in {} times", part, part == r ? 0 : 1));
      }
    }
    if (spec.kind != Collective::all_to_all) continue;
    const TensorState& y = state.at(spec.output);
    const std::int64_t block = size / w, stride = stride_of(shape, spec.dim);
    for (std::int64_t i = 0; i < static_cast<std::int64_t>(y.size()); ++i) {
      const int from = static_cast<int>(coord_of(shape, spec.dim, i) / block);
      // Block `from` of my output is block r of rank `from`'s input: shift along dim.
      const std::int64_t want_index = i + (static_cast<std::int64_t>(r) - from) * block * stride;
      const Element& e = y[i];
      if (e.origin_rank != from || e.origin_index != want_index || e.writes != 1)
        report(r, i, e, fmt::format("input {}:{} written once", from, want_index));
    }
  }
  return wrong;
}

std::vector<std::string> replay_and_check(const CommPlan& plan, unsigned seed) {
  return check_promise(plan, replay(plan, seed));
}

}  // namespace syncopate::plan::element_replay

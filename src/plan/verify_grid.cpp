// Building the coverage replay's cell grid (see verify_grid.hpp).
#include "verify_grid.hpp"

#include <algorithm>
#include <set>

#include <fmt/format.h>

namespace syncopate::plan::verify_detail {
namespace {

// Cuts of every (tensor, dim) while the fixpoint runs; converted to sorted vectors at the end.
using CutSets = std::vector<std::vector<std::set<std::int64_t>>>;

// Limit on the number of cut points over all tensors and dims: carried boundaries can multiply
// (a chunk moving a tensor onto itself shifted by one would cut every element), and beyond this
// the replay would be slower than useful.
constexpr std::size_t kMaxCuts = std::size_t{1} << 18;

void add_box(std::vector<std::set<std::int64_t>>& cuts, const Box& box) {
  for (std::size_t d = 0; d < cuts.size(); ++d) {
    cuts[d].insert(box.offset[d]);
    cuts[d].insert(box.offset[d] + box.extent[d]);
  }
}

void add_even_split(std::set<std::int64_t>& cuts, std::int64_t size, int parts) {
  for (int k = 0; k < parts; ++k) cuts.insert(even_split(size, parts, k).begin);
}

// One side of a chunk that moves data to another place (tensor or offset) in one dim: a cut
// strictly inside [begin, begin + extent) of this side's tensor appears, shifted, on the other.
struct MoveSide {
  std::int64_t begin;
  std::int64_t extent;
  std::int64_t shift;  // other side's coordinate - this side's
  int other_tensor;
};

}  // namespace

std::int64_t TensorGrid::cut_index(std::size_t d, std::int64_t coordinate) const {
  const auto& c = cuts[d];
  return std::lower_bound(c.begin(), c.end(), coordinate) - c.begin();
}

Box TensorGrid::cell_box(std::int64_t cell) const {
  Box box;
  for (std::size_t d = 0; d < cuts.size(); ++d) {
    const std::int64_t i = cell / strides[d];
    cell %= strides[d];
    box.offset.push_back(cuts[d][i]);
    box.extent.push_back(cuts[d][i + 1] - cuts[d][i]);
  }
  return box;
}

std::vector<std::int64_t> TensorGrid::cells_of(const Box& box) const {
  const std::size_t dims = cuts.size();
  std::vector<std::int64_t> lo(dims), hi(dims), at(dims);
  for (std::size_t d = 0; d < dims; ++d) {
    lo[d] = cut_index(d, box.offset[d]);
    hi[d] = cut_index(d, box.offset[d] + box.extent[d]);
    at[d] = lo[d];
  }
  std::vector<std::int64_t> out;
  while (true) {
    std::int64_t cell = 0;
    for (std::size_t d = 0; d < dims; ++d) cell += at[d] * strides[d];
    out.push_back(cell);
    // Odometer: the last dim moves fastest.
    std::size_t d = dims;
    while (d > 0) {
      --d;
      if (++at[d] < hi[d]) break;
      at[d] = lo[d];
      if (d == 0) return out;
    }
    if (dims == 0) return out;
  }
}

std::optional<PlanGrid> build_plan_grid(const CommPlan& plan, std::int64_t max_cells, std::string& why) {
  PlanGrid grid;
  CutSets cuts;
  for (const auto& [name, spec] : plan.tensors) {
    grid.tensor_index.emplace(name, static_cast<int>(grid.names.size()));
    grid.names.push_back(name);
    std::vector<std::set<std::int64_t>> per_dim(spec.shape.size());
    for (std::size_t d = 0; d < spec.shape.size(); ++d) per_dim[d] = {0, spec.shape[d]};
    cuts.push_back(std::move(per_dim));
  }
  auto index_of = [&](const std::string& name) { return grid.tensor_index.find(name)->second; };

  // Shard (or block) boundaries of the collective, so a cell never straddles two shards.
  const auto& coll = plan.collective;
  // A staging tensor is cut into its slots instead (dim 0, one per rank).
  if (coll.kind != Collective::custom) {
    for (const std::string* name : {&coll.tensor, &coll.output}) {
      if (name->empty() || !grid.tensor_index.contains(*name)) continue;
      const auto& spec = plan.tensors.at(*name);
      const bool staging = name == &coll.output && coll.kind != Collective::all_to_all;
      const int dim = staging ? 0 : coll.dim;
      add_even_split(cuts[index_of(*name)][dim], spec.shape[dim], plan.world_size);
    }
  }
  for (const auto& chunk : plan.chunks) {
    add_box(cuts[index_of(chunk.tensor)], chunk.box);
    add_box(cuts[index_of(chunk.dst_tensor)], chunk.dst_box);
  }

  // Carry cuts across moves until none is new. Worklist: every cut is pushed through the moves
  // touching its (tensor, dim) once, so the cost is cuts x moves, not rounds x cuts x moves.
  std::vector<std::vector<std::vector<MoveSide>>> sides(cuts.size());
  for (std::size_t t = 0; t < cuts.size(); ++t) sides[t].resize(cuts[t].size());
  for (const auto& chunk : plan.chunks) {
    const int from = index_of(chunk.tensor);
    const int to = index_of(chunk.dst_tensor);
    for (std::size_t d = 0; d < chunk.box.offset.size(); ++d) {
      const std::int64_t delta = chunk.dst_box.offset[d] - chunk.box.offset[d];
      if (from == to && delta == 0) continue;
      sides[from][d].push_back({chunk.box.offset[d], chunk.box.extent[d], delta, to});
      sides[to][d].push_back({chunk.dst_box.offset[d], chunk.dst_box.extent[d], -delta, from});
    }
  }
  struct Cut {
    int tensor;
    std::size_t dim;
    std::int64_t at;
  };
  std::vector<Cut> work;
  for (std::size_t t = 0; t < cuts.size(); ++t) {
    for (std::size_t d = 0; d < cuts[t].size(); ++d) {
      // Sorted by begin, so a cut only scans the sides that start before it.
      std::sort(sides[t][d].begin(), sides[t][d].end(),
                [](const MoveSide& x, const MoveSide& y) { return x.begin < y.begin; });
      if (sides[t][d].empty()) continue;
      for (auto c : cuts[t][d]) work.push_back({static_cast<int>(t), d, c});
    }
  }
  std::size_t total = 0;
  for (const auto& t : cuts)
    for (const auto& d : t) total += d.size();
  while (!work.empty()) {
    const Cut cut = work.back();
    work.pop_back();
    for (const MoveSide& side : sides[static_cast<std::size_t>(cut.tensor)][cut.dim]) {
      if (side.begin >= cut.at) break;
      if (cut.at >= side.begin + side.extent) continue;
      const std::int64_t moved = cut.at + side.shift;
      auto& target = cuts[static_cast<std::size_t>(side.other_tensor)][cut.dim];
      if (!target.insert(moved).second) continue;
      if (++total > kMaxCuts) {
        why = fmt::format(
            "the plan's boxes, carried across its moves, cut the tensors at more "
            "than {} places",
            kMaxCuts);
        return std::nullopt;
      }
      if (!sides[static_cast<std::size_t>(side.other_tensor)][cut.dim].empty())
        work.push_back({side.other_tensor, cut.dim, moved});
    }
  }

  for (std::size_t t = 0; t < cuts.size(); ++t) {
    TensorGrid g;
    std::int64_t cells = 1;
    for (const auto& per_dim : cuts[t]) {
      g.cuts.emplace_back(per_dim.begin(), per_dim.end());
      cells *= static_cast<std::int64_t>(per_dim.size()) - 1;
      if (cells > max_cells) break;  // checked below; stops the product from overflowing
    }
    g.strides.assign(g.cuts.size(), 1);
    for (std::size_t d = g.cuts.size(); d-- > 1;)
      g.strides[d - 1] = g.strides[d] * (static_cast<std::int64_t>(g.cuts[d].size()) - 1);
    g.cells = cells;
    grid.cells_per_rank += cells;
    if (grid.cells_per_rank > max_cells / std::max(plan.world_size, 1)) {
      why = fmt::format("the plan's boxes cut its tensors into more than {} cells over {} ranks", max_cells,
                        plan.world_size);
      return std::nullopt;
    }
    grid.tensors.push_back(std::move(g));
  }
  return grid;
}

}  // namespace syncopate::plan::verify_detail

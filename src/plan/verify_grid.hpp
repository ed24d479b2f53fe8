// The cell grid of the coverage replay: each tensor's coordinates cut at every box boundary that
// touches it, so that every box is a union of whole cells and a cell is never partly written.
// Internal to the verifier.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "syncopate/plan/comm_plan.hpp"

namespace syncopate::plan::verify_detail {

struct TensorGrid {
  std::vector<std::vector<std::int64_t>> cuts;  // per dim: ascending; 0 first, size last
  std::vector<std::int64_t> strides;            // cell index = sum(interval[d] * strides[d])
  std::int64_t cells = 0;

  // Interval index i with cuts[d][i] == coordinate (the coordinate must be a cut).
  std::int64_t cut_index(std::size_t d, std::int64_t coordinate) const;
  // The element region of one cell.
  Box cell_box(std::int64_t cell) const;
  // Cells of `box` (whose faces lie on cuts) in row-major order of their position in the box.
  // Two boxes with matching cuts inside them list corresponding cells in the same order.
  std::vector<std::int64_t> cells_of(const Box& box) const;
};

struct PlanGrid {
  std::map<std::string, int, std::less<>> tensor_index;  // name -> index into tensors
  std::vector<std::string> names;
  std::vector<TensorGrid> tensors;
  std::int64_t cells_per_rank = 0;  // over all tensors
};

// Builds the grid for a well-formed plan. Boundaries are carried across every chunk that moves
// data to another place (a different tensor or offset), until nothing changes, so that a
// chunk's source cells and destination cells correspond one to one. Returns nullopt and sets
// `why` when the plan's boxes cut the tensors into more than `max_cells` cells over all ranks.
std::optional<PlanGrid> build_plan_grid(const CommPlan& plan, std::int64_t max_cells, std::string& why);

}  // namespace syncopate::plan::verify_detail

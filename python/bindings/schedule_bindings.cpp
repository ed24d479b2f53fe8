// syncopate._core: tile orders (the sequence in which a rank's kernel visits its tiles).
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "enum_arg.hpp"
#include "numpy_array.hpp"
#include "syncopate/schedule/tile_order.hpp"
#include "syncopate/schedule/tile_order_json.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace syncopate::python {

void bind_schedule(nb::module_& m) {
  using schedule::OrderKind;
  using schedule::TileOrder;

  nb::class_<TileOrder>(m, "TileOrder", "A permutation of a rank's tile ids, in execution order.")
      .def_ro("rank", &TileOrder::rank)
      .def_prop_ro("kind", [](const TileOrder& o) { return enum_str(o.kind); })
      .def_ro("tiles", &TileOrder::tiles)
      .def(
          "as_array", [](const TileOrder& o) { return to_numpy(o.tiles); },
          "The tile ids as an int32 numpy array (what a kernel's order table takes).")
      .def("__repr__", [](const TileOrder& o) {
        return "TileOrder(rank=" + std::to_string(o.rank) + ", " + enum_str(o.kind) +
               ", tiles=" + std::to_string(o.tiles.size()) + ")";
      });

  m.def("estimate_arrival", &schedule::estimate_arrival, "plan"_a,
        "Predicted landing time of each chunk (by id) without a simulator; any unit.");
  m.def(
      "tile_order",
      [](const plan::CommPlan& plan, const lower::SignalTable& table, const lower::TileGrid& grid,
         std::string_view kind, std::optional<std::vector<double>> chunk_arrival, int group_m) {
        const std::vector<double> arrival =
            chunk_arrival ? std::move(*chunk_arrival) : schedule::estimate_arrival(plan);
        return schedule::make_tile_order(plan, table, grid, enum_arg<OrderKind>(kind, "kind"), arrival, group_m);
      },
      "plan"_a, "table"_a, "grid"_a, "kind"_a = "arrival", "chunk_arrival"_a = nb::none(), "group_m"_a = 8,
      "The tile order of table.rank; chunk_arrival defaults to estimate_arrival(plan).");
  m.def("tile_orders_to_json", &schedule::tile_orders_to_json, "orders"_a, "grid"_a, "group_m"_a, "chunk_arrival"_a,
        "indent"_a = 2);
}

}  // namespace syncopate::python

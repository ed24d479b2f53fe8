// syncopate._core: tile grids, tile accesses and the per-rank signal tables that lowering makes.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "enum_arg.hpp"
#include "numpy_array.hpp"
#include "syncopate/lower/signal_table.hpp"
#include "syncopate/lower/signal_table_csr.hpp"
#include "syncopate/lower/signal_table_json.hpp"
#include "syncopate/lower/spelling.hpp"
#include "syncopate/lower/tiling.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace syncopate::python {
namespace {

using lower::AccessRole;
using lower::SignalSlot;
using lower::SignalTable;
using lower::SignalTableArrays;
using lower::TileAccess;
using lower::TileGrid;

void bind_tiling(nb::module_& m) {
  nb::class_<TileGrid>(m, "TileGrid", "BLOCK_M x BLOCK_N tiles over an M x N output, row-major ids.")
      .def(
          "__init__",
          [](TileGrid* self, std::int64_t m, std::int64_t n, std::int64_t block_m, std::int64_t block_n) {
            new (self) TileGrid{m, n, block_m, block_n};
          },
          "m"_a, "n"_a, "block_m"_a = 128, "block_n"_a = 256)
      .def_rw("m", &TileGrid::m)
      .def_rw("n", &TileGrid::n)
      .def_rw("block_m", &TileGrid::block_m)
      .def_rw("block_n", &TileGrid::block_n)
      .def_prop_ro("tiles_m", &TileGrid::tiles_m)
      .def_prop_ro("tiles_n", &TileGrid::tiles_n)
      .def_prop_ro("count", &TileGrid::count)
      .def("__repr__", [](const TileGrid& g) {
        return "TileGrid(m=" + std::to_string(g.m) + ", n=" + std::to_string(g.n) +
               ", block_m=" + std::to_string(g.block_m) + ", block_n=" + std::to_string(g.block_n) + ")";
      });

  nb::class_<TileAccess>(m, "TileAccess", "Which dims of a communicated tensor a tile's rows and columns index.")
      .def(
          "__init__",
          [](TileAccess* self, std::string tensor, std::string_view role, int m_dim, int n_dim, bool m_local_shard) {
            new (self) TileAccess{std::move(tensor), enum_arg<AccessRole>(role, "role"), m_dim, n_dim, m_local_shard};
          },
          "tensor"_a, "role"_a = "consume", "m_dim"_a = 0, "n_dim"_a = -1, "m_local_shard"_a = false)
      .def_rw("tensor", &TileAccess::tensor)
      .def_prop_rw(
          "role", [](const TileAccess& a) { return enum_str(a.role); },
          [](TileAccess& a, std::string_view role) { a.role = enum_arg<AccessRole>(role, "role"); })
      .def_rw("m_dim", &TileAccess::m_dim)
      .def_rw("n_dim", &TileAccess::n_dim)
      .def_rw("m_local_shard", &TileAccess::m_local_shard,
              "m_dim holds this rank's shard of the grid rows (rows rank*E .. (rank+1)*E - 1).")
      .def("__repr__", [](const TileAccess& a) {
        return "TileAccess(" + a.tensor + ", " + enum_str(a.role) + ", m_dim=" + std::to_string(a.m_dim) +
               ", n_dim=" + std::to_string(a.n_dim) + (a.m_local_shard ? ", m_local_shard=True" : "") + ")";
      });
}

void bind_signal_tables(nb::module_& m) {
  nb::class_<SignalSlot>(m, "SignalSlot")
      .def_ro("slot", &SignalSlot::slot)
      .def_prop_ro("kind", [](const SignalSlot& s) { return enum_str(s.kind); })
      .def_ro("chunk", &SignalSlot::chunk)
      .def_ro("writers", &SignalSlot::writers);

  nb::class_<SignalTableArrays>(m, "SignalTableArrays",
                                "A SignalTable as flat int32 numpy arrays (CSR by tile id) for kernels.")
      .def_ro("rank", &SignalTableArrays::rank)
      .def_ro("num_slots", &SignalTableArrays::num_slots)
      .def_ro("num_landing", &SignalTableArrays::num_landing)
      .def_prop_ro(
          "slot_writers", [](const SignalTableArrays& a) { return to_numpy(a.slot_writers); }, nb::rv_policy::move)
      .def_prop_ro(
          "slot_chunk", [](const SignalTableArrays& a) { return to_numpy(a.slot_chunk); }, nb::rv_policy::move)
      .def_prop_ro(
          "wait_offsets", [](const SignalTableArrays& a) { return to_numpy(a.waits.offsets); }, nb::rv_policy::move)
      .def_prop_ro(
          "wait_slots", [](const SignalTableArrays& a) { return to_numpy(a.waits.items); }, nb::rv_policy::move)
      .def_prop_ro(
          "notify_offsets", [](const SignalTableArrays& a) { return to_numpy(a.notifies.offsets); },
          nb::rv_policy::move)
      .def_prop_ro(
          "notify_slots", [](const SignalTableArrays& a) { return to_numpy(a.notifies.items); }, nb::rv_policy::move);

  nb::class_<SignalTable>(m, "SignalTable", "One rank's signal slots and per-tile wait/notify lists.")
      .def_ro("rank", &SignalTable::rank)
      .def_ro("slots", &SignalTable::slots)
      .def_ro("landing_slot_of_chunk", &SignalTable::landing_slot_of_chunk)
      .def_ro("ready_slot_of_chunk", &SignalTable::ready_slot_of_chunk)
      .def_ro("dst_ready_slot_of_chunk", &SignalTable::dst_ready_slot_of_chunk)
      .def_ro("tile_waits", &SignalTable::tile_waits)
      .def_ro("tile_notifies", &SignalTable::tile_notifies)
      .def("expected", &SignalTable::expected, "slot"_a, "epoch"_a,
           "Value slot `slot` must reach in call `epoch` (epochs start at 1).")
      .def("arrays", &lower::to_arrays, "The CSR form (int32 numpy arrays) for a kernel.")
      .def("__repr__", [](const SignalTable& t) {
        return "SignalTable(rank=" + std::to_string(t.rank) + ", slots=" + std::to_string(t.slots.size()) +
               ", tiles=" + std::to_string(t.tile_waits.size()) + ")";
      });

  m.def("lower", &lower::lower, "plan"_a, "grid"_a, "accesses"_a,
        "One SignalTable per rank; raises UserError when an access does not fit the plan or grid.");
  m.def("signal_tables_to_json", &lower::signal_tables_to_json, "tables"_a, "grid"_a, "accesses"_a, "indent"_a = 2);
}

}  // namespace

void bind_lower(nb::module_& m) {
  bind_tiling(m);
  bind_signal_tables(m);
}

}  // namespace syncopate::python

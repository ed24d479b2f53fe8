// The `syncopate._runtime` extension module: the CUDA runtime (symmetric heap, bounded waits,
// NCCL communicators, the plan executor) for syncopate/runtime.py and the fused ops.
//
// Plans cross the module boundary as JSON text (syncopate.plan_to_json), so this module shares
// no C++ types with syncopate._core. Streams are CUDA stream handles as integers
// (torch.cuda.Stream.cuda_stream); addresses come back as integers. C++ errors arrive as the
// syncopate.errors classes (WaitTimeoutError, DeviceError, UserError, ...).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include "error_translation.hpp"
#include "syncopate/common/error.hpp"
#include "syncopate/lower/signal_table.hpp"
#include "syncopate/plan/json.hpp"
#include "syncopate/runtime/executor.hpp"
#include "syncopate/runtime/graph_launch.hpp"
#include "syncopate/runtime/host_flag.hpp"
#include "syncopate/runtime/occupancy.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace syncopate::python {
namespace {

using runtime::HostFlag;
using runtime::NcclComm;
using runtime::RankExecutor;
using runtime::SymmetricHeap;
using runtime::WaitMonitor;

cudaStream_t as_stream(std::uintptr_t handle) { return reinterpret_cast<cudaStream_t>(handle); }

std::vector<std::uint8_t> to_bytes(const nb::bytes& b) {
  const auto* p = static_cast<const std::uint8_t*>(b.data());
  return {p, p + b.size()};
}

nb::bytes from_bytes(const std::vector<std::uint8_t>& v) {
  return nb::bytes(reinterpret_cast<const char*>(v.data()), v.size());
}

// One access as Python passes it: (tensor, role, m_dim, n_dim) or (tensor, role, m_dim, n_dim,
// m_local_shard); `index` is its place in the list, for the error.
lower::TileAccess to_access(const nb::handle& item, std::size_t index) {
  const std::string where = "accesses[" + std::to_string(index) + "]";
  const std::string shape = " (want (tensor, role, m_dim, n_dim) or (tensor, role, m_dim, n_dim, m_local_shard))";
  if (!nb::isinstance<nb::tuple>(item) && !nb::isinstance<nb::list>(item))
    throw UserError(where + ": bad-access: not a tuple" + shape);
  const auto seq = nb::borrow<nb::sequence>(item);
  const std::size_t n = nb::len(seq);
  if (n != 4 && n != 5) throw UserError(where + ": bad-access: " + std::to_string(n) + " items" + shape);
  lower::TileAccess a;
  try {
    a.tensor = nb::cast<std::string>(seq[0]);
    const auto role = nb::cast<std::string>(seq[1]);
    a.m_dim = nb::cast<int>(seq[2]);
    a.n_dim = nb::cast<int>(seq[3]);
    if (n == 5) {
      // Only a real bool (or 0/1): a stray string here is a mistake, not "true".
      const nb::handle flag = seq[4];
      if (nb::isinstance<nb::bool_>(flag)) {
        a.m_local_shard = nb::cast<bool>(flag);
      } else {
        const int v = nb::cast<int>(flag);
        if (v != 0 && v != 1) throw nb::cast_error();
        a.m_local_shard = v == 1;
      }
    }
    if (role == "consume")
      a.role = lower::AccessRole::consume;
    else if (role == "produce")
      a.role = lower::AccessRole::produce;
    else
      throw UserError(where + " of \"" + a.tensor + "\": bad-role: \"" + role + "\" (consume or produce)");
  } catch (const nb::cast_error&) {
    throw UserError(where + ": bad-access: wrong item types" + shape +
                    ": tensor and role are str, m_dim and n_dim int, m_local_shard bool");
  }
  return a;
}

// A plan made ready to execute: the parsed plan, its per-rank signal tables (lowered against the
// local kernel's tile grid and accesses), and the heap layout they imply.
struct PreparedPlan {
  plan::CommPlan plan;
  std::vector<lower::SignalTable> tables;
  runtime::HeapLayout layout;
};

std::shared_ptr<PreparedPlan> prepare(const std::string& plan_json, std::int64_t m, std::int64_t n,
                                      std::int64_t block_m, std::int64_t block_n, const nb::list& accesses) {
  auto p = std::make_shared<PreparedPlan>();
  p->plan = plan::parse_plan(plan_json, "<plan json>");
  std::vector<lower::TileAccess> acc;
  for (std::size_t i = 0; i < accesses.size(); ++i) acc.push_back(to_access(accesses[i], i));
  p->tables = lower::lower(p->plan, lower::TileGrid{m, n, block_m, block_n}, acc);
  p->layout = runtime::make_heap_layout(p->plan, p->tables);
  return p;
}

nb::dict table_dict(const lower::SignalTable& t) {
  nb::dict d;
  std::vector<int> writers, chunks, kinds;
  for (const auto& s : t.slots) {
    writers.push_back(s.writers);
    chunks.push_back(s.chunk);
    kinds.push_back(static_cast<int>(s.kind));
  }
  d["rank"] = t.rank;
  d["slot_writers"] = writers;
  d["slot_chunks"] = chunks;
  d["slot_kinds"] = kinds;
  d["tile_waits"] = t.tile_waits;
  d["tile_notifies"] = t.tile_notifies;
  d["landing_slot_of_chunk"] = t.landing_slot_of_chunk;
  return d;
}

}  // namespace
}  // namespace syncopate::python

NB_MODULE(_runtime, m) {
  using namespace syncopate;
  using namespace syncopate::python;
  m.doc() = "Syncopate's CUDA runtime: symmetric heap, bounded waits, chunk backends, executor.";
  register_error_translator();

  nb::class_<PreparedPlan>(m, "PreparedPlan", "A parsed plan with its per-rank signal tables and heap layout.")
      .def_prop_ro("world_size", [](const PreparedPlan& p) { return p.plan.world_size; })
      .def_prop_ro("heap_bytes", [](const PreparedPlan& p) { return p.layout.total_bytes; })
      .def_prop_ro("signals_offset", [](const PreparedPlan& p) { return p.layout.signals_offset; })
      .def_prop_ro("control_offset", [](const PreparedPlan& p) { return p.layout.control_offset; })
      .def_prop_ro("num_signal_slots", [](const PreparedPlan& p) { return p.layout.num_signal_slots; })
      .def(
          "tensor_offset", [](const PreparedPlan& p, const std::string& name) { return p.layout.tensor_offset(name); },
          "name"_a)
      .def(
          "table",
          [](const PreparedPlan& p, int rank) {
            if (rank < 0 || rank >= static_cast<int>(p.tables.size()))
              throw UserError("table: rank-out-of-range: " + std::to_string(rank));
            return table_dict(p.tables[rank]);
          },
          "rank"_a);
  m.def("prepare_plan", &prepare, "plan_json"_a, "m"_a, "n"_a, "block_m"_a, "block_n"_a, "accesses"_a,
        "Parses a plan, lowers it against an M x N grid of block_m x block_n tiles and the kernel's "
        "accesses [(tensor, 'consume'|'produce', m_dim, n_dim[, m_local_shard])], and lays out the heap.");

  nb::class_<SymmetricHeap>(m, "SymmetricHeap")
      .def(nb::init<int, int, int, std::size_t>(), "rank"_a, "world"_a, "device"_a, "bytes"_a)
      .def("export_handle", [](const SymmetricHeap& h) { return from_bytes(h.export_handle()); })
      .def(
          "open_peers",
          [](SymmetricHeap& h, const std::vector<nb::bytes>& handles, const std::vector<int>& nodes) {
            std::vector<std::vector<std::uint8_t>> raw;
            for (const auto& b : handles) raw.push_back(to_bytes(b));
            h.open_peers(raw, nodes);
          },
          "handles"_a, "nodes"_a = std::vector<int>{},
          "Maps the peers of this rank's node (`nodes`: node id per rank; empty: every peer).")
      .def_static("connect_local", &SymmetricHeap::connect_local, "heaps"_a)
      .def(
          "base", [](const SymmetricHeap& h, int r) { return reinterpret_cast<std::uintptr_t>(h.base(r)); }, "rank"_a)
      .def_prop_ro("device_peer_bases",
                   [](const SymmetricHeap& h) { return reinterpret_cast<std::uintptr_t>(h.device_peer_bases()); })
      .def_prop_ro("rank", &SymmetricHeap::rank)
      .def_prop_ro("world", &SymmetricHeap::world)
      .def_prop_ro("device", &SymmetricHeap::device)
      .def_prop_ro("bytes", &SymmetricHeap::bytes)
      .def_prop_ro("connected", &SymmetricHeap::connected);

  nb::class_<WaitMonitor>(m, "WaitMonitor")
      .def(nb::init<>())
      .def("check", &WaitMonitor::check, "Raises WaitTimeoutError if a runtime wait timed out.")
      .def("clear", &WaitMonitor::clear)
      .def_prop_ro("timed_out", &WaitMonitor::timed_out);

  nb::class_<HostFlag>(m, "HostFlag")
      .def(nb::init<>())
      .def(
          "enqueue_copy",
          [](HostFlag& f, std::uintptr_t device_word, std::uintptr_t stream) {
            f.enqueue_copy(reinterpret_cast<const void*>(device_word), as_stream(stream));
          },
          "device_word"_a, "stream"_a, "Enqueues the copy of an 8-byte device word into the flag")
      .def_prop_ro("value", &HostFlag::value)
      .def("clear", &HostFlag::clear);

  m.def("nccl_unique_id", [] { return from_bytes(NcclComm::unique_id()); });
  m.def(
      "launch_graph",
      [](std::uintptr_t graph_exec, std::uintptr_t stream) { runtime::launch_graph(graph_exec, as_stream(stream)); },
      "graph_exec"_a, "stream"_a, "cudaGraphLaunch of an instantiated graph (torch: raw_cuda_graph_exec())");
  m.def(
      "replay_graph_unless",
      [](std::uintptr_t graph_exec, std::uintptr_t stream, const WaitMonitor* monitor, const HostFlag* flag) {
        return runtime::replay_graph_unless(graph_exec, as_stream(stream), monitor, flag) ==
               runtime::ReplayOutcome::launched;
      },
      "graph_exec"_a, "stream"_a, "monitor"_a.none(), "flag"_a.none(),
      "Launches the graph and returns True unless the stream is being captured, an earlier wait "
      "timed out (monitor's record or flag; None: not watched) or the capture status is "
      "unreadable; then nothing is launched (runtime/graph_launch.hpp)");
  m.def(
      "launch_split_graph",
      [](std::uintptr_t head, std::uintptr_t tail, std::uintptr_t side, std::uintptr_t done_event,
         bool tail_records_done, std::uintptr_t stream) {
        runtime::launch_split_graph(head, tail, as_stream(stream), as_stream(side),
                                    reinterpret_cast<cudaEvent_t>(done_event), tail_records_done);
      },
      "head"_a, "tail"_a, "side"_a, "done_event"_a, "tail_records_done"_a, "stream"_a,
      "A call captured as two graphs: head on stream, tail on side, then stream waits for the done "
      "event (recorded by the host after the tail, or by the tail itself: tail_records_done) "
      "(runtime/graph_launch.hpp)");
  m.def(
      "replay_split_graph_unless",
      [](std::uintptr_t head, std::uintptr_t tail, std::uintptr_t side, std::uintptr_t done_event,
         bool tail_records_done, std::uintptr_t stream, const WaitMonitor* monitor, const HostFlag* flag) {
        return runtime::replay_split_graph_unless(head, tail, as_stream(side),
                                                  reinterpret_cast<cudaEvent_t>(done_event), tail_records_done,
                                                  as_stream(stream), monitor, flag) == runtime::ReplayOutcome::launched;
      },
      "head"_a, "tail"_a, "side"_a, "done_event"_a, "tail_records_done"_a, "stream"_a, "monitor"_a.none(),
      "flag"_a.none(), "replay_graph_unless for a call captured as two graphs (launch_split_graph)");
  nb::class_<NcclComm>(m, "NcclComm")
      .def(
          "__init__",
          [](NcclComm* self, const nb::bytes& id, int world, int rank, int device) {
            new (self) NcclComm(to_bytes(id), world, rank, device);
          },
          "unique_id"_a, "world"_a, "rank"_a, "device"_a)
      .def_prop_ro("rank", &NcclComm::rank)
      .def_prop_ro("world", &NcclComm::world);

  nb::class_<RankExecutor>(m, "RankExecutor")
      .def(
          "__init__",
          [](RankExecutor* self, const PreparedPlan& prepared, SymmetricHeap& heap, WaitMonitor& monitor,
             NcclComm* nccl, std::int64_t wait_bound_ns, int drop_chunk, int sm_copy_blocks,
             std::vector<int> in_place_chunks) {
            runtime::ExecutorOptions o;
            o.wait_bound_ns = wait_bound_ns;
            o.drop_chunk = drop_chunk;
            o.sm_copy_blocks = sm_copy_blocks;
            o.in_place_chunks = std::move(in_place_chunks);
            new (self) RankExecutor(prepared.plan, prepared.tables, heap, monitor, nccl, o);
          },
          "prepared"_a, "heap"_a, "monitor"_a, "nccl"_a.none(), "wait_bound_ns"_a = 10'000'000'000, "drop_chunk"_a = -1,
          "sm_copy_blocks"_a = 16, "in_place_chunks"_a = std::vector<int>{},
          // the executor refers to heap, monitor and communicator: keep them alive with it
          nb::keep_alive<1, 3>(), nb::keep_alive<1, 4>(), nb::keep_alive<1, 5>())
      // One call: begin, (inputs), publish, fork, (kernel), issue_chunks, [wait_landed], end;
      // executor.hpp says what each does. No epoch argument: it lives on the device.
      .def(
          "begin", [](RankExecutor& e, std::uintptr_t s) { e.begin(as_stream(s)); }, "stream"_a)
      .def(
          "publish", [](RankExecutor& e, std::uintptr_t s) { e.publish(as_stream(s)); }, "stream"_a)
      .def(
          "begin_and_publish", [](RankExecutor& e, std::uintptr_t s) { e.begin_and_publish(as_stream(s)); }, "stream"_a)
      .def(
          "fork", [](RankExecutor& e, std::uintptr_t s) { e.fork(as_stream(s)); }, "stream"_a)
      .def("issue_chunks", &RankExecutor::issue_chunks)
      .def(
          "bind_source",
          [](RankExecutor& e, const std::string& name, std::uintptr_t address) {
            e.bind_source(name, reinterpret_cast<const void*>(address));
          },
          "name"_a, "address"_a, "this rank's local chunks read tensor `name` at `address` (0: the heap again)")
      .def(
          "issue", [](RankExecutor& e, std::uintptr_t s, bool wait_landed) { e.issue(as_stream(s), wait_landed); },
          "stream"_a, "wait_landed"_a = true)
      .def(
          "wait_landed", [](RankExecutor& e, std::uintptr_t s) { e.wait_landed(as_stream(s)); }, "stream"_a)
      .def(
          "end", [](RankExecutor& e, std::uintptr_t s) { e.end(as_stream(s)); }, "stream"_a)
      .def(
          "run", [](RankExecutor& e, std::uintptr_t s) { e.run(as_stream(s)); }, "stream"_a)
      .def_prop_ro(
          "epoch_word", [](const RankExecutor& e) { return reinterpret_cast<std::uintptr_t>(e.epoch_word()); },
          "device address of this rank's int32 epoch word")
      .def_prop_ro("rank", &RankExecutor::rank);

  // Occupancy shaping and stream priorities (kernel-level mode, docs/KERNEL_LEVEL.md). The
  // arithmetic needs no GPU; the rest asks the device / driver.
  nb::class_<runtime::KernelResources>(m, "KernelResources", "What one block of a kernel uses.")
      .def(
          "__init__",
          [](runtime::KernelResources* self, int threads, int registers, std::int64_t static_smem,
             std::int64_t dynamic_smem) {
            new (self) runtime::KernelResources{threads, registers, static_smem, dynamic_smem};
          },
          "threads_per_block"_a, "registers_per_thread"_a, "static_smem_bytes"_a = 0, "dynamic_smem_bytes"_a = 0)
      .def_rw("threads_per_block", &runtime::KernelResources::threads_per_block)
      .def_rw("registers_per_thread", &runtime::KernelResources::registers_per_thread)
      .def_rw("static_smem_bytes", &runtime::KernelResources::static_smem_bytes)
      .def_rw("dynamic_smem_bytes", &runtime::KernelResources::dynamic_smem_bytes);
  nb::class_<runtime::SmLimits>(m, "SmLimits", "One SM's limits (cudaDeviceGetAttribute).")
      .def(nb::init<>())
      .def_rw("smem_per_sm", &runtime::SmLimits::smem_per_sm)
      .def_rw("smem_per_block_optin", &runtime::SmLimits::smem_per_block_optin)
      .def_rw("reserved_smem_per_block", &runtime::SmLimits::reserved_smem_per_block)
      .def_rw("max_blocks_per_sm", &runtime::SmLimits::max_blocks_per_sm)
      .def_rw("max_threads_per_sm", &runtime::SmLimits::max_threads_per_sm)
      .def_rw("registers_per_sm", &runtime::SmLimits::registers_per_sm)
      .def_rw("registers_per_block", &runtime::SmLimits::registers_per_block)
      .def_rw("warp_size", &runtime::SmLimits::warp_size)
      .def_rw("smem_granularity", &runtime::SmLimits::smem_granularity)
      .def_rw("register_granularity", &runtime::SmLimits::register_granularity)
      .def_rw("register_partitions", &runtime::SmLimits::register_partitions);
  nb::class_<runtime::Shaping>(m, "Shaping", "The extra dynamic shared memory for a target residency.")
      .def_ro("ok", &runtime::Shaping::ok)
      .def_ro("extra_dynamic_smem", &runtime::Shaping::extra_dynamic_smem)
      .def_ro("dynamic_smem", &runtime::Shaping::dynamic_smem)
      .def_ro("natural_blocks", &runtime::Shaping::natural_blocks)
      .def_ro("blocks", &runtime::Shaping::blocks)
      .def_ro("reason", &runtime::Shaping::reason);
  m.def(
      "resident_blocks",
      [](const runtime::KernelResources& k, const runtime::SmLimits& l) {
        const auto r = runtime::resident_blocks(k, l);
        return std::make_tuple(r.blocks, std::string(runtime::to_string(r.limit)), r.smem_per_block);
      },
      "kernel"_a, "limits"_a, "(blocks per SM, the limiting resource, shared memory allocated per block).");
  m.def("shape_for_residency", &runtime::shape_for_residency, "kernel"_a, "limits"_a, "target_blocks"_a,
        "The least extra dynamic shared memory capping residency at target_blocks (Shaping).");
  m.def("device_sm_limits", &runtime::device_sm_limits, "device"_a);
  m.def("function_resources", &runtime::function_resources, "function"_a,
        "Registers, threads and static shared memory of a loaded CUfunction handle.");
  m.def("occupancy_blocks", &runtime::occupancy_blocks, "function"_a, "threads_per_block"_a, "dynamic_smem"_a,
        "cuOccupancyMaxActiveBlocksPerMultiprocessor for a CUfunction handle.");
  m.def("set_max_dynamic_smem", &runtime::set_max_dynamic_smem, "function"_a, "bytes"_a);
  m.def("stream_priority_range", &runtime::stream_priority_range,
        "(least, greatest) stream priority of the current device; greatest is numerically smallest.");
  m.def(
      "stream_priority", [](std::uintptr_t s) { return runtime::stream_priority(s); }, "stream"_a);
}

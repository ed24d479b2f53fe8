// Turning a fused call into engine inputs, one builder per way of running it.
#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include <fmt/core.h>

#include "engine.hpp"
#include "syncopate/plan/dependency_graph.hpp"
#include "syncopate/sim/reserved_sms.hpp"
#include "syncopate/sim/simulator.hpp"

namespace syncopate::sim {
namespace {

using detail::EngineChunk;
using detail::EngineInput;
using detail::EngineKernel;
using detail::EngineRank;

// The rank whose lanes a chunk occupies: the one that lists it in its streams (an NCCL chunk is
// listed by both; its send side, the source, counts).
std::vector<int> issuers(const plan::CommPlan& plan) {
  std::vector<int> issuer(plan.chunks.size(), -1);
  for (const auto& rp : plan.ranks)
    for (const auto& stream : rp.streams)
      for (int c : stream)
        if (c >= 0 && c < static_cast<int>(issuer.size()) && (issuer[c] < 0 || rp.rank == plan.chunks[c].src))
          issuer[c] = rp.rank;
  for (std::size_t c = 0; c < issuer.size(); ++c)
    if (issuer[c] < 0) issuer[c] = plan.chunks[c].src;
  return issuer;
}

// The bytes chunk `ch` moves: its box, or for run-time rows on a backend that moves only the
// counted rows (SM copy), the box cut to `rows` along the runtime_rows dim.
double chunk_bytes(const plan::Chunk& ch, std::size_t c, int elem_size, const std::vector<std::int64_t>& chunk_rows) {
  const double whole = static_cast<double>(ch.box.elements()) * elem_size;
  if (chunk_rows.empty() || !ch.runtime_rows || ch.backend != plan::Backend::sm_copy) return whole;
  const auto dim = static_cast<std::size_t>(ch.runtime_rows->dim);
  const std::int64_t capacity = dim < ch.box.extent.size() ? ch.box.extent[dim] : 0;
  if (capacity <= 0) return whole;
  const std::int64_t rows = std::clamp<std::int64_t>(chunk_rows[c], 0, capacity);
  return whole * static_cast<double>(rows) / static_cast<double>(capacity);
}

// Chunks with sizes, lanes and happens-before edges; no gates yet.
std::vector<EngineChunk> base_chunks(const plan::CommPlan& plan, const Calibration& calib,
                                     const std::vector<std::int64_t>& chunk_rows) {
  const plan::DependencyGraph graph(plan);
  const auto issuer = issuers(plan);
  if (!plan.nodes.empty() && static_cast<int>(plan.nodes.size()) != plan.world_size)
    throw UserError(fmt::format("simulate: nodes-count: the plan names {} nodes for a world of {}", plan.nodes.size(),
                                plan.world_size));
  if (!chunk_rows.empty() && chunk_rows.size() != plan.chunks.size())
    throw UserError(fmt::format("simulate: chunk_rows has {} entries for a plan of {} chunks (one per chunk)",
                                chunk_rows.size(), plan.chunks.size()));
  std::vector<EngineChunk> out(plan.chunks.size());
  for (std::size_t c = 0; c < plan.chunks.size(); ++c) {
    const auto& ch = plan.chunks[c];
    auto tensor = plan.tensors.find(ch.tensor);
    if (tensor == plan.tensors.end())
      throw UserError(
          fmt::format("simulate: chunk {}: unknown-tensor: \"{}\" is not in the plan's tensors", c, ch.tensor));
    if (ch.src < 0 || ch.src >= plan.world_size || ch.dst < 0 || ch.dst >= plan.world_size)
      throw UserError(fmt::format("simulate: chunk {}: rank-out-of-range: {} -> {} in a world of {}", c, ch.src, ch.dst,
                                  plan.world_size));
    auto& e = out[c];
    e.src = ch.src;
    e.dst = ch.dst;
    e.backend = ch.backend;
    e.bytes = chunk_bytes(ch, c, plan::dtype_size(tensor->second.dtype), chunk_rows);
    e.issuer = issuer[c];
    e.stream = ch.stream;
    e.inter_node = plan::node_of(plan, ch.src) != plan::node_of(plan, ch.dst);
    if (e.inter_node && !calib.network.modelled)
      throw UserError(
          fmt::format("simulate: chunk {}: no-network-model: {} -> {} crosses nodes ({} -> {}) but the "
                      "calibration has no `network` section (per-GPU NIC bandwidth and latency)",
                      c, ch.src, ch.dst, plan::node_of(plan, ch.src), plan::node_of(plan, ch.dst)));
    const auto preds = graph.predecessors(static_cast<int>(c));
    e.after.assign(preds.begin(), preds.end());
    e.not_before_us = calib.launch_overhead_us;
  }
  return out;
}

void check_call(const FusedCall& call) {
  const int world = call.plan.world_size;
  check_tile_scale(call.gemm, world);
  check_chunk_rows(call.gemm, call.plan);
  const auto tiles = call.gemm.grid().count();
  if (static_cast<int>(call.tables.size()) != world || static_cast<int>(call.orders.size()) != world)
    throw UserError(fmt::format("simulate: the call has {} signal tables and {} tile orders for a world of {}",
                                call.tables.size(), call.orders.size(), world));
  for (int r = 0; r < world; ++r) {
    if (static_cast<std::int64_t>(call.tables[r].tile_waits.size()) != tiles ||
        static_cast<std::int64_t>(call.orders[r].tiles.size()) != tiles)
      throw UserError(
          fmt::format("simulate: rank {}: the signal table or tile order does not fit the "
                      "{}x{} grid of {} tiles",
                      r, call.gemm.grid().tiles_m(), call.gemm.grid().tiles_n(), tiles));
  }
}

// Chunk ids a tile waits on / gates, from the rank's signal table.
std::vector<std::vector<int>> tile_wait_chunks(const lower::SignalTable& table) {
  std::vector<std::vector<int>> out(table.tile_waits.size());
  for (std::size_t t = 0; t < out.size(); ++t)
    for (int s : table.tile_waits[t]) out[t].push_back(table.slots.at(s).chunk);
  return out;
}
// (rank, tile) pairs whose written output gates each chunk (ready and dst-ready slots).
std::vector<std::vector<std::pair<int, int>>> chunk_gates(const FusedCall& call) {
  std::vector<std::vector<std::pair<int, int>>> out(call.plan.chunks.size());
  for (const auto& table : call.tables)
    for (std::size_t t = 0; t < table.tile_notifies.size(); ++t)
      for (int s : table.tile_notifies[t]) out.at(table.slots.at(s).chunk).emplace_back(table.rank, int(t));
  return out;
}

EngineRank rank_shell(const FusedCall& call, int rank, int workers, const Calibration& calib) {
  EngineRank er;
  er.workers = workers;
  er.tile_work_us = calib.tile_time_us(call.gemm.block_m, call.gemm.block_n, call.gemm.k, call.gemm.dtype);
  er.tile_count = static_cast<int>(call.gemm.grid().count());
  if (!call.gemm.tile_scale.empty()) er.tile_scale = call.gemm.tile_scale.at(static_cast<std::size_t>(rank));
  return er;
}

bool produces(const FusedCall& call) {
  for (const auto& table : call.tables)
    for (const auto& n : table.tile_notifies)
      if (!n.empty()) return true;
  return false;
}

// Kernel-level overlap cuts the GEMM into kernels by arrival group: a tile's key is the
// predicted (communication-alone) landing of the last chunk it reads, or the leaving time of
// the first chunk it writes; tiles with neither go first. One kernel per group, as
// syncopate.kernel_level launches one GEMM per piece and source (AG+GEMM: the local shard, then
// chunks x (world - 1) pieces); each kernel pays its own tail wave.
std::vector<EngineKernel> arrival_kernels(const FusedCall& call, int rank, const Timeline& comm,
                                          const std::vector<std::vector<int>>& waits,
                                          const std::vector<std::vector<std::pair<int, int>>>& gates) {
  std::vector<double> leave(call.gemm.grid().count(), std::numeric_limits<double>::infinity());
  for (std::size_t c = 0; c < gates.size(); ++c)
    for (auto [r, t] : gates[c])
      if (r == rank) leave[t] = std::min(leave[t], comm.chunks[c].start);
  // Tiles that neither read nor write a chunk go first on a consumer (their data is local) and
  // last on a producer (nothing waits for them).
  const double neither = produces(call) ? std::numeric_limits<double>::infinity() : -1.0;
  std::map<double, std::vector<int>> groups;  // key -> tiles, in the tile order
  for (int t : call.orders[rank].tiles) {
    double key = waits[t].empty() ? leave[t] : -1.0;
    for (int c : waits[t]) key = std::max(key, comm.chunks[c].arrival);
    if (waits[t].empty() && leave[t] == std::numeric_limits<double>::infinity()) key = neither;
    groups[key].push_back(t);
  }
  std::vector<EngineKernel> out;
  for (auto& [key, tiles] : groups) {
    std::set<int> kernel_waits;
    for (int t : tiles) kernel_waits.insert(waits[t].begin(), waits[t].end());
    out.push_back({std::move(tiles), {kernel_waits.begin(), kernel_waits.end()}});
  }
  return out;
}

// The calibration kernel-level mode runs with: every chunk's latency plus the kernel-level
// chunk_latency_us; each SM-using backend on `comm_sms` SMs, its bandwidth (and its link
// overrides) scaled by min(1, comm_sms / calibrated sms).
Calibration shaped_calibration(const Calibration& calib, const KernelLevelShaping& shaping,
                               const plan::CommPlan& plan) {
  if (shaping.comm_sms < -1)
    throw UserError(
        fmt::format("simulate: kernel_level.comm_sms: expected -1 (calibrated) or >= 0, got {}", shaping.comm_sms));
  Calibration c = calib;
  // Each chunk is (part of) a collective call of its own: its fixed cost on the comm stream.
  for (auto& model : c.backends) model.latency_us += calib.kernel_level.chunk_latency_us;
  if (c.network.modelled) c.network.latency_us += calib.kernel_level.chunk_latency_us;
  if (shaping.comm_sms < 0) return c;
  for (std::size_t b = 0; b < c.backends.size(); ++b) {
    auto& model = c.backends[b];
    const bool used = std::any_of(plan.chunks.begin(), plan.chunks.end(), [b](const plan::Chunk& ch) {
      return ch.src != ch.dst && ch.backend == static_cast<plan::Backend>(b);
    });
    if (model.sms <= 0 || !used) continue;  // the copy engine uses no SMs
    const double scale = std::min(1.0, double(shaping.comm_sms) / double(model.sms));
    if (scale <= 0)
      throw UserError(fmt::format("simulate: kernel_level.comm_sms: 0 SMs leave backend {} no way to move bytes",
                                  plan::to_string(static_cast<plan::Backend>(b))));
    model.bandwidth_gbps *= scale;
    model.sms = shaping.comm_sms;
    for (auto& link : c.links)
      if (link.backend == static_cast<plan::Backend>(b)) link.bandwidth_gbps *= scale;
  }
  return c;
}

// Compute throughput of a shaped kernel relative to unshaped, or 0 when not shaped.
double shaped_speed(const KernelLevelShaping& shaping) {
  if (shaping.natural_residency < 1 || shaping.residency < 0)
    throw UserError(
        fmt::format("simulate: kernel_level: residency {} / natural_residency {}: expected "
                    "residency >= 0 and natural_residency >= 1",
                    shaping.residency, shaping.natural_residency));
  if (!(shaping.block_share > 0 && shaping.block_share <= 1))
    throw UserError(
        fmt::format("simulate: kernel_level.block_share: expected a number in (0, 1], got {}", shaping.block_share));
  if (shaping.residency == 0 || shaping.residency >= shaping.natural_residency) return 0;
  return std::min(1.0, shaping.residency * shaping.block_share);
}

// Bytes of the tensor's elements along `dim` that `rank` owns in an even split over the world
// (the whole tensor when the split does not apply).
double shard_bytes(const plan::CommPlan& plan, int rank, bool whole) {
  const auto& spec = plan.collective;
  const auto tensor = plan.tensors.find(spec.tensor);
  if (tensor == plan.tensors.end()) return 0;
  const auto& shape = tensor->second.shape;
  double elements = static_cast<double>(tensor->second.elements());
  if (!whole && spec.dim >= 0 && spec.dim < static_cast<int>(shape.size()) && shape[spec.dim] > 0)
    elements =
        elements / double(shape[spec.dim]) * double(plan::even_split(shape[spec.dim], plan.world_size, rank).size);
  return elements * plan::dtype_size(tensor->second.dtype);
}

// Bytes an AG+GEMM copies into the heap on `rank` before its kernel: its own shard of the
// gathered tensor (the other collectives' operands are used in place). None for a plan that
// gathers from an input tensor: its local chunks move the shard beside the kernel.
double local_shard_bytes(const plan::CommPlan& plan, int rank) {
  const auto& spec = plan.collective;
  if (spec.kind != plan::Collective::all_gather || spec.gathers_from_input()) return 0.0;
  return shard_bytes(plan, rank, false);
}

// The call path of a fused call (HostModel; none when the calibration has no `host`): the head
// graph's launch; on each rank's stream the preamble (fused_call_us) and, for AG+GEMM, the copy
// of its own shard into the heap; then the kernel is launched at once, and the side streams
// fork chunks_after_launch_us later (the tail graph, launched after the head). On each side
// stream the k-th chunk enters after the dispatch of its first k chunk steps (issue_us each);
// streams run in parallel.
struct CallPath {
  std::vector<double> chunk_enqueued;  // by chunk: when it enters its stream (latest listing rank)
  std::vector<double> launch;          // by rank: the fused kernel's launch on the device
  std::vector<double> host_return;     // by rank: when the host returns from the call
};

CallPath call_path(const plan::CommPlan& plan, const Calibration& calib, bool producer) {
  CallPath p;
  const int n = static_cast<int>(plan.chunks.size());
  p.chunk_enqueued.assign(plan.chunks.size(), 0.0);
  p.launch.assign(plan.world_size, 0.0);
  p.host_return.assign(plan.world_size, 0.0);
  const auto& host = calib.host;
  if (!host.modelled) return p;
  for (int r = 0; r < plan.world_size; ++r) {
    p.launch[r] = host.fused_call_us + local_shard_bytes(plan, r) / (calib.local_copy_gbps * 1e3);
    p.host_return[r] = host.fused_call_us + (producer ? host.producer_after_launch_us : host.after_launch_us);
  }
  for (const auto& program : plan.ranks) {
    const bool known = program.rank >= 0 && program.rank < plan.world_size;
    const double fork = (known ? p.launch[program.rank] : host.fused_call_us) + host.chunks_after_launch_us;
    for (const auto& stream : program.streams) {
      double t = fork;
      for (int c : stream) {
        if (c < 0 || c >= n) continue;
        t += calib.backend(plan.chunks[c].backend).issue_us;
        p.chunk_enqueued[c] = std::max(p.chunk_enqueued[c], t);
      }
    }
  }
  return p;
}

// Bytes a GEMM+RS/AR copies out of the heap on `rank` when its call ends: its reduced shard
// (reduce-scatter) or the whole tensor (all-reduce); 0 for the other collectives and for a
// staged reduce-scatter (GemmRs reduce="epilogue": no copy-out).
double result_bytes(const plan::CommPlan& plan, int rank) {
  const auto& spec = plan.collective;
  const bool rs = spec.kind == plan::Collective::reduce_scatter;
  if (!rs && spec.kind != plan::Collective::all_reduce) return 0;
  if (rs && spec.staged()) return 0;  // staged: the reducing GEMM writes `out` itself
  return shard_bytes(plan, rank, !rs);
}

// How each rank's call ends, as a user times it (see RankEnd), and the call's total.
void end_of_call(Timeline& timeline, const FusedCall& call, const Calibration& calib, const CallPath& path) {
  const int world = call.plan.world_size;
  const bool producer = produces(call);
  std::vector<double> gpu_end(world, 0.0);
  for (const auto& t : timeline.tiles) gpu_end.at(t.rank) = std::max(gpu_end.at(t.rank), t.end);
  for (const auto& c : timeline.chunks)  // chunks landing here, and those its streams carry
    for (int r : {c.dst, c.issuer})
      if (r >= 0 && r < world) gpu_end[r] = std::max(gpu_end[r], c.arrival);
  timeline.rank_ends.assign(world, {});
  for (int r = 0; r < world; ++r) {
    auto& e = timeline.rank_ends[r];
    e.kernel_launch = path.launch[r];
    e.gpu_end = gpu_end[r];
    e.copy_out_start = e.copy_out_end = e.gpu_end;
    const double bytes = producer ? result_bytes(call.plan, r) : 0.0;
    if (bytes > 0) {  // after the exit wait (a stream wait on every landing) and its enqueue
      e.copy_out_start = std::max(e.gpu_end + calib.sync_overhead_us, e.kernel_launch);
      e.copy_out_end = e.copy_out_start + bytes / (calib.local_copy_gbps * 1e3);
    }
    e.host_return = path.host_return[r];
    e.end = std::max(e.copy_out_end, e.host_return);
    timeline.total_us = std::max(timeline.total_us, e.end);
  }
}

}  // namespace

int compute_workers(const plan::CommPlan& plan, int rank, const Calibration& calib) {
  const auto issuer = issuers(plan);
  std::set<plan::Backend> used;
  for (std::size_t c = 0; c < plan.chunks.size(); ++c) {
    const auto& ch = plan.chunks[c];
    const bool nccl_end = ch.backend == plan::Backend::nccl && (ch.src == rank || ch.dst == rank);
    if (issuer[c] == rank || nccl_end) used.insert(ch.backend);
  }
  int reserved = 0;
  for (auto b : used) reserved += calib.backend(b).sms;
  return std::max(1, calib.sms - reserved);
}

int fused_workers(const FusedCall& call, const Calibration& calib) {
  // A staged plan's GEMM adds no chunk beside it (its epilogue sums the partials): it leaves
  // the SMs a consumer does, as the op's staged path launches it.
  const GemmRole role = produces(call) && !call.plan.collective.staged() ? GemmRole::producer : GemmRole::consumer;
  int reserved = 0;
  for (const auto& ch : call.plan.chunks) reserved = std::max(reserved, reserved_sms(ch.backend, role));
  return std::max(1, calib.sms - reserved);
}

Timeline simulate_fused(const FusedCall& call, const Calibration& calib, const SimOptions& options) {
  check_call(call);
  EngineInput in;
  in.label = "fused";
  in.dynamic_assignment = options.dynamic_assignment;
  in.chunks = base_chunks(call.plan, calib, call.gemm.chunk_rows);
  const CallPath path = call_path(call.plan, calib, produces(call));
  // The runtime starts an NCCL group once every member's waits hold: gate members together.
  const auto gates = merge_group_gates(call.plan, chunk_gates(call));
  for (std::size_t c = 0; c < gates.size(); ++c) {
    auto& ch = in.chunks[c];
    ch.gate_tiles = gates[c];
    ch.gate_delay_us = calib.backend(ch.backend).signal_latency_us;
    ch.not_before_us += path.chunk_enqueued[c];
    // Copy-engine and NCCL reduce-adds land in staging, then an add kernel adds them in place.
    ch.add_step = call.plan.chunks[c].op == plan::ChunkOp::reduce_add && ch.backend != plan::Backend::sm_copy;
  }
  const int workers = fused_workers(call, calib);
  for (int r = 0; r < call.plan.world_size; ++r) {
    auto er = rank_shell(call, r, workers, calib);
    er.tile_waits = tile_wait_chunks(call.tables[r]);
    er.kernels.push_back({call.orders[r].tiles, {}, path.launch[r]});
    in.ranks.push_back(std::move(er));
  }
  Timeline timeline = detail::run_engine(in, calib);
  end_of_call(timeline, call, calib, path);
  return timeline;
}

// The host's side of a kernel-level call (syncopate.kernel_level from Python): each rank makes
// one collective call per chunk it issues (its streams' order) and one GEMM launch per kernel,
// one after the other. A chunk's call comes after the launches of the kernels that gate it on
// this rank, so a producer interleaves (a piece's GEMM, then the collective carrying it) and a
// consumer makes all its collective calls first (nothing gates them), then launches its GEMMs.
struct KernelLevelHost {
  std::vector<double> chunk_enqueued;                // by chunk: its call on its issuer
  std::vector<std::vector<double>> kernel_enqueued;  // by rank, kernel: its launch
  std::vector<double> host_return;                   // by rank: after the last operation
};

KernelLevelHost kernel_level_host(const plan::CommPlan& plan, const std::vector<EngineChunk>& chunks,
                                  const std::vector<EngineRank>& ranks, const Calibration& calib) {
  const auto& model = calib.kernel_level;
  KernelLevelHost h;
  h.chunk_enqueued.assign(chunks.size(), 0.0);
  h.kernel_enqueued.resize(ranks.size());
  h.host_return.assign(ranks.size(), 0.0);
  const int n = static_cast<int>(chunks.size());
  for (const auto& program : plan.ranks) {
    const int r = program.rank;
    if (r < 0 || r >= static_cast<int>(ranks.size())) continue;
    const int kernels = static_cast<int>(ranks[r].kernels.size());
    auto& launched = h.kernel_enqueued[r];
    launched.assign(kernels, 0.0);
    double t = model.call_us;
    int next = 0;  // the next kernel to launch
    auto launch_through = [&](int k) {
      for (; next <= k && next < kernels; ++next) launched[next] = t += model.gemm_us;
    };
    for (const auto& stream : program.streams)
      for (int c : stream) {
        if (c < 0 || c >= n || chunks[c].issuer != r) continue;
        int gate = -1;
        for (auto [gr, k] : chunks[c].gate_kernels)
          if (gr == r) gate = std::max(gate, k);
        launch_through(gate);
        h.chunk_enqueued[c] = t += model.collective_us;
      }
    launch_through(kernels - 1);
    h.host_return[r] = t;
  }
  return h;
}

Timeline simulate_kernel_level(const FusedCall& call, const Calibration& base_calib, const SimOptions& options) {
  check_call(call);
  // A staged plan lands partials that only the fused kernel's epilogue sums: a library GEMM
  // beside a collective has no such epilogue, so kernel-level overlap is not a way to run it.
  if (call.plan.collective.staged())
    throw UserError(
        fmt::format("simulate: kernel-level: staged-plan: the plan stages partials in \"{}\" for the fused "
                    "kernel's epilogue to sum; kernel-level overlap (a library GEMM beside the collective) has "
                    "no such epilogue. Simulate it fused, or use the reduce-add plan (no staging)",
                    call.plan.collective.output));
  const Calibration calib = shaped_calibration(base_calib, options.kernel_level, call.plan);
  const double speed = shaped_speed(options.kernel_level);
  const int carveout = options.kernel_level.sm_carveout;
  if (carveout < 0 || carveout >= calib.sms)
    throw UserError(fmt::format("simulate: kernel_level.sm_carveout: expected 0 (none) to {} SMs, got {}",
                                calib.sms - 1, carveout));
  if (carveout > 0 && speed > 0)
    throw UserError(
        "simulate: kernel_level: sm_carveout with residency: a carveout is cuBLAS's way to "
        "leave SMs free, residency the Triton GEMM's; choose one");
  const Timeline comm = simulate_comm_alone(call.plan, calib, call.gemm.chunk_rows);
  EngineInput in;
  in.label = "kernel-level";
  in.dynamic_assignment = options.dynamic_assignment;
  in.chunks = base_chunks(call.plan, calib, call.gemm.chunk_rows);
  // The runtime starts an NCCL group once every member's waits hold: gate members together.
  const auto gates = merge_group_gates(call.plan, chunk_gates(call));
  std::vector<std::vector<EngineKernel>> kernels;
  for (int r = 0; r < call.plan.world_size; ++r) {
    // Shaped: communication blocks sit beside the compute blocks, which keep every SM at a
    // lower rate; not shaped: communication takes whole SMs.
    // Carveout: the GEMM leaves `carveout` SMs free whether or not communication uses them.
    const int workers = speed > 0      ? calib.sms
                        : carveout > 0 ? std::min(calib.sms - carveout, compute_workers(call.plan, r, calib))
                                       : compute_workers(call.plan, r, calib);
    auto er = rank_shell(call, r, workers, calib);
    if (speed > 0) er.tile_work_us /= speed;
    if (carveout > 0) er.tile_work_us *= calib.kernel_level.carveout_slowdown;
    er.kernels = arrival_kernels(call, r, comm, tile_wait_chunks(call.tables[r]), gates);
    in.ranks.push_back(std::move(er));
  }
  // A produced chunk leaves after an event recorded at the end of the kernel holding its
  // producer tiles (the stream runs kernels in order, so the last such kernel is enough).
  for (int r = 0; r < call.plan.world_size; ++r) {
    std::vector<int> kernel_of(call.gemm.grid().count(), 0);
    const auto& ks = in.ranks[r].kernels;
    for (std::size_t k = 0; k < ks.size(); ++k)
      for (int t : ks[k].tiles) kernel_of[t] = static_cast<int>(k);
    for (std::size_t c = 0; c < gates.size(); ++c) {
      int last = -1;
      for (auto [gr, t] : gates[c])
        if (gr == r) last = std::max(last, kernel_of[t]);
      if (last < 0) continue;
      in.chunks[c].gate_kernels.emplace_back(r, last);
      in.chunks[c].gate_delay_us = calib.sync_overhead_us;
    }
  }
  // The host path: nothing runs before the host has issued it; the call ends no earlier than
  // the host's last operation (nothing is copied out: the collective writes the result).
  const KernelLevelHost host = kernel_level_host(call.plan, in.chunks, in.ranks, calib);
  for (std::size_t c = 0; c < in.chunks.size(); ++c) in.chunks[c].not_before_us += host.chunk_enqueued[c];
  for (std::size_t r = 0; r < in.ranks.size(); ++r)
    for (std::size_t k = 0; k < in.ranks[r].kernels.size(); ++k)
      in.ranks[r].kernels[k].not_before_us = host.kernel_enqueued[r][k];
  Timeline timeline = detail::run_engine(in, calib);
  const int world = call.plan.world_size;
  std::vector<double> gpu_end(world, 0.0);
  for (const auto& t : timeline.tiles) gpu_end.at(t.rank) = std::max(gpu_end.at(t.rank), t.end);
  for (const auto& c : timeline.chunks)
    for (int r : {c.dst, c.issuer})
      if (r >= 0 && r < world) gpu_end[r] = std::max(gpu_end[r], c.arrival);
  timeline.rank_ends.assign(world, {});
  for (int r = 0; r < world; ++r) {
    auto& e = timeline.rank_ends[r];
    const auto& launched = host.kernel_enqueued[r];
    e.kernel_launch = launched.empty() ? 0.0 : launched.back();
    e.host_return = host.host_return[r];
    e.gpu_end = e.copy_out_start = e.copy_out_end = gpu_end[r];
    e.end = std::max(e.gpu_end, e.host_return);
    timeline.total_us = std::max(timeline.total_us, e.end);
  }
  return timeline;
}

Timeline simulate_sequential(const FusedCall& call, const Calibration& calib, const SimOptions& options) {
  check_call(call);
  EngineInput in;
  in.label = "sequential";
  in.dynamic_assignment = options.dynamic_assignment;
  in.compute_slowdown = false;
  in.chunks = base_chunks(call.plan, calib, call.gemm.chunk_rows);
  const bool gemm_first = produces(call);
  for (int r = 0; r < call.plan.world_size; ++r) {
    auto er = rank_shell(call, r, calib.sms, calib);
    EngineKernel kernel{call.orders[r].tiles, {}};
    if (!gemm_first)  // the GEMM waits for the whole collective on its rank
      for (std::size_t c = 0; c < in.chunks.size(); ++c)
        if (in.chunks[c].src == r || in.chunks[c].dst == r) kernel.waits.push_back(static_cast<int>(c));
    er.kernels.push_back(std::move(kernel));
    in.ranks.push_back(std::move(er));
  }
  if (gemm_first)  // the collective starts on both ends after their GEMMs, then launches
    for (auto& ch : in.chunks) {
      ch.gate_kernels.emplace_back(ch.src, 0);
      if (ch.dst != ch.src) ch.gate_kernels.emplace_back(ch.dst, 0);
      ch.gate_delay_us = calib.sync_overhead_us + calib.launch_overhead_us;
    }
  return detail::run_engine(in, calib);
}

Timeline simulate_comm_alone(const plan::CommPlan& plan, const Calibration& calib,
                             const std::vector<std::int64_t>& chunk_rows) {
  EngineInput in;
  in.label = "communication alone";
  in.compute_slowdown = false;
  in.chunks = base_chunks(plan, calib, chunk_rows);
  in.ranks.resize(plan.world_size);
  return detail::run_engine(in, calib);
}

Timeline simulate_gemm_alone(const GemmShape& gemm, int world_size, const Calibration& calib) {
  check_tile_scale(gemm, world_size);
  EngineInput in;
  in.label = "GEMM alone";
  in.compute_slowdown = false;
  const int tiles = static_cast<int>(gemm.grid().count());
  EngineKernel kernel;
  for (int t = 0; t < tiles; ++t) kernel.tiles.push_back(t);
  for (int r = 0; r < world_size; ++r) {
    EngineRank er;
    er.workers = calib.sms;
    er.tile_work_us = calib.tile_time_us(gemm.block_m, gemm.block_n, gemm.k, gemm.dtype);
    er.tile_count = tiles;
    if (!gemm.tile_scale.empty()) er.tile_scale = gemm.tile_scale.at(static_cast<std::size_t>(r));
    er.kernels.push_back(kernel);
    in.ranks.push_back(std::move(er));
  }
  return detail::run_engine(in, calib);
}

Prediction predict(const FusedCall& call, const Calibration& calib, const SimOptions& options) {
  Prediction p;
  p.gemm_alone_us = simulate_gemm_alone(call.gemm, call.plan.world_size, calib).total_us;
  p.comm_alone_us = simulate_comm_alone(call.plan, calib, call.gemm.chunk_rows).total_us;
  p.floor_us = std::max(p.gemm_alone_us, p.comm_alone_us);
  p.fused = simulate_fused(call, calib, options);
  if (call.plan.collective.staged()) {  // not a mode this plan can run in (see simulate_kernel_level)
    p.kernel_level.label = "kernel-level (not applicable to a staged plan)";
    p.kernel_level.world_size = call.plan.world_size;
    p.kernel_level.total_us = std::numeric_limits<double>::infinity();
  } else {
    p.kernel_level = simulate_kernel_level(call, calib, options);
  }
  p.sequential = simulate_sequential(call, calib, options);
  p.fused_us = p.fused.total_us;
  p.kernel_level_us = p.kernel_level.total_us;
  p.sequential_us = p.sequential.total_us;
  return p;
}

}  // namespace syncopate::sim

// make_rank_schedule(): see rank_schedule.hpp.
#include "syncopate/runtime/rank_schedule.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "syncopate/common/error.hpp"

namespace syncopate::runtime {
namespace {

WaitRef slot_wait(const lower::SignalTable& table, WaitKind kind, int slot) {
  const auto& s = table.slots.at(static_cast<std::size_t>(slot));
  return {kind, table.rank, slot, s.writers, 0, s.chunk};
}

StepRole role_of(const plan::Chunk& c, int rank) {
  if (c.src != rank && c.dst != rank)
    throw UserError(
        fmt::format("rank {}, chunk {}: issuer-not-endpoint: rank {} issues a chunk "
                    "from rank {} to rank {}",
                    rank, c.id, rank, c.src, c.dst));
  if (c.src == c.dst) return StepRole::local;
  if (c.backend == plan::Backend::nccl) return c.src == rank ? StepRole::nccl_send : StepRole::nccl_recv;
  return c.src == rank ? StepRole::push : StepRole::pull;
}

ChunkStep make_step(const plan::CommPlan& plan, const std::vector<lower::SignalTable>& tables, const plan::Chunk& c,
                    int rank) {
  ChunkStep step{c.id, role_of(c, rank), {}, -1, c.group};
  const bool reads_src = step.role != StepRole::nccl_recv;
  const bool writes_dst = step.role != StepRole::nccl_send;
  // Deps are waited for by reading their landing slots, on the node of the rank they land on.
  // One node: the issuer waits for all of them (an NCCL chunk: the sender). An NCCL chunk
  // between nodes: each half waits for the deps its own node can see (the verifier's
  // dep-off-node rule makes that all of them), the receiver before posting its recv.
  const int src_node = plan::node_of(plan, c.src);
  auto wait_deps = [&](bool on_src_node) {
    for (int d : c.deps) {
      const auto& dep = plan.chunks.at(static_cast<std::size_t>(d));
      if ((plan::node_of(plan, dep.dst) == src_node) != on_src_node) continue;
      const auto& t = tables[dep.dst];
      step.waits.push_back(slot_wait(t, WaitKind::landing, t.landing_slot_of_chunk.at(d)));
    }
  };
  if (step.role == StepRole::nccl_recv && plan::node_of(plan, c.dst) != src_node) wait_deps(false);
  if (reads_src) {
    // Data the chunk forwards must have landed on the source first.
    wait_deps(true);
    const int ready = tables[c.src].ready_slot_of_chunk.at(c.id);
    if (ready >= 0) step.waits.push_back(slot_wait(tables[c.src], WaitKind::ready, ready));
    if (step.role == StepRole::pull) step.waits.push_back({WaitKind::entry, c.src, kEntrySlot, 1, 0, -1});
  }
  if (writes_dst) {
    // A push must not land before the destination started this call: its buffer may still hold
    // the previous call's data being read, or (reduce-add) its own contribution not yet written.
    if (step.role == StepRole::push) step.waits.push_back({WaitKind::entry, c.dst, kEntrySlot, 1, 0, -1});
    const int dst_ready = tables[c.dst].dst_ready_slot_of_chunk.at(c.id);
    if (dst_ready >= 0) step.waits.push_back(slot_wait(tables[c.dst], WaitKind::dst_ready, dst_ready));
    step.landing_slot = tables[c.dst].landing_slot_of_chunk.at(c.id);
  }
  return step;
}

struct Adder {
  int rank = -1;
  int stream = -1;
  friend bool operator==(const Adder&, const Adder&) = default;
};

// The (rank, stream) whose stream runs a reduce-add's add kernel; rank -1 when no rank lists it.
std::vector<Adder> adders(const plan::CommPlan& plan) {
  std::vector<Adder> out(plan.chunks.size());
  for (const auto& program : plan.ranks)
    for (std::size_t s = 0; s < program.streams.size(); ++s)
      for (int id : program.streams[s]) {
        if (id < 0 || id >= static_cast<int>(plan.chunks.size())) continue;  // reported by the caller
        const auto& c = plan.chunks[static_cast<std::size_t>(id)];
        // An NCCL chunk is listed by both ends; its add runs after the recv, on the dst.
        const bool nccl_send_half = c.backend == plan::Backend::nccl && program.rank != c.dst;
        if (!nccl_send_half && out[id].rank < 0) out[id] = {program.rank, static_cast<int>(s)};
      }
  return out;
}

}  // namespace

std::vector<bool> atomic_adds(const plan::CommPlan& plan) {
  const auto adder = adders(plan);
  // Reduce-adds by destination rank: only those can overlap.
  std::vector<std::vector<int>> by_dst(static_cast<std::size_t>(std::max(plan.world_size, 0)));
  for (const auto& c : plan.chunks)
    if (c.op == plan::ChunkOp::reduce_add && c.dst >= 0 && c.dst < plan.world_size) by_dst[c.dst].push_back(c.id);
  std::vector<bool> atomic(plan.chunks.size(), false);
  for (const auto& ids : by_dst)
    for (std::size_t i = 0; i < ids.size(); ++i)
      for (std::size_t j = i + 1; j < ids.size(); ++j) {
        const auto& a = plan.chunks[ids[i]];
        const auto& b = plan.chunks[ids[j]];
        if (a.dst_tensor != b.dst_tensor || !a.dst_box.overlaps(b.dst_box)) continue;
        if (adder[a.id] == adder[b.id] && adder[a.id].rank >= 0) continue;  // one stream: ordered
        atomic[a.id] = true;
        atomic[b.id] = true;
      }
  return atomic;
}

std::string_view to_string(StepRole role) {
  switch (role) {
    case StepRole::push:
      return "push";
    case StepRole::pull:
      return "pull";
    case StepRole::local:
      return "local";
    case StepRole::nccl_send:
      return "nccl-send";
    case StepRole::nccl_recv:
      return "nccl-recv";
  }
  return "?";
}

std::string_view to_string(WaitKind kind) {
  switch (kind) {
    case WaitKind::landing:
      return "landing";
    case WaitKind::ready:
      return "ready";
    case WaitKind::dst_ready:
      return "dst-ready";
    case WaitKind::entry:
      return "entry";
    case WaitKind::exit:
      return "exit";
    case WaitKind::nccl:
      return "nccl";
  }
  return "?";
}

std::vector<StepBatch> step_batches(const std::vector<ChunkStep>& steps) {
  std::vector<StepBatch> out;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const int group = steps[i].group;
    if (!out.empty() && group != plan::kNoGroup && steps[out.back().begin].group == group)
      out.back().end = i + 1;
    else
      out.push_back({i, i + 1});
  }
  return out;
}

RankSchedule make_rank_schedule(const plan::CommPlan& plan, const std::vector<lower::SignalTable>& tables, int rank) {
  if (static_cast<int>(tables.size()) != plan.world_size)
    throw UserError(fmt::format("rank {}: table-count-mismatch: {} signal tables for world_size {}", rank,
                                tables.size(), plan.world_size));
  if (rank < 0 || rank >= plan.world_size || rank >= static_cast<int>(plan.ranks.size()))
    throw UserError(fmt::format("rank {}: rank-out-of-range: world_size {}", rank, plan.world_size));
  if (!plan.nodes.empty() && static_cast<int>(plan.nodes.size()) != plan.world_size)
    throw UserError(fmt::format("rank {}: nodes-count: the plan names {} nodes for world_size {}", rank,
                                plan.nodes.size(), plan.world_size));
  for (const auto& t : tables)
    if (t.landing_slot_of_chunk.size() != plan.chunks.size())
      throw UserError(fmt::format("rank {}: table-chunk-mismatch: table has {} chunks, plan {}", t.rank,
                                  t.landing_slot_of_chunk.size(), plan.chunks.size()));

  RankSchedule schedule;
  schedule.rank = rank;
  // Peers of other nodes are not waited for (their counters are out of reach); only NCCL
  // reaches them, and a recv is posted by its receiver within its own call.
  for (int p = 0; p < plan.world_size; ++p)
    if (p != rank && plan::node_of(plan, p) == plan::node_of(plan, rank))
      schedule.begin_waits.push_back({WaitKind::exit, p, kExitSlot, 1, -1, -1});
  const auto atomic = atomic_adds(plan);
  for (const auto& ids : plan.ranks[rank].streams) {
    auto& steps = schedule.streams.emplace_back();
    for (int id : ids) {
      if (id < 0 || id >= static_cast<int>(plan.chunks.size()))
        throw UserError(fmt::format("ranks[{}]: unknown-chunk: chunk id {} out of range", rank, id));
      auto& step = steps.emplace_back(make_step(plan, tables, plan.chunks[id], rank));
      step.atomic_add = step.role != StepRole::nccl_send && atomic[id];
    }
  }
  const auto& own = tables[rank];
  for (const auto& s : own.slots)
    if (s.kind == lower::SlotKind::landing) schedule.landing_waits.push_back(slot_wait(own, WaitKind::landing, s.slot));
  return schedule;
}

}  // namespace syncopate::runtime

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "syncopate/common/error.hpp"
#include "syncopate/lower/signal_table.hpp"
#include "syncopate/lower/tiling.hpp"
#include "syncopate/plan/expert_parallel.hpp"
#include "syncopate/plan/templates.hpp"
#include "syncopate/runtime/box_copy.hpp"
#include "syncopate/runtime/epoch.hpp"
#include "syncopate/runtime/rank_schedule.hpp"

namespace syncopate::runtime {
namespace {

using plan::Algorithm;
using plan::Backend;
using plan::Collective;

plan::CommPlan make(Collective c, Algorithm a, Backend b, int world, int split = 1) {
  plan::TemplateOptions o;
  o.collective = c;
  o.algorithm = a;
  o.world_size = world;
  o.split = split;
  o.shape = {world * split * 2, 8};
  o.backend = b;
  return plan::make_plan(o);
}

std::vector<lower::SignalTable> landing_tables(const plan::CommPlan& p) {
  return lower::lower(p, lower::TileGrid{1, 1, 1, 1}, {});
}

// How the replay finds the epoch of a call.
struct EpochModel {
  // Each rank's device epoch word before the first call (int32 arithmetic wraps: start near
  // INT32_MAX to cross the wrap).
  std::int32_t first_word = 0;
  // The old protocol under CUDA-graph replay: the epoch the host baked into the recorded work
  // at the first call is what every later call waits for and raises.
  bool baked_at_first_call = false;
  // A chunk lost in one call (ExecutorOptions::drop_chunk): its step runs but never raises its
  // landing slot. Waits are then bounded as on the device: when nothing can move, every wait
  // still blocked gives up (counted in `expired` as (call, chunk of the slot)) and its step goes on.
  int drop_chunk = -1;
  int drop_in_call = 0;
  std::vector<std::pair<int, int>>* expired = nullptr;
};

// Replays the epoch protocol of every rank on the CPU, the way the GPU would run it, with the
// device's int32 arithmetic (epoch.hpp): begin advances the rank's epoch word, a wait holds once
// its slot reached expected_value(word, offset, writers) modulo 2^32, landing slots and the
// entry/exit counters are raised to the raising rank's word. A stream step runs once its waits
// hold; an NCCL send and its recv complete together (rendezvous). Returns false if some step
// can never run (a deadlock in what the executor would issue).
// stale_holds (if given) counts waits on landing slots that held although the slot was last
// raised in an earlier call: the wait let its reader at data of the wrong call.
bool replay(const plan::CommPlan& p, const std::vector<lower::SignalTable>& tables, int epochs, EpochModel model = {},
            int* stale_holds = nullptr) {
  const int w = p.world_size;
  std::vector<RankSchedule> sched;
  for (int r = 0; r < w; ++r) sched.push_back(make_rank_schedule(p, tables, r));
  std::vector<std::vector<std::int32_t>> signals(w), control(w, std::vector<std::int32_t>(kControlSlots, 0));
  for (int r = 0; r < w; ++r) {
    signals[r].assign(tables[r].slots.size(), 0);
    control[r][kEpochSlot] = model.first_word;
    // Counters as the calls before the first would have left them (a word of 0: none).
    control[r][kEntrySlot] = control[r][kExitSlot] = model.first_word;
  }
  std::vector<std::int32_t> baked(w, 0);
  std::vector<std::vector<int>> raised_in(w);  // per slot: the call that last raised it
  for (int r = 0; r < w; ++r) raised_in[r].assign(tables[r].slots.size(), 0);
  int call = 0;
  // The epoch a rank's work of this call uses: its word, or what was baked at the first call.
  auto epoch_of = [&](int r) { return model.baked_at_first_call ? baked[r] : control[r][kEpochSlot]; };
  bool expire = false;  // the bound has run out for every wait blocked now
  auto holds = [&](int r, const std::vector<WaitRef>& waits) {
    std::vector<const WaitRef*> met;
    for (const auto& wr : waits) {
      const std::int32_t v = wr.in_control() ? control[wr.rank][wr.slot] : signals[wr.rank][wr.slot];
      if (signal_reached(v, expected_value(epoch_of(r), wr.epoch_offset, wr.writers))) {
        met.push_back(&wr);
        continue;
      }
      if (!expire) return false;
      model.expired->push_back({call, wr.chunk});
    }
    for (const WaitRef* wr : met)
      if (wr->kind == WaitKind::landing && raised_in[wr->rank][wr->slot] != call && stale_holds != nullptr)
        ++*stale_holds;
    return true;
  };
  for (int e = 1; e <= epochs; ++e) {
    call = e;
    for (int r = 0; r < w; ++r) {
      control[r][kEpochSlot] = next_epoch(control[r][kEpochSlot]);  // begin: advance the word
      if (e == 1) baked[r] = control[r][kEpochSlot];
    }
    enum Phase { kBegin, kStreams, kLanded, kDone };
    std::vector<Phase> phase(w, kBegin);
    std::vector<std::vector<std::size_t>> next(w);
    for (int r = 0; r < w; ++r) next[r].assign(sched[r].streams.size(), 0);
    // NCCL halves whose waits hold, by chunk: both present -> both complete.
    std::map<int, int> ready_halves;
    bool progress = true;
    while (true) {
      if (!progress) {
        // Nothing moves: with bounded waits (a lost chunk) every blocked wait gives up once.
        if (model.expired == nullptr || expire) break;
        expire = true;
      } else {
        expire = false;
      }
      progress = false;
      for (int r = 0; r < w; ++r) {
        const auto& s = sched[r];
        if (phase[r] == kBegin && holds(r, s.begin_waits)) {
          control[r][kEntrySlot] = epoch_of(r);
          phase[r] = kStreams;
          progress = true;
        }
        if (phase[r] == kStreams) {
          bool all_done = true;
          for (std::size_t k = 0; k < s.streams.size(); ++k) {
            const auto& steps = s.streams[k];
            // One batch at a time: a step, or an NCCL group whose members' waits all hold, then
            // all post their halves, and the batch completes once every member's peer half is
            // posted too.
            const auto batches = step_batches(steps);
            while (next[r][k] < steps.size()) {
              const auto batch = *std::find_if(batches.begin(), batches.end(),
                                               [&](const StepBatch& b) { return b.begin == next[r][k]; });
              bool waits_hold = true;
              for (auto i = batch.begin; i < batch.end; ++i) waits_hold = waits_hold && holds(r, steps[i].waits);
              if (!waits_hold) break;
              bool complete = true;
              for (auto i = batch.begin; i < batch.end; ++i) {
                const auto& step = steps[i];
                const bool nccl = step.role == StepRole::nccl_send || step.role == StepRole::nccl_recv;
                if (!nccl) continue;
                ready_halves[step.chunk * 2 + (step.role == StepRole::nccl_send ? 0 : 1)] = 1;
                complete = complete && ready_halves.count(step.chunk * 2) && ready_halves.count(step.chunk * 2 + 1);
              }
              if (!complete) break;
              for (auto i = batch.begin; i < batch.end; ++i)
                if (steps[i].landing_slot >= 0 && !(steps[i].chunk == model.drop_chunk && e == model.drop_in_call)) {
                  const int dst = p.chunks[steps[i].chunk].dst;
                  signals[dst][steps[i].landing_slot] = epoch_of(r);
                  raised_in[dst][steps[i].landing_slot] = call;
                }
              next[r][k] = batch.end;
              progress = true;
            }
            all_done = all_done && next[r][k] == s.streams[k].size();
          }
          if (all_done) {
            phase[r] = kLanded;
            progress = true;
          }
        }
        if (phase[r] == kLanded && holds(r, s.landing_waits)) {
          control[r][kExitSlot] = epoch_of(r);
          phase[r] = kDone;
          progress = true;
        }
      }
    }
    for (int r = 0; r < w; ++r)
      if (phase[r] != kDone) return false;
  }
  return true;
}

TEST(RankSchedule, EveryTemplatePlanCompletesOverSeveralEpochs) {
  for (auto b : {Backend::copy_engine, Backend::sm_copy, Backend::nccl})
    for (auto c : {Collective::all_gather, Collective::reduce_scatter, Collective::all_reduce, Collective::all_to_all})
      for (auto a : {Algorithm::ring, Algorithm::direct, Algorithm::bidir})
        for (int w : {1, 2, 3, 4})
          for (int split : {1, 2}) {
            const auto p = make(c, a, b, w, split);
            EXPECT_TRUE(replay(p, landing_tables(p), 3)) << fmt::format(
                "{} {} {} world {} split {}", plan::to_string(c), plan::to_string(a), plan::to_string(b), w, split);
          }
}

// Multi-node plans (hierarchical, and flat NCCL on uneven nodes): every rank's schedule waits
// only on slots of its own node (other nodes' heaps are not mapped), and the protocol still
// completes call after call.
TEST(RankSchedule, MultiNodePlansWaitOnlyWithinTheirNodeAndComplete) {
  auto check = [](const plan::CommPlan& p, const std::string& what) {
    const auto tables = landing_tables(p);
    for (int r = 0; r < p.world_size; ++r) {
      const RankSchedule s = make_rank_schedule(p, tables, r);
      auto same_node = [&](const WaitRef& w) { return plan::node_of(p, w.rank) == plan::node_of(p, r); };
      for (const auto& w : s.begin_waits) EXPECT_TRUE(same_node(w)) << what << ": rank " << r << " begin";
      for (const auto& steps : s.streams)
        for (const auto& step : steps) {
          for (const auto& w : step.waits)
            EXPECT_TRUE(same_node(w)) << what << ": rank " << r << " chunk " << step.chunk << " waits on rank "
                                      << w.rank;
          // Each half waits for the deps landing on its node: the receiver of an NCCL chunk
          // between nodes for those on its side (a reduce-add into a box still being summed).
          const auto& c = p.chunks[static_cast<std::size_t>(step.chunk)];
          const bool own_half = step.role != StepRole::nccl_recv || plan::node_of(p, c.src) != plan::node_of(p, r);
          if (!own_half) continue;
          for (int d : c.deps) {
            const auto& dep = p.chunks[static_cast<std::size_t>(d)];
            if (plan::node_of(p, dep.dst) != plan::node_of(p, r)) continue;
            const int slot = tables[dep.dst].landing_slot_of_chunk.at(d);
            EXPECT_TRUE(std::any_of(
                step.waits.begin(), step.waits.end(),
                [&](const WaitRef& w) { return w.kind == WaitKind::landing && w.rank == dep.dst && w.slot == slot; }))
                << what << ": rank " << r << " chunk " << c.id << " does not wait for dep " << d;
          }
        }
      EXPECT_EQ(s.begin_waits.size(),
                static_cast<std::size_t>(std::count(p.nodes.begin(), p.nodes.end(), plan::node_of(p, r)) - 1));
    }
    EXPECT_TRUE(replay(p, tables, 3)) << what;
  };
  for (auto c : {Collective::all_gather, Collective::reduce_scatter, Collective::all_reduce, Collective::all_to_all})
    for (auto a : {Algorithm::ring, Algorithm::direct, Algorithm::bidir})
      for (auto b : {Backend::copy_engine, Backend::nccl}) {
        plan::TemplateOptions o;
        o.collective = c;
        o.algorithm = a;
        o.backend = b;
        o.world_size = 4;
        o.nodes = plan::consecutive_nodes(4, 2);
        o.split = 2;
        o.shape = {16, 8};
        check(plan::make_plan(o),
              fmt::format("hierarchical {} {} {}", plan::to_string(c), plan::to_string(a), plan::to_string(b)));
        if (b != Backend::nccl) continue;
        o.world_size = 6;
        o.nodes = {0, 0, 0, 1, 1, 2};
        o.flat = true;
        o.shape = {24, 8};
        check(plan::make_plan(o), fmt::format("flat uneven {} {}", plan::to_string(c), plan::to_string(a)));
      }
}

// The device epoch word (what a captured CUDA graph replays) is right on every call, also across
// the int32 wrap: no wait ever holds on a landing slot raised in an earlier call. An epoch baked
// into the recorded work at the first call (the old protocol, measured wrong at world 2 under
// graph replay) lets the second call's waits hold on the first call's values.
TEST(RankSchedule, DeviceEpochWordReplaysEveryCallAlsoAcrossTheWrap) {
  for (auto c : {Collective::all_gather, Collective::reduce_scatter, Collective::all_reduce, Collective::all_to_all})
    for (auto a : {Algorithm::ring, Algorithm::direct})
      for (int w : {2, 3, 4}) {
        const auto p = make(c, a, Backend::copy_engine, w, 2);
        const auto tables = landing_tables(p);
        const auto name = fmt::format("{} {} world {}", plan::to_string(c), plan::to_string(a), w);
        int stale = 0;
        EXPECT_TRUE(replay(p, tables, 4, {}, &stale)) << name;
        EXPECT_TRUE(replay(p, tables, 5, {.first_word = INT32_MAX - 2}, &stale)) << name << " (crossing the wrap)";
        EXPECT_EQ(stale, 0) << name;
      }
}

// A chunk lost in one call (what tests/gpu/test_graphs_gpu.py's missing-chunk cases do, inside a
// replayed graph and then eagerly) leaves its landing slot at an older epoch; the bounded waits
// on it give up, and the next calls raise and wait for their own epochs again: the monotonic
// scheme needs no repair after a loss. Checked for the all-gather from an input tensor (whose
// local chunks add slots that every first hop waits on) and for every other template, each
// chunk lost in turn: only the lossy call has waits that give up, at least one of them on the
// lost chunk, and no later wait holds on a value of an earlier call.
TEST(RankSchedule, AChunkLostInOneCallLeavesLaterCallsWhole) {
  for (auto c : {Collective::all_gather, Collective::reduce_scatter, Collective::all_reduce})
    for (auto a : {Algorithm::ring, Algorithm::direct, Algorithm::bidir})
      for (int w : {2, 3})
        for (bool input : {false, true}) {
          if (input && c != Collective::all_gather) continue;
          plan::TemplateOptions o;
          o.collective = c;
          o.algorithm = a;
          o.world_size = w;
          o.split = 1;
          o.shape = {w * 2, 8};
          o.backend = Backend::copy_engine;
          if (input) o.input = "a_in";
          const auto p = plan::make_plan(o);
          const auto tables = landing_tables(p);
          for (const auto& lost : p.chunks) {
            const auto name =
                fmt::format("{} {} world {}{}: chunk {} ({} -> {}) lost in call 2", plan::to_string(c),
                            plan::to_string(a), w, input ? " from an input" : "", lost.id, lost.src, lost.dst);
            std::vector<std::pair<int, int>> expired;
            int stale = 0;
            EXPECT_TRUE(replay(p, tables, 4, {.drop_chunk = lost.id, .drop_in_call = 2, .expired = &expired}, &stale))
                << name;
            EXPECT_EQ(stale, 0) << name;
            EXPECT_FALSE(expired.empty()) << name << ": nothing waited for it";
            bool on_lost = false;
            for (const auto& [call, chunk] : expired) {
              EXPECT_EQ(call, 2) << name << ": a wait of call " << call << " gave up (on chunk " << chunk << ")";
              on_lost = on_lost || chunk == lost.id;
            }
            EXPECT_TRUE(on_lost) << name << ": no wait on the lost chunk gave up";
          }
        }
}

TEST(RankSchedule, AnEpochBakedAtTheFirstCallLetsLaterCallsReadStaleChunks) {
  for (auto a : {Algorithm::ring, Algorithm::direct}) {
    const auto p = make(Collective::all_gather, a, Backend::copy_engine, 3);
    const auto tables = landing_tables(p);
    int stale = 0;
    EXPECT_TRUE(replay(p, tables, 1, {.baked_at_first_call = true}, &stale));
    EXPECT_EQ(stale, 0) << "the first call is right either way";
    replay(p, tables, 3, {.baked_at_first_call = true}, &stale);
    EXPECT_GT(stale, 0) << plan::to_string(a) << ": calls 2 and 3 must be seen reading call 1's chunks";
  }
}

// A world-3 NCCL ring step in which every rank posts its send before its recv: ungrouped, each
// send waits for a recv that its peer posts only after its own send completes (a deadlock);
// grouped, the two are issued together and everything completes.
plan::CommPlan send_first_nccl_ring(bool grouped) {
  auto p = make(Collective::all_gather, Algorithm::ring, Backend::nccl, 3);
  for (int r = 0; r < 3; ++r)
    for (auto& list : p.ranks[r].streams)
      std::stable_sort(list.begin(), list.end(), [&](int a, int b) {
        const auto& ca = p.chunks[a];
        const auto& cb = p.chunks[b];
        if (ca.group != cb.group) return ca.group < cb.group;
        return (ca.src == r) > (cb.src == r);  // inside one step: the send first
      });
  if (!grouped)
    for (auto& c : p.chunks) c.group = plan::kNoGroup;
  return p;
}

TEST(RankSchedule, GroupedSendFirstRingCompletesUngroupedDeadlocks) {
  const auto grouped = send_first_nccl_ring(true);
  EXPECT_TRUE(replay(grouped, landing_tables(grouped), 3));
  const auto ungrouped = send_first_nccl_ring(false);
  EXPECT_FALSE(replay(ungrouped, landing_tables(ungrouped), 1));
}

TEST(RankSchedule, StepsCarryTheirGroupAndBatchTogether) {
  const auto p = make(Collective::all_gather, Algorithm::ring, Backend::nccl, 4, 2);
  const auto tables = landing_tables(p);
  for (int r = 0; r < 4; ++r) {
    const auto s = make_rank_schedule(p, tables, r);
    const auto& steps = s.streams.at(0);
    for (const auto& step : steps) EXPECT_EQ(step.group, p.chunks[step.chunk].group);
    const auto batches = step_batches(steps);
    ASSERT_EQ(batches.size(), 6u);  // 3 ring steps x 2 sub-chunks, one send + one recv each
    for (const auto& b : batches) {
      ASSERT_EQ(b.end - b.begin, 2u);
      EXPECT_NE(steps[b.begin].role, steps[b.begin + 1].role);
    }
  }
  // Copy-engine steps have no group: one batch each.
  const auto ce = make(Collective::all_gather, Algorithm::ring, Backend::copy_engine, 4);
  const auto ce_steps = make_rank_schedule(ce, landing_tables(ce), 0).streams.at(0);
  EXPECT_EQ(step_batches(ce_steps).size(), ce_steps.size());
}

TEST(RankSchedule, ReplayDetectsAChunkThatNeverLands) {
  auto p = make(Collective::all_gather, Algorithm::ring, Backend::copy_engine, 3);
  const auto tables = landing_tables(p);
  // Drop the last chunk from its issuer's stream: its landing slot is never raised.
  for (auto& rp : p.ranks)
    for (auto& s : rp.streams)
      if (!s.empty() && s.back() == static_cast<int>(p.chunks.size()) - 1) s.pop_back();
  EXPECT_FALSE(replay(p, tables, 1));
}

TEST(RankSchedule, RolesWaitsAndLandingSlotsOfARing) {
  const auto p = make(Collective::all_gather, Algorithm::ring, Backend::copy_engine, 3);
  const auto tables = landing_tables(p);
  for (int r = 0; r < 3; ++r) {
    const auto s = make_rank_schedule(p, tables, r);
    EXPECT_EQ(s.begin_waits.size(), 2u);
    for (const auto& wr : s.begin_waits) {
      EXPECT_EQ(wr.kind, WaitKind::exit);
      EXPECT_EQ(wr.expected(1), 0);  // nothing to wait for on the first call
      EXPECT_EQ(wr.expected(5), 4);
    }
    std::size_t landing_here = 0;
    for (const auto& c : p.chunks) landing_here += c.dst == r;
    EXPECT_EQ(s.landing_waits.size(), landing_here);
    for (const auto& steps : s.streams)
      for (const auto& step : steps) {
        const auto& c = p.chunks[step.chunk];
        EXPECT_EQ(step.role, c.src == r ? StepRole::push : StepRole::pull);
        EXPECT_EQ(step.landing_slot, tables[c.dst].landing_slot_of_chunk[c.id]);
        std::size_t dep_waits = 0;
        for (const auto& wr : step.waits) {
          if (wr.kind != WaitKind::landing) continue;
          ++dep_waits;
          EXPECT_EQ(wr.expected(3), 3);
        }
        EXPECT_EQ(dep_waits, c.deps.size());
      }
  }
}

TEST(RankSchedule, NcclSendWaitsForDepsAndTheReceiverRaisesTheLanding) {
  const auto p = make(Collective::all_gather, Algorithm::ring, Backend::nccl, 3);
  const auto tables = landing_tables(p);
  for (int r = 0; r < 3; ++r)
    for (const auto& steps : make_rank_schedule(p, tables, r).streams)
      for (const auto& step : steps) {
        const auto& c = p.chunks[step.chunk];
        if (step.role == StepRole::nccl_send) {
          EXPECT_EQ(step.landing_slot, -1);
          EXPECT_EQ(step.waits.size(), c.deps.size());
        } else {
          ASSERT_EQ(step.role, StepRole::nccl_recv);
          EXPECT_EQ(step.landing_slot, tables[r].landing_slot_of_chunk[c.id]);
          EXPECT_TRUE(step.waits.empty());
        }
      }
}

TEST(RankSchedule, ProducerTilesGateTheChunksOfAReduceScatter) {
  const auto p = make(Collective::reduce_scatter, Algorithm::direct, Backend::copy_engine, 2);
  const auto& shape = p.tensors.at("x").shape;
  const lower::TileGrid grid{shape[0], shape[1], 2, 4};
  const auto tables = lower::lower(p, grid, {{"x", lower::AccessRole::produce, 0, 1}});
  EXPECT_TRUE(replay(p, tables, 0));  // zero epochs: only builds the schedules
  for (int r = 0; r < 2; ++r)
    for (const auto& steps : make_rank_schedule(p, tables, r).streams)
      for (const auto& step : steps) {
        const auto& c = p.chunks[step.chunk];
        bool ready = false, dst_ready = false;
        for (const auto& wr : step.waits) {
          ready = ready || (wr.kind == WaitKind::ready && wr.rank == c.src);
          dst_ready = dst_ready || (wr.kind == WaitKind::dst_ready && wr.rank == c.dst);
        }
        EXPECT_TRUE(ready) << "chunk " << c.id;
        EXPECT_TRUE(dst_ready) << "chunk " << c.id;
      }
}

// ---------------------------------------------------------------- reduce-add: who adds, atomics

// Every reduce-add of a template runs on its destination: pulled (copy engine, SM copy) or
// received (NCCL); the pull waits for the source's entry counter and its producer tiles.
TEST(RankScheduleReduceAdd, TemplatesAddOnTheDestination) {
  for (auto b : {Backend::copy_engine, Backend::sm_copy, Backend::nccl})
    for (auto c : {Collective::reduce_scatter, Collective::all_reduce})
      for (auto a : {Algorithm::ring, Algorithm::direct, Algorithm::bidir})
        for (int w : {2, 3, 4}) {
          const auto p = make(c, a, b, w, 2);
          const auto tables = landing_tables(p);
          int adds = 0;
          for (int r = 0; r < w; ++r)
            for (const auto& steps : make_rank_schedule(p, tables, r).streams)
              for (const auto& step : steps) {
                const auto& ch = p.chunks[step.chunk];
                if (ch.op != plan::ChunkOp::reduce_add || step.role == StepRole::nccl_send) continue;
                ++adds;
                const auto where = fmt::format("{} {} {} world {} chunk {}", plan::to_string(c), plan::to_string(a),
                                               plan::to_string(b), w, ch.id);
                EXPECT_EQ(r, ch.dst) << where;
                EXPECT_EQ(step.role, b == Backend::nccl ? StepRole::nccl_recv : StepRole::pull) << where;
                if (step.role != StepRole::pull) continue;
                const bool entry = std::any_of(step.waits.begin(), step.waits.end(), [&](const WaitRef& wr) {
                  return wr.kind == WaitKind::entry && wr.rank == ch.src;
                });
                EXPECT_TRUE(entry) << where;
              }
          EXPECT_EQ(adds, w * (w - 1) * 2) << plan::to_string(c) << " " << plan::to_string(a) << " world " << w;
        }
}

std::vector<int> atomic_steps(const plan::CommPlan& p) {
  const auto tables = landing_tables(p);
  std::vector<int> out;
  for (int r = 0; r < p.world_size; ++r)
    for (const auto& steps : make_rank_schedule(p, tables, r).streams)
      for (const auto& step : steps)
        if (step.atomic_add) out.push_back(step.chunk);
  std::sort(out.begin(), out.end());
  return out;
}

// Ring and direct: each rank adds everything landing on it on its one stream, so no add is
// atomic. Bidir: the owner of a shard receives its last add from both directions on two
// streams; exactly those two adds per (shard, sub-chunk) are atomic (world >= 3).
TEST(RankScheduleReduceAdd, AtomicsOnlyWhereTwoStreamsAddIntoOneBox) {
  for (auto b : {Backend::copy_engine, Backend::sm_copy, Backend::nccl})
    for (auto c : {Collective::reduce_scatter, Collective::all_reduce})
      for (int w : {2, 3, 4, 5})
        for (int split : {1, 2}) {
          const auto where = fmt::format("{} {} world {} split {}", plan::to_string(c), plan::to_string(b), w, split);
          for (auto a : {Algorithm::ring, Algorithm::direct})
            EXPECT_TRUE(atomic_steps(make(c, a, b, w, split)).empty()) << plan::to_string(a) << " " << where;
          const auto p = make(c, Algorithm::bidir, b, w, split);
          std::vector<int> expected;
          for (const auto& ch : p.chunks) {
            if (ch.op != plan::ChunkOp::reduce_add) continue;
            bool other_stream = false;
            for (const auto& o : p.chunks)
              other_stream = other_stream || (o.id != ch.id && o.op == plan::ChunkOp::reduce_add && o.dst == ch.dst &&
                                              o.stream != ch.stream && o.dst_box.overlaps(ch.dst_box));
            if (other_stream) expected.push_back(ch.id);
          }
          EXPECT_EQ(atomic_steps(p), expected) << "bidir " << where;
          EXPECT_EQ(expected.size(), w >= 3 ? static_cast<std::size_t>(2 * w * split) : 0u) << "bidir " << where;
        }
}

// The analysis follows the issue lists, not the templates: a reduce-add pushed by its source
// adds from the source's stream, so two sources adding into one box are concurrent.
TEST(RankScheduleReduceAdd, PushedAddsFromTwoSourcesAreAtomic) {
  auto p = make(Collective::reduce_scatter, Algorithm::direct, Backend::sm_copy, 3);
  for (auto& rp : p.ranks) rp.streams.assign(1, {});
  for (const auto& c : p.chunks) p.ranks[c.src].streams[0].push_back(c.id);  // push every chunk
  std::vector<int> all;
  for (const auto& c : p.chunks) all.push_back(c.id);
  EXPECT_EQ(atomic_steps(p), all);
  const auto flags = atomic_adds(p);
  EXPECT_EQ(std::count(flags.begin(), flags.end(), true), static_cast<long>(p.chunks.size()));
  for (int r = 0; r < 3; ++r) {
    const auto schedule = make_rank_schedule(p, landing_tables(p), r);
    for (const auto& step : schedule.streams.at(0)) {
      EXPECT_EQ(step.role, StepRole::push);
      EXPECT_EQ(step.atomic_add, true);
    }
  }
}

TEST(RankScheduleReduceAdd, DisjointBoxesAndCopiesNeedNoAtomics) {
  // Direct reduce-scatter pushed, but each owner's box shrunk so the two sources' boxes are
  // disjoint halves: no overlap, no atomics.
  auto p = make(Collective::reduce_scatter, Algorithm::direct, Backend::copy_engine, 3);
  for (auto& rp : p.ranks) rp.streams.assign(1, {});
  for (auto& c : p.chunks) {
    p.ranks[c.src].streams[0].push_back(c.id);
    const bool first = (c.dst - c.src + 3) % 3 == 1;  // the owner's left neighbour
    c.box.extent[1] = c.dst_box.extent[1] = 4;
    c.box.offset[1] = c.dst_box.offset[1] = first ? 0 : 4;
  }
  EXPECT_TRUE(atomic_steps(p).empty());
  // All-gather copies never add.
  const auto ag = make(Collective::all_gather, Algorithm::bidir, Backend::sm_copy, 4, 2);
  EXPECT_TRUE(atomic_steps(ag).empty());
  const auto flags = atomic_adds(ag);
  EXPECT_EQ(std::count(flags.begin(), flags.end(), true), 0);
}

TEST(RankSchedule, RejectsAChunkIssuedByAThirdRank) {
  auto p = make(Collective::all_gather, Algorithm::direct, Backend::copy_engine, 3);
  int moved = -1;
  for (const auto& c : p.chunks)
    if (c.src != 2 && c.dst != 2) moved = c.id;
  ASSERT_GE(moved, 0);
  p.ranks[2].streams[0].push_back(moved);
  try {
    make_rank_schedule(p, landing_tables(p), 2);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(fmt::format("rank 2, chunk {}: issuer-not-endpoint", moved)),
              std::string::npos)
        << e.what();
  }
}

// --- The MoE dispatch plan over NCCL (plan/expert_parallel.hpp) ---------------------------------
//
// A recording communicator: each rank's schedule walked batch by batch as the executor issues it
// (RankExecutor::issue_chunks), every NCCL half recorded as the call the runtime would make
// (send or recv, peer, bytes of the chunk's boxes: backends.cpp nccl_post). NCCL matches a
// pair's sends and recvs in the order they are posted, so for every ordered pair (s, d) the
// chunks s sends to d must be the chunks d receives from s, in the same order, of the same size.
struct NcclCall {
  int chunk = -1;
  std::int64_t bytes = 0;
  int group = plan::kNoGroup;
  friend bool operator==(const NcclCall&, const NcclCall&) = default;
};

struct RecordedRank {
  std::map<int, std::vector<NcclCall>> sends, recvs;  // by peer, in posting order
  std::vector<std::vector<int>> batches;              // chunk ids per issued batch
};

RecordedRank record_nccl(const plan::CommPlan& p, const RankSchedule& s) {
  RecordedRank out;
  for (const auto& steps : s.streams)
    for (const auto& batch : step_batches(steps)) {
      auto& ids = out.batches.emplace_back();
      for (auto i = batch.begin; i < batch.end; ++i) {
        const auto& step = steps[i];
        const auto& c = p.chunks[step.chunk];
        ids.push_back(step.chunk);
        if (step.role != StepRole::nccl_send && step.role != StepRole::nccl_recv) continue;
        const auto& src = p.tensors.at(c.tensor);
        const auto& dst = p.tensors.at(c.dst_tensor);
        const std::int64_t bytes =
            total_bytes(box_copies(c.box, src.shape, c.dst_box, dst.shape, plan::dtype_size(src.dtype)));
        if (step.role == StepRole::nccl_send)
          out.sends[c.dst].push_back({step.chunk, bytes, step.group});
        else
          out.recvs[c.src].push_back({step.chunk, bytes, step.group});
      }
    }
  return out;
}

plan::CommPlan moe_nccl(int world, int experts, std::int64_t capacity, std::int64_t hidden) {
  plan::MoeDispatchOptions o;
  o.world_size = world;
  o.local_experts = experts;
  o.capacity = capacity;
  o.hidden = hidden;
  o.backend = Backend::nccl;
  return plan::make_moe_dispatch_plan(o);
}

TEST(RankScheduleMoeNccl, SendsAndRecvsMatchPerPairInOrderAndSize) {
  const std::int64_t capacity = 6, hidden = 10;  // bf16: a slot is 6 * 10 * 2 bytes
  for (int world : {2, 3, 4, 8})
    for (int experts : {1, 3}) {
      const auto p = moe_nccl(world, experts, capacity, hidden);
      const auto tables = lower::lower(p, lower::TileGrid{world * experts * capacity, 16, 2, 16},
                                       {lower::TileAccess{plan::kMoeRecv, lower::AccessRole::consume, 0, -1}});
      std::vector<RecordedRank> rec;
      for (int r = 0; r < world; ++r) rec.push_back(record_nccl(p, make_rank_schedule(p, tables, r)));
      const auto where = fmt::format("world {} experts {}", world, experts);
      for (int s = 0; s < world; ++s)
        for (int d = 0; d < world; ++d) {
          if (s == d) {
            EXPECT_FALSE(rec[s].sends.count(d)) << where << ": rank " << s << " sends to itself";
            continue;
          }
          const auto& sent = rec[s].sends[d];
          EXPECT_EQ(sent, rec[d].recvs[s]) << where << fmt::format(": pair {} -> {}", s, d);
          // One counts message (E int32), then E capacity slots, whatever the counts.
          ASSERT_EQ(sent.size(), static_cast<std::size_t>(1 + experts)) << where;
          EXPECT_EQ(sent[0].bytes, experts * 4) << where;
          EXPECT_EQ(sent[0].chunk, plan::moe_counts_chunk(world, experts, s, d)) << where;
          for (int e = 0; e < experts; ++e) {
            EXPECT_EQ(sent[1 + e].chunk, plan::moe_rows_chunk(world, experts, s, d, e)) << where;
            EXPECT_EQ(sent[1 + e].bytes, capacity * hidden * 2) << where;
            EXPECT_EQ(sent[1 + e].group, ((d - s) % world + world) % world) << where;
          }
        }
      // Issue order on each rank: its 1 + E local chunks one by one, then one group with every
      // counts message, then one group per round with the E sends and E recvs of its rows.
      for (int r = 0; r < world; ++r) {
        const auto& batches = rec[r].batches;
        ASSERT_EQ(batches.size(), static_cast<std::size_t>(1 + experts + world)) << where;
        for (int b = 0; b < 1 + experts; ++b) EXPECT_EQ(batches[b].size(), 1u) << where;
        EXPECT_EQ(batches[1 + experts].size(), static_cast<std::size_t>(2 * (world - 1))) << where;
        for (int i = 1; i < world; ++i)
          EXPECT_EQ(batches[1 + experts + i].size(), static_cast<std::size_t>(2 * experts)) << where;
      }
    }
}

// No NCCL half waits on anything (no sender spins on a peer's slot); the receiver raises every
// landing after its recv; and the protocol completes call after call with the kernel's tables.
TEST(RankScheduleMoeNccl, NoWaitsBeforeTheGroupsAndEveryCallCompletes) {
  for (int world : {1, 2, 3, 5})
    for (int experts : {1, 2}) {
      const auto p = moe_nccl(world, experts, 4, 8);
      const auto tables = lower::lower(p, lower::TileGrid{world * experts * 4, 16, 2, 16},
                                       {lower::TileAccess{plan::kMoeRecv, lower::AccessRole::consume, 0, -1}});
      const auto where = fmt::format("world {} experts {}", world, experts);
      for (int r = 0; r < world; ++r)
        for (const auto& steps : make_rank_schedule(p, tables, r).streams)
          for (const auto& step : steps) {
            if (step.role == StepRole::nccl_send) {
              EXPECT_TRUE(step.waits.empty()) << where << " chunk " << step.chunk;
              EXPECT_EQ(step.landing_slot, -1) << where;
            }
            if (step.role == StepRole::nccl_recv) {
              EXPECT_TRUE(step.waits.empty()) << where << " chunk " << step.chunk;
              EXPECT_GE(step.landing_slot, 0) << where;
            }
          }
      EXPECT_TRUE(replay(p, tables, 3)) << where;
    }
}

// At world 1 every chunk of the MoE dispatch plan is local, so with backend nccl the schedule is
// the copy-engine one step for step: the same waits (each rows chunk behind its counts chunk),
// landing slots and order, no NCCL half, no group (and the executor moves a local step of either
// backend by copy_engine_move). A fault seen with nccl alone at world 1 is not in the schedule.
TEST(RankScheduleMoeNccl, WorldOneIsTheCopyEngineSchedule) {
  for (int experts : {1, 3, 8}) {
    const auto nccl = moe_nccl(1, experts, 4, 8);
    auto copy_engine = nccl;
    for (auto& c : copy_engine.chunks) c.backend = Backend::copy_engine;
    plan::MoeDispatchOptions o;
    o.local_experts = experts;
    o.capacity = 4;
    o.hidden = 8;
    ASSERT_EQ(plan::make_moe_dispatch_plan(o).chunks, copy_engine.chunks) << experts;  // only the backend differs
    const lower::TileGrid grid{experts * 4, 16, 2, 16};
    const std::vector<lower::TileAccess> access{lower::TileAccess{plan::kMoeRecv, lower::AccessRole::consume, 0, -1}};
    const auto tables = lower::lower(nccl, grid, access);
    const auto s = make_rank_schedule(nccl, tables, 0);
    const auto ce = make_rank_schedule(copy_engine, lower::lower(copy_engine, grid, access), 0);
    EXPECT_EQ(s.streams, ce.streams) << experts;
    EXPECT_EQ(s.landing_waits, ce.landing_waits) << experts;
    EXPECT_TRUE(s.begin_waits.empty()) << experts;
    ASSERT_EQ(s.streams.size(), 1u);
    ASSERT_EQ(s.streams[0].size(), static_cast<std::size_t>(1 + experts));
    for (const auto& step : s.streams[0]) {
      EXPECT_EQ(step.role, StepRole::local) << experts;
      EXPECT_EQ(step.group, plan::kNoGroup) << experts;
      // The counts chunk first; each rows chunk waits for its landing.
      const bool counts = step.chunk == plan::moe_counts_chunk(1, experts, 0, 0);
      EXPECT_EQ(step.waits.size(), counts ? 0u : 1u) << experts << " chunk " << step.chunk;
      if (!counts && !step.waits.empty()) {
        EXPECT_EQ(step.waits[0].chunk, plan::moe_counts_chunk(1, experts, 0, 0));
      }
    }
    EXPECT_EQ(s.streams[0][0].chunk, plan::moe_counts_chunk(1, experts, 0, 0));
    EXPECT_TRUE(replay(nccl, tables, 3)) << experts;
  }
}

// The recorder fails on a schedule NCCL would mismatch: one rank lists its rows sends of round 1
// in reverse expert order, so its sends to r + 1 no longer pair with the peer's recvs.
TEST(RankScheduleMoeNccl, RecorderCatchesAPairPostedOutOfOrder) {
  auto p = moe_nccl(3, 2, 4, 8);
  auto& list = p.ranks[0].streams[0];
  const int a = plan::moe_rows_chunk(3, 2, 0, 1, 0), b = plan::moe_rows_chunk(3, 2, 0, 1, 1);
  std::iter_swap(std::find(list.begin(), list.end(), a), std::find(list.begin(), list.end(), b));
  const auto tables = landing_tables(p);
  const auto sender = record_nccl(p, make_rank_schedule(p, tables, 0));
  const auto receiver = record_nccl(p, make_rank_schedule(p, tables, 1));
  EXPECT_NE(sender.sends.at(1), receiver.recvs.at(0));
}

}  // namespace
}  // namespace syncopate::runtime

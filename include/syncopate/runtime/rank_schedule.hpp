// What one rank issues for a plan, and what each issued chunk must wait for.
//
// The executor walks this list; keeping it plain data makes the protocol testable on the CPU.
// Protocol of one call with epoch e (1, 2, ...; no reset between calls):
//  begin   the rank waits until every peer of its node (CommPlan::nodes) has its exit counter
//          at e - 1 (nobody still reads or writes buffers of the previous call; peers of other
//          nodes are reached only by NCCL, whose recvs their receiver posts itself), then the caller puts its inputs in
//          place and the rank sets its entry counter to e;
//  issue   per plan stream, in order, each chunk step waits for its WaitRefs and then moves the
//          chunk; the rank that completes the landing raises the chunk's landing slot. A step
//          that reads a peer's buffer (pull) waits for that peer's entry counter; one that
//          writes a peer's buffer (push) waits for the destination's entry counter too;
//  land    (optional) the rank waits for every landing slot of its own table;
//  end     the rank sets its exit counter to e once it is done with every buffer.
// Plain C++: unit-tested on the CPU.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "syncopate/lower/signal_table.hpp"
#include "syncopate/plan/comm_plan.hpp"
#include "syncopate/runtime/heap_layout.hpp"

namespace syncopate::runtime {

// push: the src rank writes into the dst rank's heap; pull: the dst rank reads the src rank's
// heap; local: src == dst; nccl_send / nccl_recv: the two halves of an NCCL chunk.
enum class StepRole { push, pull, local, nccl_send, nccl_recv };
std::string_view to_string(StepRole role);

// What a wait is for, to name it in a timeout. `nccl` is not a slot wait: an NCCL send or recv
// that did not complete within the bound (its communicator was then aborted); the record names
// the chunk and, as its owner, the peer.
enum class WaitKind { landing, ready, dst_ready, entry, exit, nccl };
std::string_view to_string(WaitKind kind);

// Wait until int32 slot `slot` of `rank`'s signal array (or control array, for entry/exit)
// holds at least (epoch + epoch_offset) * writers.
struct WaitRef {
  WaitKind kind = WaitKind::landing;
  int rank = 0;
  int slot = 0;
  int writers = 1;
  int epoch_offset = 0;
  int chunk = -1;  // the chunk the slot tracks; -1 for entry/exit

  bool in_control() const { return kind == WaitKind::entry || kind == WaitKind::exit; }
  std::int64_t expected(std::int64_t epoch) const { return (epoch + epoch_offset) * writers; }
  friend bool operator==(const WaitRef&, const WaitRef&) = default;
};

struct ChunkStep {
  int chunk = 0;
  StepRole role = StepRole::push;
  std::vector<WaitRef> waits;
  int landing_slot = -1;  // slot on the chunk's dst raised by this step; -1 if the peer raises it
  // The chunk's NCCL group (plan::Chunk::group). Consecutive steps of one stream with the same
  // group are issued together: every member's waits first, then all their sends and recvs
  // between one ncclGroupStart/End, then their landing raises.
  int group = plan::kNoGroup;
  // Reduce-add steps that add on this rank (push, pull, local, nccl-recv): true when another
  // reduce-add into an overlapping box of the same destination may run at the same time, i.e.
  // is added by another rank or on another stream (see atomic_adds()); such an add must be
  // atomic. False for the rest: the add is the only writer of its box then, so it loads, adds
  // and stores plainly (deterministic, full speed).
  bool atomic_add = false;
  friend bool operator==(const ChunkStep&, const ChunkStep&) = default;
};

struct RankSchedule {
  int rank = 0;
  std::vector<WaitRef> begin_waits;             // peers' exit counters
  std::vector<std::vector<ChunkStep>> streams;  // by plan stream index
  std::vector<WaitRef> landing_waits;           // every chunk landing on this rank
};

// Consecutive steps of one stream issued as one unit: [begin, end) positions. A step with no
// group is a batch of its own.
struct StepBatch {
  std::size_t begin = 0;
  std::size_t end = 0;
};
std::vector<StepBatch> step_batches(const std::vector<ChunkStep>& steps);

// Per chunk of the plan: does its add need atomics? Only reduce-add chunks can be true. Each
// reduce-add has one adder, the (rank, stream) whose stream runs its add kernel: the dst for a
// pulled, local or NCCL chunk, the src for a pushed one. Adds of one adder are ordered by its
// stream; two reduce-adds into overlapping boxes of one dst tensor with different adders may
// run at the same time, so both are atomic. (Conservative: an order through deps is not looked
// for; the templates need none.)
std::vector<bool> atomic_adds(const plan::CommPlan& plan);

// Throws UserError naming rank and chunk when a rank issues a chunk it is neither src nor dst
// of, or the tables do not match the plan.
RankSchedule make_rank_schedule(const plan::CommPlan& plan, const std::vector<lower::SignalTable>& tables, int rank);

}  // namespace syncopate::runtime

// Plans of expert parallelism (issue 19): the token all-to-all of a mixture-of-experts layer,
// whose row counts are known only at run time.
//
// Each of the W ranks holds E_loc = local_experts experts (rank j: experts j*E_loc ..
// (j+1)*E_loc - 1). How many of rank r's rows go to expert e of rank j is decided by the router,
// call by call, and bounded by `capacity`. Tensors (the same on every rank):
//   send_counts int32 [W, E_loc]     [j, e]: rows this rank sends to expert e of rank j (input)
//   recv_counts int32 [W, E_loc]     [s, e]: rows this rank receives from rank s for its expert e
//   x_send      [W * E_loc * C, H]   slot (j, e) = rows (j * E_loc + e) * C .. + C: the rows
//                                    for expert e of rank j, the first n of the slot
//   x_recv      [W * E_loc * C, H]   slot (s, e): the rows from rank s for local expert e
// Rows, not a 4-d tensor, so that a tile of a grouped GEMM over x_recv's rows (block_m dividing
// C) reads exactly one slot, and lowering maps it to exactly one chunk. The plan is the
// all-to-all of x_send into x_recv along dim 0, split in E_loc sub-chunks (its collective, whose
// coverage the verifier proves on the capacity boxes), preceded by the all-to-all of the counts:
//   counts chunk r -> j: send_counts[j, :] on r -> recv_counts[r, :] on j
//   rows chunk (r -> j, e): slot (j, e) of x_send on r -> slot (r, e) of x_recv on j,
//                           runtime_rows {dim 0, recv_counts, index r * E_loc + e}, depending on
//                           counts chunk r -> j
// Pushed by the source, one stream per rank, in rounds i = 0 .. W-1 (peer r + i: the local block
// first), each round the counts chunk, then one rows chunk per expert. A consumer of expert e's
// rows from rank s waits for exactly chunk (s -> r, e) and reads its count from recv_counts.
// Backend nccl: the chunks keep their ids, but both ends list every chunk between two ranks, in
// one global order: the rank's local chunks, then group 0 (every counts chunk between two ranks:
// one ncclGroupStart/End), then group i for round i = 1 .. W-1 (the E_loc rows chunks to r + i
// and from r - i). NCCL sizes are host values, so a rows chunk sends its whole capacity slot
// (C * H elements) whatever its count; the count travels on the device (the counts group) and
// the consumer computes only that many rows. Rows chunks between two ranks have no deps: the
// receiver's stream runs the counts group before the rows groups, so the count has landed
// before the rows do (the verifier proves it from stream order), and no sender waits on a peer.
#pragma once

#include <cstdint>
#include <string>

#include "syncopate/plan/comm_plan.hpp"

namespace syncopate::plan {

struct MoeDispatchOptions {
  int world_size = 1;
  int local_experts = 1;
  std::int64_t capacity = 1;  // most rows one expert receives from one rank per call
  std::int64_t hidden = 1;
  DType dtype = DType::bf16;
  Backend backend = Backend::copy_engine;
};

// Tensor names of the plan.
inline constexpr const char* kMoeSendCounts = "send_counts";
inline constexpr const char* kMoeRecvCounts = "recv_counts";
inline constexpr const char* kMoeSend = "x_send";
inline constexpr const char* kMoeRecv = "x_recv";

// Throws ShapeError naming the option (world size, experts, capacity, hidden < 1).
CommPlan make_moe_dispatch_plan(const MoeDispatchOptions& options);

// Ids of the plan's chunks: the counts chunk src -> dst and the rows chunk (src -> dst, e).
int moe_counts_chunk(int world_size, int local_experts, int src, int dst);
int moe_rows_chunk(int world_size, int local_experts, int src, int dst, int expert);

}  // namespace syncopate::plan

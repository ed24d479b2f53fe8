// Small hand-made calls and a round-number calibration, shared by the simulator tests.
//
// The calibration is chosen so the arithmetic can be done by hand:
//   tile 128x128 over K=1000 on one SM: 1 us overhead + 2*128*128*1000 / 8.192e6 = 5 us (the
//   device has `sms` SMs, 2 unless a test asks for more, of 8.192 TFLOP/s each);
//   the fused GEMM runs on sms less the SMs it leaves its backend (sim/reserved_sms.hpp: 4 for
//   the copy engine's consumer, 12 for its producer, 20 SM copy, 24 NCCL), at least 1: one
//   worker on the 2-SM device, two on the 6-SM one (`fused_round_calibration`, copy engine);
//   sequential, kernel-level and the GEMM alone run on every SM;
//   a 128 x 1000 bf16 chunk is 256000 bytes: 10 us at 25.6 GB/s, + 1 us latency;
//   launch 2 us, event sync 3 us.
#pragma once

#include <string>
#include <vector>

#include "syncopate/sim/calibration.hpp"
#include "syncopate/sim/fused_call.hpp"

namespace syncopate::sim::testing {

inline std::string round_calibration_json(double slowdown = 1.0, int concurrency = 4, double bandwidth_gbps = 25.6,
                                          int sms = 2) {
  return R"({
  "version": 1,
  "device": "hand-made test device",
  "sources": {"gemm.peak_tflops": "chosen so a 128x128x1000 tile takes 4 us of math"},
  "gpu": {"sms": )" +
         std::to_string(sms) + R"(, "egress_gbps": 1000, "ingress_gbps": 1000, "local_copy_gbps": 1000},
  "gemm": {"peak_tflops": )" +
         std::to_string(8.192 * sms) + R"(, "mma_efficiency": 1.0, "tile_overhead_us": 1},
  "overheads": {"launch_us": 2, "sync_us": 3},
  "backends": {
    "copy-engine": {"bandwidth_gbps": )" +
         std::to_string(bandwidth_gbps) + R"(, "latency_us": 1, "signal_latency_us": 0,
                    "concurrency": )" +
         std::to_string(concurrency) + R"(, "sms": 0, "compute_slowdown": )" + std::to_string(slowdown) + R"(},
    "sm-copy": {"bandwidth_gbps": 25.6, "latency_us": 1, "signal_latency_us": 0,
                "concurrency": 4, "sms": 1, "compute_slowdown": 1},
    "nccl": {"bandwidth_gbps": 25.6, "latency_us": 1, "signal_latency_us": 0,
             "concurrency": 4, "sms": 1, "compute_slowdown": 1}
  }
})";
}

inline Calibration round_calibration(double slowdown = 1.0, int concurrency = 4, double bandwidth_gbps = 25.6,
                                     int sms = 2) {
  return parse_calibration(round_calibration_json(slowdown, concurrency, bandwidth_gbps, sms), "round.json");
}

// The round device with 6 SMs: a fused copy-engine consumer keeps 2 workers (6 less the 4 it
// leaves the wait/signal kernels), so the fused hand timelines can show two tiles side by side.
inline Calibration fused_round_calibration(double slowdown = 1.0, int concurrency = 4, double bandwidth_gbps = 25.6) {
  return round_calibration(slowdown, concurrency, bandwidth_gbps, 6);
}

inline plan::Chunk rows_chunk(int id, const std::string& tensor, std::int64_t row, int src, int dst, int stream = 0) {
  plan::Chunk c;
  c.id = id;
  c.tensor = c.dst_tensor = tensor;
  c.box = c.dst_box = {{row, 0}, {128, 1000}};
  c.src = src;
  c.dst = dst;
  c.stream = stream;
  return c;
}

// AG+GEMM on 2 ranks: x is 256 x 1000, rank r owns rows [128r, 128r+128); chunk 0 carries rank
// 0's rows to rank 1, chunk 1 rank 1's rows to rank 0. GEMM 256 x 256 x 1000, tiles 128x128:
// tiles 0,1 read rows 0..127, tiles 2,3 rows 128..255.
inline FusedCall two_rank_all_gather(const std::vector<int>& rank0_order, const std::vector<int>& rank1_order) {
  FusedCall call;
  auto& p = call.plan;
  p.collective.kind = plan::Collective::all_gather;
  p.collective.tensor = "x";
  p.world_size = 2;
  p.tensors["x"] = {{256, 1000}, plan::DType::bf16, "row-major"};
  p.chunks = {rows_chunk(0, "x", 0, 0, 1), rows_chunk(1, "x", 128, 1, 0)};
  p.ranks = {{0, {{0}}}, {1, {{1}}}};
  call.gemm = {256, 256, 1000, 128, 128};
  for (int r = 0; r < 2; ++r) {
    lower::SignalTable t;
    t.rank = r;
    const int landing = 1 - r;  // the chunk that lands on r
    t.slots = {{0, lower::SlotKind::landing, landing, 1}};
    t.landing_slot_of_chunk = {r == 1 ? 0 : -1, r == 0 ? 0 : -1};
    t.ready_slot_of_chunk = {-1, -1};
    t.dst_ready_slot_of_chunk = {-1, -1};
    t.tile_waits.assign(4, {});
    t.tile_notifies.assign(4, {});
    const int first_remote_tile = r == 0 ? 2 : 0;
    t.tile_waits[first_remote_tile] = {0};
    t.tile_waits[first_remote_tile + 1] = {0};
    call.tables.push_back(t);
  }
  call.orders = {{0, schedule::OrderKind::arrival, rank0_order}, {1, schedule::OrderKind::arrival, rank1_order}};
  return call;
}

// GEMM+RS-like producer on 2 ranks: rank 0's tiles 0 and 1 write rows 0..127 of c, which chunk 0
// sends to rank 1 as soon as both are written. Rank 1 sends nothing.
inline FusedCall two_rank_producer() {
  FusedCall call;
  auto& p = call.plan;
  p.collective.kind = plan::Collective::custom;
  p.world_size = 2;
  p.tensors["c"] = {{256, 1000}, plan::DType::bf16, "row-major"};
  p.chunks = {rows_chunk(0, "c", 0, 0, 1)};
  p.ranks = {{0, {{0}}}, {1, {}}};
  call.gemm = {256, 256, 1000, 128, 128};
  lower::SignalTable t0;
  t0.rank = 0;
  t0.slots = {{0, lower::SlotKind::ready, 0, 2}};
  t0.landing_slot_of_chunk = {-1};
  t0.ready_slot_of_chunk = {0};
  t0.dst_ready_slot_of_chunk = {-1};
  t0.tile_waits.assign(4, {});
  t0.tile_notifies = {{0}, {0}, {}, {}};
  lower::SignalTable t1;
  t1.rank = 1;
  t1.slots = {{0, lower::SlotKind::landing, 0, 1}};
  t1.landing_slot_of_chunk = {0};
  t1.ready_slot_of_chunk = {-1};
  t1.dst_ready_slot_of_chunk = {-1};
  t1.tile_waits.assign(4, {});
  t1.tile_notifies.assign(4, {});
  call.tables = {t0, t1};
  call.orders = {{0, schedule::OrderKind::arrival, {0, 1, 2, 3}}, {1, schedule::OrderKind::arrival, {0, 1, 2, 3}}};
  return call;
}

}  // namespace syncopate::sim::testing

// Calibration: the measured device numbers the simulator turns into times.
//
// A calibration file is versioned JSON (see calib/h200.json and docs/SIMULATOR.md). Every field
// is read with a checked accessor; a missing, misspelt or out-of-range field throws
// CalibrationError naming the source and the JSON path, e.g.
// `h200.json: backends.nccl.bandwidth_gbps: expected a number > 0, got -3`.
// Units: microseconds for times, GB/s (1e9 bytes per second) for bandwidths, TFLOP/s for rates.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "syncopate/common/error.hpp"
#include "syncopate/plan/enums.hpp"

namespace syncopate::sim {

inline constexpr int kCalibrationVersion = 1;

// How one chunk backend behaves.
struct BackendModel {
  double bandwidth_gbps = 0;     // one (src, dst) link carrying this backend's chunks
  double latency_us = 0;         // fixed cost per chunk, paid after its bytes are through
  double signal_latency_us = 0;  // from "landed" to the waiter seeing the signal (and the
                                 // producer's ready signal reaching the issuer)
  int concurrency = 1;           // chunks of this backend one GPU can have in flight at once
                                 // (copy engines per GPU; SM-copy lanes; NCCL channels)
  int sms = 0;                   // SMs taken from compute while this backend is used on a GPU
  double compute_slowdown = 1;   // compute runs this many times slower while this backend's
                                 // chunks are moving on the GPU (shared HBM / L2 / SMs)
  // Optional (JSON backends.<b>.bandwidth_under_compute_gbps; absent: bandwidth_gbps): a link's
  // bandwidth while a GEMM kernel runs on either end (the GEMM's HBM / L2 traffic slows the copy).
  double bandwidth_under_compute_gbps = 0;
  // Optional (backends.<b>.issue_us; absent: 0; charged only with `host`, see HostModel): in a
  // fused call, the device-side dispatch of one chunk step of this backend on its side stream
  // (the bounded-wait kernel on its gates ahead of the copy; the copy's own issue and the
  // landing raise are latency_us and signal_latency_us). The k-th chunk of a plan stream enters
  // it no earlier than the kernel's launch plus the issue_us of its first k chunks; the streams
  // run in parallel. Not host time: the host issues nothing per chunk (one CUDA graph launch per
  // call), except for the eager calls of NCCL plans (calib/h200.json says how nccl's is set).
  double issue_us = 0;
  double bandwidth_under_compute() const {
    return bandwidth_under_compute_gbps > 0 ? bandwidth_under_compute_gbps : bandwidth_gbps;
  }
};

// The call path of one fused call as the fused ops run it (docs/RUNTIME.md, "The call path"):
// one CUDA graph launch per call; on the device the epoch advance, the wait for the peers' exit
// counters, (AG+GEMM) the copy of the rank's own shard into the heap, the entry raise; then the
// side streams fork and the fused kernel is launched at once, the chunk steps running on the
// side streams beside it. Times from the call's start, as a user times it:
//   fused kernel launch   = fused_call_us + local shard bytes / gpu.local_copy_gbps (AG+GEMM),
//                           whatever the number of chunks (its first tile starts
//                           overheads.launch_us later)
//   k-th chunk of a plan stream enters it no earlier than that launch + chunks_after_launch_us
//                           (the split graphs: the tail, launched after the head, forks the
//                           side streams) + the issue_us of the stream's first k chunks (then +
//                           overheads.launch_us, like any chunk)
//   call ends no earlier  = fused_call_us + after_launch_us (producer_after_launch_us for
//                           GEMM+RS/AR): when the host returns
// JSON `host`, optional. Absent, no call path is modelled (the kernel launches and the chunks
// enter their streams at the call's start, nothing is copied in first, no issue_us): the
// schedule alone, as the hand-computed tests use it.
struct HostModel {
  bool modelled = false;                // the calibration has `host`
  double fused_call_us = 0;             // call to the fused kernel's launch on the device, less
                                        // the local shard copy: the graph launch's submission,
                                        // the epoch advance, the exit wait, the entry raise, the fork
  double after_launch_us = 0;           // consumers (AG+GEMM): host time of the call beyond
                                        // fused_call_us (the host returns at their sum)
  double producer_after_launch_us = 0;  // producers (GEMM+RS/AR): the same
  double chunks_after_launch_us = 0;    // the side streams' fork after the kernel's launch
                                        // (optional in JSON, 0 when absent: forked with it)
};

// Reduce-add chunks of the copy engine and NCCL land in the destination's staging area and are
// then added into place by an add kernel (docs/RUNTIME.md); the add takes bytes / rate, after the
// transfer and before the signal. JSON `reduce_add`, optional; 0 (absent): no add step.
// SM-copy reduce-adds read the remote box inside the add kernel: their transfer is the add.
struct ReduceAddModel {
  double add_gbps = 0;                // chunk bytes per second with the GPU otherwise idle
  double add_under_compute_gbps = 0;  // while a GEMM kernel runs on the destination
};

// Kernel-level overlap as syncopate.kernel_level runs it from Python (JSON `kernel_level`,
// optional; all 0 / 1 when absent: no host path, as before). Per rank, the host issues the
// call's operations one by one: each collective call (one per chunk the rank issues) and each
// GEMM launch (one per GEMM kernel) starts on the GPU no earlier than its host enqueue, and the
// call ends no earlier than the last enqueue (docs/SIMULATOR.md, "Kernel-level mode").
struct KernelLevelModel {
  double call_us = 0;        // before the first operation: the op's checks and setup
  double collective_us = 0;  // host time of one asynchronous collective call (torch.distributed)
  double gemm_us = 0;        // host time of one GEMM launch of a piece (torch.mm, cuBLAS)
  // On the GPU, per chunk: what one collective call costs the communication stream beyond its
  // bytes (NCCL's kernel launch and the rendezvous with the peer's call), paid like latency_us.
  double chunk_latency_us = 0;
  // A GEMM with an SM carveout (cuBLASLt with an SM count target) runs this many times slower
  // per tile than the model's GEMM, on top of the SMs it gives up (measured; 1: none).
  double carveout_slowdown = 1;
};

// The network between nodes (JSON `network`, optional): each GPU has its own NIC
// (rail-aligned, e.g. one 400 Gb/s NDR InfiniBand port per GPU). A chunk between ranks of
// different nodes (CommPlan::nodes; always NCCL) moves over it instead of NVLink: its bytes
// share the source GPU's NIC egress and the destination GPU's NIC ingress (bandwidth_gbps
// each way) and it lands latency_us (instead of the backend's latency) after its last byte,
// plus the backend's signal latency. It uses NCCL's lanes (concurrency) like any NCCL chunk.
// `estimated` (JSON, required in the section): true until the numbers are measured; the CLI
// says so next to any prediction that uses them. Absent: a plan spanning nodes cannot be
// simulated (UserError naming the section).
struct NetworkModel {
  bool modelled = false;
  double bandwidth_gbps = 0;  // per GPU NIC, each way (GB/s; 400 Gb/s = 50 GB/s)
  double latency_us = 0;      // per chunk, after its last byte
  bool estimated = true;
};

// One (src, dst, backend) link whose bandwidth differs from the backend's default.
struct LinkOverride {
  int src = 0;
  int dst = 0;
  plan::Backend backend = plan::Backend::copy_engine;
  double bandwidth_gbps = 0;
};

// The GEMM cost model of one persistent tiled kernel.
//   tile time = tile_overhead_us + 2*BLOCK_M*BLOCK_N*K / (peak_tflops*1e6/sms * mma_efficiency)
// (in microseconds); tiles run in waves over the SMs, so wave quantisation falls out of the
// simulation rather than being a formula.
struct GemmModel {
  double peak_tflops = 0;       // dense bf16 peak of the whole GPU
  double mma_efficiency = 1;    // fraction of per-SM peak a tile's main loop reaches
  double tile_overhead_us = 0;  // prologue + epilogue (store) of one tile
  // FP8 (e4m3 / e5m2 operands): the dense peak of the whole GPU, JSON gemm.fp8 {peak_tflops,
  // estimated}; absent: twice peak_tflops (Hopper's dense FP8 rate is twice its bf16 rate),
  // estimated. The same mma_efficiency and tile_overhead_us apply.
  double fp8_peak_tflops = 0;
  bool fp8_estimated = true;
};

// Sequence-parallel attention (sim/attention_model.hpp): measured rates of one GPU, fp16/bf16.
// Rates count the FLOPs a kernel must do: 4 * batch * heads * S_q * S_kv * head_dim, half of
// it for a causal square.
struct AttentionModel {
  bool modelled = false;             // the calibration has `attention`
  double library_tflops = 0;         // torch SDPA (flash / cuDNN), non-causal
  double library_causal_tflops = 0;  // the same, causal
  double kernel_tflops = 0;          // Syncopate's attention kernel (kernels/attention.py)
  double kernel_causal_tflops = 0;
  double wait_overhead = 1;  // transformed / untransformed kernel, nothing to wait for
  double wait_overhead_causal = 1;
  double merge_gbps = 0;  // the sequential ring's per-step log-sum-exp merge (fp32 o)
  bool estimated = true;
};

struct Calibration {
  int version = kCalibrationVersion;
  std::string device;             // free text: what was measured
  int sms = 0;                    // streaming multiprocessors per GPU
  double egress_gbps = 0;         // all of one GPU's outgoing interconnect bandwidth
  double ingress_gbps = 0;        // all of its incoming interconnect bandwidth
  double local_copy_gbps = 0;     // a chunk whose src == dst (device-to-device copy), the copy
                                  // of a GEMM+RS/AR result out of the heap and of an AG+GEMM's
                                  // own shard into it (fused calls)
  double launch_overhead_us = 0;  // one kernel launch (and the gap between stream-ordered kernels)
  double sync_overhead_us = 0;    // one cross-stream event wait / host-visible synchronisation
  GemmModel gemm;
  HostModel host;
  KernelLevelModel kernel_level;
  ReduceAddModel reduce_add;
  NetworkModel network;
  AttentionModel attention;
  std::array<BackendModel, 3> backends{};  // indexed by plan::Backend
  std::vector<LinkOverride> links;

  const BackendModel& backend(plan::Backend b) const { return backends.at(static_cast<std::size_t>(b)); }
  // Bandwidth of the (src, dst) link for backend b, overrides first.
  double link_bandwidth_gbps(int src, int dst, plan::Backend b) const;
  // The same while a GEMM runs on src or dst: scaled by the backend's under-compute ratio.
  double link_bandwidth_under_compute_gbps(int src, int dst, plan::Backend b) const;
  // Time of one tile of block_m x block_n over depth k, in microseconds.
  // One tile's time; `dtype` is the operands' (FP8 runs at gemm.fp8_peak_tflops).
  double tile_time_us(std::int64_t block_m, std::int64_t block_n, std::int64_t k,
                      plan::DType dtype = plan::DType::bf16) const;
};

// `source` names the input in error messages (a file name, or "<string>").
Calibration parse_calibration(std::string_view json_text, std::string_view source = "<string>");
Calibration load_calibration(const std::filesystem::path& path);
std::string calibration_to_json(const Calibration& calib, int indent = 2);

}  // namespace syncopate::sim

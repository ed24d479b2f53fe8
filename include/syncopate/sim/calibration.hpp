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

// A calibration that cannot be read or holds an impossible number; names the JSON path.
class CalibrationError : public UserError {
 public:
  using UserError::UserError;
};

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
  double peak_tflops = 0;      // dense bf16 peak of the whole GPU
  double mma_efficiency = 1;   // fraction of per-SM peak a tile's main loop reaches
  double tile_overhead_us = 0; // prologue + epilogue (store) of one tile
};

struct Calibration {
  int version = kCalibrationVersion;
  std::string device;             // free text: what was measured
  int sms = 0;                    // streaming multiprocessors per GPU
  double egress_gbps = 0;         // all of one GPU's outgoing interconnect bandwidth
  double ingress_gbps = 0;        // all of its incoming interconnect bandwidth
  double local_copy_gbps = 0;     // a chunk whose src == dst (device-to-device copy)
  double launch_overhead_us = 0;  // one kernel launch (and the gap between stream-ordered kernels)
  double sync_overhead_us = 0;    // one cross-stream event wait / host-visible synchronisation
  // Measured cost of one fused call beyond what the model predicts, per collective (indexed by
  // plan::Collective; JSON overheads.fused_call_us, optional, 0 when absent): the host issue
  // path, and for reduce-scatter / all-reduce the reduction tail the model does not capture.
  // The auto-choice adds it to the fused time before comparing with sequential.
  std::array<double, 5> fused_call_overhead_us{};
  double fused_call_overhead(plan::Collective c) const {
    return fused_call_overhead_us.at(static_cast<std::size_t>(c));
  }
  GemmModel gemm;
  std::array<BackendModel, 3> backends{};  // indexed by plan::Backend
  std::vector<LinkOverride> links;

  const BackendModel& backend(plan::Backend b) const {
    return backends.at(static_cast<std::size_t>(b));
  }
  // Bandwidth of the (src, dst) link for backend b, overrides first.
  double link_bandwidth_gbps(int src, int dst, plan::Backend b) const;
  // Time of one tile of block_m x block_n over depth k, in microseconds.
  double tile_time_us(std::int64_t block_m, std::int64_t block_n, std::int64_t k) const;
};

// `source` names the input in error messages (a file name, or "<string>").
Calibration parse_calibration(std::string_view json_text, std::string_view source = "<string>");
Calibration load_calibration(const std::filesystem::path& path);
std::string calibration_to_json(const Calibration& calib, int indent = 2);

}  // namespace syncopate::sim

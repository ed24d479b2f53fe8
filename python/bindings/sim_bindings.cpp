// syncopate._core: the simulator (calibration, predicted timelines, traces) and auto-choice.
//
// Calibrations and results are read-only views; a calibration is edited through its JSON.
#include <exception>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "enum_arg.hpp"
#include "error_translation.hpp"
#include "syncopate/sim/attention_model.hpp"
#include "syncopate/sim/autotune.hpp"
#include "syncopate/sim/reserved_sms.hpp"
#include "syncopate/sim/calibration.hpp"
#include "syncopate/sim/fused_call.hpp"
#include "syncopate/sim/simulator.hpp"
#include "syncopate/sim/timeline.hpp"
#include "syncopate/sim/trace.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace syncopate::python {
namespace {

// "a, b" spellings -> enum values, naming the argument on a bad one.
template <class E>
std::vector<E> enum_list(const std::vector<std::string>& names, std::string_view argument) {
  std::vector<E> values;
  values.reserve(names.size());
  for (const auto& name : names) values.push_back(enum_arg<E>(name, argument));
  return values;
}

void bind_calibration(nb::module_& m) {
  nb::class_<sim::Calibration>(m, "Calibration", "Measured device numbers for the simulator (see docs/SIMULATOR.md).")
      .def_ro("version", &sim::Calibration::version)
      .def_ro("device", &sim::Calibration::device)
      .def_ro("sms", &sim::Calibration::sms)
      .def_ro("egress_gbps", &sim::Calibration::egress_gbps)
      .def_ro("ingress_gbps", &sim::Calibration::ingress_gbps)
      .def_ro("launch_overhead_us", &sim::Calibration::launch_overhead_us)
      .def(
          "tile_time_us",
          [](const sim::Calibration& c, std::int64_t block_m, std::int64_t block_n, std::int64_t k,
             std::string_view dtype) {
            return c.tile_time_us(block_m, block_n, k, enum_arg<plan::DType>(dtype, "dtype"));
          },
          "block_m"_a, "block_n"_a, "k"_a, "dtype"_a = "bf16")
      .def_prop_ro("fp8_peak_tflops", [](const sim::Calibration& c) { return c.gemm.fp8_peak_tflops; })
      .def_prop_ro("fp8_estimated", [](const sim::Calibration& c) { return c.gemm.fp8_estimated; })
      .def(
          "link_bandwidth_gbps",
          [](const sim::Calibration& c, int src, int dst, std::string_view backend) {
            return c.link_bandwidth_gbps(src, dst, enum_arg<plan::Backend>(backend, "backend"));
          },
          "src"_a, "dst"_a, "backend"_a)
      .def("to_json", &sim::calibration_to_json, "indent"_a = 2)
      .def("__getstate__", [](const sim::Calibration& c) { return sim::calibration_to_json(c, -1); })
      .def("__setstate__", [](sim::Calibration& c, const std::string& state) {
        new (&c) sim::Calibration(sim::parse_calibration(state, "<pickle>"));
      });

  m.def("parse_calibration", &sim::parse_calibration, "text"_a, "source"_a = "<string>",
        "Reads a calibration from JSON; raises CalibrationError naming the JSON path.");
  m.def("load_calibration", &sim::load_calibration, "path"_a);
}

void bind_timelines(nb::module_& m) {
  nb::class_<sim::GemmShape>(m, "GemmShape", "The per-rank GEMM C[M x N] = A[M x K] B[K x N], tiled.")
      .def(
          "__init__",
          [](sim::GemmShape* self, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t block_m,
             std::int64_t block_n) {
            new (self) sim::GemmShape{m, n, k, block_m, block_n};
          },
          "m"_a, "n"_a, "k"_a, "block_m"_a = 128, "block_n"_a = 256)
      .def_rw("m", &sim::GemmShape::m)
      .def_rw("n", &sim::GemmShape::n)
      .def_rw("k", &sim::GemmShape::k)
      .def_rw("block_m", &sim::GemmShape::block_m)
      .def_rw("block_n", &sim::GemmShape::block_n)
      .def_prop_rw(
          "dtype", [](const sim::GemmShape& g) { return std::string(plan::to_string(g.dtype)); },
          [](sim::GemmShape& g, std::string_view dtype) { g.dtype = enum_arg<plan::DType>(dtype, "dtype"); },
          "The operands' dtype (f8e4m3 / f8e5m2 run at the calibration's FP8 rate).")
      .def_rw("tile_scale", &sim::GemmShape::tile_scale,
              "Run-time row counts: tile_scale[r][t] is the share of a full tile's work tile t of rank r does "
              "(0: past its slot's count). Empty: every tile full.")
      .def_rw("chunk_rows", &sim::GemmShape::chunk_rows,
              "Run-time rows moved: chunk_rows[c] of chunk c's capacity positions move (SM-copy chunks with "
              "runtime_rows; other chunks move their whole box). Empty: whole boxes.")
      .def("grid", &sim::GemmShape::grid)
      .def("flops", &sim::GemmShape::flops);

  nb::class_<sim::ChunkTiming>(m, "ChunkTiming", "One chunk's life, microseconds from the call's start.")
      .def_ro("chunk", &sim::ChunkTiming::chunk)
      .def_ro("src", &sim::ChunkTiming::src)
      .def_ro("dst", &sim::ChunkTiming::dst)
      .def_prop_ro("backend", [](const sim::ChunkTiming& c) { return enum_str(c.backend); })
      .def_ro("bytes", &sim::ChunkTiming::bytes)
      .def_ro("ready", &sim::ChunkTiming::ready)
      .def_ro("start", &sim::ChunkTiming::start)
      .def_ro("transfer_end", &sim::ChunkTiming::transfer_end)
      .def_ro("arrival", &sim::ChunkTiming::arrival)
      .def_ro("add_us", &sim::ChunkTiming::add_us);

  nb::class_<sim::RankEnd>(m, "RankEnd", "How one rank's call ends: kernel launch, GPU end, copy-out, host return.")
      .def_ro("kernel_launch", &sim::RankEnd::kernel_launch)
      .def_ro("gpu_end", &sim::RankEnd::gpu_end)
      .def_ro("copy_out_start", &sim::RankEnd::copy_out_start)
      .def_ro("copy_out_end", &sim::RankEnd::copy_out_end)
      .def_ro("host_return", &sim::RankEnd::host_return)
      .def_ro("end", &sim::RankEnd::end);

  nb::class_<sim::TileTiming>(m, "TileTiming", "One tile's run on one SM worker, in microseconds.")
      .def_ro("rank", &sim::TileTiming::rank)
      .def_ro("tile", &sim::TileTiming::tile)
      .def_ro("worker", &sim::TileTiming::worker)
      .def_ro("kernel", &sim::TileTiming::kernel)
      .def_ro("claimed", &sim::TileTiming::claimed)
      .def_ro("start", &sim::TileTiming::start)
      .def_ro("end", &sim::TileTiming::end);

  nb::class_<sim::Timeline>(m, "Timeline", "Predicted chunk and tile timings of one call on all ranks.")
      .def_ro("label", &sim::Timeline::label)
      .def_ro("world_size", &sim::Timeline::world_size)
      .def_ro("workers", &sim::Timeline::workers)
      .def_ro("chunks", &sim::Timeline::chunks)
      .def_ro("tiles", &sim::Timeline::tiles)
      .def_ro("total_us", &sim::Timeline::total_us)
      .def_ro("rank_ends", &sim::Timeline::rank_ends)
      .def("chrome_trace_json", &sim::chrome_trace_json,
           "Chrome / Perfetto trace-event JSON (open in ui.perfetto.dev).")
      .def(
          "svg",
          [](const sim::Timeline& t, int width, std::string title) {
            sim::SvgOptions options;
            options.width = width;
            options.title = std::move(title);
            return sim::svg_timeline(t, options);
          },
          "width"_a = 1200, "title"_a = "", "An SVG picture of the timeline.");

  nb::class_<sim::Prediction>(m, "Prediction", "Predicted times (microseconds) of one call, four ways.")
      .def_ro("gemm_alone_us", &sim::Prediction::gemm_alone_us)
      .def_ro("comm_alone_us", &sim::Prediction::comm_alone_us)
      .def_ro("floor_us", &sim::Prediction::floor_us)
      .def_ro("sequential_us", &sim::Prediction::sequential_us)
      .def_ro("kernel_level_us", &sim::Prediction::kernel_level_us)
      .def_ro("fused_us", &sim::Prediction::fused_us)
      .def_ro("fused", &sim::Prediction::fused)
      .def_ro("kernel_level", &sim::Prediction::kernel_level)
      .def_ro("sequential", &sim::Prediction::sequential)
      .def("__repr__", [](const sim::Prediction& p) {
        return "Prediction(fused_us=" + std::to_string(p.fused_us) +
               ", sequential_us=" + std::to_string(p.sequential_us) + ", floor_us=" + std::to_string(p.floor_us) + ")";
      });

  m.def("default_accesses", &sim::default_accesses, "plan"_a,
        "How the local GEMM uses the plan's tensor, from its collective (UserError for custom).");
  m.def(
      "simulate",
      [](const plan::CommPlan& plan, const sim::GemmShape& gemm, const sim::Calibration& calib, std::string_view order,
         std::optional<std::vector<lower::TileAccess>> accesses, int group_m, bool dynamic_assignment,
         int kernel_level_residency, int natural_residency, double block_share, int comm_sms, int sm_carveout) {
        const auto kind = enum_arg<schedule::OrderKind>(order, "order");
        const sim::FusedCall call = accesses ? sim::make_fused_call(plan, gemm, *accesses, kind, calib, group_m)
                                             : sim::make_fused_call(plan, gemm, kind, calib, group_m);
        sim::SimOptions options;
        options.dynamic_assignment = dynamic_assignment;
        options.kernel_level.residency = kernel_level_residency;
        options.kernel_level.natural_residency = natural_residency;
        options.kernel_level.block_share = block_share;
        options.kernel_level.comm_sms = comm_sms;
        options.kernel_level.sm_carveout = sm_carveout;
        return sim::predict(call, calib, options);
      },
      "plan"_a, "gemm"_a, "calib"_a, nb::kw_only(), "order"_a = "arrival", "accesses"_a = nb::none(), "group_m"_a = 8,
      "dynamic_assignment"_a = false, "kernel_level_residency"_a = 0, "natural_residency"_a = 1, "block_share"_a = 0.9,
      "comm_sms"_a = -1, "sm_carveout"_a = 0,
      "Lowers and schedules the plan for the GEMM, then predicts fused, kernel-level and "
      "sequential times. accesses default to default_accesses(plan). kernel_level_residency, "
      "natural_residency, block_share, comm_sms and sm_carveout (cuBLAS: SMs the GEMM leaves free) "
      "shape the kernel-level prediction "
      "(sim::KernelLevelShaping; docs/KERNEL_LEVEL.md).");
}

void bind_tune(nb::module_& m) {
  nb::class_<sim::Candidate>(m, "Candidate", "One simulated configuration and its predicted times.")
      .def_prop_ro("algorithm", [](const sim::Candidate& c) { return enum_str(c.algorithm); })
      .def_ro("split", &sim::Candidate::split)
      .def_prop_ro("backend", [](const sim::Candidate& c) { return enum_str(c.backend); })
      .def_prop_ro("order", [](const sim::Candidate& c) { return enum_str(c.order); })
      .def_ro("fused_us", &sim::Candidate::fused_us)
      .def_ro("kernel_level_us", &sim::Candidate::kernel_level_us)
      .def_ro("sequential_us", &sim::Candidate::sequential_us)
      .def_ro("comm_alone_us", &sim::Candidate::comm_alone_us)
      .def_ro("gemm_alone_us", &sim::Candidate::gemm_alone_us)
      .def_ro("floor_us", &sim::Candidate::floor_us)
      .def_prop_ro(
          "reduce", [](const sim::Candidate& c) { return c.staged ? "epilogue" : "chunks"; },
          "\"epilogue\": the staged plan (reduction in the fused GEMM's epilogue); else \"chunks\".")
      .def_ro("hierarchical", &sim::Candidate::hierarchical)
      .def("__repr__", [](const sim::Candidate& c) {
        return "Candidate(" + enum_str(c.algorithm) + ", split=" + std::to_string(c.split) + ", " +
               enum_str(c.backend) + ", " + enum_str(c.order) + (c.staged ? ", epilogue" : "") +
               ", fused_us=" + std::to_string(c.fused_us) + ")";
      });

  nb::class_<sim::TuneResult>(m, "TuneResult", "The auto-choice: best candidates and the decision.")
      .def_ro("best_fused", &sim::TuneResult::best_fused)
      .def_ro("best_sequential", &sim::TuneResult::best_sequential)
      .def_ro("best_kernel_level", &sim::TuneResult::best_kernel_level)
      .def_prop_ro("decision", [](const sim::TuneResult& r) { return std::string(sim::to_string(r.decision)); })
      .def_ro("chosen", &sim::TuneResult::chosen, "The candidate that runs for the decision.")
      .def_ro("reason", &sim::TuneResult::reason)
      .def_ro("candidates", &sim::TuneResult::candidates)
      .def_ro("skipped", &sim::TuneResult::skipped);

  m.def(
      "tune",
      [](std::string_view collective, const sim::GemmShape& gemm, int world_size, const sim::Calibration& calib,
         std::string_view dtype, std::optional<std::vector<std::string>> algorithms,
         std::optional<std::vector<int>> splits, std::optional<std::vector<std::string>> backends,
         std::optional<std::vector<std::string>> orders, double min_gain, double min_saving_us, std::string_view reduce,
         bool kernel_level, std::string_view mode, std::optional<std::vector<int>> nodes) {
        sim::TuneRequest request;
        request.collective = enum_arg<plan::Collective>(collective, "collective");
        request.gemm = gemm;
        request.world_size = world_size;
        request.dtype = enum_arg<plan::DType>(dtype, "dtype");
        if (algorithms) request.algorithms = enum_list<plan::Algorithm>(*algorithms, "algorithms");
        if (splits) request.splits = *splits;
        if (backends) request.backends = enum_list<plan::Backend>(*backends, "backends");
        if (orders) request.orders = enum_list<schedule::OrderKind>(*orders, "orders");
        request.min_gain = min_gain;
        request.min_saving_us = min_saving_us;
        const auto reduce_mode = sim::parse_reduce_mode(reduce);
        if (!reduce_mode)
          throw UserError("argument 'reduce': unknown reduction '" + std::string(reduce) +
                          "'; expected one of: chunks, epilogue, auto");
        request.reduce = *reduce_mode;
        request.kernel_level = kernel_level;
        if (mode != "auto") {
          request.mode = sim::parse_decision(mode);
          if (!request.mode)
            throw UserError("argument 'mode': unknown mode '" + std::string(mode) +
                            "'; expected one of: auto, fused, kernel-level, sequential");
        }
        if (nodes) request.nodes = std::move(*nodes);
        return sim::tune(request, calib);
      },
      "collective"_a, "gemm"_a, "world_size"_a, "calib"_a, nb::kw_only(), "dtype"_a = "bf16",
      "algorithms"_a = nb::none(), "splits"_a = nb::none(), "backends"_a = nb::none(), "orders"_a = nb::none(),
      "min_gain"_a = sim::kDefaultMinGain, "min_saving_us"_a = sim::kDefaultMinSavingUs, "reduce"_a = "chunks",
      "kernel_level"_a = true, "mode"_a = "auto", "nodes"_a = nb::none(),
      "Simulates every algorithm x split x backend x order (or the lists given; for reduce-scatter "
      "and all-reduce with reduce=\"epilogue\" or \"auto\" also the staged plans) and decides whether "
      "fused, kernel-level (unless kernel_level=False) or sequential execution runs: the one "
      "decision `syncopate tune` and the op contexts' mode=\"auto\" show. mode=\"fused\" / "
      "\"sequential\" / \"kernel-level\": no decision, the best candidate of that mode. `nodes` (one "
      "node id per rank, several nodes) adds hierarchical and flat multi-node plans to the search.");

  m.def(
      "reserved_sms",
      [](std::string_view backend, bool producer) {
        return sim::reserved_sms(enum_arg<plan::Backend>(backend, "backend"),
                                 producer ? sim::GemmRole::producer : sim::GemmRole::consumer);
      },
      "backend"_a, nb::kw_only(), "producer"_a,
      "SMs a fused op's persistent GEMM leaves free for the chunk backend (producer: GEMM+RS/AR, "
      "whose reduce-add kernels need SMs too). The one table (sim/reserved_sms.hpp).");
  m.attr("SM_COPY_BLOCKS") = sim::kSmCopyBlocks;
  m.attr("ADD_KERNEL_BLOCKS") = sim::kAddKernelBlocks;
  m.attr("DEFAULT_MIN_GAIN") = sim::kDefaultMinGain;
  m.attr("DEFAULT_MIN_SAVING_US") = sim::kDefaultMinSavingUs;
}

void bind_attention(nb::module_& m) {
  nb::class_<sim::AttentionPrediction>(m, "AttentionPrediction",
                                       "The simulator's times of one sequence-parallel attention call.")
      .def_ro("sequential_us", &sim::AttentionPrediction::sequential_us)
      .def_ro("fused_us", &sim::AttentionPrediction::fused_us)
      .def_ro("compute_us", &sim::AttentionPrediction::compute_us)
      .def_ro("comm_us", &sim::AttentionPrediction::comm_us)
      .def_ro("decision", &sim::AttentionPrediction::decision)
      .def_ro("reason", &sim::AttentionPrediction::reason)
      .def("__repr__", [](const sim::AttentionPrediction& p) {
        return "AttentionPrediction(" + p.decision + ": " + p.reason + ")";
      });
  m.def(
      "predict_attention",
      [](std::string_view kind, const sim::Calibration& calib, int world, std::int64_t batch, std::int64_t heads,
         std::int64_t kv_heads, std::int64_t seq_local, std::int64_t head_dim, bool causal, int elem_bytes,
         std::string_view backend) {
        sim::SeqParallel k;
        if (kind == "ulysses")
          k = sim::SeqParallel::ulysses;
        else if (kind == "ring")
          k = sim::SeqParallel::ring;
        else
          throw UserError("predict_attention: kind '" + std::string(kind) + "', expected 'ulysses' or 'ring'");
        sim::AttentionShape s{world, batch, heads, kv_heads, seq_local, head_dim, causal, elem_bytes};
        return sim::predict_attention(k, s, calib, enum_arg<plan::Backend>(backend, "backend"));
      },
      "kind"_a, "calibration"_a, nb::kw_only(), "world"_a, "batch"_a, "heads"_a, "kv_heads"_a, "seq_local"_a,
      "head_dim"_a, "causal"_a, "elem_bytes"_a = 2, "backend"_a = "copy-engine",
      "Sequential and fused times of ulysses or ring attention on the slowest rank and the decision "
      "mode=\"auto\" runs (sim/attention_model.hpp).");
}

}  // namespace

void bind_sim(nb::module_& m) {
  bind_calibration(m);
  bind_timelines(m);
  bind_tune(m);
  bind_attention(m);
}

}  // namespace syncopate::python

// Properties over many real plans (every template, world sizes, splits, backends, shapes):
// fused time lies between max(compute, communication) and their sum plus overheads, every chunk
// and tile runs exactly once and after its inputs, and the same input gives the same output.
#include <algorithm>
#include <cmath>
#include <string>

#include <fmt/core.h>
#include <gtest/gtest.h>

#include "syncopate/plan/templates.hpp"
#include "syncopate/sim/simulator.hpp"
#include "syncopate/sim/trace.hpp"

namespace syncopate::sim {
namespace {

Calibration h200() { return load_calibration(std::string(SYNCOPATE_SOURCE_DIR) + "/calib/h200.json"); }
// The schedules' own properties: the shipped calibration without the fixed costs of a fused
// call (its call path, slower links and adds under a GEMM), which host_reduce_test.cpp checks
// on their own. The RS/AR copy-out stays (bounded below).
Calibration h200_schedule_only() {
  auto c = h200();
  c.host = {};  // not modelled: no preamble, no local shard copy, no chunk dispatch
  c.reduce_add = {};
  for (auto& b : c.backends) {
    b.issue_us = 0;
    b.bandwidth_under_compute_gbps = 0;
  }
  return c;
}

struct Shape {
  std::int64_t m, n, k, bm, bn;
};

// The tensor a template needs for a GEMM of this shape (see autotune.hpp).
plan::TemplateOptions options(plan::Collective coll, plan::Algorithm algo, int world, int split, plan::Backend backend,
                              const Shape& s) {
  plan::TemplateOptions o;
  o.collective = coll;
  o.algorithm = algo;
  o.world_size = world;
  o.split = split;
  o.backend = backend;
  const bool reduces = coll == plan::Collective::reduce_scatter || coll == plan::Collective::all_reduce;
  o.shape = {s.m, reduces ? s.n : s.k};
  return o;
}

// Largest slowdown and signal latency of the backends, to bound the overheads.
double max_slowdown(const Calibration& c) {
  double s = 1;
  for (const auto& b : c.backends) s = std::max(s, b.compute_slowdown);
  return s;
}

void check_invariants(const FusedCall& call, const Calibration& calib, const Prediction& p, bool arrival_order,
                      const std::string& what) {
  const auto& tl = p.fused;
  // Inputs before outputs: every tile starts after the chunks it waits on land; every chunk
  // starts after its ready time, which is after its producer tiles end.
  for (const auto& t : tl.tiles) {
    ASSERT_LE(t.claimed, t.start + 1e-9) << what;
    ASSERT_LT(t.start, t.end) << what;
    for (int s : call.tables[t.rank].tile_waits[t.tile]) {
      const int c = call.tables[t.rank].slots[s].chunk;
      ASSERT_GE(t.start + 1e-9, tl.chunks[c].arrival) << what << ": rank " << t.rank << " tile " << t.tile;
    }
    for (int s : call.tables[t.rank].tile_notifies[t.tile]) {
      const int c = call.tables[t.rank].slots[s].chunk;
      ASSERT_LE(t.end, tl.chunks[c].ready + 1e-9) << what << ": chunk " << c << " left before tile " << t.tile;
    }
  }
  ASSERT_EQ(tl.tiles.size(), static_cast<std::size_t>(call.gemm.grid().count() * call.plan.world_size)) << what;
  for (const auto& c : tl.chunks) {
    ASSERT_LE(c.ready, c.start + 1e-9) << what;
    ASSERT_LE(c.start, c.transfer_end + 1e-9) << what;
    ASSERT_LT(c.transfer_end, c.arrival + 1e-9) << what;
  }
  // Bounds. Fused cannot beat either part alone; and it cannot be worse than running them one
  // after the other on the SMs it has left, slowed by the worst sharing factor, plus a launch,
  // a sync and a signal per phase. (It can be worse than *sequential*: the fused GEMM leaves SMs
  // to its backend, and one wave more is a whole tile time more.) The upper bound holds for the arrival
  // order only: an order that contradicts the plan's stream order (row-major on a producer)
  // holds back chunks that block their streams and bunches traffic into one GPU's ingress, and
  // can then exceed the sum (docs/SIMULATOR.md has the example); that is the point of the
  // arrival order.
  const double eps = 1e-6;
  EXPECT_GE(p.fused_us + eps, p.floor_us) << what;
  const int workers = fused_workers(call, calib);
  const double tile = calib.tile_time_us(call.gemm.block_m, call.gemm.block_n, call.gemm.k);
  const double waves = std::ceil(double(call.gemm.grid().count()) / workers);
  const double compute_on_workers = calib.launch_overhead_us + waves * tile;
  double result_bytes = 0;  // an upper bound of a GEMM+RS/AR's copy-out: the whole tensor
  if (call.plan.collective.kind == plan::Collective::reduce_scatter ||
      call.plan.collective.kind == plan::Collective::all_reduce) {
    const auto& t = call.plan.tensors.at(call.plan.collective.tensor);
    result_bytes = double(t.elements()) * plan::dtype_size(t.dtype);
  }
  const double copy_out = calib.sync_overhead_us + result_bytes / (calib.local_copy_gbps * 1e3);
  const double overheads = calib.launch_overhead_us + calib.sync_overhead_us + 10.0 + copy_out;  // signals
  if (arrival_order)
    EXPECT_LE(p.fused_us, p.comm_alone_us + compute_on_workers * max_slowdown(calib) + overheads) << what;
}

TEST(SimProperties, FusedBetweenFloorAndSumOverManyPlans) {
  const auto calib = h200_schedule_only();
  const Shape shapes[] = {{1024, 512, 4096, 128, 256}, {1000, 768, 2048, 128, 128}, {4096, 1024, 8192, 128, 256}};
  int cases = 0;
  for (auto coll : {plan::Collective::all_gather, plan::Collective::reduce_scatter, plan::Collective::all_reduce,
                    plan::Collective::all_to_all})
    for (auto algo : {plan::Algorithm::ring, plan::Algorithm::direct, plan::Algorithm::bidir})
      for (int world : {1, 2, 3, 4, 8})
        for (int split : {1, 2, 4})
          for (auto backend : {plan::Backend::copy_engine, plan::Backend::sm_copy, plan::Backend::nccl}) {
            const Shape& s = shapes[(world + split + int(backend)) % 3];
            plan::CommPlan plan;
            try {
              plan = plan::make_plan(options(coll, algo, world, split, backend, s));
            } catch (const ShapeError&) {
              continue;  // e.g. a dimension too small to split that far
            }
            const std::string what =
                fmt::format("{} {} world {} split {} {} gemm {}x{}x{}", plan::to_string(coll), plan::to_string(algo),
                            world, split, plan::to_string(backend), s.m, s.n, s.k);
            const auto order = cases % 2 ? schedule::OrderKind::arrival : schedule::OrderKind::row_major;
            const auto call = make_fused_call(plan, {s.m, s.n, s.k, s.bm, s.bn}, order, calib);
            SimOptions opt;
            opt.dynamic_assignment = cases % 3 == 0;
            check_invariants(call, calib, predict(call, calib, opt), order == schedule::OrderKind::arrival,
                             what + " " + std::string(schedule::to_string(order)));
            ++cases;
          }
  EXPECT_GT(cases, 300);
}

// Hierarchical plans (several nodes: NCCL over the estimated network between them, the backend
// inside) keep the same invariants: lowered, ordered by arrival, simulated with every chunk and
// tile once, after its inputs, between the floor and the sum.
TEST(SimProperties, HierarchicalPlansKeepTheInvariants) {
  const auto calib = h200_schedule_only();
  const Shape s{2048, 512, 2048, 128, 256};
  int cases = 0;
  for (auto coll : {plan::Collective::all_gather, plan::Collective::reduce_scatter, plan::Collective::all_reduce,
                    plan::Collective::all_to_all})
    for (auto algo : {plan::Algorithm::ring, plan::Algorithm::direct, plan::Algorithm::bidir})
      for (auto [nodes, per_node] : {std::pair{2, 2}, {2, 4}})
        for (int split : {1, 2})
          for (auto backend : {plan::Backend::copy_engine, plan::Backend::sm_copy}) {
            auto o = options(coll, algo, nodes * per_node, split, backend, s);
            o.nodes = plan::consecutive_nodes(nodes * per_node, nodes);
            const auto plan = plan::make_plan(o);
            const std::string what =
                fmt::format("hierarchical {} {} {}x{} split {} {}", plan::to_string(coll), plan::to_string(algo), nodes,
                            per_node, split, plan::to_string(backend));
            const auto call = make_fused_call(plan, {s.m, s.n, s.k, s.bm, s.bn}, schedule::OrderKind::arrival, calib);
            check_invariants(call, calib, predict(call, calib), true, what);
            ++cases;
          }
  EXPECT_EQ(cases, 4 * 3 * 2 * 2 * 2);
}

// The GEMM starts at once (issue 14's call path): with the shipped calibration, on every
// template plan, each rank's fused kernel is launched host.fused_call_us after the call (plus
// the copy of its own shard for an all-gather) whatever the number of chunks, its workers claim
// their first tiles one launch later, and no chunk enters its stream before the kernel's launch.
TEST(SimProperties, TheKernelLaunchesBeforeAnyChunkWhateverTheSplit) {
  const auto calib = h200();
  const Shape s{4096, 1024, 2048, 128, 256};
  int cases = 0;
  for (auto coll : {plan::Collective::all_gather, plan::Collective::reduce_scatter, plan::Collective::all_reduce})
    for (auto algo : {plan::Algorithm::ring, plan::Algorithm::direct})
      for (int world : {2, 4})
        for (int split : {1, 4})
          for (auto backend : {plan::Backend::copy_engine, plan::Backend::sm_copy}) {
            const auto plan = plan::make_plan(options(coll, algo, world, split, backend, s));
            const auto call = make_fused_call(plan, {s.m, s.n, s.k, s.bm, s.bn}, schedule::OrderKind::arrival, calib);
            const auto tl = simulate_fused(call, calib);
            const std::string what = fmt::format("{} {} world {} split {} {}", plan::to_string(coll),
                                                 plan::to_string(algo), world, split, plan::to_string(backend));
            const double shard_copy = coll == plan::Collective::all_gather
                                          ? double(s.m / world) * double(s.k) * 2 / (calib.local_copy_gbps * 1e3)
                                          : 0.0;
            for (int r = 0; r < world; ++r) {
              const double launch = calib.host.fused_call_us + shard_copy;
              EXPECT_NEAR(tl.rank_ends[r].kernel_launch, launch, 1e-6) << what << " rank " << r;
              double first_claim = 1e300;
              for (const auto& t : tl.tiles)
                if (t.rank == r) first_claim = std::min(first_claim, t.claimed);
              EXPECT_NEAR(first_claim, launch + calib.launch_overhead_us, 1e-6) << what << " rank " << r;
            }
            for (const auto& c : tl.chunks)
              EXPECT_GE(c.start, tl.rank_ends[c.issuer].kernel_launch + calib.backend(c.backend).issue_us +
                                     calib.launch_overhead_us - 1e-6)
                  << what << " chunk " << c.chunk;
            ++cases;
          }
  EXPECT_EQ(cases, 48);
}

TEST(SimProperties, Deterministic) {
  const auto calib = h200();
  const auto plan = plan::make_plan(options(plan::Collective::all_reduce, plan::Algorithm::bidir, 4, 2,
                                            plan::Backend::nccl, {2048, 1024, 4096, 128, 256}));
  const auto a =
      predict(make_fused_call(plan, {2048, 1024, 4096, 128, 256}, schedule::OrderKind::arrival, calib), calib);
  const auto b =
      predict(make_fused_call(plan, {2048, 1024, 4096, 128, 256}, schedule::OrderKind::arrival, calib), calib);
  EXPECT_EQ(chrome_trace_json(a.fused), chrome_trace_json(b.fused));
  EXPECT_EQ(svg_timeline(a.kernel_level), svg_timeline(b.kernel_level));
  EXPECT_EQ(a.sequential_us, b.sequential_us);
}

// The effect the paper reports: with tiles in arrival order the fused kernel hides the
// all-gather; in row-major order workers spin on shards that land last. AG+GEMM, world 4,
// copy engine ring, per-rank GEMM 8192 x 2048 x 8192 on the H200 calibration (schedule only:
// the call path delays both orders' kernels by its preamble and the local shard copy).
TEST(SimProperties, ArrivalOrderBeatsRowMajorByALargeFactor) {
  const auto calib = h200_schedule_only();
  const Shape s{8192, 2048, 8192, 128, 256};
  for (int world : {4, 8}) {
    const auto plan = plan::make_plan(
        options(plan::Collective::all_gather, plan::Algorithm::ring, world, 1, plan::Backend::copy_engine, s));
    auto call = make_fused_call(plan, {s.m, s.n, s.k, s.bm, s.bn}, schedule::OrderKind::arrival, calib);
    const double arrival = simulate_fused(call, calib).total_us;
    reorder(call, schedule::OrderKind::row_major, calib);
    const double row_major = simulate_fused(call, calib).total_us;
    const auto p = predict(call, calib);
    std::printf(
        "AG+GEMM world %d, GEMM 8192x2048x8192, copy-engine ring on H200: fused arrival %.1f us, "
        "row-major %.1f us (%.2fx); floor %.1f us, sequential %.1f us\n",
        world, arrival, row_major, row_major / arrival, p.floor_us, p.sequential_us);
    EXPECT_GT(row_major / arrival, 1.5) << "world " << world;
    // Arrival order is near the best a fused kernel can do: the floor, or the last shard's
    // landing plus the one wave of tiles that read it.
    const double one_wave = calib.tile_time_us(s.bm, s.bn, s.k);
    EXPECT_LT(arrival, std::max(p.floor_us, p.comm_alone_us + one_wave) + 20) << "world " << world;
  }
}

}  // namespace
}  // namespace syncopate::sim

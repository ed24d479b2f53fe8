// The one decision rule of tune (include/syncopate/sim/autotune.hpp): the absolute-saving floor
// next to min_gain, the staged GEMM+RS/AR candidates and the reduce modes, kernel-level left out
// for callers that cannot run it, a given mode, and the candidate that runs.
#include <cmath>
#include <string>

#include <fmt/core.h>
#include <gtest/gtest.h>

#include "syncopate/plan/templates.hpp"
#include "syncopate/sim/autotune.hpp"
#include "syncopate/sim/simulator.hpp"

namespace syncopate::sim {
namespace {

Calibration h200() { return load_calibration(std::string(SYNCOPATE_SOURCE_DIR) + "/calib/h200.json"); }

bool same_configuration(const Candidate& a, const Candidate& b) {
  return a.algorithm == b.algorithm && a.split == b.split && a.backend == b.backend && a.order == b.order &&
         a.staged == b.staged;
}

TuneRequest large_all_gather() {
  TuneRequest req;
  req.collective = plan::Collective::all_gather;
  req.gemm = {16384, 8192, 8192, 128, 256};
  req.world_size = 4;
  req.splits = {1, 2};
  return req;
}

TEST(TuneFloor, TheAbsoluteSavingDecidesNextToTheFraction) {
  const auto calib = h200();
  auto req = large_all_gather();
  req.min_gain = 0;
  req.min_saving_us = 0;
  const auto free = tune(req, calib);
  ASSERT_EQ(free.decision, Decision::fused) << free.reason;
  const double saving = free.best_sequential.sequential_us - free.best_fused.fused_us;
  ASSERT_GT(saving, 1.0);
  req.min_saving_us = saving + 0.5;  // just out of reach: overlap does not pay
  const auto short_of_it = tune(req, calib);
  EXPECT_EQ(short_of_it.decision, Decision::sequential) << short_of_it.reason;
  EXPECT_NE(short_of_it.reason.find("does not pay"), std::string::npos) << short_of_it.reason;
  EXPECT_NE(short_of_it.reason.find(fmt::format(">= {:g} us", req.min_saving_us)), std::string::npos)
      << short_of_it.reason;
  EXPECT_TRUE(same_configuration(short_of_it.chosen, short_of_it.best_sequential));
  req.min_saving_us = saving - 0.5;  // just within reach
  const auto within = tune(req, calib);
  EXPECT_EQ(within.decision, Decision::fused) << within.reason;
  EXPECT_TRUE(same_configuration(within.chosen, within.best_fused));
}

TEST(TuneFloor, TheDefaultFloorIsSixteenMicroseconds) {
  EXPECT_EQ(TuneRequest{}.min_saving_us, 16.0);
  EXPECT_EQ(TuneRequest{}.min_saving_us, kDefaultMinSavingUs);
  TuneRequest req = large_all_gather();
  req.min_saving_us = -1;
  EXPECT_THROW(tune(req, h200()), UserError);
}

TuneRequest large_reduce_scatter(ReduceMode reduce) {
  TuneRequest req;
  req.collective = plan::Collective::reduce_scatter;
  req.gemm = {8192, 8192, 8192, 128, 256};
  req.world_size = 2;
  req.reduce = reduce;
  return req;
}

TEST(TuneStaged, ChunksLeavesTheStagedPlansOut) {
  const auto r = tune(large_reduce_scatter(ReduceMode::chunks), h200());
  for (const auto& c : r.candidates) EXPECT_FALSE(c.staged);
}

TEST(TuneStaged, EpilogueRunsOnlyStagedPlansFusedAndTimesThemAsTheSimulatorDoes) {
  const auto calib = h200();
  for (auto collective : {plan::Collective::reduce_scatter, plan::Collective::all_reduce}) {
    auto req = large_reduce_scatter(ReduceMode::epilogue);
    req.collective = collective;
    req.mode = Decision::fused;
    const auto r = tune(req, calib);
    ASSERT_TRUE(r.best_fused.staged);
    EXPECT_EQ(r.best_fused.algorithm, plan::Algorithm::direct);
    EXPECT_TRUE(same_configuration(r.chosen, r.best_fused));
    EXPECT_EQ(r.reason, "mode='fused' given; reduce='epilogue' given");
    EXPECT_FALSE(r.best_sequential.staged) << "sequential runs the reduce-add plan";
    EXPECT_FALSE(std::isfinite(r.best_fused.kernel_level_us));
    // The staged candidate's time is the simulator's for the op's staged plan.
    plan::TemplateOptions o;
    o.collective = collective;
    o.algorithm = plan::Algorithm::direct;
    o.world_size = 2;
    o.split = r.best_fused.split;
    o.backend = r.best_fused.backend;
    o.shape = {1, 8192, 8192};
    o.dim = 1;
    o.tensor = "c";
    o.staging = "p";
    const auto call = make_fused_call(plan::make_plan(o), req.gemm, r.best_fused.order, calib);
    EXPECT_DOUBLE_EQ(r.best_fused.fused_us, simulate_fused(call, calib).total_us);
  }
}

TEST(TuneStaged, AutoTakesTheFasterReductionAndSaysBoth) {
  const auto calib = h200();
  auto req = large_reduce_scatter(ReduceMode::chunks);
  req.mode = Decision::fused;
  const auto chunks = tune(req, calib);
  req.reduce = ReduceMode::epilogue;
  const auto staged = tune(req, calib);
  req.reduce = ReduceMode::automatic;
  const auto both = tune(req, calib);
  const auto& faster = staged.best_fused.fused_us < chunks.best_fused.fused_us ? staged : chunks;
  EXPECT_TRUE(same_configuration(both.best_fused, faster.best_fused));
  EXPECT_NE(both.reason.find("reduction in the epilogue"), std::string::npos) << both.reason;
  EXPECT_NE(both.reason.find("vs reduce-add chunks"), std::string::npos) << both.reason;
  // Both searches list the reduce-add and the staged candidates, fastest fused first.
  EXPECT_EQ(both.candidates.size(), staged.candidates.size());
  EXPECT_GT(staged.candidates.size(), chunks.candidates.size());
  for (std::size_t i = 1; i < both.candidates.size(); ++i)
    EXPECT_LE(both.candidates[i - 1].fused_us, both.candidates[i].fused_us);
}

TEST(TuneStaged, OtherCollectivesIgnoreTheReduceMode) {
  auto req = large_all_gather();
  req.reduce = ReduceMode::epilogue;
  const auto r = tune(req, h200());
  for (const auto& c : r.candidates) EXPECT_FALSE(c.staged);
}

TEST(TuneStaged, EpilogueWithNoStagedPlanThatRunsSaysWhatTheSimulatorRefused) {
  // NCCL groups each rank's send and recv of a step; in row-major order rank 0's own tiles come
  // first and wait for the recv whose grouped send needs rank 0's later tiles: deadlocked.
  auto req = large_reduce_scatter(ReduceMode::epilogue);
  req.backends = {plan::Backend::nccl};
  req.splits = {1};
  req.orders = {schedule::OrderKind::row_major};
  try {
    tune(req, h200());
    FAIL() << "expected UserError";
  } catch (const UserError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("reduce='epilogue': no-candidate"), std::string::npos) << what;
    EXPECT_NE(what.find("refused nccl split 1 row-major"), std::string::npos) << what;
  }
  req.reduce = ReduceMode::automatic;  // auto never picks it: the reduce-add chunks run
  req.mode = Decision::fused;
  EXPECT_FALSE(tune(req, h200()).chosen.staged);
}

TEST(TuneStaged, TheStagedPlansAreSearchedOnOneNodeOnly) {
  auto req = large_reduce_scatter(ReduceMode::epilogue);
  req.gemm = {2048, 2048, 2048, 128, 256};
  req.world_size = 4;
  req.splits = {1};
  req.orders = {schedule::OrderKind::arrival};
  req.nodes = plan::consecutive_nodes(4, 2);
  EXPECT_THROW(tune(req, h200()), UserError);
  req.reduce = ReduceMode::automatic;
  for (const auto& c : tune(req, h200()).candidates) EXPECT_FALSE(c.staged);
}

TEST(TuneKernelLevel, LeftOutWhereTheCallerCannotRunIt) {
  // Fused made hopeless by a second of host time before its launch: kernel-level and
  // sequential remain. With no margin required, kernel-level wins wherever it is predicted
  // faster at all.
  auto calib = h200();
  calib.host.fused_call_us = 1e6;
  TuneRequest req;
  req.collective = plan::Collective::all_gather;
  req.gemm = {16384, 8192, 8192, 128, 256};
  req.world_size = 2;
  req.min_gain = 0;
  req.min_saving_us = 0;
  const auto with = tune(req, calib);
  ASSERT_TRUE(std::isfinite(with.best_kernel_level.kernel_level_us));
  const bool kl_faster = with.best_kernel_level.kernel_level_us < with.best_sequential.sequential_us;
  EXPECT_EQ(with.decision, kl_faster ? Decision::kernel_level : Decision::sequential) << with.reason;
  req.kernel_level = false;
  const auto without = tune(req, calib);
  EXPECT_EQ(without.decision, Decision::sequential) << without.reason;
  EXPECT_EQ(without.reason.find("kernel-level"), std::string::npos) << without.reason;
  EXPECT_NE(without.reason.find("fused needs"), std::string::npos) << without.reason;
}

TEST(TuneMode, AGivenModeRunsItsBestCandidate) {
  const auto calib = h200();
  auto req = large_all_gather();
  req.mode = Decision::sequential;
  const auto r = tune(req, calib);
  EXPECT_EQ(r.decision, Decision::sequential);
  EXPECT_EQ(r.reason, "mode='sequential' given");
  EXPECT_TRUE(same_configuration(r.chosen, r.best_sequential));
  EXPECT_EQ(r.chosen.order, req.orders.front()) << "sequential times do not depend on the order: the first";
  req.mode = Decision::kernel_level;
  req.backends = {plan::Backend::copy_engine};
  EXPECT_THROW(tune(req, calib), UserError) << "kernel-level runs on NCCL only";
}

TEST(TuneParsing, SpellingsRoundTrip) {
  for (auto d : {Decision::fused, Decision::kernel_level, Decision::sequential})
    EXPECT_EQ(parse_decision(to_string(d)), d);
  for (auto m : {ReduceMode::chunks, ReduceMode::epilogue, ReduceMode::automatic})
    EXPECT_EQ(parse_reduce_mode(to_string(m)), m);
  EXPECT_EQ(to_string(ReduceMode::automatic), "auto");
  EXPECT_FALSE(parse_reduce_mode("staged").has_value());
  EXPECT_FALSE(parse_decision("kernel_level").has_value());
}

}  // namespace
}  // namespace syncopate::sim

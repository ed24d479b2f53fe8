// The network model: chunks between nodes move over the GPUs' NICs (calibration `network`),
// hand-computed like the other timeline tests; the section is read and written with checked
// paths; a plan across nodes needs it; tune tries hierarchical and flat plans on several nodes.
#include <string>

#include <gtest/gtest.h>

#include "sim_fixtures.hpp"
#include "syncopate/common/error.hpp"
#include "syncopate/plan/templates.hpp"
#include "syncopate/sim/autotune.hpp"
#include "syncopate/sim/simulator.hpp"

namespace syncopate::sim {
namespace {

using testing::round_calibration_json;
using testing::rows_chunk;

constexpr double kTol = 1e-6;

std::string with_network(const std::string& network) {
  std::string json = round_calibration_json();
  json.replace(json.find("\"backends\""), 0, "\"network\": " + network + ",\n  ");
  return json;
}

// 12.8 GB/s per NIC (a 256000-byte chunk: 20 us), 4 us latency.
Calibration network_calibration() {
  return parse_calibration(with_network(R"({"bandwidth_gbps": 12.8, "latency_us": 4, "estimated": true})"), "net.json");
}

// `sends` NCCL chunks of 128 x 1000 bf16 (256000 bytes), each on a stream of its own.
plan::CommPlan nccl_plan(int world, const std::vector<std::pair<int, int>>& sends, std::vector<int> nodes) {
  plan::CommPlan p;
  p.collective.kind = plan::Collective::custom;
  p.collective.tensor = "x";
  p.world_size = world;
  p.nodes = std::move(nodes);
  p.tensors["x"] = {{128 * static_cast<std::int64_t>(sends.size()), 1000}, plan::DType::bf16, "row-major"};
  const auto streams = sends.size();
  for (int r = 0; r < world; ++r) p.ranks.push_back({r, std::vector<std::vector<int>>(streams)});
  for (std::size_t i = 0; i < sends.size(); ++i) {
    const auto [src, dst] = sends[i];
    plan::Chunk c =
        rows_chunk(static_cast<int>(i), "x", 128 * static_cast<std::int64_t>(i), src, dst, static_cast<int>(i));
    c.backend = plan::Backend::nccl;
    p.chunks.push_back(c);
    p.ranks[src].streams[i].push_back(c.id);
    p.ranks[dst].streams[i].push_back(c.id);
  }
  return p;
}

TEST(NetworkModel, ChunksBetweenNodesUseTheNicBandwidthAndLatency) {
  const Calibration calib = network_calibration();
  // Two ranks on two nodes exchange: each direction has its own NIC egress and ingress.
  const auto tl = simulate_comm_alone(nccl_plan(2, {{0, 1}, {1, 0}}, {0, 1}), calib);
  for (int c = 0; c < 2; ++c) {
    EXPECT_NEAR(tl.chunks[c].start, 2, kTol);
    EXPECT_NEAR(tl.chunks[c].transfer_end, 22, kTol);  // 256000 B at 12.8 GB/s
    EXPECT_NEAR(tl.chunks[c].arrival, 26, kTol);       // + the network's 4 us
  }
  // The same ranks on one node: NVLink NCCL, 25.6 GB/s and 1 us.
  const auto local = simulate_comm_alone(nccl_plan(2, {{0, 1}, {1, 0}}, {0, 0}), calib);
  EXPECT_NEAR(local.chunks[0].transfer_end, 12, kTol);
  EXPECT_NEAR(local.chunks[0].arrival, 13, kTol);
}

TEST(NetworkModel, OneGpusNicIsSharedByItsChunksToOtherNodes) {
  const Calibration calib = network_calibration();
  // Rank 0 sends to ranks 1 and 2 on two other nodes at once: its NIC's 12.8 GB/s is shared.
  const auto tl = simulate_comm_alone(nccl_plan(3, {{0, 1}, {0, 2}}, {0, 1, 2}), calib);
  for (int c = 0; c < 2; ++c) EXPECT_NEAR(tl.chunks[c].transfer_end, 42, kTol) << "chunk " << c;
  // Ranks 1 and 2 on rank 0's node instead: NVLink (egress 1000 GB/s), each chunk its own link.
  const auto local = simulate_comm_alone(nccl_plan(3, {{0, 1}, {0, 2}}, {0, 0, 0}), calib);
  for (int c = 0; c < 2; ++c) EXPECT_NEAR(local.chunks[c].transfer_end, 12, kTol) << "chunk " << c;
  // Two GPUs of one node sending to two GPUs of another: one NIC each, no sharing.
  const auto rails = simulate_comm_alone(nccl_plan(4, {{0, 2}, {1, 3}}, {0, 0, 1, 1}), calib);
  for (int c = 0; c < 2; ++c) EXPECT_NEAR(rails.chunks[c].transfer_end, 22, kTol) << "chunk " << c;
}

TEST(NetworkModel, APlanAcrossNodesNeedsTheNetworkSection) {
  const Calibration calib = testing::round_calibration();
  try {
    simulate_comm_alone(nccl_plan(2, {{0, 1}}, {0, 1}), calib);
    FAIL() << "simulated a plan across nodes without a network model";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("chunk 0: no-network-model: 0 -> 1 crosses nodes (0 -> 1)"), std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(simulate_comm_alone(nccl_plan(2, {{0, 1}}, {}), calib));  // one node: none needed
}

TEST(NetworkModel, SectionIsCheckedAndRoundTrips) {
  const Calibration calib = network_calibration();
  EXPECT_TRUE(calib.network.modelled);
  EXPECT_NEAR(calib.network.bandwidth_gbps, 12.8, kTol);
  EXPECT_NEAR(calib.network.latency_us, 4, kTol);
  EXPECT_TRUE(calib.network.estimated);
  const Calibration again = parse_calibration(calibration_to_json(calib), "again.json");
  EXPECT_TRUE(again.network.modelled);
  EXPECT_NEAR(again.network.bandwidth_gbps, 12.8, kTol);
  EXPECT_TRUE(again.network.estimated);
  EXPECT_FALSE(testing::round_calibration().network.modelled);

  auto refused = [](const std::string& network, const std::string& message) {
    try {
      parse_calibration(with_network(network), "net.json");
      ADD_FAILURE() << network << " accepted";
    } catch (const CalibrationError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  refused(R"({"bandwidth_gbps": 0, "latency_us": 4, "estimated": true})",
          "net.json: network.bandwidth_gbps: expected a number > 0, got 0");
  refused(R"({"bandwidth_gbps": 50, "latency_us": 4})",
          "net.json: network.estimated: expected the required key of a network");
  refused(R"({"bandwidth_gbps": 50, "latency_us": 4, "estimated": "yes"})",
          "network.estimated: expected true (numbers not measured yet) or false");
  refused(R"({"bandwidth_gbps": 50, "latency_us": 4, "estimated": true, "nic": 1})",
          "network.nic: expected one of the network keys");
}

TEST(NetworkModel, ShippedCalibrationMarksTheNetworkEstimated) {
  const Calibration calib = load_calibration(std::string(SYNCOPATE_SOURCE_DIR) + "/calib/h200.json");
  ASSERT_TRUE(calib.network.modelled);
  EXPECT_TRUE(calib.network.estimated);
  EXPECT_NEAR(calib.network.latency_us, 5, kTol);
}

// On two nodes tune simulates both kinds of plan; a hierarchical all-gather (one network
// round, then NVLink) beats every flat NCCL ring, which crosses the network at every step.
TEST(NetworkModel, TuneChoosesBetweenHierarchicalAndFlatPlans) {
  const Calibration calib = load_calibration(std::string(SYNCOPATE_SOURCE_DIR) + "/calib/h200.json");
  TuneRequest req;
  req.collective = plan::Collective::all_gather;
  req.world_size = 8;
  req.nodes = plan::consecutive_nodes(8, 2);
  req.gemm = {8192, 4096, 4096, 128, 256};
  req.splits = {1, 2};
  req.orders = {schedule::OrderKind::arrival};
  const TuneResult result = tune(req, calib);
  int hierarchical = 0, flat = 0;
  double best_flat = 1e30, best_hier = 1e30;
  for (const Candidate& c : result.candidates) {
    if (c.hierarchical) {
      ++hierarchical;
      best_hier = std::min(best_hier, c.fused_us);
    } else {
      ++flat;
      EXPECT_EQ(c.backend, plan::Backend::nccl);  // flat across nodes: NCCL only
      best_flat = std::min(best_flat, c.fused_us);
    }
  }
  EXPECT_EQ(hierarchical, 3 * 2 * 3);  // algorithms x splits x backends
  EXPECT_EQ(flat, 3 * 2);              // algorithms x splits, NCCL
  EXPECT_LT(best_hier, best_flat);
  EXPECT_TRUE(result.best_fused.hierarchical);
  EXPECT_FALSE(result.skipped.empty());  // the flat copy-engine and SM-copy plans, refused by name
  EXPECT_NE(result.skipped.front().find("flat "), std::string::npos) << result.skipped.front();
}

}  // namespace
}  // namespace syncopate::sim

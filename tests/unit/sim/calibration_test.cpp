// Calibration files: the shipped one loads, round trips, and every kind of mistake is refused
// with a message naming the JSON path.
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "sim_fixtures.hpp"
#include "syncopate/sim/calibration.hpp"

namespace syncopate::sim {
namespace {

std::string shipped_path() { return std::string(SYNCOPATE_SOURCE_DIR) + "/calib/h200.json"; }

TEST(Calibration, ShippedH200Loads) {
  const auto c = load_calibration(shipped_path());
  EXPECT_EQ(c.sms, 132);
  EXPECT_DOUBLE_EQ(c.gemm.peak_tflops, 790);
  EXPECT_GT(c.backend(plan::Backend::copy_engine).bandwidth_gbps, 300);
  // A 128x256x8192 tile is about 90 us of math at 790 TFLOP/s over 132 SMs.
  EXPECT_NEAR(c.tile_time_us(128, 256, 8192), 5 + 89.7 / 0.97, 0.2);
}

TEST(Calibration, Fp8RunsAtTheFp8RateEstimatedUntilMeasured) {
  const auto shipped = load_calibration(shipped_path());
  // Measured on nvidia-h200 (2026-11-25): 1380 TFLOP/s, 1.75x the bf16 rate.
  EXPECT_DOUBLE_EQ(shipped.gemm.fp8_peak_tflops, 1380);
  EXPECT_FALSE(shipped.gemm.fp8_estimated);
  // The math at the FP8 rate, the fixed per-tile cost the same.
  const double bf16 = shipped.tile_time_us(128, 256, 8192);
  const double fp8 = shipped.tile_time_us(128, 256, 8192, plan::DType::f8e4m3);
  EXPECT_NEAR(fp8 - 5, (bf16 - 5) * 790.0 / 1380.0, 1e-9);
  // Without a gemm.fp8 object: twice peak_tflops, estimated.
  auto doc = nlohmann::json::parse(testing::round_calibration_json());
  doc["gemm"].erase("fp8");
  const auto plain = parse_calibration(doc.dump());
  EXPECT_DOUBLE_EQ(plain.gemm.fp8_peak_tflops, 2 * plain.gemm.peak_tflops);
  EXPECT_TRUE(plain.gemm.fp8_estimated);
  doc["gemm"]["fp8"] = {{"peak_tflops", 1234.5}, {"estimated", false}};
  const auto measured = parse_calibration(calibration_to_json(parse_calibration(doc.dump())), "again");
  EXPECT_DOUBLE_EQ(measured.gemm.fp8_peak_tflops, 1234.5);
  EXPECT_FALSE(measured.gemm.fp8_estimated);
}

TEST(Calibration, RoundTripsThroughJson) {
  const auto c = load_calibration(shipped_path());
  const auto again = parse_calibration(calibration_to_json(c), "again");
  EXPECT_EQ(calibration_to_json(c), calibration_to_json(again));
}

TEST(Calibration, LinkOverridesWin) {
  auto doc = nlohmann::json::parse(testing::round_calibration_json());
  doc["links"] = {{{"src", 0}, {"dst", 1}, {"backend", "nccl"}, {"bandwidth_gbps", 7.5}}};
  const auto c = parse_calibration(doc.dump());
  EXPECT_DOUBLE_EQ(c.link_bandwidth_gbps(0, 1, plan::Backend::nccl), 7.5);
  EXPECT_DOUBLE_EQ(c.link_bandwidth_gbps(1, 0, plan::Backend::nccl), 25.6);
  EXPECT_DOUBLE_EQ(c.link_bandwidth_gbps(1, 1, plan::Backend::nccl), 1000);  // local copy
}

TEST(Calibration, TheShippedFileModelsTheCallPath) {
  const auto shipped = load_calibration(shipped_path());
  EXPECT_TRUE(shipped.host.modelled);
  EXPECT_GT(shipped.host.fused_call_us, 0);
  EXPECT_GT(shipped.reduce_add.add_gbps, 0);
}

struct BadCase {
  std::string name;
  std::string json_pointer;  // what to change
  nlohmann::json value;      // the new value; null means "remove the key"
  std::string expect;        // must appear in the message
};

class BadCalibration : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadCalibration, NamesTheJsonPath) {
  const auto& bad = GetParam();
  auto doc = nlohmann::json::parse(testing::round_calibration_json());
  const nlohmann::json::json_pointer ptr(bad.json_pointer);
  if (bad.value.is_null())
    doc[ptr.parent_pointer()].erase(ptr.back());
  else
    doc[ptr] = bad.value;
  try {
    parse_calibration(doc.dump(), "bad.json");
    FAIL() << "accepted: " << bad.name;
  } catch (const CalibrationError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("bad.json: "), std::string::npos) << what;
    EXPECT_NE(what.find(bad.expect), std::string::npos) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Sim, BadCalibration,
    ::testing::Values(
        BadCase{"negative bandwidth", "/backends/nccl/bandwidth_gbps", -3,
                "backends.nccl.bandwidth_gbps: expected a number > 0, got -3"},
        BadCase{"missing sms", "/gpu/sms", nullptr, "gpu.sms: expected the required key of a gpu, got nothing"},
        BadCase{"sms not an integer", "/gpu/sms", 1.5, "gpu.sms: expected an integer >= 1"},
        BadCase{"efficiency above 1", "/gemm/mma_efficiency", 1.2, "gemm.mma_efficiency: expected a number in (0, 1]"},
        BadCase{"speed-up instead of slowdown", "/backends/copy-engine/compute_slowdown", 0.5,
                "backends.copy-engine.compute_slowdown: expected a number >= 1"},
        BadCase{"misspelt key", "/overheads/lunch_us", 3,
                "overheads.lunch_us: expected one of the overheads keys (launch_us, sync_us), got an unknown key"},
        BadCase{"removed per-call lump", "/overheads/fused_call_us", nlohmann::json{{"all-gather", 100}},
                "overheads.fused_call_us: removed: a per-collective lump is no longer read; the call path is modelled "
                "by `host`"},
        BadCase{"missing backend", "/backends/sm-copy", nullptr,
                "backends.sm-copy: expected the required key of a backends, got nothing"},
        BadCase{"future version", "/version", 2, "version: expected version 1"},
        BadCase{"zero lanes", "/backends/nccl/concurrency", 0, "backends.nccl.concurrency: expected an integer >= 1"},
        BadCase{"bad link backend", "/links",
                nlohmann::json::array({{{"src", 0}, {"dst", 1}, {"backend", "pigeon"}, {"bandwidth_gbps", 1}}}),
                "links[0].backend: expected one of copy-engine, sm-copy, nccl"},
        BadCase{"source note not text", "/sources/gpu.sms", 132, "sources[\"gpu.sms\"]: expected a string"},
        BadCase{"fp8 rate not a number", "/gemm/fp8", nlohmann::json{{"peak_tflops", "fast"}, {"estimated", true}},
                "gemm.fp8.peak_tflops: expected a number > 0"},
        BadCase{"fp8 without estimated", "/gemm/fp8", nlohmann::json{{"peak_tflops", 1500}},
                "gemm.fp8.estimated: expected the required key"},
        BadCase{"backend eats every SM", "/backends/nccl/sms", 2, "nothing left for compute"}),
    [](const auto& info) {
      std::string name = info.param.name;
      for (auto& ch : name)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return name;
    });

TEST(Calibration, NotJsonAtAll) {
  EXPECT_THROW(parse_calibration("{ \"version\": ", "broken.json"), CalibrationError);
  EXPECT_THROW(load_calibration("/nonexistent/calib.json"), CalibrationError);
  try {
    parse_calibration("{ \"version\": ", "broken.json");
  } catch (const CalibrationError& e) {
    EXPECT_NE(std::string(e.what()).find("broken.json: JSON syntax at byte"), std::string::npos) << e.what();
  }
}

// The reader is the plans' (common/json_checked.hpp): a repeated key is refused, not resolved
// silently to its last value.
TEST(Calibration, RepeatedKeyIsAnError) {
  std::string text = testing::round_calibration_json();
  const auto at = text.find("\"device\"");
  ASSERT_NE(at, std::string::npos);
  text.insert(at, "\"device\": \"twice\", ");
  try {
    parse_calibration(text, "twice.json");
    FAIL() << "a repeated key was accepted";
  } catch (const CalibrationError& e) {
    EXPECT_NE(std::string(e.what()).find("twice.json: device: expected each key once in an object, got it again"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace syncopate::sim

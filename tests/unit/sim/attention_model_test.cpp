// The sequence-parallel attention model (sim/attention_model.hpp): hand-computed times from the
// shipped calibration's measured rates, the decision at the edges, refused shapes.
#include <gtest/gtest.h>

#include <string>

#include "syncopate/common/error.hpp"
#include "syncopate/sim/attention_model.hpp"
#include "syncopate/sim/calibration.hpp"

namespace syncopate::sim {
namespace {

Calibration h200() { return load_calibration(std::string(SYNCOPATE_SOURCE_DIR) + "/calib/h200.json"); }

AttentionShape bench_row(int world, bool causal) {
  // bench/bench_seq_attention.py's first row: 16 heads, head dim 128, 8192 positions in all.
  AttentionShape s;
  s.world = world;
  s.heads = s.kv_heads = 16;
  s.seq_local = 8192 / world;
  s.head_dim = 128;
  s.causal = causal;
  return s;
}

TEST(AttentionModel, WorldOneIsTheMeasuredAttentionAndStaysSequential) {
  const auto c = h200();
  for (bool causal : {false, true}) {
    const auto p = predict_attention(SeqParallel::ulysses, bench_row(1, causal), c);
    // 4 * 16 * 8192^2 * 128 FLOPs (half causal) at the calibrated SDPA rate: 836 / 500 us measured.
    EXPECT_NEAR(p.compute_us, causal ? 500.0 : 836.0, 5.0);
    EXPECT_DOUBLE_EQ(p.comm_us, 0.0);
    // Syncopate's kernel is ~1.6x slower than SDPA and nothing is hidden at world 1.
    EXPECT_GT(p.fused_us, 1.3 * p.sequential_us);
    EXPECT_EQ(p.decision, "sequential") << p.reason;
    const auto r = predict_attention(SeqParallel::ring, bench_row(1, causal), c);
    EXPECT_NEAR(r.sequential_us, p.sequential_us - 3 * c.launch_overhead_us, 2.0);
    EXPECT_EQ(r.decision, "sequential");
  }
  // At world 1 the ring's fused kernel is the own piece alone: causal does half the FLOPs (at a
  // lower rate and a larger wait overhead, so not half the time).
  const auto ring_full = predict_attention(SeqParallel::ring, bench_row(1, false), c);
  const auto ring_causal = predict_attention(SeqParallel::ring, bench_row(1, true), c);
  EXPECT_LT(ring_causal.fused_us, 0.9 * ring_full.fused_us);
}

TEST(AttentionModel, RingSequentialPaysEachStepsExchangeAndMerge) {
  const auto c = h200();
  auto s = bench_row(4, false);
  const auto p = predict_attention(SeqParallel::ring, s, c);
  // K/V piece: 2 * 16 heads * 128 * 2048 positions * 2 bytes = 16 MiB per hop over NCCL.
  const double piece = 2.0 * 16 * 128 * 2048 * 2;
  const auto& nccl = c.backend(plan::Backend::nccl);
  const double hop =
      piece / (c.link_bandwidth_gbps(0, 1, plan::Backend::nccl) * 1e3) + nccl.latency_us + nccl.signal_latency_us;
  EXPECT_NEAR(p.comm_us, 3 * hop, 1e-6);
  EXPECT_GT(p.sequential_us, p.compute_us + p.comm_us);  // + the merges, nothing overlapped
}

TEST(AttentionModel, AFastEnoughKernelMakesFusedPay) {
  auto c = h200();
  // With the kernel as fast as SDPA and no wait overhead, hiding the exchange must pay at world 8
  // where the exchange is a large share of the call (8 x 1024 positions: attention grows with the
  // square of the sequence, the exchange linearly).
  c.attention.kernel_tflops = c.attention.library_tflops;
  c.attention.kernel_causal_tflops = c.attention.library_causal_tflops;
  c.attention.wait_overhead = c.attention.wait_overhead_causal = 1.0;
  AttentionShape s = bench_row(8, true);
  s.seq_local = 1024;
  for (auto kind : {SeqParallel::ulysses, SeqParallel::ring}) {
    const auto p = predict_attention(kind, s, c);
    EXPECT_LT(p.fused_us, p.sequential_us);
    EXPECT_EQ(p.decision, "fused") << p.reason;
  }
}

TEST(AttentionModel, RefusesShapesTheOpsRefuse) {
  const auto c = h200();
  auto s = bench_row(4, false);
  s.kv_heads = 2;  // Ulysses: 4 ranks cannot share 2 k/v heads
  EXPECT_THROW(predict_attention(SeqParallel::ulysses, s, c), UserError);
  EXPECT_NO_THROW(predict_attention(SeqParallel::ring, s, c));  // the ring keeps every head
  s.kv_heads = 3;                                               // not a divisor of 16
  EXPECT_THROW(predict_attention(SeqParallel::ring, s, c), UserError);
  s = bench_row(2, false);
  s.seq_local = 0;
  EXPECT_THROW(predict_attention(SeqParallel::ring, s, c), UserError);
}

TEST(AttentionModel, NeedsTheCalibrationsAttentionSection) {
  auto c = h200();
  c.attention = AttentionModel{};
  try {
    predict_attention(SeqParallel::ring, bench_row(2, false), c);
    FAIL() << "expected CalibrationError";
  } catch (const CalibrationError& e) {
    EXPECT_NE(std::string(e.what()).find("no 'attention' section"), std::string::npos) << e.what();
  }
}

TEST(AttentionModel, CalibrationRoundTripKeepsTheAttentionRates) {
  const auto c = h200();
  ASSERT_TRUE(c.attention.modelled);
  const auto back = parse_calibration(calibration_to_json(c, 2), "round-trip");
  EXPECT_DOUBLE_EQ(back.attention.kernel_causal_tflops, c.attention.kernel_causal_tflops);
  EXPECT_DOUBLE_EQ(back.attention.wait_overhead_causal, c.attention.wait_overhead_causal);
  EXPECT_EQ(back.attention.estimated, c.attention.estimated);
  // A misspelt key is named.
  auto text = calibration_to_json(c, 2);
  text.replace(text.find("\"merge_gbps\""), 12, "\"merge_gbs\"");
  EXPECT_THROW(parse_calibration(text, "bad"), CalibrationError);
}

}  // namespace
}  // namespace syncopate::sim

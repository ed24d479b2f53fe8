// The one table of SMs a fused GEMM leaves free per backend (sim/reserved_sms.hpp), and the
// shipped calibration kept consistent with it.
#include <string>

#include <gtest/gtest.h>

#include "syncopate/sim/calibration.hpp"
#include "syncopate/sim/reserved_sms.hpp"

namespace syncopate::sim {
namespace {

constexpr plan::Backend kBackends[] = {plan::Backend::copy_engine, plan::Backend::sm_copy, plan::Backend::nccl};

TEST(ReservedSms, TheTableTheOpsSizeTheirGridsFrom) {
  EXPECT_EQ(reserved_sms(plan::Backend::copy_engine, GemmRole::consumer), 4);
  EXPECT_EQ(reserved_sms(plan::Backend::copy_engine, GemmRole::producer), 12);
  EXPECT_EQ(reserved_sms(plan::Backend::sm_copy, GemmRole::consumer), 20);
  EXPECT_EQ(reserved_sms(plan::Backend::sm_copy, GemmRole::producer), 20);
  EXPECT_EQ(reserved_sms(plan::Backend::nccl, GemmRole::consumer), 24);
  EXPECT_EQ(reserved_sms(plan::Backend::nccl, GemmRole::producer), 24);
  EXPECT_EQ(kSmCopyBlocks, 16);
  EXPECT_EQ(kAddKernelBlocks, 10);
}

TEST(ReservedSms, ProducersKeepRoomForTheirAddKernel) {
  for (auto b : kBackends) {
    EXPECT_GE(reserved_sms(b, GemmRole::producer), reserved_sms(b, GemmRole::consumer));
    EXPECT_GE(reserved_sms(b, GemmRole::producer), kAddKernelBlocks) << plan::to_string(b);
  }
  EXPECT_LT(kSmCopyBlocks, reserved_sms(plan::Backend::sm_copy, GemmRole::consumer)) << "room for the signal kernels";
}

TEST(ReservedSms, TheShippedCalibrationsBackendsFitInsideTheReservation) {
  // backends.<b>.sms is what the backend's own kernels take from compute; a reservation smaller
  // than that would leave them waiting for the GEMM.
  const auto calib = load_calibration(std::string(SYNCOPATE_SOURCE_DIR) + "/calib/h200.json");
  for (auto b : kBackends)
    for (auto role : {GemmRole::consumer, GemmRole::producer})
      EXPECT_LE(calib.backend(b).sms, reserved_sms(b, role)) << plan::to_string(b);
  EXPECT_GT(calib.sms, reserved_sms(plan::Backend::nccl, GemmRole::producer));
}

}  // namespace
}  // namespace syncopate::sim
